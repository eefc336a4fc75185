//! Every metric the dispatcher emits, in one place: its name, its help and
//! its labels (each label with fixed, low-cardinality values: never a
//! token, an app or an error text). Nothing else in the dispatcher spells a
//! metric name; code asks here for the handle it records on.
//!
//! [`describe`] gives the recorder every metric's help (the `# HELP` lines
//! of `/metrics`); the runtime's recorder ([`clarion_runtime::metrics`])
//! renders them.

pub use ::metrics::{Counter, Gauge, Histogram};
use clarion_proto::Platform;

/// A metric's name, help and labels.
pub struct Metric {
    pub name: &'static str,
    pub help: &'static str,
    pub labels: &'static [&'static str],
}

/// Token batches handled, by what became of them (`delivered`,
/// `already_delivered`, `requeued`).
pub const BATCHES: Metric = Metric {
    name: "clarion_dispatcher_batches_total",
    help: "Token batches handled, by outcome: delivered (reported and acked), already_delivered \
           (a redelivered copy acked without a push), requeued (given back to the queue).",
    labels: &["platform", "outcome"],
};

pub const PUSHES: Metric = Metric {
    name: "clarion_dispatcher_pushes_total",
    help: "Tokens of the batches delivered, by result: sent, failed, invalid, unregistered, expired, \
           dry_run, cancelled, held_back.",
    labels: &["platform", "result"],
};

pub const PUSH_FAILURES: Metric = Metric {
    name: "clarion_dispatcher_push_failures_total",
    help: "Pushes counted failed, by the provider's reason or the dispatcher's (a fixed label each).",
    labels: &["platform", "reason"],
};

pub const RETRIES: Metric = Metric {
    name: "clarion_dispatcher_retries_total",
    help: "Push attempts made again after an answer worth a retry (429, 5xx, connection trouble).",
    labels: &["platform"],
};

pub const BATCH_DURATION: Metric = Metric {
    name: "clarion_dispatcher_batch_duration_seconds",
    help: "Time from taking a token batch to knowing what became of every token.",
    labels: &["platform"],
};

pub const BREAKER_OPENED: Metric = Metric {
    name: "clarion_dispatcher_breaker_opened_total",
    help: "Segments held back because every one of their first pushes was answered gone, invalid \
           or as if misconfigured.",
    labels: &["platform"],
};

pub const PAYLOADS_PREPARED: Metric = Metric {
    name: "clarion_dispatcher_payloads_prepared_total",
    help: "Pushes prepared (payload and headers), once per notification, environment and text.",
    labels: &["platform"],
};

pub const STREAMS_IN_FLIGHT: Metric = Metric {
    name: "clarion_dispatcher_http2_streams_in_flight",
    help: "HTTP/2 requests in flight to a provider origin.",
    labels: &["origin"],
};

pub const CONNECTIONS_OPENED: Metric = Metric {
    name: "clarion_dispatcher_http2_connections_opened_total",
    help: "HTTP/2 connections opened to a provider origin.",
    labels: &["origin"],
};

pub const CONNECTIONS_RETIRED: Metric = Metric {
    name: "clarion_dispatcher_http2_connections_retired_total",
    help: "HTTP/2 connections taken out of rotation, by reason: goaway, broken, timeouts, ping.",
    labels: &["origin", "reason"],
};

/// Live Activity channel commands carried out at Apple (iOS only).
pub const CHANNEL_COMMANDS: Metric = Metric {
    name: "clarion_dispatcher_channel_commands_total",
    help: "Live Activity channel commands carried out and reported, by action (create_channel, \
           broadcast, delete_channel) and outcome (created, sent, deleted, refused, failed).",
    labels: &["action", "outcome"],
};

pub const CHANNEL_COMMAND_RETRIES: Metric = Metric {
    name: "clarion_dispatcher_channel_command_retries_total",
    help: "Live Activity channel requests made again after an answer worth a retry (429, 5xx, no \
           answer), by action.",
    labels: &["action"],
};

pub const CHANNEL_COMMAND_DURATION: Metric = Metric {
    name: "clarion_dispatcher_channel_command_duration_seconds",
    help: "Time from taking a Live Activity channel command to Apple's final answer, retries \
           included, by action.",
    labels: &["action"],
};

/// Every metric above.
pub const ALL: [&Metric; 13] = [
    &BATCHES,
    &PUSHES,
    &PUSH_FAILURES,
    &RETRIES,
    &BATCH_DURATION,
    &BREAKER_OPENED,
    &PAYLOADS_PREPARED,
    &STREAMS_IN_FLIGHT,
    &CONNECTIONS_OPENED,
    &CONNECTIONS_RETIRED,
    &CHANNEL_COMMANDS,
    &CHANNEL_COMMAND_RETRIES,
    &CHANNEL_COMMAND_DURATION,
];

