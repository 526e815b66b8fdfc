//! `zkr cron`, the scheduled job on the command line, against real ZooKeeper: replicas as zkr
//! processes, their JSON event lines, the slot history they record, and the file their commands
//! append to. Each command appends `SLOT TOKEN ATTEMPT start` when it starts and `... end` as
//! its last act, so the file tells which runs finished and whether two ever ran at once.
//!
//! Every zkr is a child process of this test (`kill_on_drop`), every command group it reports
//! is `SIGKILL`ed when the test ends ([`Groups`]), and every wait is bounded with a message that
//! says what did not happen. Tests that kill or freeze a replica run one at a time ([`FAULTS`]).

use zookeeper_recipes_rigs::fixtures as common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::FAULTS;
use common::zkr::{
    EventsOn, Groups, Line, Zkr, assert_usage_error, group_gone, libfaketime, skew_wall_clock,
    stubborn_handover, stubborn_script, zkr,
};
use common::{BOUND, client, ms, own_server, proxy_to, shared_server, zookeeper};
use nix::sys::signal::{Signal, killpg};
use serde_json::Value;
use zookeeper_recipes::job::Schedule;
use zookeeper_recipes_testing as testing;

/// The session timeout of the replicas that are killed or frozen: short, so that the suite
/// stays fast (a successor waits that long for the killed one's session to expire).
const SESSION: &str = "3s";
const SESSION_TIMEOUT: Duration = Duration::from_secs(3);
/// The session timeout of the replicas that must keep their terms: on a small, busy machine a
/// stall of a second or two can cost a 2-3 s session, which would be a failover the test did
/// not ask for.
const STEADY: &str = "6s";

// ---------------------------------------------------------------------------------------------
// Driving zkr

/// `zkr ARGS...` to completion: exit status, stdout, stderr.
async fn zkr_output(connect: &str, args: &[&str]) -> (ExitStatus, String, String) {
    zkr_output_with(connect, None, args).await
}

/// `zkr [ENV] ARGS...` to completion: exit status, stdout, stderr.
pub(crate) async fn zkr_output_with(
    connect: &str,
    env: Option<(&str, &str)>,
    args: &[&str],
) -> (ExitStatus, String, String) {
    let mut c = zkr(connect);
    if let Some((key, value)) = env {
        c.env(key, value);
    }
    c.args(args);
    let out = tokio::time::timeout(BOUND, c.output())
        .await
        .unwrap_or_else(|_| panic!("zkr {args:?} did not finish within {BOUND:?}"))
        .expect("zkr ran");
    (
        out.status,
        String::from_utf8(out.stdout).expect("zkr prints UTF-8"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `zkr cron ARGS...`, which must succeed; its stdout.
async fn cron_ok(connect: &str, args: &[&str]) -> String {
    let mut all = vec!["cron"];
    all.extend_from_slice(args);
    let (status, out, err) = zkr_output(connect, &all).await;
    assert!(status.success(), "zkr {all:?} failed: {status}\n{err}");
    out
}

/// `zkr cron history PATH` as JSON records, newest first.
async fn history(connect: &str, path: &str) -> Vec<Value> {
    let out = cron_ok(connect, &["history", path]).await;
    let Value::Array(records) = serde_json::from_str(&out).expect("history prints JSON") else {
        panic!("history is not a JSON array: {out}");
    };
    records
}

/// The history record of `slot`.
fn record<'a>(history: &'a [Value], slot: &str) -> &'a Value {
    history
        .iter()
        .find(|r| r["slot"] == slot)
        .unwrap_or_else(|| panic!("no record of {slot} in {history:#?}"))
}

/// Prints the per-slot history (slot, attempt, token, runner, outcome), oldest first.
fn print_history(title: &str, history: &[Value]) {
    eprintln!("{title}: slot, attempt, token, runner, outcome");
    for r in history.iter().rev() {
        eprintln!(
            "  {}  attempt {}  token {}  runner {}  {}{}",
            r["slot"].as_str().unwrap_or("?"),
            r["attempt"],
            r["token"],
            r["runner"].as_str().unwrap_or("-"),
            r["state"].as_str().unwrap_or("?"),
            r["reason"]
                .as_str()
                .map(|why| format!(" ({why})"))
                .unwrap_or_default(),
        );
    }
}

/// A replica: `zkr --session-timeout T cron run PATH --id ID ARGS... -- sh -c SCRIPT`, events
/// on stderr.
fn replica(connect: &str, id: &str, session: &str, path: &str, args: &[&str], script: &str) -> Zkr {
    let mut all = vec![
        "--session-timeout",
        session,
        "cron",
        "run",
        path,
        "--id",
        id,
    ];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "sh", "-c", script]);
    Zkr::supervisor(connect, id, &all)
}

/// A command that appends its start and, after `secs` seconds, its end to `file`.
fn appending(file: &Path, secs: &str) -> String {
    let f = file.display();
    format!(
        "echo \"$ZK_SLOT $ZK_FENCING_TOKEN $ZK_ATTEMPT start\" >> {f}; sleep {secs}; \
         echo \"$ZK_SLOT $ZK_FENCING_TOKEN $ZK_ATTEMPT end\" >> {f}"
    )
}

/// One line of the commands' file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    slot: String,
    token: i64,
    attempt: u32,
    end: bool,
}

fn runs(file: &Path) -> Vec<Run> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!(f.len(), 4, "a torn line in the commands' file: {line:?}");
            Run {
                slot: f[0].to_owned(),
                token: f[1].parse().expect("a token"),
                attempt: f[2].parse().expect("an attempt"),
                end: f[3] == "end",
            }
        })
        .collect()
}

/// How many runs of each slot finished (wrote their end line).
fn ends_per_slot(runs: &[Run]) -> BTreeMap<String, usize> {
    let mut ends = BTreeMap::new();
    for r in runs.iter().filter(|r| r.end) {
        *ends.entry(r.slot.clone()).or_insert(0) += 1;
    }
    ends
}

