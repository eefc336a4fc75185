//! How many times the coordinator computed a notification's status (from
//! PostgreSQL), read from its `/metrics` when it exposes a counter for it:
//! the first metric whose name speaks of status computations, whatever its
//! exact name; absent otherwise.

use crate::local_cluster::LocalCluster;

/// The counter's name and the sum of its series.
#[derive(Debug, Clone, PartialEq)]
pub struct Count {
    pub metric: String,
    pub value: f64,
}

/// Reads the coordinator's `/metrics`; `None` when it cannot be read or
/// holds no such counter.
pub async fn read(cluster: &LocalCluster) -> Option<Count> {
    let response = cluster
        .http
        .get(format!("{}/metrics", cluster.base))
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await
        .ok()?;
    find(&response.text().await.ok()?)
}

/// The first metric of a Prometheus text whose name holds `status` and
/// `comput` (computations, computed), summed over its series.
pub fn find(text: &str) -> Option<Count> {
    let samples = || {
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| {
                let name_end = line.find(['{', ' '])?;
                let value = line.rsplit(' ').next()?.parse::<f64>().ok()?;
                Some((&line[..name_end], value))
            })
    };
    let (metric, _) = samples().find(|(name, _)| {
        let name = name.to_ascii_lowercase();
        name.contains("status")
            && name.contains("comput")
            && !name.ends_with("_bucket")
            && !name.ends_with("_sum")
    })?;
    let value = samples()
        .filter(|(name, _)| *name == metric)
        .map(|(_, value)| value)
        .sum();
    Some(Count {
        metric: metric.to_owned(),
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_and_sums_the_status_computations_counter() {
        let text = "# HELP clarion_http_requests_total Requests\n\
                    clarion_http_requests_total{status=\"200\"} 12\n\
                    # TYPE clarion_status_computations_total counter\n\
                    clarion_status_computations_total{kind=\"status\"} 7\n\
                    clarion_status_computations_total{kind=\"curve\"} 5\n\
                    clarion_status_computations_totalish 100\n";
        assert_eq!(
            find(text),
            Some(Count {
                metric: "clarion_status_computations_total".into(),
                value: 12.0
            })
        );
        assert_eq!(find("clarion_http_requests_total{status=\"200\"} 12\n"), None);
    }
}
