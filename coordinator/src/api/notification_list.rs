//! `GET /api/v1/notifications`: what was sent, newest first, for the console
//! and for anyone looking back — filtered by topic, status, creation time
//! and text, a page at a time.

use actix_web::{HttpResponse, get, web};
use chrono::{DateTime, Utc};
use clarion_runtime::db::DbError;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::AppState;
use super::notifications::{NotificationStatus, StatusSnapshots, status_of};
use super::snapshots::{snapshot_of, unshared};
use crate::auth::{Caller, Scope};
use crate::error::{ApiError, Problem};
use crate::store::lanes::Lane;
use crate::store::notification_list::{self, ListFilter};
use crate::store::notifications::Status;

/// Items a page holds at most, and by default.
const MAX_LIMIT: u32 = 200;
const DEFAULT_LIMIT: u32 = 50;
/// Longest text searched for.
const MAX_QUERY_CHARS: usize = 200;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only notifications sent to this topic (among others).
    pub topic: Option<String>,
    /// Only notifications in this status.
    #[param(pattern = "^(accepted|scheduled|harvesting|dispatching|complete|failed|cancelled)$")]
    pub status: Option<String>,
    /// Created at or after this time (RFC 3339).
    #[param(value_type = Option<DateTime<Utc>>)]
    pub from: Option<String>,
    /// Created before this time (RFC 3339); nothing matches when it is
    /// not after `from`.
    #[param(value_type = Option<DateTime<Utc>>)]
    pub until: Option<String>,
    /// Text in the title or body (case-insensitive, taken literally;
    /// empty or blank: no filter).
    #[param(max_length = 200)]
    pub q: Option<String>,
    /// Items per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page; the newest when absent.
    #[param(pattern = "^[0-9]{1,15}_[0-9a-f]{32}$")]
    pub cursor: Option<String>,
}

/// One notification in a list: the headline figures of its status.
#[derive(Debug, Serialize, ToSchema)]
pub struct NotificationSummary {
    pub id: Uuid,
    #[schema(example = "complete")]
    pub status: String,
    pub topics: Vec<String>,
    pub title: Option<String>,
    pub lane: Lane,
    pub dry_run: bool,
    pub created_at: DateTime<Utc>,
    /// When it is (or was) scheduled to fire; null for a send-now.
    pub send_at: Option<DateTime<Utc>>,
    /// Devices harvested (both platforms).
    pub audience_total: u64,
    /// Share of the whole audience (`audience_total`) accepted by Apple /
    /// Google, in percent.
    pub delivered_percent: f64,
    /// Share of the reachable audience (less the devices reported gone)
    /// accepted by Apple / Google, in percent: the figure the console's
    /// progress page and history show, and the one 90in2 is judged on.
    pub delivered_percent_of_reachable: f64,
    /// Milliseconds from the send (or the firing of a scheduled one) until
    /// 90% of the reachable audience was accepted; null until then.
    pub t90_ms: Option<u32>,
    /// Provider-side: 90% accepted within two minutes; null while still open.
    pub ninety_in_two: Option<bool>,
    /// Device-side 90in2 (`device.ninety_in_two` of the status): 90% of the
    /// reporting audience received it within two minutes; null while open,
    /// when nobody reports, and for a dry run.
    pub device_ninety_in_two: Option<bool>,
    /// Share of the reporting audience that opened it, in percent; null for
    /// a dry run or a notification that never fired.
    pub opened_percent: Option<f64>,
    /// Fingerprint of the key that sent it (never the key).
    pub sender_key_id: String,
    /// Its full status.
    pub href: String,
}

/// A page of notifications, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct NotificationPage {
    pub items: Vec<NotificationSummary>,
    /// Pass as `cursor` for the next (older) page; null on the last page.
    pub next_cursor: Option<String>,
}

/// What was sent, newest first: filter by topic, status, creation time
/// (`from` inclusive, `until` exclusive) and text in the title or body.
#[utoipa::path(
    tag = "notifications",
    security(("api_key" = [])),
    params(ListQuery),
    responses(
        (status = 200, body = NotificationPage),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key lacks the `send` scope", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A bad filter, limit or cursor", body = Problem, content_type = "application/problem+json"),
        (status = 503, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/v1/notifications")]
pub async fn list_notifications(
    caller: Caller,
    state: web::Data<AppState>,
    snapshots: web::Data<StatusSnapshots>,
    query: web::Query<ListQuery>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Send)?;
    let filter = filter_of(query.into_inner())?;
    let conn = state.pool.get().await.map_err(DbError::from)?;
    let page = notification_list::list(&*conn, &filter).await?;
    drop(conn);
    let next_cursor = (page.len() == filter.limit as usize)
        .then(|| page.last().map(|n| cursor_of(n.created_at, n.id)))
        .flatten();
    let mut items = Vec::with_capacity(page.len());
    for stored in page {
        let sender_key_id = stored.api_key_id.clone();
        let title = stored.notification.title.clone();
        let id = stored.id;
        // The status pollers' snapshot when there is one (a send in flight
        // is computed once per interval, whoever asks); else this one,
        // kept for them.
        let compute = async { snapshot_of(status_of(&state, stored).await?) };
        let status = snapshots.get(id, compute).await.map_err(unshared)?;
        items.push(summary(&status.value, title, sender_key_id));
    }
    Ok(HttpResponse::Ok().json(NotificationPage { items, next_cursor }))
}

