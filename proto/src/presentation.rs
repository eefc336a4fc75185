//! How a notification presents itself on the device, beyond its text: alert
//! or silent background update, interruption level, the sound field, and
//! the limits of badge, sound, category and Android channel. The types
//! only: the rules a notification must follow with them are the payload's
//! (`payload/presentation_rules.rs`), so this module needs nothing of it.

use serde::{Deserialize, Deserializer, Serialize};

/// Largest badge number: APNs reads it as a signed 32-bit integer.
pub const MAX_BADGE: u32 = i32::MAX as u32;
/// Longest `sound`, `category` and `android_channel_id`, in bytes.
pub const MAX_NAME_BYTES: usize = 255;
/// `sound`, `category` and `android_channel_id`: printable ASCII holding at
/// least one character that is not a space.
pub const NAME_PATTERN: &str = r"^[\x20-\x7E]*[\x21-\x7E][\x20-\x7E]*$";
/// The sound a notification plays when the sender names none.
pub const DEFAULT_SOUND: &str = "default";

/// What the push is for: an `alert` the reader sees, or a silent
/// `background` content update the app handles without showing anything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PushType {
    #[default]
    Alert,
    Background,
}

impl PushType {
    pub fn is_alert(&self) -> bool {
        *self == PushType::Alert
    }
}

/// How insistently iOS presents an alert (`aps.interruption-level`); on
/// Android it becomes the notification priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InterruptionLevel {
    /// Added to the list quietly, without lighting the screen.
    Passive,
    /// Shown and heard at once (the default when none is named).
    Active,
    /// Breaks through Focus and scheduled summaries.
    TimeSensitive,
}

impl InterruptionLevel {
    /// The value APNs expects.
    pub fn apns_name(&self) -> &'static str {
        match self {
            InterruptionLevel::Passive => "passive",
            InterruptionLevel::Active => "active",
            InterruptionLevel::TimeSensitive => "time-sensitive",
        }
    }

    /// The FCM `android.notification.notification_priority` it maps to.
    pub fn android_priority(&self) -> &'static str {
        match self {
            InterruptionLevel::Passive => "PRIORITY_LOW",
            InterruptionLevel::Active => "PRIORITY_DEFAULT",
            InterruptionLevel::TimeSensitive => "PRIORITY_HIGH",
        }
    }
}

/// Reads `sound` so that absent (the default sound), `null` (silent) and a
/// name are three different things: absent is `None` by `serde(default)`.
pub fn sound_field<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interruption_levels_read_as_apple_writes_them() {
        let level: InterruptionLevel = serde_json::from_str(r#""time-sensitive""#).unwrap();
        assert_eq!(level, InterruptionLevel::TimeSensitive);
        assert_eq!(level.apns_name(), "time-sensitive");
        assert!(serde_json::from_str::<InterruptionLevel>(r#""critical""#).is_err());
    }
}
