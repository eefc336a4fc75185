//! `GET /api/v1/audience?topics=a,b`: how many devices a send to several
//! topics would reach — each topic's subscribers and an estimate of the
//! devices once those following several topics are counted once (the
//! console's compose page shows it as the editor picks topics).

use actix_web::{HttpResponse, get, web};
use clarion_proto::payload::MAX_TOPICS_PER_NOTIFICATION;
use clarion_proto::{SHARD_SPACE, TopicError};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::registrations::usable_app;
use super::topics::{TopicSize, size_of};
use super::{AppState, AppUse};
use crate::auth::{Caller, Scope};
use crate::error::{ApiError, Problem};
use crate::store::topics::distinct_devices;

/// Up to this many subscriptions in all, the deduplicated count is exact.
const EXACT_UP_TO: u64 = 200_000;
/// Beyond it, about this many subscriptions are sampled (whole shards).
const SAMPLED: u64 = 100_000;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AudienceQuery {
    /// 1 to 20 topic names, comma-separated.
    #[param(
        example = "breaking/uk,breaking/us",
        pattern = "^[A-Za-z0-9._~-]+(?:/[A-Za-z0-9._~-]+)*(?:,[A-Za-z0-9._~-]+(?:/[A-Za-z0-9._~-]+)*){0,19}$"
    )]
    pub topics: String,
    /// The app (`default` when absent).
    pub app: Option<String>,
}

/// The devices a send to `topics` would reach.
#[derive(Debug, Serialize, ToSchema)]
pub struct AudienceEstimate {
    pub topics: Vec<TopicSize>,
    /// Subscribers of the topics added up (a device following two counts twice).
    pub subscriptions: u64,
    /// Distinct devices following any of the topics: exact, or estimated
    /// from a sample of the shards when the topics are large.
    pub devices: u64,
    /// Whether `devices` was counted in full.
    pub exact: bool,
}

/// How many distinct devices a send to several topics would reach.
#[utoipa::path(
    tag = "topics",
    security(("api_key" = [])),
    params(AudienceQuery),
    responses(
        (status = 200, body = AudienceEstimate),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key has neither `send` nor `admin`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`app` names an app this installation does not serve", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "No topic, more than 20, or a malformed topic name", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable", body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/v1/audience")]
pub async fn get_audience(
    caller: Caller,
    state: web::Data<AppState>,
    query: web::Query<AudienceQuery>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Send)?;
    let query = query.into_inner();
    let app = usable_app(&caller, &state, query.app, AppUse::Read)?;
    let topics = topics_of(&query.topics)?;
    let mut sizes = Vec::with_capacity(topics.len());
    for topic in &topics {
        sizes.push(size_of(&state, &app, topic.clone()).await?);
    }
    let subscriptions: u64 = sizes.iter().map(|size| size.subscribers).sum();
    let largest = sizes.iter().map(|size| size.subscribers).max().unwrap_or(0);
    let (devices, exact) = if sizes.len() == 1 || subscriptions == 0 {
        (subscriptions, true)
    } else {
        let shard_end = shards_to_sample(subscriptions);
        let found = distinct_devices(&state.pool, &app, &topics, shard_end).await?;
        let scaled = found * u64::from(SHARD_SPACE) / shard_end as u64;
        (
            scaled.clamp(largest, subscriptions),
            shard_end as u32 == u32::from(SHARD_SPACE),
        )
    };
    Ok(HttpResponse::Ok().json(AudienceEstimate {
        topics: sizes,
        subscriptions,
        devices,
        exact,
    }))
}

/// The distinct topics of a comma-separated list, each checked. A name
/// longer than any topic may be is not refused: no device follows it, so it
/// counts 0 (the schema states the characters and the count, not lengths).
fn topics_of(list: &str) -> Result<Vec<String>, ApiError> {
    let mut topics: Vec<String> = Vec::new();
    for topic in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        match clarion_proto::validate_topic(topic) {
            Ok(()) | Err(TopicError::TooLong { .. }) => {}
            Err(err) => return Err(ApiError::Invalid(format!("`topics`: {err}"))),
        }
        if !topics.iter().any(|seen| seen == topic) {
            topics.push(topic.to_owned());
        }
    }
    if topics.is_empty() || topics.len() > MAX_TOPICS_PER_NOTIFICATION {
        return Err(ApiError::Invalid(format!(
            "`topics` must name 1 to {MAX_TOPICS_PER_NOTIFICATION} topics, comma-separated"
        )));
    }
    Ok(topics)
}

/// Shards `0..n` to count so that about [`SAMPLED`] subscriptions are read:
/// all of them up to [`EXACT_UP_TO`]. Shards are a uniform hash of the
/// token, so any run of them is a fair sample.
fn shards_to_sample(subscriptions: u64) -> i16 {
    let all = u64::from(SHARD_SPACE);
    if subscriptions <= EXACT_UP_TO {
        return all as i16;
    }
    let shards = (all * SAMPLED).div_ceil(subscriptions).clamp(1, all);
    shards as i16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_audiences_are_counted_in_full_and_large_ones_sampled() {
        assert_eq!(shards_to_sample(0), 1024);
        assert_eq!(shards_to_sample(EXACT_UP_TO), 1024);
        assert_eq!(shards_to_sample(1_000_000), 103);
        assert_eq!(shards_to_sample(10_000_000_000), 1);
    }

    #[test]
    fn topic_lists_are_checked_and_deduplicated() {
        assert_eq!(
            topics_of("a, b,a,,").unwrap(),
            vec!["a".to_owned(), "b".to_owned()]
        );
        assert!(topics_of(" , ").is_err());
        assert!(topics_of("a b").is_err());
        assert_eq!(
            topics_of(&"a".repeat(200)).unwrap().len(),
            1,
            "too long to exist: counts 0"
        );
        let too_many = (0..21).map(|i| format!("t{i}")).collect::<Vec<_>>().join(",");
        assert!(topics_of(&too_many).is_err());
    }
}
