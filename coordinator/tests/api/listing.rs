//! `GET /api/v1/notifications`: what was sent, newest first, filtered and
//! paged with a cursor, and the delivery curve of one.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::*;

async fn send(app: &TestCoordinator, topics: &[&str], title: &str, body: &str) -> String {
    let response = app
        .request(Method::POST, "/api/v1/notifications", Some(SEND_KEY))
        .json(&json!({"topics": topics, "title": title, "body": body}))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let sent: Value = response.json().await.expect("json");
    sent["id"].as_str().expect("an id").to_owned()
}

async fn list(app: &TestCoordinator, query: &str) -> Value {
    let response = app.get(&format!("/api/v1/notifications{query}"), SEND_KEY).await;
    assert_eq!(response.status(), StatusCode::OK, "{query}");
    response.json().await.expect("json")
}

fn ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| item["id"].as_str().expect("id").to_owned())
        .collect()
}

#[actix_web::test]
async fn notifications_are_listed_newest_first_filtered_and_paged() {
    let app = TestCoordinator::start().await;
    let first = send(&app, &["breaking/uk"], "Election called", "Polls open in June").await;
    let second = send(&app, &["sport"], "Cup final", "Kick-off at 3pm: 50% sold").await;
    let third = send(
        &app,
        &["breaking/uk", "sport"],
        "Storm warning",
        "Trains cancelled",
    )
    .await;

    let all = list(&app, "").await;
    assert_eq!(ids(&all), [third.clone(), second.clone(), first.clone()]);
    assert!(all["next_cursor"].is_null());
    let item = &all["items"][2];
    assert_eq!(item["title"], "Election called");
    assert_eq!(item["topics"], json!(["breaking/uk"]));
    assert_eq!(item["lane"], "standard");
    assert_eq!(item["href"], format!("/api/v1/notifications/{first}"));
    assert_eq!(item["sender_key_id"].as_str().map(str::len), Some(12));
    assert!(item["audience_total"].is_u64() && item["delivered_percent"].is_number());

    // The list gives the share of the reachable audience, as the status
    // (and the console's progress page) does: 8 of 10 devices accepted,
    // the other 2 gone, is 80% of the audience and 100% of the reachable.
    app.sql()
        .await
        .execute(
            "INSERT INTO notification_platforms (notification_id, platform, audience, sent, unregistered) \
             VALUES ($1, 'ios', 10, 8, 2) ON CONFLICT (notification_id, platform) \
             DO UPDATE SET audience = 10, sent = 8, unregistered = 2",
            &[&first.parse::<uuid::Uuid>().expect("a UUID")],
        )
        .await
        .expect("delivery counted");
    let item = &list(&app, "?q=Election").await["items"][0];
    let status = status_of(&app, first.parse().expect("a UUID")).await;
    assert_eq!(item["delivered_percent"], 80.0);
    assert_eq!(item["delivered_percent_of_reachable"], 100.0);
    assert_eq!(
        item["delivered_percent_of_reachable"],
        status["delivered_percent_of_reachable"]
    );

    // Filters.
    assert_eq!(
        ids(&list(&app, "?topic=sport").await),
        [third.clone(), second.clone()]
    );
    assert_eq!(ids(&list(&app, "?q=STORM").await), [third.as_str()]);
    assert_eq!(
        ids(&list(&app, "?q=50%25").await),
        [second.as_str()],
        "% is literal"
    );
    assert!(ids(&list(&app, "?q=5_%25").await).is_empty(), "_ is literal");
    assert_eq!(ids(&list(&app, "?status=cancelled").await), Vec::<String>::new());
    let cancelled = app
        .request(
            Method::POST,
            &format!("/api/v1/notifications/{second}/cancel"),
            Some(SEND_KEY),
        )
        .send()
        .await
        .expect("sent");
    assert_eq!(cancelled.status(), StatusCode::OK);
    assert_eq!(ids(&list(&app, "?status=cancelled").await), [second.as_str()]);
    let created: Vec<String> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["created_at"].as_str().unwrap().to_owned())
        .collect();
    let from = urlencode(&created[1]);
    assert_eq!(
        ids(&list(&app, &format!("?from={from}")).await),
        [third.clone(), second.clone()]
    );
    assert_eq!(
        ids(&list(&app, &format!("?until={from}")).await),
        [first.as_str()]
    );
    assert!(ids(&list(&app, &format!("?from={from}&until={from}")).await).is_empty());

    // Pages of one, following the cursor, give every item once.
    let mut seen = Vec::new();
    let mut query = "?limit=1".to_owned();
    loop {
        let page = list(&app, &query).await;
        seen.extend(ids(&page));
        match page["next_cursor"].as_str() {
            Some(cursor) => query = format!("?limit=1&cursor={cursor}"),
            None => break,
        }
        assert!(seen.len() <= 3, "the cursor loops");
    }
    // The last full page has a cursor to an empty page.
    assert_eq!(seen, [third, second, first]);
    app.stop().await;
}

