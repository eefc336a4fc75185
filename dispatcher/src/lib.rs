//! Clarion's dispatcher: consumes one platform's token batches and pushes
//! every token over persistent HTTP/2 connections to APNs ([`apns`]) or FCM
//! ([`fcm`]), behind one small trait ([`channel::PushChannel`]). The iOS
//! dispatcher also carries out the Live Activity channel commands
//! ([`handlers::channel_commands`]) with the same APNs clients.
//! Dispatchers never touch the database.
//!
//! The batch consumers, the broker link and the publisher live on one
//! dedicated arbiter; the pushes themselves run on a multi-threaded tokio
//! runtime (`CLARION_DISPATCH_THREADS`). [`Dispatcher::kill`] stops both
//! abruptly, which is what a crash looks like to RabbitMQ.

pub mod apns;
pub mod apps;
pub mod breaker;
pub mod channel;
pub mod channels;
pub mod config;
pub mod delivery;
pub mod fcm;
pub mod handlers;
pub mod http2;
pub mod metrics;
pub mod pacing;
pub mod push_health;
pub mod webpush;

use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use actix::{Arbiter, Recipient};
use clarion_proto::{Names, Platform};
use clarion_runtime::BrokerLink;
use clarion_runtime::amqp;
use clarion_runtime::amqp::consumer::{ConsumerSpec, QueueConsumer, StopConsuming, stop_recipients};
use clarion_runtime::amqp::control::{Cancellations, subscribe};
use clarion_runtime::amqp::publisher::Publisher;
use clarion_runtime::health::{HealthServer, Readiness};
use clarion_runtime::recent::Recent;
use clarion_runtime::telemetry::TraceService;
use clarion_runtime::tls::{LINK_CHECK_TIMEOUT, LinkError, Trust};
use tokio::sync::oneshot;
use tracing::{info, warn};

use crate::apns::ApnsChannel;
use crate::apps::AppChannels;
use crate::breaker::Breaker;
use crate::channel::{PushChannel, Transport};
pub use crate::config::Settings;
use crate::delivery::{Deliverer, Limits};
use crate::fcm::FcmChannel;
use crate::handlers::token_batches::{DELIVERED_REMEMBERED, TokenBatchHandler};
use crate::http2::PoolLimits;
use crate::pacing::{Pacers, Replicas};
use crate::push_health::PushHealth;
use crate::webpush::WebPushChannel;
use clarion_runtime::apps::AppsFile;

/// How often the broker is asked how many consumers the platform's queue
/// has (how many replicas share a provider's quota).
const REPLICAS_REFRESH: Duration = Duration::from_secs(2);

