//! The demo's `--live-activity`: a short football "match" as a Live
//! Activity (issue 38), through the whole cluster to the mock APNs.
//!
//! Registers iOS push-to-start tokens on [`MATCH_TOPIC`] beside the seeded
//! phones (`MatchAttributes` ones in both APNs environments, and a few of
//! another type that must not get the start), creates the activity, waits
//! until its start pushes reached the mock (as `liveactivity` pushes), sends
//! three score updates (one of them twice, to show the replay) and the
//! final whistle, then prints what the mock recorded on each broadcast
//! channel and the activity as `GET` shows it, and deletes it. Every wait
//! has a deadline; every request has a timeout.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::local_cluster::{APP_KEY, DESK_KEY, LocalCluster};
use crate::mocks::ApnsMock;

/// The topic the match is on (the seeded audience follows it too).
pub const MATCH_TOPIC: &str = "sport/football";
/// The ActivityAttributes type the match starts.
const ATTRIBUTES_TYPE: &str = "MatchAttributes";
/// Another app type: its push-to-start tokens must not get the start.
const OTHER_TYPE: &str = "ElectionAttributes";
/// Push-to-start tokens of [`ATTRIBUTES_TYPE`], production and sandbox.
const PRODUCTION_STARTERS: u64 = 40;
const SANDBOX_STARTERS: u64 = 5;
/// Push-to-start tokens of [`OTHER_TYPE`].
const OTHER_STARTERS: u64 = 5;
/// Longest any one request to the coordinator takes.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest the demo waits for one step (start pushes, broadcasts, deletes).
const STEP_TIMEOUT: Duration = Duration::from_secs(90);
/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(250);

/// The score after each update: home, away, minute, what happened.
const SCORES: [(u32, u32, u32, &str); 3] = [
    (1, 0, 23, "Goal! Kane 23'"),
    (1, 1, 51, "Goal! Mbappé 51'"),
    (2, 1, 88, "Goal! Saka 88'"),
];

/// The push-to-start token `n` of group `group` (64 hex digits, none of
/// them a seeded phone's).
fn starter_token(group: u8, n: u64) -> String {
    format!("5{group:x}a7{n:060x}")
}

/// The match's content state.
fn content_state(home: u32, away: u32, minute: u32, status: &str) -> Value {
    json!({"home": home, "away": away, "minute": minute, "status": status})
}

