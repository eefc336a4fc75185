//! The Android dispatchers learn from RabbitMQ how many of them share the
//! FCM project's quota (each paces itself at its share): a replica more,
//! and each of them counts it; a replica killed, and the other counts that.

use std::time::{Duration, Instant};

use clarion_dispatcher::Dispatcher;
use clarion_load_tests::testkit::{Cluster, ClusterOptions};
use clarion_proto::Platform;

/// Waits until every one of `dispatchers` counts `replicas`.
async fn until_counted(dispatchers: &[&Dispatcher], replicas: u32) {
    let started = Instant::now();
    while dispatchers.iter().any(|d| d.replicas() != replicas) {
        let seen: Vec<u32> = dispatchers.iter().map(|d| d.replicas()).collect();
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the dispatchers count {seen:?} replicas, not {replicas}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[actix_web::test]
async fn replicas_sharing_the_quota_are_counted_from_the_queues_consumers() {
    let mut cluster = Cluster::start(ClusterOptions {
        dispatchers: false,
        ..ClusterOptions::default()
    })
    .await;
    cluster.start_mocks().await;
    let first = cluster.start_dispatcher(Platform::Android, &[]).await;
    until_counted(&[&cluster.dispatchers[first]], 1).await;

    let second = cluster.start_dispatcher(Platform::Android, &[]).await;
    // An iOS dispatcher consumes another queue and shares no FCM quota.
    cluster.start_dispatcher(Platform::Ios, &[]).await;
    until_counted(&[&cluster.dispatchers[first], &cluster.dispatchers[second]], 2).await;

    cluster.dispatchers[second].kill();
    until_counted(&[&cluster.dispatchers[first]], 1).await;
    cluster.stop().await;
}
