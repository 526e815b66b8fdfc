//! Fixtures shared by the integration tests: the one ZooKeeper server per test binary for tests
//! that do not fault it, sessions, bounded waits with clear failure messages, and a recorder of
//! connection-state changes with their times.

// Each test binary uses only part of this module.
#![allow(dead_code, unreachable_pub)]

pub mod curator;
pub mod zkr;

use std::future::Future;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::{OnceCell, mpsc};
use zookeeper_recipes::testing::{self, FaultProxy, TestingServer};
use zookeeper_recipes::{ConnectionState, Session, SessionStatus};

static SERVER: OnceCell<TestingServer> = OnceCell::const_new();

/// Whether ZooKeeper is installed; prints why not and returns false (skip), except under
/// `CI=true` where a missing ZooKeeper fails the test.
pub fn zookeeper() -> bool {
    init_tracing();
    testing::require_zookeeper().expect("ZooKeeper is required under CI=true")
}

/// The server shared by the tests of this binary that do not fault it.
pub async fn shared_server() -> &'static TestingServer {
    SERVER
        .get_or_try_init(TestingServer::start)
        .await
        .expect("the shared ZooKeeper server did not start")
}

/// A server of this test's own, for tests that stop, kill, pause or restart it.
pub async fn own_server() -> TestingServer {
    TestingServer::start()
        .await
        .expect("a test's own ZooKeeper server did not start")
}

/// A fault proxy in front of `server`, for a session whose link a test cuts or partitions.
pub async fn proxy_to(server: &TestingServer) -> FaultProxy {
    FaultProxy::start(std::slice::from_ref(&server.connect_string().to_owned()))
        .await
        .expect("the fault proxy did not start")
}

/// Expires `session` on the server, as Curator's KillSession does, while `proxy` (its only link)
/// is cut, then heals the link: the session learns of the expiry from the server when it
/// reconnects. Cut first, because a connected zookeeper-client takes its session back at once.
pub async fn expire_behind(server: &TestingServer, proxy: &FaultProxy, session: &Session) {
    let info = session.zookeeper_session().expect("no session to expire");
    proxy.cut();
    testing::expire_session(server.connect_string(), &info, Duration::from_secs(20))
        .await
        .expect("the session was not expired");
    proxy.heal();
}

/// Logs to the test's output when `RUST_LOG` is set.
pub fn init_tracing() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// A connected session with the given timeout.
pub async fn session(connect: &str, timeout: Duration) -> Session {
    Session::builder(connect)
        .session_timeout(timeout)
        .connection_timeout(Duration::from_secs(20))
        .connect()
        .await
        .unwrap_or_else(|e| panic!("no session to {connect}: {e}"))
}

/// Awaits `fut` at most `bound`, failing the test with `what` when it does not complete.
pub async fn within<T>(bound: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(bound, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {bound:?} waiting for: {what}"),
    }
}

/// Polls `check` until it returns `Some`, at most `bound`; for conditions that no event signals
/// (a node gone from the server after a background cleanup).
pub async fn eventually<T, F, Fut>(bound: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    within(bound, what, async {
        loop {
            if let Some(v) = check().await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// The children of `path` as the server has them now (empty when the path does not exist).
pub async fn children(session: &Session, path: &str) -> Vec<String> {
    let client = session.client().expect("session has no client");
    match client.list_children(path).await {
        Ok(c) => c,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("listing {path}: {e}"),
    }
}

/// Records every item of a stream (a recipe's events) with the instant it arrived, from a task
/// of its own, for tests that look at the whole history afterwards.
pub struct Recording<T>(pub std::sync::Arc<std::sync::Mutex<Vec<(T, Instant)>>>);

impl<T> Clone for Recording<T> {
    fn clone(&self) -> Self {
        Recording(std::sync::Arc::clone(&self.0))
    }
}

impl<T: Clone + Send + 'static> Recording<T> {
    /// Starts recording `stream`.
    pub fn of(stream: impl futures::Stream<Item = T> + Send + 'static) -> Self {
        let rec = Recording(std::sync::Arc::default());
        let sink = rec.clone();
        let mut stream = Box::pin(stream);
        tokio::spawn(async move {
            while let Some(item) = stream.next().await {
                sink.0.lock().unwrap().push((item, Instant::now()));
            }
        });
        rec
    }

    /// What was recorded so far, in order.
    pub fn items(&self) -> Vec<T> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(t, _)| t.clone())
            .collect()
    }

    /// Waits until an item maps to `Some` under `find`, at most `bound`; returns it and when it
    /// arrived.
    pub async fn wait_for<R>(
        &self,
        bound: Duration,
        what: &str,
        find: impl Fn(&T) -> Option<R>,
    ) -> (R, Instant) {
        eventually(bound, what, || {
            let hit = self
                .0
                .lock()
                .unwrap()
                .iter()
                .find_map(|(t, at)| find(t).map(|r| (r, *at)));
            async move { hit }
        })
        .await
    }
}

/// Records every state change of a session with the instant it was observed.
pub struct StateRecorder {
    rx: mpsc::UnboundedReceiver<(SessionStatus, Instant)>,
    seen: Vec<(SessionStatus, Instant)>,
}

impl StateRecorder {
    /// Starts recording `session`'s changes from now on.
    pub fn start(session: &Session) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut changes = Box::pin(session.state_changes());
        tokio::spawn(async move {
            while let Some(status) = changes.next().await {
                if tx.send((status, Instant::now())).is_err() {
                    break;
                }
            }
        });
        StateRecorder {
            rx,
            seen: Vec::new(),
        }
    }

    /// Waits for the next change to `state` (skipping others, which stay recorded), at most
    /// `bound`; returns the status and when it was seen.
    pub async fn expect(
        &mut self,
        state: ConnectionState,
        bound: Duration,
    ) -> (SessionStatus, Instant) {
        let seen = &mut self.seen;
        let rx = &mut self.rx;
        let found = tokio::time::timeout(bound, async {
            while let Some((status, at)) = rx.recv().await {
                seen.push((status.clone(), at));
                if status.state == Some(state) {
                    return Some((status, at));
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(hit)) => hit,
            Ok(None) => panic!(
                "session events ended before {state}; saw {:?}",
                self.states()
            ),
            Err(_) => panic!("no {state} within {bound:?}; saw {:?}", self.states()),
        }
    }

    /// The states seen so far, in order.
    pub fn states(&self) -> Vec<Option<ConnectionState>> {
        self.seen.iter().map(|(s, _)| s.state).collect()
    }

    /// Takes whatever changes have arrived without waiting.
    pub fn drain(&mut self) -> Vec<Option<ConnectionState>> {
        while let Ok(hit) = self.rx.try_recv() {
            self.seen.push(hit);
        }
        self.states()
    }
}

/// Milliseconds, for reporting measured figures.
pub fn ms(d: Duration) -> u128 {
    d.as_millis()
}
