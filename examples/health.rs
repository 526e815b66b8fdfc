//! Health, readiness and metrics for a replica that takes part in an election.
//!
//! ```text
//! cargo run --example health [-- --listen 127.0.0.1:8080 --id replica-1 --ready-when connected]
//! curl -s localhost:8080/healthz; curl -s localhost:8080/readyz; curl -s localhost:8080/metrics
//! ```
//!
//! - `/healthz`: the process is alive. Always 200: it does not look at ZooKeeper, because a
//!   ZooKeeper outage would then fail every replica's liveness probe at once and restart them
//!   all, which helps nothing.
//! - `/readyz`: whether this replica should get traffic, by role (`--ready-when`):
//!   - `connected` (the default): ready while the session is connected, **leader or follower**.
//!     A follower that can serve requests is ready: only the singleton work runs on the leader.
//!     Were only the leader ready, every other replica would be out of the load balancer for
//!     good and a rolling update, which waits for new replicas to become ready, would stall.
//!   - `leader`: ready only while leading, for a service whose traffic must reach the leader
//!     alone (a Service that should route to the one writer).
//! - `/metrics`: Prometheus text. `leader_election_is_leader` (0/1) and
//!   `leader_election_fencing_token` (the current term's token, 0 when not leading), labelled
//!   with the election path and the participant id, like client-go's
//!   `leader_election_master_status`; and `zookeeper_session_connected`.
//!
//! Ctrl-C leaves the election (the node is deleted at once, so a successor is elected without
//! waiting for the session to expire) and stops the server.

mod common;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use zookeeper_recipes::{LeaderLatch, Session};

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ReadyWhen {
    /// Ready while the session is connected, leader or follower.
    Connected,
    /// Ready only while leading.
    Leader,
}

#[derive(clap::Parser)]
struct Args {
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    #[arg(long, default_value = "/election/health-demo")]
    path: String,
    /// The participant id (default: `<hostname>-<pid>-<8 hex>`).
    #[arg(long)]
    id: Option<String>,
    #[arg(long, value_enum, default_value_t = ReadyWhen::Connected)]
    ready_when: ReadyWhen,
}

struct Replica {
    session: Session,
    latch: LeaderLatch,
    ready_when: ReadyWhen,
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(replica): State<Arc<Replica>>) -> impl IntoResponse {
    let connected = replica.session.state().is_some_and(|s| s.is_connected());
    let leader = replica.latch.has_leadership();
    let role = if leader { "leader" } else { "follower" };
    let ready = match replica.ready_when {
        ReadyWhen::Connected => connected,
        ReadyWhen::Leader => leader,
    };
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let connection = if connected {
        "connected"
    } else {
        "not connected"
    };
    (status, format!("{role}, {connection}\n"))
}

async fn metrics(State(replica): State<Arc<Replica>>) -> impl IntoResponse {
    let labels = format!(
        "path=\"{}\",id=\"{}\"",
        escape(replica.latch.path()),
        escape(replica.latch.id())
    );
    let term = replica.latch.current_leadership().filter(|t| t.is_valid());
    let connected = replica.session.state().is_some_and(|s| s.is_connected());
    let mut text = String::new();
    let mut gauge = |name: &str, help: &str, labels: &str, value: i64| {
        let _ = writeln!(
            text,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{labels}}} {value}"
        );
    };
    gauge(
        "leader_election_is_leader",
        "Whether this participant leads the election (1) or not (0).",
        &labels,
        i64::from(term.is_some()),
    );
    gauge(
        "leader_election_fencing_token",
        "The fencing token (czxid) of the current term; 0 when not leading.",
        &labels,
        term.map_or(0, |t| t.token().get()),
    );
    gauge(
        "zookeeper_session_connected",
        "Whether the ZooKeeper session is connected (1) or not (0).",
        &format!("id=\"{}\"", escape(replica.latch.id())),
        i64::from(connected),
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// A Prometheus label value: backslash, double quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::init_tracing();
    common::exit_code(run(clap::Parser::parse()).await)
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let zookeeper = common::ZooKeeper::from_env().await?;
    let session = Session::builder(zookeeper.connect_string())
        .session_timeout(Duration::from_secs(10))
        .connect()
        .await?;
    let mut latch = LeaderLatch::builder(&session, args.path);
    if let Some(id) = args.id {
        latch = latch.id(id);
    }
    let latch = latch.start().await?;
    let replica = Arc::new(Replica {
        session: session.clone(),
        latch,
        ready_when: args.ready_when,
    });
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(Arc::clone(&replica));
    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    println!(
        "{} joined {} on {}; serving http://{}/healthz, /readyz, /metrics (Ctrl-C to stop)",
        replica.latch.id(),
        replica.latch.path(),
        zookeeper.describe(),
        listener.local_addr()?
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    replica.latch.close().await?;
    session.close().await?;
    Ok(())
}