/// Waits until the job's election has `n` contenders.
async fn wait_contenders(zk: &zookeeper_client::Client, job: &str, n: usize, what: &str) {
    let election = format!("{job}/leader");
    let deadline = Instant::now() + BOUND;
    loop {
        let now = match zk.list_children(&election).await {
            Ok(children) => children,
            Err(zookeeper_client::Error::NoNode) => Vec::new(),
            Err(e) => panic!("listing {election}: {e}"),
        };
        if now.len() == n {
            return;
        }
        if Instant::now() >= deadline {
            panic!("{what}: {election} has {now:?}, not {n} contenders, after {BOUND:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The next `event` line of `z` whose `slot` is `slot`.
async fn slot_event(z: &mut Zkr, event: &str, slot: &str, within: Duration, what: &str) -> Line {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let line = z.wait_for(event, left, what).await;
        if line.json["slot"] == slot {
            return line;
        }
    }
}

/// A leader's next slot that it starts from here on: its `slot_started` and `cmd_started`.
async fn next_slot(z: &mut Zkr, what: &str) -> (Line, Line) {
    let started = z.wait_for("slot_started", BOUND, what).await;
    let cmd = z.wait_for("cmd_started", BOUND, what).await;
    (started, cmd)
}

/// SIGTERM, then the exit code, which must be 0 or 143 (a command was running).
async fn stop(z: &mut Zkr) {
    z.signal(Signal::SIGTERM);
    let code = z.exit(BOUND, "a replica after SIGTERM").await.code();
    assert!(
        matches!(code, Some(0 | 143)),
        "[{}] exit code {code:?} after SIGTERM\n{}",
        z.name,
        z.context()
    );
}

// ---------------------------------------------------------------------------------------------
// Tests

#[tokio::test]
async fn three_replicas_run_every_slot_once_and_never_two_at_once() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-three");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runs");
    let script = appending(&file, "0.2");
    let args = ["--every", "1s", "--catch-up", "all"];
    let mut replicas: Vec<Zkr> = ["r1", "r2", "r3"]
        .iter()
        .map(|id| replica(connect, id, STEADY, &path, &args, &script))
        .collect();

    // About eight slots, run by whichever replica leads (on a busy machine a stall may make
    // that more than one: the guarantee holds across failovers), then everybody stops.
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut succeeded = 0;
    while succeeded < 8 {
        for z in &mut replicas {
            for line in z.drain() {
                if line.event() == "slot_finished" {
                    assert_eq!(
                        line.str("outcome"),
                        "succeeded",
                        "[{}] {}",
                        z.name,
                        line.json
                    );
                    assert_eq!(line.int("exit_code"), 0, "{}", line.json);
                    succeeded += 1;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "only {succeeded} slots succeeded within 40 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for z in &replicas {
        z.signal(Signal::SIGTERM);
    }
    let mut lines = Vec::new();
    for z in &mut replicas {
        let code = z.exit(BOUND, "a replica after SIGTERM").await.code();
        assert!(
            matches!(code, Some(0 | 143)),
            "[{}] exit code {code:?}",
            z.name
        );
        lines.extend(z.all_lines(BOUND).await);
    }
    let leaders: Vec<&str> = lines
        .iter()
        .filter(|l| l.event() == "leader")
        .map(|l| l.str("id"))
        .collect();

    let records = history(connect, &path).await;
    print_history("three replicas", &records);
    let mut oldest_first: Vec<&Value> = records.iter().rev().collect();
    // The last slot may have been cut off by the final SIGTERM, and nobody was left to run it.
    while oldest_first
        .last()
        .is_some_and(|r| r["state"] != "succeeded")
    {
        oldest_first.pop();
    }
    assert!(oldest_first.len() >= 8, "too few slots: {records:#?}");
    let ends = ends_per_slot(&runs(&file));
    for pair in oldest_first.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        assert_eq!(
            b["nominal_ms"].as_i64().unwrap() - a["nominal_ms"].as_i64().unwrap(),
            1000,
            "a slot is missing between {} and {}",
            a["slot"],
            b["slot"]
        );
        assert!(
            a["ended_ms"].as_i64().unwrap() <= b["started_ms"].as_i64().unwrap(),
            "{} ended after {} started",
            a["slot"],
            b["slot"]
        );
    }
    for r in &oldest_first {
        assert_eq!(r["state"], "succeeded", "{r}");
        assert_eq!(r["exit_code"], 0, "{r}");
        let slot = r["slot"].as_str().unwrap();
        assert_eq!(
            ends.get(slot),
            Some(&1),
            "{slot} finished {:?} times",
            ends.get(slot)
        );
        // The recorded run is the one announced with the highest token; the only other starts
        // of the slot are earlier attempts (a term lost mid-slot).
        let starts: Vec<&Line> = lines
            .iter()
            .filter(|l| l.event() == "slot_started" && l.json["slot"] == slot)
            .collect();
        let last = starts
            .iter()
            .max_by_key(|l| l.int("token"))
            .unwrap_or_else(|| panic!("no replica printed slot_started for {slot}"));
        assert_eq!(Some(last.int("token")), r["token"].as_i64(), "{r}");
        assert_eq!(Some(last.int("attempt")), r["attempt"].as_i64(), "{r}");
        assert_eq!(
            starts.len() as i64,
            last.int("attempt"),
            "{slot}: {starts:?}"
        );
    }
    // No two runs at once: in the file, every start is followed by its own end.
    let all = runs(&file);
    for (i, run) in all.iter().enumerate() {
        if !run.end
            && let Some(next) = all.get(i + 1)
        {
            assert!(
                next.end && next.slot == run.slot && next.token == run.token,
                "{run:?} overlapped {next:?}"
            );
        }
    }
    eprintln!(
        "three replicas: {} slots from {} to {} each succeeded once, no overlap; terms of \
         {leaders:?}",
        oldest_first.len(),
        oldest_first[0]["slot"],
        oldest_first[oldest_first.len() - 1]["slot"]
    );
}

#[tokio::test]
async fn leader_killed_mid_slot_is_rerun_once_by_the_successor_with_attempt_2() {
    if !zookeeper() {
        return;
    }
    let _one_at_a_time = FAULTS.lock().await;
    let server = shared_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;
    let path = testing::unique_path("cron-killed");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runs");
    let script = appending(&file, "3");
    let args = ["--every", "1s"];
    let mut groups = Groups::default();

    let mut a = replica(connect, "a", SESSION, &path, &args, &script);
    a.wait_for("leader", BOUND, "a never led").await;
    let mut b = replica(connect, "b", STEADY, &path, &args, &script);
    wait_contenders(&zk, &path, 2, "b did not queue").await;

    // A slot that starts from here, killed a second into its three.
    let (started, cmd) = next_slot(&mut a, "a started no slot").await;
    let pgid = groups.add(&cmd);
    let slot = started.str("slot").to_owned();
    let old_token = started.int("token");
    assert_eq!(started.int("attempt"), 1);
    tokio::time::sleep(Duration::from_secs(1)).await;
    a.signal(Signal::SIGKILL);
    let killed = Instant::now();
    let _ = killpg(pgid, Signal::SIGKILL);
    a.exit(BOUND, "a after SIGKILL").await;

    let rerun = slot_event(
        &mut b,
        "slot_started",
        &slot,
        BOUND,
        "b did not take up the killed leader's slot",
    )
    .await;
    let took = rerun.at - killed;
    assert_eq!(rerun.int("attempt"), 2, "{}", rerun.json);
    assert!(rerun.int("token") > old_token, "{}", rerun.json);
    assert_eq!(rerun.json["recovering"], true, "{}", rerun.json);
    let done = slot_event(&mut b, "slot_finished", &slot, BOUND, "b did not finish it").await;
    assert_eq!(done.str("outcome"), "succeeded", "{}", done.json);
    eprintln!(
        "leader killed (SIGKILL) mid-slot {slot}: attempt 1 by a (token {old_token}) cut off; \
         b's slot_started (attempt 2, token {}) {:.0} ms after the kill, session timeout {SESSION}",
        rerun.int("token"),
        ms(took)
    );
    stop(&mut b).await;

    let records = history(connect, &path).await;
    print_history("leader killed mid-slot", &records);
    let r = record(&records, &slot);
    assert_eq!(r["state"], "succeeded", "{r}");
    assert_eq!(r["attempt"], 2, "{r}");
    assert_eq!(r["runner"], "b", "{r}");
    assert_eq!(r["token"].as_i64(), Some(rerun.int("token")), "{r}");
    let all = runs(&file);
    assert!(
        !all.iter().any(|run| run.token == old_token && run.end),
        "the killed leader's command finished: {all:?}"
    );
    for (s, n) in ends_per_slot(&all) {
        assert_eq!(n, 1, "{s} finished {n} times: {all:?}");
    }
    assert_eq!(ends_per_slot(&all).get(&slot), Some(&1));
    assert!(
        SESSION_TIMEOUT <= took + Duration::from_secs(1),
        "the successor took over before the killed session could have expired: {took:?}"
    );
}

#[tokio::test]
async fn leader_frozen_past_its_session_mid_slot_is_replaced_and_fenced_on_waking() {
    if !zookeeper() {
        return;
    }
    let _one_at_a_time = FAULTS.lock().await;
    let server = shared_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;
    let path = testing::unique_path("cron-frozen");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runs");
    let script = appending(&file, "3");
    let args = ["--every", "1s"];
    let mut groups = Groups::default();

    let mut f1 = replica(connect, "f1", SESSION, &path, &args, &script);
    f1.wait_for("leader", BOUND, "f1 never led").await;
    let mut f2 = replica(connect, "f2", STEADY, &path, &args, &script);
    wait_contenders(&zk, &path, 2, "f2 did not queue").await;

    let (started, cmd) = next_slot(&mut f1, "f1 started no slot").await;
    let pgid = groups.add(&cmd);
    let slot = started.str("slot").to_owned();
    let old_token = started.int("token");
    tokio::time::sleep(Duration::from_secs(1)).await;
    f1.signal(Signal::SIGSTOP);
    killpg(pgid, Signal::SIGSTOP).expect("f1's command group can be stopped");
    let frozen = Instant::now();

    let rerun = slot_event(
        &mut f2,
        "slot_started",
        &slot,
        BOUND,
        "f2 did not take up the frozen leader's slot",
    )
    .await;
    assert_eq!(rerun.int("attempt"), 2, "{}", rerun.json);
    assert!(rerun.int("token") > old_token, "{}", rerun.json);
    // Past the session and past the command's own three seconds: woken, it would write at once.
    tokio::time::sleep_until((frozen + SESSION_TIMEOUT + Duration::from_secs(3)).into()).await;
    // What f1 wrote before the freeze (a slot skipped because this one still ran) is not news.
    f1.drain();
    f1.signal(Signal::SIGCONT);
    let woke = Instant::now();
    let first = f1
        .next(Duration::from_secs(5), "f1 printed nothing after waking")
        .await;
    assert_eq!(
        first.event(),
        "cmd_signalled",
        "f1's first line after waking: {}\n{}",
        first.json,
        f1.context()
    );
    let _ = killpg(pgid, Signal::SIGCONT);
    let abandoned = slot_event(
        &mut f1,
        "slot_abandoned",
        &slot,
        BOUND,
        "f1 did not report its late write refused",
    )
    .await;
    assert_eq!(abandoned.int("token"), old_token, "{}", abandoned.json);
    assert!(
        f1.seen.iter().any(|l| l.event() == "not_leader"),
        "f1 printed no not_leader\n{}",
        f1.context()
    );
    let done = slot_event(
        &mut f2,
        "slot_finished",
        &slot,
        BOUND,
        "f2 did not finish it",
    )
    .await;
    assert_eq!(done.str("outcome"), "succeeded", "{}", done.json);
    let deadline = Instant::now() + BOUND;
    while !group_gone(pgid) {
        assert!(
            Instant::now() < deadline,
            "f1's command group outlived the term"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!(
        "leader frozen mid-slot {slot}: attempt 1 by f1 (token {old_token}); f2's slot_started \
         (attempt 2, token {}) {:.0} ms after the freeze; f1 woke after {:.0} ms frozen, \
         signalled its command {:.1} ms after SIGCONT ({}), its end of the slot refused: {}",
        rerun.int("token"),
        ms(rerun.at - frozen),
        ms(woke - frozen),
        ms(first.at - woke),
        first.str("reason"),
        abandoned.str("reason")
    );
    stop(&mut f1).await;
    stop(&mut f2).await;

    let records = history(connect, &path).await;
    print_history("leader frozen mid-slot", &records);
    let r = record(&records, &slot);
    assert_eq!(r["state"], "succeeded", "{r}");
    assert_eq!(r["attempt"], 2, "{r}");
    assert_eq!(r["runner"], "f2", "{r}");
    let all = runs(&file);
    let stale: Vec<&Run> = all.iter().filter(|r| r.token == old_token).collect();
    assert!(
        stale.iter().all(|r| !r.end),
        "the frozen leader's command wrote after the freeze: {stale:?}"
    );
    for (s, n) in ends_per_slot(&all) {
        assert_eq!(n, 1, "{s} finished {n} times: {all:?}");
    }
}

#[tokio::test]
async fn pause_resume_and_trigger_steer_the_leader() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-admin");
    // Scheduled slots succeed; triggered ones fail with exit code 3.
    let script = "case \"$ZK_SLOT\" in trigger-*) exit 3;; esac";
    let mut r = replica(connect, "r", STEADY, &path, &["--every", "1s"], script);
    let first = r
        .wait_for("slot_finished", BOUND, "r finished no slot")
        .await;
    assert_eq!(first.str("outcome"), "succeeded", "{}", first.json);

    cron_ok(connect, &["pause", &path]).await;
    r.wait_for("job_paused", BOUND, "r did not report the pause")
        .await;
    let skipped = r
        .wait_for("slot_skipped", BOUND, "no slot was skipped while paused")
        .await;
    assert_eq!(skipped.str("reason"), "paused", "{}", skipped.json);
    let status: Value =
        serde_json::from_str(&cron_ok(connect, &["status", &path]).await).expect("status JSON");
    assert_eq!(status["paused"], true, "{status}");
    assert_eq!(status["leader"], "r", "{status}");
    assert_eq!(status["path"], path.as_str(), "{status}");
    let records = history(connect, &path).await;
    let paused = record(&records, skipped.str("slot"));
    assert_eq!(paused["state"], "skipped", "{paused}");
    assert_eq!(paused["reason"], "paused", "{paused}");

    cron_ok(connect, &["resume", &path]).await;
    r.wait_for("job_resumed", BOUND, "r did not report the resume")
        .await;
    let resumed = r
        .wait_for("slot_started", BOUND, "no slot ran after resume")
        .await;
    assert!(!resumed.str("slot").starts_with("trigger-"));

    let n = cron_ok(connect, &["trigger", &path]).await;
    assert_eq!(n.trim(), "1");
    let triggered = slot_event(
        &mut r,
        "slot_started",
        "trigger-1",
        BOUND,
        "the trigger did not run",
    )
    .await;
    assert_eq!(triggered.int("attempt"), 1);
    let failed = slot_event(
        &mut r,
        "slot_finished",
        "trigger-1",
        BOUND,
        "trigger-1 did not end",
    )
    .await;
    assert_eq!(failed.str("outcome"), "failed", "{}", failed.json);
    assert_eq!(failed.int("exit_code"), 3, "{}", failed.json);
    stop(&mut r).await;

    let records = history(connect, &path).await;
    let t = record(&records, "trigger-1");
    assert_eq!(t["state"], "failed", "{t}");
    assert_eq!(t["exit_code"], 3, "{t}");
    assert_eq!(t["runner"], "r", "{t}");
    for field in [
        "slot",
        "state",
        "token",
        "attempt",
        "runner",
        "started_ms",
        "ended_ms",
        "exit_code",
    ] {
        assert!(t.get(field).is_some(), "{field} missing in {t}");
    }
    let limited: Value =
        serde_json::from_str(&cron_ok(connect, &["history", &path, "--limit", "2"]).await).unwrap();
    assert_eq!(limited.as_array().map(Vec::len), Some(2), "{limited}");
}

/// Under `--on-crash park`, slots cut off by a kill wait for an operator: `resolve --rerun` has
/// the leader run one again (attempt 2), `resolve --done` records the other succeeded, ended at
/// the ensemble's time even from an operator's host whose wall clock is 30 days ahead (before:
/// the operator's clock). Faults: `kill -9` of the runner mid-slot; the operator's wall clock
/// skewed with libfaketime.
#[tokio::test]
async fn parked_slots_wait_for_resolve_rerun_or_done() {
    if !zookeeper() {
        return;
    }
    let _one_at_a_time = FAULTS.lock().await;
    let server = shared_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;
    let path = testing::unique_path("cron-park");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runs");
    let script = appending(&file, "3");
    let args = ["--every", "1s", "--on-crash", "park"];
    let mut groups = Groups::default();

    let mut a = replica(connect, "a", SESSION, &path, &args, &script);
    a.wait_for("leader", BOUND, "a never led").await;
    // b leads for a while (the rerun) before it is killed: a steady session, or a stall of the
    // busy machine could cut off the rerun itself.
    let mut b = replica(connect, "b", STEADY, &path, &args, &script);
    wait_contenders(&zk, &path, 2, "b did not queue").await;
    let mut c = replica(connect, "c", STEADY, &path, &args, &script);
    wait_contenders(&zk, &path, 3, "c did not queue").await;

    // a is killed mid-slot: b parks the slot; `resolve --rerun` has b run it again.
    let (started, cmd) = next_slot(&mut a, "a started no slot").await;
    let pgid = groups.add(&cmd);
    let s1 = started.str("slot").to_owned();
    tokio::time::sleep(Duration::from_secs(1)).await;
    a.signal(Signal::SIGKILL);
    let _ = killpg(pgid, Signal::SIGKILL);
    a.exit(BOUND, "a after SIGKILL").await;
    let parked = slot_event(
        &mut b,
        "slot_finished",
        &s1,
        BOUND,
        "b did not park a's slot",
    )
    .await;
    assert_eq!(parked.str("outcome"), "parked", "{}", parked.json);
    assert_eq!(
        record(&history(connect, &path).await, &s1)["state"],
        "parked"
    );
    let status: Value =
        serde_json::from_str(&cron_ok(connect, &["status", &path]).await).expect("status JSON");
    assert!(
        status["open"]
            .as_array()
            .is_some_and(|open| open.iter().any(|r| r["slot"] == s1.as_str())),
        "{status}"
    );
    cron_ok(connect, &["resolve", &path, &s1, "--rerun"]).await;
    let rerun = slot_event(&mut b, "slot_started", &s1, BOUND, "b did not rerun it").await;
    assert_eq!(rerun.int("attempt"), 2, "{}", rerun.json);
    assert_eq!(rerun.json["recovering"], true, "{}", rerun.json);
    let done = slot_event(&mut b, "slot_finished", &s1, BOUND, "the rerun did not end").await;
    assert_eq!(done.str("outcome"), "succeeded", "{}", done.json);

    // b is killed in another slot: c parks it; `resolve --done` records it succeeded.
    let (started, cmd) = loop {
        let (started, cmd) = next_slot(&mut b, "b started no further slot").await;
        if started.str("slot") != s1 {
            break (started, cmd);
        }
    };
    let pgid = groups.add(&cmd);
    let s2 = started.str("slot").to_owned();
    tokio::time::sleep(Duration::from_secs(1)).await;
    b.signal(Signal::SIGKILL);
    let _ = killpg(pgid, Signal::SIGKILL);
    b.exit(BOUND, "b after SIGKILL").await;
    let parked = slot_event(
        &mut c,
        "slot_finished",
        &s2,
        BOUND,
        "c did not park b's slot",
    )
    .await;
    assert_eq!(parked.str("outcome"), "parked", "{}", parked.json);
    // The operator's host may have its wall clock 30 days ahead (libfaketime, where it is
    // installed): the resolved slot's end is the ensemble's time all the same.
    let mut resolve = zkr(connect);
    if let Some(lib) = libfaketime() {
        skew_wall_clock(&mut resolve, &lib, "+30d");
    }
    resolve.args(["cron", "resolve", &path, &s2, "--done"]);
    let out = tokio::time::timeout(BOUND, resolve.output())
        .await
        .expect("zkr cron resolve --done finished in time")
        .expect("zkr ran");
    assert!(
        out.status.success(),
        "resolve --done: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records = history(connect, &path).await;
    let r2 = record(&records, &s2);
    assert_eq!(r2["state"], "succeeded", "{r2}");
    assert_eq!(r2["reason"], "resolved", "{r2}");
    assert_eq!(r2["attempt"], 1, "{r2}");
    let honest_now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis(),
    )
    .expect("ms fit");
    let ended = r2["ended_ms"].as_i64().expect("a resolved slot has an end");
    assert!(
        (honest_now - ended).abs() < 600_000,
        "the resolved slot's end is {} ms from the ensemble's now: the operator's skewed clock, not the ensemble's: {r2}",
        ended - honest_now
    );
    let r1 = record(&records, &s1);
    assert_eq!(r1["state"], "succeeded", "{r1}");
    assert_eq!(r1["attempt"], 2, "{r1}");
    assert_eq!(r1["runner"], "b", "{r1}");

    // Only a parked slot can be resolved.
    let (status, _, err) = zkr_output(connect, &["cron", "resolve", &path, &s2, "--done"]).await;
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("not parked"), "{err}");
    let (status, _, err) = zkr_output(
        connect,
        &["cron", "resolve", &path, "1999-01-01T00:00:00Z", "--rerun"],
    )
    .await;
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("no record"), "{err}");
    stop(&mut c).await;
    print_history("parked and resolved", &records);
    let ends = ends_per_slot(&runs(&file));
    assert_eq!(ends.get(&s1), Some(&1), "{ends:?}");
    assert_eq!(ends.get(&s2), None, "{ends:?}");
}

#[tokio::test]
async fn bad_schedules_fail_before_connecting_and_bad_arguments_exit_2() {
    // A listener that counts connections: zkr must not open one.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let connect = listener.local_addr().unwrap().to_string();
    for (args, says) in [
        (&["--every", "0s"][..], "invalid interval"),
        (&["--cron", "61 * * * *"], "invalid cron expression"),
        (
            &["--cron", "0 2 * * *", "--tz", "Mars/Base"],
            "invalid time zone",
        ),
    ] {
        let mut all = vec!["cron", "run", "job"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--", "true"]);
        let (status, _, err) = zkr_output(&connect, &all).await;
        // A usage error, as every argument refused before connecting (1 in the first version).
        assert_eq!(status.code(), Some(2), "zkr {all:?}: {err}");
        assert!(err.contains(says), "zkr {all:?} should say {says:?}: {err}");
    }
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "zkr connected before checking its schedule"
    );

    for args in [
        &["cron", "run", "job", "--", "true"][..],
        &[
            "cron",
            "run",
            "job",
            "--every",
            "1s",
            "--cron",
            "* * * * *",
            "--",
            "true",
        ],
        &[
            "cron", "run", "job", "--every", "1s", "--tz", "UTC", "--", "true",
        ],
        &["cron", "run", "job", "--every", "1s"],
        &["cron", "run", "job", "--every", "soon", "--", "true"],
        &[
            "cron",
            "run",
            "job",
            "--every",
            "1s",
            "--max-attempts",
            "0",
            "--",
            "true",
        ],
        &[
            "cron",
            "run",
            "job",
            "--every",
            "1s",
            "--catch-up",
            "some",
            "--",
            "true",
        ],
        &[
            "cron",
            "run",
            "job",
            "--every",
            "1s",
            "--overlap",
            "queue",
            "--",
            "true",
        ],
        &[
            "cron",
            "run",
            "job",
            "--every",
            "1s",
            "--on-crash",
            "ignore",
            "--",
            "true",
        ],
        &["cron", "run", "/a//b", "--every", "1s", "--", "true"],
        &["cron", "resolve", "job", "2026-01-01T00:00:00Z"],
        &[
            "cron",
            "resolve",
            "job",
            "2026-01-01T00:00:00Z",
            "--done",
            "--rerun",
        ],
        &["cron", "history", "job", "--limit", "many"],
        &["cron", "status"],
        // --clock-tolerance is a duration greater than zero, and only for cron run.
        &[
            "cron",
            "run",
            "job",
            "--every",
            "1s",
            "--clock-tolerance",
            "0",
            "--",
            "true",
        ],
        &[
            "cron",
            "run",
            "job",
            "--every",
            "1s",
            "--clock-tolerance",
            "soon",
            "--",
            "true",
        ],
        &["cron", "status", "job", "--clock-tolerance", "1s"],
    ] {
        assert_usage_error(args).await;
    }
}

#[tokio::test]
async fn a_name_is_a_job_under_cron() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let name = testing::unique_path("cron-name").replace('/', "-");
    let name = name.trim_start_matches('-').to_owned();
    let mut r = replica(connect, "n", STEADY, &name, &["--every", "1s"], "true");
    let finished = r
        .wait_for("slot_finished", BOUND, "the named job ran no slot")
        .await;
    assert_eq!(finished.str("outcome"), "succeeded", "{}", finished.json);
    let leader = r
        .seen
        .iter()
        .find(|l| l.event() == "leader")
        .expect("a leader line");
    assert!(
        leader
            .str("path")
            .starts_with(&format!("/cron/{name}/leader/")),
        "{}",
        leader.json
    );
    stop(&mut r).await;
    let records = history(connect, &name).await;
    assert!(!records.is_empty(), "no history under /cron/{name}");
}

/// A term whose lease is not renewed stops a slot's CMD that ignores SIGTERM inside the lease,
/// before the quorum can expire the session and the next replica can start. Replica A
/// (`--session-timeout 2s`, the default grace: half of the 850 ms limit) runs a slot whose
/// command ignores SIGTERM and writes the time every 50 ms; replica B stands on a direct link.
/// A's link is blackholed: SIGKILL comes at the grace or the lease, whichever first, and B's
/// term (in which it takes the cut-off slot up again) must begin only after A's whole group
/// is gone. Both error policies. Faults: a client link blackholed; a command that ignores
/// SIGTERM.
#[tokio::test]
async fn a_slot_cmd_that_ignores_sigterm_is_stopped_inside_the_lease_before_the_next_leader_starts()
{
    if !zookeeper() {
        return;
    }
    let _one_at_a_time = FAULTS.lock().await;
    let server = own_server().await;
    let connect = server.connect_string();
    // The default grace of a 2 s session with the harness's 200 ms tick.
    let grace = Duration::from_millis(425);
    // The default policy (standard), then session-expired.
    for policy in [None, Some("session-expired")] {
        let proxy = proxy_to(&server).await;
        let dir = tempfile::tempdir().unwrap();
        let beats = dir.path().join("a.beats");
        let path = testing::unique_path("cron-stubborn-lease");
        let script = stubborn_script(&beats);
        let mut a_args = vec![
            "--session-timeout",
            "2s",
            "cron",
            "run",
            &path,
            "--id",
            "a",
            "--every",
            "1s",
        ];
        if let Some(policy) = policy {
            a_args.extend(["--error-policy", policy]);
        }
        a_args.extend(["--", "bash", "-c", &script]);
        let b_args = [
            "--session-timeout",
            STEADY,
            "cron",
            "run",
            &path,
            "--id",
            "b",
            "--every",
            "1s",
            "--",
            "true",
        ];
        let mut groups = Groups::default();
        let (mut a, mut b, handover) = stubborn_handover(
            &proxy,
            connect,
            &format!("{path}/leader"),
            &a_args[..],
            &b_args[..],
            &beats,
            &mut groups,
        )
        .await;
        let policy = policy.unwrap_or("default policy");
        handover.check(&format!("zkr cron run, {policy}"), grace, true);
        // A's slot, cut off, is B's to run again.
        let cut = a
            .seen
            .iter()
            .find(|l| l.event() == "slot_started")
            .map(|l| l.str("slot").to_owned())
            .expect("A started a slot before its command");
        let rerun = b
            .seen
            .iter()
            .find(|l| l.event() == "slot_started")
            .expect("B's command started for a slot");
        assert_eq!(
            (rerun.str("slot"), rerun.int("attempt")),
            (cut.as_str(), 2),
            "B's first slot is not A's, run again\n{}",
            b.context()
        );
        proxy.heal();
        stop(&mut b).await;
        stop(&mut a).await;
    }
}

/// One slot record as the ensemble has it: the record, and when the ensemble created it.
struct Recorded {
    slot: String,
    /// The last slot the record stands for (a missed range's `to`), in ms since the epoch.
    latest_nominal_ms: i64,
    state: String,
    attempt: i64,
    runner: String,
    /// The node's `ctime`: the quorum leader's wall clock when it created the record (the
    /// claim of a run, or the record of a slot skipped or missed).
    created_ms: i64,
}

/// The instant of a slot key (`2026-12-03T02:00:00Z`) in ms since the epoch; `None` for a
/// trigger.
fn slot_instant_ms(key: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(key)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// Every slot record of the job under `<job>/slots`, with its `ctime`, oldest slot first.
async fn recorded_slots(zk: &zookeeper_client::Client, job: &str) -> Vec<Recorded> {
    let dir = format!("{job}/slots");
    let keys = match zk.list_children(&dir).await {
        Ok(keys) => keys,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("listing {dir}: {e}"),
    };
    let mut out = Vec::new();
    for key in keys {
        let Ok((data, stat)) = zk.get_data(&format!("{dir}/{key}")).await else {
            continue;
        };
        let Some(nominal) = slot_instant_ms(&key) else {
            continue;
        };
        let record: Value = serde_json::from_slice(&data).expect("a slot record is JSON");
        let latest = record["range"]["to"]
            .as_str()
            .and_then(slot_instant_ms)
            .unwrap_or(nominal);
        out.push(Recorded {
            slot: key,
            latest_nominal_ms: latest,
            state: record["state"].as_str().unwrap_or("?").to_owned(),
            attempt: record["attempt"].as_i64().unwrap_or(0),
            runner: record["runner"].as_str().unwrap_or("-").to_owned(),
            created_ms: stat.ctime,
        });
    }
    out.sort_by(|a, b| a.slot.cmp(&b.slot));
    out
}

/// Waits until `n` slots that came due at or after `from_ms` (by the ensemble's clock) have
/// been run on time, at most `bound`; how many were.
async fn runs_on_time(
    zk: &zookeeper_client::Client,
    job: &str,
    from_ms: i64,
    n: usize,
    bound: Duration,
) -> usize {
    let deadline = Instant::now() + bound;
    loop {
        let on_time = recorded_slots(zk, job)
            .await
            .iter()
            .filter(|r| r.attempt >= 1 && r.created_ms >= r.latest_nominal_ms)
            .filter(|r| r.latest_nominal_ms >= from_ms)
            .count();
        if on_time >= n || Instant::now() >= deadline {
            return on_time;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A replica whose wall clock runs an hour ahead (libfaketime), among two honest ones, with
/// slots every 2 s. Honest h1 leads first; the skewed s and honest h2 queue in that order; h1
/// leaves, so s is next in line; later s leaves too and h2 is left. In each phase two slots
/// that came due in it must run within five periods. By the ensemble's clock (each record's `ctime`, the quorum leader's wall
/// clock when it created the record; the server runs on this host, whose clock the test's
/// own is): no slot is run or recorded before its nominal instant, and in each phase slots
/// kept running on time (the job did not stall). The skewed replica says so with a
/// `clock_skew` line (offset about an hour). Fault: one replica's wall clock an hour ahead.
///
/// This fails while the job decides due slots by the leader's wall clock: s runs the slots of
/// an hour ahead at once, and once it leaves h2 runs nothing (the cursor is an hour ahead).
#[tokio::test]
async fn a_replica_an_hour_ahead_runs_no_slot_early_and_does_not_stall_the_job() {
    if !zookeeper() {
        return;
    }
    let Some(lib) = libfaketime() else {
        return;
    };
    let _one_at_a_time = FAULTS.lock().await;
    let server = shared_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;
    let path = testing::unique_path("cron-skewed");
    let period = Duration::from_secs(2);
    let args = ["--every", "2s"];
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };

    let mut h1 = replica(connect, "h1", STEADY, &path, &args, "true");
    let (first, _) = next_slot(&mut h1, "h1 started no slot").await;
    slot_event(
        &mut h1,
        "slot_finished",
        first.str("slot"),
        BOUND,
        "h1 did not finish its first slot",
    )
    .await;
    let mut c = zkr(connect);
    skew_wall_clock(&mut c, &lib, "+1h");
    c.args([
        "--session-timeout",
        STEADY,
        "cron",
        "run",
        &path,
        "--id",
        "s",
    ])
    .args(args)
    .args(["--", "true"]);
    let mut s = Zkr::spawn("s", c, EventsOn::Stderr);
    wait_contenders(&zk, &path, 2, "s did not queue").await;
    let mut h2 = replica(connect, "h2", STEADY, &path, &args, "true");
    wait_contenders(&zk, &path, 3, "h2 did not queue").await;

    // Phase 1: h1 leaves; s is next in line.
    let s_next = now_ms();
    stop(&mut h1).await;
    // Five periods: two slots, an election, a skewed replica's measurement and its backing off.
    let bound = period * 5;
    let run1 = runs_on_time(&zk, &path, s_next, 2, bound).await;
    // Phase 2: s leaves; h2 is left.
    let h2_alone = now_ms();
    stop(&mut s).await;
    // Every line s wrote, for its clock_skew.
    s.all_lines(BOUND).await;
    let run2 = runs_on_time(&zk, &path, h2_alone, 2, bound).await;
    stop(&mut h2).await;

    let records = recorded_slots(&zk, &path).await;
    eprintln!("a replica an hour ahead: slot, state, attempt, runner, created - nominal (ms)");
    for r in &records {
        eprintln!(
            "  {}  {}  attempt {}  runner {}  {:+} ms",
            r.slot,
            r.state,
            r.attempt,
            r.runner,
            r.created_ms - r.latest_nominal_ms
        );
    }
    let early: Vec<String> = records
        .iter()
        .filter(|r| r.created_ms < r.latest_nominal_ms)
        .map(|r| {
            format!(
                "{} ({}, by {}) {:.1} s early",
                r.slot,
                r.state,
                r.runner,
                (r.latest_nominal_ms - r.created_ms) as f64 / 1000.0
            )
        })
        .collect();
    let skew = s
        .seen
        .iter()
        .find(|l| l.event() == "clock_skew")
        .map(|l| (l.int("offset_ms"), l.int("tolerance_ms")));
    eprintln!(
        "a replica an hour ahead: {} records early by the ensemble's clock {early:?}; slots run \
         on time after h1 left: {run1}, after s left too: {run2} (2 wanted within {bound:?} \
         each); s's clock_skew (offset_ms, tolerance_ms): {skew:?}",
        early.len()
    );
    assert!(
        early.is_empty(),
        "slots run or recorded before they came due by the ensemble's clock: {early:?}"
    );
    assert!(
        run1 >= 2,
        "the job stalled after h1 left: {run1} slots ran on time within {bound:?}"
    );
    assert!(
        run2 >= 2,
        "the job stalled after s left: {run2} slots ran on time within {bound:?}"
    );
    let (offset_ms, _) =
        skew.unwrap_or_else(|| panic!("s reported no clock_skew\n{}", s.context()));
    assert!(
        (offset_ms - 3_600_000).abs() < 60_000,
        "s's clock_skew offset is {offset_ms} ms, not about an hour"
    );
}

/// A replica an hour ahead that `--clock-tolerance 2h` lets lead: it runs the slots on the
/// ensemble's clock, each when it comes due by the ensemble's clock (each record's `ctime`) and
/// within a period of it, with no `clock_skew` line; once it leaves, the honest replica runs the
/// next slots on time (the cursor was never moved into the future). Fault: the leader's wall
/// clock an hour ahead.
#[tokio::test]
async fn a_replica_an_hour_ahead_within_its_clock_tolerance_runs_slots_on_the_ensembles_clock() {
    if !zookeeper() {
        return;
    }
    let Some(lib) = libfaketime() else {
        return;
    };
    let _one_at_a_time = FAULTS.lock().await;
    let server = shared_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;
    let path = testing::unique_path("cron-skewed-trusted");
    let period = Duration::from_secs(2);
    let args = ["--every", "2s"];
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };

    let mut c = zkr(connect);
    skew_wall_clock(&mut c, &lib, "+1h");
    c.args([
        "--session-timeout",
        STEADY,
        "cron",
        "run",
        &path,
        "--id",
        "s",
    ])
    .args(args)
    .args(["--clock-tolerance", "2h", "--", "true"]);
    let mut s = Zkr::spawn("s", c, EventsOn::Stderr);
    let since = now_ms();
    let bound = period * 5;
    let run1 = runs_on_time(&zk, &path, since, 3, bound).await;
    let mut h = replica(connect, "h", STEADY, &path, &args, "true");
    wait_contenders(&zk, &path, 2, "h did not queue").await;
    let h_alone = now_ms();
    stop(&mut s).await;
    let s_lines = s.all_lines(BOUND).await;
    let run2 = runs_on_time(&zk, &path, h_alone, 2, bound).await;
    stop(&mut h).await;

    let records = recorded_slots(&zk, &path).await;
    eprintln!("a trusted replica an hour ahead: slot, state, attempt, runner, created - nominal");
    for r in &records {
        eprintln!(
            "  {}  {}  attempt {}  runner {}  {:+} ms",
            r.slot,
            r.state,
            r.attempt,
            r.runner,
            r.created_ms - r.latest_nominal_ms
        );
    }
    let s_runs: Vec<&Recorded> = records.iter().filter(|r| r.runner == "s").collect();
    let lateness: Vec<i64> = s_runs
        .iter()
        .map(|r| r.created_ms - r.latest_nominal_ms)
        .collect();
    eprintln!(
        "a trusted replica an hour ahead: s ran {} slots, claimed {lateness:?} ms after they came \
         due by the ensemble's clock; on time while s led: {run1}, after s left: {run2} (wanted \
         3 and 2 within {bound:?})",
        s_runs.len()
    );
    for r in &records {
        assert!(
            r.created_ms >= r.latest_nominal_ms,
            "{} ({}, by {}) was recorded {} ms before it came due by the ensemble's clock",
            r.slot,
            r.state,
            r.runner,
            r.latest_nominal_ms - r.created_ms
        );
    }
    assert!(run1 >= 3, "s ran {run1} slots on time within {bound:?}");
    assert!(
        lateness
            .iter()
            .all(|&late| late < period.as_millis() as i64),
        "s claimed slots a period or more late: {lateness:?} ms"
    );
    assert!(
        run2 >= 2,
        "the job stalled after s left: {run2} slots ran on time within {bound:?}"
    );
    assert!(
        !s_lines.iter().any(|l| l.event() == "clock_skew"),
        "s reported a clock_skew within its tolerance\n{}",
        s.context()
    );
}

#[tokio::test]
async fn sigterm_mid_slot_stops_cmd_and_leaves_the_slot_to_the_next_leader() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-sigterm");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runs");
    let script = appending(&file, "3");
    let args = ["--every", "1s"];
    let mut groups = Groups::default();

    let mut a = replica(connect, "a", STEADY, &path, &args, &script);
    let (started, cmd) = next_slot(&mut a, "a started no slot").await;
    let pgid = groups.add(&cmd);
    let slot = started.str("slot").to_owned();
    a.signal(Signal::SIGTERM);
    let signalled = a
        .wait_for("cmd_signalled", BOUND, "a did not stop its command")
        .await;
    assert_eq!(signalled.str("reason"), "shutdown", "{}", signalled.json);
    // CMD was running: zkr exits with its code (SIGTERM: 143).
    assert_eq!(a.exit(BOUND, "a after SIGTERM").await.code(), Some(143));
    assert!(group_gone(pgid), "a's command group outlived a");
    let lines = a.all_lines(BOUND).await;
    assert!(
        lines
            .iter()
            .any(|l| l.event() == "slot_abandoned" && l.json["slot"] == slot.as_str()),
        "a did not leave the slot open\n{}",
        a.context()
    );
    assert!(
        !lines.iter().any(|l| l.event() == "slot_finished"),
        "a recorded the stopped slot's end\n{}",
        a.context()
    );
    assert_eq!(
        record(&history(connect, &path).await, &slot)["state"],
        "running"
    );

    // The next replica takes it up at once (a deleted its node), as a cut-off slot.
    let mut b = replica(connect, "b", STEADY, &path, &args, &script);
    let rerun = slot_event(
        &mut b,
        "slot_started",
        &slot,
        BOUND,
        "b did not take the slot up",
    )
    .await;
    assert_eq!(rerun.int("attempt"), 2, "{}", rerun.json);
    assert!(rerun.int("token") > started.int("token"), "{}", rerun.json);
    let done = slot_event(&mut b, "slot_finished", &slot, BOUND, "b did not finish it").await;
    assert_eq!(done.str("outcome"), "succeeded", "{}", done.json);
    stop(&mut b).await;
}

/// `--drain`: SIGTERM while CMD runs a slot lets CMD finish; its end is recorded (not a retry
/// for the next leader) and no slot starts after it. A drain that runs out stops CMD as
/// without `--drain`, and the slot is left to the next leader.
#[tokio::test]
async fn sigterm_with_drain_lets_cmd_finish_its_slot_and_a_drain_that_runs_out_stops_it() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-drain");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runs");
    let script = appending(&file, "2");
    let mut groups = Groups::default();

    let mut a = replica(
        connect,
        "a",
        STEADY,
        &path,
        &["--every", "1s", "--drain", "10s"],
        &script,
    );
    a.wait_for("leader", BOUND, "a never led").await;
    let mut b = replica(
        connect,
        "b",
        STEADY,
        &path,
        &["--every", "1s", "--drain", "500ms"],
        &script,
    );
    let zk = client(connect).await;
    wait_contenders(&zk, &path, 2, "b did not join").await;
    // The signal comes right after a CMD started, well inside its 2 s (not one that started
    // while b was joining).
    a.drain();
    let (started, cmd) = next_slot(&mut a, "a started no slot").await;
    groups.add(&cmd);
    let slot = started.str("slot").to_owned();
    a.signal(Signal::SIGTERM);
    let finished = slot_event(
        &mut a,
        "slot_finished",
        &slot,
        BOUND,
        "a's drained slot did not finish",
    )
    .await;
    assert_eq!(finished.str("outcome"), "succeeded", "{}", finished.json);
    // CMD finished by itself: zkr exits with its code, 0.
    assert_eq!(a.exit(BOUND, "a after a drain").await.code(), Some(0));
    let lines = a.all_lines(BOUND).await;
    assert!(
        !lines.iter().any(|l| l.event() == "cmd_signalled"),
        "a stopped its command during the drain\n{}",
        a.context()
    );
    let drained_at = Schedule::parse_key(&slot).expect("a slot key");
    assert!(
        !lines.iter().any(|l| l.event() == "slot_started"
            && Schedule::parse_key(l.str("slot")).is_some_and(|k| k > drained_at)),
        "a started a slot after the signal\n{}",
        a.context()
    );
    let recorded = history(connect, &path).await;
    let r = record(&recorded, &slot);
    assert_eq!(
        (
            r["state"].as_str(),
            r["attempt"].as_i64(),
            r["runner"].as_str()
        ),
        (Some("succeeded"), Some(1), Some("a")),
        "{r}"
    );

    // b leads next and starts a later slot, not a retry of a's.
    let (next, cmd) = next_slot(&mut b, "b started no slot after a left").await;
    let pgid = groups.add(&cmd);
    assert_ne!(next.str("slot"), slot, "b ran a's drained slot again");
    assert_eq!(next.int("attempt"), 1, "{}", next.json);
    assert!(next.int("token") > started.int("token"), "{}", next.json);
    let b_slot = next.str("slot").to_owned();
    // b's drain (500 ms) is shorter than its command (2 s): CMD is stopped and the slot is
    // left `running` for the next leader, as without --drain.
    b.signal(Signal::SIGTERM);
    let signalled = b
        .wait_for(
            "cmd_signalled",
            BOUND,
            "b did not stop its command after its drain",
        )
        .await;
    assert_eq!(signalled.str("reason"), "shutdown", "{}", signalled.json);
    assert_eq!(
        b.exit(BOUND, "b after its drain ran out").await.code(),
        Some(143)
    );
    assert!(group_gone(pgid), "b's command group outlived b");
    assert_eq!(
        record(&history(connect, &path).await, &b_slot)["state"],
        "running"
    );
    let ends = ends_per_slot(&runs(&file));
    assert_eq!(ends.get(&slot), Some(&1), "a's slot ended once: {ends:?}");
    assert_eq!(
        ends.get(&b_slot),
        None,
        "b's stopped slot did not end: {ends:?}"
    );
}

