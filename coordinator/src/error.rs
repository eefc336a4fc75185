//! Errors of the HTTP API, answered as `application/problem+json` (RFC 9457)
//! with a stable `type` per kind, so clients and dashboards can branch on it.

use actix_web::http::{StatusCode, header};
use actix_web::{HttpResponse, ResponseError, error::JsonPayloadError};
use clarion_runtime::db::DbError;
use serde::Serialize;
use tracing::error;
use utoipa::ToSchema;

use crate::auth::AuthError;
use crate::group_commit::WriteError;
use crate::role::{Role, Roles};
use crate::send::accept::{AcceptError, PlanError};
use crate::send::send_at::SendAtError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    Unauthenticated(&'static str),
    /// The key may not do this (scope, lane, topic, app), or its send
    /// allowance is used up.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// A console request that changes something without its session's
    /// `X-CSRF-Token`.
    #[error(
        "this request changes something and its X-CSRF-Token header is missing or does not match the console session's"
    )]
    CsrfRejected,
    #[error("{0}")]
    NotFound(String),
    /// Well-formed JSON whose content breaks a rule.
    #[error("{0}")]
    Invalid(String),
    /// A body that is not the JSON this endpoint takes.
    #[error("{0}")]
    Malformed(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// A known path asked with a method it does not take; `allow` lists
    /// the ones it does (the `Allow` header).
    #[error("{method} is not allowed on this path; it takes {allow}")]
    MethodNotAllowed { method: String, allow: String },
    /// A route of the API that coordinators of another role serve
    /// (`--role`): the router in front sent it to the wrong pods.
    #[error(
        "{method} {path} is served by coordinators running the role `{serving}`; this one runs `{running}` (CLARION_ROLE); send it to a `{serving}` coordinator"
    )]
    WrongRole {
        method: String,
        path: String,
        serving: Role,
        running: Roles,
    },
    #[error("{0}")]
    Conflict(String),
    /// A dependency (database, broker) is unavailable; retry later.
    #[error("{0}")]
    Unavailable(String),
    /// A bug or an unexpected failure; the detail is logged, not returned.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// Fixed, low-cardinality label: the problem `type` suffix and a metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            ApiError::Unauthenticated(_) => "unauthenticated",
            ApiError::Auth(AuthError::RateLimited { .. }) => "rate-limited",
            ApiError::Auth(_) => "forbidden",
            ApiError::CsrfRejected => "csrf-rejected",
            ApiError::NotFound(_) => "not-found",
            ApiError::Invalid(_) => "invalid-request",
            ApiError::Malformed(_) => "malformed-request",
            ApiError::PayloadTooLarge(_) => "payload-too-large",
            ApiError::UnsupportedMediaType(_) => "unsupported-media-type",
            ApiError::MethodNotAllowed { .. } => "method-not-allowed",
            ApiError::WrongRole { .. } => "wrong-role",
            ApiError::Conflict(_) => "conflict",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::Internal(_) => "internal",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            ApiError::Unauthenticated(_) => "Authentication required",
            ApiError::Auth(AuthError::RateLimited { .. }) => "Too many sends",
            ApiError::Auth(_) => "Not allowed for this key",
            ApiError::CsrfRejected => "Cross-site request refused",
            ApiError::NotFound(_) => "Not found",
            ApiError::Invalid(_) => "Invalid request",
            ApiError::Malformed(_) => "Malformed request body",
            ApiError::PayloadTooLarge(_) => "Request body too large",
            ApiError::UnsupportedMediaType(_) => "Unsupported media type",
            ApiError::MethodNotAllowed { .. } => "Method not allowed",
            ApiError::WrongRole { .. } => "Served by another coordinator role",
            ApiError::Conflict(_) => "Conflict",
            ApiError::Unavailable(_) => "Service unavailable",
            ApiError::Internal(_) => "Internal error",
        }
    }

    /// Maps the JSON extractor's failures to the right 4xx.
    pub fn from_json_error(err: &JsonPayloadError) -> Self {
        match err {
            JsonPayloadError::OverflowKnownLength { length, limit } => ApiError::PayloadTooLarge(format!(
                "the body is {length} bytes; this endpoint takes at most {limit}"
            )),
            JsonPayloadError::Overflow { limit } => ApiError::PayloadTooLarge(format!(
                "the body is larger than the {limit} bytes this endpoint takes"
            )),
            JsonPayloadError::ContentType => {
                ApiError::UnsupportedMediaType("send the body as `Content-Type: application/json`".into())
            }
            JsonPayloadError::Deserialize(err) => ApiError::Malformed(format!("invalid JSON: {err}")),
            other => ApiError::Malformed(format!("unreadable body: {other}")),
        }
    }
}

