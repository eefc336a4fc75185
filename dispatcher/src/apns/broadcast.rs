//! Live Activity channel requests at Apple (issue 38), one attempt each:
//! create a broadcast channel (`POST /1/apps/{bundle}/channels` on the
//! environment's channel-management host), broadcast an update
//! (`POST /4/broadcasts/apps/{bundle}` on the environment's push host) and
//! delete a channel (`DELETE /1/apps/{bundle}/channels`), over the same
//! pooled HTTP/2 transport, deadline and provider token as the pushes.
//!
//! Apple's answer becomes a final [`ChannelOutcome`] or a retry; the
//! retries themselves (bounded, honouring `Retry-After`) are the command
//! handler's (`handlers::channel_commands`).

use std::time::Duration;

use bytes::Bytes;
use clarion_proto::ApnsEnvironment;
use clarion_proto::live_activity::{ChannelAction, ChannelOutcome};
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, Uri};
use serde_json::json;
use tracing::debug;
use uuid::Uuid;

use super::ApnsChannel;
use super::errors::NOT_APNS;
use crate::channel::retry_after;
use crate::http2::Http2Pool;

/// The header naming a channel, in requests and in a create's answer.
const CHANNEL_ID: &str = "apns-channel-id";

/// What became of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelAttempt {
    /// Apple's final word (or a failure no retry mends).
    Done(ChannelOutcome),
    /// Worth another attempt (429, 5xx, no answer); `after` from `Retry-After`.
    Retry {
        reason: &'static str,
        after: Option<Duration>,
    },
    /// The provider token was refused as expired: renew it, then retry.
    Reauthenticate,
}

/// One request to make: method, pool, path, headers and body.
struct ChannelRequest<'a> {
    method: Method,
    pool: &'a Http2Pool,
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

impl ChannelRequest<'_> {
    /// Its URI on its pool's origin; a bundle id that fits in no path is
    /// a failure no retry mends.
    fn uri(&self) -> Result<Uri, &'static str> {
        self.pool
            .uri(self.path.clone())
            .map_err(|_| "the bundle id or channel path is not a valid URI path")
    }
}

impl ApnsChannel {
    /// One attempt at `action` for `environment`; `request_id` goes in
    /// `apns-request-id` (the command's id, so Apple's logs and ours agree).
    pub async fn channel_request(
        &self,
        environment: ApnsEnvironment,
        action: &ChannelAction,
        request_id: Uuid,
    ) -> ChannelAttempt {
        let prepared = self
            .channel_request_for(environment, action, request_id)
            .and_then(|request| Ok((request.uri()?, request)));
        let (uri, request) = match prepared {
            Ok(prepared) => prepared,
            Err(reason) => {
                return ChannelAttempt::Done(ChannelOutcome::Failed {
                    error: reason.to_owned(),
                });
            }
        };
        let build = || {
            let mut built = Request::new(());
            *built.method_mut() = request.method.clone();
            *built.uri_mut() = uri.clone();
            let headers = built.headers_mut();
            headers.clone_from(&request.headers);
            headers.insert(http::header::AUTHORIZATION, self.token.header());
            built
        };
        match request.pool.send(build, request.body.clone()).await {
            Ok(response) => classify(action, response.status, &response.headers, &response.body),
            Err(err) => {
                debug!(error = %err, "APNs channel request failed");
                ChannelAttempt::Retry {
                    reason: err.label(),
                    after: None,
                }
            }
        }
    }

    fn channel_request_for(
        &self,
        environment: ApnsEnvironment,
        action: &ChannelAction,
        request_id: Uuid,
    ) -> Result<ChannelRequest<'_>, &'static str> {
        let mut headers = HeaderMap::new();
        let request_id =
            HeaderValue::from_str(&request_id.to_string()).map_err(|_| "a malformed request id")?;
        headers.insert("apns-request-id", request_id);
        let channel_header =
            |id: &str| HeaderValue::from_str(id).map_err(|_| "the channel id is not a valid header value");
        let channels_path = format!("/1/apps/{}/channels", self.bundle);
        let request = match action {
            ChannelAction::CreateChannel { storage_policy } => {
                headers.insert("content-type", HeaderValue::from_static("application/json"));
                let body = json!({
                    "message-storage-policy": storage_policy.apns_value(),
                    "push-type": "LiveActivity",
                });
                ChannelRequest {
                    method: Method::POST,
                    pool: self.channels_pool(environment),
                    path: channels_path,
                    headers,
                    body: Bytes::from(body.to_string()),
                }
            }
            ChannelAction::Broadcast {
                channel_id,
                payload,
                priority,
                ..
            } => {
                headers.insert(CHANNEL_ID, channel_header(channel_id)?);
                headers.insert("apns-push-type", HeaderValue::from_static("liveactivity"));
                headers.insert("apns-priority", HeaderValue::from(u16::from(*priority)));
                headers.insert("content-type", HeaderValue::from_static("application/json"));
                ChannelRequest {
                    method: Method::POST,
                    pool: self.push_pool(environment),
                    path: format!("/4/broadcasts/apps/{}", self.bundle),
                    headers,
                    body: Bytes::from(payload.to_string()),
                }
            }
            ChannelAction::DeleteChannel { channel_id } => {
                headers.insert(CHANNEL_ID, channel_header(channel_id)?);
                ChannelRequest {
                    method: Method::DELETE,
                    pool: self.channels_pool(environment),
                    path: channels_path,
                    headers,
                    body: Bytes::new(),
                }
            }
        };
        Ok(request)
    }
}

