//! The coordinator's HTTP API: routes, shared state and request limits.
//!
//! Topic names hold `/` (`breaking/uk`), so every path that ends in a topic
//! matches the rest of the path (`{topic:.+}`).

pub mod audience;
pub mod audit;
pub mod curve;
pub mod held;
pub mod limits;
pub mod middleware;
pub mod notification_list;
pub mod notifications;
pub mod openapi;
pub mod registrations;
pub mod replace;
pub mod topics;

use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use actix_web::{HttpRequest, HttpResponse, web};
use clarion_proto::Names;
use clarion_runtime::PgPool;
use clarion_runtime::amqp::publisher::Publisher;
use clarion_runtime::apps::AppsFile;
use clarion_runtime::health;

use crate::actors::job_relay::JobRelay;
use crate::actors::topic_counter::TopicCounter;
use crate::error::ApiError;
use crate::progress::completion::Valve;

/// Largest JSON body the API takes. A registration of 100 topics of 128
/// bytes, or a notification at the providers' 4 KB payload limit with 20
/// topics, fit well under it.
pub const BODY_LIMIT: usize = 64 * 1024;

/// What the handlers share.
pub struct AppState {
    pub pool: PgPool,
    pub topic_counter: Addr<TopicCounter>,
    pub relay: Addr<JobRelay>,
    /// Tokens a shard job should cover (`CLARION_TOKENS_PER_JOB`).
    pub tokens_per_job: u64,
    /// The safety valve's thresholds (completing a cancelled notification).
    pub valve: Valve,
    /// For control messages (cancellations).
    pub publisher: Publisher,
    pub names: Names,
    pub max_topics_per_device: u32,
    pub topic_count_max_age: Duration,
    /// The OpenAPI document served (built once, with the limits in force).
    pub openapi: String,
    /// The apps served beside `default` (`CLARION_APPS_FILE`).
    pub apps: Arc<AppsFile>,
}

impl AppState {
    /// Ok when `caller` may use `app` (403 otherwise) and the installation
    /// serves it (422 naming the apps it serves otherwise).
    pub fn check_app(&self, caller: &crate::auth::Caller, app: &str) -> Result<(), ApiError> {
        caller.check_app(app)?;
        self.check_app_exists(app)
    }

    /// Ok when the installation serves `app`; a 422 naming the apps it
    /// serves otherwise.
    fn check_app_exists(&self, app: &str) -> Result<(), ApiError> {
        if self.apps.knows(app) {
            return Ok(());
        }
        Err(ApiError::Invalid(format!(
            "app `{app}` is not one this installation serves: {} (CLARION_APPS_FILE)",
            self.apps.ids().join(", ")
        )))
    }
}

/// Registers every route of the API on an actix-web app.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.configure(health::configure)
        .configure(clarion_runtime::metrics::configure)
        .app_data(
            web::JsonConfig::default()
                .limit(BODY_LIMIT)
                .error_handler(|err, _req| ApiError::from_json_error(&err).into()),
        )
        .app_data(
            web::QueryConfig::default()
                .error_handler(|err, _req| ApiError::Invalid(format!("invalid query: {err}")).into()),
        )
        .app_data(
            web::PathConfig::default()
                .error_handler(|err, _req| ApiError::Invalid(format!("invalid path: {err}")).into()),
        )
        .service(openapi::openapi_json)
        .service(registrations::put_registration)
        .service(registrations::get_registration)
        .service(registrations::delete_registration)
        .service(registrations::put_topic)
        .service(registrations::delete_topic)
        .service(topics::search_topics)
        .service(topics::get_topic)
        .service(audience::get_audience)
        .service(notifications::send_notification)
        .service(notification_list::list_notifications)
        .service(notifications::get_notification)
        .service(replace::replace_notification)
        .service(curve::get_curve)
        .service(notifications::cancel_notification)
        .service(held::get_held)
        .service(held::release_held)
        .service(held::discard_held)
        .service(audit::get_audit)
        .service(crate::receipts::api::post_receipts)
        .configure(other_methods)
        .default_service(web::to(not_found));
}

/// Every documented path answers the methods it does not take with 405
/// and an `Allow` header listing the ones it does, straight from the OpenAPI
/// document, so the two cannot disagree. The handlers' resources are
/// guarded by method and registered first: these match only what they
/// turned away.
fn other_methods(cfg: &mut web::ServiceConfig) {
    for (pattern, allow) in openapi::methods_by_path() {
        cfg.service(web::resource(pattern.as_str()).to(move |req: HttpRequest| {
            let allow = allow.clone();
            async move {
                Err::<HttpResponse, _>(ApiError::MethodNotAllowed {
                    method: req.method().to_string(),
                    allow,
                })
            }
        }));
    }
}

async fn not_found(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::NotFound(format!(
        "no endpoint {} {}",
        req.method(),
        req.path()
    )))
}
