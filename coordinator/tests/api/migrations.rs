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
