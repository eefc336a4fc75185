//! The newsroom console at `/console/`: a page an editor signs in to with
//! an API key to compose, send or schedule, follow and cancel alerts and
//! look back at past ones.
//!
//! The page is static (HTML, CSS and a few JavaScript modules in
//! `coordinator/console/`, embedded in the binary by [`assets`]); it talks
//! to the JSON API with the session cookie of [`session`]. Every console
//! response carries a strict Content-Security-Policy: scripts, styles and
//! connections from this origin only, no inline script, no framing.

pub mod assets;
pub mod session;

use actix_web::middleware::DefaultHeaders;
use actix_web::{HttpResponse, web};
use clarion_runtime::PgPool;

use crate::config::ConsoleSettings;

/// What the console's handlers share.
pub struct Console {
    pub pool: PgPool,
    pub settings: ConsoleSettings,
}

/// The console's Content-Security-Policy: nothing but this origin, no
/// inline script or style attribute, no plugins, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// Registers the console's page, assets and session endpoints.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/console").get(|| async {
        HttpResponse::PermanentRedirect()
            .insert_header(("Location", "/console/"))
            .finish()
    }))
    .service(
        web::scope("/console")
            .wrap(
                DefaultHeaders::new()
                    .add(("Content-Security-Policy", CONTENT_SECURITY_POLICY))
                    .add(("X-Content-Type-Options", "nosniff"))
                    .add(("X-Frame-Options", "DENY"))
                    .add(("Referrer-Policy", "no-referrer"))
                    .add(("Cache-Control", "no-cache")),
            )
            .service(session::sign_in)
            .service(session::current)
            .service(session::sign_out)
            .service(assets::asset),
    );
}
