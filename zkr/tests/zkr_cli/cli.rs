//! `zkr`, the command-line tool, against real ZooKeeper: its JSON events, exit codes, and the
//! supervision of commands run under a leadership term or a lock (group kill on loss, parent
//! death, freeze).
//!
//! Every zkr is a child process of this test (`kill_on_drop`), every CMD group it reports is
//! `SIGKILL`ed when the test ends ([`Groups`]), and every wait is bounded with a message that
//! says what did not happen. Tests that fault the server or freeze a process start their own
//! server and run one at a time ([`FAULTS`]); the others share one server.

use zookeeper_recipes_rigs::fixtures as common;

use std::ffi::OsStr;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::FAULTS;
use common::zkr::{
    EventsOn, Groups, Line, Zkr, assert_usage_error, group_gone, stubborn_handover,
    stubborn_script, zkr,
};
use common::{BOUND, client, ms, own_server, proxy_to, shared_server, slack, zookeeper};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde_json::Value;
use zookeeper_recipes_testing as testing;

/// `to - from` in milliseconds, negative when `to` came first.
fn signed_ms(from: Instant, to: Instant) -> f64 {
    ms(to.saturating_duration_since(from)) - ms(from.saturating_duration_since(to))
}

// ---------------------------------------------------------------------------------------------
// Driving zkr (the `Zkr` child itself is in rigs/src/fixtures/zkr.rs)

/// `zkr ARGS...` to completion: exit status and stdout.
async fn zkr_output(connect: &str, args: &[&str]) -> (ExitStatus, String) {
    let mut c = zkr(connect);
    c.args(args);
    let out = tokio::time::timeout(BOUND, c.output())
        .await
        .unwrap_or_else(|_| panic!("zkr {args:?} did not finish within {BOUND:?}"))
        .expect("zkr ran");
    (
        out.status,
        String::from_utf8(out.stdout).expect("zkr prints UTF-8"),
    )
}

/// Whether `pid` is a process that still runs: a zombie waiting for init to reap it does not.
fn running(pid: i32) -> bool {
    let state = u32::try_from(pid).ok().and_then(testing::process_state);
    !matches!(state, Some('Z' | 'X') | None)
}

