//! What the repository requires of itself: ZooKeeper, Java and Curator installed (the one test
//! that fails, saying how to install them, when they are missing), and specs that cite only tests
//! that exist. (The module graph without cycles is checked by a unit test in src/lib.rs.)
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
