//! Writing registrations straight into the database, faster than the API
//! for the thousands of devices an end-to-end test wants.

use clarion_proto::{ApnsEnvironment, Platform, shard_of};
use tokio_postgres::Client;

/// A device to register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub token: String,
    pub platform: Platform,
    pub environment: ApnsEnvironment,
    pub topics: Vec<String>,
}

impl Device {
    pub fn ios(n: u64, topics: &[&str]) -> Self {
        Self {
            token: format!("{:016x}{:048x}", n, n.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            platform: Platform::Ios,
            environment: ApnsEnvironment::Production,
            topics: topics.iter().map(|t| t.to_string()).collect(),
        }
    }

    pub fn android(n: u64, topics: &[&str]) -> Self {
        Self {
            token: format!("fcm{n:012}:APA91b{}", "Ab-_9".repeat(24)),
            platform: Platform::Android,
            environment: ApnsEnvironment::Production,
            topics: topics.iter().map(|t| t.to_string()).collect(),
        }
    }

    /// Device `n` of an audience that alternates platforms: iOS for even
    /// `n`, Android for odd.
    pub fn alternating(n: u64, topics: &[&str]) -> Self {
        if n.is_multiple_of(2) {
            Self::ios(n, topics)
        } else {
            Self::android(n, topics)
        }
    }

    pub fn sandbox(mut self) -> Self {
        self.environment = ApnsEnvironment::Sandbox;
        self
    }
}

/// `count` devices on `topics`, alternating platforms (half iOS, half Android).
pub fn alternating_devices(count: u64, topics: &[&str]) -> Vec<Device> {
    (0..count).map(|n| Device::alternating(n, topics)).collect()
}

/// Inserts one row per (device, topic), in chunks.
pub async fn seed_devices(client: &Client, devices: &[Device]) -> Result<(), tokio_postgres::Error> {
    const CHUNK: usize = 5_000;
    let rows: Vec<(&Device, &String)> = devices
        .iter()
        .flat_map(|device| device.topics.iter().map(move |topic| (device, topic)))
        .collect();
    for chunk in rows.chunks(CHUNK) {
        let topics: Vec<&str> = chunk.iter().map(|(_, topic)| topic.as_str()).collect();
        let shards: Vec<i16> = chunk.iter().map(|(d, _)| shard_of(&d.token) as i16).collect();
        let tokens: Vec<&str> = chunk.iter().map(|(d, _)| d.token.as_str()).collect();
        let platforms: Vec<&str> = chunk.iter().map(|(d, _)| d.platform.as_str()).collect();
        let environments: Vec<&str> = chunk.iter().map(|(d, _)| d.environment.as_str()).collect();
        client
            .execute(
                "INSERT INTO registrations (topic, shard, token, platform, apns_environment)
                 SELECT * FROM unnest($1::text[], $2::smallint[], $3::text[], $4::text[], $5::text[])",
                &[&topics, &shards, &tokens, &platforms, &environments],
            )
            .await?;
    }
    Ok(())
}
