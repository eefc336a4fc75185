//! One HTTP/1.1 connection to the coordinator, held as wrk holds one:
//! requests one after another, each under a deadline; after a failure the
//! next request opens a new connection.

use std::time::Duration;

use bytes::Bytes;
use http::header::ETAG;
use http::{HeaderValue, Request};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{SendRequest, handshake};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::recorder::Outcome;

/// What a load needs of an answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub etag: Option<HeaderValue>,
}

pub struct Connection {
    /// `host:port` of the coordinator.
    addr: String,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Connection {
    pub fn new(addr: String) -> Self {
        Self { addr, sender: None }
    }

    /// Sends `request` and reads its whole answer within `deadline`
    /// (connecting first when needed); on a failure the connection is
    /// dropped and the outcome says why.
    pub async fn send(
        &mut self,
        request: Request<Full<Bytes>>,
        deadline: Duration,
    ) -> Result<Answer, Outcome> {
        match tokio::time::timeout(deadline, self.exchange(request)).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(())) => {
                self.sender = None;
                Err(Outcome::ConnectionFailed)
            }
            Err(_) => {
                self.sender = None;
                Err(Outcome::TimedOut)
            }
        }
    }

    async fn exchange(&mut self, request: Request<Full<Bytes>>) -> Result<Answer, ()> {
        let sender = match &mut self.sender {
            Some(sender) => sender,
            None => self.sender.insert(connect(&self.addr).await?),
        };
        sender.ready().await.map_err(drop)?;
        let response = sender.send_request(request).await.map_err(drop)?;
        let status = response.status().as_u16();
        let etag = response.headers().get(ETAG).cloned();
        // Read to the end, so the connection can carry the next request.
        response.into_body().collect().await.map_err(drop)?;
        Ok(Answer { status, etag })
    }
}

async fn connect(addr: &str) -> Result<SendRequest<Full<Bytes>>, ()> {
    let stream = TcpStream::connect(addr).await.map_err(drop)?;
    stream.set_nodelay(true).map_err(drop)?;
    let (sender, connection) = handshake(TokioIo::new(stream)).await.map_err(drop)?;
    // Ends when the sender is dropped or the server closes the connection.
    tokio::spawn(connection);
    Ok(sender)
}
