//! The workspace's source layout, read from the source tree (no cluster):
//!
//! - **No circles of files.** Within each crate, no two files import each
//!   other, directly or through a chain. A file imports another when it
//!   names an item of it: a `use` or any path through `crate::`, `super::`,
//!   `self::` or a child module (`mod.rs` re-exporting `child::Item` and
//!   `child.rs` using `super::Item` is a circle). `mod child;` alone is not
//!   an import. Test modules count: they are code a reader follows too.
//! - **Metric names in one place.** In a service that has a
//!   `src/metrics.rs`, no other file calls the `metrics` macros or spells a
//!   metric name that file declares (its `"clarion_…"` string literals).
//!
//! Every crate's `src/` is parsed with `syn`, starting at its roots
//! (`lib.rs`, `main.rs`, `bin/*.rs`) and following `mod` declarations.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// The workspace's crates, by folder.
const CRATES: &[&str] = &[
    "proto",
    "runtime",
    "coordinator",
    "harvester",
    "dispatcher",
    "load-tests",
];

/// Crates whose circles other branches of issue 33 are taking apart: their
/// circles are printed, not failed on, and once a crate has none the test
/// fails until it is taken off this list (so the list stays true).
const STILL_TANGLED: &[&str] = &["proto", "load-tests"];

/// The service crates whose metric names must live in `src/metrics.rs`
/// (checked once the crate has one).
const SERVICES: &[&str] = &["coordinator", "harvester", "dispatcher"];

#[test]
fn no_two_files_of_a_crate_import_each_other() {
    let mut failures = Vec::new();
    for name in CRATES {
        let krate = Crate::read(&workspace().join(name).join("src"));
        let circles = krate.circles();
        let tangled = STILL_TANGLED.contains(name);
        for circle in &circles {
            let line = format!("{name}: {}", circle.join(" → "));
            if tangled {
                println!("still tangled (not failed on) {line}");
            } else {
                failures.push(line);
            }
        }
        if tangled && circles.is_empty() {
            failures.push(format!(
                "{name} has no circle any more: take it off STILL_TANGLED"
            ));
        }
    }
    assert!(failures.is_empty(), "circles of files:\n{}", failures.join("\n"));
}

#[test]
fn the_checker_finds_a_circle_through_a_re_export() {
    let dir = std::env::temp_dir().join(format!("clarion-layout-{}", std::process::id()));
    let write = |path: &str, text: &str| {
        let path = dir.join(path);
        fs::create_dir_all(path.parent().expect("a parent")).expect("a temporary folder");
        fs::write(path, text).expect("a temporary file");
    };
    write("lib.rs", "pub mod auth;\npub mod leaf;\n");
    write(
        "auth/mod.rs",
        "pub mod keys;\npub use keys::KeySet;\npub struct Caller;\n",
    );
    write("auth/keys.rs", "use super::Caller;\npub struct KeySet(Caller);\n");
    write(
        "leaf.rs",
        "use crate::auth::{self, Caller};\nfn f() { let _ = crate::auth::keys::KeySet; }\n",
    );
    let circles = Crate::read(&dir).circles();
    let _ = fs::remove_dir_all(&dir);
    assert_eq!(circles, vec![vec!["auth/keys.rs", "auth/mod.rs", "auth/keys.rs"]]);
}

