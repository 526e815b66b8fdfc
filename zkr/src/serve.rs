//! `--metrics-addr ADDR` of `run`, `lock` and `cron run`: an HTTP endpoint with the library's
//! metrics (feature `metrics`, names in `zookeeper_recipes::metrics`) in the Prometheus text
//! format, and probes for a supervisor:
//!
//! - `GET /metrics`: the metrics, rendered by `metrics-exporter-prometheus`'s recorder.
//! - `GET /healthz`: 200 while the process serves (it does not look at ZooKeeper: an outage must
//!   not fail every replica's liveness probe at once).
//! - `GET /ready`: 200 while the session is connected to ZooKeeper (leader or standby), else
//!   503. A standby is ready: it is what takes over.
//! - `GET /leader`: 200 while this process holds a term (the `zookeeper_recipes_leader` gauge is
//!   1 for one of its paths), else 503: readiness by role.
//!
//! The probes read the same events the metrics count (the recorder in front of the exporter's
//! sees the connection states and the leader gauge go by), so they need no hook in the
//! commands. The server is a few lines over a `TcpListener`: one request per connection, GET
//! only, answered and closed; nothing here can stop the supervised command.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString,
    Unit,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use zookeeper_recipes::metrics::{CONNECTION_STATE_CHANGES, LEADER};

use crate::Fail;
use crate::output::{Event, Out, now_ms};

/// How long a client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request head read; the rest is ignored.
const MAX_REQUEST: usize = 8 * 1024;

/// zkr's own gauge: 1 while the session is connected (what `/ready` answers), else 0. Summed
/// over a job's replicas, it counts the replicas that take part.
pub(crate) const CONNECTED: &str = "zkr_connected";
/// zkr's own gauge: always 1, labelled `version` (the package version and commit).
pub(crate) const BUILD_INFO: &str = "zkr_build_info";

/// What the probes answer from.
#[derive(Debug)]
struct Health {
    /// The last connection state was `connected` or `reconnected`.
    connected: AtomicBool,
    /// The same as a gauge ([`CONNECTED`]).
    connected_gauge: Gauge,
    /// The leader gauge by its labels (path and id): true while it is 1.
    leading: Mutex<HashMap<String, bool>>,
}

impl Health {
    fn leading(&self) -> bool {
        self.leading
            .lock()
            .map(|terms| terms.values().any(|l| *l))
            .unwrap_or(false)
    }
}

/// The exporter's recorder, with the probes' state updated on the way.
struct ProbingRecorder {
    inner: PrometheusRecorder,
    health: Arc<Health>,
}

/// A connection-state counter: its increments are the state changes.
struct StateCounter {
    inner: Counter,
    connected: Option<bool>,
    health: Arc<Health>,
}

impl CounterFn for StateCounter {
    fn increment(&self, value: u64) {
        if let Some(connected) = self.connected {
            self.health.connected.store(connected, Ordering::SeqCst);
            self.health
                .connected_gauge
                .set(if connected { 1.0 } else { 0.0 });
            tracing::debug!(connected, "readiness changed");
        }
        self.inner.increment(value);
    }

    fn absolute(&self, value: u64) {
        self.inner.absolute(value);
    }
}

/// The leader gauge of one path and id.
struct LeaderGauge {
    inner: Gauge,
    labels: String,
    health: Arc<Health>,
}

impl LeaderGauge {
    fn note(&self, leading: bool) {
        if let Ok(mut terms) = self.health.leading.lock() {
            terms.insert(self.labels.clone(), leading);
        }
    }
}

impl GaugeFn for LeaderGauge {
    fn increment(&self, value: f64) {
        self.inner.increment(value);
    }

    fn decrement(&self, value: f64) {
        self.inner.decrement(value);
    }

    fn set(&self, value: f64) {
        self.inner.set(value);
        self.note(value >= 1.0);
    }
}

impl Recorder for ProbingRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        let inner = self.inner.register_counter(key, metadata);
        if key.name() != CONNECTION_STATE_CHANGES {
            return inner;
        }
        let connected = key
            .labels()
            .find(|l| l.key() == "state")
            .map(|l| matches!(l.value(), "connected" | "reconnected"));
        Counter::from_arc(Arc::new(StateCounter {
            inner,
            connected,
            health: Arc::clone(&self.health),
        }))
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        let inner = self.inner.register_gauge(key, metadata);
        if key.name() != LEADER {
            return inner;
        }
        let labels = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect::<Vec<_>>()
            .join(",");
        Gauge::from_arc(Arc::new(LeaderGauge {
            inner,
            labels,
            health: Arc::clone(&self.health),
        }))
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.inner.register_histogram(key, metadata)
    }
}

