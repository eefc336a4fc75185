//! Sends one batch of receipts to `POST /api/v1/receipts` as an app would:
//! a deadline on every request; 429, 503, other 5xx and transport errors
//! tried again after `Retry-After` (or a doubling back-off), both capped,
//! a bounded number of times; any other 4xx counted as rejected, not
//! retried (an app must not retry a refused receipt forever).

use std::time::Duration;

use clarion_dispatcher::channel::retry_after;
use reqwest::{Client, StatusCode};
use tracing::{debug, warn};

use super::config::ReceiptsConfig;
use super::counters::{Counters, ServerCounts};
use super::queue::{Event, Receipt};

/// First wait when the server names none; doubled at every try.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);

/// The body of one request.
#[derive(serde::Serialize)]
struct Batch<'a> {
    receipts: &'a [Receipt],
}

/// What to do after one answer.
enum Next {
    Done,
    Rejected(StatusCode),
    Retry(Option<Duration>),
}

/// Posts `receipts` until the server acknowledges, refuses them or the
/// tries run out, and counts the outcome.
pub async fn post(client: &Client, config: &ReceiptsConfig, counters: &Counters, receipts: Vec<Receipt>) {
    let events: Vec<Event> = receipts.iter().map(|r| r.event).collect();
    let body = match serde_json::to_vec(&Batch { receipts: &receipts }) {
        Ok(body) => body,
        Err(err) => {
            warn!(error = %err, "cannot write a receipts batch");
            counters.failed(events.len());
            return;
        }
    };
    drop(receipts);
    for attempt in 0..config.max_attempts {
        counters.request(attempt > 0);
        let sent = client
            .post(&config.url)
            .bearer_auth(&config.key)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.clone())
            .send()
            .await;
        let next = match sent {
            Ok(response) => {
                let status = response.status();
                let retry_after = retry_after(response.headers());
                if status.is_success() {
                    let answer = response.json::<ServerCounts>().await.ok();
                    counters.posted(&events, answer);
                    Next::Done
                } else if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
                    Next::Retry(retry_after)
                } else {
                    Next::Rejected(status)
                }
            }
            Err(err) => {
                debug!(error = %err, "receipts request failed");
                Next::Retry(None)
            }
        };
        match next {
            Next::Done => return,
            Next::Rejected(status) => {
                warn!(%status, receipts = events.len(), "receipts refused");
                counters.rejected(events.len());
                return;
            }
            Next::Retry(_) if attempt + 1 == config.max_attempts => break,
            Next::Retry(after) => {
                let backoff = FIRST_BACKOFF.saturating_mul(1 << attempt.min(16));
                tokio::time::sleep(after.unwrap_or(backoff).min(config.max_retry_wait)).await;
            }
        }
    }
    warn!(receipts = events.len(), "receipts given up after the last try");
    counters.failed(events.len());
}
