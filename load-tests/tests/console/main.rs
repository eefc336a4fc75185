//! The newsroom console in headless Chromium against a whole cluster (the
//! real PostgreSQL and RabbitMQ, the mock APNs / FCM): sign in, compose to
//! two topics and see the audience, dry run, send and watch the page reach
//! `complete` with the curve drawn, schedule one that fires and one that is
//! edited then cancelled, find them in history, an XSS title shown as text, signed-out
//! access refused, and a phone-width window without sideways scrolling; the
//! Live Activity page (`live`): start a match, push a score, end, delete.
//!
//! `CLARION_CONSOLE_SCREENSHOTS=docs/src/images` also saves the book's screenshots.

mod browser;
mod live;

use std::time::Duration;

use browser::Browser;
use clarion_load_tests::testkit::{Cluster, ClusterOptions, DESK_KEY, Device, seed_devices};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(120);
const XSS_TITLE: &str = "<img src=x onerror=alert(1)>";

/// A cluster with dispatchers and `uk` devices on breaking/uk, `us` on
/// breaking/us, the first `both` of them following both.
async fn cluster_with_audience(uk: u64, us: u64, both: u64) -> Cluster {
    let cluster = Cluster::start(ClusterOptions {
        // A send to more than 100 devices asks the editor to confirm.
        coordinator: vec!["--console-confirm-above=100".into()],
        harvesters: 1,
        dispatchers: true,
        ..ClusterOptions::default()
    })
    .await;
    let mut devices: Vec<Device> = (0..uk)
        .map(|n| {
            if n < both {
                Device::alternating(n, &["breaking/uk", "breaking/us"])
            } else {
                Device::alternating(n, &["breaking/uk"])
            }
        })
        .collect();
    devices.extend((uk..uk + us - both).map(|n| Device::alternating(n, &["breaking/us"])));
    seed_devices(&cluster.sql().await, &devices)
        .await
        .expect("seeding");
    cluster.wait_for_topic_size("breaking/uk", uk, WAIT).await;
    cluster.wait_for_topic_size("breaking/us", us, WAIT).await;
    cluster
}

async fn sign_in(browser: &Browser, base: &str) {
    browser.goto(&format!("{base}/console/")).await;
    browser.type_into("#api-key", DESK_KEY).await;
    browser.click("#signin-button").await;
    browser.shown("#compose-form").await;
}

/// The id of the notification whose progress page is open.
async fn progress_id(browser: &Browser) -> String {
    let hash = browser
        .until(
            "a progress page",
            "return location.hash.startsWith('#/n/') ? location.hash.slice(4) : null;",
        )
        .await;
    hash.as_str().expect("an id").to_owned()
}

async fn add_topic(browser: &Browser, topic: &str) {
    browser.type_into("#topic-input", topic).await;
    browser.click("#topic-add").await;
    browser
        .shown(&format!("#topic-list li[data-topic='{topic}']"))
        .await;
}

/// Fills the composer: two topics, a title and a body.
async fn compose(browser: &Browser, title: &str, body: &str) {
    add_topic(browser, "breaking/uk").await;
    add_topic(browser, "breaking/us").await;
    browser.type_into("#title", title).await;
    browser.type_into("#body", body).await;
}

#[actix_web::test]
async fn signed_out_visitors_see_only_the_sign_in_form_and_the_api_refuses_them() {
    let cluster = Cluster::start(ClusterOptions::default()).await;
    let browser = Browser::start(1280, 900).await;
    browser.goto(&format!("{}/console/#/history", cluster.base)).await;
    browser.shown("#signin-form").await;
    assert!(
        browser
            .eval("return document.querySelector('#history-table') === null;")
            .await
            == Value::Bool(true)
    );
    // The API answers the page's own requests with 401 without a session.
    let status = browser
        .until(
            "an API answer",
            "return fetch('/api/v1/notifications').then(r => r.status);",
        )
        .await;
    assert_eq!(status, 401);
    browser.type_into("#api-key", "not-a-key").await;
    browser.click("#signin-button").await;
    browser.until_text("#signin-error", "unknown API key").await;

    // Signing in from the keyboard: the key, then Enter.
    browser
        .type_into("#api-key", &format!("{DESK_KEY}\u{E007}"))
        .await;
    browser.shown("#history-table").await;
    browser
        .until(
            "the key's name shown",
            "return document.querySelector('#signed-in-as').textContent.startsWith('Signed in as ');",
        )
        .await;
    // The key is nowhere in the browser's storage or readable cookies.
    let stored = browser
        .eval("return JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + document.cookie;")
        .await;
    assert!(
        !stored.as_str().unwrap_or_default().contains(DESK_KEY),
        "{stored}"
    );

    browser.click("#signout-button").await;
    browser.shown("#signin-form").await;
    let status = browser
        .until(
            "an API answer",
            "return fetch('/api/v1/notifications').then(r => r.status);",
        )
        .await;
    assert_eq!(status, 401, "signed out");
    browser.close().await;
    cluster.stop().await;
}