#[test]
fn metric_names_are_spelled_only_in_the_service_metrics_module() {
    let mut failures = Vec::new();
    for name in SERVICES {
        let src = workspace().join(name).join("src");
        let Ok(metrics_text) = fs::read_to_string(src.join("metrics.rs")) else {
            println!("{name} has no src/metrics.rs yet: not checked");
            continue;
        };
        let declared: BTreeSet<String> = string_literals(&metrics_text)
            .into_iter()
            .filter(|text| text.starts_with("clarion_"))
            .collect();
        assert!(!declared.is_empty(), "{name}/src/metrics.rs declares no metric");
        let krate = Crate::read(&src);
        for (file, text) in &krate.texts {
            if file == "metrics.rs" {
                continue;
            }
            for literal in string_literals(text) {
                if declared.contains(&literal) {
                    failures.push(format!("{name}/src/{file} spells the metric name {literal:?}"));
                }
            }
            let syntax = syn::parse_file(text).expect("parsed once already");
            let mut macros = MetricMacros::default();
            macros.visit_file(&syntax);
            for call in macros.calls {
                failures.push(format!(
                    "{name}/src/{file} calls {call}! (emit through metrics.rs)"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "metric names outside metrics.rs:\n{}",
        failures.join("\n")
    );
}

/// The workspace root (this crate's parent folder).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("load-tests sits in the workspace")
        .to_owned()
}

/// Every string literal of a file, macro arguments included.
fn string_literals(text: &str) -> Vec<String> {
    let tokens: TokenStream = text.parse().expect("a Rust file");
    let mut found = Vec::new();
    collect_literals(tokens, &mut found);
    found
}

fn collect_literals(tokens: TokenStream, found: &mut Vec<String>) {
    for token in tokens {
        match token {
            TokenTree::Group(group) => collect_literals(group.stream(), found),
            TokenTree::Literal(literal) => {
                if let Ok(syn::Lit::Str(text)) = syn::parse_str::<syn::Lit>(&literal.to_string()) {
                    found.push(text.value());
                }
            }
            _ => {}
        }
    }
}

/// Calls of the `metrics` crate's emitting macros.
#[derive(Default)]
struct MetricMacros {
    calls: Vec<String>,
}

impl<'ast> Visit<'ast> for MetricMacros {
    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        let names: Vec<String> = mac.path.segments.iter().map(|s| s.ident.to_string()).collect();
        let last = names.last().map(String::as_str).unwrap_or_default();
        let emits = matches!(last, "counter" | "gauge" | "histogram") || last.starts_with("describe_");
        if emits && (names.len() == 1 || names[0] == "metrics") {
            self.calls.push(names.join("::"));
        }
        syn::visit::visit_macro(self, mac);
    }
}

/// One crate's files and what each imports.
struct Crate {
    /// File (relative to `src/`) → its text.
    texts: BTreeMap<String, String>,
    /// File → the files it imports.
    imports: BTreeMap<String, BTreeSet<String>>,
}

impl Crate {
    fn read(src: &Path) -> Self {
        let mut roots = Vec::new();
        for root in ["lib.rs", "main.rs"] {
            if src.join(root).exists() {
                roots.push(root.to_owned());
            }
        }
        if let Ok(bins) = fs::read_dir(src.join("bin")) {
            let mut bins: Vec<String> = bins
                .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
                .filter(|name| name.ends_with(".rs"))
                .map(|name| format!("bin/{name}"))
                .collect();
            bins.sort();
            roots.extend(bins);
        }
        assert!(!roots.is_empty(), "no crate root in {}", src.display());
        let mut krate = Crate {
            texts: BTreeMap::new(),
            imports: BTreeMap::new(),
        };
        for root in roots {
            // Each root is a crate of its own: module paths start afresh.
            let mut modules = BTreeMap::new();
            let mut files = Vec::new();
            discover(src, &root, Vec::new(), &mut modules, &mut files);
            for (file, module, syntax, text) in files {
                let mut walker = Imports {
                    scope: module,
                    children: vec![child_modules(&syntax.items)],
                    targets: Vec::new(),
                };
                walker.visit_file(&syntax);
                let imported = krate.imports.entry(file.clone()).or_default();
                for target in walker.targets {
                    if let Some(target_file) = file_of(&modules, &target)
                        && target_file != file
                    {
                        imported.insert(target_file);
                    }
                }
                krate.texts.insert(file, text);
            }
        }
        krate
    }

    /// Every circle of imports, each as the files in order back to the
    /// first (the smallest circle through each strongly connected group).
    fn circles(&self) -> Vec<Vec<String>> {
        let mut circles = Vec::new();
        for group in strongly_connected(&self.imports) {
            if group.len() < 2 {
                continue;
            }
            let start = group.iter().min().expect("not empty").clone();
            circles.push(shortest_cycle(&self.imports, &start, &group));
        }
        circles
    }
}

/// Reads `file` (the module at `module`) and, recursively, the files of the
/// modules it declares.
fn discover(
    src: &Path,
    file: &str,
    module: Vec<String>,
    modules: &mut BTreeMap<Vec<String>, String>,
    files: &mut Vec<(String, Vec<String>, syn::File, String)>,
) {
    let text = fs::read_to_string(src.join(file)).unwrap_or_else(|err| panic!("{file}: {err}"));
    let syntax = syn::parse_file(&text).unwrap_or_else(|err| panic!("{file}: {err}"));
    modules.insert(module.clone(), file.to_owned());
    // Where this file's child modules live.
    let name = Path::new(file)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let parent = Path::new(file).parent().map(PathBuf::from).unwrap_or_default();
    let dir = if matches!(name, "lib" | "main" | "mod") || (file.starts_with("bin/") && module.is_empty()) {
        parent
    } else {
        parent.join(name)
    };
    let mut declared = Vec::new();
    declared_files(&syntax.items, &dir, &module, &mut declared);
    for (child_module, candidates) in declared {
        let child = candidates
            .iter()
            .find(|path| src.join(path).exists())
            .unwrap_or_else(|| panic!("{file}: no file for module {}", child_module.join("::")));
        let child = child.to_string_lossy().into_owned();
        discover(src, &child, child_module, modules, files);
    }
    files.push((file.to_owned(), module, syntax, text));
}

/// The `mod name;` declarations of `items` (inline modules searched too),
/// each with the files it may live in.
fn declared_files(
    items: &[syn::Item],
    dir: &Path,
    module: &[String],
    out: &mut Vec<(Vec<String>, Vec<PathBuf>)>,
) {
    for item in items {
        let syn::Item::Mod(declared) = item else {
            continue;
        };
        let name = declared.ident.to_string();
        let mut child = module.to_vec();
        child.push(name.clone());
        match &declared.content {
            None => out.push((
                child,
                vec![dir.join(format!("{name}.rs")), dir.join(&name).join("mod.rs")],
            )),
            Some((_, inner)) => declared_files(inner, &dir.join(&name), &child, out),
        }
    }
}

/// The names of the modules `items` declare.
fn child_modules(items: &[syn::Item]) -> HashSet<String> {
    items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Mod(declared) => Some(declared.ident.to_string()),
            _ => None,
        })
        .collect()
}