#[actix_web::test]
async fn bad_filters_are_refused_with_what_is_wrong() {
    let app = TestCoordinator::start().await;
    for (query, says) in [
        ("?limit=0", "limit"),
        ("?limit=201", "limit"),
        ("?status=sent", "status"),
        ("?topic=a//b", "topic"),
        ("?cursor=yesterday", "cursor"),
        ("?from=last-week", "`from` must be an RFC 3339 time"),
        ("?until=2026-13-01T00:00:00Z", "`until` must be an RFC 3339 time"),
        ("?colour=red", "invalid query"),
    ] {
        let response = app.get(&format!("/api/v1/notifications{query}"), SEND_KEY).await;
        let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid-request").await;
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(says), "{query}: {detail}");
    }
    // Reading the list takes the `send` scope.
    let response = app.get("/api/v1/notifications", REGISTER_KEY).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    app.stop().await;
}

fn urlencode(text: &str) -> String {
    text.replace('+', "%2B").replace(':', "%3A")
}

#[actix_web::test]
async fn the_delivery_curve_is_the_cumulative_share_accepted_with_an_etag() {
    let app = TestCoordinator::start().await;
    let id = send(&app, &["breaking/uk"], "Storm", "Trains cancelled").await;
    let path = format!("/api/v1/notifications/{id}/curve");
    let empty: Value = app.get(&path, SEND_KEY).await.json().await.expect("json");
    assert_eq!(
        empty,
        json!({"accepted": [], "received": [], "opened": []}),
        "nothing accepted yet"
    );

    // What the delivery reports write: the audience harvested and the
    // accept-time histogram.
    let sql = app.sql().await;
    let uuid: uuid::Uuid = id.parse().expect("uuid");
    sql.execute(
        "INSERT INTO notification_platforms (notification_id, platform, audience) VALUES ($1, 'ios', 60), ($1, 'android', 40)",
        &[&uuid],
    )
    .await
    .expect("audience");
    sql.execute(
        "INSERT INTO notification_accepts (notification_id, after_ms, accepted) VALUES ($1, 250, 40), ($1, 500, 50)",
        &[&uuid],
    )
    .await
    .expect("accepts");
    let response = app.get(&path, SEND_KEY).await;
    assert_eq!(response.status(), StatusCode::OK);
    let etag = response.headers().get("etag").expect("an ETag").to_owned();
    let curve: Value = response.json().await.expect("json");
    assert_eq!(curve["accepted"], json!([[0.25, 0.4], [0.5, 0.9]]));
    let again = app
        .request(Method::GET, &path, Some(SEND_KEY))
        .header("if-none-match", etag)
        .send()
        .await
        .expect("sent");
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);

    let unknown = app
        .get(
            &format!("/api/v1/notifications/{}/curve", uuid::Uuid::now_v7()),
            SEND_KEY,
        )
        .await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    app.stop().await;
}