/// An RFC 9457 problem document.
#[derive(Debug, Serialize, ToSchema)]
pub struct Problem {
    /// Stable identifier of the kind of problem, `urn:clarion:problem:<kind>`.
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    /// What is wrong with this request, in words.
    pub detail: String,
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            ApiError::Auth(AuthError::RateLimited { .. }) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Auth(_) | ApiError::CsrfRejected => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Malformed(_) => StatusCode::BAD_REQUEST,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::WrongRole { .. } => StatusCode::MISDIRECTED_REQUEST,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        let detail = match self {
            ApiError::Internal(detail) => {
                error!(error = %detail, "internal error answering a request");
                "an unexpected error occurred; it has been logged".to_owned()
            }
            other => other.to_string(),
        };
        let problem = Problem {
            kind: format!("urn:clarion:problem:{}", self.kind()),
            title: self.title().to_owned(),
            status: status.as_u16(),
            detail,
        };
        let mut response = HttpResponse::build(status);
        response.content_type("application/problem+json");
        if matches!(self, ApiError::Unauthenticated(_)) {
            response.insert_header((header::WWW_AUTHENTICATE, "Bearer"));
        }
        if let ApiError::MethodNotAllowed { allow, .. } = self {
            response.insert_header((header::ALLOW, allow.as_str()));
        }
        if matches!(self, ApiError::Unavailable(_)) {
            response.insert_header((header::RETRY_AFTER, "5"));
        }
        if let ApiError::Auth(AuthError::RateLimited { retry_after_secs, .. }) = self {
            response.insert_header((header::RETRY_AFTER, retry_after_secs.to_string()));
        }
        response.json(problem)
    }
}

impl From<DbError> for ApiError {
    fn from(err: DbError) -> Self {
        match err {
            DbError::Pool(err) => ApiError::Unavailable(format!("the database is unavailable: {err}")),
            DbError::Query(err) if err.is_closed() => {
                ApiError::Unavailable("the database connection was lost; retry".into())
            }
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Db(err) => err.into(),
            StoreError::UnknownToken => ApiError::NotFound(
                "this token is not registered (in this app: another app's registrations are reached with ?app=); register it first with PUT /api/v1/registrations/{token}"
                    .into(),
            ),
            StoreError::TooManyTopics { limit } => {
                ApiError::Invalid(format!("a device may follow at most {limit} topics"))
            }
            StoreError::Corrupt(detail) => ApiError::Internal(detail),
        }
    }
}

impl From<PlanError> for ApiError {
    fn from(err: PlanError) -> Self {
        match err {
            PlanError::TopicCounterDown => ApiError::Unavailable(err.to_string()),
            PlanError::Store(err) => err.into(),
        }
    }
}

impl From<AcceptError> for ApiError {
    fn from(err: AcceptError) -> Self {
        match err {
            AcceptError::Conflict(_) => ApiError::Conflict(err.to_string()),
            AcceptError::Vanished(_) => ApiError::Internal(err.to_string()),
            AcceptError::Plan(err) => err.into(),
            AcceptError::Store(err) => err.into(),
        }
    }
}

/// A `send_at` out of its window or unreadable: 422 saying what is wrong.
impl From<SendAtError> for ApiError {
    fn from(err: SendAtError) -> Self {
        ApiError::Invalid(err.to_string())
    }
}

impl From<tokio_postgres::Error> for ApiError {
    fn from(err: tokio_postgres::Error) -> Self {
        ApiError::from(DbError::Query(err))
    }
}

impl From<WriteError> for ApiError {
    /// A write refused for what it is keeps its own answer; anything that
    /// may pass (a full queue, a batch that failed as a whole, a deadline, a
    /// lost race in the database) is a 503 with `Retry-After`.
    fn from(err: WriteError) -> Self {
        match err {
            WriteError::Refused(err) if !err.is_transient() => err.into(),
            other => ApiError::Unavailable(other.to_string()),
        }
    }
}

impl From<crate::live_activity::ActivityError> for ApiError {
    fn from(err: crate::live_activity::ActivityError) -> Self {
        use crate::live_activity::ActivityError;
        match err {
            ActivityError::Invalid(_) => ApiError::Invalid(err.to_string()),
            ActivityError::Full { .. } | ActivityError::Ended(_) | ActivityError::Deleted(_) => {
                ApiError::Conflict(err.to_string())
            }
            ActivityError::NotFound(_) => ApiError::NotFound(err.to_string()),
            ActivityError::Store(err) => err.into(),
        }
    }
}