#[tokio::test]
async fn a_job_path_the_server_refuses_exits_1_saying_why() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;
    // A job path that is an ephemeral node cannot have an election under it.
    let path = testing::unique_path("cron-refused");
    let (parent, _) = path.rsplit_once('/').expect("an absolute path");
    let acl = zookeeper_client::Acls::anyone_all();
    zk.mkdir(
        parent,
        &zookeeper_client::CreateMode::Persistent.with_acls(acl),
    )
    .await
    .expect("parent made");
    zk.create(
        &path,
        b"",
        &zookeeper_client::CreateMode::Ephemeral.with_acls(acl),
    )
    .await
    .expect("ephemeral job path made");
    let (status, _, err) = zkr_output(
        connect,
        &["cron", "run", &path, "--every", "1s", "--", "true"],
    )
    .await;
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("the scheduled job stopped") && err.contains("ephemeral"),
        "zkr should say why: {err}"
    );
}

/// `zkr cron status ARGS...` (any exit code): the code and the JSON it printed.
async fn status_json(connect: &str, args: &[&str]) -> (Option<i32>, Value) {
    let mut all = vec!["cron", "status"];
    all.extend_from_slice(args);
    let (status, out, err) = zkr_output(connect, &all).await;
    let json = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("zkr {all:?} printed no JSON ({e}): {out}\n{err}"));
    (status.code(), json)
}

