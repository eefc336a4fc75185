//! Scheduled sends: `send_at` on a send, the `scheduled` status, cancel and
//! replace (`PUT`) before the time, what the scheduler's look counts as
//! due, firing on time — after a restart too — and exactly once with two
//! replicas on one database.

use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use clarion_coordinator::store::scheduled::any_due;
use reqwest::{Method, Response, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::common::*;

/// Longest a test waits for a firing it expects (far above the quarter
/// second the scheduler looks every).
const FIRE_PATIENCE: Duration = Duration::from_secs(10);

fn body(id: Uuid, send_at: DateTime<Utc>) -> Value {
    json!({
        "id": id,
        "topics": ["breaking/uk"],
        "title": "Polls close",
        "body": "Results from 10pm",
        "send_at": send_at.to_rfc3339(),
    })
}

async fn post(app: &TestCoordinator, body: &Value) -> Response {
    app.request(Method::POST, "/api/v1/notifications", Some(SEND_KEY))
        .json(body)
        .send()
        .await
        .expect("sent")
}

async fn put(app: &TestCoordinator, id: Uuid, body: &Value) -> Response {
    app.request(
        Method::PUT,
        &format!("/api/v1/notifications/{id}"),
        Some(SEND_KEY),
    )
    .json(body)
    .send()
    .await
    .expect("sent")
}

async fn cancel(app: &TestCoordinator, id: Uuid) -> Response {
    app.request(
        Method::POST,
        &format!("/api/v1/notifications/{id}/cancel"),
        Some(SEND_KEY),
    )
    .send()
    .await
    .expect("sent")
}

/// Asserts a 422 whose detail names `send_at` or the body's `id`, and says `says`.
async fn refused(response: Response, says: &str) {
    let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid-request").await;
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(
        (detail.contains("`send_at`") || detail.contains("`id`")) && detail.contains(says),
        "{says}: {detail}"
    );
}

/// Schedules a notification for `send_at`; returns its id.
async fn schedule(app: &TestCoordinator, send_at: DateTime<Utc>) -> Uuid {
    let id = Uuid::now_v7();
    let response = post(app, &body(id, send_at)).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let accepted: Value = response.json().await.expect("json");
    assert_eq!(accepted["status"], "scheduled", "{accepted}");
    id
}

async fn status(app: &TestCoordinator, id: Uuid) -> Value {
    let response = app.get(&format!("/api/v1/notifications/{id}"), SEND_KEY).await;
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.expect("json")
}

fn time(value: &Value) -> DateTime<Utc> {
    value
        .as_str()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| panic!("not a time: {value}"))
}

