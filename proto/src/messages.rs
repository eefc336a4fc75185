//! The messages that cross RabbitMQ. Each carries a [`WireVersion`] so a
//! consumer refuses (and dead-letters) a message from a newer, incompatible
//! producer instead of misreading it.

use std::borrow::Cow;
use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::payload::Notification;
use crate::per_platform::PerPlatform;
use crate::platform::{ApnsEnvironment, Platform};
use crate::shard::ShardRange;

/// The wire format version this build writes.
///
/// 2: a harvested job's device counts are keyed by any platform of
/// [`Platform::ALL`] (1 had `ios` and `android` only, and a reader of 1
/// would drop a count on another platform: it must refuse 2 instead).
pub const WIRE_VERSION: u16 = 2;

/// The oldest wire version this build still reads: every message of
/// version 1 reads as the same message of version 2.
pub const OLDEST_READABLE_WIRE_VERSION: u16 = 1;

/// The `v` field of every message; deserializes only from
/// [`OLDEST_READABLE_WIRE_VERSION`] to [`WIRE_VERSION`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u16", into = "u16")]
pub struct WireVersion(u16);

impl WireVersion {
    pub const CURRENT: WireVersion = WireVersion(WIRE_VERSION);
}

impl Default for WireVersion {
    fn default() -> Self {
        Self::CURRENT
    }
}

impl TryFrom<u16> for WireVersion {
    type Error = String;

    fn try_from(v: u16) -> Result<Self, Self::Error> {
        if (OLDEST_READABLE_WIRE_VERSION..=WIRE_VERSION).contains(&v) {
            Ok(WireVersion(v))
        } else {
            Err(format!(
                "wire version {v} is not supported by this build (it speaks \
                 {OLDEST_READABLE_WIRE_VERSION} to {WIRE_VERSION})"
            ))
        }
    }
}

impl From<WireVersion> for u16 {
    fn from(v: WireVersion) -> Self {
        v.0
    }
}

/// Coordinator → harvester: harvest one contiguous shard range of one
/// notification's audience (all of its topics).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardJob {
    pub v: WireVersion,
    pub notification_id: Uuid,
    /// Position of this job in the plan, `0..jobs_planned`.
    pub job_index: u32,
    pub jobs_planned: u32,
    pub shards: ShardRange,
    /// When the send request arrived; timings and TTL count from here.
    pub sent_at: DateTime<Utc>,
    pub notification: Notification,
    /// The primary's WAL position (`pg_current_wal_lsn()`) when the job was
    /// released, after the send was committed: a harvester reading from a
    /// replica first waits until the replica has replayed it, so every
    /// registration committed before the send is seen. Absent from older
    /// coordinators (the harvest then reads the primary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_lsn: Option<String>,
}

/// Deterministic identity of a token batch: the same job cut the same way
/// yields the same ids, so a redelivered batch is recognised downstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BatchId {
    pub notification_id: Uuid,
    pub job_index: u32,
    /// Position of the batch within its job (across platforms).
    pub seq: u32,
}

impl fmt::Display for BatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.notification_id, self.job_index, self.seq)
    }
}

/// Harvester → dispatcher: tokens of one platform and APNs environment, with
/// the notification inline so dispatchers never touch the database.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenBatch {
    pub v: WireVersion,
    pub batch_id: BatchId,
    pub platform: Platform,
    /// Meaningful for iOS only; Android batches carry `production`.
    #[serde(default)]
    pub environment: ApnsEnvironment,
    pub sent_at: DateTime<Utc>,
    pub notification: Notification,
    /// The key of `notification.localizations` every device of the batch
    /// gets; absent for the default text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locale: Option<String>,
    pub tokens: Vec<String>,
    /// Web batches only: each token's push subscription, in the order of
    /// `tokens` (the endpoint and keys a web push needs, so dispatchers
    /// never touch the database); empty for every other platform.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subscriptions: Vec<crate::web_push::WebSubscription>,
}

/// A notification as one batch's devices get it, with the id every push
/// carries (see [`crate::payload::NOTIFICATION_ID_KEY`]).
#[derive(Clone, Debug, PartialEq)]
pub struct PushMessage<'a> {
    pub notification_id: Uuid,
    pub notification: Cow<'a, Notification>,
}

