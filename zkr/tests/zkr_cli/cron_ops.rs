//! `zkr cron` for operators (issue 28): unknown jobs, exit codes, acknowledgements, standby
//! replicas and participants, prompt exit, the command checked at start, the slot preview,
//! connect timeouts, duplicate ids and schedule mismatches, `--version`, `--events FILE`.
//! Through the real binary against real ZooKeeper, as `cron_cli`; each test owns its job path
//! and every wait is bounded with a message that says what did not happen.

use zookeeper_recipes_rigs::fixtures as common;

use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use common::zkr::{Zkr, exe, zkr};
use common::{BOUND, client, proxy_to, shared_server, zookeeper};
use nix::sys::signal::Signal;
use serde_json::Value;
use zookeeper_recipes_testing as testing;

/// The session timeout of these replicas: they must keep their terms on a busy machine.
const STEADY: &str = "6s";

/// `zkr ARGS...` to completion: exit status, stdout, stderr, and how long it took.
async fn zkr_output(connect: &str, args: &[&str]) -> (ExitStatus, String, String, Duration) {
    let mut c = zkr(connect);
    c.args(args);
    let started = Instant::now();
    let out = tokio::time::timeout(BOUND, c.output())
        .await
        .unwrap_or_else(|_| panic!("zkr {args:?} did not finish within {BOUND:?}"))
        .expect("zkr ran");
    (
        out.status,
        String::from_utf8(out.stdout).expect("zkr prints UTF-8"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

/// `zkr cron ARGS...`, which must succeed: stdout and stderr.
async fn cron_ok(connect: &str, args: &[&str]) -> (String, String) {
    let mut all = vec!["cron"];
    all.extend_from_slice(args);
    let (status, out, err, _) = zkr_output(connect, &all).await;
    assert!(status.success(), "zkr {all:?} failed: {status}\n{err}");
    (out, err)
}

/// A replica: `zkr --session-timeout 6s [PRE...] cron run PATH --id ID ARGS... -- sh -c SCRIPT`.
pub(crate) fn replica(
    connect: &str,
    id: &str,
    pre: &[&str],
    path: &str,
    args: &[&str],
    script: &str,
) -> Zkr {
    let mut all = vec!["--session-timeout", STEADY];
    all.extend_from_slice(pre);
    all.extend_from_slice(&["cron", "run", path, "--id", id]);
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "sh", "-c", script]);
    Zkr::supervisor(connect, id, &all)
}

/// SIGTERM, then the exit code, which must be 0 or 143 (a command was running).
pub(crate) async fn stop(z: &mut Zkr) {
    z.signal(Signal::SIGTERM);
    let code = z.exit(BOUND, "a replica after SIGTERM").await.code();
    assert!(
        matches!(code, Some(0 | 143)),
        "[{}] exit code {code:?} after SIGTERM\n{}",
        z.name,
        z.context()
    );
}

/// A listener that accepts nothing zkr could mistake for a server, and tells whether zkr tried.
fn no_server() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let connect = listener.local_addr().unwrap().to_string();
    (listener, connect)
}

fn connected(listener: &std::net::TcpListener) -> bool {
    !matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

// ---------------------------------------------------------------------------------------------
// 2. An unknown job is an error with its own exit code

#[tokio::test]
async fn an_unknown_job_is_an_error_with_exit_code_66_for_every_admin_command() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-typo");
    for args in [
        &["status", path.as_str()][..],
        &["history", &path],
        &["participants", &path],
        &["pause", &path],
        &["resume", &path],
        &["trigger", &path],
        &["resolve", &path, "2026-01-01T00:00:00Z", "--done"],
        &["resolve", &path, "2026-01-01T00:00:00Z", "--rerun"],
    ] {
        let mut all = vec!["cron"];
        all.extend_from_slice(args);
        let (status, out, err, _) = zkr_output(connect, &all).await;
        assert_eq!(status.code(), Some(66), "zkr {all:?}: {out}\n{err}");
        assert!(out.is_empty(), "zkr {all:?} printed {out:?}");
        assert!(
            err.contains(&format!("no job at {path}")),
            "zkr {all:?} should name the missing job: {err}"
        );
    }
    // Nothing was created on the way: the typo stays unknown.
    let zk = client(connect).await;
    assert!(
        zk.check_stat(&path).await.unwrap().is_none(),
        "an admin command created {path}"
    );
}

