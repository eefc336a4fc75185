//! Writing registrations straight into the database, faster than the API
//! for the thousands of devices an end-to-end test wants.

use clarion_proto::{ApnsEnvironment, Platform, shard_of};
use tokio_postgres::Client;

use crate::mocks::WebPushMock;

/// A device to register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub token: String,
    pub platform: Platform,
    pub environment: ApnsEnvironment,
    pub topics: Vec<String>,
    /// A web device's `PushSubscription` JSON (`None` for the apps).
    pub subscription: Option<serde_json::Value>,
}

impl Device {
    pub fn ios(n: u64, topics: &[&str]) -> Self {
        Self {
            token: format!("{:016x}{:048x}", n, n.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            platform: Platform::Ios,
            environment: ApnsEnvironment::Production,
            topics: topics.iter().map(|t| t.to_string()).collect(),
            subscription: None,
        }
    }

    pub fn android(n: u64, topics: &[&str]) -> Self {
        Self {
            token: format!("fcm{n:012}:APA91b{}", "Ab-_9".repeat(24)),
            platform: Platform::Android,
            environment: ApnsEnvironment::Production,
            topics: topics.iter().map(|t| t.to_string()).collect(),
            subscription: None,
        }
    }

    /// Browser `n`, subscribed on the mock push service `push` (which
    /// then knows its keys); its token is the subscription's id.
    pub fn web(push: &WebPushMock, n: u64, topics: &[&str]) -> Self {
        let token = format!("web{n:016}-{:016x}", n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let subscription = push.subscribe(&token).expect("the mock push service subscribes");
        Self {
            token,
            platform: Platform::Web,
            environment: ApnsEnvironment::Production,
            topics: topics.iter().map(|t| t.to_string()).collect(),
            subscription: Some(subscription.json()),
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

/// The platforms `devices` are on, in [`Platform::ALL`] order: what a
/// test loops over when it expects every platform of its audience pushed
/// to (the alternating audiences have no browser).
pub fn platforms_of(devices: &[Device]) -> Vec<Platform> {
    Platform::ALL
        .into_iter()
        .filter(|platform| devices.iter().any(|d| d.platform == *platform))
        .collect()
}

/// `count` devices on `topics`, alternating platforms (half iOS, half Android).
pub fn alternating_devices(count: u64, topics: &[&str]) -> Vec<Device> {
    (0..count).map(|n| Device::alternating(n, topics)).collect()
}

/// Inserts one row per (device, topic), in chunks, and each web device's
/// subscription.
pub async fn seed_devices(client: &Client, devices: &[Device]) -> Result<(), tokio_postgres::Error> {
    const CHUNK: usize = 5_000;
    let web: Vec<&Device> = devices.iter().filter(|d| d.subscription.is_some()).collect();
    for chunk in web.chunks(CHUNK) {
        let tokens: Vec<&str> = chunk.iter().map(|d| d.token.as_str()).collect();
        let subscriptions: Vec<&serde_json::Value> =
            chunk.iter().filter_map(|d| d.subscription.as_ref()).collect();
        client
            .execute(
                "INSERT INTO web_subscriptions (app, token, subscription)
                 SELECT 'default', * FROM unnest($1::text[], $2::jsonb[])",
                &[&tokens, &subscriptions],
            )
            .await?;
    }
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