/// Polls `check` every 10 ms until it holds; panics with `what` after `bound`. Returns when it
/// first held.
async fn eventually(bound: Duration, what: &str, mut check: impl FnMut() -> bool) -> Instant {
    let deadline = Instant::now() + bound;
    loop {
        if check() {
            return Instant::now();
        }
        if Instant::now() >= deadline {
            panic!("{what}: not within {bound:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn children(client: &zookeeper_client::Client, path: &str) -> Vec<String> {
    match client.list_children(path).await {
        Ok(children) => children,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("listing {path}: {e}"),
    }
}

/// Waits until `path` has `n` children (contenders), polling.
async fn wait_children(client: &zookeeper_client::Client, path: &str, n: usize, what: &str) {
    let deadline = Instant::now() + BOUND;
    loop {
        let now = children(client, path).await;
        if now.len() == n {
            return;
        }
        if Instant::now() >= deadline {
            panic!("{what}: {path} has {now:?}, not {n} children, after {BOUND:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// latch, participants, leader

#[tokio::test]
async fn latch_prints_leader_then_successor_leads_after_sigterm() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;
    let path = testing::unique_path("cli-latch");

    let mut a = Zkr::latch(connect, &path, "a", None);
    let led = a
        .wait_for("leader", BOUND, "the first latch never printed leader")
        .await;
    assert_eq!(led.str("id"), "a");
    let token_a = led.int("token");
    let node_a = led.str("path").to_owned();
    assert!(
        node_a.starts_with(&format!("{path}/_c_")) && node_a.contains("-latch-"),
        "{node_a}"
    );
    assert!(
        led.int("ts_ms") > 1_600_000_000_000,
        "ts_ms is unix milliseconds: {}",
        led.json
    );

    let mut b = Zkr::latch(connect, &path, "b", None);
    wait_children(&zk, &path, 2, "the second latch did not join").await;

    let sigterm = Instant::now();
    a.signal(Signal::SIGTERM);
    let succeeded = b
        .wait_for("leader", BOUND, "the second latch never led after SIGTERM")
        .await;
    let handover = succeeded.at - sigterm;

    let closed = a
        .next(BOUND, "the first latch printed nothing after SIGTERM")
        .await;
    assert_eq!(closed.event(), "not_leader", "{}", closed.json);
    assert_eq!(closed.str("reason"), "closed");
    assert_eq!(closed.int("token"), token_a);
    assert_eq!(closed.str("path"), node_a);
    let status = a.exit(BOUND, "the first latch after SIGTERM").await;
    assert_eq!(status.code(), Some(0), "{}", a.context());
    assert!(
        zk.check_stat(&node_a).await.expect("stat").is_none(),
        "the first latch's node {node_a} is still there after it exited"
    );

    let token_b = succeeded.int("token");
    assert!(
        token_b > token_a,
        "successor's token {token_b} is not above {token_a}"
    );
    eprintln!(
        "latch handover, SIGTERM to the successor's leader line: {:.1} ms",
        ms(handover)
    );

    b.signal(Signal::SIGINT);
    assert_eq!(
        b.exit(BOUND, "the second latch after SIGINT").await.code(),
        Some(0)
    );
}

#[tokio::test]
async fn watch_prints_each_leader_change_once_and_exits_0_on_sigterm() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;
    let path = testing::unique_path("cli-watch");

    let mut watch = Zkr::spawn(
        "watch",
        {
            let mut c = zkr(connect);
            c.args(["watch", &path]);
            c
        },
        EventsOn::Stdout,
    );
    let first = watch.next(BOUND, "zkr watch printed nothing").await;
    assert_eq!(first.event(), "no_leader", "{}", first.json);
    assert!(first.int("ts_ms") > 1_600_000_000_000, "{}", first.json);

    let mut a = Zkr::latch(connect, &path, "a", None);
    let a_led = a.wait_for("leader", BOUND, "latch a never led").await;
    let seen_a = watch
        .next(BOUND, "zkr watch did not print a's leadership")
        .await;
    assert_eq!(seen_a.event(), "leader", "{}", seen_a.json);
    assert_eq!(seen_a.str("id"), "a");
    assert_eq!(seen_a.int("token"), a_led.int("token"));
    assert_eq!(seen_a.str("path"), a_led.str("path"));

    let mut b = Zkr::latch(connect, &path, "b", None);
    wait_children(&zk, &path, 2, "latch b did not join").await;
    a.signal(Signal::SIGTERM);
    let b_led = b.wait_for("leader", BOUND, "latch b never led").await;
    let seen_b = watch
        .next(BOUND, "zkr watch did not print b's leadership")
        .await;
    assert_eq!(seen_b.event(), "leader", "{}", seen_b.json);
    assert_eq!(
        (seen_b.str("id"), seen_b.int("token")),
        ("b", b_led.int("token"))
    );

    b.signal(Signal::SIGTERM);
    let none = watch.next(BOUND, "zkr watch did not print no_leader").await;
    assert_eq!(none.event(), "no_leader", "{}", none.json);
    for z in [&mut a, &mut b] {
        assert_eq!(z.exit(BOUND, "a latch after SIGTERM").await.code(), Some(0));
    }

    watch.signal(Signal::SIGTERM);
    assert_eq!(
        watch.exit(BOUND, "zkr watch after SIGTERM").await.code(),
        Some(0),
        "{}",
        watch.context()
    );
    assert!(watch.drain().is_empty(), "{}", watch.context());
}

/// The id of issue 43: an OSC title sequence ending in a bell, a newline, then a command.
const HOSTILE_ID: &str = "\u{1b}]0;pwned\u{7}\nrm -rf";

/// The bytes of `out` that a terminal takes as control: C0 and DEL, and the C1 range in its
/// UTF-8 encoding (U+0080..U+009F is `C2 80`..`C2 9F`).
fn control_bytes(out: &[u8]) -> Vec<(usize, u8)> {
    let mut found: Vec<(usize, u8)> = out
        .iter()
        .enumerate()
        .filter(|(_, b)| **b < 0x20 || **b == 0x7f)
        .map(|(i, b)| (i, *b))
        .collect();
    found.extend(
        out.windows(2)
            .enumerate()
            .filter(|(_, w)| w[0] == 0xc2 && (0x80..=0x9f).contains(&w[1]))
            .map(|(i, w)| (i + 1, w[1])),
    );
    found
}

#[tokio::test]
async fn leader_and_participants_print_a_hostile_id_and_a_foreign_node_without_control_bytes() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;
    let path = testing::unique_path("cli-hostile");
    let open = zookeeper_client::Acls::anyone_all();
    zk.mkdir(
        &path,
        &zookeeper_client::CreateMode::Persistent.with_acls(open),
    )
    .await
    .unwrap();
    // A foreign node that sorts first: named like a latch node, but persistent, its data an
    // 8-bit CSI sequence (U+009B) and a right-to-left override.
    let foreign_name = "x-latch-0000000000";
    let foreign_data = "op\u{9b}31m\u{202e}txt";
    zk.create(
        &format!("{path}/{foreign_name}"),
        foreign_data.as_bytes(),
        &zookeeper_client::CreateMode::Persistent.with_acls(open),
    )
    .await
    .unwrap();
    // A contender written by a stranger with a raw client: Curator's naming, the hostile id.
    let uuid = uuid::Uuid::new_v4();
    zk.create(
        &format!("{path}/_c_{uuid}-latch-"),
        HOSTILE_ID.as_bytes(),
        &zookeeper_client::CreateMode::EphemeralSequential.with_acls(open),
    )
    .await
    .unwrap();

    // Before: `zkr leader` printed the id raw (the terminal's title set, a bell, a forged second
    // line), and the foreign node was the leader. After: a JSON string, the ephemeral node leads.
    let (status, out) = zkr_output(connect, &["leader", &path]).await;
    assert!(status.success(), "zkr leader failed: {status}");
    let bytes = out.as_bytes();
    assert_eq!(
        control_bytes(bytes),
        [(bytes.len() - 1, b'\n')],
        "zkr leader printed control bytes: {out:?}"
    );
    assert_eq!(out, "\"\\u001b]0;pwned\\u0007\\nrm -rf\"\n");
    assert_eq!(
        serde_json::from_str::<String>(out.trim_end()).unwrap(),
        HOSTILE_ID
    );

    let (status, out) = zkr_output(connect, &["participants", &path]).await;
    assert!(status.success(), "zkr participants failed: {status}");
    let bytes = out.as_bytes();
    assert_eq!(
        control_bytes(bytes),
        [(bytes.len() - 1, b'\n')],
        "zkr participants printed control bytes: {out:?}"
    );
    assert!(!out.contains('\u{202e}'), "{out:?}");
    let list: Value = serde_json::from_str(out.trim()).expect("participants prints JSON");
    assert_eq!(
        list,
        serde_json::json!([
            {"id": foreign_data, "leader": false, "foreign": true, "node": foreign_name},
            {"id": HOSTILE_ID, "leader": true},
        ])
    );
    zk.delete(&format!("{path}/{foreign_name}"), None)
        .await
        .unwrap();
}

#[tokio::test]
async fn participants_and_leader_print_election_order() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;

    // A latch path given as a bare name: /election/<name>.
    let name = format!(
        "cli-order-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let full = format!("/election/{name}");
    let mut a = Zkr::latch(connect, &name, "a", None);
    a.wait_for("leader", BOUND, "latch a never led").await;
    let mut b = Zkr::latch(connect, &name, "b", None);
    wait_children(&zk, &full, 2, "latch b did not join").await;
    let mut c = Zkr::latch(connect, &full, "c", None);
    wait_children(&zk, &full, 3, "latch c did not join").await;

    let (status, out) = zkr_output(connect, &["participants", &name]).await;
    assert!(status.success(), "zkr participants failed: {status}");
    let list: Value = serde_json::from_str(out.trim()).expect("participants prints JSON");
    assert_eq!(
        list,
        serde_json::json!([
            {"id": "a", "leader": true},
            {"id": "b", "leader": false},
            {"id": "c", "leader": false},
        ])
    );
    let (status, out) = zkr_output(connect, &["leader", &full]).await;
    assert!(status.success());
    assert_eq!(out, "a\n");

    // The leader goes: the order moves up.
    a.signal(Signal::SIGTERM);
    a.exit(BOUND, "latch a after SIGTERM").await;
    b.wait_for("leader", BOUND, "latch b never led after a left")
        .await;
    let (_, out) = zkr_output(connect, &["participants", &full]).await;
    assert_eq!(
        out.trim(),
        r#"[{"id":"b","leader":true},{"id":"c","leader":false}]"#
    );

    // A selector path (zkr run): lock- nodes, found without being told.
    let sel = testing::unique_path("cli-order-sel");
    let mut groups = Groups::default();
    let mut r1 = Zkr::supervisor(
        connect,
        "r1",
        &["run", &sel, "--id", "r1", "--", "sleep", "1000"],
    );
    groups.add(
        &r1.wait_for("cmd_started", BOUND, "runner r1 never started its command")
            .await,
    );
    let mut r2 = Zkr::supervisor(
        connect,
        "r2",
        &["run", &sel, "--id", "r2", "--", "sleep", "1000"],
    );
    wait_children(&zk, &sel, 2, "runner r2 did not queue").await;
    let (_, out) = zkr_output(connect, &["participants", &sel]).await;
    assert_eq!(
        out.trim(),
        r#"[{"id":"r1","leader":true},{"id":"r2","leader":false}]"#
    );
    let (_, out) = zkr_output(connect, &["leader", &sel]).await;
    assert_eq!(out, "r1\n");

    // Nobody there: an empty list and an empty line, exit 0.
    let empty = testing::unique_path("cli-order-none");
    let (status, out) = zkr_output(connect, &["participants", &empty]).await;
    assert!(status.success());
    assert_eq!(out, "[]\n");
    let (status, out) = zkr_output(connect, &["leader", &empty]).await;
    assert!(status.success());
    assert_eq!(out, "\n");

    for z in [&b, &c, &r1, &r2] {
        z.signal(Signal::SIGTERM);
    }
    for z in [&mut b, &mut c, &mut r1, &mut r2] {
        z.exit(BOUND, "a participant after SIGTERM").await;
    }
}

#[tokio::test]
async fn frozen_latch_leader_reports_not_leader_as_soon_as_it_wakes() {
    if !zookeeper() {
        return;
    }
    let _one_at_a_time = FAULTS.lock().await;
    let server = own_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;
    let path = testing::unique_path("cli-frozen-latch");
    let timeout = Duration::from_secs(2);

    let mut a = Zkr::latch(connect, &path, "a", Some("2s"));
    let led = a.wait_for("leader", BOUND, "latch a never led").await;
    let token_a = led.int("token");
    let mut b = Zkr::latch(connect, &path, "b", Some("2s"));
    wait_children(&zk, &path, 2, "latch b did not join").await;

    a.signal(Signal::SIGSTOP);
    let frozen = Instant::now();
    let freeze = timeout * 5 / 2;
    let b_led = b
        .wait_for(
            "leader",
            freeze,
            "latch b did not lead while a was frozen past its session",
        )
        .await;
    assert!(b_led.int("token") > token_a);
    tokio::time::sleep_until((frozen + freeze).into()).await;
    a.signal(Signal::SIGCONT);
    let woke = Instant::now();

    let first = a
        .next(
            Duration::from_secs(5),
            "latch a printed nothing after waking",
        )
        .await;
    let delay = first.at - woke;
    assert_eq!(
        first.event(),
        "not_leader",
        "the first line after waking: {}",
        first.json
    );
    assert!(
        matches!(first.str("reason"), "deadline_passed" | "lost"),
        "reason: {}",
        first.json
    );
    assert_eq!(first.int("token"), token_a);
    assert!(
        delay <= slack(Duration::from_secs(1)),
        "not_leader came {delay:?} after waking"
    );
    // The term ended at its deadline, within a session timeout of the freeze, not at the wake;
    // and the line says so on the clock every process shares.
    // `Instant` reads CLOCK_MONOTONIC on Linux, as zkr's `*_mono_ns` fields do.
    let now_mono = || {
        let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
        std::time::Duration::from(now).as_nanos() as i64
    };
    let mono = |at: Instant| now_mono() - at.elapsed().as_nanos() as i64;
    let ended = first.int("ended_mono_ns");
    assert!(
        ended > led.int("started_mono_ns") && ended <= mono(frozen + timeout),
        "ended_mono_ns {ended} is not the deadline: frozen at {}, woke at {}",
        mono(frozen),
        mono(woke)
    );
    // Written after the SIGCONT, which was sent once the freeze had lasted `freeze`.
    assert!(
        first.int("mono_ns") >= mono(frozen + freeze),
        "{}",
        first.json
    );
    eprintln!(
        "frozen latch: SIGCONT to not_leader {:.1} ms ({})",
        ms(delay),
        first.str("reason")
    );

    // It rejoins with a new session, behind b, and never claims leadership again.
    let deadline = Instant::now() + BOUND;
    loop {
        let line = a
            .next(deadline - Instant::now(), "latch a never reconnected")
            .await;
        assert_ne!(
            line.event(),
            "leader",
            "latch a led again while b leads: {}",
            line.json
        );
        if line.event() == "state" && line.str("state") == "reconnected" {
            break;
        }
    }
    let (_, out) = zkr_output(connect, &["leader", &path]).await;
    assert_eq!(out, "b\n");
    assert!(
        a.drain().iter().all(|l| l.event() != "leader"),
        "{}",
        a.context()
    );

    a.signal(Signal::SIGTERM);
    b.signal(Signal::SIGTERM);
    assert_eq!(a.exit(BOUND, "latch a after SIGTERM").await.code(), Some(0));
    assert_eq!(b.exit(BOUND, "latch b after SIGTERM").await.code(), Some(0));
    assert!(
        a.drain().iter().all(|l| l.event() != "leader"),
        "{}",
        a.context()
    );
}

// ---------------------------------------------------------------------------------------------
// run

#[tokio::test]
async fn run_starts_cmd_with_token_env_and_exits_with_its_code() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;
    let path = testing::unique_path("cli-run-env");
    let file = std::env::temp_dir().join(format!("zkr-cli-{}.env", uuid::Uuid::new_v4().simple()));
    let script = concat!(
        r#"printf '%s\n%s\n%s\n' "$ZK_FENCING_TOKEN" "$ZK_LEADER_ID" "$ZK_LEADER_PATH" > "$1";"#,
        " exit 3"
    );

    let mut r = Zkr::supervisor(
        connect,
        "run",
        &[
            OsStr::new("run"),
            OsStr::new(&path),
            OsStr::new("--id"),
            OsStr::new("job-1"),
            OsStr::new("--"),
            OsStr::new("sh"),
            OsStr::new("-c"),
            OsStr::new(script),
            OsStr::new("sh"),
            file.as_os_str(),
        ],
    );
    let status = r
        .exit(BOUND, "zkr run of a command that exits at once")
        .await;
    assert_eq!(status.code(), Some(3), "{}", r.context());
    let lines = r.drain();
    let names: Vec<&str> = lines.iter().map(Line::event).collect();
    assert_eq!(
        names,
        ["leader", "cmd_started", "cmd_exited", "not_leader"],
        "{}",
        r.context()
    );
    let (led, started, exited, released) = (&lines[0], &lines[1], &lines[2], &lines[3]);
    assert_eq!(started.int("token"), led.int("token"));
    assert_eq!(exited.int("code"), 3);
    assert_eq!(released.str("reason"), "closed");

    let written = std::fs::read_to_string(&file).expect("the command wrote its environment");
    let _ = std::fs::remove_file(&file);
    let env: Vec<&str> = written.lines().collect();
    assert_eq!(
        env,
        [
            led.int("token").to_string().as_str(),
            "job-1",
            led.str("path")
        ]
    );
    assert!(
        children(&zk, &path).await.is_empty(),
        "the runner's node outlived it"
    );
}

#[tokio::test]
async fn run_kills_cmd_process_group_within_grace_when_leadership_is_lost() {
    if !zookeeper() {
        return;
    }
    let _one_at_a_time = FAULTS.lock().await;
    let server = own_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cli-run-loss");
    let grace = Duration::from_secs(2);
    let mut groups = Groups::default();

    let mut r = Zkr::supervisor(
        connect,
        "run",
        &[
            "run",
            &path,
            "--grace",
            "2s",
            "--",
            "sh",
            "-c",
            "sleep 1000 & sleep 1000 & wait",
        ],
    );
    let started = r
        .wait_for("cmd_started", BOUND, "the runner never started its command")
        .await;
    let pgid = groups.add(&started);
    eventually(BOUND, "the command's two children did not start", || {
        group_members(pgid).len() >= 3
    })
    .await;

    // Stopping the server suspends the connection: under the Standard policy, the term is over.
    let stop = Instant::now();
    server.stop().await.expect("the server did not stop");
    let stopped = Instant::now();
    let signalled = r
        .wait_for("cmd_signalled", BOUND, "the command was not signalled")
        .await;
    assert_eq!(signalled.str("signal"), "SIGTERM");
    assert_eq!(signalled.str("reason"), "suspended", "{}", signalled.json);
    let not_leader = r.next(BOUND, "no not_leader after the signal").await;
    assert_eq!(not_leader.event(), "not_leader", "{}", not_leader.json);
    assert_eq!(not_leader.str("reason"), "suspended");
    let gone = eventually(
        grace + Duration::from_secs(1),
        "the command's process group is not gone",
        || group_gone(pgid),
    )
    .await;
    let exited = r.wait_for("cmd_exited", BOUND, "no cmd_exited").await;
    assert_eq!(exited.int("code"), 143, "sh killed by SIGTERM");
    eprintln!(
        "server stop: began to cmd_signalled {:.1} ms, stop() returned to cmd_signalled \
         {:+.1} ms; not_leader to cmd_signalled {:+.1} ms; cmd_signalled to group gone {:.1} ms",
        ms(signalled.at - stop),
        signed_ms(stopped, signalled.at),
        signed_ms(not_leader.at, signalled.at),
        ms(gone - signalled.at),
    );
}

#[tokio::test]
async fn sigterm_to_run_stops_cmd_and_releases_at_once() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;
    let path = testing::unique_path("cli-run-release");
    let mut groups = Groups::default();

    let mut r1 = Zkr::supervisor(
        connect,
        "r1",
        &["run", &path, "--id", "r1", "--", "sleep", "1000"],
    );
    let started1 = r1
        .wait_for("cmd_started", BOUND, "r1 never started its command")
        .await;
    let pid1 = groups.add(&started1);
    let mut r2 = Zkr::supervisor(
        connect,
        "r2",
        &["run", &path, "--id", "r2", "--", "sleep", "1000"],
    );
    wait_children(&zk, &path, 2, "r2 did not queue").await;

    r1.signal(Signal::SIGTERM);
    let signalled = r1
        .wait_for("cmd_signalled", BOUND, "r1 did not signal its command")
        .await;
    assert_eq!(signalled.str("signal"), "SIGTERM");
    assert_eq!(signalled.str("reason"), "shutdown");
    let exited = r1
        .wait_for("cmd_exited", BOUND, "r1's command did not exit")
        .await;
    assert_eq!(exited.int("code"), 143);
    let released = r1.next(BOUND, "r1 printed no not_leader").await;
    assert_eq!(released.event(), "not_leader");
    assert_eq!(released.str("reason"), "closed");
    assert_eq!(
        r1.exit(BOUND, "r1 after SIGTERM").await.code(),
        Some(143),
        "{}",
        r1.context()
    );
    assert!(group_gone(pid1), "r1's command group outlived r1");

    let led2 = r2.wait_for("leader", BOUND, "r2 never led").await;
    let started2 = r2
        .wait_for("cmd_started", BOUND, "r2 never started its command")
        .await;
    groups.add(&started2);
    assert!(led2.int("token") > started1.int("token"));
    eprintln!(
        "release: r1's cmd_exited to r2's cmd_started {:.1} ms",
        ms(started2.at.duration_since(exited.at))
    );
    r2.signal(Signal::SIGINT);
    assert_eq!(r2.exit(BOUND, "r2 after SIGINT").await.code(), Some(143));
}

#[tokio::test]
async fn frozen_run_leader_is_replaced_and_kills_its_cmd_on_wake() {
    if !zookeeper() {
        return;
    }
    let _one_at_a_time = FAULTS.lock().await;
    let server = own_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;
    let path = testing::unique_path("cli-run-frozen");
    let timeout = Duration::from_secs(2);
    let mut groups = Groups::default();
    let run = |id: &'static str| {
        [
            "--session-timeout",
            "2s",
            "run",
            path.as_str(),
            "--id",
            id,
            "--",
            "sleep",
            "1000",
        ]
    };

    let mut f1 = Zkr::supervisor(connect, "f1", &run("f1"));
    let started1 = f1
        .wait_for("cmd_started", BOUND, "f1 never started its command")
        .await;
    let cmd1 = groups.add(&started1);
    let mut f2 = Zkr::supervisor(connect, "f2", &run("f2"));
    wait_children(&zk, &path, 2, "f2 did not queue").await;

    f1.signal(Signal::SIGSTOP);
    let frozen = Instant::now();
    let freeze = timeout * 5 / 2;
    let started2 = f2
        .wait_for(
            "cmd_started",
            freeze,
            "f2 did not start its command while f1 was frozen",
        )
        .await;
    groups.add(&started2);
    assert!(started2.int("token") > started1.int("token"));
    tokio::time::sleep_until((frozen + freeze).into()).await;
    f1.signal(Signal::SIGCONT);
    let woke = Instant::now();

    let first = f1
        .next(Duration::from_secs(5), "f1 printed nothing after waking")
        .await;
    let delay = first.at - woke;
    assert_eq!(
        first.event(),
        "cmd_signalled",
        "f1's first line after waking: {}",
        first.json
    );
    assert_eq!(first.str("signal"), "SIGTERM");
    assert!(
        delay <= slack(Duration::from_secs(1)),
        "f1 signalled its command {delay:?} after waking"
    );
    let not_leader = f1.next(BOUND, "f1 printed no not_leader").await;
    assert_eq!(not_leader.event(), "not_leader", "{}", not_leader.json);
    assert!(
        matches!(not_leader.str("reason"), "deadline_passed" | "lost"),
        "{}",
        not_leader.json
    );
    eprintln!(
        "frozen runner: SIGCONT to cmd_signalled {:.1} ms ({})",
        ms(delay),
        first.str("reason")
    );

    assert_eq!(
        f1.exit(BOUND, "f1 after its command was stopped")
            .await
            .code(),
        Some(143)
    );
    assert!(group_gone(cmd1), "f1's command group outlived f1");
    let (_, out) = zkr_output(connect, &["leader", &path]).await;
    assert_eq!(out, "f2\n");
    f2.signal(Signal::SIGTERM);
    assert_eq!(f2.exit(BOUND, "f2 after SIGTERM").await.code(), Some(143));
}

#[tokio::test]
async fn killed_zkr_takes_its_cmd_with_it() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cli-run-killed");
    let mut groups = Groups::default();

    let mut r = Zkr::supervisor(connect, "run", &["run", &path, "--", "sleep", "1000"]);
    let started = r
        .wait_for("cmd_started", BOUND, "the runner never started its command")
        .await;
    groups.add(&started);
    let pid = started.int("pid") as i32;
    assert!(running(pid));

    let killed = Instant::now();
    r.signal(Signal::SIGKILL);
    let gone = eventually(
        Duration::from_secs(2),
        "the command outlived its SIGKILLed zkr",
        || !running(pid),
    )
    .await;
    r.exit(BOUND, "zkr after SIGKILL").await;
    eprintln!(
        "parent death: zkr SIGKILLed to its command gone {:.1} ms",
        ms(gone - killed)
    );
}

