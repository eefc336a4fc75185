//! The OpenAPI 3 document, generated from the handlers' annotations and
//! served at `/api/v1/openapi.json`. Every endpoint must be listed here.

use std::sync::LazyLock;

use actix_web::{HttpResponse, get, web};
use serde_json::Value;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{
    AppState, audience, audit, curve, held, live_activities, notification_list, notifications, registrations,
    replace, topics,
};
use crate::error::Problem;
use clarion_runtime::health;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Clarion",
        description = "Breaking-news push notifications to millions of devices through APNs and FCM. \
                       Every endpoint but /healthz, /readyz, /metrics and this document needs \
                       `Authorization: Bearer <key>` with the scope named in its description."
    ),
    paths(
        health::healthz,
        health::readyz,
        clarion_runtime::metrics::render,
        openapi_json,
        registrations::put_registration,
        registrations::get_registration,
        registrations::delete_registration,
        registrations::put_topic,
        registrations::delete_topic,
        topics::get_topic,
        topics::search_topics,
        audience::get_audience,
        notifications::send_notification,
        notification_list::list_notifications,
        notifications::get_notification,
        replace::replace_notification,
        curve::get_curve,
        notifications::cancel_notification,
        held::get_held,
        held::release_held,
        held::discard_held,
        audit::get_audit,
        live_activities::create_activity,
        live_activities::update_activity,
        live_activities::get_activity,
        live_activities::delete_activity_route,
        crate::receipts::api::post_receipts,
    ),
    components(schemas(Problem)),
    modifiers(&BearerKey),
    tags(
        (name = "registrations", description = "Devices and the topics they follow (scope `register`)"),
        (name = "topics", description = "Topic sizes (scope `send` or `admin`)"),
        (name = "notifications", description = "Sending alerts and following them (scope `send`)"),
        (name = "live-activities", description = "Live Activities on the lock screen, updated through APNs broadcast channels (scope `send`)"),
        (name = "held", description = "Tokens a tripped safety valve kept: look, release or discard (scope `admin`, audited)"),
        (name = "receipts", description = "What devices received and opened (scope `register`)"),
        (name = "audit", description = "Who did what (scope `admin`)"),
        (name = "health", description = "Liveness and readiness (open)"),
        (name = "meta", description = "This document (open)"),
    )
)]
pub struct ApiDoc;

struct BearerKey;

impl Modify for BearerKey {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme("api_key", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
    }
}

/// The generated document with the limits in force written in, before the
/// apps are (see [`super::served_document::ServedDocument`]).
pub fn generated(max_topics_per_device: u32) -> Value {
    match serde_json::to_value(ApiDoc::openapi()) {
        Ok(mut doc) => {
            super::limits::state_limits(&mut doc, max_topics_per_device);
            doc
        }
        Err(err) => serde_json::json!({"error": err.to_string()}),
    }
}

/// Every documented path as an actix-web pattern, with the methods it takes
/// (`GET, PUT, DELETE`): what a 405 answers in `Allow`. A `{topic}` holds
/// `/`, so it matches the rest of the path, as in the handlers' routes.
pub fn methods_by_path() -> &'static [(String, String)] {
    static METHODS: LazyLock<Vec<(String, String)>> = LazyLock::new(|| {
        ApiDoc::openapi()
            .paths
            .paths
            .iter()
            .map(|(path, item)| {
                let methods: Vec<&str> = [
                    ("GET", &item.get),
                    ("HEAD", &item.head),
                    ("POST", &item.post),
                    ("PUT", &item.put),
                    ("PATCH", &item.patch),
                    ("DELETE", &item.delete),
                    ("OPTIONS", &item.options),
                    ("TRACE", &item.trace),
                ]
                .into_iter()
                .filter_map(|(name, operation)| operation.as_ref().map(|_| name))
                .collect();
                (path.replace("{topic}", "{topic:.+}"), methods.join(", "))
            })
            .collect()
    });
    &METHODS
}

/// This OpenAPI document.
#[utoipa::path(tag = "meta", responses((status = 200, description = "OpenAPI 3 document", content_type = "application/json")))]
#[get("/api/v1/openapi.json")]
pub async fn openapi_json(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(state.openapi.current().to_string())
}