#[tokio::test]
async fn history_keeps_every_attempt_and_status_flags_the_slot_of_a_dead_runner() {
    if !zookeeper() {
        return;
    }
    let _one_at_a_time = FAULTS.lock().await;
    let server = shared_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;
    let path = testing::unique_path("cron-audit");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runs");
    let args = ["--every", "1h"];
    let mut groups = Groups::default();

    // a runs trigger-1 and is killed mid-run, with no other replica standing.
    let mut a = replica(connect, "a", SESSION, &path, &args, &appending(&file, "30"));
    a.wait_for("leader", BOUND, "a never led").await;
    cron_ok(connect, &["trigger", &path]).await;
    let (started, cmd) = next_slot(&mut a, "a did not start the trigger").await;
    assert_eq!(started.str("slot"), "trigger-1");
    let old_token = started.int("token");
    let pgid = groups.add(&cmd);
    a.signal(Signal::SIGKILL);
    let _ = killpg(pgid, Signal::SIGKILL);
    a.exit(BOUND, "a after SIGKILL").await;
    // Once a's session is gone, the slot it left running is flagged.
    wait_contenders(&zk, &path, 0, "a's node outlived its session").await;
    let (code, status) = status_json(connect, &[&path]).await;
    assert_eq!(code, Some(0), "{status}");
    assert_eq!(status["leader"], Value::Null, "{status}");
    assert_eq!(
        status["orphaned"],
        serde_json::json!(["trigger-1"]),
        "{status}"
    );
    let open = &status["open"][0];
    assert_eq!(
        (&open["slot"], &open["state"], &open["orphaned"]),
        (
            &Value::from("trigger-1"),
            &Value::from("running"),
            &Value::from(true)
        ),
        "{status}"
    );

    // b takes it up: the record keeps a's attempt beside b's.
    let mut b = replica(connect, "b", STEADY, &path, &args, &appending(&file, "0"));
    let done = slot_event(
        &mut b,
        "slot_finished",
        "trigger-1",
        BOUND,
        "b did not retry it",
    )
    .await;
    assert_eq!(done.str("outcome"), "succeeded", "{}", done.json);
    let records = history(connect, &path).await;
    print_history("a killed, b retried", &records);
    let r = record(&records, "trigger-1");
    eprintln!("{}", serde_json::to_string_pretty(r).unwrap());
    let attempts = r["attempts"].as_array().expect("attempts listed");
    assert_eq!(attempts.len(), 2, "{r}");
    let (first, second) = (&attempts[0], &attempts[1]);
    assert_eq!(first["attempt"], 1, "{r}");
    assert_eq!(first["runner"], "a", "{r}");
    assert_eq!(first["token"].as_i64(), Some(old_token), "{r}");
    assert!(first["started_ms"].is_i64(), "{r}");
    assert_eq!(first["outcome"], "cut_off", "{r}");
    assert_eq!(first["found_by"], "b", "{r}");
    assert_eq!(second["attempt"], 2, "{r}");
    assert_eq!(second["runner"], "b", "{r}");
    assert_eq!(second["outcome"], "succeeded", "{r}");
    assert_eq!(second["exit_code"], 0, "{r}");
    // The promised top-level fields describe the last attempt, as before.
    assert_eq!(
        (&r["attempt"], &r["runner"]),
        (&Value::from(2), &Value::from("b"))
    );
    let (_, status) = status_json(connect, &[&path]).await;
    assert_eq!(status["orphaned"], serde_json::json!([]), "{status}");
    assert_eq!(status["last_success"]["slot"], "trigger-1", "{status}");
    assert!(
        status["last_success"]["age_ms"]
            .as_i64()
            .is_some_and(|a| a >= 0),
        "{status}"
    );
    stop(&mut b).await;
}

