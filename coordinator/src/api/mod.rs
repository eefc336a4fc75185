//! The coordinator's HTTP API: its handlers, one file per resource, their
//! shared state and request limits; the routes are registered by
//! [`routes`], the caller read by [`authenticate`].
//!
//! Topic names hold `/` (`breaking/uk`), so every path that ends in a topic
//! matches the rest of the path (`{topic:.+}`).

pub mod audience;
pub mod audit;
pub mod authenticate;
pub mod curve;
pub mod held;
pub mod limits;
pub mod live_activities;
pub mod middleware;
pub mod notification_list;
pub mod notifications;
pub mod openapi;
pub mod platform_schema;
pub mod registrations;
pub mod replace;
pub mod routes;
pub mod served_document;
pub mod snapshots;
pub mod topics;

use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use clarion_proto::Names;
use clarion_runtime::PgPool;
use clarion_runtime::amqp::publisher::Publisher;
use clarion_runtime::apps::AppsFile;

use crate::error::ApiError;
use crate::group_commit::GroupCommit;
use crate::group_commit::registrations::{Change, RegistrationWrite, Written};
use crate::progress::completion::Valve;
use crate::read_cache::registrations::RegistrationReads;
use crate::release::relay::JobRelay;
use crate::send::topic_counter::TopicCounter;

/// Largest JSON body the API takes. A registration of 100 topics of 128
/// bytes, or a notification at the providers' 4 KB payload limit with 20
/// topics, fit well under it.
pub const BODY_LIMIT: usize = 64 * 1024;

/// What the handlers share.
pub struct AppState {
    pub pool: PgPool,
    /// The control role's parts; `None` on a coordinator that runs only
    /// the api role (whose routes never ask for them).
    pub control: Option<ControlState>,
    /// Tokens a shard job should cover (`CLARION_TOKENS_PER_JOB`).
    pub tokens_per_job: u64,
    /// The safety valve's thresholds (completing a cancelled notification).
    pub valve: Valve,
    pub names: Names,
    pub max_topics_per_device: u32,
    /// Push-service hosts a web registration may name (`CLARION_WEBPUSH_ALLOWED_HOSTS`).
    pub webpush_allowed_hosts: clarion_proto::AllowedHosts,
    pub topic_count_max_age: Duration,
    /// The OpenAPI document served (with the limits and the apps in force).
    pub openapi: served_document::ServedDocument,
    /// The apps served beside `default` (`CLARION_APPS_FILE`).
    pub apps: Arc<AppsFile>,
    /// The registration writes' group commit.
    pub registration_writes: Arc<GroupCommit<RegistrationWrite>>,
    /// Registration reads from memory where proven current.
    pub registration_reads: RegistrationReads,
}

/// What only the control role's handlers use: sends, cancels, topic sizes.
pub struct ControlState {
    pub topic_counter: Addr<TopicCounter>,
    pub relay: Addr<JobRelay>,
    /// Publishes Live Activities' channel commands.
    pub commands: Addr<crate::live_activity::relay::CommandRelay>,
    /// For control messages (cancellations).
    pub publisher: Publisher,
}

/// What a request does with the app it names. An app this installation
/// does not serve holds nothing: reading or deleting in it is a 404, as for
/// any other resource that is not there; writing to it is a 422 naming the
/// app, since the request itself cannot be carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppUse {
    /// A read or a delete.
    Read,
    /// A registration, a topic followed, a send or a replacement.
    Write,
}

impl AppState {
    /// The control role's parts, for a handler of that role (registered
    /// only where the role runs, so never missing there).
    pub fn control(&self) -> Result<&ControlState, ApiError> {
        self.control.as_ref().ok_or_else(|| {
            ApiError::Internal("a control route on a coordinator without the control role".into())
        })
    }

    /// Applies a registration write through the group commit: answered
    /// once its batch is committed.
    pub async fn write(&self, app: String, token: String, change: Change) -> Result<Written, ApiError> {
        let write = RegistrationWrite { app, token, change };
        Ok(self.registration_writes.submit(write).await?)
    }

    /// Ok when `caller` may use `app` (403 otherwise) and the installation
    /// serves it (404 or 422 by `used_for`, naming the apps it serves).
    pub fn check_app(
        &self,
        caller: &crate::auth::Caller,
        app: &str,
        used_for: AppUse,
    ) -> Result<(), ApiError> {
        caller.check_app(app)?;
        if self.apps.knows(app) {
            return Ok(());
        }
        let detail = format!(
            "app `{app}` is not one this installation serves: {} (CLARION_APPS_FILE)",
            self.apps.ids().join(", ")
        );
        Err(match used_for {
            AppUse::Read => ApiError::NotFound(detail),
            AppUse::Write => ApiError::Invalid(detail),
        })
    }
}