#[tokio::test]
async fn run_sigkills_a_group_that_ignores_sigterm_after_grace() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cli-run-stubborn");
    let mut groups = Groups::default();

    let mut r = Zkr::supervisor(
        connect,
        "run",
        &[
            "run",
            &path,
            "--grace",
            "1s",
            "--",
            "sh",
            "-c",
            "trap '' TERM; sleep 1000 & wait",
        ],
    );
    let started = r
        .wait_for("cmd_started", BOUND, "the runner never started its command")
        .await;
    let pgid = groups.add(&started);
    eventually(BOUND, "the command's child did not start", || {
        group_members(pgid).len() >= 2
    })
    .await;

    r.signal(Signal::SIGTERM);
    let term = r
        .wait_for("cmd_signalled", BOUND, "no SIGTERM to the command")
        .await;
    assert_eq!(
        (term.str("signal"), term.str("reason")),
        ("SIGTERM", "shutdown")
    );
    let kill = r
        .wait_for("cmd_signalled", BOUND, "no SIGKILL after the grace period")
        .await;
    assert_eq!(
        (kill.str("signal"), kill.str("reason")),
        ("SIGKILL", "grace_expired")
    );
    let waited = kill.at - term.at;
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
        "SIGKILL came {waited:?} after SIGTERM with a 1 s grace"
    );
    assert_eq!(
        r.exit(BOUND, "zkr after SIGKILLing its command")
            .await
            .code(),
        Some(137)
    );
    assert!(group_gone(pgid), "the stubborn group outlived zkr");
}

