//! Scheduled sends: the window a `send_at` must fall in, and firing a
//! notification whose time has come.
//!
//! Firing is driven by the database, not by timers: the scheduler actor
//! ([`crate::send::scheduler`]) calls [`fire_next`] every quarter second
//! on every replica. Each call fires at most one notification in its own
//! transaction: it claims the scheduled notification due first
//! (`FOR UPDATE SKIP LOCKED`), re-reads it under the lock, plans it exactly
//! as a send-now is planned ([`crate::send::accept::plan_locked`]), which marks
//! it `harvesting` with its `fired_at`, commits, and nudges the job relay.
//! Replicas racing for the same notification never both plan it: one holds
//! the row, the other skips it or, once it is committed, no longer finds
//! it scheduled. A coordinator down at the time fires it when it (or any
//! replica) is back; a crash before the commit leaves it scheduled.

use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use clarion_runtime::db::DbError;
use tracing::{Instrument, info, warn};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use uuid::Uuid;

use crate::metrics;
use crate::send::accept::{PlanError, Sending, committed, plan_locked};
use crate::store::StoreError;
use crate::store::notifications::{self as store, Status};
use crate::store::scheduled::{self, Due};

/// How far ahead a notification may be scheduled.
pub const MAX_AHEAD: Duration = Duration::from_secs(30 * 24 * 3600);

/// What is wrong with a request's `send_at` (the API answers 422 with it).
#[derive(Debug, thiserror::Error)]
pub enum SendAtError {
    #[error("`send_at` {shown:?} is not an RFC 3339 date-time such as 2030-01-31T18:00:00Z ({reason})")]
    Unreadable {
        /// The first 40 characters of what was sent.
        shown: String,
        reason: chrono::ParseError,
    },
    #[error(
        "`send_at` {} is not in the future (it is now {}); leave `send_at` out to send now",
        send_at.to_rfc3339(),
        now.to_rfc3339()
    )]
    NotAhead {
        send_at: DateTime<Utc>,
        now: DateTime<Utc>,
    },
    #[error(
        "`send_at` {} is more than 30 days ahead (the latest is {})",
        send_at.to_rfc3339(),
        latest.to_rfc3339()
    )]
    TooFarAhead {
        send_at: DateTime<Utc>,
        latest: DateTime<Utc>,
    },
}

/// `send_at` as a request writes it, checked: RFC 3339, in the future, at
/// most [`MAX_AHEAD`] from `now`; kept to the microsecond (what PostgreSQL
/// stores, so a replay compares equal).
pub fn send_at_within_window(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, SendAtError> {
    let send_at = parse_send_at(text)?;
    if send_at <= now {
        return Err(SendAtError::NotAhead { send_at, now });
    }
    let latest = now + chrono::Duration::from_std(MAX_AHEAD).unwrap_or(chrono::Duration::MAX);
    if send_at > latest {
        return Err(SendAtError::TooFarAhead { send_at, latest });
    }
    Ok(send_at)
}

/// `send_at` read as RFC 3339 (any offset), to the microsecond.
pub fn parse_send_at(text: &str) -> Result<DateTime<Utc>, SendAtError> {
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&Utc).trunc_subsecs(6))
        .map_err(|reason| SendAtError::Unreadable {
            shown: text.chars().take(40).collect(),
            reason,
        })
}

/// What one call of [`fire_next`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fired {
    /// Planned now: its jobs are committed.
    Planned { id: Uuid, jobs: u32 },
    /// Its stored content could not be read: failed with the reason.
    Failed { id: Uuid, reason: String },
}

/// Fires the scheduled notification due first, if any (one transaction,
/// taken only when one is due).
pub async fn fire_next(sending: Sending<'_>) -> Result<Option<Fired>, PlanError> {
    let mut conn = sending.pool.get().await.map_err(DbError::from)?;
    if !scheduled::any_due(&*conn).await? {
        return Ok(None);
    }
    let tx = conn.transaction().await?;
    let Some(due) = scheduled::claim_due(&tx).await? else {
        return Ok(None);
    };
    // Re-read under the lock the claim took.
    let stored = match store::lock(&tx, due.id).await {
        Ok(Some(stored)) if stored.status == Status::Scheduled => stored,
        Ok(_) => return Ok(None),
        Err(StoreError::Corrupt(detail)) => {
            let reason = format!("scheduled notification could not be fired: {detail}");
            scheduled::fail_unfireable(&tx, due.id, &reason).await?;
            tx.commit().await?;
            warn!(notification.id = %due.id, reason = %reason, "scheduled notification failed");
            return Ok(Some(Fired::Failed { id: due.id, reason }));
        }
        Err(err) => return Err(err.into()),
    };
    let span = fire_span(&due, stored.trace_id.as_deref());
    let jobs = plan_locked(sending, &tx, due.id, &stored.notification, stored.lane)
        .instrument(span.clone())
        .await?;
    tx.commit().await?;
    committed(sending, stored.lane, jobs);
    let late = (Utc::now() - due.send_at).to_std().unwrap_or_default();
    metrics::SCHEDULED_FIRED.get().increment(1);
    metrics::SCHEDULED_FIRE_LATENESS.get().record(late.as_secs_f64());
    span.in_scope(|| {
        info!(
            notification.id = %due.id,
            send_at = %due.send_at.to_rfc3339(),
            late_ms = late.as_millis() as u64,
            jobs,
            "scheduled notification fired"
        );
    });
    Ok(Some(Fired::Planned { id: due.id, jobs }))
}

/// The span of a firing: a child of the send that scheduled it (its trace
/// headers were kept), so the notification stays one trace, end to end.
fn fire_span(due: &Due, trace_id: Option<&str>) -> tracing::Span {
    let span = tracing::info_span!(
        "fire scheduled notification",
        notification.id = %due.id,
        notification.trace_id = trace_id.unwrap_or(""),
        notification.send_at = %due.send_at.to_rfc3339(),
    );
    let parent = clarion_proto::trace_context::extract(|name| {
        due.trace_context
            .iter()
            .find(|(header, _)| header == name)
            .map(|(_, value)| value.as_str())
    });
    let _ = span.set_parent(parent);
    span
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_at_must_be_ahead_but_within_thirty_days() {
        let now: DateTime<Utc> = "2030-01-01T12:00:00Z".parse().expect("a time");
        let at = |text: &str| send_at_within_window(text, now);
        assert!(at("2030-01-01T12:00:01Z").is_ok());
        assert_eq!(
            at("2030-01-01T13:00:00+01:00").ok(),
            None,
            "12:00 UTC is now, not ahead"
        );
        assert!(at("2030-01-31T12:00:00Z").is_ok(), "exactly 30 days");
        for refused in [
            "2029-12-31T12:00:00Z",
            "2030-01-31T12:00:00.000001Z",
            "tomorrow",
            "2030-01-02",
            "",
        ] {
            let err = at(refused).expect_err(refused);
            assert!(err.to_string().contains("`send_at`"), "{refused}: {err}");
        }
    }

    #[test]
    fn send_at_is_kept_to_the_microsecond() {
        let at = parse_send_at("2030-01-01T12:00:00.123456789+02:00").expect("valid");
        assert_eq!(at.to_rfc3339(), "2030-01-01T10:00:00.123456+00:00");
    }
}