impl<'a> PushMessage<'a> {
    pub fn new(notification_id: Uuid, notification: &'a Notification) -> Self {
        Self {
            notification_id,
            notification: Cow::Borrowed(notification),
        }
    }

    /// The custom keys of every push of this message, its id among them.
    pub fn custom_keys(&self) -> serde_json::Map<String, serde_json::Value> {
        self.notification.custom_keys(self.notification_id)
    }
}

impl TokenBatch {
    /// The notification as this batch's devices get it: its text (the
    /// default, or the localization the batch was cut for), nothing of the
    /// other localizations, and its id.
    pub fn message(&self) -> PushMessage<'_> {
        let notification = if self.notification.localizations.is_empty() {
            Cow::Borrowed(&self.notification)
        } else {
            Cow::Owned(self.notification.localized(self.locale.as_deref()))
        };
        PushMessage {
            notification_id: self.batch_id.notification_id,
            notification,
        }
    }

    /// A hash of the batch's tokens, in order: two batches with the same id
    /// hold the same devices only when their digests match too (a job
    /// re-cut after registrations changed yields shifted batches under the
    /// same ids).
    pub fn tokens_digest(&self) -> u64 {
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        for token in &self.tokens {
            hasher.update(token.as_bytes());
            hasher.update(b"\n");
        }
        hasher.digest()
    }
}

/// Harvester → coordinator: what one shard job produced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobReport {
    pub v: WireVersion,
    pub notification_id: Uuid,
    pub job_index: u32,
    pub outcome: JobOutcome,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobOutcome {
    /// Every batch of the job was confirmed by the broker: how many devices
    /// of each platform it harvested (beside `batches`, keyed by platform
    /// name: `{"kind": "harvested", "ios": 3, "android": 4, "batches": 1}`,
    /// as in version 1; a platform this build does not know is refused).
    /// Only the platforms with devices are written, so a coordinator that
    /// does not know a newer platform reads a job without its devices.
    Harvested {
        #[serde(flatten, serialize_with = "platforms_with_devices")]
        devices: PerPlatform<u64>,
        batches: u32,
    },
    /// The job was given up (delivery limit reached or unreadable).
    Failed { reason: String },
}

/// The counts of the platforms that have devices (a missing one reads as 0).
fn platforms_with_devices<S: serde::Serializer>(
    devices: &PerPlatform<u64>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = serializer.serialize_map(None)?;
    for (platform, count) in devices.iter().filter(|(_, count)| **count > 0) {
        map.serialize_entry(platform.as_str(), count)?;
    }
    map.end()
}

/// Dispatcher → coordinator: what happened to one token batch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryCounts {
    /// Accepted by Apple / Google.
    pub sent: u32,
    /// Given up after retries (provider errors, connection failures).
    pub failed: u32,
    /// Refused as malformed or foreign (`BadDeviceToken`, `INVALID_ARGUMENT`, …).
    pub invalid: u32,
    /// Reported gone by the provider (APNs 410, FCM `UNREGISTERED`).
    pub unregistered: u32,
    /// Not sent because the notification's TTL had passed.
    pub expired: u32,
    /// Not sent because the notification is a dry run.
    #[serde(default)]
    pub dry_run: u32,
    /// Not sent because the notification was cancelled.
    #[serde(default)]
    pub cancelled: u32,
    /// Not sent because the dispatcher's breaker held the segment back
    /// (its first pushes were all answered gone, invalid or misconfigured).
    #[serde(default)]
    pub held_back: u32,
}

impl DeliveryCounts {
    /// Every token of the batch is accounted for exactly once.
    pub fn total(&self) -> u64 {
        [
            self.sent,
            self.failed,
            self.invalid,
            self.unregistered,
            self.expired,
            self.dry_run,
            self.cancelled,
            self.held_back,
        ]
        .iter()
        .map(|n| u64::from(*n))
        .sum()
    }
}

/// Width of the buckets of [`DeliveryReport::accepts`], in milliseconds.
pub const ACCEPT_BUCKET_MS: u32 = 10;