#[tokio::test]
async fn a_failing_cmd_is_retried_with_backoff_and_resolve_reruns_a_failed_slot() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-retries");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    // trigger-1 fails twice (exit 4), then succeeds; trigger-2 fails until the file `ok` exists.
    let script = format!(
        "n=$(cat {d}/$ZK_SLOT 2>/dev/null || echo 0); n=$((n+1)); echo $n > {d}/$ZK_SLOT; \
         [ -e {d}/ok ] && exit 0; [ \"$ZK_SLOT\" = trigger-1 ] && [ $n -ge 3 ] && exit 0; exit 4"
    );
    let args = [
        "--every",
        "1h",
        "--retries",
        "2",
        "--retry-backoff",
        "300ms",
    ];
    let mut r = replica(connect, "r", STEADY, &path, &args, &script);
    r.wait_for("leader", BOUND, "r never led").await;

    cron_ok(connect, &["trigger", &path]).await;
    for attempt in 1..=2 {
        let retrying = slot_event(
            &mut r,
            "slot_retrying",
            "trigger-1",
            BOUND,
            "no retry of trigger-1",
        )
        .await;
        assert_eq!(retrying.int("attempt"), attempt, "{}", retrying.json);
        assert_eq!(retrying.int("backoff_ms"), 300, "{}", retrying.json);
        let again = slot_event(
            &mut r,
            "slot_started",
            "trigger-1",
            BOUND,
            "the retry did not start",
        )
        .await;
        assert_eq!(again.int("attempt"), attempt + 1, "{}", again.json);
        assert_eq!(again.json["recovering"], true, "{}", again.json);
    }
    let done = slot_event(
        &mut r,
        "slot_finished",
        "trigger-1",
        BOUND,
        "trigger-1 did not end",
    )
    .await;
    assert_eq!(done.str("outcome"), "succeeded", "{}", done.json);

    cron_ok(connect, &["trigger", &path]).await;
    let failed = slot_event(
        &mut r,
        "slot_finished",
        "trigger-2",
        BOUND,
        "trigger-2 did not end",
    )
    .await;
    assert_eq!(failed.str("outcome"), "failed", "{}", failed.json);
    assert_eq!(failed.int("exit_code"), 4, "{}", failed.json);
    let records = history(connect, &path).await;
    print_history("retries on failure", &records);
    let t1 = record(&records, "trigger-1");
    assert_eq!(
        (&t1["state"], &t1["attempt"], &t1["failures"]),
        (&Value::from("succeeded"), &Value::from(3), &Value::from(2)),
        "{t1}"
    );
    let t2 = record(&records, "trigger-2");
    assert_eq!(
        (&t2["attempt"], &t2["failures"]),
        (&Value::from(3), &Value::from(3)),
        "{t2}"
    );
    let outcomes: Vec<(i64, &str, i64)> = t2["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| {
            (
                a["attempt"].as_i64().unwrap(),
                a["outcome"].as_str().unwrap(),
                a["exit_code"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        vec![(1, "failed", 4), (2, "failed", 4), (3, "failed", 4)]
    );

    // The cause is fixed; an operator re-runs the failed slot.
    std::fs::write(dir.path().join("ok"), "").unwrap();
    cron_ok(connect, &["resolve", &path, "trigger-2", "--rerun"]).await;
    let rerun = slot_event(&mut r, "slot_started", "trigger-2", BOUND, "no rerun").await;
    assert_eq!(rerun.int("attempt"), 4, "{}", rerun.json);
    assert_eq!(rerun.json["recovering"], true, "{}", rerun.json);
    let done = slot_event(
        &mut r,
        "slot_finished",
        "trigger-2",
        BOUND,
        "the rerun did not end",
    )
    .await;
    assert_eq!(done.str("outcome"), "succeeded", "{}", done.json);
    // A succeeded slot is not re-run.
    let (status, _, err) =
        zkr_output(connect, &["cron", "resolve", &path, "trigger-2", "--rerun"]).await;
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("not parked or failed"), "{err}");
    stop(&mut r).await;
}

