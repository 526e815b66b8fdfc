//! A replica of a service with one singleton job: the shape of a first production service.
//!
//! ```text
//! ZK_CONNECT=zk1:2181 cargo run --example service -- --id replica-1 --db jobs.db --listen 0.0.0.0:8080
//! ```
//!
//! Three replicas run this; on one of them at a time an hourly job writes to a database.
//!
//! - **The job is a [`LeaderSelector`]** with auto-requeue: the closure runs while this replica
//!   leads and gets the term ([`Leadership`]). It awaits the term's stop future
//!   ([`Leadership::cancelled`]) against the pause between runs, and checks
//!   [`Leadership::is_valid`] right before each write.
//! - **SQL fencing.** Every write carries the term's [`FencingToken`] and is conditional on it in
//!   the same statement (`... WHERE fencing_token <= :token`): a deposed leader that wakes up
//!   late changes no row. A [`Fence`](zookeeper_recipes::Fence) would not do here: it is
//!   in-process memory, and the replicas are separate processes.
//! - **The `SessionExpired` error policy**: a short connection blip (a ZooKeeper server
//!   restarting) does not end the term, so the job is not interrupted every time; the term still
//!   ends when the session is lost or its deadline passes ([`Leadership::valid_until`]), and the
//!   fenced write is what makes the longer hold safe. Use the default (`Standard`) when the job
//!   must stop at the first sign of trouble.
//! - **Readiness** (`GET /readyz`): 200 while the session is connected, leader or follower, with
//!   the role and the current token in the body (a follower that can serve is ready: only the
//!   job is singleton); 503 once shutdown has begun.
//! - **SIGTERM and SIGINT** (Kubernetes sends SIGTERM): readiness turns 503, the selector is
//!   closed (the term ends, the job gets its grace period to return, the node is deleted at once)
//!   and then the session: another replica takes over within a round trip or two instead of a
//!   whole session timeout. `close()` is bounded: when ZooKeeper is unreachable it returns after
//!   the connection timeout (here 5 s), so give the pod a `terminationGracePeriodSeconds` of at
//!   least the selector's grace plus the connection timeout (5 s + 5 s here; Kubernetes' default
//!   of 30 s covers it).
//!
//! Lines on stdout, for people and for `tests/recipes/examples.rs`: `ready on ADDR`, `leading with
//! token T`, `ran the job (token T, run N)`, `deposed: a newer leader wrote (token T)`,
//! `stopped`.

use zookeeper_recipes_rigs::prologue as common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::signal::unix::{SignalKind, signal};
use zookeeper_recipes::{BoxError, ErrorPolicy, FencingToken, LeaderSelector, Leadership, Session};

#[derive(clap::Parser)]
struct Args {
    /// The participant id (default: `<hostname>-<pid>-<8 hex>`).
    #[arg(long)]
    id: Option<String>,
    /// The election path of the job.
    #[arg(long, default_value = "/election/hourly-job")]
    path: String,
    /// The SQLite database the job writes to (shared by the replicas).
    #[arg(long, default_value = "service.db")]
    db: std::path::PathBuf,
    /// The readiness endpoint's address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// How often the job runs.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1h")]
    every: Duration,
    /// The ZooKeeper session timeout.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    session_timeout: Duration,
}

/// The bound on `close()` when ZooKeeper is unreachable (see the module docs).
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the job may run on after its term ended before its task is aborted.
const GRACE: Duration = Duration::from_secs(5);

/// The job's table: one row per job, with the token of the newest term that wrote it.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    runs INTEGER NOT NULL DEFAULT 0,
    run_by TEXT,
    fencing_token INTEGER NOT NULL DEFAULT 0
);
INSERT OR IGNORE INTO jobs (name) VALUES ('hourly');";

/// The fenced write: changes no row when a newer term has written.
const RUN: &str = "
UPDATE jobs SET runs = runs + 1, run_by = :id, fencing_token = :token
 WHERE name = 'hourly' AND fencing_token <= :token";

/// What one run of the job did.
enum Ran {
    /// The write landed: the run number.
    Run(i64),
    /// A newer term has written: this replica is deposed.
    Deposed,
}

