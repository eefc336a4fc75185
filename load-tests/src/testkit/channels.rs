//! The test kit acting as the iOS dispatcher's Live Activity side: takes
//! the channel commands the coordinator's relay published on
//! `deliver.ios.channels` and publishes channel reports back to the
//! reports exchange, as a dispatcher would after calling Apple.

use std::time::{Duration, Instant};

use clarion_proto::WireVersion;
use clarion_proto::codec::{decode, encode};
use clarion_proto::live_activity::{ChannelCommand, ChannelOutcome, ChannelReport};
use clarion_proto::names::{message_types, routing_keys};
use lapin::options::{BasicAckOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions};

use super::Cluster;

/// How often the queue is looked at while commands are awaited.
const POLL: Duration = Duration::from_millis(50);

impl Cluster {
    /// Takes channel commands off `deliver.ios.channels` (acking each)
    /// until `count` were taken, then any more already queued; panics when
    /// fewer than `count` come within `timeout`.
    pub async fn take_channel_commands(&self, count: usize, timeout: Duration) -> Vec<ChannelCommand> {
        let channel = self.amqp.create_channel().await.expect("channel");
        let queue = self.names.channel_command_queue();
        let deadline = Instant::now() + timeout;
        let mut commands = Vec::new();
        loop {
            let message = channel
                .basic_get(queue.as_str().into(), BasicGetOptions::default())
                .await
                .expect("get from the channel command queue");
            match message {
                Some(message) => {
                    let delivery = message.delivery;
                    commands.push(decode::<ChannelCommand>(&delivery.data).expect("a channel command"));
                    delivery.ack(BasicAckOptions::default()).await.expect("ack");
                }
                None if commands.len() >= count => break,
                None => {
                    assert!(
                        Instant::now() < deadline,
                        "{} channel commands of {count} within {timeout:?}: {commands:?}",
                        commands.len()
                    );
                    tokio::time::sleep(POLL).await;
                }
            }
        }
        let _ = channel.close(200, "done".into()).await;
        commands
    }

    /// Publishes (confirmed) Apple's answer to `command` as the dispatcher would.
    pub async fn report_channel_outcome(&self, command: &ChannelCommand, outcome: ChannelOutcome) {
        let report = ChannelReport {
            v: WireVersion::CURRENT,
            command_id: command.id,
            activity_id: command.activity_id,
            outcome,
        };
        let channel = self.amqp.create_channel().await.expect("channel");
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm mode");
        let properties =
            clarion_runtime::amqp::message::properties(message_types::CHANNEL_REPORT, command.activity_id);
        channel
            .basic_publish(
                self.names.reports_exchange().as_str().into(),
                routing_keys::CHANNEL_REPORT.into(),
                BasicPublishOptions::default(),
                &encode(&report).expect("encodes"),
                properties,
            )
            .await
            .expect("publish")
            .await
            .expect("confirmed");
        let _ = channel.close(200, "done".into()).await;
    }
}