#[tokio::test]
async fn trigger_carries_a_slot_or_a_business_date_to_cmd() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-trigger-for");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("env");
    let script = format!(
        "echo \"$ZK_SLOT|${{ZK_FOR_SLOT-}}|${{ZK_BUSINESS_DATE-}}|$ZK_NOMINAL|$ZK_RECOVERING|$ZK_LEADER_PATH\" >> {}",
        file.display()
    );
    let mut r = replica(connect, "r", STEADY, &path, &["--every", "1h"], &script);
    r.wait_for("leader", BOUND, "r never led").await;
    let key = "2026-12-03T01:00:00Z";
    assert_eq!(
        cron_ok(connect, &["trigger", &path, "--slot", key])
            .await
            .trim(),
        "1"
    );
    assert_eq!(
        cron_ok(connect, &["trigger", &path, "--date", "2026-12-03"])
            .await
            .trim(),
        "2"
    );
    slot_event(
        &mut r,
        "slot_finished",
        "trigger-2",
        BOUND,
        "trigger-2 did not end",
    )
    .await;
    stop(&mut r).await;
    let lines: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    // ZK_LEADER_PATH: the leader's own node in the job's election.
    let node = format!("{path}/leader/_c_");
    assert_eq!(lines.len(), 2, "{lines:?}");
    let f: Vec<&str> = lines[0].split('|').collect();
    assert_eq!(
        (f[0], f[1], f[2], f[3], f[4]),
        ("trigger-1", key, "", key, "0"),
        "{lines:?}"
    );
    assert!(f[5].starts_with(&node), "{lines:?}");
    let f: Vec<&str> = lines[1].split('|').collect();
    assert_eq!(
        (f[0], f[1], f[2], f[4]),
        ("trigger-2", "", "2026-12-03", "0"),
        "{lines:?}"
    );
    assert!(f[5].starts_with(&node), "{lines:?}");
    let records = history(connect, &path).await;
    assert_eq!(record(&records, "trigger-1")["for_slot"], key);
    assert_eq!(record(&records, "trigger-2")["business_date"], "2026-12-03");
    // A key or date that is not one is refused before connecting, as bad arguments are.
    for bad in [
        vec!["--slot", "yesterday"],
        vec!["--date", "2026-02-30"],
        vec!["--slot", key, "--date", "2026-12-03"],
    ] {
        let mut all = vec!["cron", "trigger", path.as_str()];
        all.extend(bad.iter().copied());
        let (status, _, err) = zkr_output(connect, &all).await;
        assert_eq!(status.code(), Some(2), "{all:?}: {err}");
    }
}

