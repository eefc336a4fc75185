//! `js/platforms.js`: the console's list of platforms, written from
//! [`Platform::ALL`] so a platform added to proto gets its rows and label
//! in the console without a second list to keep in step.

use actix_web::HttpResponse;
use clarion_proto::Platform;
use serde_json::{Map, Value, json};

/// Where the console's scripts import it from.
pub const PATH: &str = "js/platforms.js";

/// The module: `PLATFORMS` (`[{name, label}]` in [`Platform::ALL`] order)
/// and `PLATFORM_LABELS` (name → label).
pub fn module() -> String {
    let platforms: Vec<Value> = Platform::ALL
        .iter()
        .map(|p| json!({"name": p.as_str(), "label": p.label()}))
        .collect();
    let labels: Map<String, Value> = Platform::ALL
        .iter()
        .map(|p| (p.as_str().to_owned(), json!(p.label())))
        .collect();
    format!(
        "// Written by the coordinator from clarion_proto::Platform::ALL.\n\
         export const PLATFORMS = {};\n\
         export const PLATFORM_LABELS = {};\n",
        Value::Array(platforms),
        Value::Object(labels)
    )
}

pub fn response() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .body(module())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON after `export const <name> = `.
    fn exported(module: &str, name: &str) -> Value {
        let prefix = format!("export const {name} = ");
        let line = module
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {name} in {module}"));
        serde_json::from_str(line.trim_end_matches(';')).expect("JSON")
    }

    #[test]
    fn every_platform_of_proto_is_listed_in_order_with_its_label() {
        let module = module();
        let platforms = exported(&module, "PLATFORMS");
        let labels = exported(&module, "PLATFORM_LABELS");
        let names: Vec<&str> = Platform::ALL.iter().map(|p| p.as_str()).collect();
        let listed: Vec<&str> = platforms
            .as_array()
            .expect("an array")
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert_eq!(listed, names);
        for platform in Platform::ALL {
            assert_eq!(labels[platform.as_str()], platform.label());
        }
        assert_eq!(labels["web"], "Web");
    }
}
