//! A synthetic but realistic audience: deterministic device tokens, a
//! platform mix, overlapping topics and a share of dead tokens (apps
//! uninstalled since they registered), so the demo and the benchmark build
//! the same audience every time they run.

use clarion_proto::Platform;
use sha2::{Digest, Sha256};

/// The topics of the synthetic audience, each with the share of devices that
/// follow it (in percent). They overlap: most devices follow `breaking/uk`.
pub const TOPICS: [(&str, u8); 4] = [
    ("breaking/uk", 80),
    ("breaking/us", 35),
    ("sport/football", 25),
    ("weather/london", 10),
];

/// Dead tokens start with this; the mocks are told to answer them as gone
/// (APNs 410, FCM `UNREGISTERED`). It is valid hex, so APNs tokens stay
/// well-formed.
pub const DEAD_PREFIX: &str = "dead";

/// The locales a synthetic audience's devices may carry, lower case as the
/// API stores them (`fr-CA` is kept as `fr-ca`): one with no localization of
/// its own (it reads the default text) and three that have one in
/// [`localizations`], `fr-ca` more specific than `fr`.
pub const LOCALES: [&str; 4] = ["en-gb", "fr", "fr-ca", "de"];

/// A notification's `localizations` for the devices of [`LOCALES`].
pub fn localizations() -> serde_json::Value {
    serde_json::json!({
        "fr": {"title": "Dernière minute", "body": "Benchmark"},
        "fr-CA": {"title": "Nouvelles de dernière heure", "body": "Benchmark"},
        "de": {"title": "Eilmeldung", "body": "Benchmark"},
    })
}

/// Which topics the synthetic devices follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Layout {
    /// The overlapping news topics of [`TOPICS`].
    News,
    /// Every device on `breaking/uk` only.
    Single,
}

/// The shape of a synthetic audience.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AudienceShape {
    /// Share of browsers (web push subscriptions), in percent of the devices.
    pub web_percent: u8,
    /// Share of iPhones among the apps' devices (the rest are Android), in
    /// percent.
    pub ios_percent: u8,
    /// Share of dead tokens, in percent.
    pub dead_percent: u8,
    pub layout: Layout,
    /// How many of [`LOCALES`] the devices carry (0: none, as before locales).
    pub locales: u8,
}

/// One synthetic device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub token: String,
    pub platform: Platform,
    pub locale: Option<&'static str>,
    pub topics: Vec<&'static str>,
}

/// Device number `n` of an audience of `shape`.
pub fn device(n: u64, shape: AudienceShape) -> Device {
    let digest = Sha256::digest(format!("clarion-demo-device-{n}").as_bytes());
    // Its own byte picks the browsers, so an audience without them is the
    // one seeded before web push, device for device.
    let platform = if percent(digest[8]) < shape.web_percent {
        Platform::Web
    } else if percent(digest[0]) < shape.ios_percent {
        Platform::Ios
    } else {
        Platform::Android
    };
    let hex = hex::encode(digest);
    let mut token = match platform {
        Platform::Ios => hex,
        Platform::Android => format!("demo{}:APA91b{}", &hex[..16], hex.repeat(2)),
        // The subscription's id at the mock push service ([`web_token`]).
        Platform::Web => web_token(&hex),
    };
    if percent(digest[6]) < shape.dead_percent {
        token.replace_range(..DEAD_PREFIX.len(), DEAD_PREFIX);
    } else if token.starts_with(DEAD_PREFIX) {
        // A live token must not look dead by chance.
        token.replace_range(..1, "0");
    }
    let topics = match shape.layout {
        Layout::Single => vec![TOPICS[0].0],
        Layout::News => {
            let mut topics: Vec<&'static str> = TOPICS
                .iter()
                .enumerate()
                .filter(|(i, (_, share))| percent(digest[1 + i]) < *share)
                .map(|(_, (topic, _))| *topic)
                .collect();
            if topics.is_empty() {
                topics.push(TOPICS[0].0);
            }
            topics
        }
    };
    let locale = match usize::from(shape.locales).min(LOCALES.len()) {
        0 => None,
        locales => Some(LOCALES[usize::from(digest[7]) % locales]),
    };
    Device {
        token,
        platform,
        locale,
        topics,
    }
}

