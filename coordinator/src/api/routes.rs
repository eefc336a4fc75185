//! The API's routes: the endpoints of the coordinator's roles registered
//! on the actix-web app, with the extractors' error answers, 421 for a
//! route of a role this coordinator does not run, 405 for a known path
//! asked with another method and 404 for the rest.

use actix_web::{HttpRequest, HttpResponse, web};
use clarion_runtime::health;

use super::{
    BODY_LIMIT, audience, audit, curve, held, live_activities, notification_list, notifications, openapi,
    registrations, replace, topics,
};
use crate::error::ApiError;
use crate::role::{Role, Roles};

/// Registers the routes of the API that `roles` serve (see
/// [`crate::role`]); a documented route of the other role is answered 421
/// by `other_methods`, the console's paths likewise.
pub fn configure(cfg: &mut web::ServiceConfig, roles: Roles) {
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
        .service(openapi::openapi_json);
    if roles.runs(Role::Api) {
        cfg.configure(app_facing);
    }
    cfg.configure(reads);
    if roles.runs(Role::Control) {
        cfg.configure(control);
    } else {
        cfg.configure(|cfg| console_elsewhere(cfg, roles));
    }
    cfg.configure(|cfg| other_methods(cfg, roles))
        .default_service(web::to(not_found));
}

/// The app-facing writes: the api role's own routes.
fn app_facing(cfg: &mut web::ServiceConfig) {
    cfg.service(registrations::put_registration)
        .service(registrations::get_registration)
        .service(registrations::delete_registration)
        .service(registrations::put_topic)
        .service(registrations::delete_topic)
        .service(crate::receipts::api::post_receipts);
}

/// Every GET under `/api/v1/notifications` — a notification's status,
/// curve, history and held tokens: served by both roles, so a router that
/// matches methods sends them all to the api role and one that matches
/// only paths may leave them on control.
fn reads(cfg: &mut web::ServiceConfig) {
    cfg.service(notification_list::list_notifications)
        .service(notifications::get_notification)
        .service(curve::get_curve)
        .service(held::get_held);
}

/// Sends and what an editor or operator does: the control role's routes.
fn control(cfg: &mut web::ServiceConfig) {
    cfg.service(topics::search_topics)
        .service(topics::get_topic)
        .service(audience::get_audience)
        .service(notifications::send_notification)
        .service(replace::replace_notification)
        .service(notifications::cancel_notification)
        .service(held::release_held)
        .service(held::discard_held)
        .service(audit::get_audit)
        .service(live_activities::create_activity)
        .service(live_activities::update_activity)
        .service(live_activities::get_activity)
        .service(live_activities::delete_activity_route);
}

/// The console's paths on a coordinator without the control role.
fn console_elsewhere(cfg: &mut web::ServiceConfig, roles: Roles) {
    let elsewhere =
        move |req: HttpRequest| async move { Err::<HttpResponse, _>(wrong_role(&req, Role::Control, roles)) };
    cfg.service(web::resource("/console").to(elsewhere))
        .service(web::resource("/console/{rest:.*}").to(elsewhere));
}

/// The answer to a request for a route that coordinators of `serving` serve.
fn wrong_role(req: &HttpRequest, serving: Role, running: Roles) -> ApiError {
    ApiError::WrongRole {
        method: req.method().to_string(),
        path: req.path().to_owned(),
        serving,
        running,
    }
}

/// Every documented path answers the methods it does not take with 405
/// and an `Allow` header listing the ones it does, straight from the OpenAPI
/// document, so the two cannot disagree. The handlers' resources are
/// guarded by method and registered first: these match only what they
/// turned away. A method the path does take was turned away because the
/// role that serves it does not run here (its handler is not registered):
/// 421, naming that role.
fn other_methods(cfg: &mut web::ServiceConfig, roles: Roles) {
    for (pattern, allow) in openapi::methods_by_path() {
        cfg.service(web::resource(pattern.as_str()).to(move |req: HttpRequest| {
            let allow = allow.clone();
            async move {
                let documented = allow.split(", ").any(|method| method == req.method().as_str());
                Err::<HttpResponse, _>(match roles.missing() {
                    Some(serving) if documented => wrong_role(&req, serving, roles),
                    _ => ApiError::MethodNotAllowed {
                        method: req.method().to_string(),
                        allow,
                    },
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
