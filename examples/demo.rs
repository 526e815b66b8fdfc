//! The demo: a nightly statement job that must run on exactly one of three replicas.
//!
//! ```text
//! cargo run --example demo
//! ```
//!
//! It starts an embedded ZooKeeper (a real server process, from Debian's `zookeeper` package or
//! `$ZOOKEEPER_HOME`), or uses `$ZK_CONNECT` if set. Three replicas run a `LeaderSelector` on
//! `/election/statement-job`; the leader writes statement batches to a ledger that is guarded by
//! a `Fence`. Then the leader's network is partitioned: its term ends at its deadline (it stops
//! by itself, no network needed), another replica takes over with a higher fencing token, and a
//! write that the old leader had prepared before the partition is rejected by the fence. The
//! partition heals, the old replica rejoins as a follower, and everything shuts down cleanly.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, mpsc};
use zookeeper_recipes::testing::{FaultProxy, TestingServer};
use zookeeper_recipes::{
    Fence, FencingToken, LeaderSelector, Leadership, Session, StaleToken, TermEnd, participants_on,
};

const PATH: &str = "/election/statement-job";
const SESSION_TIMEOUT: Duration = Duration::from_secs(3);

/// The protected resource: a ledger that only the current term may append to.
#[derive(Default)]
struct Ledger {
    fence: Fence,
    lines: Mutex<Vec<String>>,
}

impl Ledger {
    async fn append(&self, token: FencingToken, line: String) -> Result<(), StaleToken> {
        self.fence.admit(token)?;
        self.lines.lock().await.push(line);
        Ok(())
    }
}

enum Note {
    Term {
        replica: usize,
        token: FencingToken,
    },
    Batch {
        replica: usize,
        batch: u64,
    },
    Stopped {
        replica: usize,
        token: FencingToken,
        why: &'static str,
    },
}

