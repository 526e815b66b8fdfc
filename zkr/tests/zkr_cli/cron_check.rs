//! `zkr cron status [--check]` on the ensemble's clock (issue 28): the age of the last success
//! and `--max-age` measured against the `mtime` of a write to the job's `clock` node, not the
//! checking host's wall clock (skewed here with libfaketime); the fallback to the local clock,
//! said, when the checker may not write; a failed slot followed only by skipped ones. Through
//! the real binary against real ZooKeeper; each test owns its job path and every wait is
//! bounded with a message that says what did not happen.

use zookeeper_recipes_rigs::fixtures as common;

use std::time::Duration;

use common::zkr::{Zkr, libfaketime, skew_wall_clock, zkr};
use common::{BOUND, shared_server, zookeeper};
use serde_json::Value;
use zookeeper_recipes_testing as testing;

use crate::auth::{identity_file, open_parent};
use crate::cron_cli::zkr_output_with as zkr_output;
use crate::cron_ops::{replica, stop};

/// Waits for `slot_finished` of `slot` with `outcome`.
async fn finished(z: &mut Zkr, slot: &str, outcome: &str) {
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let line = z
            .wait_for(
                "slot_finished",
                left,
                &format!("{slot} did not finish {outcome}"),
            )
            .await;
        if line.str("slot") == slot {
            assert_eq!(line.str("outcome"), outcome, "{slot}: {:?}", line.json);
            return;
        }
    }
}

/// `zkr [--auth-file FILE] cron status ARGS...` with the wall clock shifted by `skew`
/// (libfaketime's syntax, `None`: the machine's): exit code, the JSON it printed, stderr.
async fn status(
    connect: &str,
    skew: Option<(&std::path::Path, &str)>,
    auth_file: Option<&str>,
    args: &[&str],
) -> (Option<i32>, Value, String) {
    let mut c = zkr(connect);
    if let Some((lib, offset)) = skew {
        skew_wall_clock(&mut c, lib, offset);
    }
    if let Some(file) = auth_file {
        c.args(["--auth-file", file]);
    }
    c.args(["cron", "status"]).args(args);
    let out = tokio::time::timeout(BOUND, c.output())
        .await
        .unwrap_or_else(|_| panic!("zkr cron status {args:?} did not finish within {BOUND:?}"))
        .expect("zkr ran");
    let stdout = String::from_utf8(out.stdout).expect("zkr prints UTF-8");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("zkr cron status {args:?} printed no JSON ({e}): {stdout}\n{stderr}")
    });
    (out.status.code(), json, stderr)
}

/// `zkr cron ARGS...` (with `pre` before `cron`), which must succeed.
async fn cron_ok(connect: &str, pre: &[&str], args: &[&str]) {
    let mut all = pre.to_vec();
    all.push("cron");
    all.extend_from_slice(args);
    let (status, _, err) = zkr_output(connect, None, &all).await;
    assert!(status.success(), "zkr {all:?} failed: {status}\n{err}");
}

/// A checking host whose wall clock is 30 days ahead or behind reads the same age of the last
/// success as an honest one, and `--check --max-age` exits by the ensemble's clock: 0 for a
/// success seconds old (before: 10 on the host ahead), 10 for one older than `--max-age`
/// (before: 0 on the host behind, whose age came out negative). Fault: the checking process's
/// wall clock skewed with libfaketime (its monotonic clock untouched).
#[tokio::test]
async fn status_measures_ages_on_the_ensembles_clock_whatever_the_checking_hosts_clock_says() {
    if !zookeeper() {
        return;
    }
    let Some(lib) = libfaketime() else {
        return;
    };
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-clock");
    let mut r = replica(connect, "r", &[], &path, &["--every", "1h"], "exit 0");
    r.wait_for("leader", BOUND, "r never led").await;
    cron_ok(connect, &[], &["trigger", &path]).await;
    finished(&mut r, "trigger-1", "succeeded").await;

    let ahead = Some((lib.as_path(), "+30d"));
    let behind = Some((lib.as_path(), "-30d"));
    for (name, skew) in [
        ("30 days ahead", ahead),
        ("30 days behind", behind),
        ("honest", None),
    ] {
        let (code, s, err) =
            status(connect, skew, None, &[&path, "--check", "--max-age", "26h"]).await;
        assert_eq!(s["last_success"]["slot"], "trigger-1", "{s}");
        let age = s["last_success"]["age_ms"].as_i64().expect("an age");
        assert!(
            (0..60_000).contains(&age),
            "a checker {name} reads the age of a success seconds old as {age} ms: {s}"
        );
        assert_eq!(code, Some(0), "a checker {name}: {s}\n{err}");
        assert_eq!(s["clock"], "ensemble", "a checker {name}: {s}");
        assert!(!err.contains("warning"), "a checker {name} warned: {err}");
        // Without --check the age is the same.
        let (code, s, _) = status(connect, skew, None, &[&path]).await;
        assert_eq!(code, Some(0), "{s}");
        let age = s["last_success"]["age_ms"].as_i64().expect("an age");
        assert!(
            (0..60_000).contains(&age),
            "a checker {name}, no --check: {age} ms: {s}"
        );
    }

    // Once the success is older than 2 s by the ensemble's clock (the honest checker says so),
    // the checker 30 days behind says stale too.
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let (code, s, _) =
            status(connect, None, None, &[&path, "--check", "--max-age", "2s"]).await;
        if code == Some(10) {
            break;
        }
        assert_eq!(code, Some(0), "{s}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the success never grew older than 2 s for an honest checker within {BOUND:?}: {s}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for (name, skew) in [("30 days ahead", ahead), ("30 days behind", behind)] {
        let (code, s, err) =
            status(connect, skew, None, &[&path, "--check", "--max-age", "2s"]).await;
        assert_eq!(code, Some(10), "a checker {name}: {s}\n{err}");
        assert_eq!(s["check"]["problems"], serde_json::json!(["stale"]), "{s}");
        assert_eq!(s["clock"], "ensemble", "{s}");
    }
    stop(&mut r).await;
}

