//! Every test a protocol spec cites (`recipes/*.md`, as `file::test_name`) still exists: a spec's
//! rule table is only as good as the tests it points to, and files move (issue 25 moved the CLI's
//! tests into `zkr/tests/` and the trials into `rigs/`).

use std::path::{Path, PathBuf};

/// The workspace root (the library's package).
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The files a citation `file::name` may mean: an integration test binary or suite module of any
/// member, or a module of any member's sources.
fn candidates(file: &str) -> Vec<PathBuf> {
    let root = root();
    let mut out = Vec::new();
    for dir in ["tests", "zkr/tests", "rigs/tests"] {
        let dir = root.join(dir);
        out.push(dir.join(format!("{file}.rs")));
        // A suite that is a module of a test binary (`tests/recipes/leader_pool.rs`).
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            out.push(entry.path().join(format!("{file}.rs")));
        }
    }
    for src in ["src", "zkr/src", "testing/src", "rigs/src"] {
        let src = root.join(src);
        out.push(src.join(format!("{file}.rs")));
        // A module with a directory (`session::x` may be in `src/session/lease.rs`).
        out.extend(rs_files(&src.join(file)));
        // A module one level down (`src/leader/latch.rs` cited as `latch::...`).
        for entry in std::fs::read_dir(&src).into_iter().flatten().flatten() {
            if entry.path().is_dir() {
                out.push(entry.path().join(format!("{file}.rs")));
                out.push(entry.path().join(file).join("mod.rs"));
            }
        }
    }
    out.into_iter().filter(|p| p.is_file()).collect()
}

/// The `.rs` files under `dir`, recursively.
fn rs_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(rs_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// The `file::name` citations in a spec, backticked, lower-case (tests and functions).
fn citations(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for quoted in text.split('`').skip(1).step_by(2) {
        let parts: Vec<&str> = quoted.split("::").collect();
        if parts.len() < 2
            || !parts.iter().all(|p| {
                !p.is_empty()
                    && p.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            })
        {
            continue;
        }
        let file = parts[0].to_owned();
        let name = parts[parts.len() - 1].to_owned();
        // `crate::metrics`, `leader::tests`: modules, not tests.
        if file == "crate" || name == "tests" {
            continue;
        }
        out.push((file, name));
    }
    out
}

#[test]
fn every_test_a_spec_cites_exists() {
    let specs = root().join("recipes");
    let mut checked = 0;
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&specs).expect("recipes/ is there") {
        let spec = entry.unwrap().path();
        if spec.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let text = std::fs::read_to_string(&spec).unwrap();
        for (file, name) in citations(&text) {
            let files = candidates(&file);
            // A citation of a crate's module path that is no file here (`zookeeper_client::...`)
            // is not a test citation.
            if files.is_empty() && !["tests", "zkr", "rigs"].contains(&file.as_str()) {
                if file.starts_with("zookeeper") || file == "std" || file == "tokio" {
                    continue;
                }
                missing.push(format!(
                    "{}: `{file}::{name}` (no file {file}.rs)",
                    spec.display()
                ));
                continue;
            }
            let found = files.iter().any(|f| {
                let source = std::fs::read_to_string(f).unwrap_or_default();
                [
                    format!("fn {name}("),
                    format!("fn {name}<"),
                    format!("mod {name} "),
                    format!("mod {name};"),
                    format!("struct {name} "),
                    format!("const {name}:"),
                ]
                .iter()
                .any(|needle| source.contains(needle.as_str()))
            });
            checked += 1;
            if !found {
                missing.push(format!(
                    "{}: `{file}::{name}` is in none of {files:?}",
                    spec.display()
                ));
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} citations found: is the parser right?"
    );
    assert!(
        missing.is_empty(),
        "{} of {checked} cited tests are gone:\n{}",
        missing.len(),
        missing.join("\n")
    );
}