/// A term whose lease is not renewed stops a CMD that ignores SIGTERM inside the lease, before
/// the quorum can expire the session and a successor can start. A (`--session-timeout 2s`,
/// the default grace: half of the 850 ms limit) runs a bash loop that ignores SIGTERM and
/// writes the time every 50 ms; B waits on a direct link. A's link is blackholed: A's term
/// ends the grace before its lease's deadline (or at once, on a suspension under `standard`),
/// SIGTERM does nothing, and SIGKILL comes at the grace or the lease, whichever first. B's
/// term must begin only after A's whole group is gone. Both error policies. Faults: a client
/// link blackholed; a command that ignores SIGTERM.
#[tokio::test]
async fn run_stops_a_cmd_that_ignores_sigterm_inside_the_lease_before_the_successor_starts() {
    if !zookeeper() {
        return;
    }
    let _one_at_a_time = FAULTS.lock().await;
    let server = own_server().await;
    // The default grace of a 2 s session with the harness's 200 ms tick.
    let grace = Duration::from_millis(425);
    // The default policy (standard), then session-expired.
    for policy in [None, Some("session-expired")] {
        let proxy = proxy_to(&server).await;
        let dir = tempfile::tempdir().unwrap();
        let beats = dir.path().join("a.beats");
        let path = testing::unique_path("cli-run-stubborn-lease");
        let script = stubborn_script(&beats);
        let mut a_args = vec!["--session-timeout", "2s", "run", &path, "--id", "a"];
        if let Some(policy) = policy {
            a_args.extend(["--error-policy", policy]);
        }
        a_args.extend(["--", "bash", "-c", &script]);
        let b_args = ["run", &path, "--id", "b", "--", "sleep", "1000"];
        let mut groups = Groups::default();
        let (mut a, mut b, handover) = stubborn_handover(
            &proxy,
            server.connect_string(),
            &path,
            &a_args[..],
            &b_args[..],
            &beats,
            &mut groups,
        )
        .await;
        let policy = policy.unwrap_or("default policy");
        handover.check(&format!("zkr run, {policy}"), grace, true);
        proxy.heal();
        assert_eq!(
            a.exit(BOUND, "A after its command was SIGKILLed")
                .await
                .code(),
            Some(137),
            "{}",
            a.context()
        );
        b.signal(Signal::SIGTERM);
        assert_eq!(b.exit(BOUND, "B after SIGTERM").await.code(), Some(143));
    }
}