/// An identity that may read the job but not write under it (a job created with `--acl
/// creator-read`, checked without credentials) cannot read the ensemble's clock: `status`
/// measures on the local clock, says so in `"clock":"local"` and on stderr, and does not fail
/// the check for it. Its own identity reads the ensemble's clock.
#[tokio::test]
async fn status_falls_back_to_the_local_clock_and_says_so_when_it_may_not_write_the_job() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-clock-ro");
    open_parent(connect, &path).await;
    let dir = tempfile::tempdir().unwrap();
    let (_, _, file) = identity_file(dir.path());
    let pre = ["--auth-file", file.as_str(), "--acl", "creator-read"];
    let mut r = replica(connect, "r", &pre, &path, &["--every", "1h"], "exit 0");
    r.wait_for("leader", BOUND, "r never led").await;
    cron_ok(connect, &pre, &["trigger", &path]).await;
    finished(&mut r, "trigger-1", "succeeded").await;

    let (code, s, err) = status(connect, None, None, &[&path, "--check", "--max-age", "26h"]).await;
    assert_eq!(
        code,
        Some(0),
        "a read-only checker fails the check: {s}\n{err}"
    );
    assert_eq!(s["clock"], "local", "{s}");
    let age = s["last_success"]["age_ms"].as_i64().expect("an age");
    assert!((0..60_000).contains(&age), "{age} ms: {s}");
    assert!(
        err.contains("cannot read the ensemble's clock") && err.contains("local"),
        "a read-only checker should say its ages are by the local clock: {err}"
    );

    let (code, s, err) = status(
        connect,
        None,
        Some(&file),
        &[&path, "--check", "--max-age", "26h"],
    )
    .await;
    assert_eq!(code, Some(0), "{s}\n{err}");
    assert_eq!(s["clock"], "ensemble", "{s}");
    assert!(!err.contains("warning"), "{err}");
    stop(&mut r).await;
}

/// `--check` reports a failed slot that no later slot made good, also when slots after it were
/// skipped (here: paused); a later success clears it. Before, only the newest settled slot
/// counted, and a skipped one hid the failure.
#[tokio::test]
async fn status_check_reports_a_failed_slot_followed_only_by_skipped_ones() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-failed-skipped");
    // The schedule's slots fail; triggers succeed.
    let script = "case \"$ZK_SLOT\" in trigger-*) exit 0;; esac; exit 5";
    let mut r = replica(connect, "r", &[], &path, &["--every", "2s"], script);
    let failed = loop {
        let line = r.wait_for("slot_finished", BOUND, "no slot finished").await;
        if line.str("outcome") == "failed" {
            break line.str("slot").to_owned();
        }
    };
    cron_ok(connect, &[], &["pause", &path]).await;
    let skipped = r
        .wait_for("slot_skipped", BOUND, "no slot was skipped while paused")
        .await;
    assert_eq!(skipped.str("reason"), "paused", "{:?}", skipped.json);

    let (code, s, _) = status(connect, None, None, &[&path, "--check"]).await;
    assert!(
        matches!(s["last"]["state"].as_str(), Some("skipped" | "missed")),
        "the newest settled slot: {s}"
    );
    assert_eq!(
        code,
        Some(11),
        "{failed} failed, then slots were skipped: {s}"
    );
    assert_eq!(s["check"]["problems"], serde_json::json!(["failed"]), "{s}");

    // A success after it makes it good (a trigger runs while paused).
    cron_ok(connect, &[], &["trigger", &path]).await;
    finished(&mut r, "trigger-1", "succeeded").await;
    let (code, s, _) = status(connect, None, None, &[&path, "--check"]).await;
    assert_eq!(code, Some(0), "a success after the failure: {s}");
    stop(&mut r).await;
}
