//! Liveness of the dispatcher's provider connections: a connection whose
//! route dies without a word (black-holed mid-send by
//! [`BlackHoleProxy`]) is found dead — by an unanswered PING, or by
//! requests timing out in a row — closed and replaced, and every device is
//! still delivered; a provider that goes away (GOAWAY) is drained while new
//! requests go to a fresh connection; and a dispatcher that cannot push at
//! all says so on `/readyz` until a push gets through again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clarion_dispatcher::http2::{Http2Pool, Liveness, PoolLimits, client_config};
use clarion_load_tests::blackhole::BlackHoleProxy;
use clarion_load_tests::mocks::tls::TestPki;
use clarion_load_tests::mocks::{FaultConfig, digest};
use clarion_load_tests::testkit::{Cluster, ClusterOptions, Device, Mocks, seed_devices};
use clarion_proto::Platform;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

const WAIT: Duration = Duration::from_secs(90);

/// A cluster whose one iOS dispatcher reaches the mock APNs through a
/// black-hole proxy over a single HTTP/2 connection.
async fn cluster_behind_proxy(dispatcher: &[&str]) -> (Cluster, BlackHoleProxy) {
    let mut cluster = Cluster::start(ClusterOptions {
        harvester: vec!["--batch-size=25".into()],
        harvesters: 1,
        ..ClusterOptions::default()
    })
    .await;
    cluster.mocks = Some(Mocks::start().await);
    let apns: SocketAddr = cluster
        .mocks()
        .apns
        .endpoint
        .trim_start_matches("https://")
        .parse()
        .expect("the mock APNs listens on an IP address");
    let proxy = BlackHoleProxy::start(apns).await.expect("the proxy starts");
    let endpoint = format!("--apns-endpoint=https://{}", proxy.addr);
    let mut args = vec![endpoint.as_str(), "--dispatch-connections=1"];
    args.extend(dispatcher);
    cluster.start_dispatcher(Platform::Ios, &args).await;
    (cluster, proxy)
}

async fn seed_ios(cluster: &Cluster, count: u64) -> Vec<String> {
    let devices: Vec<Device> = (0..count).map(|n| Device::ios(n, &["t"])).collect();
    seed_devices(&cluster.sql().await, &devices).await.unwrap();
    devices.into_iter().map(|d| d.token).collect()
}