/// `zkr lock` under the same fault as `run` above: the holder's command, which ignores
/// SIGTERM, is gone before the next holder's term begins, and gets its grace first (the hold
/// ends the grace before its lease's deadline, `InterProcessMutexBuilder::stop_ahead`). Both
/// error policies. Faults: a client link blackholed; a command that ignores SIGTERM.
#[tokio::test]
async fn lock_stops_a_cmd_that_ignores_sigterm_inside_the_lease_before_the_next_holder_starts() {
    if !zookeeper() {
        return;
    }
    let _one_at_a_time = FAULTS.lock().await;
    let server = own_server().await;
    let grace = Duration::from_millis(425);
    for policy in [None, Some("session-expired")] {
        let proxy = proxy_to(&server).await;
        let dir = tempfile::tempdir().unwrap();
        let beats = dir.path().join("a.beats");
        let path = testing::unique_path("cli-lock-stubborn-lease");
        let script = stubborn_script(&beats);
        let mut a_args = vec!["--session-timeout", "2s", "lock", &path, "--id", "a"];
        if let Some(policy) = policy {
            a_args.extend(["--error-policy", policy]);
        }
        a_args.extend(["--", "bash", "-c", &script]);
        let b_args = ["lock", &path, "--id", "b", "--", "sleep", "1000"];
        let mut groups = Groups::default();
        let (mut a, mut b, handover) = stubborn_handover(
            &proxy,
            server.connect_string(),
            &path,
            &a_args[..],
            &b_args[..],
            &beats,
            &mut groups,
        )
        .await;
        let policy = policy.unwrap_or("default policy");
        handover.check(&format!("zkr lock, {policy}"), grace, true);
        proxy.heal();
        assert_eq!(
            a.exit(BOUND, "A after its command was SIGKILLed")
                .await
                .code(),
            Some(137),
            "{}",
            a.context()
        );
        b.signal(Signal::SIGTERM);
        assert_eq!(b.exit(BOUND, "B after SIGTERM").await.code(), Some(143));
    }
}