// ---------------------------------------------------------------------------------------------
// 10. Cron errors name the field and its range; argument errors exit 2

#[tokio::test]
async fn cron_errors_name_the_field_and_its_range_and_exit_2_like_every_argument_error() {
    let (listener, connect) = no_server();
    for (args, says) in [
        (
            &["--cron", "61 * * * *"][..],
            "minute (field 1 of 5) must be within 0-59, not 61",
        ),
        (
            &["--cron", "0 25 * * *"],
            "hour (field 2 of 5) must be within 0-23, not 25",
        ),
        (
            &["--cron", "0 2 * * 9"],
            "day-of-week (field 5 of 5) must be within 0-7, not 9",
        ),
        (
            &["--cron", "0 0 2 * * * 2027"],
            "7 fields: give five fields: minute hour day-of-month month day-of-week, or six with second first",
        ),
        (&["--cron", "0 2 * *"], "4 fields"),
        (&["--every", "0s"], "invalid interval"),
        (
            &["--cron", "0 2 * * *", "--tz", "Mars/Base"],
            "invalid time zone",
        ),
    ] {
        for sub in ["run", "next"] {
            let mut all = vec!["cron", sub];
            if sub == "run" {
                all.push("job");
            }
            all.extend_from_slice(args);
            if sub == "run" {
                all.extend_from_slice(&["--", "true"]);
            }
            let (status, _, err, _) = zkr_output(&connect, &all).await;
            assert_eq!(status.code(), Some(2), "zkr {all:?}: {err}");
            assert!(err.contains(says), "zkr {all:?} should say {says:?}: {err}");
        }
    }
    assert!(
        !connected(&listener),
        "zkr connected before checking its schedule"
    );
    // The help text and the message agree: five or six fields.
    let out = std::process::Command::new(exe())
        .args(["cron", "run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("five fields, or six"), "{help}");
}

// ---------------------------------------------------------------------------------------------
// 6. Operator commands say what they did, and warn when no replica stands

#[tokio::test]
async fn pause_resume_trigger_and_resolve_say_what_they_did_and_warn_when_no_replica_stands() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-ack");
    let mut r = replica(connect, "r", &[], &path, &["--every", "1s"], "true");
    r.wait_for("slot_finished", BOUND, "r finished no slot")
        .await;

    let (out, err) = cron_ok(connect, &["pause", &path]).await;
    assert!(out.starts_with(&format!("paused {path}")), "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(err.is_empty(), "a replica stands, yet: {err}");
    r.wait_for("job_paused", BOUND, "r did not see the pause")
        .await;
    let (out, err) = cron_ok(connect, &["resume", &path]).await;
    assert!(out.starts_with(&format!("resumed {path}")), "{out}");
    assert!(err.is_empty(), "{err}");
    let (out, err) = cron_ok(connect, &["trigger", &path]).await;
    assert_eq!(out.trim(), "1", "trigger's stdout stays N");
    assert!(
        err.contains("triggered") && err.contains("trigger-1"),
        "trigger should say which slot it asked for: {err}"
    );
    stop(&mut r).await;

    // No replica: the request is recorded, and a warning says that nothing acts on it yet.
    let (out, err) = cron_ok(connect, &["trigger", &path]).await;
    assert_eq!(out.trim(), "2");
    assert!(
        err.contains("warning: no replica stands for") && err.contains("trigger-2"),
        "{err}"
    );
    let (out, err) = cron_ok(connect, &["pause", &path]).await;
    assert!(out.starts_with(&format!("paused {path}")), "{out}");
    assert!(err.contains("warning: no replica stands for"), "{err}");
    let (_, err) = cron_ok(connect, &["resume", &path]).await;
    assert!(err.contains("warning: no replica stands for"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// 1. Standby replicas say so; participants by job name; status lists them

#[tokio::test]
async fn standby_replicas_say_so_and_status_and_cron_participants_list_the_line() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-standby");
    let mut a = replica(connect, "a", &[], &path, &["--every", "1h"], "true");
    a.wait_for("leader", BOUND, "a never led").await;
    let mut b = replica(connect, "b", &[], &path, &["--every", "1h"], "true");
    let standby = b
        .wait_for("standby", BOUND, "b did not say that it stands by")
        .await;
    assert_eq!(standby.str("id"), "b", "{}", standby.json);
    assert_eq!(standby.str("leader"), "a", "{}", standby.json);
    assert_eq!(standby.int("position"), 1, "{}", standby.json);
    assert_eq!(standby.int("participants"), 2, "{}", standby.json);
    assert!(
        !a.drain().iter().any(|l| l.event() == "standby"),
        "the leader said it stands by\n{}",
        a.context()
    );

    let expected = serde_json::json!([{"id":"a","leader":true},{"id":"b","leader":false}]);
    let by_path: Value =
        serde_json::from_str(&cron_ok(connect, &["participants", &path]).await.0).unwrap();
    assert_eq!(by_path, expected);
    let status: Value =
        serde_json::from_str(&cron_ok(connect, &["status", &path]).await.0).unwrap();
    assert_eq!(status["participants"], expected, "{status}");
    assert_eq!(status["leader"], "a", "{status}");

    // c stands by behind a and b; a leaves: b leads (its `leader` line), and c says that it
    // now stands by behind b.
    let mut c = replica(connect, "c", &[], &path, &["--every", "1h"], "true");
    let standby = c.wait_for("standby", BOUND, "c did not stand by").await;
    assert_eq!(standby.str("leader"), "a", "{}", standby.json);
    assert_eq!(standby.int("position"), 2, "{}", standby.json);
    stop(&mut a).await;
    b.wait_for("leader", BOUND, "b did not take over").await;
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let standby = c
            .wait_for("standby", left, "c did not say that b leads now")
            .await;
        if standby.json["leader"] == "b" {
            assert_eq!(standby.int("position"), 1, "{}", standby.json);
            break;
        }
    }
    stop(&mut c).await;
    stop(&mut b).await;
}

#[tokio::test]
async fn a_job_name_works_for_cron_participants() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let name = testing::unique_path("cron-pname").replace('/', "-");
    let name = name.trim_start_matches('-').to_owned();
    let mut r = replica(connect, "n", &[], &name, &["--every", "1h"], "true");
    r.wait_for("leader", BOUND, "n never led").await;
    let list: Value =
        serde_json::from_str(&cron_ok(connect, &["participants", &name]).await.0).unwrap();
    assert_eq!(list, serde_json::json!([{"id":"n","leader":true}]));
    stop(&mut r).await;
}

// ---------------------------------------------------------------------------------------------
// 13. Duplicate ids and schedule mismatches are reported at start

#[tokio::test]
async fn a_duplicate_id_and_a_different_schedule_are_warned_at_start() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-dup");
    let mut a = replica(connect, "same", &[], &path, &["--every", "1h"], "true");
    a.wait_for("leader", BOUND, "the first replica never led")
        .await;
    // The leader records its schedule in the job's state when it takes up the job.
    let deadline = Instant::now() + BOUND;
    loop {
        let status: Value =
            serde_json::from_str(&cron_ok(connect, &["status", &path]).await.0).unwrap();
        if status["schedule"].is_string() {
            break;
        }
        assert!(Instant::now() < deadline, "no schedule recorded: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut b = replica(connect, "same", &[], &path, &["--every", "2h"], "true");
    let first = b
        .wait_for("warning", BOUND, "no warning for a different schedule")
        .await;
    assert_eq!(first.str("kind"), "schedule_mismatch", "{}", first.json);
    assert!(first.str("message").contains("differs"), "{}", first.json);
    let dup = b
        .wait_for("warning", BOUND, "no warning for the duplicate id")
        .await;
    assert_eq!(dup.str("kind"), "duplicate_id", "{}", dup.json);
    assert!(
        dup.str("message").contains(&format!("{path}/leader/"))
            && dup.str("message").contains("session 0x"),
        "the warning should name the other's node and session: {}",
        dup.json
    );
    stop(&mut b).await;
    // The same schedule and a distinct id: no warning.
    let mut c = replica(connect, "other", &[], &path, &["--every", "1h"], "true");
    c.wait_for("standby", BOUND, "c did not stand by").await;
    assert!(
        !c.drain()
            .iter()
            .chain(c.seen.iter())
            .any(|l| l.event() == "warning"),
        "{}",
        c.context()
    );
    stop(&mut c).await;
    stop(&mut a).await;
}

// ---------------------------------------------------------------------------------------------
// 5. Prompt exit on SIGTERM when idle; drains are logged

#[tokio::test]
async fn sigterm_ends_an_idle_replica_promptly() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-idle");
    for role in ["leader", "standby"] {
        let mut a = replica(connect, "a", &[], &path, &["--every", "3s"], "true");
        a.wait_for("slot_finished", BOUND, "a ran no slot").await;
        let mut b = replica(connect, "b", &[], &path, &["--every", "3s"], "true");
        b.wait_for("standby", BOUND, "b did not stand by").await;
        let (mut stopped, mut other) = if role == "leader" { (a, b) } else { (b, a) };
        let sent = Instant::now();
        stopped.signal(Signal::SIGTERM);
        let status = stopped.exit(BOUND, "an idle replica after SIGTERM").await;
        let took = sent.elapsed();
        eprintln!("idle {role}: SIGTERM to exit {took:?}");
        assert_eq!(status.code(), Some(0), "{}", stopped.context());
        assert!(
            took < Duration::from_millis(1_000),
            "an idle {role} took {took:?} to exit on SIGTERM\n{}",
            stopped.context()
        );
        stop(&mut other).await;
    }
}

#[tokio::test]
async fn a_drain_says_when_it_starts_and_whether_cmd_finished_or_it_ran_out() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    for (drain, sleep, outcome) in [("20s", "1", "finished"), ("1s", "60", "ran_out")] {
        let path = testing::unique_path("cron-drain-log");
        let script = format!("sleep {sleep}");
        let mut r = replica(
            connect,
            "d",
            &[],
            &path,
            &["--every", "2s", "--drain", drain],
            &script,
        );
        let started = r.wait_for("slot_started", BOUND, "no slot started").await;
        r.wait_for("cmd_started", BOUND, "CMD did not start").await;
        r.signal(Signal::SIGTERM);
        let begun = r
            .wait_for("drain_started", BOUND, "the drain was not reported")
            .await;
        assert_eq!(begun.str("slot"), started.str("slot"), "{}", begun.json);
        assert_eq!(
            begun.int("timeout_ms") as u128,
            humantime::parse_duration(drain).unwrap().as_millis()
        );
        let ended = r
            .wait_for("drain_ended", BOUND, "the drain's end was not reported")
            .await;
        assert_eq!(ended.str("outcome"), outcome, "{}", ended.json);
        r.exit(BOUND, "the drained replica").await;
    }
}

// ---------------------------------------------------------------------------------------------
// 11. The command is checked at start; the next slots are previewed

#[tokio::test]
async fn a_command_that_cannot_start_is_refused_at_start_with_127_or_126() {
    let (listener, connect) = no_server();
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("not-executable.sh");
    std::fs::write(&plain, "#!/bin/sh\ntrue\n").unwrap();
    let missing = dir.path().join("missing.sh");
    let plain_s = plain.display().to_string();
    let missing_s = missing.display().to_string();
    for (cmd, code, says) in [
        ("zkr-no-such-command-anywhere", 127, "is not found on PATH"),
        (missing_s.as_str(), 127, "does not exist"),
        (plain_s.as_str(), 126, "is not an executable file"),
    ] {
        let args = ["cron", "run", "job", "--every", "1s", "--", cmd];
        let (status, _, err, _) = zkr_output(&connect, &args).await;
        assert_eq!(status.code(), Some(code), "zkr {args:?}: {err}");
        assert!(
            err.contains(says),
            "zkr {args:?} should say {says:?}: {err}"
        );
    }
    assert!(!connected(&listener), "zkr connected before checking CMD");
}

#[tokio::test]
async fn cron_next_previews_the_next_slot_keys_without_zookeeper() {
    let (listener, connect) = no_server();
    let (status, out, err, _) = zkr_output(
        &connect,
        &[
            "cron",
            "next",
            "--cron",
            "0 2 * * *",
            "--tz",
            "Europe/Oslo",
            "--after",
            "2027-03-26T12:00:00Z",
            "--count",
            "3",
        ],
    )
    .await;
    assert!(status.success(), "{err}");
    // 02:00 in Oslo is 01:00Z in winter; on 28 March 2027 02:00 does not exist (the clocks go
    // from 02:00 to 03:00); from the 29th it is 00:00Z.
    let keys: Vec<&str> = out.lines().collect();
    assert_eq!(keys.len(), 3, "{out}");
    assert_eq!(keys[0], "2027-03-27T01:00:00Z", "{out}");
    assert_eq!(keys[2], "2027-03-29T00:00:00Z", "{out}");
    let (status, out, err, _) = zkr_output(
        &connect,
        &[
            "cron",
            "next",
            "--every",
            "1h",
            "--after",
            "2027-01-01T00:30:00Z",
            "--count",
            "2",
            "--json",
        ],
    )
    .await;
    assert!(status.success(), "{err}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["slot"], "2027-01-01T01:00:00Z", "{out}");
    assert_eq!(lines[1]["slot"], "2027-01-01T02:00:00Z", "{out}");
    assert!(lines[1]["nominal_ms"].is_i64(), "{out}");
    // Default: 5 slots after now.
    let (status, out, _, _) = zkr_output(&connect, &["cron", "next", "--every", "1m"]).await;
    assert!(status.success());
    assert_eq!(out.lines().count(), 5, "{out}");
    assert!(!connected(&listener), "cron next connected to ZooKeeper");
}

// ---------------------------------------------------------------------------------------------
// 12. Connect timeouts; cron run waits for ZooKeeper at start

#[tokio::test]
async fn one_shot_commands_give_up_after_the_connect_timeout_with_exit_code_69() {
    let (_listener, connect) = no_server();
    for args in [
        &["--connect-timeout", "1s", "cron", "status", "job"][..],
        &["--connect-timeout", "1s", "participants", "jobs"],
    ] {
        let (status, _, err, took) = zkr_output(&connect, args).await;
        eprintln!("zkr {args:?}: exit after {took:?}");
        assert_eq!(status.code(), Some(69), "zkr {args:?}: {err}");
        assert!(
            err.contains("cannot connect to ZooKeeper") && err.contains("--connect-timeout"),
            "{err}"
        );
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(5),
            "zkr {args:?} took {took:?} with --connect-timeout 1s"
        );
    }
    let (status, _, err, _) =
        zkr_output(&connect, &["--connect-timeout", "0s", "leader", "x"]).await;
    assert_eq!(status.code(), Some(2), "{err}");
}

#[tokio::test]
async fn cron_run_waits_for_zookeeper_at_start_with_a_backoff_and_then_runs() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let proxy = proxy_to(server).await;
    proxy.cut();
    let path = testing::unique_path("cron-wait-zk");
    let mut r = replica(
        &proxy.connect_string(),
        "w",
        &["--connect-timeout", "500ms"],
        &path,
        &["--every", "1s"],
        "true",
    );
    let first = r
        .wait_for("connect_failed", BOUND, "no failed attempt was reported")
        .await;
    assert_eq!(first.int("attempt"), 1, "{}", first.json);
    assert_eq!(first.int("retry_in_ms"), 1_000, "{}", first.json);
    let second = r
        .wait_for("connect_failed", BOUND, "no second attempt was reported")
        .await;
    assert_eq!(second.int("attempt"), 2, "{}", second.json);
    assert_eq!(second.int("retry_in_ms"), 2_000, "{}", second.json);
    proxy.heal();
    let done = r
        .wait_for(
            "slot_finished",
            BOUND,
            "no slot ran once ZooKeeper was back",
        )
        .await;
    assert_eq!(done.str("outcome"), "succeeded", "{}", done.json);
    stop(&mut r).await;

    // SIGTERM while it waits: exit 0 at once.
    proxy.cut();
    let mut w = replica(
        &proxy.connect_string(),
        "w2",
        &["--connect-timeout", "500ms"],
        &path,
        &["--every", "1s"],
        "true",
    );
    w.wait_for("connect_failed", BOUND, "no failed attempt")
        .await;
    let sent = Instant::now();
    w.signal(Signal::SIGTERM);
    let status = w.exit(BOUND, "a waiting replica after SIGTERM").await;
    assert_eq!(status.code(), Some(0), "{}", w.context());
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "{:?}",
        sent.elapsed()
    );
}