/// Installs the recorder and binds `addr`; the server runs on the current runtime until the
/// process ends. Announces the bound address with a `metrics_listening` event line (stderr or
/// `--events`), so that `ADDR` may use port 0.
///
/// Call before the command connects, so that the first connection state is counted.
/// Cancellation safety: cancelling it before it returns may leave the recorder installed with
/// no server; the process then records into nothing, which is harmless.
pub(crate) async fn start(addr: &str) -> Result<(), Fail> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| Fail::new(format!("cannot listen on --metrics-addr {addr}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| Fail::new(format!("--metrics-addr {addr}: {e}")))?;
    let inner = PrometheusBuilder::new().build_recorder();
    let prometheus = inner.handle();
    static METADATA: Metadata<'static> =
        Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));
    let metadata = &METADATA;
    let connected_gauge = inner.register_gauge(&Key::from_static_name(CONNECTED), metadata);
    connected_gauge.set(0.0);
    inner
        .register_gauge(
            &Key::from_parts(
                BUILD_INFO,
                vec![metrics::Label::new("version", crate::args::VERSION)],
            ),
            metadata,
        )
        .set(1.0);
    let health = Arc::new(Health {
        connected: AtomicBool::new(false),
        connected_gauge,
        leading: Mutex::default(),
    });
    metrics::set_global_recorder(ProbingRecorder {
        inner,
        health: Arc::clone(&health),
    })
    .map_err(|e| Fail::new(format!("cannot install the metrics recorder: {e}")))?;
    let address = local.to_string();
    tracing::info!(addr = %address, "serving metrics");
    Out::Stderr.emit_best_effort(&Event::MetricsListening {
        addr: &address,
        ts_ms: now_ms(),
    });
    tokio::spawn(serve(listener, prometheus, health));
    Ok(())
}

async fn serve(listener: TcpListener, prometheus: PrometheusHandle, health: Arc<Health>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let prometheus = prometheus.clone();
                let health = Arc::clone(&health);
                tokio::spawn(async move {
                    if let Err(e) = answer(stream, &prometheus, &health).await {
                        tracing::debug!(error = %e, "metrics request failed");
                    }
                });
            }
            Err(e) => {
                // Out of descriptors, most likely: try again shortly rather than spin.
                tracing::warn!(error = %e, "metrics endpoint cannot accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Reads one request head and answers it.
async fn answer(
    mut stream: TcpStream,
    prometheus: &PrometheusHandle,
    health: &Health,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(REQUEST_TIMEOUT, async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<(), std::io::Error>(())
    })
    .await;
    match read {
        Ok(r) => r?,
        Err(_) => return Ok(()),
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let method = words.next().unwrap_or_default();
    let target = words.next().unwrap_or_default();
    let path = target.split('?').next().unwrap_or_default();
    let (status, content_type, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            prometheus.run_upkeep();
            ("200 OK", "text/plain; version=0.0.4", prometheus.render())
        }
        ("GET" | "HEAD", "/healthz") => ("200 OK", "text/plain", "ok\n".to_owned()),
        ("GET" | "HEAD", "/ready") => {
            if health.connected.load(Ordering::SeqCst) {
                ("200 OK", "text/plain", "connected\n".to_owned())
            } else {
                (
                    "503 Service Unavailable",
                    "text/plain",
                    "not connected\n".to_owned(),
                )
            }
        }
        ("GET" | "HEAD", "/leader") => {
            if health.leading() {
                ("200 OK", "text/plain", "leader\n".to_owned())
            } else {
                (
                    "503 Service Unavailable",
                    "text/plain",
                    "not leader\n".to_owned(),
                )
            }
        }
        ("GET" | "HEAD", _) => ("404 Not Found", "text/plain", "not found\n".to_owned()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_owned(),
        ),
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if method != "HEAD" {
        response.extend_from_slice(body.as_bytes());
    }
    stream.write_all(&response).await?;
    stream.shutdown().await
}
