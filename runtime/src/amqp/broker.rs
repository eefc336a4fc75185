//! A self-healing link to RabbitMQ: one AMQP connection per process, opened
//! in the background with backoff and re-opened whenever it drops — to the
//! next node of the list when `CLARION_AMQP_URL` names several, so a lost
//! node is not dialled first again.
//!
//! The link declares the whole topology on each new connection, once, before
//! it hands the connection out. Nothing else declares: when several channels
//! of one process declared the same new quorum queue at once, the later
//! declarations returned before the queue's Raft member had started, a
//! `basic.consume` on it then crashed inside RabbitMQ 3.10
//! (`{badmatch,{error,noproc}}` in `rabbit_quorum_queue:consume/3`), and the
//! broker closed the whole connection with 541 `INTERNAL_ERROR` — losing the
//! confirms of messages it had already enqueued, which were then sent again.

use std::sync::Arc;
use std::time::Duration;

use clarion_proto::Names;
use lapin::{Connection, ConnectionProperties};
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::amqp::{connect, topology};
use crate::backoff::Backoff;
use crate::tls::Trust;

/// How often the link checks that its connection is still up.
const HEALTH_POLL: Duration = Duration::from_millis(250);

/// Cheap to clone; every clone sees the same connection.
#[derive(Clone)]
pub struct BrokerLink {
    current: watch::Receiver<Option<Arc<Connection>>>,
}

impl BrokerLink {
    /// Starts connecting to `url` on the current tokio runtime and keeps the
    /// connection alive for as long as any clone of the link exists; every
    /// connection it hands out has the topology of `names` declared. An
    /// `amqps://` URL is checked against what `trust` trusts.
    pub fn spawn(url: String, trust: Trust, connection_name: String, names: Names) -> Self {
        let (tx, rx) = watch::channel(None);
        tokio::spawn(keep_connected(url, trust, connection_name, names, tx));
        Self { current: rx }
    }

    /// True while the connection is open.
    pub fn is_connected(&self) -> bool {
        self.current
            .borrow()
            .as_ref()
            .is_some_and(|conn| conn.status().connected())
    }

    /// The open connection (topology declared), waiting for one if the
    /// broker is away.
    pub async fn connection(&self) -> Arc<Connection> {
        let mut rx = self.current.clone();
        loop {
            if let Some(conn) = rx.borrow_and_update().as_ref()
                && conn.status().connected()
            {
                return conn.clone();
            }
            if rx.changed().await.is_err() {
                // The keeper only stops when every link is gone; we hold one.
                std::future::pending::<()>().await;
            }
        }
    }
}

async fn keep_connected(
    url: String,
    trust: Trust,
    name: String,
    names: Names,
    tx: watch::Sender<Option<Arc<Connection>>>,
) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    let properties = || ConnectionProperties::default().with_connection_name(name.clone().into());
    let urls = connect::endpoints(&url);
    // The node to dial first: after a loss, the one after the lost node.
    let mut next = 0;
    loop {
        if tx.is_closed() {
            return;
        }
        match connect_and_declare(&urls, next, &trust, properties(), &names).await {
            Ok((index, conn)) => {
                info!(connection = %name, node = %connect::host(&urls[index]), "connected to rabbitmq");
                next = (index + 1) % urls.len();
                backoff.reset();
                let conn = Arc::new(conn);
                tx.send_replace(Some(conn.clone()));
                while conn.status().connected() {
                    if tx.is_closed() {
                        let _ = conn.close(200, "shutting down".into()).await;
                        return;
                    }
                    tokio::time::sleep(HEALTH_POLL).await;
                }
                tx.send_replace(None);
                warn!(connection = %name, "lost the rabbitmq connection; reconnecting");
            }
            Err(connect::Unreached { index, error: err }) => {
                // A node that answered and could not declare (paused in a
                // minority, say) is not asked first again.
                next = (index + 1) % urls.len();
                let delay = backoff.next_delay();
                match connect::tls_failure(&urls[index], &err) {
                    Some(tls) => {
                        error!(connection = %name, error = %tls, retry_in_ms = delay.as_millis() as u64, "rabbitmq tls handshake failed")
                    }
                    None => {
                        warn!(connection = %name, error = %err, retry_in_ms = delay.as_millis() as u64, "cannot reach rabbitmq")
                    }
                }
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Opens a connection to the first node of `urls` from `start` that
/// answers and declares the topology on it, on one channel that is closed
/// again; a connection whose declaration fails is closed.
async fn connect_and_declare(
    urls: &[String],
    start: usize,
    trust: &Trust,
    properties: ConnectionProperties,
    names: &Names,
) -> Result<(usize, Connection), connect::Unreached> {
    let (index, conn) = connect::open_any(urls, start, properties, trust).await?;
    let declared = async {
        let channel = conn.create_channel().await?;
        topology::declare(&channel, names).await?;
        channel.close(200, "topology declared".into()).await
    };
    if let Err(error) = declared.await {
        let _ = conn.close(200, "topology not declared".into()).await;
        return Err(connect::Unreached { index, error });
    }
    Ok((index, conn))
}
