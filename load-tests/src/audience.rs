//! A synthetic but realistic audience: deterministic device tokens, a
//! platform mix and overlapping topics, so the demo and the benchmark build
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

/// Which topics the synthetic devices follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Layout {
    /// The overlapping news topics of [`TOPICS`].
    News,
    /// Every device on `breaking/uk` only.
    Single,
}

/// One synthetic device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub token: String,
    pub platform: Platform,
    pub topics: Vec<&'static str>,
}

/// Device number `n` of the audience; `ios_percent` of devices are iPhones.
pub fn device(n: u64, ios_percent: u8, layout: Layout) -> Device {
    let digest = Sha256::digest(format!("clarion-demo-device-{n}").as_bytes());
    let platform = if percent(digest[0]) < ios_percent {
        Platform::Ios
    } else {
        Platform::Android
    };
    let token = match platform {
        Platform::Ios => hex::encode(digest),
        Platform::Android => format!(
            "demo{}:APA91b{}",
            hex::encode(&digest[..8]),
            hex::encode(digest).repeat(2)
        ),
    };
    if layout == Layout::Single {
        return Device {
            token,
            platform,
            topics: vec![TOPICS[0].0],
        };
    }
    let mut topics: Vec<&'static str> = TOPICS
        .iter()
        .enumerate()
        .filter(|(i, (_, share))| percent(digest[1 + i]) < *share)
        .map(|(_, (topic, _))| *topic)
        .collect();
    if topics.is_empty() {
        topics.push(TOPICS[0].0);
    }
    Device {
        token,
        platform,
        topics,
    }
}

/// Maps a uniformly random byte onto 0..100 without bias towards low values.
fn percent(byte: u8) -> u8 {
    (u16::from(byte) * 100 / 256) as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_proto::platform::normalize_token;

    #[test]
    fn devices_are_valid_deterministic_and_mixed() {
        let devices: Vec<Device> = (0..2000).map(|n| device(n, 50, Layout::News)).collect();
        assert_eq!(devices[17], device(17, 50, Layout::News));
        assert_eq!(device(17, 50, Layout::Single).topics, vec!["breaking/uk"]);
        for d in &devices {
            assert_eq!(
                normalize_token(d.platform, &d.token).as_deref(),
                Ok(d.token.as_str())
            );
            assert!(!d.topics.is_empty());
        }
        let ios = devices.iter().filter(|d| d.platform == Platform::Ios).count();
        assert!((900..1100).contains(&ios), "{ios} iPhones of 2000");
        let uk = devices
            .iter()
            .filter(|d| d.topics.contains(&"breaking/uk"))
            .count();
        assert!(uk > 1500, "{uk} follow breaking/uk");
    }
}
