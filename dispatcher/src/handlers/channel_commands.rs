//! Live Activity channel commands (issue 38), iOS dispatchers only: each
//! [`ChannelCommand`] of the channel-command queue is carried out at Apple
//! through the app's APNs channel (its provider token, pooled HTTP/2
//! connections and request deadline), retried within the dispatcher's
//! bounds (`CLARION_DISPATCH_MAX_ATTEMPTS`, the retry window, `Retry-After`
//! capped), then its [`ChannelReport`] is published with confirms and only
//! then is the command acked.
//!
//! At-least-once: a command redelivered (a crash before the ack, a report
//! not confirmed) is carried out again. That is harmless by design: a
//! broadcast keeps its timestamp (phones ignore the second copy), a delete
//! of a gone channel counts as deleted, and the coordinator deletes the
//! extra channel of a create made twice. An unreadable command goes to the
//! dead-letter queue. The breaker, which judges a segment by its first
//! pushes, does not apply: a command is one request, reported whatever
//! Apple answers.

use std::sync::Arc;
use std::time::Instant;

use actix::Recipient;
use clarion_proto::codec::decode;
use clarion_proto::live_activity::{ChannelAction, ChannelCommand, ChannelOutcome, ChannelReport};
use clarion_proto::{Names, WireVersion};
use clarion_runtime::BrokerLink;
use clarion_runtime::amqp::consumer::{
    ConsumerSpec, DeliveryHandler, QueueConsumer, StopConsuming, ack, dead_letter, requeue,
};
use clarion_runtime::amqp::message::trace_parent;
use clarion_runtime::amqp::publisher::Publisher;
use futures::future::LocalBoxFuture;
use lapin::message::Delivery;
use tracing::field::Empty;
use tracing::{Instrument, info, warn};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::token_batches::REPORT_PATIENCE;
use crate::apns::ApnsChannel;
use crate::apns::broadcast::ChannelAttempt;
use crate::delivery::Deliverer;
use crate::metrics;

#[derive(Clone)]
pub struct ChannelCommandHandler {
    /// The token batches' deliverer: its app channels and retry limits.
    pub deliverer: Arc<Deliverer<ApnsChannel>>,
    /// Where the requests run (the delivery runtime).
    pub runtime: tokio::runtime::Handle,
    pub publisher: Publisher,
}

/// Starts `workers` consumers of the channel-command queue on the current
/// arbiter, each with one command in hand (prefetch 1): a slow create
/// never holds up more than its own consumer.
pub fn start(
    link: &BrokerLink,
    names: &Names,
    workers: u16,
    deliverer: Arc<Deliverer<ApnsChannel>>,
    runtime: tokio::runtime::Handle,
) -> Vec<Recipient<StopConsuming>> {
    let handler = ChannelCommandHandler {
        deliverer,
        runtime,
        publisher: Publisher::new(link.clone(), names.clone()),
    };
    let spec = ConsumerSpec {
        queue: names.channel_command_queue(),
        prefetch: 1,
        name: "dispatcher-ios-channels".into(),
    };
    QueueConsumer::start_pool(usize::from(workers), link.clone(), spec, handler)
        .into_iter()
        .map(|addr| addr.recipient())
        .collect()
}

