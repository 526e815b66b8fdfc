//! The examples' code, run against real ZooKeeper: the statement job's fencing in SQLite.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

// The example's job, included rather than copied; its `main` is unused here.
#[allow(dead_code)]
#[path = "../examples/statement_job.rs"]
mod statement_job;

use std::time::Duration;

use tokio::sync::mpsc;
use zookeeper_recipes::FencingToken;
use zookeeper_recipes::testing;

use common::within;
use statement_job::{Progress, Statements, Write};

const RUN: &str = "2026-12-01";

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
    a.schedule(RUN, 10).await.expect("schedule");
    let (old, new) = (FencingToken::from_raw(7), FencingToken::from_raw(9));
    assert_eq!(
        a.write_batch(RUN, 1, "a", old).await.expect("write"),
        Write::Applied
    );
    assert_eq!(
        a.write_batch(RUN, 2, "a", old).await.expect("write"),
        Write::Applied
    );
    assert_eq!(
        b.write_batch(RUN, 3, "b", new).await.expect("write"),
        Write::Applied
    );
    assert_eq!(
        a.write_batch(RUN, 4, "a", old).await.expect("write"),
        Write::Deposed,
        "an older token must change no row"
    );
    let run = b.run(RUN).await.expect("read").expect("the run exists");
    assert_eq!((run.batches_done, run.fencing_token), (3, new));
    assert_eq!(run.updated_by.as_deref(), Some("b"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deposed_statement_job_leader_cannot_write_and_the_row_keeps_its_successors_token() {
    if !common::zookeeper() {
        return;
    }
    let server = common::shared_server().await;
    let path = testing::unique_path("statement-job");
    let (_dir, db_a, db_b) = database();
    db_a.schedule(RUN, 1_000).await.expect("schedule");
    let pace = Duration::from_millis(50);
    let (progress_tx, mut progress) = mpsc::unbounded_channel();

    // Instance a reaches ZooKeeper through a proxy, so that its session can be expired behind it.
    let proxy_a = common::proxy_to(server).await;
    let session_a = common::session(&proxy_a.connect_string(), Duration::from_secs(4)).await;
    let selector_a = statement_job::start_replica(
        &session_a,
        &path,
        "a",
        db_a.clone(),
        RUN,
        pace,
        progress_tx.clone(),
    )
    .await
    .expect("instance a did not start");
    let (token_a, last_a) = next(
        &mut progress,
        "a batch written by instance a",
        |p| match p {
            Progress::Wrote {
                writer,
                token,
                batch,
            } if writer == "a" => Some((*token, *batch)),
            _ => None,
        },
    )
    .await;

    let session_b = common::session(server.connect_string(), Duration::from_secs(4)).await;
    let selector_b = statement_job::start_replica(
        &session_b,
        &path,
        "b",
        db_b.clone(),
        RUN,
        pace,
        progress_tx.clone(),
    )
    .await
    .expect("instance b did not start");

    // Depose a: its session is expired on the server (Curator's KillSession).
    common::expire_behind(server, &proxy_a, &session_a).await;
    next(&mut progress, "instance a to stop its job", |p| {
        matches!(p, Progress::Stopped { writer, .. } if writer == "a").then_some(())
    })
    .await;
    let (token_b, batch_b) = next(
        &mut progress,
        "a batch written by instance b",
        |p| match p {
            Progress::Wrote {
                writer,
                token,
                batch,
            } if writer == "b" => Some((*token, *batch)),
            _ => None,
        },
    )
    .await;
    eprintln!(
        "instance a: token {token_a}, last batch {last_a}; instance b: token {token_b}, batch {batch_b}"
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
        .write_batch(RUN, batch_b + 1, "a", token_a)
        .await
        .expect("the stale write failed instead of being rejected");
    assert_eq!(
        stale,
        Write::Deposed,
        "the deposed leader's write changed the run"
    );
    let run = db_b.run(RUN).await.expect("read").expect("the run exists");
    assert!(
        run.fencing_token >= token_b,
        "the run carries token {}, not the successor's {token_b}",
        run.fencing_token
    );
    assert_eq!(run.updated_by.as_deref(), Some("b"));

    selector_a.close().await.expect("close a");
    selector_b.close().await.expect("close b");
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
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new(exe)
            .args(["--id", id, "--path", path, "--listen", "127.0.0.1:0"])
            .arg("--db")
            .arg(db)
            // A session timeout far above the bounds below: a successor that came only after
            // the old session expired would fail the test.
            .args(["--session-timeout", "40s", "--every", "200ms"])
            .env("ZK_CONNECT", connect)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("cannot start the service example");
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

    fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = self.child.id().expect("the service already exited");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal)
            .expect("cannot signal the service");
    }
}

/// The `service` example binary: next to this test's directory, else built now.
fn service_example() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("no current exe");
    // target/debug/deps/examples-HASH -> target/debug/examples/service
    let profile = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("not in target/<profile>/deps");
    let service = profile.join("examples").join("service");
    if !service.is_file() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = std::process::Command::new(cargo)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["build", "--example", "service"])
            .status()
            .expect("cannot run cargo to build the service example");
        assert!(status.success(), "cargo build --example service failed");
    }
    service
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
    let exe = service_example();
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