/// Apple's answer to `action`.
pub fn classify(
    action: &ChannelAction,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
) -> ChannelAttempt {
    if status.is_success() {
        let outcome = match action {
            ChannelAction::CreateChannel { .. } => {
                match headers.get(CHANNEL_ID).and_then(|v| v.to_str().ok()) {
                    Some(id) if !id.is_empty() => ChannelOutcome::Created {
                        channel_id: id.to_owned(),
                    },
                    _ => ChannelOutcome::Failed {
                        error: format!("{NOT_APNS}: a created channel without {CHANNEL_ID}"),
                    },
                }
            }
            ChannelAction::Broadcast { .. } => ChannelOutcome::Sent,
            ChannelAction::DeleteChannel { .. } => ChannelOutcome::Deleted,
        };
        return ChannelAttempt::Done(outcome);
    }
    let reason = serde_json::from_slice::<AppleError>(body)
        .ok()
        .map(|apple| apple.reason);
    let code = status.as_u16();
    match (code, reason.as_deref()) {
        // Gone already: what a delete wanted.
        (_, Some("ChannelNotRegistered")) if matches!(action, ChannelAction::DeleteChannel { .. }) => {
            ChannelAttempt::Done(ChannelOutcome::Deleted)
        }
        (403, Some("ExpiredProviderToken")) => ChannelAttempt::Reauthenticate,
        // Apple's limit of channels: no retry makes room.
        (429, Some("TooManyChannels")) => refused(code, "TooManyChannels"),
        (429, _) => ChannelAttempt::Retry {
            reason: "TooManyRequests",
            after: retry_after(headers),
        },
        (500, _) => ChannelAttempt::Retry {
            reason: "InternalServerError",
            after: retry_after(headers),
        },
        (503, _) => ChannelAttempt::Retry {
            reason: "ServiceUnavailable",
            after: retry_after(headers),
        },
        (502 | 504, _) => ChannelAttempt::Retry {
            reason: "BadGateway",
            after: retry_after(headers),
        },
        (_, Some(reason)) => refused(code, reason),
        // Not Apple's JSON: a wrong endpoint, a proxy, another service.
        (_, None) => ChannelAttempt::Done(ChannelOutcome::Failed {
            error: format!("{NOT_APNS}: HTTP {code} without Apple's reason (check the channels endpoint)"),
        }),
    }
}

fn refused(status: u16, reason: &str) -> ChannelAttempt {
    ChannelAttempt::Done(ChannelOutcome::Refused {
        status,
        reason: reason.to_owned(),
    })
}

/// The shape of every APNs error body.
#[derive(serde::Deserialize)]
struct AppleError {
    reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_proto::live_activity::StoragePolicy;

    fn answer(action: &ChannelAction, status: u16, reason: &str, headers: HeaderMap) -> ChannelAttempt {
        let body = format!(r#"{{"reason":"{reason}"}}"#);
        classify(
            action,
            StatusCode::from_u16(status).unwrap(),
            &headers,
            body.as_bytes(),
        )
    }

    const CREATE: ChannelAction = ChannelAction::CreateChannel {
        storage_policy: StoragePolicy::None,
    };

    #[test]
    fn apples_answers_become_outcomes() {
        let mut created = HeaderMap::new();
        created.insert(CHANNEL_ID, HeaderValue::from_static("dHN0LXU="));
        assert_eq!(
            classify(&CREATE, StatusCode::CREATED, &created, b""),
            ChannelAttempt::Done(ChannelOutcome::Created {
                channel_id: "dHN0LXU=".into()
            })
        );
        assert!(matches!(
            classify(&CREATE, StatusCode::CREATED, &HeaderMap::new(), b""),
            ChannelAttempt::Done(ChannelOutcome::Failed { .. })
        ));
        let delete = ChannelAction::DeleteChannel {
            channel_id: "x".into(),
        };
        assert_eq!(
            answer(&delete, 404, "ChannelNotRegistered", HeaderMap::new()),
            ChannelAttempt::Done(ChannelOutcome::Deleted)
        );
        let broadcast = ChannelAction::Broadcast {
            channel_id: "x".into(),
            update_id: Uuid::nil(),
            payload: json!({}),
            priority: 10,
        };
        assert_eq!(
            answer(&broadcast, 404, "ChannelNotRegistered", HeaderMap::new()),
            ChannelAttempt::Done(ChannelOutcome::Refused {
                status: 404,
                reason: "ChannelNotRegistered".into()
            })
        );
        assert_eq!(
            answer(&broadcast, 400, "BadChannelId", HeaderMap::new()),
            ChannelAttempt::Done(ChannelOutcome::Refused {
                status: 400,
                reason: "BadChannelId".into()
            })
        );
        assert_eq!(
            answer(&CREATE, 429, "TooManyChannels", HeaderMap::new()),
            ChannelAttempt::Done(ChannelOutcome::Refused {
                status: 429,
                reason: "TooManyChannels".into()
            })
        );
        assert_eq!(
            answer(&broadcast, 403, "ExpiredProviderToken", HeaderMap::new()),
            ChannelAttempt::Reauthenticate
        );
        assert!(matches!(
            classify(&broadcast, StatusCode::NOT_FOUND, &HeaderMap::new(), b"<html>"),
            ChannelAttempt::Done(ChannelOutcome::Failed { .. })
        ));
    }

    #[test]
    fn busy_answers_are_retried_after_apples_delay() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(
            answer(&CREATE, 503, "ServiceUnavailable", headers.clone()),
            ChannelAttempt::Retry {
                reason: "ServiceUnavailable",
                after: Some(Duration::from_secs(2))
            }
        );
        assert_eq!(
            answer(&CREATE, 429, "TooManyRequests", headers),
            ChannelAttempt::Retry {
                reason: "TooManyRequests",
                after: Some(Duration::from_secs(2))
            }
        );
    }
}
