//! Console sign-in: an API key exchanged for a server-side session.
//!
//! The browser gets a random token in an `HttpOnly`, `SameSite=Strict`
//! cookie (`Secure` when served over TLS) and never the key: it does not
//! keep the key in any storage. The database keeps the token's digest, the
//! key's digest and a CSRF token ([`crate::store::console_sessions`]). A
//! request carrying the cookie acts as that key, as the keys file has it
//! now; one that changes something (any method but GET and HEAD) must send
//! the session's CSRF token in `X-CSRF-Token` as well — a page on another
//! site can make the browser send the cookie, never read the token.

use actix_web::cookie::{Cookie, SameSite, time};
use actix_web::http::Method;
use actix_web::{HttpRequest, HttpResponse, delete, get, post, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tracing::info;

use super::Console;
use crate::auth::{ApiKeys, Caller, Scope, keys};
use crate::error::ApiError;
use crate::store::audit::{self, Action};
use crate::store::console_sessions as store;

/// The session cookie's name.
pub const COOKIE: &str = "clarion_session";

/// The header that carries the session's CSRF token.
pub const CSRF_HEADER: &str = "x-csrf-token";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignIn {
    pub api_key: String,
}

/// What the console page needs to know about its session.
#[derive(Debug, Serialize)]
pub struct SessionInfo {
    /// The key's name in the keys file (its fingerprint otherwise).
    pub key_name: String,
    pub key_id: String,
    /// Send with every request that changes something, as `X-CSRF-Token`.
    pub csrf_token: String,
    pub expires_at: DateTime<Utc>,
    /// A send to more devices than this asks the editor to confirm.
    pub confirm_above: u64,
    /// `CLARION_TRACE_URL_TEMPLATE`, when set.
    pub trace_url_template: Option<String>,
}

// Paths are relative to the `/console` scope of `super::routes::configure`.

/// Signs in: 200 with the session and its cookie, 401 for an unknown key,
/// 403 for a key that may not send.
#[post("/session")]
pub async fn sign_in(
    request: HttpRequest,
    console: web::Data<Console>,
    keys: web::Data<ApiKeys>,
    body: web::Json<SignIn>,
) -> Result<HttpResponse, ApiError> {
    let api_key = body.into_inner().api_key;
    let caller = keys
        .identify(api_key.trim())
        .ok_or(ApiError::Unauthenticated("unknown API key"))?;
    caller.require(Scope::Send)?;
    let token = hex::encode(rand::random::<[u8; 32]>());
    let csrf_token = hex::encode(rand::random::<[u8; 32]>());
    let lifetime = chrono::Duration::hours(i64::from(console.settings.session_hours));
    let expires_at = Utc::now() + lifetime;
    store::create(
        &console.pool,
        &digest(&token),
        &keys::digest(api_key.trim()),
        &csrf_token,
        expires_at,
    )
    .await?;
    record(&console, &caller, "signed in").await?;
    info!(key = %caller.key_name, key_id = %caller.key_id, "console sign-in");
    let cookie = Cookie::build(COOKIE, token)
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(over_tls(&request))
        .max_age(time::Duration::seconds(lifetime.num_seconds()))
        .finish();
    Ok(HttpResponse::Ok()
        .cookie(cookie)
        .json(info_of(&console, caller, csrf_token, expires_at)))
}

/// The signed-in session: 200, or 401 when there is none. Asked by the
/// page before it signs in, so the 401 says what is missing: the session
/// cookie (an `Authorization` header is no session).
#[get("/session")]
pub async fn current(
    request: HttpRequest,
    console: web::Data<Console>,
    keys: web::Data<ApiKeys>,
) -> Result<HttpResponse, ApiError> {
    let session = session_of(&request, &console).await?;
    let caller = caller_of(&keys, &session)?;
    Ok(HttpResponse::Ok().json(info_of(&console, caller, session.csrf_token, session.expires_at)))
}

/// Signs out: the session is deleted and the cookie cleared.
#[delete("/session")]
pub async fn sign_out(
    request: HttpRequest,
    console: web::Data<Console>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    if let Some(cookie) = request.cookie(COOKIE) {
        store::delete(&console.pool, &digest(cookie.value())).await?;
    }
    record(&console, &caller, "signed out").await?;
    let mut expired = Cookie::build(COOKIE, "")
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(over_tls(&request))
        .finish();
    expired.make_removal();
    Ok(HttpResponse::NoContent().cookie(expired).finish())
}

/// The caller a request's session cookie stands for (see the module notes).
pub async fn caller(request: &HttpRequest, keys: &ApiKeys, token: &str) -> Result<Caller, ApiError> {
    let console = request
        .app_data::<web::Data<Console>>()
        .ok_or_else(|| ApiError::Internal("the console is not configured on this app".into()))?;
    let session = find(console, token).await?;
    let caller = caller_of(keys, &session)?;
    let safe = matches!(*request.method(), Method::GET | Method::HEAD);
    if !safe {
        let presented = request
            .headers()
            .get(CSRF_HEADER)
            .map(|value| value.as_bytes())
            .unwrap_or_default();
        if !bool::from(presented.ct_eq(session.csrf_token.as_bytes())) {
            return Err(ApiError::CsrfRejected);
        }
    }
    Ok(caller)
}

/// The key a session signed in with, as the keys file has it now.
fn caller_of(keys: &ApiKeys, session: &store::ConsoleSession) -> Result<Caller, ApiError> {
    keys.identify_digest(&session.key_digest)
        .ok_or(ApiError::Unauthenticated(
            "the API key this console session signed in with is no longer valid; sign in again",
        ))
}

async fn session_of(request: &HttpRequest, console: &Console) -> Result<store::ConsoleSession, ApiError> {
    let cookie = request.cookie(COOKIE).ok_or(ApiError::Unauthenticated(
        "not signed in to the console: the session cookie (clarion_session) is missing; sign in with POST /console/session",
    ))?;
    find(console, cookie.value()).await
}

async fn find(console: &Console, token: &str) -> Result<store::ConsoleSession, ApiError> {
    store::find(&console.pool, &digest(token))
        .await?
        .ok_or(ApiError::Unauthenticated(
            "the console session has expired or was signed out; sign in again",
        ))
}

fn info_of(console: &Console, caller: Caller, csrf_token: String, expires_at: DateTime<Utc>) -> SessionInfo {
    SessionInfo {
        key_name: caller.key_name,
        key_id: caller.key_id,
        csrf_token,
        expires_at,
        confirm_above: console.settings.confirm_above,
        trace_url_template: console.settings.trace_url_template.clone(),
    }
}

async fn record(console: &Console, caller: &Caller, detail: &str) -> Result<(), ApiError> {
    let conn = console
        .pool
        .get()
        .await
        .map_err(clarion_runtime::db::DbError::from)?;
    audit::record(&*conn, caller, Action::ConsoleSession, "console", detail).await?;
    Ok(())
}

/// Whether the request reached us over TLS (directly, or as a proxy in
/// front says with `Forwarded` / `X-Forwarded-Proto`).
fn over_tls(request: &HttpRequest) -> bool {
    request.connection_info().scheme() == "https"
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}