#[tokio::test]
async fn run_with_requeue_runs_cmd_again_each_time_it_leads() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cli-run-requeue");

    let mut r = Zkr::supervisor(
        connect,
        "run",
        &["run", &path, "--requeue", "--", "sleep", "0.1"],
    );
    let first = r.wait_for("cmd_started", BOUND, "no first run").await;
    let exited = r
        .wait_for("cmd_exited", BOUND, "the first run did not end")
        .await;
    assert_eq!(exited.int("code"), 0);
    let second = r
        .wait_for("cmd_started", BOUND, "no second run after requeue")
        .await;
    assert!(
        second.int("token") > first.int("token"),
        "a new term has a higher token"
    );
    r.signal(Signal::SIGTERM);
    let status = r.exit(BOUND, "zkr run --requeue after SIGTERM").await;
    assert!(matches!(status.code(), Some(0 | 143)), "{status}");
}

// ---------------------------------------------------------------------------------------------
// lock

#[tokio::test]
async fn lock_exits_75_on_timeout_and_runs_cmd_with_token_when_free() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;
    let path = testing::unique_path("cli-lock");
    let mut groups = Groups::default();

    let mut holder = Zkr::supervisor(
        connect,
        "holder",
        &["lock", &path, "--id", "holder", "--", "sleep", "1000"],
    );
    let held = holder
        .wait_for("cmd_started", BOUND, "the holder never ran its command")
        .await;
    groups.add(&held);

    let asked = Instant::now();
    let (status, _) = zkr_output(connect, &["lock", &path, "--timeout", "1s", "--", "true"]).await;
    let waited = asked.elapsed();
    assert_eq!(
        status.code(),
        Some(75),
        "a lock that stays taken must time out with 75"
    );
    assert!(
        waited >= Duration::from_secs(1),
        "gave up after {waited:?}, before its timeout"
    );
    assert_eq!(
        children(&zk, &path).await.len(),
        1,
        "the timed-out waiter left its node"
    );

    // A waiter stopped before it got the lock: its CMD never ran, so it must not exit 0.
    let mut waiter = Zkr::supervisor(connect, "waiter", &["lock", &path, "--", "true"]);
    wait_children(&zk, &path, 2, "the waiter never queued").await;
    waiter.signal(Signal::SIGTERM);
    assert_eq!(
        waiter.exit(BOUND, "the waiter after SIGTERM").await.code(),
        Some(143),
        "a lock interrupted while waiting exits 128 + SIGTERM"
    );
    wait_children(&zk, &path, 1, "the interrupted waiter left its node").await;

    holder.signal(Signal::SIGTERM);
    assert_eq!(
        holder.exit(BOUND, "the holder after SIGTERM").await.code(),
        Some(143)
    );

    let file =
        std::env::temp_dir().join(format!("zkr-cli-{}.token", uuid::Uuid::new_v4().simple()));
    let mut next = Zkr::supervisor(
        connect,
        "next",
        &[
            OsStr::new("lock"),
            OsStr::new(&path),
            OsStr::new("--timeout"),
            OsStr::new("10s"),
            OsStr::new("--"),
            OsStr::new("sh"),
            OsStr::new("-c"),
            OsStr::new(r#"echo "$ZK_FENCING_TOKEN" > "$1""#),
            OsStr::new("sh"),
            file.as_os_str(),
        ],
    );
    assert_eq!(
        next.exit(BOUND, "zkr lock on a free lock").await.code(),
        Some(0),
        "{}",
        next.context()
    );
    let token: i64 = std::fs::read_to_string(&file)
        .expect("the command wrote its token")
        .trim()
        .parse()
        .expect("ZK_FENCING_TOKEN is an integer");
    let _ = std::fs::remove_file(&file);
    let led = next
        .drain()
        .into_iter()
        .find(|l| l.event() == "leader")
        .expect("a leader event");
    assert_eq!(token, led.int("token"));
    assert!(
        token > held.int("token"),
        "the later hold has a higher token"
    );
    assert!(
        children(&zk, &path).await.is_empty(),
        "the lock's node outlived the release"
    );
}

// ---------------------------------------------------------------------------------------------
// error policy

/// Waits for `z`'s next `state` line saying `state`, skipping other lines (which stay in `seen`).
async fn wait_state(z: &mut Zkr, state: &str) -> Line {
    let what = format!("no {state} state line");
    loop {
        let line = z.wait_for("state", BOUND, &what).await;
        if line.str("state") == state {
            return line;
        }
    }
}

/// The lines of `z` so far that say a term ended or its command was stopped.
fn term_ends(z: &Zkr) -> Vec<String> {
    z.seen
        .iter()
        .filter(|l| matches!(l.event(), "not_leader" | "cmd_signalled"))
        .map(|l| l.json.to_string())
        .collect()
}

