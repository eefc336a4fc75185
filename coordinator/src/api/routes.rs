//! The API's routes: every endpoint registered on the actix-web app, with
//! the extractors' error answers, 405 for a known path asked with another
//! method and 404 for the rest.

use actix_web::{HttpRequest, HttpResponse, web};
use clarion_runtime::health;

use super::{
    BODY_LIMIT, audience, audit, curve, held, notification_list, notifications, openapi, registrations,
    replace, topics,
};
use crate::error::ApiError;

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
