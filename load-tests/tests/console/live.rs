//! The console's Live Activity page in headless Chromium against a whole
//! cluster with the mock APNs: start a match from its template (the
//! lock-screen preview follows the form), see the start pushes accepted,
//! push a score, end it, delete it; each step checked at the mock APNs.

use std::time::Duration;

use clarion_load_tests::testkit::{Cluster, ClusterOptions};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::browser::Browser;
use super::sign_in;

const WAIT: Duration = Duration::from_secs(120);
const STARTERS: u64 = 3;

/// Polls `check` until it answers `Some`, for at most [`WAIT`].
async fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[actix_web::test]
async fn an_editor_starts_a_match_pushes_a_score_ends_and_deletes_it() {
    let cluster = Cluster::start(ClusterOptions {
        harvesters: 1,
        dispatchers: true,
        ..ClusterOptions::default()
    })
    .await;
    for n in 0..STARTERS {
        cluster
            .register_push_to_start(
                &format!("5a{n:062x}"),
                "MatchAttributes",
                "production",
                &["sport/football"],
            )
            .await;
    }
    let browser = Browser::start(1280, 900).await;
    sign_in(&browser, &cluster.base).await;
    browser.click("#nav-live").await;
    browser.shown("#la-start-form").await;
    browser
        .until_text("#la-preview .la-title", "England 0 – 0 France")
        .await;
    // The preview follows the form.
    browser
        .set_value(
            "#la-state",
            r#"{"home": 0, "away": 0, "minute": 1, "status": "Kick-off"}"#,
        )
        .await;
    browser.until_text("#la-preview .la-line", "1' · Kick-off").await;
    browser.screenshot("live-start").await;
    browser.click("#la-start").await;
    let id = browser
        .until(
            "the activity's page",
            "return location.hash.startsWith('#/live/') ? location.hash.slice(7) : null;",
        )
        .await;
    let id = id.as_str().expect("an id").to_owned();
    browser.until_text("#la-status", "live").await;
    browser.until_text("#la-accepted", &STARTERS.to_string()).await;
    let apns = &cluster.mocks().apns;
    let channel = eventually("the channel at the mock", || apns.channels.channel_ids().pop()).await;

    browser.type_into("#la-field-home", "1").await;
    browser.type_into("#la-field-minute", "23").await;
    browser.type_into("#la-field-status", "Goal! Kane 23'").await;
    browser
        .until_text("#la-preview .la-title", "England 1 – 0 France")
        .await;
    browser.click("#la-push").await;
    let updates = eventually("the score at the mock", || {
        apns.channels
            .updates(&channel)
            .filter(|updates| !updates.is_empty())
    })
    .await;
    assert_eq!(updates.len(), 1, "{updates:?}");
    assert_eq!(updates[0]["aps"]["event"], "update");
    assert_eq!(
        updates[0]["aps"]["content-state"],
        json!({"home": 1, "away": 0, "minute": 23, "status": "Goal! Kane 23'"})
    );
    browser
        .until(
            "the update's row answered",
            "const row = document.querySelector('#la-updates tbody tr'); \
             return row !== null && row.textContent.includes('sent');",
        )
        .await;
    browser.screenshot("live").await;

    browser.type_into("#la-field-status", "Full time").await;
    browser.click("#la-end").await;
    browser.click("#confirm-ok").await;
    browser.until_text("#la-status", "ended").await;
    let updates = eventually("the end at the mock", || {
        apns.channels
            .updates(&channel)
            .filter(|updates| updates.len() == 2)
    })
    .await;
    assert_eq!(updates[1]["aps"]["event"], "end", "{updates:?}");
    assert_eq!(
        browser
            .eval("return document.querySelector('#la-push').disabled;")
            .await,
        Value::Bool(true),
        "no update after the end"
    );

    browser.click("#la-delete").await;
    browser.click("#confirm-ok").await;
    browser.until_text("#la-status", "deleted").await;
    eventually("the channel deleted at the mock", || {
        apns.channels.deleted().contains(&channel).then_some(())
    })
    .await;
    println!(
        "console Live Activity {id}: {STARTERS} start pushes accepted, 1 score and the end broadcast on \
         channel {channel}, channel deleted"
    );
    browser.close().await;
    cluster.stop().await;
}
