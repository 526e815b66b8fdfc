//! The examples' code, run against real ZooKeeper: the statement job's fencing in SQLite.

use zookeeper_recipes_rigs::fixtures as common;

// The example's job, included rather than copied; its `main` is unused here.
#[allow(dead_code)]
#[path = "../../examples/statement_job.rs"]
mod statement_job;

use std::time::Duration;

use tokio::sync::mpsc;
use zookeeper_recipes::FencingToken;
use zookeeper_recipes::job::Schedule;
use zookeeper_recipes_testing as testing;

use common::within;
use statement_job::{Claim, Progress, StatementJob, Statements, Write};

const SLOT: &str = "2026-12-03T01:00:00Z";

fn database() -> (tempfile::TempDir, Statements, Statements) {
    let dir = tempfile::tempdir().expect("no temporary directory");
    let path = dir.path().join("statements.db");
    let a = Statements::open(&path).expect("cannot open the database");
    let b = Statements::open(&path).expect("cannot open the database a second time");
    (dir, a, b)
}

/// Waits for the next progress report that `pick` accepts, skipping others.
async fn next<T>(
    progress: &mut mpsc::UnboundedReceiver<Progress>,
    what: &str,
    mut pick: impl FnMut(&Progress) -> Option<T>,
) -> T {
    within(Duration::from_secs(30), what, async {
        loop {
            let p = progress
                .recv()
                .await
                .unwrap_or_else(|| panic!("the jobs stopped reporting before: {what}"));
            if let Some(v) = pick(&p) {
                return v;
            }
        }
    })
    .await
}

#[tokio::test]
async fn a_write_with_an_older_token_changes_no_row_and_a_newer_one_takes_over() {
    let (_dir, a, b) = database();
    let (old, new) = (FencingToken::from_raw(7), FencingToken::from_raw(9));
    let claim = |db: &Statements, writer: &'static str, token: FencingToken| {
        let db = db.clone();
        async move {
            db.claim(SLOT, "2026-12-02", 10, 1, writer, token)
                .await
                .expect("claim")
        }
    };
    assert!(matches!(claim(&a, "a", old).await, Claim::Owned(_)));
    // The same term claiming again (its first reply lost) still owns the run.
    assert!(matches!(claim(&a, "a", old).await, Claim::Owned(_)));
    assert_eq!(
        a.write_batch(SLOT, 1, "a", old).await.expect("write"),
        Write::Applied
    );
    assert_eq!(
        a.write_batch(SLOT, 2, "a", old).await.expect("write"),
        Write::Applied
    );
    // A retry with a higher token takes the run over and resumes after batch 2.
    match claim(&b, "b", new).await {
        Claim::Owned(run) => assert_eq!(run.batches_done, 2),
        Claim::Deposed => panic!("a newer token must take the run over"),
    }
    assert_eq!(
        b.write_batch(SLOT, 3, "b", new).await.expect("write"),
        Write::Applied
    );
    assert_eq!(
        a.write_batch(SLOT, 4, "a", old).await.expect("write"),
        Write::Deposed,
        "an older token must change no row"
    );
    assert_eq!(
        claim(&a, "a", old).await,
        Claim::Deposed,
        "an older token must not claim the run back"
    );
    let run = b.run(SLOT).await.expect("read").expect("the run exists");
    assert_eq!((run.batches_done, run.fencing_token), (3, new));
    assert_eq!(run.updated_by.as_deref(), Some("b"));
}

#[test]
fn the_business_date_is_the_day_before_the_slot_in_the_jobs_zone() {
    let oslo: chrono_tz::Tz = "Europe/Oslo".parse().unwrap();
    // 02:00 in Oslo on 3 December is 01:00 UTC; 00:30 in Oslo is still 2 December in UTC.
    let at = |key: &str| Schedule::parse_key(key).unwrap();
    assert_eq!(
        statement_job::business_date(at("2026-12-03T01:00:00Z"), oslo),
        "2026-12-02"
    );
    assert_eq!(
        statement_job::business_date(at("2026-12-02T23:30:00Z"), oslo),
        "2026-12-02"
    );
    assert_eq!(
        statement_job::business_date(at("2026-12-02T23:30:00Z"), chrono_tz::UTC),
        "2026-12-01"
    );
}