#[actix_web::test]
async fn an_editor_composes_previews_dry_runs_sends_and_watches_it_complete() {
    // 300 + 200 subscriptions, 100 devices following both: 400 devices.
    let cluster = cluster_with_audience(300, 200, 100).await;
    let browser = Browser::start(1280, 1000).await;
    sign_in(&browser, &cluster.base).await;

    compose(
        &browser,
        XSS_TITLE,
        "Polls close at 10pm. Follow the results live.",
    )
    .await;
    browser
        .until_text("#topic-list li[data-topic='breaking/uk'] .topic-count", "300")
        .await;
    let estimate = browser
        .until(
            "the audience estimate",
            "return document.querySelector('#audience-estimate').dataset.devices || null;",
        )
        .await;
    assert_eq!(estimate, "400", "each device counted once");
    for phone in ["ios", "android", "web"] {
        let preview = browser.text(&format!("#preview-{phone} .p-title")).await;
        assert_eq!(preview, XSS_TITLE, "the {phone} preview shows the title as text");
    }
    assert!(
        browser.text("#payload-size").await.contains("for browsers"),
        "the web push's size is shown beside Apple's and Google's"
    );

    // A dry run goes through the whole pipeline and reaches no phone.
    browser.click("#dry-run").await;
    browser.click("#send-button").await;
    let dry = progress_id(&browser).await;
    cluster
        .wait_for_status(&dry, WAIT, |s| s["status"] == "complete")
        .await;
    browser.until_text("#status", "complete").await;
    assert!(
        browser
            .shown("#dry-run-flag")
            .await
            .is_displayed()
            .await
            .unwrap_or(false)
    );
    // The XSS title is text: no image element was made of it.
    browser.until_text("#n-title", XSS_TITLE).await;
    assert_eq!(
        browser
            .eval("return document.querySelectorAll('main img').length;")
            .await,
        0
    );
    let status = cluster.status(&dry).await;
    assert_eq!(status["dry_run"], true);
    let pushed: u64 = clarion_proto::Platform::ALL
        .iter()
        .map(|p| cluster.mocks().state(*p).accounting.stats().accepted)
        .sum();
    assert_eq!(pushed, 0, "a dry run pushes nothing");

    // The real send: the page follows it to complete and draws the curve.
    browser.goto(&format!("{}/console/#/compose", cluster.base)).await;
    compose(
        &browser,
        "Election night: polls close",
        "Polls close at 10pm. Follow the results live.",
    )
    .await;
    browser.type_into("#badge", "5").await;
    browser
        .eval(
            "const level = document.querySelector('#interruption-level'); \
             level.value = 'time-sensitive'; level.dispatchEvent(new Event('input', {bubbles: true})); return true;",
        )
        .await;
    // 400 devices, above the threshold of 100: the editor types the size.
    browser.click("#send-button").await;
    browser.shown("#confirm-input").await;
    browser.type_into("#confirm-input", "40").await;
    assert_eq!(
        browser
            .eval("return document.querySelector('#confirm-ok').disabled;")
            .await,
        true,
        "a wrong count does not confirm"
    );
    browser.type_into("#confirm-input", "400").await;
    browser.click("#confirm-ok").await;
    let sent = progress_id(&browser).await;
    browser.until_text("#status", "complete").await;
    let points = browser
        .until(
            "the curve drawn",
            "const c = document.querySelector('#curve'); \
             return c.querySelector('canvas') !== null && Number(c.dataset.points) > 0 ? Number(c.dataset.points) : null;",
        )
        .await;
    assert!(points.as_u64().unwrap_or(0) > 0);
    browser.until_text("#verdict", "yes").await;
    assert_ne!(browser.text("#t90").await, "—");
    assert_eq!(
        browser
            .text("#platforms tr[data-platform='ios'] td:nth-of-type(2)")
            .await,
        "200"
    );
    // A row per platform of proto, labelled from it: web has none here.
    for (platform, label) in [("ios", "iOS"), ("android", "Android"), ("web", "Web")] {
        let row = format!("#platforms tr[data-platform='{platform}']");
        assert_eq!(browser.text(&format!("{row} th")).await, label);
    }
    assert_eq!(
        browser
            .text("#platforms tr[data-platform='web'] td:nth-of-type(1)")
            .await,
        "0"
    );
    assert_eq!(browser.text("#n-title").await, "Election night: polls close");
    let status = cluster.status(&sent).await;
    assert_eq!(status["audience"]["total"], 400);
    assert_eq!(status["message"]["badge"], 5, "{status}");
    assert_eq!(status["message"]["interruption_level"], "time-sensitive");
    let ios = cluster
        .mocks()
        .state(clarion_proto::Platform::Ios)
        .sample()
        .expect("an APNs push");
    assert_eq!(ios["aps"]["interruption-level"], "time-sensitive", "{ios}");
    assert_eq!(ios["aps"]["badge"], 5);
    assert_eq!(
        status["delivery"]["ios"]["sent"].as_u64().unwrap_or(0)
            + status["delivery"]["android"]["sent"].as_u64().unwrap_or(0),
        400
    );
    browser.screenshot("progress").await;

    // A phone-width window: everything fits without scrolling sideways.
    browser.client.set_window_size(360, 800).await.expect("resized");
    browser.goto(&format!("{}/console/#/compose", cluster.base)).await;
    browser.shown("#compose-form").await;
    let overflow = browser
        .eval("return document.documentElement.scrollWidth - document.documentElement.clientWidth;")
        .await;
    assert!(
        overflow.as_i64().unwrap_or(1) <= 0,
        "the compose page scrolls sideways at 360 px by {overflow}"
    );
    browser.close().await;
    cluster.stop().await;
}

