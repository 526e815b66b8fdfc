//! Where and how zkr connects: the global options, the session, and its close on the way out.

use std::time::Duration;

use zookeeper_recipes::{ConnectionState, Session};

use crate::Fail;
use crate::output::{Event, Out, now_ms};
use crate::signals::Signals;

/// Where and how to connect: the global options.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    pub(crate) hosts: String,
    pub(crate) server_tick_time: Option<Duration>,
    /// `--connect-timeout`.
    pub(crate) connect_timeout: Duration,
}

impl Conn {
    pub(crate) fn builder(&self, session_timeout: Duration) -> zookeeper_recipes::SessionBuilder {
        let builder = Session::builder(&self.hosts)
            .session_timeout(session_timeout)
            .connection_timeout(self.connect_timeout);
        match self.server_tick_time {
            Some(tick) => builder.server_tick_time(tick),
            None => builder,
        }
    }
}

/// Connects within `--connect-timeout`; else fails with exit code 69 (no server answered).
///
/// # Cancel safety
/// Dropping it drops the connection attempt; nothing is left on the servers but a session they
/// expire by themselves.
pub(crate) async fn connect(conn: &Conn, session_timeout: Duration) -> Result<Session, Fail> {
    conn.builder(session_timeout).connect().await.map_err(|e| {
        Fail::with_code(
            crate::codes::UNAVAILABLE,
            format!(
                "cannot connect to ZooKeeper at {} within {} (--connect-timeout): {e}",
                conn.hosts,
                humantime::format_duration(conn.connect_timeout)
            ),
        )
    })
}

/// The first wait between two connection attempts of [`connect_patiently`]; it doubles up to
/// [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Connects, trying again with a backoff (1 s, doubling, at most 30 s) while no server answers,
/// each failed attempt reported as a `connect_failed` line; `None` when SIGINT/SIGTERM came first.
///
/// # Cancel safety
/// As [`connect`].
pub(crate) async fn connect_patiently(
    conn: &Conn,
    session_timeout: Duration,
    signals: &mut Signals,
) -> Option<Session> {
    let mut wait = RETRY_FIRST;
    let mut attempt = 0_u32;
    loop {
        attempt += 1;
        tracing::info!(hosts = %conn.hosts, attempt, "connecting to ZooKeeper");
        let failure = tokio::select! {
            _ = signals.recv() => return None,
            result = connect(conn, session_timeout) => match result {
                Ok(session) => return Some(session),
                Err(f) => f,
            },
        };
        tracing::warn!(attempt, retry_in = ?wait, "{}", failure.message);
        Out::Stderr.emit_best_effort(&Event::ConnectFailed {
            attempt,
            error: &failure.message,
            retry_in_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            ts_ms: now_ms(),
        });
        tokio::select! {
            _ = signals.recv() => return None,
            () = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(RETRY_MAX);
    }
}

/// How long zkr waits for the server to confirm the close of its session on the way out. A
/// close is one round trip; the bound only matters when the server stopped answering, and the
/// recipes have deleted their nodes explicitly before this, so nothing depends on the close.
const CLOSE_BOUND: Duration = Duration::from_secs(2);

/// Closes the session if it can reach a server; otherwise there is nobody to tell, and the
/// server ends the session by itself.
pub(crate) async fn close_session(session: &Session) {
    if session.state().is_some_and(ConnectionState::is_connected) {
        let _ = tokio::time::timeout(CLOSE_BOUND, session.close()).await;
    }
}
