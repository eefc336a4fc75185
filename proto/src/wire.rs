//! What makes a value a Clarion message: its type name (the
//! `x-clarion-type` header), where it is published (exchange and routing
//! key of a namespace), and the notification it belongs to. Publishers take
//! any [`WireMessage`], so no service assembles those by hand.

use serde::Serialize;
use uuid::Uuid;

use crate::live_activity::{ChannelCommand, ChannelReport};
use crate::names::{Names, message_types, routing_keys};
use crate::{Control, ControlCommand, DeliveryReport, JobReport, ShardJob, TokenBatch, TokenCleanup};

pub trait WireMessage: Serialize {
    /// The `x-clarion-type` header value.
    const TYPE: &'static str;

    /// The exchange this message is published to.
    fn exchange(names: &Names) -> String;

    /// Its routing key on that exchange.
    fn routing_key(&self) -> &str;

    /// The notification it belongs to (a header, for tracing and triage).
    fn notification_id(&self) -> Uuid;
}

impl WireMessage for ShardJob {
    const TYPE: &'static str = message_types::SHARD_JOB;

    fn exchange(names: &Names) -> String {
        names.harvest_exchange()
    }

    fn routing_key(&self) -> &str {
        routing_keys::SHARD_JOB
    }

    fn notification_id(&self) -> Uuid {
        self.notification_id
    }
}

impl WireMessage for TokenBatch {
    const TYPE: &'static str = message_types::TOKEN_BATCH;

    fn exchange(names: &Names) -> String {
        names.deliver_exchange()
    }

    /// The platform: each platform's dispatchers have their own queue.
    fn routing_key(&self) -> &str {
        self.platform.as_str()
    }

    fn notification_id(&self) -> Uuid {
        self.batch_id.notification_id
    }
}

impl WireMessage for JobReport {
    const TYPE: &'static str = message_types::JOB_REPORT;

    fn exchange(names: &Names) -> String {
        names.reports_exchange()
    }

    fn routing_key(&self) -> &str {
        routing_keys::JOB_REPORT
    }

    fn notification_id(&self) -> Uuid {
        self.notification_id
    }
}

impl WireMessage for DeliveryReport {
    const TYPE: &'static str = message_types::DELIVERY_REPORT;

    fn exchange(names: &Names) -> String {
        names.reports_exchange()
    }

    fn routing_key(&self) -> &str {
        routing_keys::DELIVERY_REPORT
    }

    fn notification_id(&self) -> Uuid {
        self.batch_id.notification_id
    }
}

impl WireMessage for TokenCleanup {
    const TYPE: &'static str = message_types::TOKEN_CLEANUP;

    fn exchange(names: &Names) -> String {
        names.reports_exchange()
    }

    fn routing_key(&self) -> &str {
        routing_keys::TOKEN_CLEANUP
    }

    fn notification_id(&self) -> Uuid {
        self.notification_id
    }
}

impl WireMessage for Control {
    const TYPE: &'static str = message_types::CONTROL;

    fn exchange(names: &Names) -> String {
        names.control_exchange()
    }

    /// None: the control exchange fans out to every process.
    fn routing_key(&self) -> &str {
        ""
    }

    /// The nil id for a mark, which belongs to no notification.
    fn notification_id(&self) -> Uuid {
        match self.command {
            ControlCommand::Cancel { notification_id } => notification_id,
            ControlCommand::Mark { .. } => Uuid::nil(),
        }
    }
}

/// A Live Activity command: its activity stands for the notification in
/// the headers (the start push is a notification of its own).
impl WireMessage for ChannelCommand {
    const TYPE: &'static str = message_types::CHANNEL_COMMAND;

    fn exchange(names: &Names) -> String {
        names.deliver_exchange()
    }

    /// Into [`Names::channel_command_queue`], beside the iOS token batches.
    fn routing_key(&self) -> &str {
        routing_keys::CHANNEL_COMMAND
    }

    fn notification_id(&self) -> Uuid {
        self.activity_id
    }
}

/// A Live Activity command's outcome, on the reports queue.
impl WireMessage for ChannelReport {
    const TYPE: &'static str = message_types::CHANNEL_REPORT;

    fn exchange(names: &Names) -> String {
        names.reports_exchange()
    }

    fn routing_key(&self) -> &str {
        routing_keys::CHANNEL_REPORT
    }

    fn notification_id(&self) -> Uuid {
        self.activity_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CleanupReason, Platform, WireVersion};

    #[test]
    fn reports_share_an_exchange_and_are_told_apart_by_routing_key() {
        let names = Names::new("t");
        let id = Uuid::from_u128(7);
        let cleanup = TokenCleanup {
            v: WireVersion::CURRENT,
            notification_id: id,
            platform: Platform::Ios,
            environment: crate::ApnsEnvironment::Production,
            reason: CleanupReason::Invalid,
            tokens: vec![],
        };
        assert_eq!(TokenCleanup::exchange(&names), JobReport::exchange(&names));
        assert_eq!(cleanup.routing_key(), routing_keys::TOKEN_CLEANUP);
        assert_eq!(cleanup.notification_id(), id);
        let control = Control {
            v: WireVersion::CURRENT,
            command: ControlCommand::Cancel { notification_id: id },
        };
        assert_eq!(control.notification_id(), id);
        assert_eq!(Control::exchange(&names), names.control_exchange());
    }
}
