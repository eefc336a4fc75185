//! The whole AMQP topology, declared idempotently by every service's broker
//! link on each new connection, before any channel of it is used, so
//! start-up order does not matter.
//!
//! - Work queues (`harvest.jobs`, `deliver.<platform>`,
//!   `deliver.ios.channels`, `reports`, `cleanup`) are durable quorum
//!   queues. After [`DELIVERY_LIMIT`] deliveries a message is dead-lettered,
//!   at-least-once, to the dead-letter exchange with the name of its queue
//!   as routing key.
//! - Each work queue has a `<queue>.dead` queue that keeps what it gave up.
//! - Everything dead-lettered (shard jobs, token batches, reports,
//!   cleanups) is also copied to the watch queue, which the coordinator
//!   reads to mark their notifications.
//! - The control exchange feeds the control log, a stream queue that keeps
//!   every control message for [`CONTROL_LOG_MAX_AGE`], so a cancellation
//!   reaches processes that start (or reconnect) after it was made.
//!
//! Queue arguments are part of a queue's identity: declaring the same queue
//! with other arguments fails. That is why they are constants, not settings.

use clarion_proto::Names;
use clarion_proto::Platform;
use clarion_proto::names::{CONTROL_LOG_MAX_AGE, DELIVERY_LIMIT, routing_keys};
use lapin::options::{
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{Channel, ExchangeKind};

/// One queue and what feeds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSpec {
    pub name: String,
    /// `(exchange, routing key)` pairs.
    pub bindings: Vec<(String, String)>,
    pub kind: QueueKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    /// A quorum queue that dead-letters after the delivery limit.
    Work,
    /// A quorum queue that keeps what it gets (dead letters).
    Keep,
    /// A stream queue that keeps messages for a retention period; read by
    /// every process from an offset, not consumed away.
    Log,
}

/// Every exchange, with its kind.
pub fn exchanges(names: &Names) -> Vec<(String, ExchangeKind)> {
    vec![
        (names.harvest_exchange(), ExchangeKind::Direct),
        (names.deliver_exchange(), ExchangeKind::Direct),
        (names.reports_exchange(), ExchangeKind::Direct),
        (names.dead_letter_exchange(), ExchangeKind::Direct),
        (names.control_exchange(), ExchangeKind::Fanout),
    ]
}

/// Every durable queue, work queues first.
pub fn queues(names: &Names) -> Vec<QueueSpec> {
    let work = |name: String, bindings: Vec<(String, &str)>| QueueSpec {
        name,
        bindings: bindings.into_iter().map(|(e, k)| (e, k.to_owned())).collect(),
        kind: QueueKind::Work,
    };
    let mut work_queues = vec![work(
        names.harvest_queue(),
        vec![(names.harvest_exchange(), routing_keys::SHARD_JOB)],
    )];
    for platform in Platform::ALL {
        work_queues.push(work(
            names.deliver_queue(platform),
            vec![(names.deliver_exchange(), platform.as_str())],
        ));
    }
    work_queues.push(work(
        names.channel_command_queue(),
        vec![(names.deliver_exchange(), routing_keys::CHANNEL_COMMAND)],
    ));
    work_queues.push(work(
        names.reports_queue(),
        vec![
            (names.reports_exchange(), routing_keys::JOB_REPORT),
            (names.reports_exchange(), routing_keys::DELIVERY_REPORT),
            (names.reports_exchange(), routing_keys::CHANNEL_REPORT),
        ],
    ));
    work_queues.push(work(
        names.cleanup_queue(),
        vec![(names.reports_exchange(), routing_keys::TOKEN_CLEANUP)],
    ));

    let dlx = names.dead_letter_exchange();
    let mut all = work_queues.clone();
    for queue in &work_queues {
        all.push(QueueSpec {
            name: names.dead_letter_queue(&queue.name),
            bindings: vec![(dlx.clone(), queue.name.clone())],
            kind: QueueKind::Keep,
        });
    }
    let mut watched = vec![(dlx.clone(), names.harvest_queue())];
    watched.extend(Platform::ALL.map(|platform| (dlx.clone(), names.deliver_queue(platform))));
    watched.push((dlx.clone(), names.channel_command_queue()));
    watched.push((dlx.clone(), names.reports_queue()));
    watched.push((dlx.clone(), names.cleanup_queue()));
    all.push(QueueSpec {
        name: names.dead_letter_watch_queue(),
        bindings: watched,
        kind: QueueKind::Keep,
    });
    all.push(QueueSpec {
        name: names.control_log(),
        bindings: vec![(names.control_exchange(), String::new())],
        kind: QueueKind::Log,
    });
    all
}