/// Polls the notification until it has left `scheduled`; its status.
async fn fired(app: &TestCoordinator, id: Uuid) -> Value {
    let deadline = tokio::time::Instant::now() + FIRE_PATIENCE;
    loop {
        let now = status(app, id).await;
        if now["status"] != "scheduled" {
            return now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{id} did not fire within {FIRE_PATIENCE:?}: {now}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Shard jobs in the outbox for `id`.
async fn outbox_jobs(sql: &tokio_postgres::Client, id: Uuid) -> i64 {
    sql.query_one(
        "SELECT count(*) FROM job_outbox WHERE notification_id = $1",
        &[&id],
    )
    .await
    .expect("outbox count")
    .get(0)
}

#[actix_web::test]
async fn a_send_at_in_the_past_or_beyond_thirty_days_is_refused() {
    let app = TestCoordinator::start().await;
    let now = Utc::now();
    for (send_at, says) in [
        (
            json!((now - chrono::Duration::seconds(5)).to_rfc3339()),
            "not in the future",
        ),
        (json!((now + chrono::Duration::days(31)).to_rfc3339()), "30 days"),
        (json!("tomorrow at six"), "RFC 3339"),
        (json!("2030-01-31"), "RFC 3339"),
    ] {
        let mut request = body(Uuid::now_v7(), now);
        request["send_at"] = send_at.clone();
        refused(post(&app, &request).await, says).await;
    }
    let listed: Value = app
        .get("/api/v1/notifications", SEND_KEY)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(listed["items"], json!([]), "nothing was stored");
    app.stop().await;
}

#[actix_web::test]
async fn a_scheduled_notification_waits_is_listed_and_replays() {
    let app = TestCoordinator::start().await;
    let send_at = (Utc::now() + chrono::Duration::hours(1)).trunc_subsecs(0);
    let id = schedule(&app, send_at).await;

    let scheduled = status(&app, id).await;
    assert_eq!(scheduled["status"], "scheduled");
    assert_eq!(time(&scheduled["send_at"]), send_at);
    assert!(scheduled["fired_at"].is_null());
    assert_eq!(scheduled["jobs"]["planned"], 0);
    assert!(scheduled["ninety_in_two"].is_null(), "{scheduled}");
    assert_eq!(outbox_jobs(&app.sql().await, id).await, 0, "nothing planned");

    // Listed with its time under `status=scheduled`; a send-now is not.
    assert_eq!(
        app.send(SEND_KEY, &["sport"]).await.status(),
        StatusCode::ACCEPTED
    );
    let listed: Value = app
        .get("/api/v1/notifications?status=scheduled", SEND_KEY)
        .await
        .json()
        .await
        .expect("json");
    let items = listed["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{listed}");
    assert_eq!(items[0]["id"], id.to_string());
    assert_eq!(time(&items[0]["send_at"]), send_at);
    let all: Value = app
        .get("/api/v1/notifications", SEND_KEY)
        .await
        .json()
        .await
        .expect("json");
    assert!(
        all["items"][0]["send_at"].is_null(),
        "a send-now has no send_at: {all}"
    );

    // The same id and content again is a replay; another time is a conflict.
    let again = post(&app, &body(id, send_at)).await;
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(again.json::<Value>().await.expect("json")["status"], "scheduled");
    let later = post(&app, &body(id, send_at + chrono::Duration::minutes(5))).await;
    expect_problem(later, StatusCode::CONFLICT, "conflict").await;

    let audit: Value = app
        .get("/api/v1/audit?action=send", ADMIN_KEY)
        .await
        .json()
        .await
        .expect("json");
    let details: Vec<&str> = audit["records"]
        .as_array()
        .expect("records")
        .iter()
        .filter(|record| record["target"] == id.to_string())
        .filter_map(|record| record["detail"].as_str())
        .collect();
    assert_eq!(details.len(), 2, "{audit}");
    assert!(details.contains(&"replayed"), "{details:?}");
    assert!(
        details.iter().any(|d| d.starts_with("scheduled for 20")),
        "{details:?}"
    );
    app.stop().await;
}

#[actix_web::test]
async fn a_cancelled_scheduled_notification_never_fires() {
    let app = TestCoordinator::start().await;
    let soon = Utc::now() + chrono::Duration::seconds(2);
    let doomed = schedule(&app, soon).await;
    // Fires at the same time: once it has, the scheduler has passed the
    // cancelled one's time too.
    let witness = schedule(&app, soon).await;

    let response = cancel(&app, doomed).await;
    assert_eq!(response.status(), StatusCode::OK);
    let cancelled: Value = response.json().await.expect("json");
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert!(cancelled["ninety_in_two"].is_null(), "never sent: {cancelled}");
    assert!(cancelled["cancelled_at"].is_string(), "{cancelled}");
    // Nothing of it was sent, so nothing completed.
    assert!(cancelled["completed_at"].is_null(), "never sent: {cancelled}");

    fired(&app, witness).await;
    let after = status(&app, doomed).await;
    assert_eq!(after["status"], "cancelled");
    assert!(after["fired_at"].is_null(), "{after}");
    assert_eq!(after["jobs"]["planned"], 0);
    assert_eq!(outbox_jobs(&app.sql().await, doomed).await, 0);
    // Cancelling again is still fine and changes nothing; a cancelled one
    // cannot be replaced.
    let again = cancel(&app, doomed).await;
    assert_eq!(again.status(), StatusCode::OK);
    let again: Value = again.json().await.expect("json");
    for field in ["status", "cancelled_at", "updated_at", "completed_at"] {
        assert_eq!(again[field], cancelled[field], "{field} after a second cancel");
    }
    let replaced = put(
        &app,
        doomed,
        &body(doomed, Utc::now() + chrono::Duration::hours(1)),
    )
    .await;
    expect_problem(replaced, StatusCode::CONFLICT, "conflict").await;
    app.stop().await;
}

#[actix_web::test]
async fn a_scheduled_notification_is_replaced_until_it_fires() {
    let app = TestCoordinator::start().await;
    let id = schedule(&app, Utc::now() + chrono::Duration::hours(1)).await;
    let new_time = (Utc::now() + chrono::Duration::hours(2)).trunc_subsecs(0);
    let replacement = json!({
        "topics": ["breaking/us", "sport"],
        "title": "Polls close later",
        "body": "Results from 11pm",
        "lane": "urgent",
        "dry_run": true,
        "send_at": new_time.to_rfc3339(),
    });
    let response = put(&app, id, &replacement).await;
    assert_eq!(response.status(), StatusCode::OK);
    let replaced: Value = response.json().await.expect("json");
    assert_eq!(replaced["status"], "scheduled");
    assert_eq!(replaced["topics"], json!(["breaking/us", "sport"]));
    assert_eq!(replaced["lane"], "urgent");
    assert_eq!(replaced["dry_run"], true);
    assert_eq!(time(&replaced["send_at"]), new_time);
    let listed: Value = app
        .get("/api/v1/notifications?q=11pm", SEND_KEY)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(listed["items"][0]["title"], "Polls close later", "{listed}");

    // The body's id must be the path's; send_at is required and checked.
    let mut other_id = replacement.clone();
    other_id["id"] = json!(Uuid::now_v7());
    refused(put(&app, id, &other_id).await, "`id`").await;
    let mut same_id = replacement.clone();
    same_id["id"] = json!(id);
    assert_eq!(put(&app, id, &same_id).await.status(), StatusCode::OK);
    let mut untimed = replacement.clone();
    untimed.as_object_mut().expect("object").remove("send_at");
    refused(put(&app, id, &untimed).await, "`send_at` is required").await;
    let mut past = replacement.clone();
    past["send_at"] = json!((Utc::now() - chrono::Duration::minutes(1)).to_rfc3339());
    refused(put(&app, id, &past).await, "not in the future").await;
    let unknown = put(&app, Uuid::now_v7(), &replacement).await;
    expect_problem(unknown, StatusCode::NOT_FOUND, "not-found").await;
    let register_key = app
        .request(
            Method::PUT,
            &format!("/api/v1/notifications/{id}"),
            Some(REGISTER_KEY),
        )
        .json(&replacement)
        .send()
        .await
        .expect("sent");
    assert_eq!(register_key.status(), StatusCode::FORBIDDEN);

    // Once it fired it is too late.
    let sql = app.sql().await;
    sql.execute("UPDATE notifications SET send_at = now() WHERE id = $1", &[&id])
        .await
        .expect("due now");
    fired(&app, id).await;
    let too_late = put(&app, id, &replacement).await;
    let problem = expect_problem(too_late, StatusCode::CONFLICT, "conflict").await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("only a scheduled"),
        "{problem}"
    );
    let audit: Value = app
        .get("/api/v1/audit?action=replace", ADMIN_KEY)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(audit["records"].as_array().map(Vec::len), Some(2), "{audit}");
    assert_eq!(audit["records"][0]["target"], id.to_string());
    app.stop().await;
}

#[actix_web::test]
async fn a_scheduled_notification_fires_within_a_second_of_its_time() {
    let app = TestCoordinator::start().await;
    let send_at = Utc::now() + chrono::Duration::seconds(2);
    let id = schedule(&app, send_at).await;
    let send_at = time(&status(&app, id).await["send_at"]);

    let fired = fired(&app, id).await;
    let fired_at = time(&fired["fired_at"]);
    assert!(fired_at >= send_at, "fired early: {fired}");
    assert!(
        fired_at - send_at < chrono::Duration::seconds(1),
        "fired {} ms late",
        (fired_at - send_at).num_milliseconds()
    );
    assert_eq!(fired["status"], "harvesting", "{fired}");
    let planned = fired["jobs"]["planned"].as_i64().expect("planned");
    assert!(planned > 0);
    let sql = app.sql().await;
    assert_eq!(outbox_jobs(&sql, id).await, planned);
    // Its jobs carry the firing as their send time (the TTL and the accept
    // times count from it), and the relay publishes them.
    let sent_at: DateTime<Utc> = sql
        .query_one(
            "SELECT coalesce(fired_at, created_at) FROM notifications WHERE id = $1",
            &[&id],
        )
        .await
        .expect("sent at")
        .get(0);
    assert_eq!(sent_at, fired_at);
    assert!(fired["ninety_in_two"].is_null(), "open: {fired}");

    // A retry of the original request, its time passed, is a replay.
    let again = post(&app, &body(id, send_at)).await;
    assert_eq!(again.status(), StatusCode::OK);
    assert_ne!(again.json::<Value>().await.expect("json")["status"], "scheduled");
    app.stop().await;
}

#[actix_web::test]
async fn the_schedulers_look_sees_only_what_is_due() {
    let mut app = TestCoordinator::start().await;
    let sql = app.sql().await;
    assert!(!any_due(&sql).await.expect("look"), "nothing is scheduled yet");
    let id = schedule(&app, Utc::now() + chrono::Duration::minutes(10)).await;
    assert!(!any_due(&sql).await.expect("look"), "due in ten minutes");
    // With no coordinator to fire it, make it due, then cancel it.
    app.stop_coordinator().await;
    for (update, due) in [
        (
            "UPDATE notifications SET send_at = now() - interval '1 second' WHERE id = $1",
            true,
        ),
        (
            "UPDATE notifications SET status = 'cancelled' WHERE id = $1",
            false,
        ),
    ] {
        sql.execute(update, &[&id]).await.expect("update");
        assert_eq!(any_due(&sql).await.expect("look"), due, "after {update}");
    }
    app.stop().await;
}

#[actix_web::test]
async fn a_notification_due_while_no_coordinator_ran_fires_after_the_restart() {
    let mut app = TestCoordinator::start().await;
    let send_at = Utc::now() + chrono::Duration::seconds(1);
    let id = schedule(&app, send_at).await;
    app.stop_coordinator().await;
    // Let its time pass with nothing running.
    let until_due = (send_at - Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(until_due + Duration::from_millis(300)).await;
    let sql = app.sql().await;
    let row = sql
        .query_one("SELECT status FROM notifications WHERE id = $1", &[&id])
        .await
        .expect("row");
    assert_eq!(row.get::<_, &str>(0), "scheduled");

    app.restart().await;
    let fired = fired(&app, id).await;
    assert!(time(&fired["fired_at"]) > send_at, "{fired}");
    assert_eq!(
        outbox_jobs(&sql, id).await,
        fired["jobs"]["planned"].as_i64().expect("planned")
    );
    app.stop().await;
}

#[actix_web::test]
async fn two_replicas_fire_each_scheduled_notification_once() {
    let app = TestCoordinator::start().await;
    let replica = app.replica().await;
    let sql = app.sql().await;
    // Every committed move out of `scheduled`, counted by the database.
    sql.batch_execute(
        "CREATE TABLE test_fires (id uuid NOT NULL);
         CREATE FUNCTION test_count_fire() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN INSERT INTO test_fires VALUES (NEW.id); RETURN NEW; END $$;
         CREATE TRIGGER test_count_fire AFTER UPDATE ON notifications FOR EACH ROW
           WHEN (OLD.status = 'scheduled' AND NEW.status <> 'scheduled')
           EXECUTE FUNCTION test_count_fire();",
    )
    .await
    .expect("fire counter");

    // Many due at the same instant: both replicas' schedulers race for them.
    // Scheduled an hour ahead (however slowly a busy machine takes the 24
    // requests), then all made due at once.
    let send_at = Utc::now() + chrono::Duration::hours(1);
    let mut ids = Vec::new();
    for _ in 0..24 {
        ids.push(schedule(&app, send_at).await);
    }
    let due = sql
        .execute(
            "UPDATE notifications SET send_at = now() WHERE id = ANY($1)",
            &[&ids],
        )
        .await
        .expect("made due");
    assert_eq!(due, 24);
    for id in &ids {
        fired(&app, *id).await;
    }
    for id in &ids {
        let fires: i64 = sql
            .query_one("SELECT count(*) FROM test_fires WHERE id = $1", &[id])
            .await
            .expect("fires")
            .get(0);
        assert_eq!(fires, 1, "{id} fired {fires} times");
        let planned: i32 = sql
            .query_one("SELECT jobs_planned FROM notifications WHERE id = $1", &[id])
            .await
            .expect("planned")
            .get(0);
        assert!(planned > 0);
        assert_eq!(outbox_jobs(&sql, *id).await, i64::from(planned), "{id}: one plan");
    }
    replica.stop().await;
    app.stop().await;
}

#[actix_web::test]
async fn the_watchdog_never_takes_a_scheduled_notification_for_a_stalled_one() {
    let app = TestCoordinator::start_with(&["--stall-secs=1"]).await;
    let waiting = schedule(&app, Utc::now() + chrono::Duration::hours(1)).await;
    let sent: Value = app.send(SEND_KEY, &["sport"]).await.json().await.expect("json");
    let stalled: Uuid = sent["id"].as_str().and_then(|id| id.parse().ok()).expect("an id");
    // Both idle for an hour; the send-now's jobs went out and never reported.
    let sql = app.sql().await;
    sql.batch_execute(
        "UPDATE job_outbox SET published_at = now();
         UPDATE notifications SET updated_at = now() - interval '1 hour';",
    )
    .await
    .expect("idle");
    let deadline = tokio::time::Instant::now() + FIRE_PATIENCE;
    while status(&app, stalled).await["status"] != "failed" {
        assert!(tokio::time::Instant::now() < deadline, "the watchdog never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = status(&app, waiting).await;
    assert_eq!(after["status"], "scheduled", "{after}");
    assert!(after["failure_reason"].is_null(), "{after}");
    app.stop().await;
}