impl DeliveryHandler for ChannelCommandHandler {
    fn handle(&self, delivery: Delivery) -> LocalBoxFuture<'static, ()> {
        let worker = self.clone();
        Box::pin(async move {
            let command = match decode::<ChannelCommand>(&delivery.data) {
                Ok(command) => command,
                Err(err) => {
                    return dead_letter(&delivery, &format!("unreadable channel command: {err}")).await;
                }
            };
            let action = action_label(&command.action);
            let span = tracing::info_span!(
                "channel command",
                otel.kind = "consumer",
                messaging.system = "rabbitmq",
                messaging.operation.type = "process",
                messaging.destination.name = %delivery.exchange,
                live_activity.id = %command.activity_id,
                command.id = %command.id,
                app = %command.app,
                environment = %command.environment,
                action,
                outcome = Empty,
                retries = Empty,
            );
            let _ = span.set_parent(trace_parent(&delivery.properties));
            let started = Instant::now();
            let deliverer = worker.deliverer.clone();
            let carrying = command.clone();
            let carried = worker
                .runtime
                .spawn(async move { carry_out(&deliverer, &carrying).await }.instrument(span.clone()))
                .await;
            let (outcome, retries) = match carried {
                Ok(carried) => carried,
                Err(err) => {
                    warn!(command.id = %command.id, error = %err, "channel command task failed; requeued");
                    return requeue(&delivery).await;
                }
            };
            let result = outcome_label(&outcome);
            span.record("outcome", result);
            span.record("retries", retries);
            metrics::channel_command_retries(action).increment(u64::from(retries));
            metrics::channel_command_duration(action).record(started.elapsed().as_secs_f64());
            span.in_scope(|| log(&command, &outcome, retries));
            let report = ChannelReport {
                v: WireVersion::CURRENT,
                command_id: command.id,
                activity_id: command.activity_id,
                outcome,
            };
            // Built inside the command's span: the report carries its context.
            let message = match span.in_scope(|| worker.publisher.outgoing(&report)) {
                Ok(message) => message,
                Err(err) => {
                    warn!(command.id = %command.id, error = %err, "channel report not encoded; requeued");
                    return requeue(&delivery).await;
                }
            };
            match worker
                .publisher
                .publish_all_within(&[message], REPORT_PATIENCE)
                .instrument(span)
                .await
            {
                Ok(()) => {
                    metrics::channel_commands(action, result).increment(1);
                    ack(&delivery).await;
                }
                Err(err) => {
                    warn!(command.id = %command.id, error = %err, "channel report not confirmed; the command goes back to the queue");
                    requeue(&delivery).await;
                }
            }
        })
    }
}

/// Carries `command` out at Apple, retrying within the deliverer's limits;
/// also returns how many retries it took.
async fn carry_out(deliverer: &Deliverer<ApnsChannel>, command: &ChannelCommand) -> (ChannelOutcome, u32) {
    let channel = match deliverer.channels().get(&command.app).await {
        Ok(channel) => channel,
        Err(err) => {
            return (
                ChannelOutcome::Failed {
                    error: err.to_string(),
                },
                0,
            );
        }
    };
    let limits = deliverer.limits();
    let started = Instant::now();
    let mut retries = 0;
    let mut attempt = 0u32;
    loop {
        attempt = attempt.saturating_add(1);
        let answer = channel
            .channel_request(command.environment, &command.action, command.id)
            .await;
        let (reason, delay) = match answer {
            ChannelAttempt::Done(outcome) => return (outcome, retries),
            ChannelAttempt::Reauthenticate => {
                crate::channel::PushChannel::reauthenticate(&*channel).await;
                ("ExpiredProviderToken", limits.backoff(attempt))
            }
            ChannelAttempt::Retry { reason, after } => (reason, limits.delay(attempt, after)),
        };
        if limits.given_up(attempt, started.elapsed(), delay) {
            let error = format!("{reason} after {attempt} attempts");
            return (ChannelOutcome::Failed { error }, retries);
        }
        retries += 1;
        tokio::time::sleep(delay).await;
    }
}

fn log(command: &ChannelCommand, outcome: &ChannelOutcome, retries: u32) {
    let action = action_label(&command.action);
    match outcome {
        ChannelOutcome::Refused { status, reason } => warn!(
            live_activity.id = %command.activity_id,
            command.id = %command.id,
            action,
            status,
            reason = %reason,
            "Apple refused a Live Activity channel command"
        ),
        ChannelOutcome::Failed { error } => warn!(
            live_activity.id = %command.activity_id,
            command.id = %command.id,
            action,
            retries,
            error = %error,
            "a Live Activity channel command failed"
        ),
        _ => info!(
            live_activity.id = %command.activity_id,
            command.id = %command.id,
            action,
            outcome = outcome_label(outcome),
            retries,
            "Live Activity channel command carried out"
        ),
    }
}

/// The fixed metric label of an action.
fn action_label(action: &ChannelAction) -> &'static str {
    match action {
        ChannelAction::CreateChannel { .. } => "create_channel",
        ChannelAction::Broadcast { .. } => "broadcast",
        ChannelAction::DeleteChannel { .. } => "delete_channel",
    }
}

/// The fixed metric label of an outcome.
fn outcome_label(outcome: &ChannelOutcome) -> &'static str {
    match outcome {
        ChannelOutcome::Created { .. } => "created",
        ChannelOutcome::Sent => "sent",
        ChannelOutcome::Deleted => "deleted",
        ChannelOutcome::Refused { .. } => "refused",
        ChannelOutcome::Failed { .. } => "failed",
    }
}
