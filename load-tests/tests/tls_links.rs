//! Clarion's links to PostgreSQL and RabbitMQ over TLS, against real
//! servers started for the test (`testkit::tls_servers`): a PostgreSQL
//! cluster that takes TLS connections only and a second RabbitMQ node with
//! a TLS listener only, both with a certificate for `localhost` from a test
//! CA. The right CA connects; an unrelated CA, or a name the certificate
//! does not list, is refused with an error that says so — and a service
//! refuses to start.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use clarion_coordinator::migrations::{self, MigrationError};
use clarion_load_tests::mocks::digest;
use clarion_load_tests::testkit::tls_servers::{CERTIFICATE_HOST, TestCa, TlsPostgres, TlsRabbitMq};
use clarion_load_tests::testkit::{
    Cluster, ClusterOptions, ClusterServers, alternating_devices, seed_devices,
};
use clarion_proto::Platform;
use clarion_runtime::amqp::connect;
use clarion_runtime::pg_connect::PgTarget;
use clarion_runtime::testing::TestDatabase;
use clarion_runtime::tls::TlsFailure;
use clarion_runtime::{DatabaseSettings, TlsSettings, Trust, db};
use lapin::ConnectionProperties;
use reqwest::StatusCode;
use serde_json::json;

const CHECK: Duration = Duration::from_secs(20);

fn trusting(ca_file: &std::path::Path) -> Trust {
    Trust::load(&TlsSettings {
        extra_ca_file: Some(ca_file.to_owned()),
    })
    .expect("the CA file loads")
}

fn new_ca() -> Arc<TestCa> {
    Arc::new(TestCa::generate().expect("test CA"))
}

/// Starts the cluster off the runtime (`initdb` and `pg_ctl` block).
async fn start_postgres(ca: &Arc<TestCa>) -> TlsPostgres {
    let ca = ca.clone();
    tokio::task::spawn_blocking(move || TlsPostgres::start(&ca))
        .await
        .expect("the start did not panic")
        .unwrap_or_else(|err| panic!("cannot start the TLS PostgreSQL: {err:#}"))
}

