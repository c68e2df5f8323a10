//! lock-core's layer rule (issue 22, `docs/hold-lifecycle.md`): a module
//! under `transport/` imports only the leaves (`config`, `error`,
//! `metrics`) and the transport; a module under `protocol/` also the
//! transport, never the hold engine or the public faces above it. Read
//! from the sources: every `crate::<module>` path in code (comments and
//! doc comments are not imports).

use std::path::{Path, PathBuf};

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

/// The top-level modules a file's code names through `crate::` paths.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // `crate::{a, b}` groups: each name counts.
            if name.is_empty() && after.starts_with('{') {
                let group = after[1..].split('}').next().unwrap_or_default();
                for item in group.split(',') {
                    let item: String = item
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !item.is_empty() {
                        found.push((n + 1, item));
                    }
                }
            } else if !name.is_empty() {
                found.push((n + 1, name));
            }
            rest = after;
        }
    }
    found
}

fn violations(layer: &str, allowed: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../lock-core/src");
    let mut files = Vec::new();
    sources(&root.join(layer), &mut files);
    assert!(!files.is_empty(), "no sources under {layer}/");
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("source");
        for (line, module) in crate_paths(&text) {
            if !allowed.contains(&module.as_str()) {
                out.push(format!(
                    "{}:{line} imports crate::{module}",
                    file.strip_prefix(&root).unwrap_or(&file).display()
                ));
            }
        }
    }
    out
}

const LEAVES: &[&str] = &["config", "error", "metrics"];

#[test]
fn transport_imports_only_the_leaves_and_itself() {
    let allowed: Vec<&str> = LEAVES.iter().copied().chain(["transport"]).collect();
    let found = violations("transport", &allowed);
    assert!(
        found.is_empty(),
        "transport/ imports a layer above it:\n{}",
        found.join("\n")
    );
}

#[test]
fn protocol_imports_only_the_transport_the_leaves_and_itself() {
    let allowed: Vec<&str> = LEAVES
        .iter()
        .copied()
        .chain(["transport", "protocol"])
        .collect();
    let found = violations("protocol", &allowed);
    assert!(
        found.is_empty(),
        "protocol/ imports a layer above it:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_an_import_from_above() {
    let planted = "use crate::client::Core;\n// crate::lock in a comment\nuse crate::{error::Error, hold::Hold};\n";
    let names: Vec<String> = crate_paths(planted).into_iter().map(|(_, m)| m).collect();
    assert_eq!(names, ["client", "error", "hold"]);
}
