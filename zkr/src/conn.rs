//! Where and how zkr connects: the global options, the session, and its close on the way out.

use std::time::Duration;

use zookeeper_recipes::{ConnectionState, NodeAcl, Session};

use crate::auth::{AclArg, Digest};

use crate::Fail;
use crate::output::{Event, Out, now_ms};
use crate::signals::Signals;

/// Where and how to connect: the global options.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    pub(crate) hosts: String,
    pub(crate) server_tick_time: Option<Duration>,
    /// `--session-timeout-floor`.
    pub(crate) session_timeout_floor: Option<Duration>,
    /// `--connect-timeout`.
    pub(crate) connect_timeout: Duration,
    /// `--auth-file` or `$ZK_AUTH` (its `Debug` leaves the password out).
    pub(crate) auth: Option<Digest>,
    /// `--tls-ca`, `--tls-cert`, `--tls-key` (or their `$ZK_TLS_*`), checked.
    pub(crate) tls: Option<zookeeper_recipes::TlsConfig>,
    /// `--sasl-digest-file` (its `Debug` leaves the password out).
    pub(crate) sasl: Option<Digest>,
    /// `--acl`: the ACL of the nodes zkr creates.
    pub(crate) acl: AclArg,
}

impl Conn {
    pub(crate) fn builder(&self, session_timeout: Duration) -> zookeeper_recipes::SessionBuilder {
        // A chroot in the connect string is created with `--acl`'s ACL, as every other node
        // zkr creates.
        let builder = Session::builder(&self.hosts)
            .session_timeout(session_timeout)
            .connection_timeout(self.connect_timeout)
            .chroot_acl(self.node_acl());
        let builder = match &self.auth {
            Some(digest) => builder.digest_auth(digest.user.clone(), digest.password.clone()),
            None => builder,
        };
        let builder = match &self.sasl {
            Some(login) => builder.sasl_digest(login.user.clone(), login.password.clone()),
            None => builder,
        };
        let builder = match &self.tls {
            Some(tls) => builder.tls(tls.clone()),
            None => builder,
        };
        let builder = match self.session_timeout_floor {
            Some(floor) => builder.session_timeout_floor(floor),
            None => builder,
        };
        match self.server_tick_time {
            Some(tick) => builder.server_tick_time(tick),
            None => builder,
        }
    }

    /// The ACL of the nodes zkr creates (`--acl`).
    pub(crate) fn node_acl(&self) -> NodeAcl {
        self.acl.node_acl()
    }
}

/// Connects within `--connect-timeout`; else fails with exit code 69 (no server answered), or
/// 77 when the server refused the credentials.
///
/// # Cancel safety
/// Dropping it drops the connection attempt; nothing is left on the servers but a session they
/// expire by themselves.
pub(crate) async fn connect(conn: &Conn, session_timeout: Duration) -> Result<Session, Fail> {
    // The user, never the password.
    if let Some(digest) = &conn.auth {
        tracing::info!(
            user = %digest.user,
            acl = conn.acl.name(),
            "authenticating with digest credentials"
        );
    }
    if let Some(login) = &conn.sasl {
        tracing::info!(user = %login.user, acl = conn.acl.name(), "logging in with SASL DIGEST-MD5");
    }
    conn.builder(session_timeout).connect().await.map_err(|e| {
        if crate::auth::is_denied(&e) {
            let whose = match (&conn.sasl, &conn.auth) {
                (Some(login), _) => format!("of SASL user {:?} (--sasl-digest-file)", login.user),
                (None, Some(digest)) => {
                    format!("of digest user {:?} (--auth-file or $ZK_AUTH)", digest.user)
                }
                (None, None) => String::new(),
            };
            return Fail::with_code(
                crate::codes::DENIED,
                format!(
                    "ZooKeeper at {} refused the credentials {whose}: {e}",
                    conn.hosts
                ),
            );
        }
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
/// Credentials the server refused are not retried: that fails (exit 77) at once.
///
/// # Cancel safety
/// As [`connect`].
pub(crate) async fn connect_patiently(
    conn: &Conn,
    session_timeout: Duration,
    signals: &mut Signals,
) -> Result<Option<Session>, Fail> {
    let mut wait = RETRY_FIRST;
    let mut attempt = 0_u32;
    loop {
        attempt += 1;
        tracing::info!(hosts = %conn.hosts, attempt, "connecting to ZooKeeper");
        let failure = tokio::select! {
            _ = signals.recv() => return Ok(None),
            result = connect(conn, session_timeout) => match result {
                Ok(session) => return Ok(Some(session)),
                Err(f) if f.code == crate::codes::DENIED => return Err(f),
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
            _ = signals.recv() => return Ok(None),
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
