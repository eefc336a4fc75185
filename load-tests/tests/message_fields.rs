//! The message fields end to end: what the API takes arrives at the mock
//! APNs and FCM as the headers and bodies Apple and Google document — a
//! background push as a silent content update on both platforms, an alert
//! with badge, sound, category, interruption level, relevance score and
//! channel — and every push with its notification's id (`notification_id`
//! beside `aps`, in FCM's `data`), which a sender's `data` cannot spoof.

use std::time::Duration;

use clarion_load_tests::mocks::Received;
use clarion_load_tests::testkit::{
    Cluster, ClusterOptions, Device, Mocks, alternating_devices, seed_devices,
};
use clarion_proto::Platform;
use reqwest::StatusCode;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(90);

fn options() -> ClusterOptions {
    ClusterOptions {
        harvesters: 1,
        dispatchers: true,
        ..ClusterOptions::default()
    }
}

/// Sends `body`, waits for it to complete, and returns what each device of
/// `devices` received, per platform; every push carries the notification's id.
async fn send_and_collect(cluster: &Cluster, devices: &[Device], body: Value) -> Vec<(Platform, Received)> {
    let (status, accepted) = cluster.send(&body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let id = accepted["id"].as_str().expect("an id");
    let settled = cluster.wait_until_settled(id, WAIT).await;
    assert_eq!(settled["status"], "complete", "{settled}");
    assert_eq!(settled["delivery"]["ios"]["sent"], 3, "{settled}");
    assert_eq!(settled["delivery"]["android"]["sent"], 3, "{settled}");
    let pushes = received(cluster.mocks(), devices);
    for (platform, push) in &pushes {
        assert_eq!(carried_id(*platform, push), id, "{platform} {}", push.json());
    }
    pushes
}

/// The notification id a push carries: beside `aps`, or in FCM's `data`.
fn carried_id(platform: Platform, push: &Received) -> String {
    let body = push.json();
    let id = match platform {
        Platform::Ios => &body["notification_id"],
        Platform::Android => &body["message"]["data"]["notification_id"],
        Platform::Web => &body["notification_id"],
    };
    id.as_str().unwrap_or_default().to_owned()
}

#[actix_web::test]
async fn every_delivered_push_carries_its_notification_id_and_data_cannot_spoof_it() {
    let cluster = Cluster::start(options()).await;
    let devices = alternating_devices(6, &["fields/id"]);
    seed_devices(&cluster.sql().await, &devices).await.unwrap();

    let spoof = json!({"topics": ["fields/id"], "body": "Spoofed",
                       "data": {"notification_id": "00000000-0000-0000-0000-000000000000"}});
    let (status, problem) = cluster.send(&spoof).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("notification_id"),
        "{problem}"
    );

    let id = "6f1c2b3a-9d4e-4f00-8a11-0123456789ab";
    let alert =
        json!({"id": id, "topics": ["fields/id"], "body": "Which one?", "data": {"section": "world"}});
    for (platform, push) in send_and_collect(&cluster, &devices, alert).await {
        assert_eq!(carried_id(platform, &push), id);
        let section = match platform {
            Platform::Ios => push.json()["section"].clone(),
            Platform::Android => push.json()["message"]["data"]["section"].clone(),
            Platform::Web => push.json()["data"]["section"].clone(),
        };
        assert_eq!(section, "world");
    }
    cluster.stop().await;
}

fn received(mocks: &Mocks, devices: &[Device]) -> Vec<(Platform, Received)> {
    devices
        .iter()
        .map(|device| {
            let push = mocks
                .state(device.platform)
                .received_by(&device.token)
                .unwrap_or_else(|| panic!("{} {} got nothing", device.platform, device.token));
            (device.platform, push)
        })
        .collect()
}

