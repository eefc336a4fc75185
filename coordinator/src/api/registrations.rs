//! Device registrations: the apps tell Clarion which topics a token follows.

use std::collections::HashSet;

use actix_web::{HttpResponse, delete, get, put, web};
use chrono::{DateTime, Utc};
use clarion_proto::platform::{canonical_token, is_plausible_token, normalize_token, token_prefix};
use clarion_proto::{
    ApnsEnvironment, Platform, RegistrationKind, SubscriptionError, TokenError, WebSubscription,
    checked_kind, normalize_locale, validate_topic,
};
use serde::{Deserialize, Serialize};
use tracing::debug;
use utoipa::{IntoParams, ToSchema};

use super::{AppState, AppUse};
use crate::auth::{Caller, Scope};
use crate::error::{ApiError, Problem};
use crate::group_commit::registrations::{Change, Written};
use crate::store::StoreError;
use crate::store::registrations::{self as store, Device, StoredRegistration};

/// The topics a device follows, replacing whatever it followed before.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistrationRequest {
    /// The app the device runs (`default` when absent): a token registered
    /// under two apps is two registrations.
    #[serde(default)]
    #[schema(example = "default")]
    pub app: Option<String>,
    // Its description, names and example are stated by `api/limits.rs`.
    pub platform: String,
    /// One to `CLARION_MAX_TOPICS_PER_DEVICE` topic names.
    #[schema(example = json!(["breaking/uk", "sport/football"]))]
    pub topics: Vec<String>,
    /// iOS only: `production` (default) or `sandbox` for development builds.
    #[serde(default)]
    #[schema(example = "production")]
    pub environment: Option<String>,
    /// The device's language (BCP 47, e.g. `fr-CA`): a notification's
    /// `localizations` are matched against it, the most specific first.
    #[serde(default)]
    #[schema(example = "fr-CA")]
    pub locale: Option<String>,
    /// The app sends device receipts (`POST /api/v1/receipts`) for the
    /// notifications it gets: the device counts in the reporting audience
    /// of the device-side figures. Default false.
    #[serde(default)]
    pub receipts: Option<bool>,
    /// Web only, and required there: the browser's `PushSubscription`
    /// (`subscription.toJSON()`): an `https` endpoint of an allowed push
    /// service (`CLARION_WEBPUSH_ALLOWED_HOSTS`), `keys.p256dh` (65-byte
    /// uncompressed P-256 public key, base64url) and `keys.auth` (16 bytes,
    /// base64url).
    #[serde(default)]
    #[schema(value_type = Option<Object>, example = json!({"endpoint": "https://fcm.googleapis.com/fcm/send/…",
        "keys": {"p256dh": "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
                 "auth": "BTBZMqHH6r4Tts7J_aSIgg"}}))]
    pub subscription: Option<WebSubscription>,
    /// What the token is for: `device` (default; alerts) or, on iOS,
    /// `push_to_start` (an `Activity<T>.pushToStartToken`: it gets only the
    /// Live Activity starts of its `attributes_type`, never an alert).
    #[serde(default)]
    #[schema(example = "device")]
    pub kind: Option<String>,
    /// `push_to_start` only, and required there: the ActivityAttributes
    /// type the token starts (`MatchAttributes`).
    #[serde(default)]
    #[schema(example = "MatchAttributes")]
    pub attributes_type: Option<String>,
}