/// Gives the recorder every metric's help (once per process is enough;
/// again is harmless).
pub fn describe() {
    ::metrics::describe_counter!(BATCHES.name, BATCHES.help);
    ::metrics::describe_counter!(PUSHES.name, PUSHES.help);
    ::metrics::describe_counter!(PUSH_FAILURES.name, PUSH_FAILURES.help);
    ::metrics::describe_counter!(RETRIES.name, RETRIES.help);
    ::metrics::describe_histogram!(BATCH_DURATION.name, ::metrics::Unit::Seconds, BATCH_DURATION.help);
    ::metrics::describe_counter!(BREAKER_OPENED.name, BREAKER_OPENED.help);
    ::metrics::describe_counter!(PAYLOADS_PREPARED.name, PAYLOADS_PREPARED.help);
    ::metrics::describe_gauge!(STREAMS_IN_FLIGHT.name, STREAMS_IN_FLIGHT.help);
    ::metrics::describe_counter!(CONNECTIONS_OPENED.name, CONNECTIONS_OPENED.help);
    ::metrics::describe_counter!(CONNECTIONS_RETIRED.name, CONNECTIONS_RETIRED.help);
    ::metrics::describe_counter!(CHANNEL_COMMANDS.name, CHANNEL_COMMANDS.help);
    ::metrics::describe_counter!(CHANNEL_COMMAND_RETRIES.name, CHANNEL_COMMAND_RETRIES.help);
    ::metrics::describe_histogram!(
        CHANNEL_COMMAND_DURATION.name,
        ::metrics::Unit::Seconds,
        CHANNEL_COMMAND_DURATION.help
    );
}

pub fn batches(platform: Platform, outcome: &'static str) -> Counter {
    ::metrics::counter!(BATCHES.name, "platform" => platform.as_str(), "outcome" => outcome)
}

pub fn pushes(platform: Platform, result: &'static str) -> Counter {
    ::metrics::counter!(PUSHES.name, "platform" => platform.as_str(), "result" => result)
}

pub fn push_failures(platform: Platform, reason: &'static str) -> Counter {
    ::metrics::counter!(PUSH_FAILURES.name, "platform" => platform.as_str(), "reason" => reason)
}

pub fn retries(platform: Platform) -> Counter {
    ::metrics::counter!(RETRIES.name, "platform" => platform.as_str())
}

pub fn batch_duration(platform: Platform) -> Histogram {
    ::metrics::histogram!(BATCH_DURATION.name, "platform" => platform.as_str())
}

pub fn breaker_opened(platform: Platform) -> Counter {
    ::metrics::counter!(BREAKER_OPENED.name, "platform" => platform.as_str())
}

pub fn payloads_prepared(platform: Platform) -> Counter {
    ::metrics::counter!(PAYLOADS_PREPARED.name, "platform" => platform.as_str())
}

pub fn channel_commands(action: &'static str, outcome: &'static str) -> Counter {
    ::metrics::counter!(CHANNEL_COMMANDS.name, "action" => action, "outcome" => outcome)
}

pub fn channel_command_retries(action: &'static str) -> Counter {
    ::metrics::counter!(CHANNEL_COMMAND_RETRIES.name, "action" => action)
}

pub fn channel_command_duration(action: &'static str) -> Histogram {
    ::metrics::histogram!(CHANNEL_COMMAND_DURATION.name, "action" => action)
}

pub fn streams_in_flight(origin: &str) -> Gauge {
    ::metrics::gauge!(STREAMS_IN_FLIGHT.name, "origin" => origin.to_owned())
}

pub fn connections_opened(origin: &str) -> Counter {
    ::metrics::counter!(CONNECTIONS_OPENED.name, "origin" => origin.to_owned())
}

pub fn connections_retired(origin: &str, reason: &'static str) -> Counter {
    ::metrics::counter!(CONNECTIONS_RETIRED.name, "origin" => origin.to_owned(), "reason" => reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_named_once_in_the_service_s_namespace() {
        let mut names: Vec<&str> = ALL.iter().map(|metric| metric.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len(), "a name given twice");
        for metric in ALL {
            assert!(metric.name.starts_with("clarion_dispatcher_"), "{}", metric.name);
            assert!(
                !metric.help.is_empty() && !metric.labels.is_empty(),
                "{}",
                metric.name
            );
        }
    }
}
