//! The registration cache's listener: one PostgreSQL session of its own
//! that `LISTEN`s to `clarion_registrations` (the notices of changed
//! devices, see [`super::notices`]) and to a marker channel of this
//! coordinator's, and sends the markers that prove it is caught up (see
//! [`super::registrations`]). While it is not listening the cache is off;
//! it reconnects by itself with capped backoff.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clarion_runtime::backoff::Backoff;
use clarion_runtime::db::{ConnectError, Manager};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{info, warn};
use uuid::Uuid;

use super::registrations::RegistrationReads;

use super::notices::{self, CHANNEL};

/// Notices received and not yet applied: past it the session is read no
/// further until they are (PostgreSQL keeps the rest in its queue).
const NOTICES_WAITING: usize = 1024;

/// Longest `LISTEN` (or a marker's `NOTIFY`) may take.
const STATEMENT_DEADLINE: Duration = Duration::from_secs(10);

/// A marker not back after this long means the session is stuck: it is
/// dropped and opened anew.
const MARKER_PATIENCE: Duration = Duration::from_secs(5);

/// How often the loop looks for a marker to send or one overdue, besides
/// being woken by a read.
const TICK: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
enum ListenError {
    #[error("cannot open the listening session: {0}")]
    Connect(#[from] ConnectError),
    #[error("listening failed: {0}")]
    Statement(#[from] tokio_postgres::Error),
    #[error("no answer to LISTEN or NOTIFY within {0:?}")]
    Timeout(Duration),
    #[error("the listening session ended")]
    Lost,
    #[error("a caught-up marker did not come back within {0:?}")]
    MarkerOverdue(Duration),
}

/// Runs the listener until the returned task is aborted.
pub fn spawn(reads: RegistrationReads, manager: Manager) -> JoinHandle<()> {
    tokio::spawn(async move {
        let markers = format!("clarion_caught_up_{}", Uuid::now_v7().simple());
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            let started = Instant::now();
            let ended = listen(&reads, &manager, &markers).await;
            reads.set_listening(false);
            reads.markers_lost();
            if started.elapsed() > Duration::from_secs(30) {
                backoff.reset();
            }
            let delay = backoff.next_delay();
            warn!(error = %ended, retry_in = ?delay, "registration cache off: not listening to registration changes; reads go to the database");
            tokio::time::sleep(delay).await;
        }
    })
}

/// Listens until the session fails; always returns why.
async fn listen(reads: &RegistrationReads, manager: &Manager, markers: &str) -> ListenError {
    match listen_inner(reads, manager, markers).await {
        Ok(never) => match never {},
        Err(err) => err,
    }
}

async fn listen_inner(
    reads: &RegistrationReads,
    manager: &Manager,
    markers: &str,
) -> Result<std::convert::Infallible, ListenError> {
    let (client, mut notices) = manager.connect_listening(NOTICES_WAITING).await?;
    let client = Arc::new(client);
    // A marker is no data: its commit need not wait for the disk.
    let setup = format!("SET synchronous_commit = off; LISTEN {CHANNEL}; LISTEN {markers}");
    tokio::time::timeout(STATEMENT_DEADLINE, client.batch_execute(&setup))
        .await
        .map_err(|_| ListenError::Timeout(STATEMENT_DEADLINE))??;
    reads.set_listening(true);
    info!("registration cache on: listening to registration changes");
    // A marker whose NOTIFY failed: the session is not to be trusted.
    let (failed, mut failures) = mpsc::channel::<()>(1);
    let mut outstanding: Option<Instant> = None;
    let mut tick = tokio::time::interval(TICK);
    loop {
        tokio::select! {
            notice = notices.recv() => {
                let notice = notice.ok_or(ListenError::Lost)?;
                if notice.channel() == markers {
                    if let Ok(number) = notice.payload().parse::<u64>() {
                        reads.marker_back(number);
                        outstanding = None;
                    }
                } else {
                    apply(reads, notice.payload()).await;
                }
            }
            Some(()) = failures.recv() => return Err(ListenError::Lost),
            () = reads.wanted() => {}
            _ = tick.tick() => {}
        }
        if outstanding.is_some_and(|sent| sent.elapsed() > MARKER_PATIENCE) {
            return Err(ListenError::MarkerOverdue(MARKER_PATIENCE));
        }
        if let Some(number) = reads.next_marker() {
            outstanding = Some(Instant::now());
            let (client, failed) = (client.clone(), failed.clone());
            let sql = format!("NOTIFY {markers}, '{number}'");
            tokio::spawn(async move {
                let sent = tokio::time::timeout(STATEMENT_DEADLINE, client.batch_execute(&sql)).await;
                if !matches!(sent, Ok(Ok(()))) {
                    let _ = failed.try_send(());
                }
            });
        }
    }
}

/// Applies one notice: the devices named, or everything.
async fn apply(reads: &RegistrationReads, payload: &str) {
    match notices::devices_of(payload) {
        Some(keys) => reads.forget(keys).await,
        // `*` (a bulk change), or a notice this build cannot read.
        None => reads.forget_all(),
    }
}
