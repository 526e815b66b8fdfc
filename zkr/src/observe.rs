//! The commands whose output is the election itself, on stdout: `participants` and `leader`
//! read it once, `watch` follows who leads, and `latch` and `pool` take part and print their
//! events, each until SIGINT or SIGTERM.

use std::process::ExitCode;
use std::time::Duration;

use futures::{Stream, StreamExt};
use zookeeper_recipes::{
    CloseMode, ErrorPolicy, LeaderLatch, LeaderObserver, LeaderPool, Leadership, election_nodes_on,
    leader_of, participants_on,
};

use crate::Fail;
use crate::conn::{Conn, close_session, connect};
use crate::output::{self, print_latch_event, print_observer_event, print_pool_event};
use crate::signals::Signals;

/// Prints every event of `events` (one JSON line each, on stdout) until SIGINT or SIGTERM. A
/// failure when stdout breaks, or `stopped()` when the events end by themselves.
async fn print_until_signal<S, T>(
    signals: &mut Signals,
    events: &mut S,
    mut print: impl FnMut(&T) -> std::io::Result<()>,
    stopped: impl FnOnce() -> Fail,
) -> Option<Fail>
where
    S: Stream<Item = T> + Unpin,
{
    loop {
        tokio::select! {
            biased;
            _ = signals.recv() => return None,
            event = events.next() => match event {
                Some(event) => {
                    if let Err(e) = print(&event) {
                        return Some(Fail::new(format!("cannot write to stdout: {e}")));
                    }
                }
                None => return Some(stopped()),
            },
        }
    }
}

pub(crate) async fn latch(
    conn: &Conn,
    session_timeout: Duration,
    path: String,
    id: Option<String>,
    policy: ErrorPolicy,
) -> Result<ExitCode, Fail> {
    let mut signals = Signals::new()?;
    let session = connect(conn, session_timeout).await?;
    let mut builder = LeaderLatch::builder(&session, &path)
        .close_mode(CloseMode::NotifyLeader)
        .error_policy(policy)
        .acl(conn.node_acl());
    if let Some(id) = id {
        builder = builder.id(id);
    }
    let latch = builder
        .start()
        .await
        .map_err(|e| crate::auth::fail(format_args!("cannot join {path}"), &e))?;
    // Subscribed before the latch's task first runs (nothing has awaited since `start`), so no
    // event is missed.
    let events = latch.events();
    tokio::pin!(events);
    let mut term: Option<Leadership> = None;
    let failure = print_until_signal(
        &mut signals,
        &mut events,
        |event| print_latch_event(&latch, event, &mut term),
        || match latch.failure() {
            Some(e) => crate::auth::fail("the latch stopped", &e),
            None => Fail::new("the latch stopped unexpectedly"),
        },
    )
    .await;
    // Deletes our node (the successor is elected at once) and, with NotifyLeader, reports
    // not_leader/closed if this latch led; then the event stream ends.
    latch.close().await?;
    let drain = async {
        while let Some(event) = events.next().await {
            if print_latch_event(&latch, &event, &mut term).is_err() {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
    close_session(&session).await;
    match failure {
        Some(f) => Err(f),
        None => Ok(ExitCode::SUCCESS),
    }
}

pub(crate) async fn watch(
    conn: &Conn,
    session_timeout: Duration,
    path: String,
    lock_name: Option<String>,
) -> Result<ExitCode, Fail> {
    let mut signals = Signals::new()?;
    let session = connect(conn, session_timeout).await?;
    let mut builder = LeaderObserver::builder(&session, &path);
    if let Some(lock_name) = lock_name {
        builder = builder.lock_name(lock_name);
    }
    let observer = builder
        .start()
        .await
        .map_err(|e| crate::auth::fail(format_args!("cannot watch {path}"), &e))?;
    // Subscribed before the observer's task first runs: its first report is not missed.
    let events = observer.events();
    tokio::pin!(events);
    let failure =
        print_until_signal(
            &mut signals,
            &mut events,
            print_observer_event,
            || match observer.failure() {
                Some(e) => crate::auth::fail("the observer stopped", &e),
                None => Fail::new("the observer stopped unexpectedly"),
            },
        )
        .await;
    observer.close().await?;
    close_session(&session).await;
    match failure {
        Some(f) => Err(f),
        None => Ok(ExitCode::SUCCESS),
    }
}

pub(crate) async fn pool(
    conn: &Conn,
    session_timeout: Duration,
    root: String,
    jobs: Vec<String>,
    id: Option<String>,
    policy: ErrorPolicy,
) -> Result<ExitCode, Fail> {
    let mut signals = Signals::new()?;
    let session = connect(conn, session_timeout).await?;
    let mut builder = LeaderPool::builder(&session, &root)
        .jobs(jobs)
        .error_policy(policy)
        .acl(conn.node_acl());
    if let Some(id) = id {
        builder = builder.id(id);
    }
    let pool = builder.start().await?;
    let events = pool.events();
    tokio::pin!(events);
    let failure = print_until_signal(
        &mut signals,
        &mut events,
        |event| print_pool_event(pool.id(), event),
        || match pool.failure() {
            Some(e) => Fail::new(format!("the pool stopped: {e}")),
            None => Fail::new("the pool stopped unexpectedly"),
        },
    )
    .await;
    // Leaves gracefully; the events of the releases follow, then the stream ends.
    let close = pool.close();
    tokio::pin!(close);
    let mut closed = false;
    let drain = async {
        loop {
            tokio::select! {
                r = &mut close, if !closed => { closed = true; r?; }
                event = events.next() => match event {
                    Some(event) => { let _ = print_pool_event(pool.id(), &event); }
                    None => break,
                },
            }
        }
        if !closed {
            close.await?;
        }
        Ok::<(), zookeeper_recipes::Error>(())
    };
    let bound = session_timeout + Duration::from_secs(5);
    if let Ok(r) = tokio::time::timeout(bound, drain).await {
        r?;
    }
    close_session(&session).await;
    match failure {
        Some(f) => Err(f),
        None => Ok(ExitCode::SUCCESS),
    }
}

pub(crate) async fn participants(
    conn: &Conn,
    session_timeout: Duration,
    path: &str,
) -> Result<ExitCode, Fail> {
    let session = connect(conn, session_timeout).await?;
    // Foreign nodes too (marked): an operator must see what stalls the Curator peers.
    let result = election_nodes_on(&session, path).await;
    close_session(&session).await;
    let list = result.map_err(|e| crate::auth::fail(format_args!("cannot read {path}"), &e))?;
    let lines: Vec<output::ParticipantLine<'_>> = list.iter().map(Into::into).collect();
    println!("{}", output::to_json(&lines)?);
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn leader(
    conn: &Conn,
    session_timeout: Duration,
    path: &str,
) -> Result<ExitCode, Fail> {
    let session = connect(conn, session_timeout).await?;
    let result = participants_on(&session, path).await;
    close_session(&session).await;
    let list = result.map_err(|e| crate::auth::fail(format_args!("cannot read {path}"), &e))?;
    // Bare when plain (as always), else a JSON string: the id is a stranger's input.
    println!("{}", output::bare_or_json(&leader_of(list).id));
    Ok(ExitCode::SUCCESS)
}
