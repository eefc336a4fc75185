//! The command relay: publishes committed, unpublished channel commands
//! (`live_activity_commands`), oldest first, to the deliver exchange
//! (routing key `ios.channels`, into `deliver.ios.channels`) with publisher
//! confirms, and marks them published in the transaction that claimed them
//! (`FOR UPDATE SKIP LOCKED`: two replicas never publish the same one). A
//! broadcast waits until its channel has an id, read into the command at
//! release. Runs when nudged (a commit queued commands) and every `TICK`,
//! so commands left by a broker outage or a crash go once the broker is
//! back; a relay whose broker link is down claims nothing. At-least-once:
//! a crash between a confirm and the commit publishes again, and the
//! report's outcome is recorded once.
//!
//! Every `SWEEP_EVERY` it also queues the deletes of the channels of
//! activities that ended [`ENDED_CHANNEL_RETENTION_SECS`] ago.

use std::time::Duration;

use actix::prelude::*;
use clarion_proto::codec::encode;
use clarion_proto::live_activity::{
    ChannelAction, ChannelCommand, ENDED_CHANNEL_RETENTION_SECS, StoragePolicy,
};
use clarion_proto::names::{message_types, routing_keys};
use clarion_proto::{ApnsEnvironment, Names, WireVersion};
use clarion_runtime::amqp::message::properties;
use clarion_runtime::amqp::publisher::{Outgoing, PublishError, Publisher};
use clarion_runtime::db::DbError;
use clarion_runtime::{BrokerLink, PgPool};
use tracing::{Instrument, info, warn};

use crate::metrics;
use crate::stop::Stop;
use crate::store::StoreError;
use crate::store::live_activities::{self as store, BROADCAST, CREATE_CHANNEL, ReadyCommand};

const TICK: Duration = Duration::from_secs(1);
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// Commands claimed per transaction at most.
const BATCH: i64 = 128;
/// Channels a sweep queues deletes for at most.
const SWEEP_LIMIT: i64 = 1_000;
/// Longest a batch waits for its confirms (broker reconnects included).
const PUBLISH_DEADLINE: Duration = Duration::from_secs(10);
const MAILBOX_CAPACITY: usize = 16;

/// Commands were committed: look now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CommandsCommitted;

#[derive(Debug, thiserror::Error)]
enum RelayError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Publish(#[from] PublishError),
    #[error("command {0}: {1}")]
    Malformed(uuid::Uuid, String),
}

impl From<DbError> for RelayError {
    fn from(err: DbError) -> Self {
        RelayError::Store(err.into())
    }
}

impl From<tokio_postgres::Error> for RelayError {
    fn from(err: tokio_postgres::Error) -> Self {
        RelayError::Store(err.into())
    }
}

pub struct CommandRelay {
    pool: PgPool,
    broker: BrokerLink,
    publisher: Publisher,
    names: Names,
    relaying: bool,
    nudged: bool,
    stopping: bool,
}

impl CommandRelay {
    pub fn new(pool: PgPool, broker: BrokerLink, names: Names) -> Self {
        Self {
            pool,
            publisher: Publisher::new(broker.clone(), names.clone()),
            broker,
            names,
            relaying: false,
            nudged: false,
            stopping: false,
        }
    }

    fn relay(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        if self.relaying {
            self.nudged = true;
            return;
        }
        if !self.broker.is_connected() {
            return;
        }
        self.relaying = true;
        self.nudged = false;
        let round = relay_all(
            self.pool.clone(),
            self.publisher.clone(),
            self.names.deliver_exchange(),
        );
        ctx.spawn(round.into_actor(self).map(|(), relay, ctx| {
            relay.relaying = false;
            if relay.stopping {
                ctx.stop();
            } else if relay.nudged {
                relay.relay(ctx);
            }
        }));
    }
}

impl Actor for CommandRelay {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        self.relay(ctx);
        ctx.run_interval(TICK, |relay, ctx| relay.relay(ctx));
        ctx.run_interval(SWEEP_EVERY, |relay, ctx| {
            let pool = relay.pool.clone();
            ctx.spawn(
                // Deletes queued are published by the next tick.
                async move {
                    sweep(&pool).await;
                }
                .into_actor(relay),
            );
        });
    }
}

impl Handler<Stop> for CommandRelay {
    type Result = ();

    fn handle(&mut self, _msg: Stop, ctx: &mut Self::Context) {
        if self.relaying {
            self.stopping = true;
        } else {
            ctx.stop();
        }
    }
}

impl Handler<CommandsCommitted> for CommandRelay {
    type Result = ();

    fn handle(&mut self, _msg: CommandsCommitted, ctx: &mut Self::Context) {
        self.relay(ctx);
    }
}

/// Publishes batches until fewer than a batch wait (or one fails).
async fn relay_all(pool: PgPool, publisher: Publisher, exchange: String) {
    loop {
        match relay_batch(&pool, &publisher, &exchange).await {
            Ok(n) if n < BATCH as usize => return,
            Ok(_) => continue,
            Err(err) => {
                warn!(error = %err, "live activity commands wait in the outbox; retrying");
                metrics::LIVE_ACTIVITY_RELAY_FAILURES.get().increment(1);
                return;
            }
        }
    }
}

