//! Names of every exchange, queue, routing key and header Clarion uses on
//! RabbitMQ.
//!
//! All names hang off a namespace (default `clarion`), so two Clarion
//! installations — or two test runs — can share one broker without reading
//! each other's messages.

use crate::platform::Platform;

/// Namespace of a default installation.
pub const DEFAULT_NAMESPACE: &str = "clarion";

/// How many times a work queue hands out one message before giving up on it
/// and dead-lettering it (RabbitMQ's `x-delivery-limit`, counted by the
/// broker across nacks and consumer crashes alike). Part of each queue's
/// declaration, so every service must use the same value: a constant.
pub const DELIVERY_LIMIT: u32 = 5;

/// How long the control log keeps a control message (its `x-max-age`):
/// longer than any notification can still be pushed (the longest TTL, 28
/// days, after which a batch is expired, not pushed), so a cancellation
/// outlives every batch it cancels. Part of the log's declaration: a
/// constant.
pub const CONTROL_LOG_MAX_AGE: &str = "30D";

/// Values of the [`headers::MESSAGE_TYPE`] header.
pub mod message_types {
    pub const SHARD_JOB: &str = "shard_job";
    pub const TOKEN_BATCH: &str = "token_batch";
    pub const JOB_REPORT: &str = "job_report";
    pub const DELIVERY_REPORT: &str = "delivery_report";
    pub const TOKEN_CLEANUP: &str = "token_cleanup";
    pub const CONTROL: &str = "control";
    /// [`crate::live_activity::ChannelCommand`], coordinator → iOS dispatcher.
    pub const CHANNEL_COMMAND: &str = "channel_command";
    /// [`crate::live_activity::ChannelReport`], iOS dispatcher → coordinator.
    pub const CHANNEL_REPORT: &str = "channel_report";
}

/// Routing keys on the reports exchange.
pub mod routing_keys {
    /// [`crate::JobReport`]s, harvester → coordinator.
    pub const JOB_REPORT: &str = "job";
    /// [`crate::DeliveryReport`]s, dispatcher → coordinator.
    pub const DELIVERY_REPORT: &str = "delivery";
    /// [`crate::TokenCleanup`]s, dispatcher → coordinator.
    pub const TOKEN_CLEANUP: &str = "cleanup";
    /// [`crate::live_activity::ChannelReport`]s, iOS dispatcher →
    /// coordinator, on the reports exchange into the reports queue.
    pub const CHANNEL_REPORT: &str = "channel";
    /// [`crate::live_activity::ChannelCommand`]s on the deliver exchange
    /// into [`crate::Names::channel_command_queue`].
    pub const CHANNEL_COMMAND: &str = "ios.channels";
    /// Shard jobs on the harvest exchange.
    pub const SHARD_JOB: &str = "job";
}

/// The W3C trace-context headers, in the order they are read.
pub const TRACE_HEADERS: [&str; 2] = [headers::TRACEPARENT, headers::TRACESTATE];

/// AMQP header names.
pub mod headers {
    /// W3C trace context, propagated on every message.
    pub const TRACEPARENT: &str = "traceparent";
    pub const TRACESTATE: &str = "tracestate";
    /// The notification a message belongs to (for tracing and dead-letter triage).
    pub const NOTIFICATION_ID: &str = "x-clarion-notification-id";
    /// The message type (`shard_job`, `token_batch`, `job_report`, …).
    pub const MESSAGE_TYPE: &str = "x-clarion-type";
    /// Set by RabbitMQ on quorum queues: how many times a message was delivered before.
    pub const DELIVERY_COUNT: &str = "x-delivery-count";
}

/// Exchange and queue names of one namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    namespace: String,
}

impl Default for Names {
    fn default() -> Self {
        Self::new(DEFAULT_NAMESPACE)
    }
}

impl Names {
    pub fn new(namespace: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn name(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.namespace)
    }

    /// Direct exchange the coordinator publishes shard jobs to.
    pub fn harvest_exchange(&self) -> String {
        self.name("harvest")
    }

    /// Quorum queue the harvesters consume shard jobs from.
    pub fn harvest_queue(&self) -> String {
        self.name("harvest.jobs")
    }

    /// Direct exchange for token batches, routed by platform name.
    pub fn deliver_exchange(&self) -> String {
        self.name("deliver")
    }

    /// Quorum queue a platform's dispatchers consume.
    pub fn deliver_queue(&self, platform: Platform) -> String {
        self.name(&format!("deliver.{platform}"))
    }

    /// Quorum queue the iOS dispatchers read Live Activity channel commands
    /// from (create a channel, broadcast, delete a channel): apart from the
    /// token batches, so an update never waits behind a send's backlog.
    pub fn channel_command_queue(&self) -> String {
        self.name("deliver.ios.channels")
    }

    /// Direct exchange for job reports, delivery reports and cleanups.
    pub fn reports_exchange(&self) -> String {
        self.name("reports")
    }

    /// Quorum queue the coordinator reads job and delivery reports from.
    pub fn reports_queue(&self) -> String {
        self.name("reports")
    }

    /// Quorum queue the coordinator reads token cleanups from.
    pub fn cleanup_queue(&self) -> String {
        self.name("cleanup")
    }

    /// Fanout exchange for control messages (cancellations) to every process.
    pub fn control_exchange(&self) -> String {
        self.name("control")
    }

    /// The control log: a stream queue fed by the control exchange, which
    /// keeps every control message for [`CONTROL_LOG_MAX_AGE`]; every
    /// harvester and dispatcher reads it from the beginning when it starts.
    pub fn control_log(&self) -> String {
        self.name("control.log")
    }

    /// Direct exchange that receives messages given up by any queue; routed by
    /// the name of the queue they died in.
    pub fn dead_letter_exchange(&self) -> String {
        self.name("dead-letter")
    }

    /// Where messages given up by `queue` are kept for inspection.
    pub fn dead_letter_queue(&self, queue: &str) -> String {
        format!("{queue}.dead")
    }

    /// Copies of dead-lettered shard jobs and token batches, read by the
    /// coordinator so a notification's status says what was given up.
    pub fn dead_letter_watch_queue(&self) -> String {
        self.name("dead-letter.watch")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_hang_off_the_namespace() {
        let names = Names::default();
        assert_eq!(names.harvest_queue(), "clarion.harvest.jobs");
        assert_eq!(names.deliver_queue(Platform::Ios), "clarion.deliver.ios");
        let test = Names::new("t42");
        assert_eq!(test.deliver_queue(Platform::Android), "t42.deliver.android");
        assert_eq!(
            test.dead_letter_queue(&test.harvest_queue()),
            "t42.harvest.jobs.dead"
        );
    }
}