/// `--error-policy session-expired` reaches the recipe of every subcommand that holds a term: a
/// suspension much shorter than the session timeout (the link of every zkr cut for a second
/// through one fault proxy) ends no term of `latch`, `run`, `lock` or `pool`, and no command is
/// signalled; the same cut ends the term of a latch left at the default (`standard`). The
/// contract around it is unchanged: state lines, the exit codes after SIGTERM.
#[tokio::test]
async fn error_policy_session_expired_keeps_every_term_through_a_short_suspension() {
    if !zookeeper() {
        return;
    }
    let _one_at_a_time = FAULTS.lock().await;
    let server = shared_server().await;
    let proxy = common::proxy_to(server).await;
    let via = proxy.connect_string();
    let mut groups = Groups::default();
    let policy = ["--error-policy", "session-expired"];

    let mut standard = Zkr::latch(&via, &testing::unique_path("cli-policy-std"), "std", None);
    let mut c = zkr(&via);
    c.args([
        "latch",
        &testing::unique_path("cli-policy-latch"),
        "--id",
        "latch",
    ])
    .args(policy);
    let mut latch = Zkr::spawn("latch", c, EventsOn::Stdout);
    let mut c = zkr(&via);
    c.args([
        "pool",
        &testing::unique_path("cli-policy-pool"),
        "--jobs",
        "a",
        "--id",
        "pool",
    ])
    .args(policy);
    let mut pool = Zkr::spawn("pool", c, EventsOn::Stdout);
    let run_path = testing::unique_path("cli-policy-run");
    let mut run = Zkr::supervisor(
        &via,
        "run",
        &[
            "run",
            &run_path,
            "--id",
            "run",
            "--error-policy",
            "session-expired",
            "--",
            "sleep",
            "1000",
        ],
    );
    let lock_path = testing::unique_path("cli-policy-lock");
    let mut lock = Zkr::supervisor(
        &via,
        "lock",
        &[
            "lock",
            &lock_path,
            "--id",
            "lock",
            "--error-policy",
            "session-expired",
            "--",
            "sleep",
            "1000",
        ],
    );

    standard
        .wait_for("leader", BOUND, "the standard latch never led")
        .await;
    latch.wait_for("leader", BOUND, "the latch never led").await;
    let job = pool
        .wait_for("leader", BOUND, "the pool member never led its job")
        .await;
    assert_eq!(job.str("job"), "a", "{}", job.json);
    let run_pgid = groups.add(
        &run.wait_for("cmd_started", BOUND, "run never started CMD")
            .await,
    );
    let lock_pgid = groups.add(
        &lock
            .wait_for("cmd_started", BOUND, "lock never started CMD")
            .await,
    );

    let cut = Instant::now();
    proxy.cut();
    for z in [&mut standard, &mut latch, &mut pool, &mut run, &mut lock] {
        wait_state(z, "suspended").await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.heal();
    for z in [&mut standard, &mut latch, &mut pool, &mut run, &mut lock] {
        wait_state(z, "reconnected").await;
    }
    eprintln!(
        "link cut and healed; every zkr reconnected {:.0} ms after the cut",
        ms(cut.elapsed())
    );

    let ended = term_ends(&standard);
    assert!(
        ended.iter().any(|l| l.contains(r#""reason":"suspended""#)),
        "the standard latch's term ended at the suspension: {}",
        standard.context()
    );
    for z in [&mut latch, &mut pool, &mut run, &mut lock] {
        z.drain();
        assert!(
            term_ends(z).is_empty(),
            "under session-expired a short suspension ends no term: {}",
            z.context()
        );
    }
    assert!(
        !group_gone(run_pgid) && !group_gone(lock_pgid),
        "the commands still run"
    );

    // The exit contract is the one without the flag.
    for z in [&standard, &latch, &pool, &run, &lock] {
        z.signal(Signal::SIGTERM);
    }
    let closed = latch
        .wait_for("not_leader", BOUND, "the latch's close")
        .await;
    assert_eq!(closed.str("reason"), "closed", "{}", closed.json);
    for (z, code) in [
        (&mut standard, 0),
        (&mut latch, 0),
        (&mut pool, 0),
        (&mut run, 143),
        (&mut lock, 143),
    ] {
        let status = z.exit(BOUND, "zkr after SIGTERM").await;
        assert_eq!(status.code(), Some(code), "{}", z.context());
    }
}

// ---------------------------------------------------------------------------------------------
// arguments

#[tokio::test]
async fn bad_arguments_exit_2_with_usage() {
    // No server needed: these never get that far.
    let long_id = "x".repeat(zookeeper_recipes::path::MAX_ID_LEN + 1);
    for args in [
        &["run", "/x"][..],
        &["latch"],
        &["leader", "/a//b"],
        &["--session-timeout", "soon", "leader", "x"],
        &["latch", "x", "--id", ""],
        &["lock", "/x", "--timeout", "never", "--", "true"],
        // Ids that would forge or bloat event lines, and reserved paths.
        &["latch", "x", "--id", "a\n{\"event\":\"leader\"}"],
        &["run", "x", "--id", "bell\u{7}", "--", "true"],
        &["lock", "x", "--id", &long_id, "--", "true"],
        &["participants", "/zookeeper/quota"],
        // --error-policy takes standard or session-expired, and only where a term is held.
        &["latch", "x", "--error-policy", "sometimes"],
        &["run", "x", "--error-policy", "", "--", "true"],
        &["lock", "x", "--error-policy", "Standard", "--", "true"],
        &["pool", "x", "--jobs", "a", "--error-policy", "session"],
        &["watch", "x", "--error-policy", "standard"],
        &["participants", "x", "--error-policy", "standard"],
    ] {
        assert_usage_error(args).await;
    }
}

/// `--server-tick-time` takes a positive humantime duration: anything else is a usage error
/// (exit code 2), before zkr connects.
#[tokio::test]
async fn a_server_tick_time_that_is_not_a_positive_duration_exits_2_with_usage() {
    for tick in ["0", "0s", "abc", "-1s", ""] {
        assert_usage_error(&["--server-tick-time", tick, "leader", "x"]).await;
        assert_usage_error(&["run", "x", "--server-tick-time", tick, "--", "true"]).await;
    }
}

/// The TCP sockets of process `pid` in state `state` (`0A` listening, `01` established), as
/// `(local port, remote address)` from `/proc/net/tcp` and `/proc/net/tcp6`.
fn tcp_sockets(pid: u32, state: &str) -> Vec<(u16, String)> {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|l| {
                    let l = l.to_string_lossy().into_owned();
                    Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next().unwrap_or(""), 16).ok();
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .flat_map(|table| {
            std::fs::read_to_string(table)
                .unwrap_or_default()
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let f: Vec<&str> = line.split_whitespace().collect();
                    (f.len() > 9 && f[3] == state && inodes.contains(f[9]))
                        .then(|| Some((port(f[1])?, f[2].to_owned())))
                        .flatten()
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// No local port (issue 42): zkr, like every process using the library, listens on nothing and
/// connects straight to the server. It used to listen on 127.0.0.1 per server and relay its
/// client's connections, which any local process could use to reach the ensemble as zkr.
#[tokio::test]
async fn zkr_listens_on_no_port_and_connects_straight_to_the_server() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let server_port: u16 = connect
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the server's port");
    let mut latch = Zkr::latch(connect, &testing::unique_path("cli-no-port"), "a", None);
    latch
        .wait_for("leader", BOUND, "the latch never printed leader")
        .await;
    let pid = u32::try_from(latch.pid.as_raw()).expect("a pid");
    let listening = tcp_sockets(pid, "0A");
    let established = tcp_sockets(pid, "01");
    eprintln!("zkr latch (pid {pid}): listening {listening:?}, established {established:?}");
    assert!(listening.is_empty(), "zkr listens on {listening:?}");
    let remote_ports: Vec<u16> = established
        .iter()
        .filter_map(|(_, remote)| u16::from_str_radix(remote.rsplit(':').next()?, 16).ok())
        .collect();
    assert!(
        !remote_ports.is_empty() && remote_ports.iter().all(|p| *p == server_port),
        "zkr's connections go to {remote_ports:?}, not only to the server's port {server_port}"
    );
    let _ = latch.child.kill().await;
}

/// `--session-timeout-floor` takes a positive humantime duration too, and a floor below the
/// session timeout is what the lease, and so the grace limit, counts with: a 10 s session on
/// servers that may give 2 s, with a 200 ms tick, leaves 850 ms, as a 2 s session does (exit
/// code 2 and the limit named, before zkr connects).
#[tokio::test]
async fn a_session_timeout_floor_is_checked_and_bounds_the_grace_before_connecting() {
    for floor in ["0", "abc", "-1s", ""] {
        assert_usage_error(&["--session-timeout-floor", floor, "leader", "x"]).await;
    }
    let args = [
        "--connect",
        "127.0.0.1:1",
        "--server-tick-time",
        "200ms",
        "--session-timeout",
        "10s",
        "--session-timeout-floor",
        "2s",
        "run",
        "x",
        "--grace",
        "851ms",
        "--",
        "true",
    ];
    let out = tokio::time::timeout(
        BOUND,
        tokio::process::Command::new(common::zkr::exe())
            .args(args)
            .env_remove("ZK_CONNECT")
            .stdin(std::process::Stdio::null())
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("zkr {args:?} did not give up at once"))
    .expect("zkr ran");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "zkr {args:?}: {err}");
    assert!(
        err.contains("--grace 851ms does not fit") && err.contains("at most 850ms"),
        "zkr {args:?} should name the floor's limit: {err}"
    );
}

/// The lease counts with the servers' tick; without `--server-tick-time`, zkr assumes one and
/// the library warns about it (seen with `ZKR_LOG=zookeeper_recipes=warn`); given, no warning.
#[tokio::test]
async fn an_assumed_server_tick_is_warned_about_and_a_given_one_is_not() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let path = testing::unique_path("cli-tick");
    for (tick, warned) in [(None, true), (Some("200ms"), false)] {
        let mut c = tokio::process::Command::new(common::zkr::exe());
        c.args(["--connect", server.connect_string()]);
        if let Some(tick) = tick {
            c.args(["--server-tick-time", tick]);
        }
        c.args(["leader", &path])
            .env_remove("ZK_CONNECT")
            .env("ZKR_LOG", "zookeeper_recipes=warn")
            .stdin(std::process::Stdio::null());
        let out = tokio::time::timeout(BOUND, c.output())
            .await
            .unwrap_or_else(|_| panic!("zkr leader (tick {tick:?}) did not finish in {BOUND:?}"))
            .expect("zkr ran");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "zkr leader (tick {tick:?}): {err}");
        assert_eq!(
            err.contains("tickTime is not configured") && err.contains("--server-tick-time"),
            warned,
            "--server-tick-time {tick:?}: stderr was:\n{err}"
        );
    }
}

/// A `--grace` that does not fit in the lease of the session timeout is refused before zkr
/// connects (nothing listens at the connect string): exit code 2 and a message that names the
/// limit, for `run`, `lock` and `cron run`. A 2 s session with a 200 ms tick leaves 850 ms.
#[tokio::test]
async fn a_grace_that_does_not_fit_in_the_lease_is_refused_before_connecting() {
    let cmds: [&[&str]; 3] = [
        &["run", "x"],
        &["lock", "x"],
        &["cron", "run", "x", "--every", "1m"],
    ];
    for cmd in cmds {
        for grace in ["5s", "851ms"] {
            let mut args = vec![
                "--connect",
                "127.0.0.1:1",
                "--server-tick-time",
                "200ms",
                "--session-timeout",
                "2s",
            ];
            args.extend_from_slice(cmd);
            args.extend(["--grace", grace, "--", "true"]);
            let out = tokio::time::timeout(
                BOUND,
                tokio::process::Command::new(common::zkr::exe())
                    .args(&args)
                    .env_remove("ZK_CONNECT")
                    .stdin(std::process::Stdio::null())
                    .output(),
            )
            .await
            .unwrap_or_else(|_| panic!("zkr {args:?} did not give up at once"))
            .expect("zkr ran");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "zkr {args:?}: {err}");
            assert!(
                err.contains(&format!("--grace {grace} does not fit"))
                    && err.contains("at most 850ms"),
                "zkr {args:?} should name the limit: {err}"
            );
        }
    }
}

/// Without `--grace`, CMD's grace is 5 s lowered to half the limit the lease leaves: 425 ms
/// for a 2 s session with a 200 ms tick. A grace at the limit (850 ms) is taken as it is. Seen
/// as the time from SIGTERM to SIGKILL of a command that ignores SIGTERM, when zkr is told
/// to stop.
#[tokio::test]
async fn without_grace_cmd_gets_half_the_limit_and_a_grace_at_the_limit_is_taken() {
    if !zookeeper() {
        return;
    }
    // Timing: one at a time.
    let _one_at_a_time = FAULTS.lock().await;
    let server = shared_server().await;
    let connect = server.connect_string();
    for (grace, expected) in [(None, 425), (Some("850ms"), 850)] {
        let path = testing::unique_path("cli-grace-default");
        let mut args = vec!["--session-timeout", "2s", "run", &path];
        if let Some(grace) = grace {
            args.extend(["--grace", grace]);
        }
        args.extend(["--", "sh", "-c", "trap '' TERM; sleep 1000 & wait"]);
        let mut groups = Groups::default();
        let mut r = Zkr::supervisor(connect, "run", &args);
        let started = r
            .wait_for("cmd_started", BOUND, "the runner never started its command")
            .await;
        let pgid = groups.add(&started);
        eventually(BOUND, "the command's child did not start", || {
            group_members(pgid).len() >= 2
        })
        .await;
        r.signal(Signal::SIGTERM);
        let term = r
            .wait_for("cmd_signalled", BOUND, "no SIGTERM to the command")
            .await;
        let kill = r
            .wait_for("cmd_signalled", BOUND, "no SIGKILL after the grace")
            .await;
        assert_eq!(
            (term.str("signal"), kill.str("signal"), kill.str("reason")),
            ("SIGTERM", "SIGKILL", "grace_expired")
        );
        let waited = (kill.int("boot_ns") - term.int("boot_ns")) as f64 / 1e6;
        eprintln!("--grace {grace:?}: SIGTERM to SIGKILL {waited:.0} ms (expected {expected} ms)");
        let expected = f64::from(expected);
        assert!(
            waited >= expected - 10.0 && waited <= expected + 200.0,
            "--grace {grace:?}: SIGKILL came {waited:.0} ms after SIGTERM, not {expected} ms"
        );
        assert_eq!(
            r.exit(BOUND, "zkr after SIGKILLing its command")
                .await
                .code(),
            Some(137)
        );
    }
}

#[tokio::test]
async fn recipes_on_a_path_the_server_refuses_exit_1_saying_why() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let zk = client(connect).await;
    // An election path that is an ephemeral node cannot have children: nothing can ever join.
    let path = testing::unique_path("cli-refused");
    let (parent, _) = path.rsplit_once('/').expect("an absolute path");
    zk.mkdir(
        parent,
        &zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all()),
    )
    .await
    .expect("parent made");
    zk.create(
        &path,
        b"",
        &zookeeper_client::CreateMode::Ephemeral.with_acls(zookeeper_client::Acls::anyone_all()),
    )
    .await
    .expect("ephemeral election path made");
    for args in [
        &["latch", &path, "--id", "a"][..],
        &["run", &path, "--", "true"],
        &["lock", &path, "--", "true"],
    ] {
        let mut c = zkr(connect);
        c.args(args);
        let out = tokio::time::timeout(BOUND, c.output())
            .await
            .unwrap_or_else(|_| panic!("zkr {args:?} waited instead of giving up"))
            .expect("zkr ran");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "zkr {args:?}: {err}");
        assert!(
            err.contains("refused") && err.contains("ephemeral"),
            "zkr {args:?} should say why: {err}"
        );
    }
}

/// The pids whose process group is `pgid`, from /proc.
fn group_members(pgid: Pid) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .is_some_and(|stat| {
                    // Fields after the command: state ppid pgrp ...
                    stat.rsplit_once(')')
                        .map(|(_, rest)| {
                            rest.split_whitespace().nth(2) == Some(&pgid.as_raw().to_string())
                        })
                        .unwrap_or(false)
                })
        })
        .collect()
}
