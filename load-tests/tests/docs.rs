//! The book's reference pages against the code, so they cannot drift:
//! every `CLARION_*` variable a service's clap settings define has a row in
//! the configuration table (and every row names a real variable), every
//! metric the services record has a row in the metrics table with its type
//! and labels (and every row names a real metric), and `scripts/demo.help`
//! is what `clarion-demo --help` prints. A failure says which variable,
//! metric or file to fix and how.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clarion_load_tests::demo::DemoArgs;

const CONFIGURATION_PAGE: &str = "docs/src/operate/configuration.md";
const METRICS_PAGE: &str = "docs/src/operate/observability.md";
const DEMO_HELP: &str = "scripts/demo.help";
/// The folders whose code records the services' metrics.
const METRIC_SOURCES: [&str; 4] = [
    "coordinator/src",
    "harvester/src",
    "dispatcher/src",
    "runtime/src",
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("load-tests sits in the repository root")
        .to_path_buf()
}

fn read(relative: &str) -> String {
    let path = repo_root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("reading {}: {err}", path.display()))
}

/// The cells of every Markdown table row of `page` (`\|` inside a cell is
/// a literal bar; the header and separator rows included).
fn table_rows(page: &str) -> Vec<Vec<String>> {
    page.lines()
        .filter(|line| line.trim_start().starts_with('|'))
        .map(|line| {
            let mut cells = Vec::new();
            let mut cell = String::new();
            let mut chars = line.trim().trim_start_matches('|').chars().peekable();
            while let Some(c) = chars.next() {
                match c {
                    '\\' if chars.peek() == Some(&'|') => {
                        cell.push('|');
                        chars.next();
                    }
                    '|' => cells.push(std::mem::take(&mut cell).trim().to_string()),
                    _ => cell.push(c),
                }
            }
            if !cell.trim().is_empty() {
                cells.push(cell.trim().to_string());
            }
            cells
        })
        .collect()
}

