//! The control role's background work, started and stopped together: the
//! topic counter, the job relay, the scheduler, the stall watchdog, data
//! hygiene, the receipts settler and the consumers of the reports,
//! dead-letter and cleanup queues. A coordinator that runs only the api
//! role starts none of it (and opens no broker link).

use std::time::Duration;

use actix::{Actor, Addr};
use clarion_proto::Names;
use clarion_runtime::amqp::consumer::{ConsumerSpec, QueueConsumer, stop_recipients};
use clarion_runtime::amqp::publisher::Publisher;
use clarion_runtime::db::{self, DbError};
use clarion_runtime::tls::Trust;
use clarion_runtime::{BrokerLink, PgPool};
use tracing::warn;

use crate::api::ControlState;
use crate::config::Settings;
use crate::consumers::cleanup::CleanupHandler;
use crate::consumers::dead_letters::DeadLetterHandler;
use crate::consumers::reports::ReportHandler;
use crate::consumers::reports::StartPushes;
use crate::hygiene::actor::Hygiene;
use crate::live_activity::relay::CommandRelay;
use crate::progress::watchdog::Watchdog;
use crate::release::relay::JobRelay;
use crate::send::scheduler::Scheduler;
use crate::send::topic_counter::TopicCounter;
use crate::stop::Stop;

/// The control role's loops; they run while this lives, until [`stop`](ControlLoops::stop).
pub struct ControlLoops {
    relay: Addr<JobRelay>,
    commands: Addr<CommandRelay>,
    scheduler: Addr<Scheduler>,
    watchdog: Addr<Watchdog>,
    hygiene: Addr<Hygiene>,
    /// Counts reporting audiences and stores device-side verdicts.
    receipts_settler: tokio::task::JoinHandle<()>,
    reports: Vec<Addr<QueueConsumer<ReportHandler>>>,
    dead_letters: Vec<Addr<QueueConsumer<DeadLetterHandler>>>,
    cleanup: Vec<Addr<QueueConsumer<CleanupHandler>>>,
}

/// Where the control role's loops read and write.
pub struct Links<'a> {
    pub pool: &'a PgPool,
    pub broker: &'a BrokerLink,
    pub names: &'a Names,
    pub trust: &'a Trust,
}

impl ControlLoops {
    /// Starts every loop; returns them with what the control role's
    /// handlers use.
    pub fn start(settings: &Settings, links: Links<'_>) -> Result<(ControlLoops, ControlState), DbError> {
        let Links {
            pool,
            broker,
            names,
            trust,
        } = links;
        let refresh_every = settings.topic_count_max_age() / 2;
        let topic_counter = TopicCounter::new(pool.clone(), refresh_every).start();
        let relay = JobRelay::new(pool.clone(), broker.clone(), names.clone(), settings.scheduling()).start();
        let commands = CommandRelay::new(pool.clone(), broker.clone(), names.clone()).start();
        let scheduler = Scheduler::new(
            pool.clone(),
            topic_counter.clone(),
            relay.clone(),
            settings.tokens_per_job,
        )
        .start();
        let watchdog = Watchdog::new(pool.clone(), settings.stall()).start();
        let hygiene = Hygiene::new(
            db::Manager::new(&settings.database, trust, "clarion-coordinator-hygiene")?,
            settings.hygiene.plan(),
            settings.hygiene.interval(),
        )
        .start();
        clarion_runtime::metrics::watch_queue(broker.clone(), names.reports_queue());
        clarion_runtime::metrics::watch_queue(broker.clone(), names.cleanup_queue());
        let consumer = |queue: String, prefetch: u16, name: &str| ConsumerSpec {
            queue,
            prefetch,
            name: name.into(),
        };
        let reports = QueueConsumer::start_pool(
            1,
            broker.clone(),
            consumer(
                names.reports_queue(),
                settings.reports_prefetch,
                "coordinator-reports",
            ),
            ReportHandler::start(
                pool.clone(),
                settings.valve(),
                settings.reports_prefetch,
                StartPushes {
                    topic_counter: topic_counter.clone(),
                    relay: relay.clone(),
                    commands: commands.clone(),
                    tokens_per_job: settings.tokens_per_job,
                },
            ),
        );
        let dead_letters = QueueConsumer::start_pool(
            1,
            broker.clone(),
            consumer(names.dead_letter_watch_queue(), 16, "coordinator-dead-letters"),
            DeadLetterHandler {
                pool: pool.clone(),
                valve: settings.valve(),
            },
        );
        let cleanup = QueueConsumer::start_pool(
            1,
            broker.clone(),
            consumer(
                names.cleanup_queue(),
                settings.reports_prefetch,
                "coordinator-cleanup",
            ),
            CleanupHandler { pool: pool.clone() },
        );
        let loops = ControlLoops {
            relay: relay.clone(),
            commands: commands.clone(),
            scheduler,
            watchdog,
            hygiene,
            receipts_settler: crate::receipts::settle::spawn(pool.clone()),
            reports,
            dead_letters,
            cleanup,
        };
        let handles = ControlState {
            topic_counter,
            relay,
            commands,
            publisher: Publisher::new(broker.clone(), names.clone()),
        };
        Ok((loops, handles))
    }

    /// Stops the timers, then the consumers (the message being processed
    /// is finished first) within `grace`.
    pub async fn stop(self, grace: Duration) {
        let _ = self.scheduler.send(Stop).await;
        let _ = self.relay.send(Stop).await;
        let _ = self.commands.send(Stop).await;
        let _ = self.watchdog.send(Stop).await;
        let _ = self.hygiene.send(Stop).await;
        self.receipts_settler.abort();
        let consumers = self.reports.iter().map(|a| a.clone().recipient());
        let consumers = consumers
            .chain(self.dead_letters.iter().map(|a| a.clone().recipient()))
            .chain(self.cleanup.iter().map(|a| a.clone().recipient()));
        if !stop_recipients(consumers, grace).await {
            warn!("grace period over; unfinished reports go back to the queue");
        }
    }
}