/// Leader a runs a slot; its session is expired halfway; b re-runs the same slot with attempt 2
/// and a higher token, resumes after a's last batch, and a's late write changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deposed_statement_job_leader_cannot_write_and_the_row_keeps_its_successors_token() {
    if !common::zookeeper() {
        return;
    }
    let server = common::shared_server().await;
    let path = testing::unique_path("statement-job");
    let (_dir, db_a, db_b) = database();
    let (progress_tx, mut progress) = mpsc::unbounded_channel();
    let job = |db: &Statements| StatementJob {
        db: db.clone(),
        zone: chrono_tz::UTC,
        total_batches: 1_000,
        pace: Duration::from_millis(50),
        progress: progress_tx.clone(),
    };
    let schedule = Schedule::every(Duration::from_secs(1)).expect("schedule");

    // Instance a reaches ZooKeeper through a proxy, so that its session can be expired behind it.
    let proxy_a = common::proxy_to(server).await;
    let session_a = common::session(&proxy_a.connect_string(), Duration::from_secs(4)).await;
    let job_a = statement_job::start_replica(&session_a, &path, "a", schedule.clone(), job(&db_a))
        .await
        .expect("instance a did not start");
    let (slot, token_a, last_a) = next(
        &mut progress,
        "a batch written by instance a",
        |p| match p {
            Progress::Wrote {
                slot,
                writer,
                token,
                batch,
            } if writer == "a" => Some((slot.clone(), *token, *batch)),
            _ => None,
        },
    )
    .await;

    let session_b = common::session(server.connect_string(), Duration::from_secs(4)).await;
    let job_b = statement_job::start_replica(&session_b, &path, "b", schedule, job(&db_b))
        .await
        .expect("instance b did not start");

    // Depose a: its session is expired on the server (Curator's KillSession).
    common::expire_behind(server, &proxy_a, &session_a).await;
    next(&mut progress, "instance a to stop its run", |p| {
        matches!(p, Progress::Stopped { writer, .. } if writer == "a").then_some(())
    })
    .await;
    let (attempt_b, recovering_b) = next(
        &mut progress,
        "instance b to run the cut-off slot again",
        |p| match p {
            Progress::Started {
                slot: s,
                writer,
                attempt,
                recovering,
                ..
            } if writer == "b" && *s == slot => Some((*attempt, *recovering)),
            _ => None,
        },
    )
    .await;
    assert_eq!(
        (attempt_b, recovering_b),
        (2, true),
        "the successor runs the cut-off slot {slot} as attempt 2, recovering"
    );
    let (token_b, batch_b) = next(
        &mut progress,
        "a batch written by instance b",
        |p| match p {
            Progress::Wrote {
                slot: s,
                writer,
                token,
                batch,
            } if writer == "b" && *s == slot => Some((*token, *batch)),
            _ => None,
        },
    )
    .await;
    eprintln!(
        "slot {slot}: instance a token {token_a}, last batch {last_a}; instance b token {token_b}, batch {batch_b}"
    );
    assert!(
        token_b > token_a,
        "the successor's token {token_b} must be higher than the deposed leader's {token_a}"
    );
    assert!(
        batch_b > last_a,
        "b resumes after a's last batch {last_a}, wrote {batch_b}"
    );

    // a's stale write, as a paused job would send it on waking: zero rows change.
    let stale = db_a
        .write_batch(&slot, batch_b + 1, "a", token_a)
        .await
        .expect("the stale write failed instead of being rejected");
    assert_eq!(
        stale,
        Write::Deposed,
        "the deposed leader's write changed the run"
    );
    let run = db_b
        .run(&slot)
        .await
        .expect("read")
        .expect("the run exists");
    assert_eq!(
        run.fencing_token, token_b,
        "the run carries token {}, not the successor's {token_b}",
        run.fencing_token
    );
    assert_eq!((run.updated_by.as_deref(), run.attempt), (Some("b"), 2));

    job_a.close().await.expect("close a");
    job_b.close().await.expect("close b");
    session_a.close().await.expect("close session a");
    session_b.close().await.expect("close session b");
}

