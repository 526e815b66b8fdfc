//! The `replay` command's contract: its output lines and exit codes, on a real fault trial's
//! history (`histories/trial-5.json`, CI seed 5, recorded with `ZKR_HISTORIES`) and on broken
//! copies of it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Command, Output};

use zookeeper_recipes_model::trace::{Event, Trace};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/histories/trial-5.json");

fn replay(file: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zookeeper-recipes-model"))
        .args(["replay", file])
        .output()
        .expect("running the model's binary")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A file of this test's own (tests run in parallel).
fn scratch(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "zkr-model-replay-{}-{name}.json",
        std::process::id()
    ));
    std::fs::write(&path, text).expect("writing a scratch history");
    path
}

#[test]
fn a_recorded_trial_replays_without_divergence() {
    let o = replay(FIXTURE);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert_eq!(stdout(&o), "events: 475\nmapped: 467\ndivergences: 0\n");
}

#[test]
fn a_broken_copy_is_a_divergence_naming_the_event() {
    let mut trace = Trace::parse(&std::fs::read_to_string(FIXTURE).unwrap()).unwrap();
    // The last write the latch's resource accepted is recorded as rejected: the fence would
    // have rejected a token at or above every one accepted before.
    let index = trace
        .events
        .iter()
        .rposition(|e| matches!(e, Event::Write { resource, .. } if resource == "latch-row"))
        .unwrap();
    if let Event::Write { accepted, .. } = &mut trace.events[index] {
        assert!(*accepted);
        *accepted = false;
    }
    let path = scratch("broken", &trace.to_json());
    let o = replay(path.to_str().unwrap());
    let _ = std::fs::remove_file(&path);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..3], ["events: 475", "mapped: 467", "divergences: 1"]);
    assert!(
        lines[3].starts_with(&format!("event {index}: write: \"latch-0\" to latch-row")),
        "{out}"
    );
    assert!(
        lines[4].starts_with("  state: latch-row: highest token accepted "),
        "{out}"
    );
    assert!(
        lines[5].starts_with("  why: ")
            && lines[5].ends_with("(property `tokens rise` at the fenced resource)"),
        "{out}"
    );
}

#[test]
fn bad_files_are_usage_errors() {
    assert_eq!(replay("/nonexistent/history.json").status.code(), Some(2));
    let not_json = scratch("not-json", "claims, ends and writes");
    let other_format = scratch("format-3", r#"{"format": 3, "events": []}"#);
    let unknown_event = scratch(
        "unknown-event",
        r#"{"format": 1, "events": [{"event": "nope", "at_ns": 1}]}"#,
    );
    let out_of_order = scratch(
        "out-of-order",
        r#"{"format": 1, "events": [
            {"event": "fault", "at_ns": 10, "what": "a"},
            {"event": "fault", "at_ns": 5, "what": "b"}]}"#,
    );
    for file in [&not_json, &other_format, &unknown_event, &out_of_order] {
        let o = replay(file.to_str().unwrap());
        let _ = std::fs::remove_file(file);
        assert_eq!(o.status.code(), Some(2), "{}: {o:?}", file.display());
        assert_eq!(stdout(&o), "", "{}", file.display());
    }
    let no_file = Command::new(env!("CARGO_BIN_EXE_zookeeper-recipes-model"))
        .arg("replay")
        .output()
        .unwrap();
    assert_eq!(no_file.status.code(), Some(2));
}