/// A browser's registration token: the id a site would choose for its
/// subscription (16–128 of `[A-Za-z0-9_-]`), here 44 characters.
fn web_token(hex: &str) -> String {
    format!("demo{}", &hex[..40])
}

/// Maps a uniformly random byte onto 0..100 without bias towards low values.
fn percent(byte: u8) -> u8 {
    (u16::from(byte) * 100 / 256) as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_proto::platform::normalize_token;

    const NEWS: AudienceShape = AudienceShape {
        web_percent: 0,
        ios_percent: 50,
        dead_percent: 3,
        layout: Layout::News,
        locales: 0,
    };

    #[test]
    fn devices_are_valid_deterministic_and_mixed() {
        let devices: Vec<Device> = (0..4000).map(|n| device(n, NEWS)).collect();
        assert_eq!(devices[17], device(17, NEWS));
        for d in &devices {
            assert_eq!(
                normalize_token(d.platform, &d.token).as_deref(),
                Ok(d.token.as_str())
            );
            assert!(!d.topics.is_empty());
        }
        let ios = devices.iter().filter(|d| d.platform == Platform::Ios).count();
        assert!((1800..2200).contains(&ios), "{ios} iPhones of 4000");
        let uk = devices
            .iter()
            .filter(|d| d.topics.contains(&"breaking/uk"))
            .count();
        assert!(uk > 3000, "{uk} follow breaking/uk");
        let dead = devices
            .iter()
            .filter(|d| d.token.starts_with(DEAD_PREFIX))
            .count();
        assert!((60..200).contains(&dead), "{dead} dead of 4000");
        let single = AudienceShape {
            layout: Layout::Single,
            ..NEWS
        };
        assert_eq!(device(17, single).topics, vec!["breaking/uk"]);
        assert!(devices.iter().all(|d| d.locale.is_none()));
        assert!(devices.iter().all(|d| d.platform != Platform::Web));
    }

    #[test]
    fn a_web_share_takes_browsers_from_both_apps_and_leaves_the_rest_as_they_were() {
        let shape = AudienceShape {
            web_percent: 40,
            ..NEWS
        };
        let devices: Vec<Device> = (0..4000).map(|n| device(n, shape)).collect();
        let web: Vec<&Device> = devices.iter().filter(|d| d.platform == Platform::Web).collect();
        assert!(
            (1450..1750).contains(&web.len()),
            "{} browsers of 4000",
            web.len()
        );
        for (n, d) in devices.iter().enumerate() {
            if d.platform == Platform::Web {
                assert_eq!(
                    normalize_token(d.platform, &d.token).as_deref(),
                    Ok(d.token.as_str())
                );
            } else {
                assert_eq!(*d, device(n as u64, NEWS), "device {n} changed");
            }
        }
        let dead = web.iter().filter(|d| d.token.starts_with(DEAD_PREFIX)).count();
        assert!((15..110).contains(&dead), "{dead} dead browsers");
    }

    #[test]
    fn devices_carry_each_of_the_locales_asked_for() {
        let shape = AudienceShape { locales: 4, ..NEWS };
        let mut seen: Vec<&str> = (0..400).filter_map(|n| device(n, shape).locale).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, ["de", "en-gb", "fr", "fr-ca"]);
        let two = AudienceShape { locales: 2, ..NEWS };
        assert!((0..400).all(|n| matches!(device(n, two).locale, Some("en-gb" | "fr"))));
        // Stored as the API would store them, so they match as in production.
        for locale in LOCALES {
            assert_eq!(clarion_proto::normalize_locale(locale).as_deref(), Ok(locale));
        }
    }
}
