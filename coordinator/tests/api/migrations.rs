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
/// no heap visit) once V16 added `app` and `locale`; rows written without
/// an app (as every row before V16 was) are app `default`.
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
