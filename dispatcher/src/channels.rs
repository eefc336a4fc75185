//! The channels this dispatcher knows: their settings groups on the
//! command line, and the check of every app's channel settings in the apps
//! file. With the arm of `start` that runs a channel, this is the only
//! place outside a channel's folder that names it.

use clap::Args;
use clarion_runtime::apps::{AppCredentials, channel_name};

use crate::apns::{ApnsChannel, ApnsSettings};
use crate::channel::PushChannel;
use crate::fcm::{FcmChannel, FcmSettings};
use crate::webpush::{WebPushChannel, WebPushSettings};

/// Every channel's settings (`--platform` picks the one used).
#[derive(Debug, Clone, Args)]
pub struct ChannelSettings {
    #[command(flatten)]
    pub apns: ApnsSettings,

    #[command(flatten)]
    pub fcm: FcmSettings,

    #[command(flatten)]
    pub webpush: WebPushSettings,
}

/// Checks each of `app`'s channel tables with its channel's rules, so a
/// dispatcher refuses (at start) or ignores (on a change) an apps file
/// with an app any channel cannot use, whichever platform it serves.
pub fn check_app(app: &AppCredentials) -> Result<(), String> {
    check::<ApnsChannel>(app)?;
    check::<FcmChannel>(app)?;
    check::<WebPushChannel>(app)
}

fn check<C: PushChannel>(app: &AppCredentials) -> Result<(), String> {
    match app.channel(channel_name(C::PLATFORM)) {
        Some(table) => C::check_app(table).map_err(|err| err.to_string()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use clarion_runtime::apps::parse_checked;

    use super::check_app;

    #[test]
    fn the_apps_file_is_checked_by_each_channel_in_either_form() {
        let good = "[apps.a]\napns_topic = \"t\"\napns_key_file = \"/k.p8\"\napns_key_id = \"K\"\n\
                    apns_team_id = \"T\"\n[apps.b.fcm]\ncredentials_file = \"/sa.json\"\n";
        assert_eq!(parse_checked(good, Some(check_app)).unwrap().len(), 2);
        for (text, reason) in [
            (
                "[apps.a]\napns_topic = \"t\"",
                "app `a`: apns: topic, key_file, key_id and team_id",
            ),
            ("[apps.a.apns]\ntopic = \"t\"", "go together"),
            ("[apps.a]\napns_endpoint = \"https://x\"", "go together"),
            (
                "[apps.a]\nfcm_credentials = \"/x\"",
                "app `a`: fcm: unknown field `credentials`",
            ),
            (
                "[apps.a.fcm]\nproject_id = \"p\"",
                "missing field `credentials_file`",
            ),
        ] {
            let err = parse_checked(text, Some(check_app)).unwrap_err();
            assert!(err.contains(reason), "{text}: {err}");
        }
    }
}
