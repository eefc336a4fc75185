//! The set-based writes of a batch against the real PostgreSQL (migrated
//! schema): two writes of one token in one batch keep their arrival order,
//! each answer is what a read returns after the commit, a refused write
//! of a set-based round fails alone, and a batch of
//! receipts requests counts exactly as the same requests one after the
//! other (duplicates within a request and across requests included).

use std::time::Duration;

use chrono::Utc;
use clarion_proto::{ApnsEnvironment, Platform};
use clarion_runtime::testing::TestDatabase;
use clarion_runtime::{PgPool, TlsSettings, Trust, db};
use futures::future::join_all;
use uuid::Uuid;

use super::registrations::{Change, RegistrationWrite, Written};
use super::{Bounds, GroupCommit, WriteError};
use crate::receipts::body::{Event, Receipt};
use crate::receipts::record::{Outcome, Request, record};
use crate::store::StoreError;
use crate::store::prepared::{Prepared, StatementCache};
use crate::store::registrations::{Device, StoredRegistration};

async fn migrated() -> (TestDatabase, PgPool) {
    let db = TestDatabase::create().await;
    crate::migrations::run(&db.url).await.expect("migrations run");
    let trust = Trust::load(&TlsSettings::default()).unwrap();
    let pool = db::pool(&db.settings(4), &trust, "set-based-test").unwrap();
    (db, pool)
}

/// One worker and a long wait: writes submitted in one poll of `join_all`
/// are queued before the worker runs, so they share one batch.
fn one_batch() -> Bounds {
    Bounds {
        queue_rows: 1000,
        batch_rows: 256,
        wait: Duration::from_millis(300),
        in_flight: 1,
        batch_deadline: Duration::from_secs(30),
    }
}

fn token(n: u8) -> String {
    format!("{n:02x}").repeat(32)
}

fn put(n: u8, topics: &[&str]) -> RegistrationWrite {
    RegistrationWrite {
        app: "default".into(),
        token: token(n),
        change: Change::Replace {
            device: Device {
                platform: Platform::Ios,
                environment: ApnsEnvironment::Production,
                locale: None,
                receipts: true,
                subscription: None,
                kind: clarion_proto::RegistrationKind::Device,
                attributes_type: None,
            },
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
        },
    }
}

fn write(n: u8, change: Change) -> RegistrationWrite {
    RegistrationWrite {
        app: "default".into(),
        token: token(n),
        change,
    }
}

fn stored(answer: Result<Written, WriteError>) -> StoredRegistration {
    match answer {
        Ok(Written::Stored(stored)) => *stored,
        other => panic!("not a stored registration: {other:?}"),
    }
}

