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