#[actix_web::test]
async fn postgres_over_tls_honours_sslmode_and_refuses_a_wrong_ca_or_name() {
    let ca = new_ca();
    let pg = start_postgres(&ca).await;
    let right = trusting(&ca.ca_file);
    let wrong = trusting(&ca.wrong_ca_file);

    // verify-full with the right CA: migrations, then a query through the pool.
    let full = pg.url(CERTIFICATE_HOST, "verify-full");
    let database = TestDatabase::create_at(&full, &right).await;
    let applied = migrations::run_with(&database.url, &right)
        .await
        .expect("migrations over verified TLS");
    assert!(!applied.is_empty());
    let pool = db::pool(&DatabaseSettings::new(database.url.clone()), &right, "tls-test").unwrap();
    let conn = pool.get().await.expect("a pooled connection over TLS");
    let row = conn
        .query_one(
            "SELECT ssl, (SELECT count(*) FROM refinery_schema_history) FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "the session is encrypted");
    assert_eq!(row.get::<_, i64>(1), applied.len() as i64);
    drop(conn);

    // An unrelated CA: refused, saying which link, which host and why.
    let refused = migrations::run_with(&database.url, &wrong).await.unwrap_err();
    let MigrationError::Tls(link) = &refused else {
        panic!("not a TLS refusal: {refused}")
    };
    assert_eq!(link.failure, TlsFailure::UnknownCa);
    let text = refused.to_string();
    assert!(
        text.contains(&format!("PostgreSQL at localhost:{}", pg.port)),
        "{text}"
    );
    assert!(text.contains("unknown CA"), "{text}");

    // By a name the certificate does not list: verify-full refuses,
    // verify-ca (the chain only) and require (no check) connect.
    let by_address = |mode: &str| pg.url("127.0.0.1", mode);
    let mismatch = PgTarget::new(&by_address("verify-full"), &right).unwrap();
    let error = mismatch.check_tls(CHECK).await.unwrap_err();
    assert_eq!(error.failure, TlsFailure::NameMismatch, "{error}");
    assert!(error.to_string().contains("hostname mismatch"), "{error}");
    for mode in ["verify-ca", "require"] {
        let target = PgTarget::new(&by_address(mode), &right).unwrap();
        let (client, _driver) = target
            .connect()
            .await
            .unwrap_or_else(|err| panic!("{mode}: {err}"));
        client.simple_query("SELECT 1").await.unwrap();
    }
    // `require` does not check the certificate at all; verify-ca does.
    let unchecked = PgTarget::new(&by_address("require"), &wrong).unwrap();
    unchecked.check_tls(CHECK).await.expect("require ignores the CA");
    let chain = PgTarget::new(&by_address("verify-ca"), &wrong).unwrap();
    assert_eq!(
        chain.check_tls(CHECK).await.unwrap_err().failure,
        TlsFailure::UnknownCa
    );

    // The coordinator refuses to start on the wrong CA, and says why.
    let settings = clarion_coordinator::Settings::try_parse_from([
        "clarion-coordinator",
        "--http-addr=127.0.0.1:0",
        "--api-keys=k=send",
        &format!("--database-url={}", database.url),
        &format!("--extra-ca-file={}", ca.wrong_ca_file.display()),
    ])
    .unwrap();
    let refused = tokio::time::timeout(Duration::from_secs(30), clarion_coordinator::start(settings))
        .await
        .expect("refused at once, not retried");
    let error = refused.err().expect("the coordinator refuses to start");
    assert!(error.to_string().contains("unknown CA"), "{error}");
    drop(pool);
    drop(database);
}

#[actix_web::test]
async fn amqps_verifies_the_broker_certificate_and_services_refuse_a_wrong_ca() {
    let ca = new_ca();
    let rabbit = TlsRabbitMq::start(&ca)
        .await
        .unwrap_or_else(|err| panic!("cannot start the TLS RabbitMQ node: {err:#}"));
    let right = trusting(&ca.ca_file);
    let wrong = trusting(&ca.wrong_ca_file);
    let url = rabbit.url(CERTIFICATE_HOST);

    let connection = connect::open(&url, ConnectionProperties::default(), &right)
        .await
        .expect("amqps with the right CA");
    let channel = connection.create_channel().await.expect("a channel over TLS");
    channel.close(200, "done".into()).await.unwrap();
    connection.close(200, "done".into()).await.unwrap();
    connect::check_tls(&url, &right, CHECK)
        .await
        .expect("the start-up check passes");

    let error = connect::check_tls(&url, &wrong, CHECK).await.unwrap_err();
    assert_eq!(error.failure, TlsFailure::UnknownCa, "{error}");
    let text = error.to_string();
    assert!(
        text.contains(&format!("RabbitMQ at localhost:{}", rabbit.port)),
        "{text}"
    );
    assert!(text.contains("unknown CA"), "{text}");
    let error = connect::check_tls(&rabbit.url("127.0.0.1"), &right, CHECK)
        .await
        .unwrap_err();
    assert_eq!(error.failure, TlsFailure::NameMismatch, "{error}");

    // A harvester (its database is the machine's, in plain text) refuses
    // to start when the broker's certificate is not trusted.
    let database = TestDatabase::create().await;
    let settings = clarion_harvester::Settings::try_parse_from([
        "clarion-harvester",
        "--http-addr=127.0.0.1:0",
        &format!("--database-url={}", database.url),
        &format!("--amqp-url={url}"),
        &format!("--extra-ca-file={}", ca.wrong_ca_file.display()),
    ])
    .unwrap();
    let refused = clarion_harvester::start(settings).await;
    let error = refused.err().expect("the harvester refuses to start");
    let text = error.to_string();
    assert!(text.contains("RabbitMQ") && text.contains("unknown CA"), "{text}");
}

#[actix_web::test]
async fn a_send_runs_end_to_end_with_every_link_over_verified_tls() {
    let ca = new_ca();
    let (pg, rabbit) = tokio::join!(start_postgres(&ca), TlsRabbitMq::start(&ca));
    let rabbit = rabbit.unwrap_or_else(|err| panic!("cannot start the TLS RabbitMQ node: {err:#}"));
    // Neither server takes plain text (hostssl only; no TCP listener), so
    // every service link below is TLS, verified against the test CA.
    let cluster = Cluster::start(ClusterOptions {
        harvesters: 1,
        dispatchers: true,
        coordinator: vec!["--tokens-per-job=100".into()],
        harvester: vec!["--batch-size=50".into()],
        servers: Some(ClusterServers {
            admin_database_url: pg.url(CERTIFICATE_HOST, "verify-full"),
            amqp_url: rabbit.url(CERTIFICATE_HOST),
            extra_ca_file: Some(ca.ca_file.clone()),
        }),
        ..ClusterOptions::default()
    })
    .await;
    let devices = alternating_devices(200, &["tls"]);
    seed_devices(&cluster.sql().await, &devices).await.unwrap();
    let (status, accepted) = cluster
        .send(&json!({"topics": ["tls"], "title": "Encrypted", "body": "all the way"}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let id = accepted["id"].as_str().expect("an id").to_owned();
    let status = cluster.wait_until_settled(&id, Duration::from_secs(60)).await;
    assert_eq!(status["status"], "complete", "{status}");
    for platform in Platform::ALL {
        let expected: Vec<&str> = devices
            .iter()
            .filter(|d| d.platform == platform)
            .map(|d| d.token.as_str())
            .collect();
        let stats = cluster.mocks().state(platform).accounting.stats();
        assert_eq!(stats.unique_tokens, expected.len() as u64, "{platform}");
        assert_eq!(stats.digest, digest(expected), "{platform}: exactly the audience");
    }
    // The coordinator's and the harvester's sessions are encrypted.
    let sessions = cluster
        .sql()
        .await
        .query(
            "SELECT a.application_name, s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.application_name IN ('clarion-coordinator', 'clarion-harvester')",
            &[],
        )
        .await
        .unwrap();
    for name in ["clarion-coordinator", "clarion-harvester"] {
        assert!(
            sessions.iter().any(|row| row.get::<_, &str>(0) == name),
            "{name} holds a session"
        );
    }
    assert!(
        sessions.iter().all(|row| row.get::<_, bool>(1)),
        "every session is TLS"
    );
    cluster.stop().await;
    drop(rabbit);
    drop(pg);
}
