//! The console's files, embedded in the binary at build time so the
//! console works with no network but the coordinator's (no CDN).
//!
//! uPlot (MIT, `vendor/`) draws the delivery curve; everything else is
//! ours and has no build step.

use actix_web::{HttpResponse, get, web};

use crate::error::ApiError;

struct Asset {
    path: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $content_type:expr) => {
        Asset {
            path: $path,
            content_type: $content_type,
            bytes: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/console/", $path)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("console.css", "text/css; charset=utf-8"),
    asset!("js/app.js", JS),
    asset!("js/api.js", JS),
    asset!("js/dom.js", JS),
    asset!("js/signin.js", JS),
    asset!("js/compose.js", JS),
    asset!("js/preview.js", JS),
    asset!("js/progress.js", JS),
    asset!("js/history.js", JS),
    asset!("js/live.js", JS),
    asset!("js/live_templates.js", JS),
    asset!("vendor/uPlot.iife.min.js", JS),
    asset!("vendor/uPlot.min.css", "text/css; charset=utf-8"),
];

/// `/console/` is the page; everything else under it is one of its files.
#[get("/{path:.*}")]
pub async fn asset(path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let path = path.into_inner();
    let wanted = if path.is_empty() {
        "index.html"
    } else {
        path.as_str()
    };
    if wanted == super::platforms::PATH {
        return Ok(super::platforms::response());
    }
    let asset = ASSETS
        .iter()
        .find(|asset| asset.path == wanted)
        .ok_or_else(|| ApiError::NotFound(format!("no console file {wanted:?}")))?;
    Ok(HttpResponse::Ok()
        .content_type(asset.content_type)
        .body(asset.bytes))
}