/// A registration as stored.
#[derive(Debug, Serialize, ToSchema)]
pub struct Registration {
    #[schema(example = "default")]
    pub app: String,
    pub token: String,
    #[schema(value_type = String, example = "ios")]
    pub platform: Platform,
    /// APNs environment (iOS only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "production")]
    pub environment: Option<ApnsEnvironment>,
    /// The device's language tag, in lower case; absent when not given.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "fr-ca")]
    pub locale: Option<String>,
    /// The app sends device receipts for this device.
    pub receipts: bool,
    /// Web only: the push subscription as stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub subscription: Option<WebSubscription>,
    /// `device` or `push_to_start`.
    #[schema(value_type = String, example = "device")]
    pub kind: RegistrationKind,
    /// A push-to-start token's ActivityAttributes type.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "MatchAttributes")]
    pub attributes_type: Option<String>,
    /// Sorted topic names.
    pub topics: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<StoredRegistration> for Registration {
    fn from(stored: StoredRegistration) -> Self {
        Self {
            environment: stored.platform.has_environments().then_some(stored.environment),
            app: stored.app,
            token: stored.token,
            platform: stored.platform,
            locale: stored.locale,
            receipts: stored.receipts,
            subscription: stored.subscription,
            kind: stored.kind,
            attributes_type: stored.attributes_type,
            topics: stored.topics,
            created_at: stored.created_at,
            updated_at: stored.updated_at,
        }
    }
}

/// Register a device, or replace the topics it follows.
#[utoipa::path(
    tag = "registrations",
    security(("api_key" = [])),
    params(("token" = String, Path, description = "APNs device token (64 hex), FCM registration token, or a web subscription's id chosen by the site (16 to 128 of `A-Za-z0-9_-`)")),
    request_body = RegistrationRequest,
    responses(
        (status = 200, description = "The stored registration", body = Registration),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or unknown API key", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key lacks the `register` scope", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Unknown platform, implausible token, bad topics, locale, web subscription, kind or attributes type (`push_to_start` is iOS only and needs `attributes_type`; the message names the field)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable or the queue of registration writes is full; retry after `Retry-After` (the write is idempotent)", body = Problem, content_type = "application/problem+json", headers(("Retry-After" = u64))),
    )
)]
#[put("/api/v1/registrations/{token}")]
pub async fn put_registration(
    caller: Caller,
    state: web::Data<AppState>,
    token: web::Path<String>,
    body: web::Json<RegistrationRequest>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Register)?;
    let body = body.into_inner();
    let app = usable_app(&caller, &state, body.app, AppUse::Write)?;
    let platform: Platform = body.platform.parse().map_err(invalid)?;
    let environment = match body.environment.as_deref() {
        None => ApnsEnvironment::Production,
        Some(name) if platform.has_environments() => name.parse().map_err(invalid)?,
        Some(_) => return Err(invalid(TokenError::NoEnvironments)),
    };
    let locale = body
        .locale
        .as_deref()
        .map(normalize_locale)
        .transpose()
        .map_err(invalid)?;
    let token = normalize_token(platform, &token).map_err(invalid)?;
    let subscription = checked_subscription(platform, body.subscription, &state)?;
    let (kind, attributes_type) =
        checked_kind(platform, body.kind.as_deref(), body.attributes_type).map_err(invalid)?;
    let topics = validated_topics(body.topics, state.max_topics_per_device)?;
    let device = Device {
        platform,
        environment,
        locale,
        receipts: body.receipts.unwrap_or(false),
        subscription,
        kind,
        attributes_type,
    };
    let stored = stored(
        state
            .write(app, token.clone(), Change::Replace { device, topics })
            .await?,
    )?;
    debug!(token = %token_prefix(&token), %platform, topics = stored.topics.len(), "registered device");
    Ok(HttpResponse::Ok().json(Registration::from(stored)))
}

/// The platform and topics of a registered device.
#[utoipa::path(
    tag = "registrations",
    security(("api_key" = [])),
    params(("token" = String, Path, description = "Device token"), AppQuery),
    responses(
        (status = 200, body = Registration),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Token not registered (in this app), or `app` names an app this installation does not serve", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a plausible token", body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/v1/registrations/{token}")]
pub async fn get_registration(
    caller: Caller,
    state: web::Data<AppState>,
    token: web::Path<String>,
    query: web::Query<AppQuery>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Register)?;
    let app = usable_app(&caller, &state, query.into_inner().app, AppUse::Read)?;
    let token = lookup_token(&token)?;
    let load = async {
        match store::get(&state.pool, &app, &token).await? {
            None => Ok::<_, ApiError>(None),
            Some(stored) => Ok(Some(web::Bytes::from(json_bytes(&Registration::from(stored))?))),
        }
    };
    let body = state
        .registration_reads
        .read((app.clone(), token.clone()), load)
        .await?
        .ok_or(StoreError::UnknownToken)?;
    Ok(HttpResponse::Ok().content_type("application/json").body(body))
}

/// `value` as JSON bytes.
fn json_bytes(value: &impl Serialize) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(value).map_err(|err| ApiError::Internal(format!("cannot encode the answer: {err}")))
}

/// Forget a device (the app was uninstalled or the user opted out).
#[utoipa::path(
    tag = "registrations",
    security(("api_key" = [])),
    params(("token" = String, Path, description = "Device token"), AppQuery),
    responses(
        (status = 204, description = "Gone (also when it was not registered)"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`app` names an app this installation does not serve", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a plausible token", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable or the queue of registration writes is full; retry after `Retry-After`", body = Problem, content_type = "application/problem+json", headers(("Retry-After" = u64))),
    )
)]
#[delete("/api/v1/registrations/{token}")]
pub async fn delete_registration(
    caller: Caller,
    state: web::Data<AppState>,
    token: web::Path<String>,
    query: web::Query<AppQuery>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Register)?;
    let app = usable_app(&caller, &state, query.into_inner().app, AppUse::Read)?;
    let token = lookup_token(&token)?;
    let removed = state.write(app, token.clone(), Change::Delete).await?;
    let topics = match removed {
        Written::Removed(rows) => rows,
        Written::Stored(_) => 0,
    };
    debug!(token = %token_prefix(&token), topics, "unregistered device");
    Ok(HttpResponse::NoContent().finish())
}

