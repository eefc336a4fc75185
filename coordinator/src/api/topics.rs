//! Topic sizes for the newsroom: how many devices a send would reach.

use actix_web::{HttpResponse, get, web};
use clarion_proto::validate_topic;
use serde::{Deserialize, Serialize};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{IntoParams, ToSchema};

use super::registrations::{AppQuery, usable_app};
use super::{AppState, AppUse, platform_schema};
use crate::auth::{Caller, Scope};
use crate::error::{ApiError, Problem};
use crate::send::topic_counter::{CountError, GetTopicCounts};
use crate::store::registrations::DEFAULT_APP;
use crate::store::topics::{TopicCounts, count, search};

/// Topics a search lists at most, and by default.
const MAX_LIMIT: u32 = 100;
const DEFAULT_LIMIT: u32 = 20;

/// Subscribers of one topic, at most `CLARION_TOPIC_COUNT_MAX_AGE_SECS` old.
#[derive(Debug, Serialize)]
pub struct TopicSize {
    pub topic: String,
    pub subscribers: u64,
    /// Each platform's subscribers, keyed by platform name.
    #[serde(flatten)]
    pub platforms: TopicCounts,
}

impl utoipa::PartialSchema for TopicSize {
    // `example` is what the derive writes (OpenAPI 3.0's word).
    #[allow(deprecated)]
    fn schema() -> RefOr<Schema> {
        let topic = ObjectBuilder::new()
            .schema_type(Type::String)
            .example(Some(serde_json::json!("breaking/uk")));
        platform_schema::object_with_platforms(
            Some("Subscribers of one topic, at most `CLARION_TOPIC_COUNT_MAX_AGE_SECS` old."),
            vec![("topic", topic.into()), ("subscribers", platform_schema::count())],
            platform_schema::count,
            Vec::new(),
        )
    }
}

impl ToSchema for TopicSize {}

/// How many devices follow a topic.
#[utoipa::path(
    tag = "topics",
    security(("api_key" = [])),
    params(("topic" = String, Path, description = "Topic name; may contain `/`"), AppQuery),
    responses(
        (status = 200, body = TopicSize),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key has neither `send` nor `admin`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`app` names an app this installation does not serve", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Malformed topic name", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable", body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/v1/topics/{topic:.+}")]
pub async fn get_topic(
    caller: Caller,
    state: web::Data<AppState>,
    topic: web::Path<String>,
    query: web::Query<AppQuery>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Send)?;
    let app = usable_app(&caller, &state, query.into_inner().app, AppUse::Read)?;
    let topic = topic.into_inner();
    validate_topic(&topic).map_err(|err| ApiError::Invalid(err.to_string()))?;
    Ok(HttpResponse::Ok().json(size_of(&state, &app, topic).await?))
}

/// The subscribers of `topic` in `app`: from the topic counter's cache for
/// the default app (whose counts planning uses too), counted on each
/// request for the others.
pub(super) async fn size_of(state: &AppState, app: &str, topic: String) -> Result<TopicSize, ApiError> {
    if app != DEFAULT_APP {
        let counts = count(&state.pool, app, &topic)
            .await
            .map_err(|err| ApiError::Unavailable(err.to_string()))?;
        return Ok(TopicSize::of(topic, counts));
    }
    let counts = state
        .control()?
        .topic_counter
        .send(GetTopicCounts {
            topic: topic.clone(),
            max_age: state.topic_count_max_age,
        })
        .await
        .map_err(|_| CountError::Stopped)
        .and_then(|result| result)
        .map_err(|err| ApiError::Unavailable(err.to_string()))?;
    Ok(TopicSize::of(topic, counts))
}

impl TopicSize {
    fn of(topic: String, counts: TopicCounts) -> Self {
        Self {
            topic,
            subscribers: counts.total(),
            platforms: counts,
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct TopicSearch {
    /// Text the topic name holds (case-insensitive); every topic when empty.
    #[param(max_length = 128, example = "breaking")]
    pub q: Option<String>,
    /// Topics listed at most, 1 to 100 (default 20).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    /// The app (`default` when absent).
    pub app: Option<String>,
}

/// Topic names found.
#[derive(Debug, Serialize, ToSchema)]
pub struct TopicNames {
    /// In name order.
    #[schema(example = json!(["breaking/uk", "breaking/us"]))]
    pub topics: Vec<String>,
}

/// Topics that devices follow, by name: suggestions for a composer.
#[utoipa::path(
    tag = "topics",
    security(("api_key" = [])),
    params(TopicSearch),
    responses(
        (status = 200, body = TopicNames),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key has neither `send` nor `admin`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`app` names an app this installation does not serve", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`limit` out of range or `q` too long", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable", body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/v1/topics")]
pub async fn search_topics(
    caller: Caller,
    state: web::Data<AppState>,
    query: web::Query<TopicSearch>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Send)?;
    let query = query.into_inner();
    let app = usable_app(&caller, &state, query.app, AppUse::Read)?;
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::Invalid(format!("`limit` must be 1 to {MAX_LIMIT}")));
    }
    // Topic names hold no NUL; PostgreSQL text cannot either.
    let text = query.q.unwrap_or_default().replace('\0', "");
    if text.chars().count() > clarion_proto::topic::MAX_TOPIC_LEN {
        return Err(ApiError::Invalid(format!(
            "`q` is longer than {} characters",
            clarion_proto::topic::MAX_TOPIC_LEN
        )));
    }
    let topics = search(&state.pool, &app, text.trim(), limit).await?;
    Ok(HttpResponse::Ok().json(TopicNames { topics }))
}