#[actix_web::test]
async fn background_pushes_are_silent_and_alerts_carry_every_option_on_both_platforms() {
    let cluster = Cluster::start(options()).await;
    let devices = alternating_devices(6, &["fields/a"]);
    seed_devices(&cluster.sql().await, &devices).await.unwrap();

    let background = json!({"topics": ["fields/a"], "push_type": "background",
                            "data": {"refresh": "front-page"}, "collapse_key": "front"});
    for (platform, push) in send_and_collect(&cluster, &devices, background).await {
        let body = push.json();
        let id = carried_id(platform, &push);
        match platform {
            Platform::Ios => {
                assert_eq!(push.header("apns-push-type"), Some("background"));
                assert_eq!(push.header("apns-priority"), Some("5"));
                assert_eq!(push.header("apns-collapse-id"), Some("front"));
                assert_eq!(
                    body,
                    json!({"aps": {"content-available": 1}, "refresh": "front-page", "notification_id": id})
                );
            }
            Platform::Android => {
                let message = &body["message"];
                assert!(message.get("notification").is_none(), "{body}");
                assert!(message["android"].get("notification").is_none(), "{body}");
                assert_eq!(message["android"]["priority"], "normal");
                assert_eq!(
                    message["data"],
                    json!({"refresh": "front-page", "notification_id": id})
                );
            }
            Platform::Web => unreachable!("an alternating audience has no browser (see tests/webpush.rs)"),
        }
    }

    let alert = json!({"topics": ["fields/a"], "title": "Polls close", "body": "Results from 10pm",
                       "badge": 2, "sound": "chime.caf", "category": "ELECTION",
                       "interruption_level": "time-sensitive", "relevance_score": 0.9,
                       "android_channel_id": "elections", "image_url": "https://news.example/p.jpg"});
    for (platform, push) in send_and_collect(&cluster, &devices, alert).await {
        let body = push.json();
        match platform {
            Platform::Ios => {
                assert_eq!(push.header("apns-push-type"), Some("alert"));
                assert_eq!(push.header("apns-priority"), Some("10"));
                let aps = &body["aps"];
                assert_eq!(
                    aps["alert"],
                    json!({"title": "Polls close", "body": "Results from 10pm"})
                );
                assert_eq!(aps["badge"], 2);
                assert_eq!(aps["sound"], "chime.caf");
                assert_eq!(aps["category"], "ELECTION");
                assert_eq!(aps["interruption-level"], "time-sensitive");
                assert_eq!(aps["relevance-score"], 0.9);
                assert_eq!(aps["mutable-content"], 1);
            }
            Platform::Android => {
                let message = &body["message"];
                assert_eq!(message["notification"]["image"], "https://news.example/p.jpg");
                let shown = &message["android"]["notification"];
                assert_eq!(shown["sound"], "chime.caf");
                assert_eq!(shown["click_action"], "ELECTION");
                assert_eq!(shown["channel_id"], "elections");
                assert_eq!(shown["notification_count"], 2);
                assert_eq!(shown["notification_priority"], "PRIORITY_HIGH");
                assert_eq!(message["android"]["priority"], "high");
            }
            Platform::Web => unreachable!("an alternating audience has no browser (see tests/webpush.rs)"),
        }
    }

    let silent = json!({"topics": ["fields/a"], "body": "Quietly", "sound": null});
    for (platform, push) in send_and_collect(&cluster, &devices, silent).await {
        if platform == Platform::Ios {
            let body = push.json();
            assert_eq!(body["aps"]["alert"], "Quietly");
            assert!(body["aps"].get("sound").is_none(), "no sound: {body}");
        }
    }
    cluster.stop().await;
}

/// The text a push shows: APNs `aps.alert.body`, FCM `notification.body`.
fn shown_body(platform: Platform, push: &Received) -> String {
    let body = push.json();
    let text = match platform {
        Platform::Ios => &body["aps"]["alert"]["body"],
        Platform::Android => &body["message"]["notification"]["body"],
        Platform::Web => &body["body"],
    };
    text.as_str().unwrap_or_default().to_owned()
}

#[actix_web::test]
async fn each_device_gets_the_text_of_its_language_or_the_default() {
    let cluster = Cluster::start(options()).await;
    let devices = alternating_devices(6, &["fields/lang"]);
    let sql = cluster.sql().await;
    seed_devices(&sql, &devices).await.unwrap();
    // Both platforms get each case: fr, fr-CA (as devices write it), a
    // region with no text of its own (fr-BE → fr), German and no locale
    // (→ the default).
    let locales = [
        Some("fr"),
        Some("fr-ca"),
        Some("fr-CA"),
        Some("fr-be"),
        Some("de"),
        None,
    ];
    for (device, locale) in devices.iter().zip(locales) {
        let locale = locale.map(str::to_ascii_lowercase);
        sql.execute(
            "UPDATE registrations SET locale = $1 WHERE token = $2",
            &[&locale, &device.token],
        )
        .await
        .unwrap();
    }
    let body = json!({"topics": ["fields/lang"], "title": "Breaking", "body": "In English",
                      "localizations": {"fr": {"title": "Dernière minute", "body": "En français"},
                                        "fr-CA": {"title": "Flash", "body": "Au Québec"}}});
    let pushes = send_and_collect(&cluster, &devices, body).await;
    let shown: Vec<String> = pushes
        .iter()
        .map(|(platform, push)| shown_body(*platform, push))
        .collect();
    assert_eq!(
        shown,
        [
            "En français",
            "Au Québec",
            "Au Québec",
            "En français",
            "In English",
            "In English"
        ],
        "devices alternate iOS / Android"
    );
    let (_, canadian) = &pushes[1];
    let title = match devices[1].platform {
        Platform::Ios => canadian.json()["aps"]["alert"]["title"].clone(),
        Platform::Android => canadian.json()["message"]["notification"]["title"].clone(),
        Platform::Web => canadian.json()["title"].clone(),
    };
    assert_eq!(title, "Flash");
    cluster.stop().await;
}
