//! One report from several runs (`--keep-others`): the scenarios of the
//! previous report that this run did not run again are kept, each given
//! the devices, commit, CPU model and date of the run that produced it
//! (when it does not say them already); the previous run's settings are
//! kept under `earlier_runs`.

use serde_json::{Value, json};

/// What the servers were before the node-loss scenarios existed.
const MACHINE_SERVERS: &str = "the machine's PostgreSQL and RabbitMQ";

/// `latest` with the scenarios of `previous` it does not have.
pub(super) fn keep_others(previous: Value, mut latest: Value) -> Value {
    let run_again: Vec<Value> = latest["scenarios"]
        .as_array()
        .map(|scenarios| scenarios.iter().map(|s| s["scenario"].clone()).collect())
        .unwrap_or_default();
    let mut kept: Vec<Value> = previous["scenarios"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|scenario| !run_again.contains(&scenario["scenario"]))
        .collect();
    for scenario in &mut kept {
        for (field, value) in [
            ("servers", json!(MACHINE_SERVERS)),
            ("devices", previous["devices"].clone()),
            ("git_commit", previous["git_commit"].clone()),
            ("cpu_model", previous["machine"]["cpu_model"].clone()),
            ("run_at", previous["started_at"].clone()),
        ] {
            if scenario.get(field).is_none_or(|v| v.is_null() || v == "") {
                scenario[field] = value;
            }
        }
    }
    let mut earlier: Vec<Value> = previous["earlier_runs"].as_array().cloned().unwrap_or_default();
    if !kept.is_empty() {
        earlier.push(json!({
            "git_commit": previous["git_commit"],
            "started_at": previous["started_at"],
            "devices": previous["devices"],
            "machine": previous["machine"],
            "configuration": previous["configuration"],
        }));
    }
    let new = latest["scenarios"].as_array().cloned().unwrap_or_default();
    kept.extend(new);
    let passed = kept.iter().filter(|s| s["passed"] == true).count();
    latest["passed"] = json!(passed);
    latest["failed"] = json!(kept.len() - passed);
    latest["scenarios"] = json!(kept);
    latest["earlier_runs"] = json!(earlier);
    latest["note"] = json!(
        "scenarios from more than one run: each says its own devices, git_commit, cpu_model and \
         run_at; the top-level fields are the latest run's, earlier_runs the others' settings"
    );
    latest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_not_run_again_are_kept_with_their_run() {
        let previous = json!({
            "devices": 20000, "git_commit": "old", "started_at": "then",
            "machine": {"cpu_model": "cpu"},
            "scenarios": [
                {"scenario": "baseline", "passed": true},
                {"scenario": "postgres-failover", "passed": false},
            ],
        });
        let latest = json!({
            "devices": 100000, "git_commit": "new",
            "scenarios": [{"scenario": "postgres-failover", "passed": true, "devices": 100000}],
        });
        let merged = keep_others(previous, latest);
        let scenarios = merged["scenarios"].as_array().unwrap();
        assert_eq!(scenarios.len(), 2);
        assert_eq!(scenarios[0]["git_commit"], "old");
        assert_eq!(scenarios[0]["devices"], 20000);
        assert_eq!(scenarios[1]["devices"], 100000);
        assert_eq!(merged["passed"], 2);
        assert_eq!(merged["earlier_runs"][0]["git_commit"], "old");
    }
}
