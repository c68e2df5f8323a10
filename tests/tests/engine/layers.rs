//! lock-core's layer rule (`docs/architecture.md`): each layer imports only
//! the layers below it.
//!
//! | layer | may import |
//! |---|---|
//! | leaves: `error.rs`, `metrics.rs`, `config/`, `options.rs` | `error` (and `config` for `options`) |
//! | `memory/` (the in-memory Redis, feature `memory`) | `error` and itself |
//! | `transport/` | the leaves, `memory/` and itself |
//! | `protocol/` | the transport, the leaves and itself |
//! | `hold/` (the engine) | the protocol, the transport, the leaves and itself |
//! | the public faces (`client.rs`, `lock.rs`, `guard.rs`, ...) | anything below |
//!
//! Read from the sources: every `crate::<module>` path in code (comments
//! and doc comments are not imports). A second check finds import circles
//! between any two files of the crate, faces included.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../lock-core/src")
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file before its unit tests (the `mod tests` at the end
/// of a file, with its `#[cfg(test)]` line, may use anything).
fn code_of(text: &str) -> &str {
    match text.find("\nmod tests {") {
        Some(at) => {
            let attribute = text[..at].rfind('\n').unwrap_or(at);
            &text[..attribute]
        }
        None => text,
    }
}

/// The module paths a file's code names through `crate::` paths, each with
/// its line: `crate::hold::queue::Waiter` gives `hold::queue::Waiter`.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let path: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let path = path.trim_end_matches(':');
            // `crate::{a, b}` groups: each name counts.
            if path.is_empty() && after.starts_with('{') {
                let group = after[1..].split('}').next().unwrap_or_default();
                for item in group.split(',') {
                    let item: String = item
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                        .collect();
                    if !item.is_empty() {
                        found.push((n + 1, item.trim_end_matches(':').to_string()));
                    }
                }
            } else if !path.is_empty() {
                found.push((n + 1, path.to_string()));
            }
            rest = after;
        }
    }
    found
}

/// The first segment of a module path: its top-level module.
fn top(path: &str) -> &str {
    path.split("::").next().unwrap_or_default()
}

/// Every import of `layer` (a folder or a file without `.rs`) whose
/// top-level module is not in `allowed`.
fn violations(layer: &str, allowed: &[&str]) -> Vec<String> {
    let root = root();
    let mut files = Vec::new();
    let dir = root.join(layer);
    if dir.is_dir() {
        sources(&dir, &mut files);
    } else {
        files.push(root.join(format!("{layer}.rs")));
    }
    assert!(files.iter().all(|f| f.exists()), "no sources for {layer}");
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("source");
        for (line, path) in crate_paths(code_of(&text)) {
            if !allowed.contains(&top(&path)) {
                out.push(format!(
                    "{}:{line} imports crate::{path}",
                    file.strip_prefix(&root).unwrap_or(&file).display()
                ));
            }
        }
    }
    out
}

fn assert_layer(layer: &str, allowed: &[&str]) {
    let found = violations(layer, allowed);
    assert!(
        found.is_empty(),
        "{layer} imports a layer above it:\n{}",
        found.join("\n")
    );
}

const LEAVES: &[&str] = &["config", "error", "metrics", "options"];

#[test]
fn the_leaves_import_only_what_is_below_them() {
    assert_layer("error", &[]);
    assert_layer("metrics", &["error"]);
    assert_layer("config", &["config", "error"]);
    assert_layer("options", &["config", "error"]);
}

/// The in-memory Redis is a backend below the transport: the lock logic
/// stays in the scripts, and nothing of the engine can leak into it.
#[test]
fn memory_imports_nothing_above_it() {
    assert_layer("memory", &["memory", "error"]);
}

#[test]
fn transport_imports_only_the_leaves_the_memory_backend_and_itself() {
    let allowed: Vec<&str> = LEAVES
        .iter()
        .copied()
        .chain(["memory", "transport"])
        .collect();
    assert_layer("transport", &allowed);
}

#[test]
fn protocol_imports_only_the_transport_the_leaves_and_itself() {
    let allowed: Vec<&str> = LEAVES
        .iter()
        .copied()
        .chain(["transport", "protocol"])
        .collect();
    assert_layer("protocol", &allowed);
}

#[test]
fn the_hold_engine_imports_no_public_face() {
    let allowed: Vec<&str> = LEAVES
        .iter()
        .copied()
        .chain(["transport", "protocol", "hold"])
        .collect();
    assert_layer("hold", &allowed);
}