#[tokio::test]
async fn status_check_exits_0_when_healthy_and_with_a_code_for_each_problem() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;
    let path = testing::unique_path("cron-check");
    // trigger-2 fails; everything else succeeds.
    let script = "[ \"$ZK_SLOT\" = trigger-2 ] && exit 5; exit 0";
    let mut r = replica(connect, "r", STEADY, &path, &["--every", "1h"], script);
    r.wait_for("leader", BOUND, "r never led").await;
    let check = |args: &'static [&'static str]| {
        let path = path.clone();
        async move {
            let mut all = vec![path.as_str(), "--check"];
            all.extend_from_slice(args);
            status_json(connect, &all).await
        }
    };
    // A leader, nothing failed, no max age: healthy. With a max age and no success yet: stale.
    let (code, s) = check(&[]).await;
    assert_eq!(code, Some(0), "{s}");
    assert_eq!(s["check"]["healthy"], true, "{s}");
    let (code, s) = check(&["--max-age", "26h"]).await;
    assert_eq!(code, Some(10), "{s}");
    assert_eq!(s["check"]["problems"], serde_json::json!(["stale"]), "{s}");

    cron_ok(connect, &["trigger", &path]).await;
    slot_event(
        &mut r,
        "slot_finished",
        "trigger-1",
        BOUND,
        "trigger-1 did not end",
    )
    .await;
    let (code, s) = check(&["--max-age", "26h"]).await;
    assert_eq!(code, Some(0), "{s}");
    assert_eq!(s["last_success"]["slot"], "trigger-1", "{s}");
    assert_eq!(s["check"]["max_age_ms"], 26 * 3_600_000, "{s}");
    // The same success is stale by a max age it has outlived.
    let (code, s) = check(&["--max-age", "1ms"]).await;
    assert_eq!(code, Some(10), "{s}");

    cron_ok(connect, &["trigger", &path]).await;
    slot_event(
        &mut r,
        "slot_finished",
        "trigger-2",
        BOUND,
        "trigger-2 did not end",
    )
    .await;
    let (code, s) = check(&["--max-age", "26h"]).await;
    assert_eq!(code, Some(11), "{s}");
    assert_eq!(s["check"]["problems"], serde_json::json!(["failed"]), "{s}");

    stop(&mut r).await;
    wait_contenders(&zk, &path, 0, "r's node outlived its close").await;
    let (code, s) = check(&["--max-age", "26h"]).await;
    assert_eq!(code, Some(12), "{s}");
    assert_eq!(
        s["check"]["problems"],
        serde_json::json!(["no_leader", "failed"]),
        "{s}"
    );
    // Without --check, status exits 0 whatever it finds, and prints no `check`.
    let (code, s) = status_json(connect, &[&path]).await;
    assert_eq!(code, Some(0), "{s}");
    assert!(s.get("check").is_none(), "{s}");
    // --max-age needs --check.
    let (status, _, err) = zkr_output(connect, &["cron", "status", &path, "--max-age", "1h"]).await;
    assert_eq!(status.code(), Some(2), "{err}");
}

