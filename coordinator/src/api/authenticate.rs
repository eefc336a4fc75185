//! Who is asking: the [`Caller`] of a request, extracted in a handler from
//! its `Authorization: Bearer <key>` header or, without one, from the
//! console's session cookie (`crate::console::session`).

use actix_web::{FromRequest, HttpMessage, HttpRequest, dev::Payload, http::header, web};
use futures::future::LocalBoxFuture;

use crate::auth::{ApiKeys, Caller};
use crate::console::session;
use crate::error::ApiError;

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Caller, ApiError>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let caller = authenticate(&req).await;
            if let Ok(caller) = &caller {
                // For the audit of admin keys' use (see `api::audit`).
                req.extensions_mut().insert(caller.clone());
            }
            caller
        })
    }
}

async fn authenticate(req: &HttpRequest) -> Result<Caller, ApiError> {
    let keys = req
        .app_data::<web::Data<ApiKeys>>()
        .ok_or_else(|| ApiError::Internal("API keys are not configured on this app".into()))?;
    let Some(header) = req.headers().get(header::AUTHORIZATION) else {
        if let Some(cookie) = req.cookie(session::COOKIE) {
            return session::caller(req, keys, cookie.value()).await;
        }
        return Err(ApiError::Unauthenticated(
            "missing `Authorization: Bearer <key>` header",
        ));
    };
    let key = header
        .to_str()
        .ok()
        .and_then(|value| {
            value
                .strip_prefix("Bearer ")
                .or_else(|| value.strip_prefix("bearer "))
        })
        .map(str::trim)
        .ok_or(ApiError::Unauthenticated(
            "the Authorization header is not `Bearer <key>`",
        ))?;
    keys.identify(key)
        .ok_or(ApiError::Unauthenticated("unknown API key"))
}