/// How many pushes of a batch were accepted in one time bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptBucket {
    /// Start of the bucket, in ms after the notification's `sent_at`
    /// (a multiple of [`ACCEPT_BUCKET_MS`]).
    pub after_ms: u32,
    pub count: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryReport {
    pub v: WireVersion,
    pub batch_id: BatchId,
    pub platform: Platform,
    /// The APNs environment of the batch (`production` for Android): with
    /// the platform, the safety valve's segment.
    #[serde(default)]
    pub environment: ApnsEnvironment,
    pub counts: DeliveryCounts,
    pub first_accept_at: Option<DateTime<Utc>>,
    pub last_accept_at: Option<DateTime<Utc>>,
    /// When the accepted pushes were accepted, bucketed (for t50 / t90 / t99).
    #[serde(default)]
    pub accepts: Vec<AcceptBucket>,
    /// Why none of the batch's tokens was pushed, when the dispatcher
    /// refused the whole batch (its pushes are counted failed): the
    /// coordinator fails the notification with [`DeliveryReport::refusal`].
    /// Absent from every other report (and from an older dispatcher's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<BatchRefusal>,
}

impl DeliveryReport {
    /// The notification's failure reason when the batch was refused: the
    /// refusal's code first, then the app and the platform.
    pub fn refusal(&self) -> Option<String> {
        let platform = self.platform;
        self.refused.as_ref().map(|refused| match refused {
            BatchRefusal::AppNotConfigured { app } => format!(
                "{}: app `{app}` has no {platform} credentials on the {platform} dispatchers",
                refused.code()
            ),
            BatchRefusal::AppCredentialsUnusable { app, error } => format!(
                "{}: the {platform} credentials of app `{app}` cannot be used: {error}",
                refused.code()
            ),
        })
    }
}

/// Why a dispatcher pushed none of a batch's tokens and never will: it
/// cannot serve the batch's app on its platform. Retrying cannot help, so
/// the batch is reported at once and its notification fails.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum BatchRefusal {
    /// Neither the `default` app's settings nor the apps file give this
    /// platform's credentials for the app.
    AppNotConfigured { app: String },
    /// The app has this platform's credentials, but they cannot be used
    /// (an unreadable key file, a service account that does not parse).
    AppCredentialsUnusable { app: String, error: String },
}

impl BatchRefusal {
    /// The refusal's fixed, low-cardinality code (a metric label).
    pub fn code(&self) -> &'static str {
        match self {
            BatchRefusal::AppNotConfigured { .. } => "app_not_configured",
            BatchRefusal::AppCredentialsUnusable { .. } => "app_credentials_unusable",
        }
    }
}

/// Coordinator → every harvester and dispatcher: operator decisions that
/// must reach all processes promptly, and every process started later. The
/// control exchange feeds a retained log (a stream queue) that each process
/// reads from its beginning.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Control {
    pub v: WireVersion,
    pub command: ControlCommand,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ControlCommand {
    /// Stop harvesting and sending this notification.
    Cancel { notification_id: Uuid },
    /// A process's own mark on the control log: when it reads its mark back,
    /// it has read every control message logged before it.
    Mark { listener: Uuid },
}

/// Why tokens are handed to cleanup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CleanupReason {
    /// The provider says the app is gone from the device.
    Unregistered,
    /// The provider refused the token as malformed or foreign.
    Invalid,
}