// ---------------------------------------------------------------------------------------------
// 14. The version names the commit

#[tokio::test]
async fn version_names_the_commit_it_was_built_from() {
    let out = std::process::Command::new(exe())
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        version.starts_with(&format!("zkr {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    let head = std::process::Command::new("git")
        .args(["describe", "--always", "--abbrev=12"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    match head {
        Ok(h) if h.status.success() => {
            let head = String::from_utf8_lossy(&h.stdout).trim().to_owned();
            assert!(
                version.contains(&format!("(commit {head})")),
                "{version} is not HEAD's {head}"
            );
        }
        // Not a git checkout: the fallback.
        _ => assert!(version.ends_with("(commit unknown)"), "{version}"),
    }
}

// ---------------------------------------------------------------------------------------------
// 9. --events FILE keeps zkr's event lines apart from CMD's output

#[tokio::test]
async fn events_file_keeps_cmd_stderr_out_of_zkrs_event_lines() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-events");
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let events_s = events.display().to_string();
    // CMD writes to stderr in pieces, without a newline between them, around zkr's lines.
    let script =
        "printf 'job-err-1 ' >&2; sleep 0.05; printf 'job-err-2\\n' >&2; echo \"job-out $ZK_SLOT\"";
    let mut c = zkr(connect);
    c.args([
        "--session-timeout",
        STEADY,
        "--events",
        &events_s,
        "cron",
        "run",
        &path,
        "--id",
        "e",
        "--every",
        "1s",
        "--",
        "sh",
        "-c",
        script,
    ]);
    let mut r = Zkr::spawn("e", c, common::zkr::EventsOn::Stderr);
    let lines = wait_events(&events, 3, "slot_finished").await;
    stop(&mut r).await;
    assert!(lines.iter().all(|l| l.get("event").is_some()), "{lines:?}");
    // zkr's stderr is CMD's alone: no event line there, and CMD's text is whole.
    let other = r.other.lock().unwrap().clone();
    assert!(r.seen.is_empty(), "event lines on stderr: {}", r.context());
    assert!(
        other.iter().any(|l| l == "job-err-1 job-err-2"),
        "CMD's stderr: {other:?}"
    );
    assert!(
        other.iter().any(|l| l.starts_with("job-out ")),
        "CMD's stdout: {other:?}"
    );
    assert!(other.iter().all(|l| !l.contains("\"event\"")), "{other:?}");
}

/// The lines of the events file, each of which must be a JSON object, once it holds `n` lines
/// of `event`.
async fn wait_events(file: &Path, n: usize, event: &str) -> Vec<Value> {
    let deadline = Instant::now() + BOUND;
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let complete = text.rsplit_once('\n').map_or("", |(whole, _)| whole);
        let lines: Vec<Value> = complete
            .lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| {
                    panic!("a line of the events file is not JSON ({e}): {l:?}")
                })
            })
            .collect();
        if lines.iter().filter(|l| l["event"] == event).count() >= n {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{n} {event} lines not in the events file after {BOUND:?}: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn sigterm_ends_an_idle_replica_promptly_under_the_default_options() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-idle-defaults");
    // No --server-tick-time, the default session timeout: as an operator starts it.
    let mut c = tokio::process::Command::new(exe());
    c.args([
        "--connect",
        connect,
        "cron",
        "run",
        &path,
        "--id",
        "i",
        "--every",
        "3s",
        "--",
        "true",
    ])
    .env_remove("ZK_CONNECT")
    .stdin(std::process::Stdio::null())
    .kill_on_drop(true);
    let mut z = Zkr::spawn("i", c, common::zkr::EventsOn::Stderr);
    z.wait_for("slot_finished", BOUND, "i ran no slot").await;
    let sent = Instant::now();
    z.signal(Signal::SIGTERM);
    let status = z.exit(BOUND, "an idle replica after SIGTERM").await;
    let took = sent.elapsed();
    eprintln!("idle leader, default options: SIGTERM to exit {took:?}");
    assert_eq!(status.code(), Some(0), "{}", z.context());
    assert!(
        took < Duration::from_millis(1_000),
        "an idle replica took {took:?} to exit on SIGTERM\n{}",
        z.context()
    );
}