/// One run of the job, fenced: the write and its check are one statement.
async fn run_job(db: std::path::PathBuf, id: String, token: FencingToken) -> Result<Ran, BoxError> {
    tokio::task::spawn_blocking(move || {
        let conn = rusqlite::Connection::open(&db)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        let changed = conn.execute(
            RUN,
            rusqlite::named_params! { ":id": id, ":token": token.get() },
        )?;
        if changed == 0 {
            return Ok(Ran::Deposed);
        }
        let runs = conn.query_row("SELECT runs FROM jobs WHERE name = 'hourly'", [], |r| {
            r.get(0)
        })?;
        Ok(Ran::Run(runs))
    })
    .await?
}

/// The job, for one term: run, pause, run again, until the term ends.
async fn job(term: Leadership, db: std::path::PathBuf, every: Duration) -> Result<(), BoxError> {
    let token = term.token();
    println!("leading with token {token}");
    let stop = term.cancelled();
    tokio::pin!(stop);
    loop {
        // The one check before a side effect: the term has not ended and its deadline has not
        // passed (no network needed, so it also catches a process that was frozen).
        if !term.is_valid() {
            return Ok(());
        }
        match run_job(db.clone(), term.participant_id().to_owned(), token).await? {
            Ran::Run(n) => println!("ran the job (token {token}, run {n})"),
            Ran::Deposed => {
                println!("deposed: a newer leader wrote (token {token})");
                return Ok(());
            }
        }
        // The one future to await: the term's end, against the pause.
        tokio::select! {
            () = &mut stop => return Ok(()),
            () = tokio::time::sleep(every) => {}
        }
    }
}

struct Replica {
    session: Session,
    selector: LeaderSelector,
    stopping: AtomicBool,
}

async fn readyz(State(replica): State<Arc<Replica>>) -> (StatusCode, String) {
    if replica.stopping.load(Ordering::Acquire) {
        return (StatusCode::SERVICE_UNAVAILABLE, "stopping\n".to_owned());
    }
    let connected = replica.session.state().is_some_and(|s| s.is_connected());
    let role = match replica.selector.current_leadership() {
        Some(term) if term.is_valid() => format!("leader, token {}", term.token()),
        _ => "follower".to_owned(),
    };
    if connected {
        (StatusCode::OK, format!("{role}\n"))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{role}, not connected\n"),
        )
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::init_tracing();
    common::exit_code(run(clap::Parser::parse()).await)
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    // Install the handlers first: a SIGTERM that comes while connecting must not kill the
    // process with its node left behind.
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;

    let db = args.db.clone();
    tokio::task::spawn_blocking(move || rusqlite::Connection::open(&db)?.execute_batch(SCHEMA))
        .await??;

    let zookeeper = common::ZooKeeper::from_env().await?;
    let session = Session::builder(zookeeper.connect_string())
        .session_timeout(args.session_timeout)
        .connection_timeout(CONNECTION_TIMEOUT)
        .connect()
        .await?;
    let (db, every) = (args.db.clone(), args.every);
    let mut builder = LeaderSelector::builder(&session, args.path)
        .auto_requeue(true)
        .error_policy(ErrorPolicy::SessionExpired)
        .grace(GRACE);
    if let Some(id) = args.id {
        builder = builder.id(id);
    }
    let selector = builder
        .start(move |term: Leadership| job(term, db.clone(), every))
        .await?;
    let replica = Arc::new(Replica {
        session: session.clone(),
        selector,
        stopping: AtomicBool::new(false),
    });

    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    println!("ready on {}", listener.local_addr()?);
    let app = Router::new()
        .route("/readyz", get(readyz))
        .with_state(Arc::clone(&replica));
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    tokio::select! {
        _ = sigterm.recv() => eprintln!("SIGTERM: handing over"),
        _ = sigint.recv() => eprintln!("SIGINT: handing over"),
    }
    // Out of the load balancer first, then leave the election: the node is deleted now, so a
    // successor starts at once rather than after a session timeout.
    replica.stopping.store(true, Ordering::Release);
    replica.selector.close().await?;
    session.close().await?;
    server.abort();
    println!("stopped");
    Ok(())
}