/// One request to the coordinator with `key`: its status and JSON body
/// (null when empty or not JSON).
async fn call(
    cluster: &LocalCluster,
    key: &str,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> Result<(StatusCode, Value)> {
    let mut request = cluster
        .http
        .request(method.clone(), format!("{}{path}", cluster.base))
        .bearer_auth(key)
        .timeout(REQUEST_TIMEOUT);
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.with_context(|| format!("{method} {path}"))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .with_context(|| format!("{method} {path}: reading the answer"))?;
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
}

/// `call`, failing unless the answer is `expected`.
async fn expect(
    cluster: &LocalCluster,
    key: &str,
    method: Method,
    path: &str,
    body: Option<&Value>,
    expected: StatusCode,
) -> Result<Value> {
    let (status, answer) = call(cluster, key, method.clone(), path, body).await?;
    if status != expected {
        bail!("{method} {path} answered {status} (expected {expected}): {answer}");
    }
    Ok(answer)
}

/// Polls `check` until it answers `Some`, or fails after [`STEP_TIMEOUT`]
/// saying what was awaited and the last thing seen.
async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<std::result::Result<T, String>>>,
{
    let started = Instant::now();
    loop {
        let last = match check().await? {
            Ok(done) => return Ok(done),
            Err(last) => last,
        };
        if started.elapsed() > STEP_TIMEOUT {
            bail!("{what}: not within {STEP_TIMEOUT:?}; last seen: {last}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The push-to-start tokens the demo registers.
struct Starters {
    matching: Vec<String>,
    other: Vec<String>,
}

async fn register_starters(cluster: &LocalCluster) -> Result<Starters> {
    let mut starters = Starters {
        matching: Vec::new(),
        other: Vec::new(),
    };
    let groups = [
        (1, PRODUCTION_STARTERS, ATTRIBUTES_TYPE, "production"),
        (2, SANDBOX_STARTERS, ATTRIBUTES_TYPE, "sandbox"),
        (3, OTHER_STARTERS, OTHER_TYPE, "production"),
    ];
    for (group, count, attributes_type, environment) in groups {
        for n in 0..count {
            let token = starter_token(group, n);
            let body = json!({
                "platform": "ios", "kind": "push_to_start", "attributes_type": attributes_type,
                "environment": environment, "topics": [MATCH_TOPIC],
            });
            let path = format!("/api/v1/registrations/{token}");
            expect(cluster, APP_KEY, Method::PUT, &path, Some(&body), StatusCode::OK).await?;
            if attributes_type == ATTRIBUTES_TYPE {
                starters.matching.push(token);
            } else {
                starters.other.push(token);
            }
        }
    }
    Ok(starters)
}

/// The activity's open channels: (environment, Apple's channel id).
fn channels(activity: &Value) -> Vec<(String, String)> {
    activity["channels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|channel| {
            Some((
                channel["environment"].as_str()?.to_owned(),
                channel["channel_id"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// Runs the match against `cluster`, whose iOS dispatcher pushes to `apns`.
pub async fn run_match(cluster: &LocalCluster, apns: &ApnsMock) -> Result<()> {
    println!("\nLive Activity: a short match on {MATCH_TOPIC}");
    let starters = register_starters(cluster).await?;
    println!(
        "  registered          {} push-to-start tokens of {ATTRIBUTES_TYPE} ({PRODUCTION_STARTERS} production, \
         {SANDBOX_STARTERS} sandbox) and {} of {OTHER_TYPE}, beside the phones",
        starters.matching.len(),
        starters.other.len()
    );
    // From here on the mock keeps every push it accepts (the alert is out).
    apns.state.set_keeping(true);

    let create = json!({
        "name": "England v France",
        "attributes_type": ATTRIBUTES_TYPE,
        "attributes": {"home": "England", "away": "France", "competition": "Friendly"},
        "content_state": content_state(0, 0, 0, "Kick-off"),
        "topics": [MATCH_TOPIC],
        "storage_policy": "most-recent",
        "alert": {"title": "Kick-off", "body": "England v France has started"},
    });
    let started = Instant::now();
    let created = expect(
        cluster,
        DESK_KEY,
        Method::POST,
        "/api/v1/live-activities",
        Some(&create),
        StatusCode::CREATED,
    )
    .await?;
    let id = created["id"]
        .as_str()
        .context("the create's answer has no id")?
        .to_owned();
    let path = format!("/api/v1/live-activities/{id}");
    println!("  created             activity {id} (201)");

    let expected = starters.matching.len() as u64;
    let activity = wait_for("the start pushes", || async {
        let activity = expect(cluster, DESK_KEY, Method::GET, &path, None, StatusCode::OK).await?;
        let accepted = activity["start"]["accepted"].as_u64().unwrap_or(0);
        let reached = apns
            .state
            .accounting
            .lookup(&starters.matching)
            .iter()
            .filter(|t| t.count > 0)
            .count() as u64;
        Ok(if accepted >= expected && reached >= expected {
            Ok(activity)
        } else {
            Err(format!("{reached} of {expected} tokens reached; {activity}"))
        })
    })
    .await?;
    let channels = channels(&activity);
    for (environment, channel_id) in &channels {
        println!("  channel             {environment}: {channel_id} (created at the mock APNs)");
    }
    report_start_pushes(apns, &starters, &activity, started.elapsed());

    let mut sent = Vec::new();
    for (home, away, minute, what) in SCORES {
        let update = json!({
            "id": Uuid::new_v4(),
            "content_state": content_state(home, away, minute, what),
            "alert": {"title": format!("England {home}–{away} France"), "body": what},
        });
        let path = format!("{path}/updates");
        expect(
            cluster,
            DESK_KEY,
            Method::POST,
            &path,
            Some(&update),
            StatusCode::ACCEPTED,
        )
        .await?;
        println!("  update              England {home}–{away} France ({minute}') accepted (202)");
        sent.push(update);
    }
    let updates_path = format!("{path}/updates");
    let (replay, _) = call(cluster, DESK_KEY, Method::POST, &updates_path, Some(&sent[1])).await?;
    println!("  same update again   answered {replay} (same id: not broadcast twice)");
    let end = json!({
        "id": Uuid::new_v4(),
        "event": "end",
        "content_state": content_state(2, 1, 90, "Full time"),
        "alert": {"title": "Full time", "body": "England 2–1 France"},
        "dismissal_date": chrono::Utc::now().timestamp() + 3600,
    });
    expect(
        cluster,
        DESK_KEY,
        Method::POST,
        &updates_path,
        Some(&end),
        StatusCode::ACCEPTED,
    )
    .await?;
    println!("  end                 full time 2–1 accepted (202)");
    let late = json!({"content_state": content_state(3, 1, 95, "Too late")});
    let (late_status, _) = call(cluster, DESK_KEY, Method::POST, &updates_path, Some(&late)).await?;
    println!("  update after end    answered {late_status} (the activity has ended)");

    let broadcasts = SCORES.len() + 1;
    let recorded = wait_for("the broadcasts at the mock APNs", || async {
        let recorded: Vec<Vec<Value>> = channels
            .iter()
            .map(|(_, channel_id)| apns.channels.updates(channel_id).unwrap_or_default())
            .collect();
        Ok(if recorded.iter().all(|updates| updates.len() >= broadcasts) {
            Ok(recorded)
        } else {
            Err(format!(
                "{:?} updates per channel",
                recorded.iter().map(Vec::len).collect::<Vec<_>>()
            ))
        })
    })
    .await?;
    println!(
        "\n  What the mock APNs recorded per channel (one broadcast reaches every phone on it), \
         in timestamp order as a phone applies them:"
    );
    for ((environment, channel_id), updates) in channels.iter().zip(&recorded) {
        let mut updates = updates.clone();
        updates.sort_by_key(|update| update["aps"]["timestamp"].as_i64().unwrap_or(0));
        println!("  {environment} channel {channel_id}: {} updates", updates.len());
        for (n, update) in updates.iter().enumerate() {
            let aps = &update["aps"];
            println!(
                "    {}. {:<6} timestamp {} content-state {}",
                n + 1,
                aps["event"].as_str().unwrap_or("?"),
                aps["timestamp"],
                aps["content-state"]
            );
        }
    }

    // The mock recorded them; the dispatcher's reports follow.
    let activity = wait_for("every broadcast's report", || async {
        let activity = expect(cluster, DESK_KEY, Method::GET, &path, None, StatusCode::OK).await?;
        let reported = activity["updates"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|update| {
                update["broadcasts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .all(|b| !b["outcome"].is_null())
            });
        Ok(if reported {
            Ok(activity)
        } else {
            Err(activity.to_string())
        })
    })
    .await?;
    report_activity(&activity);

    expect(
        cluster,
        DESK_KEY,
        Method::DELETE,
        &path,
        None,
        StatusCode::ACCEPTED,
    )
    .await?;
    wait_for("the channels' deletes at the mock APNs", || async {
        let deleted = apns.channels.deleted();
        let pending: Vec<&String> = channels
            .iter()
            .map(|(_, id)| id)
            .filter(|id| !deleted.contains(id))
            .collect();
        Ok(if pending.is_empty() {
            Ok(())
        } else {
            Err(format!("still open at the mock: {pending:?}"))
        })
    })
    .await?;
    println!(
        "\n  deleted             DELETE answered 202; the mock APNs deleted {} channel(s). The match took {:.1} s.",
        channels.len(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "  console             {}/console/#/live starts one from a template, pushes scores and ends it \
         (with --keep-running)",
        cluster.base
    );
    Ok(())
}

/// Which tokens the start pushes went to, as the mock kept them.
fn report_start_pushes(apns: &ApnsMock, starters: &Starters, activity: &Value, took: Duration) {
    let kept = apns.state.received();
    let starts: Vec<_> = kept
        .iter()
        .filter(|push| push.header("apns-push-type") == Some("liveactivity"))
        .collect();
    let tokens: BTreeSet<&str> = starts.iter().map(|push| push.token.as_str()).collect();
    let matching = starters
        .matching
        .iter()
        .filter(|t| tokens.contains(t.as_str()))
        .count();
    let other = starters
        .other
        .iter()
        .filter(|t| tokens.contains(t.as_str()))
        .count();
    let elsewhere = tokens.len() - matching - other;
    println!(
        "  start pushes        {} accepted by the mock APNs in {:.1} s (notification {}): {matching} of {} \
         {ATTRIBUTES_TYPE} tokens, {other} of {} {OTHER_TYPE} tokens, {elsewhere} device tokens",
        starts.len(),
        took.as_secs_f64(),
        activity["start"]["notification_id"].as_str().unwrap_or("?"),
        starters.matching.len(),
        starters.other.len()
    );
    if let Some(push) = starts.first() {
        println!(
            "                      apns-push-type liveactivity, apns-topic {}, aps.event {}, input-push-channel {}",
            push.header("apns-topic").unwrap_or("?"),
            push.json()["aps"]["event"],
            push.json()["aps"]["input-push-channel"]
        );
    }
}

/// The activity as `GET /api/v1/live-activities/{id}` shows it.
fn report_activity(activity: &Value) {
    println!(
        "\n  GET /api/v1/live-activities/{}: status {}, {} start pushes accepted, {} updates",
        activity["id"].as_str().unwrap_or("?"),
        activity["status"].as_str().unwrap_or("?"),
        activity["start"]["accepted"],
        activity["updates"].as_array().map_or(0, Vec::len)
    );
    for update in activity["updates"].as_array().into_iter().flatten() {
        let answers: Vec<String> = update["broadcasts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|b| {
                format!(
                    "{} {}",
                    b["environment"].as_str().unwrap_or("?"),
                    b["outcome"].as_str().unwrap_or("pending")
                )
            })
            .collect();
        println!(
            "    {:<6} timestamp {} → {}",
            update["event"].as_str().unwrap_or("?"),
            update["timestamp"],
            answers.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starter_tokens_are_apns_tokens_apart_from_each_other_and_from_dead_ones() {
        let tokens: BTreeSet<String> = (1..=3)
            .flat_map(|g| (0..50).map(move |n| starter_token(g, n)))
            .collect();
        assert_eq!(tokens.len(), 150);
        for token in &tokens {
            assert_eq!(token.len(), 64, "{token}");
            assert!(token.chars().all(|c| c.is_ascii_hexdigit()), "{token}");
            assert!(!token.starts_with(crate::audience::DEAD_PREFIX), "{token}");
        }
    }

    #[test]
    fn channels_are_read_from_the_activity_once_they_have_an_id() {
        let activity = json!({"channels": [
            {"environment": "production", "state": "open", "channel_id": "dHdvCg=="},
            {"environment": "sandbox", "state": "creating", "channel_id": null},
        ]});
        assert_eq!(
            channels(&activity),
            vec![("production".to_owned(), "dHdvCg==".to_owned())]
        );
    }
}