async fn relay_batch(pool: &PgPool, publisher: &Publisher, exchange: &str) -> Result<usize, RelayError> {
    let mut conn = pool.get().await.map_err(DbError::from)?;
    let tx = conn.transaction().await?;
    let ready = store::claim_ready(&tx, BATCH).await?;
    if ready.is_empty() {
        return Ok(0);
    }
    let span = tracing::info_span!(
        "publish channel commands",
        otel.kind = "producer",
        messaging.system = "rabbitmq",
        messaging.operation.type = "publish",
        messaging.destination.name = %exchange,
        messaging.batch.message_count = ready.len(),
    );
    // Built inside the span: each command carries its trace context. A
    // row that makes no command (it cannot happen through the API) is
    // recorded as failed rather than holding up the outbox.
    let mut messages = Vec::with_capacity(ready.len());
    let mut kinds = Vec::with_capacity(ready.len());
    for command in &ready {
        match span.in_scope(|| outgoing(exchange, command)) {
            Ok(message) => {
                messages.push(message);
                kinds.push(kind_label(&command.kind));
            }
            Err(err) => {
                warn!(command.id = %command.id, error = %err, "a live activity command cannot be sent; recorded as failed");
                store::record_outcome(&tx, command.id, "failed", None, Some(&err.to_string())).await?;
            }
        }
    }
    publisher
        .publish_all_within(&messages, PUBLISH_DEADLINE)
        .instrument(span)
        .await?;
    let ids: Vec<_> = ready.iter().map(|c| c.id).collect();
    store::mark_published(&tx, &ids).await?;
    tx.commit().await?;
    for kind in kinds {
        metrics::LIVE_ACTIVITY_COMMANDS_PUBLISHED
            .with([kind])
            .increment(1);
    }
    info!(commands = messages.len(), "live activity commands published");
    Ok(ready.len())
}

/// The fixed label of a command kind.
pub fn kind_label(kind: &str) -> &'static str {
    match kind {
        CREATE_CHANNEL => "create_channel",
        BROADCAST => "broadcast",
        _ => "delete_channel",
    }
}

/// The wire command of a claimed row, addressed to `deliver.ios.channels`.
fn outgoing(exchange: &str, row: &ReadyCommand) -> Result<Outgoing, RelayError> {
    let command = wire_command(row)?;
    Ok(Outgoing {
        exchange: exchange.to_owned(),
        routing_key: routing_keys::CHANNEL_COMMAND.to_owned(),
        body: encode(&command).map_err(|err| RelayError::Malformed(row.id, err.to_string()))?,
        properties: properties(message_types::CHANNEL_COMMAND, row.activity_id),
    })
}

fn wire_command(row: &ReadyCommand) -> Result<ChannelCommand, RelayError> {
    let malformed = |what: &str| RelayError::Malformed(row.id, what.to_owned());
    let environment = match row.environment.as_str() {
        "sandbox" => ApnsEnvironment::Sandbox,
        _ => ApnsEnvironment::Production,
    };
    let action = match row.kind.as_str() {
        CREATE_CHANNEL => ChannelAction::CreateChannel {
            storage_policy: if row.storage_policy == "most-recent" {
                StoragePolicy::MostRecent
            } else {
                StoragePolicy::None
            },
        },
        BROADCAST => ChannelAction::Broadcast {
            channel_id: row.channel_id.clone().ok_or_else(|| malformed("no channel id"))?,
            update_id: row.update_id.ok_or_else(|| malformed("no update"))?,
            payload: row.payload.clone().ok_or_else(|| malformed("no payload"))?,
            priority: row.priority.and_then(|p| u8::try_from(p).ok()).unwrap_or(10),
        },
        _ => ChannelAction::DeleteChannel {
            channel_id: row.channel_id.clone().ok_or_else(|| malformed("no channel id"))?,
        },
    };
    Ok(ChannelCommand {
        v: WireVersion::CURRENT,
        id: row.id,
        activity_id: row.activity_id,
        app: row.app.clone(),
        environment,
        action,
    })
}

/// Queues the deletes of ended activities' channels; true when some were.
pub async fn sweep(pool: &PgPool) -> bool {
    let swept = async {
        let conn = pool.get().await.map_err(DbError::from)?;
        store::sweep_ended(&*conn, ENDED_CHANNEL_RETENTION_SECS as f64, SWEEP_LIMIT).await
    }
    .await;
    match swept {
        Ok(0) => false,
        Ok(channels) => {
            info!(
                channels,
                "deletes queued for the channels of activities ended a day ago"
            );
            metrics::LIVE_ACTIVITY_CHANNELS_SWEPT.get().increment(channels);
            true
        }
        Err(err) => {
            warn!(error = %err, "the sweep of ended live activities' channels failed; trying again later");
            false
        }
    }
}
