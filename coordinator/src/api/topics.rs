//! Topic sizes for the newsroom: how many devices a send would reach.

use actix_web::{HttpResponse, get, web};
use clarion_proto::validate_topic;
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use crate::actors::topic_counter::{CountError, GetTopicCounts};
use crate::auth::{Caller, Scope};
use crate::error::{ApiError, Problem};

/// Subscribers of one topic, at most `CLARION_TOPIC_COUNT_MAX_AGE_SECS` old.
#[derive(Debug, Serialize, ToSchema)]
pub struct TopicSize {
    #[schema(example = "breaking/uk")]
    pub topic: String,
    pub subscribers: u64,
    pub ios: u64,
    pub android: u64,
}

/// How many devices follow a topic.
#[utoipa::path(
    tag = "topics",
    security(("api_key" = [])),
    params(("topic" = String, Path, description = "Topic name; may contain `/`")),
    responses(
        (status = 200, body = TopicSize),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key has neither `send` nor `admin`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Malformed topic name", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable", body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/v1/topics/{topic:.+}")]
pub async fn get_topic(
    caller: Caller,
    state: web::Data<AppState>,
    topic: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Send)?;
    let topic = topic.into_inner();
    validate_topic(&topic).map_err(|err| ApiError::Invalid(err.to_string()))?;
    let counts = state
        .topic_counter
        .send(GetTopicCounts {
            topic: topic.clone(),
            max_age: state.topic_count_max_age,
        })
        .await
        .map_err(|_| CountError::Stopped)
        .and_then(|result| result)
        .map_err(|err| ApiError::Unavailable(err.to_string()))?;
    Ok(HttpResponse::Ok().json(TopicSize {
        topic,
        subscribers: counts.total(),
        ios: counts.ios,
        android: counts.android,
    }))
}