/// Words in backticks that look like `prefix…` names (`CLARION_X`, `clarion_x`).
fn names_in(cell: &str, prefix: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .filter(|word| {
            word.starts_with(prefix)
                && word.len() > prefix.len()
                && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .map(str::to_string)
        .collect()
}

/// Every `CLARION_*` variable of each service, with the services that read it.
fn service_variables() -> BTreeMap<String, BTreeSet<&'static str>> {
    let commands = [
        ("coordinator", clarion_coordinator::Settings::command()),
        ("harvester", clarion_harvester::Settings::command()),
        ("dispatcher", clarion_dispatcher::Settings::command()),
    ];
    let mut variables: BTreeMap<String, BTreeSet<&'static str>> = BTreeMap::new();
    for (service, command) in commands {
        for arg in command.get_arguments() {
            if let Some(env) = arg.get_env().and_then(|env| env.to_str())
                && env.starts_with("CLARION_")
            {
                variables.entry(env.to_string()).or_default().insert(service);
            }
        }
    }
    variables
}

#[test]
fn every_setting_is_in_the_configuration_table() {
    let variables = service_variables();
    assert!(
        variables.len() > 40,
        "the services define only {} CLARION_* variables: is clap's env feature off?",
        variables.len()
    );
    let mut documented: BTreeMap<String, String> = BTreeMap::new();
    for row in table_rows(&read(CONFIGURATION_PAGE)) {
        let services = row.get(1).cloned().unwrap_or_default();
        for name in row
            .first()
            .map(|cell| names_in(cell, "CLARION_"))
            .unwrap_or_default()
        {
            documented.insert(name, services.clone());
        }
    }
    let mut problems = Vec::new();
    for (variable, services) in &variables {
        match documented.get(variable) {
            None => problems.push(format!(
                "{variable} (read by {}) has no row in the table of {CONFIGURATION_PAGE}: add \
                 `| \\`{variable}\\` | {} | <default> | <meaning> |` (see `--help` of the service)",
                join(services),
                join(services),
            )),
            Some(cell) => {
                for service in services {
                    if !cell.contains(service) && !cell.contains("all") {
                        problems.push(format!(
                            "{variable}: its row in {CONFIGURATION_PAGE} says it is read by \"{cell}\", \
                             but the {service} reads it too"
                        ));
                    }
                }
            }
        }
    }
    for variable in documented.keys() {
        if !variables.contains_key(variable) {
            problems.push(format!(
                "{variable} has a row in {CONFIGURATION_PAGE} but no service defines it any more: \
                 remove the row (or fix its name)"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the configuration table is out of date:\n{}",
        problems.join("\n")
    );
}

/// `cell` less what stands in parentheses (a label's values: `outcome`
/// (`ran`, `failed`) names one label).
fn without_parentheses(cell: &str) -> String {
    let mut depth = 0usize;
    cell.chars()
        .filter(|&c| {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ => return depth == 0,
            }
            false
        })
        .collect()
}

fn join(set: &BTreeSet<&str>) -> String {
    set.iter().copied().collect::<Vec<_>>().join(", ")
}

/// A metric the code records: its kind, the labels any of its call sites
/// give it, and where it is recorded.
#[derive(Debug, Default)]
struct Metric {
    kinds: BTreeSet<String>,
    labels: BTreeSet<String>,
    sites: BTreeSet<String>,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|err| panic!("listing {}: {err}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The text between the `(` at `open` and its matching `)`, skipping
/// string literals.
fn call_arguments(text: &str, open: usize) -> &str {
    let bytes = text.as_bytes();
    let (mut depth, mut in_string, mut i) = (0usize, false, open);
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            b'(' if !in_string => depth += 1,
            b')' if !in_string => {
                depth -= 1;
                if depth == 0 {
                    return &text[open + 1..i];
                }
            }
            _ => {}
        }
        i += 1;
    }
    &text[open + 1..]
}

/// The value of `const NAME: &str = "…";` anywhere in `sources`.
fn constant(sources: &[(String, String)], name: &str) -> Option<String> {
    let needle = format!("const {name}: &str = \"");
    sources.iter().find_map(|(_, text)| {
        let start = text.find(&needle)? + needle.len();
        let end = text[start..].find('"')?;
        Some(text[start..start + end].to_string())
    })
}

/// The name of `const NAME: Metric = Metric { name: "…", … };` (a
/// service's `metrics.rs`) anywhere in `sources`.
fn metric_constant(sources: &[(String, String)], name: &str) -> Option<String> {
    let needle = format!("const {name}: Metric = Metric {{");
    sources.iter().find_map(|(_, text)| {
        let body = &text[text.find(&needle)? + needle.len()..];
        let start = body.find("name: \"")? + "name: \"".len();
        let end = body[start..].find('"')?;
        Some(body[start..start + end].to_string())
    })
}

/// Every metric recorded through the `metrics` macros in the services' code.
fn recorded_metrics() -> BTreeMap<String, Metric> {
    let root = repo_root();
    let mut files = Vec::new();
    for dir in METRIC_SOURCES {
        rust_files(&root.join(dir), &mut files);
    }
    let sources: Vec<(String, String)> = files
        .iter()
        .map(|path| {
            let relative = path.strip_prefix(&root).unwrap_or(path).display().to_string();
            (
                relative,
                std::fs::read_to_string(path).expect("a source file reads"),
            )
        })
        .collect();
    let mut metrics: BTreeMap<String, Metric> = BTreeMap::new();
    for (file, text) in &sources {
        for kind in ["counter", "gauge", "histogram"] {
            let macro_call = format!("{kind}!(");
            for (at, _) in text.match_indices(&macro_call) {
                let preceded = text[..at].chars().next_back();
                if preceded.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                    continue; // `describe_counter!(` and the like
                }
                let args = call_arguments(text, at + macro_call.len() - 1);
                let first = args.split(',').next().unwrap_or("").trim();
                let name = match first.strip_prefix('"') {
                    Some(rest) => rest.trim_end_matches('"').to_string(),
                    None => {
                        let ident = first.rsplit("::").next().unwrap_or(first);
                        let found = match ident.strip_suffix(".name") {
                            Some(metric) => metric_constant(&sources, metric),
                            None => constant(&sources, ident),
                        };
                        found.unwrap_or_else(|| {
                            panic!("{file}: the metric name `{first}` is neither a literal, a `const … : &str` nor a `Metric`'s name")
                        })
                    }
                };
                let metric = metrics.entry(name).or_default();
                metric.kinds.insert(kind.to_string());
                metric.sites.insert(file.clone());
                for (arrow, _) in args.match_indices("=>") {
                    let before = args[..arrow].trim_end();
                    if let Some(label) = before.strip_suffix('"').and_then(|b| b.rsplit('"').next()) {
                        metric.labels.insert(label.to_string());
                    }
                }
            }
        }
    }
    for (file, text) in &sources {
        declared_metrics(file, text, &mut metrics);
    }
    metrics
}

/// The metrics a service's `metrics.rs` declares with the runtime's
/// `CounterVec::new("name", "help", ["label", …])` (and `GaugeVec`,
/// `HistogramVec`), recorded through them elsewhere.
fn declared_metrics(file: &str, text: &str, metrics: &mut BTreeMap<String, Metric>) {
    for (kind, declaration) in [
        ("counter", "CounterVec::new("),
        ("gauge", "GaugeVec::new("),
        ("histogram", "HistogramVec::new("),
    ] {
        for (at, _) in text.match_indices(declaration) {
            let args = call_arguments(text, at + declaration.len() - 1);
            let mut strings = args.split('"').skip(1).step_by(2);
            let Some(name) = strings.next() else {
                continue; // the constructor's own definition
            };
            let metric = metrics.entry(name.to_string()).or_default();
            metric.kinds.insert(kind.to_string());
            metric.sites.insert(file.to_string());
            if let Some(labels) = args.rfind('[').map(|open| &args[open..]) {
                for label in labels.split('"').skip(1).step_by(2) {
                    metric.labels.insert(label.to_string());
                }
            }
        }
    }
}

#[test]
fn every_metric_is_in_the_metrics_table() {
    let metrics = recorded_metrics();
    assert!(
        metrics.len() > 30,
        "found only {} metrics in {METRIC_SOURCES:?}: has the way metrics are recorded changed?",
        metrics.len()
    );
    // metric → (type cell, labels cell)
    let mut documented: BTreeMap<String, (String, String)> = BTreeMap::new();
    for row in table_rows(&read(METRICS_PAGE)) {
        for name in row
            .first()
            .map(|cell| names_in(cell, "clarion_"))
            .unwrap_or_default()
        {
            documented.insert(
                name,
                (
                    row.get(1).cloned().unwrap_or_default(),
                    row.get(2).cloned().unwrap_or_default(),
                ),
            );
        }
    }
    let mut problems = Vec::new();
    for (name, metric) in &metrics {
        let kind = metric.kinds.iter().cloned().collect::<Vec<_>>().join("/");
        let labels: Vec<String> = metric.labels.iter().map(|label| format!("`{label}`")).collect();
        let sites = metric.sites.iter().cloned().collect::<Vec<_>>().join(", ");
        match documented.get(name) {
            None => problems.push(format!(
                "{name} ({kind} recorded in {sites}) has no row in the metrics table of {METRICS_PAGE}: add \
                 `| \\`{name}\\` | {kind} | {} | <service> | <meaning> |`",
                if labels.is_empty() {
                    "—".to_string()
                } else {
                    labels.join(", ")
                },
            )),
            Some((kind_cell, labels_cell)) => {
                for kind in &metric.kinds {
                    if !kind_cell.contains(kind.as_str()) {
                        problems.push(format!(
                            "{name}: {METRICS_PAGE} gives its type as \"{kind_cell}\", the code records a {kind} ({sites})"
                        ));
                    }
                }
                let listed = names_in(&without_parentheses(labels_cell), "");
                for label in &metric.labels {
                    if !listed.contains(label) {
                        problems.push(format!(
                            "{name}: label `{label}` (recorded in {sites}) is missing from its row in {METRICS_PAGE}"
                        ));
                    }
                }
                for label in &listed {
                    if !metric.labels.contains(label) {
                        problems.push(format!(
                            "{name}: its row in {METRICS_PAGE} lists label `{label}`, which the code never sets ({sites})"
                        ));
                    }
                }
            }
        }
    }
    for name in documented.keys() {
        if !metrics.contains_key(name) {
            problems.push(format!(
                "{name} has a row in {METRICS_PAGE} but the code records no such metric: remove the row (or fix its name)"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the metrics table is out of date:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_demo_help_file_is_what_the_demo_prints() {
    let help = match DemoArgs::command()
        .term_width(100)
        .try_get_matches_from(["clarion-demo", "--help"])
    {
        Err(err) if err.kind() == clap::error::ErrorKind::DisplayHelp => err.render().to_string(),
        other => panic!("clarion-demo --help did not display help: {other:?}"),
    };
    let path = repo_root().join(DEMO_HELP);
    if std::env::var_os("CLARION_BLESS").is_some() {
        std::fs::write(&path, &help).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == help,
        "{DEMO_HELP} (what `./scripts/demo --help` prints without building) is not what `clarion-demo --help` \
         prints; rewrite it with `CLARION_BLESS=1 cargo test -p clarion-load-tests --test docs` and commit it.\n\
         clarion-demo --help prints:\n{help}"
    );
}