#[actix_web::test]
async fn scheduled_alerts_fire_or_are_cancelled_and_history_finds_them() {
    let cluster = cluster_with_audience(40, 40, 0).await;
    let browser = Browser::start(1280, 1000).await;
    sign_in(&browser, &cluster.base).await;

    // One for five seconds from now: the page shows it scheduled, then it fires.
    compose(&browser, "Scheduled briefing", "Your morning briefing is ready.").await;
    let in_five = browser
        .eval(
            "const d = new Date(Date.now() + 5000); const p = n => String(n).padStart(2, '0'); \
             return `${d.getFullYear()}-${p(d.getMonth()+1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;",
        )
        .await;
    browser
        .set_value("#send-at", in_five.as_str().expect("a time"))
        .await;
    browser.until_text("#send-button", "Schedule").await;
    browser.screenshot("compose").await;
    browser.click("#send-button").await;
    let fired = progress_id(&browser).await;
    browser.until_text("#status", "scheduled").await;
    browser.until_text("#status", "complete").await;
    let status = cluster.status(&fired).await;
    assert_eq!(status["audience"]["total"], 80);

    // One for tomorrow, cancelled from history.
    browser.goto(&format!("{}/console/#/compose", cluster.base)).await;
    compose(&browser, "Weekend weather", "Sunny spells on Saturday.").await;
    let tomorrow = browser
        .eval(
            "const d = new Date(Date.now() + 86400000); const p = n => String(n).padStart(2, '0'); \
             return `${d.getFullYear()}-${p(d.getMonth()+1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;",
        )
        .await;
    browser
        .set_value("#send-at", tomorrow.as_str().expect("a time"))
        .await;
    browser.click("#send-button").await;
    let cancelled = progress_id(&browser).await;
    browser.until_text("#status", "scheduled").await;
    browser.click("#nav-history").await;
    let row = format!("#history-table tr[data-id='{cancelled}']");
    browser.shown(&format!("{row} .send-at")).await;

    // Edited from history while it waits: the same notification, new text.
    browser.click(&format!("{row} .edit-link")).await;
    browser
        .until_text("#compose-heading", "Edit a scheduled notification")
        .await;
    browser
        .until(
            "the stored title loaded",
            "return document.querySelector('#title').value === 'Weekend weather';",
        )
        .await;
    browser.type_into("#title", "Weekend weather warning").await;
    browser.click("#send-button").await;
    browser.until_text("#n-title", "Weekend weather warning").await;
    assert_eq!(progress_id(&browser).await, cancelled, "replaced in place");
    browser.until_text("#status", "scheduled").await;
    let status = cluster.status(&cancelled).await;
    assert_eq!(status["message"]["title"], "Weekend weather warning");

    browser.click("#nav-history").await;
    browser.shown(&format!("{row} .send-at")).await;
    browser.screenshot("history").await;
    browser.click(&format!("{row} .cancel-button")).await;
    browser.click("#confirm-ok").await;
    browser
        .until_text(&format!("{row} td:nth-of-type(4)"), "cancelled")
        .await;
    let status = cluster.status(&cancelled).await;
    assert_eq!(status["status"], "cancelled");
    assert_eq!(status["jobs"]["planned"], 0, "a cancelled schedule never fired");
    assert!(status["completed_at"].is_null(), "nothing was sent: {status}");
    // Its page says it never went out (not "sent …").
    browser
        .goto(&format!("{}/console/#/n/{cancelled}", cluster.base))
        .await;
    browser.until_text("#status", "cancelled").await;
    browser
        .until(
            "the page saying it never went out",
            "const e = document.querySelector('#n-when'); return e !== null && e.textContent.startsWith('never sent');",
        )
        .await;
    browser.click("#nav-history").await;

    // Both found with a filter.
    browser.type_into("#filter-topic", "breaking/us").await;
    browser.set_value("#filter-status", "complete").await;
    browser.click("#filter-apply").await;
    browser
        .shown(&format!("#history-table tr[data-id='{fired}']"))
        .await;
    browser
        .until(
            "only the complete one",
            &format!("return document.querySelector(\"#history-table tr[data-id='{cancelled}']\") === null;"),
        )
        .await;
    browser.set_value("#filter-status", "cancelled").await;
    browser.type_into("#filter-q", "weather").await;
    browser.click("#filter-apply").await;
    browser
        .shown(&format!("#history-table tr[data-id='{cancelled}']"))
        .await;
    assert_eq!(
        browser
            .eval("return document.querySelectorAll('#history-table tbody tr').length;")
            .await,
        1
    );
    browser.close().await;
    cluster.stop().await;
}

