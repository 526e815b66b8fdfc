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
//! - `/metrics`: the crate's metrics (feature `metrics`; the table of names and labels is in
//!   `zookeeper_recipes::metrics`): `zookeeper_recipes_leader` (0/1) and
//!   `zookeeper_recipes_fencing_token` per election path and participant id, like client-go's
//!   `leader_election_master_status`, terms started and ended by reason, time to leadership,
//!   handovers seen by a `LeaderObserver`, connection-state changes and session losses. The
//!   recorder is `metrics-exporter-prometheus`'s; nothing is formatted by hand.
//!
//! Ctrl-C or SIGTERM leaves the election (the node is deleted at once, so a successor is elected
//! without waiting for the session to expire) and stops the server.

use zookeeper_recipes_rigs::prologue as common;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::signal::unix::{SignalKind, signal};
use zookeeper_recipes::{LeaderLatch, LeaderObserver, Session};

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
    prometheus: PrometheusHandle,
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

/// The metrics the crate records (feature `metrics`; table in `zookeeper_recipes::metrics`),
/// rendered by the Prometheus exporter's recorder.
async fn metrics(State(replica): State<Arc<Replica>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        replica.prometheus.render(),
    )
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::init_tracing();
    common::exit_code(run(clap::Parser::parse()).await)
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    // The recorder first: the crate records from the first connection state on.
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let mut sigterm = signal(SignalKind::terminate())?;
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
    // Follows who leads (zookeeper_recipes_leader_changes_total counts the handovers it sees).
    let observer = LeaderObserver::builder(&session, latch.path())
        .start()
        .await?;
    let mut leaders = observer.watch();
    let replica = Arc::new(Replica {
        session: session.clone(),
        latch,
        ready_when: args.ready_when,
        prometheus,
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
    // Who leads, as this replica's observer sees it (after the line above, for the tests).
    tokio::spawn(async move {
        loop {
            // The current report (the first one may already be there), then each change.
            let leader = leaders.borrow_and_update().as_ref().map(|l| l.id.clone());
            println!("leader: {}", leader.as_deref().unwrap_or("(none)"));
            if leaders.changed().await.is_err() {
                break;
            }
        }
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = sigterm.recv() => {}
            }
        })
        .await?;
    observer.close().await?;
    replica.latch.close().await?;
    session.close().await?;
    Ok(())
}
