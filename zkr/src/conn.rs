//! Where and how zkr connects: the global options, the session, and its close on the way out.

use std::time::Duration;

use zookeeper_recipes::{ConnectionState, Session};

use crate::Fail;

/// Where and how to connect: the global options.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    pub(crate) hosts: String,
    pub(crate) server_tick_time: Option<Duration>,
}

impl Conn {
    pub(crate) fn builder(&self, session_timeout: Duration) -> zookeeper_recipes::SessionBuilder {
        let builder = Session::builder(&self.hosts).session_timeout(session_timeout);
        match self.server_tick_time {
            Some(tick) => builder.server_tick_time(tick),
            None => builder,
        }
    }
}

pub(crate) async fn connect(conn: &Conn, session_timeout: Duration) -> Result<Session, Fail> {
    conn.builder(session_timeout).connect().await.map_err(|e| {
        Fail(format!(
            "cannot connect to ZooKeeper at {}: {e}",
            conn.hosts
        ))
    })
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
