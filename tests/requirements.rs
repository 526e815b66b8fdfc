//! What the repository requires of itself: ZooKeeper, Java and Curator installed (the one test
//! that fails, saying how to install them, when they are missing), and specs that cite only tests
//! that exist.
//!
//! Every other test skips in that case (printing why), so that a newcomer without ZooKeeper sees
//! one clear failure with the install command instead of fifty; under `CI=true` they all fail.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use zookeeper_recipes_rigs::fixtures as common;

#[test]
fn zookeeper_java_and_curator_are_installed() {
    if let Err(e) = zookeeper_recipes_testing::zookeeper_available() {
        panic!("the integration tests need a real ZooKeeper: {e}");
    }
    if let Err(e) = common::curator::java_available() {
        panic!("the Curator interop tests need a JDK and Curator's jars: {e}");
    }
}

/// Every test a recipe spec cites (`file::test` for an integration test, `module::tests::test`
/// for a unit test) exists, so that a renamed or moved test cannot leave a rule of a spec
/// pointing at nothing. Needs no server.
#[test]
fn every_test_a_spec_cites_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut specs: Vec<_> = std::fs::read_dir(root.join("recipes"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    specs.sort();
    assert!(specs.len() >= 6, "the recipe specs are missing: {specs:?}");
    let read = |path: &std::path::Path| std::fs::read_to_string(path).ok();
    let defines = |text: &str, name: &str| text.contains(&format!("fn {name}("));
    let mut checked = 0;
    let mut missing = Vec::new();
    for spec in &specs {
        let text = std::fs::read_to_string(spec).unwrap();
        // Code spans are the odd pieces between backticks on a line (the specs' tables and
        // prose), outside fenced blocks.
        let mut fenced = false;
        let spans = text.lines().flat_map(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return Vec::new();
            }
            if fenced {
                return Vec::new();
            }
            line.split('`').skip(1).step_by(2).collect()
        });
        for cited in spans {
            let is_path = cited.contains("::")
                && cited
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == ':');
            if !is_path {
                continue;
            }
            let segments: Vec<&str> = cited.split("::").collect();
            let (first, name) = (segments[0], segments[segments.len() - 1]);
            let unit = segments.iter().position(|s| *s == "tests");
            let found = if let Some(at) = unit {
                // A unit test: the module's file, or its `tests.rs` beside it.
                let module = segments[..at].join("/");
                let files = [
                    format!("src/{module}.rs"),
                    format!("src/{module}/mod.rs"),
                    format!("src/{module}/tests.rs"),
                ];
                let bodies: Vec<String> =
                    files.iter().filter_map(|f| read(&root.join(f))).collect();
                if at + 1 == segments.len() {
                    bodies.iter().any(|body| body.contains("mod tests"))
                } else {
                    bodies.iter().any(|body| defines(body, name))
                }
            } else if let Some(file) = ["tests", "zkr/tests"]
                .iter()
                .map(|dir| root.join(dir).join(format!("{first}.rs")))
                .find(|path| path.exists())
            {
                read(&file).is_some_and(|body| defines(&body, name))
            } else {
                // An item path (`plan::due`), not a test.
                continue;
            };
            checked += 1;
            if !found {
                missing.push(format!("{}: `{cited}`", spec.display()));
            }
        }
    }
    eprintln!("{checked} cited tests checked");
    assert!(
        checked >= 100,
        "only {checked} cited tests found: is the parser still right?"
    );
    assert!(
        missing.is_empty(),
        "the specs cite tests that do not exist (renamed or moved?):\n{}",
        missing.join("\n")
    );
}

/// The library's module graph runs one way: no top-level module of `src/` reaches back to one
/// that reaches it (a layer calling up into the layer that calls it). Edges are the `crate::x`
/// paths in each module's code, comments and unit tests left out; a cycle fails the test with
/// its path.
#[test]
fn the_library_module_graph_has_no_cycle() {
    use std::collections::{BTreeMap, BTreeSet};
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let is_module = |name: &str| {
        src.join(format!("{name}.rs")).exists() || src.join(name).join("mod.rs").exists()
    };
    let mut files = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        // The root only declares and re-exports; `specs` only includes documents.
        if top == "lib" || top == "specs" {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        let code = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        let targets = graph.entry(top.clone()).or_default();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            let mut rest = line;
            while let Some(at) = rest.find("crate::") {
                rest = &rest[at + "crate::".len()..];
                let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
                    // `crate::{a::X, b}`: the first segment of each entry.
                    let group = group.split('}').next().unwrap_or_default();
                    group
                        .split(',')
                        .map(|e| e.trim().split("::").next().unwrap_or_default())
                        .collect()
                } else {
                    vec![
                        rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                            .next()
                            .unwrap_or_default(),
                    ]
                };
                for name in names {
                    if name != top && is_module(name) {
                        targets.insert(name.to_owned());
                    }
                }
            }
        }
    }
    assert!(
        graph.len() >= 10 && graph.values().any(|t| !t.is_empty()),
        "the module graph came out empty: is the parser still right? {graph:?}"
    );
    // Depth-first search; a node met again while on the stack closes a cycle.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, &graph, &mut Vec::new(), &mut done) {
            panic!(
                "the module graph has a cycle: {}\n(every edge: {graph:#?})",
                cycle.join(" -> ")
            );
        }
    }
}