/// Phones that all report fast, half of them opening.
fn quick_phones() -> clarion_load_tests::mocks::ReceiptsConfig {
    use clarion_load_tests::mocks::phones::DelayDistribution;
    let around = |ms| DelayDistribution {
        median: Duration::from_millis(ms),
        spread: 0.3,
    };
    clarion_load_tests::mocks::ReceiptsConfig {
        online_share: 1.0,
        receive_delay: around(200),
        open_share: 0.5,
        open_delay: around(300),
        flush_every: Duration::from_millis(50),
        ..clarion_load_tests::mocks::ReceiptsConfig::new("set by the cluster", "set by the cluster")
    }
}

#[actix_web::test]
async fn the_progress_page_draws_accepted_received_and_opened_and_history_shows_the_phones_verdict() {
    const DEVICES: u64 = 100;
    let cluster = Cluster::start(ClusterOptions {
        harvesters: 1,
        dispatchers: true,
        receipts: Some(quick_phones()),
        ..ClusterOptions::default()
    })
    .await;
    let devices: Vec<Device> = (0..DEVICES)
        .map(|n| Device::alternating(n, &["breaking/uk"]))
        .collect();
    let sql = cluster.sql().await;
    seed_devices(&sql, &devices).await.expect("seeding");
    sql.execute("UPDATE registrations SET receipts = true", &[])
        .await
        .unwrap();
    cluster.wait_for_topic_size("breaking/uk", DEVICES, WAIT).await;
    let (status, answer) = cluster
        .send(&serde_json::json!({"topics": ["breaking/uk"], "title": "Three curves", "body": "Receipts"}))
        .await;
    assert!(status.is_success(), "{answer}");
    let id = answer["id"].as_str().unwrap().to_owned();

    let browser = Browser::start(1280, 900).await;
    sign_in(&browser, &cluster.base).await;
    browser.goto(&format!("{}/console/#/n/{id}", cluster.base)).await;
    browser.until_text("#status", "complete").await;
    let drawn = browser
        .until(
            "the three curves drawn",
            "const c = document.querySelector('#curve'); \
             const n = (k) => Number(c.dataset[k + 'Points'] || 0); \
             return c.querySelector('canvas') !== null && n('accepted') > 0 && n('received') > 0 && n('opened') > 0 \
               ? [n('accepted'), n('received'), n('opened')] : null;",
        )
        .await;
    assert!(
        drawn.as_array().is_some_and(|points| points.len() == 3),
        "{drawn}"
    );
    let legend = browser.text("#curve .u-legend").await;
    for label in ["accepted by Apple/Google", "received on phones", "opened"] {
        assert!(legend.contains(label), "legend {legend:?} lacks {label}");
    }
    // Every phone reports: all of the reporting audience received it.
    browser
        .until_text("#device-received", "100% of 100 reporting")
        .await;
    assert_ne!(browser.text("#device-t90").await, "—");
    browser.until_text("#device-verdict", "open").await;

    browser.goto(&format!("{}/console/#/history", cluster.base)).await;
    let open_rate = browser
        .until(
            "the open rate in history",
            &format!(
                "const cell = document.querySelector(\"#history-table tr[data-id='{id}'] td.open-rate\"); \
                 return cell && cell.textContent.endsWith('%') ? cell.textContent : null;"
            ),
        )
        .await;
    let opened = cluster.status(&id).await["device"]["opened_percent"].as_f64();
    let shown = open_rate
        .as_str()
        .and_then(|text| text.trim_end_matches('%').parse::<f64>().ok());
    assert_eq!(shown, opened, "history shows the status's open rate");
    browser.close().await;
    cluster.stop().await;
}