/// The file that holds the item at `path`: the deepest module of the path
/// that is a file.
fn file_of(modules: &BTreeMap<Vec<String>, String>, path: &[String]) -> Option<String> {
    (0..=path.len())
        .rev()
        .find_map(|len| modules.get(&path[..len]).cloned())
}

/// Collects the absolute paths a file names.
struct Imports {
    /// The module being walked (inline modules pushed on entry).
    scope: Vec<String>,
    /// The child modules declared in each enclosing scope, innermost last.
    children: Vec<HashSet<String>>,
    targets: Vec<Vec<String>>,
}

impl Imports {
    /// `segments` made absolute, when they name something of this crate.
    fn resolve(&self, segments: &[String], in_use: bool) -> Option<Vec<String>> {
        let first = segments.first()?;
        let mut path = match first.as_str() {
            "crate" => segments[1..].to_vec(),
            "super" => {
                let ups = segments.iter().take_while(|s| *s == "super").count();
                let mut path = self.scope[..self.scope.len().checked_sub(ups)?].to_vec();
                path.extend_from_slice(&segments[ups..]);
                path
            }
            "self" => {
                let mut path = self.scope.clone();
                path.extend_from_slice(&segments[1..]);
                path
            }
            // A child module (`keys::KeySet`); a lone name outside `use`
            // is a local variable or item, not a module.
            name if (in_use || segments.len() > 1) && self.children.last()?.contains(name) => {
                let mut path = self.scope.clone();
                path.extend_from_slice(segments);
                path
            }
            _ => return None,
        };
        if path.last().is_some_and(|s| s == "self") {
            path.pop();
        }
        Some(path)
    }

