//! The console's routes: its page, assets and session endpoints under
//! `/console`, every answer with the console's security headers.

use actix_web::middleware::DefaultHeaders;
use actix_web::{HttpResponse, web};

use super::{assets, session};

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
