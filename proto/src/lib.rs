//! Clarion's wire contract, shared by the coordinator, the harvesters and the
//! dispatchers: the messages that cross RabbitMQ, the names of exchanges,
//! queues and headers, the token → shard hash, and the notification payload
//! with its validation, and the trace context carried in headers. Nothing in
//! this crate performs I/O.

pub mod app;
pub mod codec;
pub mod live_activity;
pub mod locale;
pub mod messages;
pub mod names;
pub mod payload;
pub mod per_platform;
pub mod platform;
pub mod presentation;
pub mod registration_kind;
pub mod shard;
pub mod topic;
pub mod trace_context;
pub mod web_push;
pub mod wire;

pub use app::{DEFAULT_APP, validate_app};
pub use locale::{LocalizedText, best_match, normalize_locale};
pub use messages::{
    ACCEPT_BUCKET_MS, AcceptBucket, BatchId, BatchRefusal, CleanupReason, Control, ControlCommand,
    DeliveryCounts, DeliveryReport, JobOutcome, JobReport, PushMessage, ShardJob, TokenBatch, TokenCleanup,
    WireVersion,
};
pub use names::Names;
pub use payload::{Notification, PayloadError, Priority, WebOptions};
pub use per_platform::PerPlatform;
pub use platform::{ApnsEnvironment, Platform, TokenError};
pub use presentation::{InterruptionLevel, PushType};
pub use registration_kind::{KindError, RegistrationKind, checked_kind};
pub use shard::{SHARD_SPACE, ShardRange, shard_of};
pub use topic::{TopicError, validate_topic};
pub use web_push::{AllowedHosts, SubscriptionError, WebSubscription, WebSubscriptionKeys};
pub use wire::WireMessage;