fn say(started: Instant, what: impl AsRef<str>) {
    println!(
        "[{:>6.2}s] {}",
        started.elapsed().as_secs_f64(),
        what.as_ref()
    );
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    let started = Instant::now();
    let (_server, upstream) = match std::env::var("ZK_CONNECT") {
        Ok(connect) => {
            say(
                started,
                format!("using the ZooKeeper ensemble at {connect} (ZK_CONNECT)"),
            );
            (None, connect)
        }
        Err(_) => {
            let server = TestingServer::start().await.map_err(|e| {
                format!("could not start an embedded ZooKeeper: {e}\n(or point the demo at a running one with ZK_CONNECT=host:port)")
            })?;
            let connect = server.connect_string().to_owned();
            say(
                started,
                format!("started an embedded ZooKeeper on {connect}"),
            );
            (Some(server), connect)
        }
    };
    let ledger = Arc::new(Ledger::default());
    let batches = Arc::new(AtomicU64::new(0));
    let (notes_tx, mut notes) = mpsc::unbounded_channel();

    // Each replica reaches ZooKeeper through a proxy, so that the demo can partition one.
    let mut replicas = Vec::new();
    for replica in 0..3 {
        let proxy = FaultProxy::start(std::slice::from_ref(&upstream)).await?;
        let session = Session::builder(proxy.connect_string())
            .session_timeout(SESSION_TIMEOUT)
            .connect()
            .await?;
        let ledger = Arc::clone(&ledger);
        let batches = Arc::clone(&batches);
        let notes = notes_tx.clone();
        let selector = LeaderSelector::builder(&session, PATH)
            .id(format!("replica-{replica}"))
            .auto_requeue(true)
            .start(move |term: Leadership| {
                let ledger = Arc::clone(&ledger);
                let batches = Arc::clone(&batches);
                let notes = notes.clone();
                async move { statement_job(replica, term, &ledger, &batches, &notes).await }
            })
            .await?;
        replicas.push((proxy, session, selector));
    }

    // Let the first leader write a few batches.
    let first = loop {
        match notes.recv().await {
            Some(Note::Term { replica, token }) => {
                say(
                    started,
                    format!("replica-{replica} is elected, fencing token {token}"),
                );
                break (replica, token);
            }
            Some(_) => continue,
            None => return Err("the replicas stopped".into()),
        }
    };
    let session = &replicas[0].1;
    let ps = participants_on(session, PATH).await?;
    say(
        started,
        format!(
            "participants in election order: {}",
            serde_json::to_string(&ps)?
        ),
    );
    wait_batches(&mut notes, started, 3).await?;

    // The zombie: the leader prepared a write, then got paused past its session.
    let (leader, old_token) = first;
    say(
        started,
        format!("partitioning replica-{leader} from ZooKeeper (a silent network partition)"),
    );
    let partitioned_at = Instant::now();
    replicas[leader].0.blackhole();
    let (next, _new_token) = loop {
        match notes.recv().await {
            Some(Note::Stopped {
                replica,
                token,
                why,
            }) => say(
                started,
                format!(
                    "replica-{replica} stops its job by itself ({why}) {:.2}s after the partition, token {token}",
                    partitioned_at.elapsed().as_secs_f64()
                ),
            ),
            Some(Note::Term { replica, token }) => {
                say(
                    started,
                    format!(
                        "replica-{replica} takes over {:.2}s after the partition with token {token} (> {old_token})",
                        partitioned_at.elapsed().as_secs_f64()
                    ),
                );
                break (replica, token);
            }
            Some(Note::Batch { .. }) => {}
            None => return Err("the replicas stopped".into()),
        }
    };
    wait_batches(&mut notes, started, 2).await?;
    match ledger
        .append(old_token, "zombie batch from the paused leader".into())
        .await
    {
        Err(stale) => say(
            started,
            format!("the ledger rejects the paused leader's late write: {stale}"),
        ),
        Ok(()) => return Err("the fence admitted a stale write".into()),
    }

    say(
        started,
        format!("healing the partition of replica-{leader}"),
    );
    replicas[leader].0.heal();
    let rejoined = Instant::now();
    loop {
        let ps = participants_on(&replicas[next].1, PATH).await?;
        if ps.iter().any(|p| p.id == format!("replica-{leader}"))
            && rejoined.elapsed() > Duration::from_millis(200)
        {
            say(
                started,
                format!(
                    "replica-{leader} rejoined as a follower: {}",
                    serde_json::to_string(&ps)?
                ),
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    say(
        started,
        "shutting down: each replica closes its selector (deleting its node) and its session",
    );
    for (_, session, selector) in &replicas {
        selector.close().await?;
        session.close().await?;
    }
    let lines = ledger.lines.lock().await;
    say(
        started,
        format!(
            "done: {} batches in the ledger, highest token admitted {}; the stale write was rejected",
            lines.len(),
            ledger.fence.highest().map_or(0, |t| t.get())
        ),
    );
    Ok(())
}

/// The singleton job: write a statement batch every 250 ms while the term is valid.
async fn statement_job(
    replica: usize,
    term: Leadership,
    ledger: &Ledger,
    batches: &AtomicU64,
    notes: &mpsc::UnboundedSender<Note>,
) -> Result<(), StaleToken> {
    let _ = notes.send(Note::Term {
        replica,
        token: term.token(),
    });
    let ended = term.cancelled();
    loop {
        tokio::select! {
            _ = ended.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        // Check right before the side effect: no network needed, so a leader that was paused past
        // its session sees it the moment it runs again.
        if !term.is_valid() {
            break;
        }
        let batch = batches.fetch_add(1, Ordering::SeqCst) + 1;
        ledger
            .append(term.token(), format!("batch {batch} by replica-{replica}"))
            .await?;
        let _ = notes.send(Note::Batch { replica, batch });
    }
    let why = match term.end_reason() {
        Some(TermEnd::Suspended) => "its connection is suspended, which ends a term",
        Some(TermEnd::DeadlinePassed) | None => "its term's deadline passed",
        Some(TermEnd::Lost) => "its session is lost",
        Some(_) => "its term ended",
    };
    let _ = notes.send(Note::Stopped {
        replica,
        token: term.token(),
        why,
    });
    Ok(())
}

async fn wait_batches(
    notes: &mut mpsc::UnboundedReceiver<Note>,
    started: Instant,
    n: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut seen = 0;
    while seen < n {
        match tokio::time::timeout(Duration::from_secs(30), notes.recv()).await {
            Ok(Some(Note::Batch { replica, batch })) => {
                seen += 1;
                say(
                    started,
                    format!("replica-{replica} wrote statement batch {batch}"),
                );
            }
            Ok(Some(_)) => {}
            Ok(None) => return Err("the replicas stopped".into()),
            Err(_) => return Err("no statement batch within 30 s".into()),
        }
    }
    Ok(())
}
