//! The `replay` command's contract: its output lines and exit codes, on a real fault trial's
//! history (`histories/trial-5.json`, CI seed 5, recorded with `ZKR_HISTORIES`, format 2 with
//! the scheduled job's events) and on broken copies of it; and an older recording of the same
//! seed in format 1 (`histories/trial-5-format-1.json`), which still replays.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Command, Output};

use zookeeper_recipes_model::trace::{Check, Event, Trace};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/histories/trial-5.json");
const FORMAT_1: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/histories/trial-5-format-1.json"
);

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
    assert_eq!(stdout(&o), "events: 822\nmapped: 814\ndivergences: 0\n");
}

#[test]
fn a_format_1_history_still_replays() {
    let o = replay(FORMAT_1);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert_eq!(stdout(&o), "events: 475\nmapped: 467\ndivergences: 0\n");
}

fn fixture() -> Trace {
    Trace::parse(&std::fs::read_to_string(FIXTURE).unwrap()).unwrap()
}

/// The index of the run start of `attempt` of the fixture's slot that had three runs (attempt
/// 1 returned `Ok` but its end was not recorded, attempt 2 was cut off, attempt 3 succeeded).
fn run_start_of(trace: &Trace, attempt: u32) -> usize {
    let thrice = trace
        .events
        .iter()
        .find_map(|e| match e {
            Event::RunStart {
                slot, attempt: 3, ..
            } => Some(slot.clone()),
            _ => None,
        })
        .expect("the fixture has a slot with three runs");
    trace
        .events
        .iter()
        .position(|e| matches!(e, Event::RunStart { slot, attempt: a, .. } if *slot == thrice && *a == attempt))
        .unwrap()
}

/// (index, check) of every divergence of `trace`'s replay.
fn divergences(trace: &Trace) -> Vec<(usize, Check)> {
    zookeeper_recipes_model::trace::check_order(trace).unwrap();
    zookeeper_recipes_model::trace::replay(trace)
        .divergences
        .iter()
        .map(|d| (d.index, d.check))
        .collect()
}

#[test]
fn the_fixture_has_job_runs_and_replays_them_cleanly() {
    let report = zookeeper_recipes_model::trace::replay(&fixture());
    assert_eq!(report.divergences, vec![]);
    assert_eq!(
        (
            report.job.runs,
            report.job.ends_ok,
            report.job.ends_error,
            report.job.records
        ),
        (29, 28, 1, 32)
    );
}

#[test]
fn a_run_with_its_token_lowered_is_caught() {
    let mut trace = fixture();
    let index = run_start_of(&trace, 3);
    let Event::RunStart {
        token: previous, ..
    } = trace.events[run_start_of(&trace, 2)]
    else {
        unreachable!()
    };
    // Attempt 3's token (its start and its end) lowered to attempt 2's: not a token its holder's
    // term had, and not above the previous attempt's, which was another term's; the record
    // then names a token no run that returned `Ok` had.
    let Event::RunStart { token, holder, .. } = &mut trace.events[index] else {
        unreachable!()
    };
    let (raised, holder) = (*token, holder.clone());
    *token = previous;
    for e in &mut trace.events[index..] {
        if let Event::RunEnd {
            token, holder: h, ..
        } = e
            && *token == raised
            && *h == holder
        {
            *token = previous;
            break;
        }
    }
    let found = divergences(&trace);
    assert_eq!(
        found[..2],
        [
            (index, Check::RunInItsTerm),
            (index, Check::AttemptTokensRise)
        ],
        "{found:?}"
    );
    assert!(
        found[2..]
            .iter()
            .all(|(_, c)| *c == Check::SucceedsAtMostOnce),
        "{found:?}"
    );
}

#[test]
fn two_runs_of_a_slot_made_to_overlap_are_caught() {
    let mut trace = fixture();
    let second = run_start_of(&trace, 2);
    let third = run_start_of(&trace, 3);
    // Attempt 2's end moved to attempt 3's start: it went on past its term's end, into the
    // next attempt.
    let end = (second..third)
        .find(|i| matches!(trace.events[*i], Event::RunEnd { attempt: 2, .. }))
        .unwrap();
    let mut moved = trace.events.remove(end);
    let at = trace.events[third - 1].at_ns();
    if let Event::RunEnd { at_ns, .. } = &mut moved {
        *at_ns = at;
    }
    trace.events.insert(third, moved);
    let found = divergences(&trace);
    assert!(
        found.contains(&(third - 1, Check::NoTwoAttemptsAtOnce)),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .all(|(_, c)| matches!(c, Check::NoTwoAttemptsAtOnce | Check::RunStopsAtLease)),
        "{found:?}"
    );
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
    assert_eq!(lines[..3], ["events: 822", "mapped: 814", "divergences: 1"]);
    assert!(
        lines[3].starts_with(&format!("event {index}: write: \"latch-2\" to latch-row")),
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