/// Every file of the crate as a module path (`hold/queue.rs` is
/// `hold::queue`, `hold/mod.rs` is `hold`), with the modules its code
/// imports (the longest known module of each `crate::` path).
fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let root = root();
    let mut files = Vec::new();
    sources(&root, &mut files);
    let module_of = |file: &Path| -> String {
        let rel = file.strip_prefix(&root).unwrap_or(file).with_extension("");
        let parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .filter(|p| p != "mod")
            .collect();
        parts.join("::")
    };
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(f)).collect();
    let mut graph = BTreeMap::new();
    for file in &files {
        let me = module_of(file);
        let text = std::fs::read_to_string(file).expect("source");
        let mut imports = BTreeSet::new();
        for (_, path) in crate_paths(code_of(&text)) {
            let segments: Vec<&str> = path.split("::").collect();
            let known = (1..=segments.len())
                .rev()
                .map(|k| segments[..k].join("::"))
                .find(|m| modules.contains(m));
            if let Some(module) = known {
                if module != me {
                    imports.insert(module);
                }
            }
        }
        graph.insert(me, imports);
    }
    graph
}

/// The groups of modules that import each other, directly or around a
/// circle (strongly connected components of more than one module).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Two modules are in one circle when each reaches the other.
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for next in graph.get(&m).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reach(m))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for m in graph.keys() {
        if done.contains(m) {
            continue;
        }
        let group: Vec<String> = graph
            .keys()
            .filter(|o| *o == m || (reaches[m].contains(*o) && reaches[*o].contains(m)))
            .cloned()
            .collect();
        done.extend(group.iter().cloned());
        if group.len() > 1 {
            out.push(group);
        }
    }
    out
}

#[test]
fn no_two_modules_import_each_other() {
    let graph = import_graph();
    assert!(graph.len() > 40, "the crate's files were not found");
    let found = circles(&graph);
    assert!(
        found.is_empty(),
        "modules that import each other (directly or around a circle):\n{}",
        found
            .iter()
            .map(|c| c.join(" -> "))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_checks_see_an_import_from_above_and_a_circle() {
    let planted = "use crate::client::Core;\n// crate::lock in a comment\nuse crate::{error::Error, hold::Hold};\n";
    let names: Vec<String> = crate_paths(planted).into_iter().map(|(_, m)| m).collect();
    assert_eq!(names, ["client::Core", "error::Error", "hold::Hold"]);
    let tops: Vec<&str> = names.iter().map(|n| top(n)).collect();
    assert_eq!(tops, ["client", "error", "hold"]);
    // A planted circle a -> b -> c -> a beside a module outside it.
    let edges = [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")];
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, to) in edges {
        graph.entry(from.into()).or_default().insert(to.into());
        graph.entry(to.into()).or_default();
    }
    assert_eq!(circles(&graph), [["a", "b", "c"]]);
    // The unit tests at the end of a file are not imports.
    let with_tests =
        "use crate::error::Error;\n#[cfg(test)]\nmod tests {\n    use crate::lock::Lock;\n}\n";
    let names: Vec<String> = crate_paths(code_of(with_tests))
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    assert_eq!(names, ["error::Error"]);
}

/// The lines of `text`'s code with a `select!` that is not `biased;`. An
/// unbiased `select!` polls its branches in a random order, so a seeded
/// simulation (lock-sim) could not replay a run exactly: every `select!`
/// of lock-core polls in the order written.
fn unbiased_selects(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter(|(_, line)| {
            let line = line.trim_start();
            !line.starts_with("//") && line.contains("select! {")
        })
        .filter(|(i, _)| lines.get(i + 1).is_none_or(|next| next.trim() != "biased;"))
        .map(|(i, _)| i + 1)
        .collect()
}

#[test]
fn every_select_in_lock_core_is_biased() {
    let planted = "fn f() {\n    tokio::select! {\n        biased;\n    }\n    tokio::select! {\n        _ = a => {}\n    }\n    /// tokio::select! {\n}\n";
    assert_eq!(unbiased_selects(planted), [5]);
    let mut files = Vec::new();
    sources(&root(), &mut files);
    let mut found = Vec::new();
    let mut seen = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).expect("source");
        let code = code_of(&text);
        seen += code.matches("select! {").count();
        for line in unbiased_selects(code) {
            found.push(format!("{}:{line}", file.display()));
        }
    }
    assert!(seen > 10, "the sources were read: {seen}");
    assert!(found.is_empty(), "unbiased select!: {}", found.join(", "));
}