fn summary(status: &NotificationStatus, title: Option<String>, sender_key_id: String) -> NotificationSummary {
    NotificationSummary {
        id: status.id,
        status: status.status.clone(),
        topics: status.topics.clone(),
        title,
        lane: status.lane,
        dry_run: status.dry_run,
        created_at: status.created_at,
        send_at: status.send_at,
        audience_total: status.audience.total,
        delivered_percent: status.delivered_percent,
        delivered_percent_of_reachable: status.delivered_percent_of_reachable,
        t90_ms: status.timings.t90_ms,
        ninety_in_two: status.ninety_in_two,
        device_ninety_in_two: status.device.as_ref().and_then(|device| device.ninety_in_two),
        opened_percent: status.device.as_ref().map(|device| device.opened_percent),
        sender_key_id,
        href: status.links.self_.clone(),
    }
}

/// The query checked and turned into a filter; 422 saying what is wrong.
fn filter_of(query: ListQuery) -> Result<ListFilter, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::Invalid(format!("`limit` must be 1 to {MAX_LIMIT}")));
    }
    let status = match query.status.as_deref() {
        None => None,
        Some(name) => Some(Status::named(name).ok_or_else(|| {
            ApiError::Invalid(
                "`status` must be accepted, scheduled, harvesting, dispatching, complete, failed or cancelled"
                    .into(),
            )
        })?),
    };
    if let Some(topic) = &query.topic {
        clarion_proto::topic::validate_topic(topic)
            .map_err(|err| ApiError::Invalid(format!("`topic`: {err}")))?;
    }
    // No title holds a NUL (PostgreSQL text cannot): searching for one
    // finds what the rest of the text finds.
    let text = query
        .q
        .map(|q| q.replace('\0', ""))
        .filter(|q| !q.trim().is_empty());
    if text.as_ref().is_some_and(|q| q.chars().count() > MAX_QUERY_CHARS) {
        return Err(ApiError::Invalid(format!(
            "`q` is longer than {MAX_QUERY_CHARS} characters"
        )));
    }
    let after = match query.cursor.as_deref() {
        None => None,
        Some(cursor) => Some(
            parse_cursor(cursor)
                .ok_or_else(|| ApiError::Invalid("`cursor` is not one this endpoint gave".into()))?,
        ),
    };
    Ok(ListFilter {
        topic: query.topic,
        status,
        from: time_filter("from", query.from.as_deref())?,
        until: time_filter("until", query.until.as_deref())?,
        text,
        after,
        limit,
    })
}

/// The time filter `name` (`from` or `until`), read here rather than by
/// the query extractor so a bad one is a 422 that names it.
fn time_filter(name: &str, value: Option<&str>) -> Result<Option<DateTime<Utc>>, ApiError> {
    value
        .map(|text| {
            DateTime::parse_from_rfc3339(text)
                .map(|at| at.with_timezone(&Utc))
                .map_err(|err| {
                    ApiError::Invalid(format!(
                        "`{name}` must be an RFC 3339 time such as 2026-12-04T09:30:00Z ({err}); got {text:?}"
                    ))
                })
        })
        .transpose()
}

/// `<microseconds since the epoch>_<id in hex>` of the last item.
fn cursor_of(created_at: DateTime<Utc>, id: Uuid) -> String {
    format!("{}_{}", created_at.timestamp_micros(), id.simple())
}

fn parse_cursor(cursor: &str) -> Option<(DateTime<Utc>, Uuid)> {
    let (micros, id) = cursor.split_once('_')?;
    let at = DateTime::from_timestamp_micros(micros.parse::<i64>().ok().filter(|m| *m >= 0)?)?;
    let id = Uuid::try_parse(id).ok().filter(|_| id.len() == 32)?;
    Some((at, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_what_it_was_made_of() {
        let at = DateTime::from_timestamp_micros(1_764_600_000_123_456).unwrap();
        let id = Uuid::now_v7();
        assert_eq!(parse_cursor(&cursor_of(at, id)), Some((at, id)));
        for bad in [
            "",
            "_",
            "12_",
            "-5_00000000000000000000000000000000",
            "1_xyz",
            "1_0000",
        ] {
            assert_eq!(parse_cursor(bad), None, "{bad:?}");
        }
    }
}