async fn send(cluster: &Cluster, body: Value) -> String {
    let (status, accepted) = cluster.send(&body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    accepted["id"].as_str().expect("an id").to_owned()
}

/// Polls `done` every few milliseconds; panics with `what` after `timeout`.
async fn wait_until(what: &str, timeout: Duration, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done().await {
        assert!(Instant::now() < deadline, "not within {timeout:?}: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Sends to every token while the mock answers slowly; black-holes the one
/// connection as soon as the first answer is out (the rest of the first
/// pushes are then in flight) and checks every device still got its push.
async fn black_hole_mid_send_and_check_delivery(
    cluster: &Cluster,
    proxy: &BlackHoleProxy,
    tokens: &[String],
) {
    let mock = &cluster.mocks().apns.state;
    // Answers spread over 0.3-0.9 s: when the first is out, most are not.
    mock.faults.set(FaultConfig {
        latency_ms: 300.0,
        jitter_ms: 600.0,
        ..FaultConfig::default()
    });
    let id = send(cluster, json!({"topics": ["t"], "body": "through a dead route"})).await;
    wait_until("a first push answered", WAIT, async || {
        mock.accounting.counters().accepted > 0
    })
    .await;
    proxy.black_hole_open();

    let status = cluster.wait_until_settled(&id, WAIT).await;
    assert_eq!(status["status"], "complete", "{status}");
    let delivery = &status["delivery"]["ios"];
    assert_eq!(delivery["sent"], tokens.len(), "{status}");
    assert_eq!(delivery["failed"], 0, "{status}");
    let stats = mock.accounting.stats();
    assert_eq!(stats.unique_tokens, tokens.len() as u64);
    assert_eq!(stats.digest, digest(tokens.iter().map(String::as_str)));
    assert!(
        stats.duplicate_pushes > 0,
        "pushes were in flight when the route died: answered by the mock, the answers lost, sent again"
    );
    assert!(
        proxy.connections_accepted() >= 2,
        "the dead connection was replaced"
    );
}

#[actix_web::test]
async fn a_black_holed_connection_is_found_dead_by_ping_and_every_device_is_delivered() {
    // Requests alone would wait ten minutes: only the PING can find the
    // dead connection within the test's deadline.
    let (cluster, proxy) = cluster_behind_proxy(&[
        "--dispatch-request-timeout-secs=600",
        "--dispatch-ping-interval-secs=1",
        "--dispatch-ping-timeout-secs=1",
    ])
    .await;
    let tokens = seed_ios(&cluster, 200).await;
    black_hole_mid_send_and_check_delivery(&cluster, &proxy, &tokens).await;
    cluster.stop().await;
}

#[actix_web::test]
async fn a_black_holed_connection_is_retired_after_timeouts_in_a_row_and_every_device_is_delivered() {
    // No PING in the test's time: the timed-out requests must do it.
    let (cluster, proxy) = cluster_behind_proxy(&[
        "--dispatch-request-timeout-secs=2",
        "--dispatch-ping-interval-secs=3600",
        "--dispatch-timeouts-before-reconnect=3",
    ])
    .await;
    let tokens = seed_ios(&cluster, 200).await;
    black_hole_mid_send_and_check_delivery(&cluster, &proxy, &tokens).await;
    cluster.stop().await;
}

async fn readiness(http: &reqwest::Client, addr: SocketAddr) -> (StatusCode, Value) {
    let answer = http
        .get(format!("http://{addr}/readyz"))
        .send()
        .await
        .expect("the health endpoint answers");
    let status = answer.status();
    (status, answer.json().await.unwrap_or(Value::Null))
}

#[actix_web::test]
async fn a_dispatcher_that_cannot_push_is_not_ready_until_a_push_gets_through() {
    // Every connection to "APNs" hangs in the TLS handshake: each attempt
    // ends at the request deadline, which covers connecting.
    let (cluster, proxy) = cluster_behind_proxy(&[
        "--dispatch-request-timeout-secs=1",
        "--dispatch-not-ready-after-secs=2",
        "--dispatch-max-attempts=50",
    ])
    .await;
    proxy.black_hole_new();
    let tokens = seed_ios(&cluster, 20).await;
    let health = cluster.dispatchers[0].health.addr;
    let http = reqwest::Client::new();
    wait_until("ready before sending (broker link up)", WAIT, async || {
        readiness(&http, health).await.0 == StatusCode::OK
    })
    .await;

    let id = send(&cluster, json!({"topics": ["t"], "body": "nobody home"})).await;
    let mut last = Value::Null;
    wait_until("the dispatcher says it cannot push", WAIT, async || {
        let (status, body) = readiness(&http, health).await;
        last = body;
        status == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    let push = last["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["name"] == "push"))
        .unwrap_or_else(|| panic!("a push check: {last}"));
    assert_eq!(push["status"], "failing", "{last}");
    assert!(
        push["reason"].as_str().is_some_and(|r| r.contains("timeout")),
        "{last}"
    );

    proxy.restore();
    wait_until("ready again once a push succeeds", WAIT, async || {
        readiness(&http, health).await.0 == StatusCode::OK
    })
    .await;
    let status = cluster.wait_until_settled(&id, WAIT).await;
    assert_eq!(status["delivery"]["ios"]["sent"], tokens.len(), "{status}");
    cluster.stop().await;
}

/// An HTTP/2 server over TLS that answers every request with its
/// connection's number, except the first request of connection 1: that one
/// it holds until `release` (saying so on `held`), and sends GOAWAY meanwhile.
async fn going_away_server(
    dir: &std::path::Path,
    held: oneshot::Sender<()>,
    release: oneshot::Receiver<()>,
) -> (SocketAddr, std::path::PathBuf) {
    let pki = TestPki::generate("goaway").unwrap();
    let ca_file = dir.join("goaway-ca.pem");
    pki.write_ca(&ca_file).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(pki.server_config(&[b"h2"]).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let numbers = Arc::new(AtomicU64::new(0));
    let mut hold = Some((held, release));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let number = numbers.fetch_add(1, Ordering::SeqCst) + 1;
            let acceptor = acceptor.clone();
            let mut hold = if number == 1 { hold.take() } else { None };
            tokio::spawn(async move {
                let tls = acceptor.accept(tcp).await.unwrap();
                let mut connection = h2::server::handshake(tls).await.unwrap();
                let answer = move || http::Response::builder().status(200).body(()).unwrap();
                while let Some(Ok((_request, mut respond))) = connection.accept().await {
                    let body = Bytes::from(number.to_string());
                    match hold.take() {
                        Some((held, release)) => {
                            connection.graceful_shutdown();
                            let _ = held.send(());
                            tokio::spawn(async move {
                                let _ = release.await;
                                let mut stream = respond.send_response(answer(), false).unwrap();
                                stream.send_data(body, true).unwrap();
                            });
                        }
                        None => {
                            let mut stream = respond.send_response(answer(), false).unwrap();
                            stream.send_data(body, true).unwrap();
                        }
                    }
                }
            });
        }
    });
    (addr, ca_file)
}

#[tokio::test]
async fn a_connection_that_goes_away_drains_while_new_requests_go_to_a_fresh_one() {
    let dir = std::env::temp_dir().join(format!("clarion-goaway-{}", uuid::Uuid::new_v4().simple()));
    let (held, holding) = oneshot::channel();
    let (release, released) = oneshot::channel();
    let (addr, ca_file) = going_away_server(&dir, held, released).await;
    let tls = client_config(Some(&ca_file), &[b"h2"]).unwrap();
    let limits = PoolLimits {
        connections: 1,
        streams_per_connection: 100,
        timeout: Duration::from_secs(10),
        liveness: Liveness::default(),
    };
    let pool = Arc::new(Http2Pool::new(&format!("https://{addr}"), tls, limits).unwrap());
    let request = || {
        let mut request = http::Request::new(());
        *request.uri_mut() = pool.uri("/".to_owned()).unwrap();
        request
    };

    // Held by the server, which sends GOAWAY meanwhile.
    let held = tokio::spawn({
        let pool = pool.clone();
        async move {
            let uri = pool.uri("/".to_owned()).unwrap();
            let request = || {
                let mut request = http::Request::new(());
                *request.uri_mut() = uri.clone();
                request
            };
            pool.send(request, Bytes::new()).await
        }
    });
    holding.await.expect("the server holds the first request");
    // Requests sent before the GOAWAY arrives are still served on
    // connection 1; none may fail, and soon they go to connection 2.
    wait_until("a request served by a fresh connection", WAIT, async || {
        let answer = pool.send(request, Bytes::new()).await;
        let answer = answer.unwrap_or_else(|err| panic!("a request failed: {err}"));
        assert_eq!(answer.status, 200);
        answer.body == "2"
    })
    .await;

    release.send(()).unwrap();
    let drained = held
        .await
        .unwrap()
        .expect("the held request finished on the old connection");
    assert_eq!(drained.body, "1");
    assert_eq!(pool.connections_opened(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// One HTTP/2 frame's header: its type, flags and stream id (the payload
/// is read and dropped: this server needs none).
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
}

async fn read_frame(io: &mut (impl tokio::io::AsyncRead + Unpin)) -> std::io::Result<Frame> {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; 9];
    io.read_exact(&mut head).await?;
    let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0; length];
    io.read_exact(&mut payload).await?;
    Ok(Frame {
        kind: head[3],
        flags: head[4],
        stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
    })
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    out.extend([kind, flags]);
    out.extend(stream.to_be_bytes());
    out.extend(payload);
    out
}

/// An HTTP/2 server over TLS. Its first connection is written frame by
/// frame: it holds the first request (stream 1), and when the second
/// (stream 3) arrives it sends GOAWAY(NO_ERROR, last stream 1) — the race
/// of a stream opened just as the server's final GOAWAY is on its way,
/// made certain — then answers stream 1 with "1". Later connections (h2)
/// answer every request with their number.
async fn goaway_below_a_stream_server(dir: &std::path::Path) -> (SocketAddr, std::path::PathBuf) {
    use tokio::io::AsyncWriteExt;
    const HEADERS: u8 = 1;
    const SETTINGS: u8 = 4;
    const GOAWAY: u8 = 7;
    const END_STREAM: u8 = 0x1;
    const END_HEADERS: u8 = 0x4;
    let pki = TestPki::generate("goaway-below").unwrap();
    let ca_file = dir.join("goaway-below-ca.pem");
    pki.write_ca(&ca_file).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(pki.server_config(&[b"h2"]).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut number = 0u64;
        while let Ok((tcp, _)) = listener.accept().await {
            number += 1;
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let mut tls = acceptor.accept(tcp).await.unwrap();
                if number > 1 {
                    let mut connection = h2::server::handshake(tls).await.unwrap();
                    while let Some(Ok((_request, mut respond))) = connection.accept().await {
                        let answer = http::Response::builder().status(200).body(()).unwrap();
                        let mut stream = respond.send_response(answer, false).unwrap();
                        stream.send_data(Bytes::from(number.to_string()), true).unwrap();
                    }
                    return;
                }
                let mut preface = [0u8; 24];
                tokio::io::AsyncReadExt::read_exact(&mut tls, &mut preface)
                    .await
                    .unwrap();
                tls.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
                let mut held = None;
                while let Ok(received) = read_frame(&mut tls).await {
                    match received.kind {
                        SETTINGS if received.flags & 0x1 == 0 => {
                            tls.write_all(&frame(SETTINGS, 0x1, 0, &[])).await.unwrap();
                        }
                        HEADERS if held.is_none() => held = Some(received.stream),
                        HEADERS => {
                            let first = held.take().unwrap();
                            assert!(received.stream > first, "streams come in order");
                            let mut goaway = first.to_be_bytes().to_vec();
                            goaway.extend(0u32.to_be_bytes()); // NO_ERROR
                            tls.write_all(&frame(GOAWAY, 0, 0, &goaway)).await.unwrap();
                            // `:status: 200` is entry 8 of HPACK's static table.
                            tls.write_all(&frame(HEADERS, END_HEADERS, first, &[0x88]))
                                .await
                                .unwrap();
                            tls.write_all(&frame(0, END_STREAM, first, b"1")).await.unwrap();
                        }
                        _ => {}
                    }
                }
            });
        }
    });
    (addr, ca_file)
}

#[tokio::test]
async fn a_request_the_server_went_away_without_processing_is_sent_again_on_a_fresh_connection() {
    let dir = std::env::temp_dir().join(format!("clarion-goaway-below-{}", uuid::Uuid::new_v4().simple()));
    let (addr, ca_file) = goaway_below_a_stream_server(&dir).await;
    let tls = client_config(Some(&ca_file), &[b"h2"]).unwrap();
    let limits = PoolLimits {
        connections: 1,
        streams_per_connection: 100,
        timeout: Duration::from_secs(10),
        liveness: Liveness::default(),
    };
    let pool = Arc::new(Http2Pool::new(&format!("https://{addr}"), tls, limits).unwrap());
    let uri = pool.uri("/".to_owned()).unwrap();
    let built = Arc::new(AtomicU64::new(0));
    let request = {
        let built = built.clone();
        move || {
            built.fetch_add(1, Ordering::SeqCst);
            let mut request = http::Request::new(());
            *request.uri_mut() = uri.clone();
            request
        }
    };
    let held = tokio::spawn({
        let (pool, request) = (pool.clone(), request.clone());
        async move { pool.send(request, Bytes::new()).await }
    });
    // The second request's stream goes on connection 1 once the first's
    // is open there (the server holds it).
    wait_until("the first request on its way", WAIT, async || {
        built.load(Ordering::SeqCst) == 1
    })
    .await;
    let answer = tokio::time::timeout(WAIT, pool.send(request, Bytes::new()))
        .await
        .expect("the request ends")
        .unwrap_or_else(|err| panic!("a request the server never processed failed: {err}"));
    assert_eq!(answer.body, "2", "sent again on connection 2");
    let first = held.await.unwrap().expect("the processed request is answered");
    assert_eq!(first.body, "1", "the processed request finished on connection 1");
    assert_eq!(
        built.load(Ordering::SeqCst),
        3,
        "the second request was built twice"
    );
    assert_eq!(pool.connections_opened(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_request_to_a_server_that_never_finishes_the_handshake_ends_at_its_deadline() {
    // Takes TCP connections and never says a word: the TLS handshake hangs.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let limits = PoolLimits {
        connections: 1,
        streams_per_connection: 10,
        timeout: Duration::from_secs(1),
        liveness: Liveness::default(),
    };
    let tls = client_config(None, &[b"h2"]).unwrap();
    let pool = Http2Pool::new(&format!("https://{addr}"), tls, limits).unwrap();
    let uri = pool.uri("/".to_owned()).unwrap();
    let request = || {
        let mut request = http::Request::new(());
        *request.uri_mut() = uri.clone();
        request
    };
    // The outer bound only keeps a regression from hanging the suite.
    let answer = tokio::time::timeout(WAIT, pool.send(request, Bytes::new()))
        .await
        .expect("the request gave up by itself");
    assert!(
        matches!(answer, Err(clarion_dispatcher::http2::TransportError::Timeout(_))),
        "{answer:?}"
    );
}