/// Follow one more topic (the app's "bell" button).
#[utoipa::path(
    tag = "registrations",
    security(("api_key" = [])),
    params(
        ("token" = String, Path, description = "Device token"),
        ("topic" = String, Path, description = "Topic name; may contain `/`"),
        AppQuery,
    ),
    responses(
        (status = 200, description = "The registration with the topic added", body = Registration),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Token not registered", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad topic, implausible token or too many topics", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable or the queue of registration writes is full; retry after `Retry-After`", body = Problem, content_type = "application/problem+json", headers(("Retry-After" = u64))),
    )
)]
#[put("/api/v1/registrations/{token}/topics/{topic:.+}")]
pub async fn put_topic(
    caller: Caller,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    query: web::Query<AppQuery>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Register)?;
    let app = usable_app(&caller, &state, query.into_inner().app, AppUse::Write)?;
    let (token, topic) = path.into_inner();
    let token = lookup_token(&token)?;
    validate_topic(&topic).map_err(invalid)?;
    let max_topics = state.max_topics_per_device;
    let stored = stored(
        state
            .write(app, token, Change::AddTopic { topic, max_topics })
            .await?,
    )?;
    Ok(HttpResponse::Ok().json(Registration::from(stored)))
}

/// Stop following one topic.
#[utoipa::path(
    tag = "registrations",
    security(("api_key" = [])),
    params(
        ("token" = String, Path, description = "Device token"),
        ("topic" = String, Path, description = "Topic name; may contain `/`"),
        AppQuery,
    ),
    responses(
        (status = 204, description = "No longer followed (also when it was not)"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`app` names an app this installation does not serve", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad topic or implausible token", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable or the queue of registration writes is full; retry after `Retry-After`", body = Problem, content_type = "application/problem+json", headers(("Retry-After" = u64))),
    )
)]
#[delete("/api/v1/registrations/{token}/topics/{topic:.+}")]
pub async fn delete_topic(
    caller: Caller,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    query: web::Query<AppQuery>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Scope::Register)?;
    let app = usable_app(&caller, &state, query.into_inner().app, AppUse::Read)?;
    let (token, topic) = path.into_inner();
    let token = lookup_token(&token)?;
    validate_topic(&topic).map_err(invalid)?;
    state.write(app, token, Change::RemoveTopic { topic }).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Which app a request is about.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AppQuery {
    /// The app (`default` when absent).
    pub app: Option<String>,
}

/// The app named (`default` when none), checked: a valid id, served by
/// this installation (see [`AppUse`]), and one the key may use.
pub(super) fn usable_app(
    caller: &Caller,
    state: &AppState,
    app: Option<String>,
    used_for: AppUse,
) -> Result<String, ApiError> {
    let app = app.unwrap_or_else(clarion_proto::app::default_app);
    clarion_proto::validate_app(&app).map_err(invalid)?;
    state.check_app(caller, &app, used_for)?;
    Ok(app)
}

/// A web registration's subscription, checked (an `https` endpoint of an
/// allowed push service, a P-256 key, a 16-byte secret); none on other
/// platforms, which may not carry one.
fn checked_subscription(
    platform: Platform,
    subscription: Option<WebSubscription>,
    state: &AppState,
) -> Result<Option<WebSubscription>, ApiError> {
    match (platform, subscription) {
        (Platform::Web, None) => Err(invalid(SubscriptionError::Missing)),
        (Platform::Web, Some(subscription)) => {
            subscription
                .validate(&state.webpush_allowed_hosts)
                .map_err(invalid)?;
            Ok(Some(subscription))
        }
        (_, Some(_)) => Err(invalid(SubscriptionError::NotWeb)),
        (_, None) => Ok(None),
    }
}

/// De-duplicates and checks a topic set. The count is checked as sent, as
/// the OpenAPI description states it (`maxItems`).
fn validated_topics(topics: Vec<String>, max: u32) -> Result<Vec<String>, ApiError> {
    if topics.len() > max as usize {
        return Err(ApiError::Invalid(format!(
            "a device may follow at most {max} topics; got {}",
            topics.len()
        )));
    }
    let mut seen = HashSet::with_capacity(topics.len());
    let mut unique = Vec::with_capacity(topics.len());
    for topic in topics {
        validate_topic(&topic).map_err(invalid)?;
        if seen.insert(topic.clone()) {
            unique.push(topic);
        }
    }
    if unique.is_empty() {
        return Err(ApiError::Invalid(
            "a registration needs at least one topic; DELETE the registration to follow nothing".into(),
        ));
    }
    Ok(unique)
}

/// The registration a replacement or a topic added answers with.
fn stored(written: Written) -> Result<StoredRegistration, ApiError> {
    match written {
        Written::Stored(stored) => Ok(*stored),
        Written::Removed(_) => Err(ApiError::Internal(
            "a registration write answered without the registration".into(),
        )),
    }
}

/// A token from the path when its platform is not known.
fn lookup_token(token: &str) -> Result<String, ApiError> {
    if is_plausible_token(token) {
        Ok(canonical_token(token))
    } else {
        Err(invalid(TokenError::NotAToken))
    }
}

fn invalid(err: impl std::fmt::Display) -> ApiError {
    ApiError::Invalid(err.to_string())
}