/// How the dispatcher's spans are exported (its platform as an attribute).
pub fn trace_service(platform: Platform) -> TraceService {
    TraceService {
        name: "clarion-dispatcher",
        target: "clarion_dispatcher",
        attributes: vec![opentelemetry::KeyValue::new(
            "clarion.platform",
            platform.as_str(),
        )],
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error(
        "invalid configuration: no app to deliver to on {platform}: give the `default` app its credentials \
         with {default_settings}, or give an app {provider} credentials in an `[apps.<id>.{provider}]` table of \
         the apps file (CLARION_APPS_FILE)"
    )]
    NoApp {
        platform: Platform,
        provider: &'static str,
        default_settings: &'static str,
    },
    #[error("cannot start the delivery runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot serve the health endpoints: {0}")]
    Http(#[from] std::io::Error),
    #[error("the dispatch arbiter did not start")]
    Arbiter,
    #[error(transparent)]
    Link(#[from] LinkError),
}

/// A running dispatcher.
pub struct Dispatcher {
    pub health: HealthServer,
    arbiter: Arbiter,
    runtime: DeliveryRuntime,
    workers: Vec<Recipient<StopConsuming>>,
    readiness: Readiness,
    grace: std::time::Duration,
    /// Replicas of this platform the broker counts (its queue's consumers).
    replicas: Replicas,
}

/// The runtime pushes run on. It may be dropped from async code (a failed
/// start, a stop), where a plain drop would block: shut it down in the
/// background instead.
struct DeliveryRuntime(Option<tokio::runtime::Runtime>);

impl DeliveryRuntime {
    fn handle(&self) -> tokio::runtime::Handle {
        match &self.0 {
            Some(runtime) => runtime.handle().clone(),
            None => tokio::runtime::Handle::current(),
        }
    }

    fn shutdown(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for DeliveryRuntime {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Dispatcher {
    /// How many replicas of this platform the broker last counted (the
    /// ones sharing a provider's quota), this one included.
    pub fn replicas(&self) -> u32 {
        self.replicas.count()
    }

    /// Stops everything at once: pushes in flight are abandoned and their
    /// batches (unacked) return to the queue.
    pub fn kill(&mut self) {
        self.arbiter.stop();
        self.runtime.shutdown();
    }

    /// Stops gracefully: not ready any more, no new batches, the batches
    /// being delivered finished, reported and acked within the grace period
    /// (what is left then goes back to the queue), then stops. True when
    /// nothing was cut.
    pub async fn stop(mut self) -> bool {
        self.readiness.start_draining();
        let finished = stop_recipients(self.workers.clone(), self.grace).await;
        if !finished {
            warn!(
                grace_s = self.grace.as_secs(),
                "grace period over; unfinished batches go back to the queue"
            );
        }
        self.kill();
        self.health.stop().await;
        info!("dispatcher stopped");
        finished
    }
}

type Parts = (BrokerLink, Vec<Recipient<StopConsuming>>);

/// What the workers of channel `C` are built from: its apps' channels, and
/// the consumers it starts beside the token batches'.
struct ChannelWorkers<C: PushChannel> {
    channels: AppChannels<C>,
    extra: Option<ExtraConsumers<C>>,
}

/// Consumers a channel starts beside its token batches' (the APNs
/// channel's Live Activity commands), on the dispatch arbiter: from the
/// broker link, the namespace's names, how many workers, the deliverer
/// (its app channels and retry limits) and the delivery runtime.
type ExtraConsumers<C> =
    fn(&BrokerLink, &Names, u16, Arc<Deliverer<C>>, tokio::runtime::Handle) -> Vec<Recipient<StopConsuming>>;

/// Builds the platform's channel, starts the batch consumers and serves the
/// health endpoints. Must run inside an actix `System`.
pub async fn start(settings: Settings) -> Result<Dispatcher, StartError> {
    // One line per channel (see `channel.rs` for what a new channel needs).
    match settings.platform {
        Platform::Ios => {
            let channel = settings.channels.apns.clone();
            run::<ApnsChannel>(settings, channel, Some(handlers::channel_commands::start)).await
        }
        Platform::Android => {
            let channel = settings.channels.fcm.clone();
            run::<FcmChannel>(settings, channel, None).await
        }
        Platform::Web => {
            let channel = settings.channels.webpush.clone();
            run::<WebPushChannel>(settings, channel, None).await
        }
    }
}

/// Starts a dispatcher of channel `C`: every app with `C`'s credentials
/// (the `default` app's, when the single-app settings give them, and
/// those of the apps file) is served; with none at all it does not start.
async fn run<C: PushChannel>(
    settings: Settings,
    channel: C::Settings,
    extra: Option<ExtraConsumers<C>>,
) -> Result<Dispatcher, StartError> {
    metrics::describe();
    let apps = AppsFile::open_checked(settings.apps_file.as_deref(), Some(channels::check_app))
        .map_err(StartError::Config)?;
    let default_configured = C::default_configured(&channel);
    let from_file = apps.serving(C::PLATFORM);
    if !default_configured && from_file.is_empty() {
        return Err(StartError::NoApp {
            platform: C::PLATFORM,
            provider: C::PROVIDER,
            default_settings: C::DEFAULT_APP_SETTINGS,
        });
    }
    info!(
        platform = %C::PLATFORM,
        default = default_configured,
        apps_file = ?from_file,
        "apps with credentials for this platform"
    );
    let delivery = &settings.delivery;
    let runtime = DeliveryRuntime(Some(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(usize::from(delivery.threads))
            .thread_name("clarion-dispatch")
            .enable_all()
            .build()
            .map_err(StartError::Runtime)?,
    ));
    let extra_ca_file = settings.tls.extra_ca_file.clone();
    let trust = Trust::load(&settings.tls).map_err(|err| StartError::Config(err.to_string()))?;
    amqp::connect::check_tls(&settings.broker.url, &trust, LINK_CHECK_TIMEOUT)
        .await
        .map_err(StartError::Link)?;
    let tls = http2::client_config(extra_ca_file.as_deref(), &[b"h2"])
        .map_err(|err| StartError::Config(err.to_string()))?;
    let limits = PoolLimits {
        connections: usize::from(delivery.connections),
        streams_per_connection: delivery.streams_per_connection as usize,
        timeout: delivery.request_timeout(),
        liveness: delivery.liveness(),
    };
    let transport = Transport {
        tls,
        limits,
        extra_ca_file,
    };
    let health = Arc::new(PushHealth::new(delivery.not_ready_after()));
    let arbiter = Arbiter::new();
    // Consumers the broker counts on this platform's queue: how many
    // replicas share a provider's quota.
    let consumers = Arc::new(AtomicU32::new(0));
    let default = if default_configured {
        let connecting = channel.clone();
        let default_transport = transport.clone();
        let channel = runtime
            .handle()
            .spawn(async move { C::connect(&connecting, default_transport).await })
            .await
            .map_err(|err| StartError::Config(err.to_string()))?
            .map_err(|err| StartError::Config(err.to_string()))?;
        Some(Arc::new(channel))
    } else {
        None
    };
    let channels = AppChannels::new(default, channel, transport, apps);
    let (link, workers) = start_workers(
        &arbiter,
        &settings,
        trust,
        ChannelWorkers { channels, extra },
        runtime.handle(),
        health.clone(),
        consumers.clone(),
    )
    .await?;
    let readiness = Readiness::new(None, Some(link)).with_check(health);
    let health = HealthServer::start(settings.http_addr, readiness.clone())?;
    info!(
        addr = %health.addr,
        platform = %settings.platform,
        connections = limits.connections,
        streams_per_connection = limits.streams_per_connection,
        batch_workers = delivery.batch_workers,
        rate_limit = delivery.rate_limit,
        "dispatcher running"
    );
    Ok(Dispatcher {
        health,
        arbiter,
        runtime,
        workers,
        readiness,
        grace: settings.shutdown.grace(),
        replicas: Replicas::new(consumers, u32::from(delivery.batch_workers)),
    })
}

/// Starts the consumers on the dispatch arbiter, where the broker link and
/// the publisher are created too.
async fn start_workers<C: PushChannel>(
    arbiter: &Arbiter,
    settings: &Settings,
    trust: Trust,
    channel: ChannelWorkers<C>,
    runtime: tokio::runtime::Handle,
    health: Arc<PushHealth>,
    consumers: Arc<AtomicU32>,
) -> Result<Parts, StartError> {
    let ChannelWorkers { channels, extra } = channel;
    let delivery = &settings.delivery;
    let limits = Limits {
        per_batch: delivery.streams_per_batch as usize,
        max_attempts: delivery.max_attempts,
        retry_window: delivery.retry_window(),
        retry_base: delivery.retry_base(),
        retry_max: delivery.retry_max(),
        retry_after_max: delivery.retry_after_max(),
    };
    let cancellations = Cancellations::default();
    let workers = usize::from(delivery.batch_workers);
    let pacers = Pacers::new(
        channels.quota_per_minute(),
        Replicas::new(consumers.clone(), workers as u32),
    );
    let deliverer = Arc::new(Deliverer::new(
        channels,
        limits,
        delivery.rate_limit,
        pacers,
        cancellations.clone(),
        health,
    ));
    let platform = C::PLATFORM;
    let broker = settings.broker.clone();
    let prefetch = delivery.prefetch;
    let breaker_pushes = delivery.breaker_pushes;
    let channel_workers = delivery.channel_workers;
    let (tx, rx) = oneshot::channel();
    let spawned = arbiter.spawn(async move {
        let names = Names::new(broker.namespace.clone());
        let link = BrokerLink::spawn(
            broker.url.clone(),
            trust,
            format!("clarion-dispatcher-{platform}"),
            names.clone(),
        );
        subscribe(link.clone(), names.clone(), cancellations);
        let mut extra_consumers = match extra {
            Some(start) => start(&link, &names, channel_workers, deliverer.clone(), runtime.clone()),
            None => Vec::new(),
        };
        let handler = TokenBatchHandler {
            deliverer,
            runtime,
            publisher: Publisher::new(link.clone(), names.clone()),
            delivered: Recent::new(DELIVERED_REMEMBERED),
            in_hand: Arc::default(),
            breaker: Arc::new(Breaker::new(breaker_pushes, C::MISCONFIGURED)),
        };
        clarion_runtime::metrics::watch_queue_consumers(
            link.clone(),
            names.deliver_queue(platform),
            REPLICAS_REFRESH,
            consumers,
        );
        let spec = ConsumerSpec {
            queue: names.deliver_queue(platform),
            prefetch,
            name: format!("dispatcher-{platform}"),
        };
        let mut consumers: Vec<Recipient<StopConsuming>> =
            QueueConsumer::start_pool(workers, link.clone(), spec, handler)
                .into_iter()
                .map(|addr| addr.recipient())
                .collect();
        consumers.append(&mut extra_consumers);
        let _ = tx.send((link, consumers));
    });
    if !spawned {
        return Err(StartError::Arbiter);
    }
    rx.await.map_err(|_| StartError::Arbiter)
}