/// Dispatcher → coordinator: registrations to delete.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCleanup {
    pub v: WireVersion,
    pub notification_id: Uuid,
    pub platform: Platform,
    /// The APNs environment of the batch (`production` for Android): with
    /// the platform, the safety valve's segment.
    #[serde(default)]
    pub environment: ApnsEnvironment,
    pub reason: CleanupReason,
    pub tokens: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode, encode};
    use crate::payload::tests::sample;
    use proptest::prelude::*;

    fn batch_id() -> BatchId {
        BatchId {
            notification_id: Uuid::from_u128(7),
            job_index: 3,
            seq: 12,
        }
    }

    #[test]
    fn a_newer_wire_version_is_refused_with_a_clear_message() {
        let mut value = serde_json::to_value(JobReport {
            v: WireVersion::CURRENT,
            notification_id: Uuid::nil(),
            job_index: 0,
            outcome: JobOutcome::Failed { reason: "x".into() },
        })
        .unwrap();
        value["v"] = serde_json::json!(WIRE_VERSION + 1);
        let err = decode::<JobReport>(&serde_json::to_vec(&value).unwrap()).unwrap_err();
        assert!(err.to_string().contains("not supported"), "{err}");
    }

    #[test]
    fn reports_from_before_the_new_counters_still_read() {
        let old = r#"{"v":1,"batch_id":{"notification_id":"00000000-0000-0000-0000-000000000007","job_index":3,"seq":12},
                      "platform":"ios","counts":{"sent":5,"failed":0,"invalid":1,"unregistered":0,"expired":0},
                      "first_accept_at":null,"last_accept_at":null}"#;
        let report = decode::<DeliveryReport>(old.as_bytes()).unwrap();
        assert_eq!(report.counts.total(), 6);
        assert!(report.accepts.is_empty());
        assert_eq!(report.refused, None);
        assert_eq!(report.refusal(), None);
        let control = Control {
            v: WireVersion::CURRENT,
            command: ControlCommand::Cancel {
                notification_id: Uuid::nil(),
            },
        };
        assert_eq!(decode::<Control>(&encode(&control).unwrap()).unwrap(), control);
    }

    /// A job report as a version-1 harvester wrote it reads as the same
    /// counts; the version this build writes is 2.
    #[test]
    fn a_version_1_job_report_reads_with_the_same_counts() {
        let old = r#"{"v":1,"notification_id":"00000000-0000-0000-0000-000000000007","job_index":4,
                      "outcome":{"kind":"harvested","ios":3,"android":40,"batches":2}}"#;
        let report = decode::<JobReport>(old.as_bytes()).unwrap();
        let JobOutcome::Harvested { devices, batches } = report.outcome else {
            panic!("{report:?}");
        };
        assert_eq!(
            (devices[Platform::Ios], devices[Platform::Android], batches),
            (3, 40, 2)
        );
        assert_eq!(devices.total(), 43);
        assert_eq!(u16::from(report.v), 1);

        let written: serde_json::Value = serde_json::from_slice(
            &encode(&JobReport {
                v: WireVersion::CURRENT,
                notification_id: Uuid::nil(),
                job_index: 4,
                outcome: JobOutcome::Harvested { devices, batches },
            })
            .unwrap(),
        )
        .unwrap();
        assert_eq!(written["v"], 2);
        assert_eq!(
            written["outcome"],
            serde_json::json!({"kind": "harvested", "ios": 3, "android": 40, "batches": 2})
        );
    }

    /// A count on a platform this build does not know, or a version older
    /// than it reads, is refused with its name: never read as fewer devices.
    #[test]
    fn an_unknown_platform_or_an_old_version_is_refused_by_name() {
        let web = r#"{"v":2,"notification_id":"00000000-0000-0000-0000-000000000007","job_index":4,
                      "outcome":{"kind":"harvested","ios":3,"windows":5,"batches":2}}"#;
        let err = decode::<JobReport>(web.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("windows"), "{err}");
        let ancient = r#"{"v":0,"notification_id":"00000000-0000-0000-0000-000000000007","job_index":4,
                          "outcome":{"kind":"failed","reason":"x"}}"#;
        let err = decode::<JobReport>(ancient.as_bytes()).unwrap_err();
        assert!(
            err.to_string().contains("wire version 0 is not supported"),
            "{err}"
        );
    }

    #[test]
    fn a_refused_batch_names_the_code_the_app_and_the_platform() {
        let old = r#"{"v":1,"batch_id":{"notification_id":"00000000-0000-0000-0000-000000000007","job_index":3,"seq":12},
                      "platform":"android","counts":{"sent":0,"failed":2,"invalid":0,"unregistered":0,"expired":0},
                      "first_accept_at":null,"last_accept_at":null}"#;
        let mut report = decode::<DeliveryReport>(old.as_bytes()).unwrap();
        report.refused = Some(BatchRefusal::AppNotConfigured {
            app: "weather".into(),
        });
        let body = encode(&report).unwrap();
        assert!(
            String::from_utf8_lossy(&body)
                .contains(r#""refused":{"code":"app_not_configured","app":"weather"}"#)
        );
        assert_eq!(decode::<DeliveryReport>(&body).unwrap(), report);
        let reason = report.refusal().unwrap();
        assert!(reason.starts_with("app_not_configured: "), "{reason}");
        assert!(
            reason.contains("`weather`") && reason.contains("android"),
            "{reason}"
        );
    }

    #[test]
    fn a_batch_message_carries_the_notification_id_and_its_text() {
        let mut notification = sample();
        notification.localizations.insert(
            "fr".into(),
            crate::LocalizedText {
                title: None,
                body: "En France".into(),
            },
        );
        let mut batch = TokenBatch {
            v: WireVersion::CURRENT,
            batch_id: batch_id(),
            platform: Platform::Ios,
            environment: ApnsEnvironment::Production,
            sent_at: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            notification,
            locale: Some("fr".into()),
            tokens: Vec::new(),
            subscriptions: Vec::new(),
        };
        let message = batch.message();
        assert_eq!(message.notification_id, Uuid::from_u128(7));
        assert_eq!(message.notification.body, "En France");
        assert!(message.notification.localizations.is_empty());
        assert_eq!(
            message.custom_keys()[crate::payload::NOTIFICATION_ID_KEY],
            "00000000-0000-0000-0000-000000000007"
        );
        batch.locale = None;
        assert_eq!(batch.message().notification.body, sample().body);
    }

    #[test]
    fn batch_ids_print_as_path() {
        assert_eq!(
            batch_id().to_string(),
            "00000000-0000-0000-0000-000000000007/3/12"
        );
    }

    proptest! {
        #[test]
        fn shard_jobs_round_trip(job_index in 0u32..500, start in 0u16..1000, len in 1u16..24, secs in 0i64..4_000_000_000) {
            let job = ShardJob {
                v: WireVersion::CURRENT,
                notification_id: Uuid::from_u128(u128::from(job_index) << 64 | 5),
                job_index,
                jobs_planned: job_index + 1,
                shards: ShardRange::new(start, start + len).unwrap(),
                sent_at: DateTime::from_timestamp(secs, 0).unwrap(),
                notification: sample(),
                primary_lsn: (job_index % 2 == 0).then(|| format!("0/{job_index:X}")),
            };
            prop_assert_eq!(decode::<ShardJob>(&encode(&job).unwrap()).unwrap(), job);
        }

        #[test]
        fn token_batches_round_trip(tokens in proptest::collection::vec("[0-9a-f]{64}", 0..50), ios in any::<bool>()) {
            let batch = TokenBatch {
                v: WireVersion::CURRENT,
                batch_id: batch_id(),
                platform: if ios { Platform::Ios } else { Platform::Android },
                environment: ApnsEnvironment::Sandbox,
                sent_at: DateTime::from_timestamp(1_700_000_000, 123_000_000).unwrap(),
                notification: sample(),
                locale: ios.then(|| "fr-ca".to_owned()),
                tokens,
                subscriptions: Vec::new(),
            };
            prop_assert_eq!(decode::<TokenBatch>(&encode(&batch).unwrap()).unwrap(), batch);
        }

        #[test]
        fn reports_and_cleanups_round_trip(sent in any::<u32>(), invalid in any::<u32>(), harvested in any::<bool>()) {
            let report = DeliveryReport {
                v: WireVersion::CURRENT,
                batch_id: batch_id(),
                platform: Platform::Android,
                environment: ApnsEnvironment::Production,
                counts: DeliveryCounts { sent, invalid, ..DeliveryCounts::default() },
                first_accept_at: DateTime::from_timestamp(1_700_000_000, 0),
                last_accept_at: None,
                refused: None,
                accepts: vec![AcceptBucket { after_ms: 120, count: sent }],
            };
            prop_assert_eq!(decode::<DeliveryReport>(&encode(&report).unwrap()).unwrap(), report);

            let outcome = if harvested {
                let devices = PerPlatform::from_fn(|p| u64::from(if p.index() % 2 == 0 { sent } else { invalid }));
                JobOutcome::Harvested { devices, batches: 3 }
            } else {
                JobOutcome::Failed { reason: format!("attempt {sent}") }
            };
            let job = JobReport { v: WireVersion::CURRENT, notification_id: Uuid::nil(), job_index: sent, outcome };
            prop_assert_eq!(decode::<JobReport>(&encode(&job).unwrap()).unwrap(), job);

            let cleanup = TokenCleanup {
                v: WireVersion::CURRENT,
                notification_id: Uuid::nil(),
                platform: Platform::Ios,
                environment: ApnsEnvironment::Sandbox,
                reason: if harvested { CleanupReason::Unregistered } else { CleanupReason::Invalid },
                tokens: vec![format!("{sent:064x}")],
            };
            prop_assert_eq!(decode::<TokenCleanup>(&encode(&cleanup).unwrap()).unwrap(), cleanup);
        }
    }
}