#[tokio::test]
async fn a_leader_killed_mid_slot_costs_no_later_slot_under_the_defaults() {
    if !zookeeper() {
        return;
    }
    let _one_at_a_time = FAULTS.lock().await;
    // The operator's case scaled down: a run of half the period, its leader killed mid-run, the
    // retry started a session timeout later; before, the next slot overlapped the retry (or
    // the catch-up run after it) and was skipped.
    let server = shared_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;
    let path = testing::unique_path("cron-failover-slot");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runs");
    let script = appending(&file, "2");
    let args = ["--every", "4s"];
    let mut groups = Groups::default();

    let mut a = replica(connect, "a", SESSION, &path, &args, &script);
    a.wait_for("leader", BOUND, "a never led").await;
    let mut b = replica(connect, "b", STEADY, &path, &args, &script);
    wait_contenders(&zk, &path, 2, "b did not queue").await;
    let (started, cmd) = next_slot(&mut a, "a started no slot").await;
    let pgid = groups.add(&cmd);
    let s0 = started.str("slot").to_owned();
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.signal(Signal::SIGKILL);
    let _ = killpg(pgid, Signal::SIGKILL);
    a.exit(BOUND, "a after SIGKILL").await;

    let first = Schedule::parse_key(&s0).expect("a slot key");
    let s3 = Schedule::key(first + 3 * 4_000);
    slot_event(
        &mut b,
        "slot_finished",
        &s3,
        BOUND,
        "b did not get to the third slot after",
    )
    .await;
    stop(&mut b).await;
    let records = history(connect, &path).await;
    print_history("leader killed mid-slot, 2 s runs every 4 s", &records);
    for i in 0..=3 {
        let key = Schedule::key(first + i * 4_000);
        let r = record(&records, &key);
        assert_eq!(r["state"], "succeeded", "{key} lost to the failover: {r}");
    }
    assert_eq!(record(&records, &s0)["attempt"], 2);
    let all = runs(&file);
    for (s, n) in ends_per_slot(&all) {
        assert_eq!(n, 1, "{s} finished {n} times: {all:?}");
    }
}