    fn record(&mut self, segments: &[String], in_use: bool) {
        if let Some(path) = self.resolve(segments, in_use) {
            self.targets.push(path);
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(path) => {
                prefix.push(path.ident.to_string());
                self.use_tree(prefix, &path.tree);
                prefix.pop();
            }
            syn::UseTree::Name(name) => {
                prefix.push(name.ident.to_string());
                self.record(&prefix.clone(), true);
                prefix.pop();
            }
            syn::UseTree::Rename(rename) => {
                prefix.push(rename.ident.to_string());
                self.record(&prefix.clone(), true);
                prefix.pop();
            }
            syn::UseTree::Glob(_) => self.record(&prefix.clone(), true),
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }

    /// Paths spelled inside a macro's arguments (`crate::a::b`, `super::c`).
    fn macro_tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(group) => self.macro_tokens(group.stream()),
                TokenTree::Ident(ident)
                    if ["crate", "super", "self"].contains(&ident.to_string().as_str()) =>
                {
                    let mut segments = vec![ident.to_string()];
                    let mut j = i + 1;
                    while let (
                        Some(TokenTree::Punct(a)),
                        Some(TokenTree::Punct(b)),
                        Some(TokenTree::Ident(next)),
                    ) = (tokens.get(j), tokens.get(j + 1), tokens.get(j + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segments.push(next.to_string());
                        j += 3;
                    }
                    if segments.len() > 1 {
                        self.record(&segments, false);
                    }
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Imports {
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if let Some((_, items)) = &item.content {
            self.scope.push(item.ident.to_string());
            self.children.push(child_modules(items));
            for inner in items {
                self.visit_item(inner);
            }
            self.children.pop();
            self.scope.pop();
        }
    }

    /// `pub(crate)`, `pub(super)`: who may see an item, not an import.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.record(&segments, false);
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.macro_tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }
}

/// Tarjan's strongly connected components of the import graph.
fn strongly_connected(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: HashSet<&'g str>,
        groups: Vec<Vec<String>>,
    }
    fn visit<'g>(state: &mut State<'g>, node: &'g str) {
        let n = state.index.len();
        state.index.insert(node, n);
        state.low.insert(node, n);
        state.stack.push(node);
        state.on_stack.insert(node);
        for next in state.graph.get(node).into_iter().flatten() {
            let next = next.as_str();
            if !state.index.contains_key(next) {
                visit(state, next);
                let low = state.low[node].min(state.low[next]);
                state.low.insert(node, low);
            } else if state.on_stack.contains(next) {
                let low = state.low[node].min(state.index[next]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut group = Vec::new();
            while let Some(member) = state.stack.pop() {
                state.on_stack.remove(member);
                group.push(member.to_owned());
                if member == node {
                    break;
                }
            }
            group.sort();
            state.groups.push(group);
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: HashSet::new(),
        groups: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.groups.sort();
    state.groups
}

/// The shortest path from `start` back to itself within `group`.
fn shortest_cycle(graph: &BTreeMap<String, BTreeSet<String>>, start: &str, group: &[String]) -> Vec<String> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut frontier = std::collections::VecDeque::from([start]);
    while let Some(node) = frontier.pop_front() {
        for next in graph.get(node).into_iter().flatten() {
            if !group.contains(next) {
                continue;
            }
            if next == start {
                // Walk back from `node` to `start`, then read it forwards.
                let mut back = vec![node];
                let mut at = node;
                while at != start {
                    at = came_from[at];
                    back.push(at);
                }
                back.reverse();
                back.push(start);
                return back.into_iter().map(str::to_owned).collect();
            }
            if !came_from.contains_key(next.as_str()) && next != start {
                came_from.insert(next, node);
                frontier.push_back(next);
            }
        }
    }
    unreachable!("{start} is in a strongly connected group")
}