/// A running `service` example (a replica): its stdout lines come through a channel.
struct Replica {
    child: tokio::process::Child,
    lines: mpsc::UnboundedReceiver<String>,
}

impl Replica {
    fn start(
        exe: &std::path::Path,
        connect: &str,
        path: &str,
        id: &str,
        db: &std::path::Path,
    ) -> Self {
        let mut command = tokio::process::Command::new(exe);
        command
            .args(["--id", id, "--path", path, "--listen", "127.0.0.1:0"])
            .arg("--db")
            .arg(db)
            // A session timeout far above the bounds below: a successor that came only after
            // the old session expired would fail the test.
            .args(["--session-timeout", "40s", "--every", "200ms"]);
        Replica::spawn(command, connect)
    }

    fn spawn(mut command: tokio::process::Command, connect: &str) -> Self {
        use tokio::io::AsyncBufReadExt;
        let mut child = command
            .env("ZK_CONNECT", connect)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("cannot start the example");
        let stdout = child.stdout.take().expect("no stdout");
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Replica { child, lines }
    }

    /// Waits for the next line that starts with `prefix`; returns the rest.
    async fn line(&mut self, prefix: &str, bound: Duration) -> String {
        let lines = &mut self.lines;
        within(
            bound,
            &format!("a line {prefix:?} from the service"),
            async {
                loop {
                    let line = lines
                        .recv()
                        .await
                        .unwrap_or_else(|| panic!("the service exited before printing {prefix:?}"));
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.trim().to_owned();
                    }
                }
            },
        )
        .await
    }

    /// Waits for the next line that contains `marker`; returns what follows it, up to a space.
    async fn after(&mut self, marker: &str, bound: Duration) -> String {
        let lines = &mut self.lines;
        within(
            bound,
            &format!("a line with {marker:?} from the example"),
            async {
                loop {
                    let line = lines
                        .recv()
                        .await
                        .unwrap_or_else(|| panic!("the example exited before printing {marker:?}"));
                    if let Some((_, rest)) = line.split_once(marker) {
                        return rest.split_whitespace().next().unwrap_or("").to_owned();
                    }
                }
            },
        )
        .await
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = self.child.id().expect("the service already exited");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal)
            .expect("cannot signal the service");
    }
}

/// An example's binary, as `cargo test` builds it beside this test (`target/<profile>/examples`).
/// A test cannot build it itself (cargo holds the build directory while tests run): after
/// `cargo test --test recipes` alone it may be missing or older than its source, and then the test
/// says so rather than run a stale binary.
fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("no current exe");
    // target/debug/deps/examples-HASH -> target/debug/examples/NAME
    let profile = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("not in target/<profile>/deps");
    let binary = profile.join("examples").join(name);
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(format!("{name}.rs"));
    let modified = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let fresh = match (modified(&binary), modified(&source)) {
        (Some(built), Some(written)) => built >= written,
        _ => false,
    };
    assert!(
        fresh,
        "{} is missing or older than {}: run `cargo build --examples` first (a plain `cargo test` \
         builds the examples before it runs the tests)",
        binary.display(),
        source.display()
    );
    binary
}

