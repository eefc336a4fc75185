//! The whole AMQP topology, declared idempotently by every service's broker
//! link on each new connection, before any channel of it is used, so
//! start-up order does not matter.
//!
//! - Work queues (`harvest.jobs`, `deliver.<platform>`, `reports`, `cleanup`)
//!   are durable quorum queues. After [`DELIVERY_LIMIT`] deliveries a message
//!   is dead-lettered, at-least-once, to the dead-letter exchange with the
//!   name of its queue as routing key.
//! - Each work queue has a `<queue>.dead` queue that keeps what it gave up.
//! - Dead shard jobs and token batches are also copied to the watch queue,
//!   which the coordinator reads to mark their notifications.
//!
//! Queue arguments are part of a queue's identity: declaring the same queue
//! with other arguments fails. That is why they are constants, not settings.

use clarion_proto::Names;
use clarion_proto::Platform;
use clarion_proto::names::{DELIVERY_LIMIT, routing_keys};
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
    /// Work queues dead-letter after the delivery limit; the dead-letter
    /// queues themselves keep what they get.
    pub dead_letters: bool,
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
        dead_letters: true,
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
        names.reports_queue(),
        vec![
            (names.reports_exchange(), routing_keys::JOB_REPORT),
            (names.reports_exchange(), routing_keys::DELIVERY_REPORT),
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
            dead_letters: false,
        });
    }
    let mut watched = vec![(dlx.clone(), names.harvest_queue())];
    watched.extend(Platform::ALL.map(|platform| (dlx.clone(), names.deliver_queue(platform))));
    all.push(QueueSpec {
        name: names.dead_letter_watch_queue(),
        bindings: watched,
        dead_letters: false,
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

fn queue_arguments(queue: &QueueSpec, dead_letter_exchange: &str) -> FieldTable {
    let mut arguments = FieldTable::default();
    arguments.insert("x-queue-type".into(), text("quorum"));
    if queue.dead_letters {
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
        let work: Vec<&QueueSpec> = all.iter().filter(|q| q.dead_letters).collect();
        assert_eq!(work.len(), 5);
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
            vec!["t.harvest.jobs", "t.deliver.ios", "t.deliver.android"]
        );
    }
}