/// Declares every exchange, queue and binding; safe to repeat.
pub async fn declare(channel: &Channel, names: &Names) -> Result<(), lapin::Error> {
    for (exchange, kind) in exchanges(names) {
        let options = ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        };
        channel
            .exchange_declare(exchange.as_str().into(), kind, options, FieldTable::default())
            .await?;
    }
    let dlx = names.dead_letter_exchange();
    for queue in queues(names) {
        let options = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        let arguments = queue_arguments(&queue, &dlx);
        channel
            .queue_declare(queue.name.as_str().into(), options, arguments)
            .await?;
        for (exchange, key) in &queue.bindings {
            channel
                .queue_bind(
                    queue.name.as_str().into(),
                    exchange.as_str().into(),
                    key.as_str().into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await?;
        }
    }
    Ok(())
}

/// Deletes every queue and exchange of `names` (test clean-up).
pub async fn delete(channel: &Channel, names: &Names) -> Result<(), lapin::Error> {
    for queue in queues(names) {
        channel
            .queue_delete(queue.name.as_str().into(), QueueDeleteOptions::default())
            .await?;
    }
    for (exchange, _) in exchanges(names) {
        channel
            .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
            .await?;
    }
    Ok(())
}

/// Segment size of the control log: retention drops whole segments, so
/// small segments let old control messages actually go (the default, 500
/// MB, would keep years of cancellations).
const CONTROL_LOG_SEGMENT_BYTES: i64 = 1 << 20;

fn queue_arguments(queue: &QueueSpec, dead_letter_exchange: &str) -> FieldTable {
    let mut arguments = FieldTable::default();
    if queue.kind == QueueKind::Log {
        arguments.insert("x-queue-type".into(), text("stream"));
        arguments.insert("x-max-age".into(), text(CONTROL_LOG_MAX_AGE));
        arguments.insert(
            "x-stream-max-segment-size-bytes".into(),
            AMQPValue::LongLongInt(CONTROL_LOG_SEGMENT_BYTES),
        );
        return arguments;
    }
    arguments.insert("x-queue-type".into(), text("quorum"));
    if queue.kind == QueueKind::Work {
        arguments.insert("x-dead-letter-exchange".into(), text(dead_letter_exchange));
        arguments.insert("x-dead-letter-routing-key".into(), text(&queue.name));
        arguments.insert(
            "x-delivery-limit".into(),
            AMQPValue::LongInt(DELIVERY_LIMIT as i32),
        );
        // At-least-once dead-lettering requires the queue to refuse
        // publishes when full instead of dropping its oldest messages.
        arguments.insert("x-dead-letter-strategy".into(), text("at-least-once"));
        arguments.insert("x-overflow".into(), text("reject-publish"));
    }
    arguments
}

fn text(value: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_work_queue_has_a_dead_letter_queue_and_deliveries_are_watched() {
        let names = Names::new("t");
        let all = queues(&names);
        let work: Vec<&QueueSpec> = all.iter().filter(|q| q.kind == QueueKind::Work).collect();
        // harvest.jobs, one deliver queue per platform, the Live Activity
        // channel commands, reports, cleanup.
        assert_eq!(work.len(), 4 + Platform::ALL.len());
        for queue in &work {
            let dead = names.dead_letter_queue(&queue.name);
            assert!(all.iter().any(|q| q.name == dead), "{dead}");
        }
        let watch = all
            .iter()
            .find(|q| q.name == names.dead_letter_watch_queue())
            .unwrap();
        let watched: Vec<&str> = watch.bindings.iter().map(|(_, key)| key.as_str()).collect();
        assert_eq!(
            watched,
            vec![
                "t.harvest.jobs",
                "t.deliver.ios",
                "t.deliver.android",
                "t.deliver.web",
                "t.deliver.ios.channels",
                "t.reports",
                "t.cleanup"
            ]
        );
        let log = all.iter().find(|q| q.kind == QueueKind::Log).unwrap();
        assert_eq!(log.name, "t.control.log");
        assert_eq!(log.bindings, vec![("t.control".to_owned(), String::new())]);
    }
}