async fn topics_of(db: &TestDatabase, n: u8) -> Vec<String> {
    db.client()
        .await
        .query(
            "SELECT topic FROM registrations WHERE token = $1 ORDER BY topic",
            &[&token(n)],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test]
async fn two_writes_of_one_token_in_one_batch_apply_in_arrival_order() {
    let (db, pool) = migrated().await;
    let writes = GroupCommit::start(pool, one_batch());
    let first = stored(writes.submit(put(1, &["a", "z"])).await);
    let answers = join_all([
        writes.submit(put(1, &["a", "b"])),
        writes.submit(put(2, &["c"])),
        writes.submit(put(1, &["c", "c"])),
        writes.submit(write(
            1,
            Change::AddTopic {
                topic: "d".into(),
                max_topics: 10,
            },
        )),
    ])
    .await;
    let answers: Vec<StoredRegistration> = answers.into_iter().map(stored).collect();
    let topics: Vec<Vec<String>> = answers.iter().map(|a| a.topics.clone()).collect();
    // Each answer is its own write's result, read back in its own round.
    assert_eq!(
        topics,
        [vec!["a", "b"], vec!["c"], vec!["c"], vec!["c", "d"]],
        "answers in arrival order"
    );
    assert_eq!(topics_of(&db, 1).await, ["c", "d"], "the last write wins");
    // The row of topic `a` was kept by the first write of the batch: the
    // registration's created_at is the first PUT's, its updated_at new.
    assert_eq!(answers[0].created_at, first.created_at, "created_at kept");
    assert!(answers[0].updated_at > first.updated_at, "updated_at refreshed");
    let transactions: i64 = db
        .client()
        .await
        .query_one(
            "SELECT count(DISTINCT xmin::text) FROM registrations WHERE token = ANY($1)",
            &[&vec![token(1), token(2)]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(transactions, 1, "the four writes shared one transaction");
    writes.stop();
}

/// The answers are built from what each round wrote, not read back: each
/// equals the registration a read returns after the commit (topics in
/// byte order, the oldest row's `created_at`, the newest `updated_at`),
/// for a new device, a replaced one and one following more topics, new or
/// already followed (its rows of different ages, so neither the rows read
/// before nor the row written alone give the answer's times).
#[tokio::test]
async fn each_answer_is_the_registration_a_read_returns() {
    let (_db, pool) = migrated().await;
    let writes = GroupCommit::start(pool.clone(), one_batch());
    let follow = |n: u8, topic: &str| {
        write(
            n,
            Change::AddTopic {
                topic: topic.into(),
                max_topics: 10,
            },
        )
    };
    stored(writes.submit(put(1, &["m", "a"])).await);
    stored(writes.submit(put(3, &["x"])).await);
    let first = stored(writes.submit(put(4, &["a"])).await);
    let second = stored(writes.submit(follow(4, "b")).await);
    assert!(second.updated_at > first.updated_at, "rows of different ages");
    let mut android = put(2, &["b", "B", "a-b", "ab", "b"]);
    if let Change::Replace { device, .. } = &mut android.change {
        device.platform = Platform::Android;
        device.locale = Some("pt-br".into());
        device.receipts = false;
    }
    let answers = join_all([
        writes.submit(android),
        writes.submit(follow(1, "Z")),
        writes.submit(follow(1, "a")),
        writes.submit(put(3, &["x", "y"])),
        writes.submit(follow(4, "b")),
    ])
    .await;
    let answers: Vec<StoredRegistration> = answers.into_iter().map(stored).collect();
    assert_eq!(
        answers[0].topics,
        ["B", "a-b", "ab", "b"],
        "byte order, once each"
    );
    assert_eq!(answers[1].topics, ["Z", "a", "m"]);
    assert_eq!(answers[4].created_at, first.created_at, "the oldest row's");
    assert!(answers[4].updated_at > second.updated_at, "the row refreshed now");
    // Device 1's two answers, one round each of one transaction, both
    // equal what is stored after it.
    for (n, answer) in [
        (2, &answers[0]),
        (1, &answers[1]),
        (1, &answers[2]),
        (3, &answers[3]),
        (4, &answers[4]),
    ] {
        let read = crate::store::registrations::get(&pool, "default", &token(n))
            .await
            .unwrap()
            .expect("registered");
        assert_eq!(&read, answer, "device {n}: the answer is what a read returns");
    }
    writes.stop();
}

/// One round replacing the topic sets of several devices that share topic
/// names: each device keeps exactly its own new set, whatever another
/// device of the round keeps or drops.
#[tokio::test]
async fn a_round_of_replacements_keeps_each_devices_own_topics() {
    let (db, pool) = migrated().await;
    let writes = GroupCommit::start(pool, one_batch());
    for answer in join_all([
        writes.submit(put(1, &["a", "b", "c"])),
        writes.submit(put(2, &["a", "b", "c"])),
        writes.submit(put(3, &["x"])),
    ])
    .await
    {
        stored(answer);
    }
    let answers = join_all([
        writes.submit(put(1, &["b"])),
        writes.submit(put(2, &["a", "c", "d"])),
        writes.submit(put(3, &["x", "a"])),
    ])
    .await;
    let topics: Vec<Vec<String>> = answers.into_iter().map(|a| stored(a).topics).collect();
    assert_eq!(topics, [vec!["b"], vec!["a", "c", "d"], vec!["a", "x"]]);
    assert_eq!(topics_of(&db, 1).await, ["b"]);
    assert_eq!(topics_of(&db, 2).await, ["a", "c", "d"]);
    assert_eq!(topics_of(&db, 3).await, ["a", "x"]);
    writes.stop();
}

/// The notices a session listening to the registration changes has
/// received within `patience` after the last one.
async fn notices_until_quiet(
    notices: &mut tokio::sync::mpsc::Receiver<tokio_postgres::Notification>,
    patience: Duration,
) -> Vec<String> {
    let mut payloads = Vec::new();
    while let Ok(Some(notice)) = tokio::time::timeout(patience, notices.recv()).await {
        payloads.push(notice.payload().to_owned());
    }
    payloads
}

/// A round of registration writes names its devices in one notice of its
/// own (migration V39): the trigger, which would send one per statement
/// (the upsert fires two, the replaced topics' delete a third), stays
/// quiet; a write of anyone else (here a hand-written statement) is still
/// told by the trigger.
#[tokio::test]
async fn a_round_of_writes_announces_its_devices_once_and_the_trigger_stays_quiet() {
    let (db, pool) = migrated().await;
    let writes = GroupCommit::start(pool, one_batch());
    stored(writes.submit(put(1, &["a", "b"])).await);
    let manager = db::Manager::new(
        &db.settings(1),
        &Trust::load(&TlsSettings::default()).unwrap(),
        "notices-test",
    )
    .unwrap();
    let (listener, mut notices) = manager.connect_listening(64).await.unwrap();
    listener
        .batch_execute(&format!("LISTEN {}", crate::read_cache::notices::CHANNEL))
        .await
        .unwrap();

    // One round: a replacement (rows deleted, inserted and refreshed), a
    // new device and a forgotten one.
    for answer in join_all([
        writes.submit(put(1, &["b", "c"])),
        writes.submit(put(2, &["x"])),
        writes.submit(write(3, Change::Delete)),
    ])
    .await
    {
        answer.unwrap();
    }
    let payloads = notices_until_quiet(&mut notices, Duration::from_secs(1)).await;
    let expected = serde_json::json!([
        ["default", token(1)],
        ["default", token(2)],
        ["default", token(3)]
    ]);
    assert_eq!(payloads.len(), 1, "one notice for the round: {payloads:?}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&payloads[0]).unwrap(),
        expected
    );

    db.client()
        .await
        .execute(
            "UPDATE registrations SET locale = 'fr' WHERE token = $1",
            &[&token(2)],
        )
        .await
        .unwrap();
    let payloads = notices_until_quiet(&mut notices, Duration::from_secs(1)).await;
    let told: Vec<serde_json::Value> = payloads
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    assert_eq!(
        told,
        [serde_json::json!([["default", token(2)]])],
        "the trigger tells of the others"
    );
    writes.stop();
}

#[tokio::test]
async fn a_refused_write_of_a_set_based_round_fails_alone() {
    let (db, pool) = migrated().await;
    let writes = GroupCommit::start(pool, one_batch());
    for n in [1, 4, 5] {
        stored(writes.submit(put(n, &["a", "b"])).await);
    }
    // One round: a topic added beyond the limit (refused), two devices
    // registered, one forgotten, one topic dropped.
    let answers = join_all([
        writes.submit(write(
            1,
            Change::AddTopic {
                topic: "c".into(),
                max_topics: 2,
            },
        )),
        writes.submit(put(2, &["x"])),
        writes.submit(put(3, &["y", "z"])),
        writes.submit(write(4, Change::Delete)),
        writes.submit(write(5, Change::RemoveTopic { topic: "a".into() })),
    ])
    .await;
    let mut answers = answers.into_iter();
    assert!(
        matches!(
            answers.next(),
            Some(Err(WriteError::Refused(StoreError::TooManyTopics { limit: 2 })))
        ),
        "the topic beyond the limit is refused"
    );
    assert_eq!(stored(answers.next().unwrap()).topics, ["x"]);
    assert_eq!(stored(answers.next().unwrap()).topics, ["y", "z"]);
    assert!(matches!(answers.next(), Some(Ok(Written::Removed(2)))));
    assert!(matches!(answers.next(), Some(Ok(Written::Removed(1)))));
    assert_eq!(
        topics_of(&db, 1).await,
        ["a", "b"],
        "the refused write changed nothing"
    );
    assert_eq!(topics_of(&db, 2).await, ["x"]);
    assert_eq!(topics_of(&db, 3).await, ["y", "z"]);
    assert!(topics_of(&db, 4).await.is_empty());
    assert_eq!(topics_of(&db, 5).await, ["b"]);
    writes.stop();
}

/// Tokens 1–3 reporting receipts on topic `r/a`, token 4 registered
/// there without receipts.
async fn register_receipts_devices(db: &TestDatabase) {
    let client = db.client().await;
    for n in 1..=4u8 {
        client
            .execute(
                "INSERT INTO registrations (app, topic, shard, token, platform, receipts)
                 VALUES ('default', 'r/a', $1, $2, 'ios', $3)",
                &[&(clarion_proto::shard_of(&token(n)) as i16), &token(n), &(n != 4)],
            )
            .await
            .unwrap();
    }
}

/// A notification sent for real to topic `r/a`.
async fn sent(db: &TestDatabase) -> Uuid {
    let id = Uuid::new_v4();
    db.client()
        .await
        .execute(
            "INSERT INTO notifications (id, payload, topics, api_key_id)
             VALUES ($1, '{}', ARRAY['r/a'], 'test')",
            &[&id],
        )
        .await
        .unwrap();
    id
}

fn receipt(id: Uuid, n: u8, event: Event) -> Receipt {
    Receipt {
        notification_id: id,
        token: token(n),
        event,
        at: None,
    }
}

/// Two requests: duplicates inside the first, and across the two.
fn two_requests(id: Uuid) -> [Vec<Receipt>; 2] {
    [
        vec![
            receipt(id, 1, Event::Received),
            receipt(id, 1, Event::Received),
            receipt(id, 2, Event::Opened),
            receipt(id, 4, Event::Received),
            receipt(Uuid::new_v4(), 3, Event::Received),
        ],
        vec![
            receipt(id, 1, Event::Received),
            receipt(id, 2, Event::Received),
            receipt(id, 2, Event::Opened),
            receipt(id, 3, Event::Opened),
            receipt(id, 3, Event::Received),
        ],
    ]
}

async fn recorded(pool: &PgPool, batches: &[&[Vec<Receipt>]]) -> Vec<Outcome> {
    let anyone = |_: &str| true;
    let mut outcomes = Vec::new();
    for batch in batches {
        let mut conn = pool.get().await.unwrap();
        let tx = conn.transaction().await.unwrap();
        let requests: Vec<Request<'_>> = batch
            .iter()
            .map(|receipts| Request {
                receipts,
                now: Utc::now(),
                cutoff: None,
                may_use_app: &anyone,
                slot: 0,
            })
            .collect();
        let statements = StatementCache::default();
        let prepared = Prepared::new(&tx, &statements);
        outcomes.extend(record(&prepared, &requests).await.expect("recorded"));
        tx.commit().await.unwrap();
    }
    outcomes
}

fn counts(outcome: &Outcome) -> (u64, u64, u64) {
    (outcome.accepted, outcome.duplicates, outcome.ignored)
}

#[tokio::test]
async fn a_batch_of_receipts_requests_counts_as_the_requests_one_after_the_other() {
    let (db, pool) = migrated().await;
    register_receipts_devices(&db).await;
    let together = sent(&db).await;
    let apart = sent(&db).await;
    let batch = two_requests(together);
    let one_by_one = two_requests(apart);
    let batched = recorded(&pool, &[&batch]).await;
    let sequential = recorded(&pool, &[&one_by_one[..1], &one_by_one[1..]]).await;
    let batched: Vec<_> = batched.iter().map(counts).collect();
    let sequential: Vec<_> = sequential.iter().map(counts).collect();
    // First request: token 1 received (its repeat a duplicate), token 2
    // opened; token 4 does not report, the unknown notification is
    // ignored. Second: token 1 and 2 again (duplicates), token 3 opened
    // and received (both count).
    assert_eq!(batched, [(2, 1, 2), (2, 3, 0)], "accepted, duplicates, ignored");
    assert_eq!(batched, sequential, "a batch counts as the requests in turn");
    let client = db.client().await;
    for id in [together, apart] {
        let row = client
            .query_one(
                "SELECT sum(received)::bigint, sum(opened)::bigint FROM notification_receipt_counts
                  WHERE notification_id = $1",
                &[&id],
            )
            .await
            .unwrap();
        let (received, opened): (i64, i64) = (row.get(0), row.get(1));
        assert_eq!((received, opened), (3, 2), "aggregates of {id}");
    }
    // The same batch again: every receipt is a duplicate or ignored.
    let again = recorded(&pool, &[&batch]).await;
    assert_eq!(
        again.iter().map(counts).collect::<Vec<_>>(),
        [(0, 3, 2), (0, 5, 0)]
    );
}
