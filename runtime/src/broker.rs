//! A self-healing link to RabbitMQ: one AMQP connection per process, opened
//! in the background with backoff and re-opened whenever it drops.

use std::sync::Arc;
use std::time::Duration;

use lapin::{Connection, ConnectionProperties};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::backoff::Backoff;

/// How often the link checks that its connection is still up.
const HEALTH_POLL: Duration = Duration::from_millis(250);

/// Cheap to clone; every clone sees the same connection.
#[derive(Clone)]
pub struct BrokerLink {
    current: watch::Receiver<Option<Arc<Connection>>>,
}

impl BrokerLink {
    /// Starts connecting to `url` on the current tokio runtime and keeps the
    /// connection alive for as long as any clone of the link exists.
    pub fn spawn(url: String, connection_name: String) -> Self {
        let (tx, rx) = watch::channel(None);
        tokio::spawn(keep_connected(url, connection_name, tx));
        Self { current: rx }
    }

    /// True while the connection is open.
    pub fn is_connected(&self) -> bool {
        self.current
            .borrow()
            .as_ref()
            .is_some_and(|conn| conn.status().connected())
    }

    /// The open connection, waiting for one if the broker is away.
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

async fn keep_connected(url: String, name: String, tx: watch::Sender<Option<Arc<Connection>>>) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    let properties = || ConnectionProperties::default().with_connection_name(name.clone().into());
    loop {
        if tx.is_closed() {
            return;
        }
        match Connection::connect(&url, properties()).await {
            Ok(conn) => {
                info!(connection = %name, "connected to rabbitmq");
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
            Err(err) => {
                let delay = backoff.next_delay();
                warn!(connection = %name, error = %err, retry_in_ms = delay.as_millis() as u64, "cannot reach rabbitmq");
                tokio::time::sleep(delay).await;
            }
        }
    }
}