/// The README's demo, against this binary's server: it exits 0 only if its story held (one
/// leader at a time, rising tokens, the frozen leader's late write rejected by the fence, and
/// the frozen leader seeing by itself that its term was over). Faults: SIGKILL of a leader,
/// SIGSTOP of a leader past its session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_story_holds() {
    if !common::zookeeper() {
        return;
    }
    let exe = example("demo");
    let server = common::shared_server().await;
    let output = within(
        Duration::from_secs(120),
        "the demo to finish its story",
        tokio::process::Command::new(&exe)
            .env("ZK_CONNECT", server.connect_string())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("cannot run the demo");
    assert!(
        output.status.success(),
        "the demo's story did not hold ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Two replicas of the `service` example. SIGTERM to the leader: it deletes its node before it
/// exits (status 0), and the other replica takes over and writes with a newer token, long
/// before the old session (40 s) could have expired; SIGINT stops the other one the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_example_hands_over_at_once_on_sigterm() {
    use nix::sys::signal::Signal;
    if !common::zookeeper() {
        return;
    }
    let exe = example("service");
    let server = common::shared_server().await;
    let path = testing::unique_path("service-example");
    let dir = tempfile::tempdir().expect("no temporary directory");
    let db = dir.path().join("service.db");
    let observer = common::session(server.connect_string(), Duration::from_secs(10)).await;
    let bound = Duration::from_secs(15);

    let mut a = Replica::start(&exe, server.connect_string(), &path, "a", &db);
    a.line("ready on", bound).await;
    let first: i64 = a.line("leading with token", bound).await.parse().unwrap();
    a.line("ran the job", bound).await;
    let mut b = Replica::start(&exe, server.connect_string(), &path, "b", &db);
    b.line("ready on", bound).await;
    common::eventually(bound, "both replicas' nodes", || {
        let s = observer.clone();
        let p = path.clone();
        async move { (common::children(&s, &p).await.len() == 2).then_some(()) }
    })
    .await;

    a.signal(Signal::SIGTERM);
    a.line("stopped", bound).await;
    let status = within(bound, "the leader to exit after SIGTERM", a.child.wait())
        .await
        .unwrap();
    assert!(status.success(), "SIGTERM must be a clean exit: {status}");
    let left = common::children(&observer, &path).await;
    assert_eq!(
        left.len(),
        1,
        "the leader's node must be gone when it exits: {left:?}"
    );
    let second: i64 = b.line("leading with token", bound).await.parse().unwrap();
    assert!(
        second > first,
        "the successor's token {second} must pass {first}"
    );
    b.line("ran the job (token", bound).await;

    b.signal(Signal::SIGINT);
    b.line("stopped", bound).await;
    let status = within(
        bound,
        "the second replica to exit after SIGINT",
        b.child.wait(),
    )
    .await
    .unwrap();
    assert!(status.success(), "SIGINT must be a clean exit: {status}");
    assert!(common::children(&observer, &path).await.is_empty());
    let row: (i64, String) = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT fencing_token, run_by FROM jobs WHERE name = 'hourly'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        row,
        (second, "b".to_owned()),
        "the row carries the successor's token"
    );
    observer.close().await.unwrap();
}

/// `GET /metrics` over plain HTTP/1.0: the body.
async fn scrape(addr: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("cannot reach {addr}: {e}"));
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).await.unwrap();
    let (head, body) = response
        .split_once("\r\n\r\n")
        .expect("not an HTTP response");
    assert!(head.contains(" 200 "), "{head}");
    body.to_owned()
}

