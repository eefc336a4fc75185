//! Migrations apply once, even when several coordinators start together.

use clarion_coordinator::migrations;
use clarion_runtime::testing::TestDatabase;

#[actix_web::test]
async fn replicas_starting_together_migrate_once() {
    let db = TestDatabase::create().await;
    let runs = futures::future::join_all((0..4).map(|_| migrations::run(&db.url))).await;
    let applied: Vec<Vec<String>> = runs
        .into_iter()
        .map(|run| run.expect("migration succeeds"))
        .collect();
    let total: usize = applied.iter().map(Vec::len).sum();
    let winners = applied.iter().filter(|names| !names.is_empty()).count();
    assert_eq!(
        winners, 1,
        "exactly one replica applies the migrations: {applied:?}"
    );
    assert!(total >= 2, "{applied:?}");

    let (client, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let options: Vec<String> = client
        .query_one(
            "SELECT reloptions::text[] FROM pg_class WHERE relname = 'registrations'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        options.iter().any(|o| o == "autovacuum_vacuum_scale_factor=0.01"),
        "{options:?}"
    );
    // Running again applies nothing.
    assert!(migrations::run(&db.url).await.unwrap().is_empty());
}

/// The harvest reads everything from the primary key (an index-only scan,
/// no heap visit) once V16 added `app` and `locale`, its filter on `kind`
/// (V35) included; rows written without an app (as every row before V16
/// was) are app `default`.
#[actix_web::test]
async fn the_harvest_stays_an_index_only_scan_and_rows_without_an_app_are_app_default() {
    let db = TestDatabase::create().await;
    let (client, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    migrations::run(&db.url).await.unwrap();
    client
        .batch_execute(
            "INSERT INTO registrations (topic, shard, token, platform)
             SELECT 'breaking/uk', n % 1024, md5(n::text), 'android' FROM generate_series(1, 5000) n",
        )
        .await
        .unwrap();
    // VACUUM marks the pages all-visible (what autovacuum does in service).
    client
        .batch_execute("VACUUM ANALYZE registrations")
        .await
        .unwrap();
    let apps: Vec<String> = client
        .query("SELECT DISTINCT app FROM registrations", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(apps, ["default"]);
    let plan: serde_json::Value = client
        .query_one(
            "EXPLAIN (FORMAT JSON) SELECT token, platform, apns_environment, locale FROM registrations
              WHERE app = 'default' AND topic = 'breaking/uk' AND shard >= 0 AND shard < 64
                AND kind = 'device'
              ORDER BY shard, token",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let top = &plan[0]["Plan"];
    assert_eq!(top["Node Type"], "Index Only Scan", "{plan}");
    assert_eq!(top["Index Name"], "registrations_pkey", "{plan}");
}

/// V17 moves every per-platform counter of the rows stored before it into
/// `notification_platforms`, value for value, and drops the columns; the
/// jobs' device counts become an object keyed by platform; only the
/// platforms `platform_allowed` lists are accepted afterwards.
#[actix_web::test]
async fn platform_counters_move_to_their_own_rows_exactly() {
    let db = TestDatabase::create().await;
    let (client, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    migrations::run_up_to(&db.url, 16).await.unwrap();
    let counters = [
        "audience",
        "sent",
        "failed",
        "invalid",
        "unregistered",
        "expired",
        "dry_run",
        "cancelled",
        "held_back",
    ];
    // Three notifications as V16 stored them: every counter different, and
    // one that never counted anything.
    let ids = [
        uuid::Uuid::from_u128(1),
        uuid::Uuid::from_u128(2),
        uuid::Uuid::from_u128(3),
    ];
    for id in ids {
        client
            .execute(
                "INSERT INTO notifications (id, payload, topics, api_key_id) VALUES ($1, '{}', '{t}', 'k')",
                &[&id],
            )
            .await
            .unwrap();
    }
    let value = |n: usize, c: usize, platform: usize| (n * 1_000 + c * 10 + platform) as i64;
    for (n, id) in ids.iter().enumerate().take(2) {
        for (c, counter) in counters.iter().enumerate() {
            for (p, platform) in ["ios", "android"].iter().enumerate() {
                client
                    .execute(
                        &format!("UPDATE notifications SET {counter}_{platform} = $2 WHERE id = $1"),
                        &[id, &value(n, c, p)],
                    )
                    .await
                    .unwrap();
            }
        }
    }
    client
        .execute(
            "INSERT INTO notification_jobs (notification_id, job_index, outcome, ios, android, batches)
             VALUES ($1, 0, 'harvested', 7, 9, 2), ($1, 1, 'failed', 0, 0, 0)",
            &[&ids[0]],
        )
        .await
        .unwrap();

    let applied = migrations::run(&db.url).await.unwrap();
    assert_eq!(
        applied[..2],
        ["V17__platforms_as_data", "V18__platform_checks_validated"],
        "the platform migrations come next (later ones may follow)"
    );

    for (n, id) in ids.iter().enumerate() {
        let rows = client
            .query(
                &format!(
                    "SELECT platform, {} FROM notification_platforms WHERE notification_id = $1 ORDER BY platform DESC",
                    counters.join(", ")
                ),
                &[id],
            )
            .await
            .unwrap();
        if n == 2 {
            assert!(rows.is_empty(), "nothing counted, no rows");
            continue;
        }
        let platforms: Vec<&str> = rows.iter().map(|row| row.get(0)).collect();
        assert_eq!(platforms, ["ios", "android"]);
        for (p, row) in rows.iter().enumerate() {
            for (c, counter) in counters.iter().enumerate() {
                assert_eq!(
                    row.get::<_, i64>(c + 1),
                    value(n, c, p),
                    "{counter} of {}",
                    platforms[p]
                );
            }
        }
    }
    let left: i64 = client
        .query_one(
            "SELECT count(*) FROM information_schema.columns
              WHERE table_name IN ('notifications', 'notification_jobs')
                AND (column_name LIKE '%ios' OR column_name LIKE '%android')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "no column per platform is left");
    let devices: Vec<serde_json::Value> = client
        .query(
            "SELECT devices FROM notification_jobs WHERE notification_id = $1 ORDER BY job_index",
            &[&ids[0]],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        devices,
        [serde_json::json!({"ios": 7, "android": 9}), serde_json::json!({})]
    );
    for platform in clarion_proto::Platform::ALL {
        client
            .execute(
                "INSERT INTO registrations (topic, shard, token, platform) VALUES ('t', 1, $1, $1)",
                &[&platform.as_str()],
            )
            .await
            .expect("a platform of the list is allowed");
    }
    let refused = client
        .execute(
            "INSERT INTO registrations (topic, shard, token, platform) VALUES ('t', 1, 'x', 'windows')",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION)
    );
}