/// The value of the sample of `name` whose labels contain every one of `labels`.
fn sample(body: &str, name: &str, labels: &[&str]) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Two replicas of the `health` example, their `/metrics` scraped across a failover: the leader
/// shows `zookeeper_recipes_leader` 1 and its token; after SIGTERM to it, the other shows 1, a
/// higher token, one term started and held, a handover seen by its observer, its connection
/// state, and no session loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_example_metrics_follow_a_failover() {
    use nix::sys::signal::Signal;
    use zookeeper_recipes::metrics as m;
    if !common::zookeeper() {
        return;
    }
    let exe = example("health");
    let server = common::shared_server().await;
    let path = testing::unique_path("health-metrics");
    let bound = Duration::from_secs(15);
    let start = |id: &str| {
        let mut command = tokio::process::Command::new(&exe);
        command.args(["--id", id, "--path", &path, "--listen", "127.0.0.1:0"]);
        Replica::spawn(command, server.connect_string())
    };
    let path_label = format!("path=\"{path}\"");
    let a_labels = [path_label.clone(), "id=\"a\"".to_owned()];
    let b_labels = [path_label.clone(), "id=\"b\"".to_owned()];
    let refs = |l: &[String; 2]| [l[0].clone(), l[1].clone()];

    let mut a = start("a");
    let a_addr = a.after("serving http://", bound).await;
    let a_addr = a_addr.trim_end_matches("/healthz,").to_owned();
    let first = common::eventually(bound, "a's metrics to show it leading", || {
        let addr = a_addr.clone();
        let labels = refs(&a_labels);
        async move {
            let body = scrape(&addr).await;
            let labels = [labels[0].as_str(), labels[1].as_str()];
            (sample(&body, m::LEADER, &labels) == Some(1.0))
                .then(|| sample(&body, m::FENCING_TOKEN, &labels))
                .flatten()
        }
    })
    .await;
    assert!(first > 0.0);

    let mut b = start("b");
    let b_addr = b.after("serving http://", bound).await;
    let b_addr = b_addr.trim_end_matches("/healthz,").to_owned();
    let b_refs = [b_labels[0].as_str(), b_labels[1].as_str()];
    let body = scrape(&b_addr).await;
    assert_ne!(
        sample(&body, m::LEADER, &b_refs),
        Some(1.0),
        "b must not lead yet:\n{body}"
    );
    assert_eq!(
        sample(&body, m::CONNECTION_STATE_CHANGES, &["state=\"connected\""]),
        Some(1.0),
        "{body}"
    );

    // b's observer has seen a lead, so that the failover is a handover it counts.
    let mut seen = b.after("leader: ", bound).await;
    while seen != "a" {
        seen = b.after("leader: ", bound).await;
    }
    a.signal(Signal::SIGTERM);
    let status = within(bound, "a to exit after SIGTERM", a.child.wait())
        .await
        .unwrap();
    assert!(status.success(), "{status}");

    let body = common::eventually(bound, "b's metrics to show it leading", || {
        let addr = b_addr.clone();
        let labels = refs(&b_labels);
        async move {
            let body = scrape(&addr).await;
            let labels = [labels[0].as_str(), labels[1].as_str()];
            (sample(&body, m::LEADER, &labels) == Some(1.0)).then_some(body)
        }
    })
    .await;
    let second = sample(&body, m::FENCING_TOKEN, &b_refs).expect("b's token");
    assert!(
        second > first,
        "b's token {second} must pass a's {first}:\n{body}"
    );
    assert_eq!(
        sample(&body, m::TERMS_STARTED, &b_refs),
        Some(1.0),
        "{body}"
    );
    assert_eq!(sample(&body, m::TERMS_HELD, &[]), Some(1.0), "{body}");
    // The observer reports the new leader on its own watch, soon after the latch's term.
    common::eventually(bound, "b's observer to count the handover", || {
        let addr = b_addr.clone();
        let label = path_label.clone();
        async move {
            let body = scrape(&addr).await;
            sample(&body, m::LEADER_CHANGES, &[label.as_str()]).filter(|n| *n >= 1.0)
        }
    })
    .await;
    assert!(body.contains(m::TIME_TO_LEADERSHIP), "{body}");
    assert_eq!(
        sample(&body, m::SESSION_LOSSES, &[]),
        None,
        "no session was lost:\n{body}"
    );

    b.signal(Signal::SIGINT);
    let status = within(bound, "b to exit after SIGINT", b.child.wait())
        .await
        .unwrap();
    assert!(status.success(), "{status}");
}
