//! The managed session ([`Session`] has what it adds to the raw client): builder, lease, protected create, status feed.
//!
//! One idea per file: `builder` (the settings, their defaults, `start`), `lease` (the deadline
//! and the rules that prove it), `tls` (its settings and the handshake's diagnosis),
//! `supervise` (the background task: connect straight to the servers, heartbeat and touch,
//! resume, start over), `create` (Curator's protected
//! create), `feed` (every status change, for a recipe's task). Here: the handle, its
//! [`SessionStatus`], and what the recipes read from it.

mod builder;
mod create;
mod feed;
mod lease;
mod supervise;
#[cfg(feature = "tls")]
mod tls;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::stream::BoxStream;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use zookeeper_client::{Client, SessionState};

use builder::Config;
pub use builder::SessionBuilder;
pub(crate) use builder::{
    DEFAULT_CONNECTION_TIMEOUT, DEFAULT_JUTE_MAX_BUFFER, DEFAULT_SESSION_TIMEOUT,
};
pub(crate) use feed::{Change, StatusFeed, classify, flag_set, log_state, until_done};
pub(crate) use lease::{Lease, LeaseDemand};
use lease::{assumed_tick, grace_limit};
#[cfg(feature = "tls")]
pub use tls::TlsConfig;

use crate::clock::{BootTime, Clock};
use crate::error::{Error, Result};
use crate::state::ConnectionState;

/// A snapshot of the session, as published on every change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionStatus {
    /// The connection state; `None` until the first session is established.
    pub state: Option<ConnectionState>,
    /// The ZooKeeper session id, while a session exists.
    pub session_id: Option<i64>,
    /// How many ZooKeeper sessions this [`Session`] has established; rises with each new one.
    pub epoch: u64,
    /// Set on the change that reports a newly established ZooKeeper session (the first
    /// `Connected`, and `Reconnected` after `Lost`): recipes must re-create their nodes.
    pub new_session: bool,
    /// Set once the session was closed; nothing follows.
    pub closed: bool,
}

impl SessionStatus {
    fn initial() -> Self {
        SessionStatus {
            state: None,
            session_id: None,
            epoch: 0,
            new_session: false,
            closed: false,
        }
    }
}

/// The managed session: one ZooKeeper session at a time, Curator's connection states, a deadline
/// up to which the session is provably alive, and a new session by itself after expiry.
///
/// A [`Session`] is what Curator calls the framework (`CuratorFramework` plus its
/// `ConnectionStateManager`). Recipes share one; it is cheap to clone. It owns a
/// [`zookeeper_client::Client`] and adds what the raw client does not give:
///
/// - **Connection states** ([`ConnectionState`]): `Connected`, `Suspended`, `Reconnected`,
///   `Lost`, `ReadOnly` (and `Closed` after [`Session::close`]), published through a [`tokio::sync::watch`] ([`Session::watch_status`])
///   and a [`Stream`](futures::Stream) ([`Session::state_changes`]), each change logged with `tracing`.
/// - **A lease.** The client only declares a session expired once the server says so (or, by
///   itself, after about 7/5 of the timeout). The quorum leader may expire the session as soon as
///   it has not heard of us for the negotiated timeout, and a follower cut off from it keeps
///   answering us meanwhile. So, while something needs the lease (a term, the next in line, a
///   reader of [`Session::safe_until`]), the session sends a `sync` every eighth of the timeout
///   (a follower cannot answer one without its leader) and advances its lease to the *send
///   time* of a heartbeat, or of one of its own touches, only once a later `sync` proves that
///   its touch reached the leader (see "The deadline" and "Who proves the lease" in the latch's
///   spec, and [`SessionBuilder::server_tick_time`]). A session that nothing needs a lease for
///   sends no `sync`: a cheap touch of its own (an `exists` that a follower answers by itself)
///   keeps it alive, and costs the quorum leader nothing. The
///   session can prove itself alive until that instant plus the timeout (minus a small margin):
///   [`Session::safe_until`], on boot time, which counts a host's suspend
///   ([`crate::Clock`]). The timeout is the lowest the quorum may hold the session to: the one
///   it was created with, the floor the operator declared
///   ([`SessionBuilder::session_timeout_floor`]) and what each new client of the session
///   negotiated (zookeeper-client does not report what its own reconnects negotiate; the floor
///   stands for them). When the deadline passes without a newer proof, every term won on the session ends
///   and the session reports `Suspended`; it keeps its ZooKeeper session (the servers may well
///   have kept it), keeps proving itself, and reports `Reconnected` once a proof comes: a
///   contender whose node survived then leads again on it, with the same token.
/// - **Lost when the session is gone**: the servers said it expired, or the client gave up on it
///   after about 7/5 of the timeout without a connection.
/// - **A new session after loss**, reported as `Reconnected` with [`SessionStatus::new_session`]
///   set and a higher [`SessionStatus::epoch`], so recipes know to re-create their nodes. A holder
///   of the session never rebuilds it. Attempts to start one follow each other at most a second
///   apart, however long the outage, so the session is back soon after the servers are.
/// - **Protected creates** shared by all recipes (Curator's `withProtection()`), which never leave
///   an orphan node behind (CURATOR-18, CURATOR-498).
///
/// # Curator
/// | Curator                                     | here                                  |
/// |---------------------------------------------|---------------------------------------|
/// | `CuratorFrameworkFactory.builder()`          | [`Session::builder`]                   |
/// | `start()` + `blockUntilConnected()`          | [`SessionBuilder::connect`]            |
/// | `getConnectionStateListenable()`             | [`Session::state_changes`], [`Session::watch_status`] |
/// | `ConnectionState`                           | [`ConnectionState`]                    |
/// | simulated session expiration                 | terms end at [`Session::safe_until`] (`Suspended`); `Lost` when the session expired |
/// | `close()`                                   | [`Session::close`]                     |
///
/// A managed ZooKeeper session shared by recipes. Cheap to clone; the session closes when the
/// last clone is dropped (or at [`close`](Self::close)).
#[derive(Clone)]
pub struct Session {
    shared: Arc<Shared>,
    _closer: Arc<StopOnDrop>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("hosts", &self.shared.config.hosts)
            .field("chroot", &self.shared.config.chroot)
            .field("status", &*self.shared.status_tx.borrow())
            .finish()
    }
}

struct StopOnDrop(CancellationToken);

/// A session held without keeping it open (a term keeps one: an old term the application
/// holds must not keep its session alive).
#[derive(Clone)]
pub(crate) struct WeakSession {
    shared: std::sync::Weak<Shared>,
    closer: std::sync::Weak<StopOnDrop>,
}

impl WeakSession {
    /// The session, while some clone of it is still held.
    pub(crate) fn upgrade(&self) -> Option<Session> {
        Some(Session {
            shared: self.shared.upgrade()?,
            _closer: self.closer.upgrade()?,
        })
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

struct Shared {
    config: Config,
    status_tx: watch::Sender<SessionStatus>,
    events_tx: broadcast::Sender<SessionStatus>,
    current: RwLock<Option<Live>>,
    stop: CancellationToken,
    supervisor: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Why the last attempt to establish a session was refused, if it was (for `connect`).
    refusal: Mutex<Option<Error>>,
    /// Whether the warning that the servers' tick is assumed was given.
    tick_warned: AtomicBool,
    /// Who needs the lease proven (heartbeats go out only then).
    demand: Arc<lease::Demand>,
}

/// The client of one ZooKeeper session, with the clock that proves it alive.
#[derive(Clone)]
pub(crate) struct Live {
    pub(crate) client: Client,
    pub(crate) epoch: u64,
    pub(crate) session_id: i64,
    lease: Arc<Lease>,
}

impl Live {
    /// The instant up to which this session is provably alive on the server.
    pub(crate) fn safe_until(&self) -> BootTime {
        self.lease.deadline()
    }

    /// The lease of this session: what a term won on it keeps, to know its deadline without
    /// looking the session up (it is marked lost when the session ends).
    pub(crate) fn lease(&self) -> Arc<Lease> {
        Arc::clone(&self.lease)
    }
}

impl Session {
    /// Curator's default session timeout (the server clamps it to its own limits), the
    /// default of [`SessionBuilder::session_timeout`].
    pub const DEFAULT_SESSION_TIMEOUT: Duration = DEFAULT_SESSION_TIMEOUT;
    /// Curator's default connection timeout, the default of
    /// [`SessionBuilder::connection_timeout`].
    pub const DEFAULT_CONNECTION_TIMEOUT: Duration = DEFAULT_CONNECTION_TIMEOUT;
    /// ZooKeeper's default `jute.maxbuffer`: the largest request packet, in bytes, a server
    /// accepts (the default of [`SessionBuilder::jute_max_buffer`]).
    pub const DEFAULT_JUTE_MAX_BUFFER: usize = DEFAULT_JUTE_MAX_BUFFER;

    /// A builder for a session to the servers in `connect` (`host:port[,host:port...][/chroot]`).
    ///
    /// Nothing is validated or connected until [`SessionBuilder::start`] or
    /// [`SessionBuilder::connect`].
    pub fn builder(connect: impl Into<String>) -> SessionBuilder {
        SessionBuilder::new(connect.into())
    }

    /// The current connection state; `None` until the first session is established.
    pub fn state(&self) -> Option<ConnectionState> {
        self.shared.status_tx.borrow().state
    }

    /// The current status snapshot.
    pub fn status(&self) -> SessionStatus {
        self.shared.status_tx.borrow().clone()
    }

    /// A watch of the status: always holds the latest value, intermediate ones may be skipped.
    /// Use [`state_changes`](Self::state_changes) to see every transition.
    pub fn watch_status(&self) -> watch::Receiver<SessionStatus> {
        self.shared.status_tx.subscribe()
    }

    /// Every state change from now on, as Curator's `ConnectionStateListener` sees them. A
    /// listener that falls more than 64 changes behind gets the latest status instead of the ones
    /// it missed. The stream ends after the change that reports the close
    /// ([`ConnectionState::Closed`], `closed` set).
    ///
    /// The stream is boxed and so [`Unpin`]: `.next()` works on it directly.
    ///
    /// # Examples
    /// ```no_run
    /// use futures::StreamExt;
    /// use zookeeper_recipes::{ConnectionState, Session};
    ///
    /// # async fn demo(session: Session) {
    /// let mut changes = session.state_changes();
    /// while let Some(status) = changes.next().await {
    ///     match status.state {
    ///         Some(ConnectionState::Lost) => eprintln!("session lost: alert"),
    ///         Some(ConnectionState::Closed) => break, // our own close: not an alert
    ///         other => eprintln!("connection state: {other:?}"),
    ///     }
    /// }
    /// # }
    /// ```
    pub fn state_changes(&self) -> BoxStream<'static, SessionStatus> {
        let mut rx = self.shared.events_tx.subscribe();
        let status = self.shared.status_tx.subscribe();
        // A change is published to the status watch first, then as an event: one that was
        // already visible when this was called may still arrive as the first event. Published
        // statuses always differ from the one before, so an event equal to this snapshot is that
        // change, not a new one.
        let mut already_seen = Some(status.borrow().clone());
        Box::pin(async_stream::stream! {
            loop {
                match rx.recv().await {
                    Ok(s) => {
                        if already_seen.take().is_some_and(|seen| seen == s) {
                            continue;
                        }
                        let closed = s.closed;
                        yield s;
                        if closed { break; }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        already_seen = None;
                        let s = status.borrow().clone();
                        yield s;
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
        })
    }

    /// The ZooKeeper session id, while a session exists.
    pub fn session_id(&self) -> Option<i64> {
        self.live().ok().map(|l| l.session_id)
    }

    /// The session timeout the lease of the current session counts with: the lowest of the timeout
    /// it was created with, the declared [`SessionBuilder::session_timeout_floor`] and what any
    /// new client of the session negotiated since the newest proof.
    pub fn negotiated_timeout(&self) -> Option<Duration> {
        self.live().ok().map(|l| l.lease.timeout())
    }

    /// The clock the session reads ([`SessionBuilder::clock`]).
    pub fn clock(&self) -> &Clock {
        &self.shared.config.clock
    }

    /// The raw client of the current ZooKeeper session (chrooted), for operations the recipes do
    /// not cover. It stops working when the session is lost; fetch a new one afterwards.
    ///
    /// # Errors
    /// [`Error::ConnectionLoss`] while no session exists, [`Error::Closed`] after close.
    pub fn client(&self) -> Result<Client> {
        self.live().map(|l| l.client)
    }

    /// The instant up to which this process can prove its session, and so its ephemeral nodes,
    /// alive on the server: the send time of the last heartbeat proven to have reached the
    /// quorum leader, plus the timeout, minus a small margin. Boot time ([`crate::Clock`]),
    /// which counts a host's suspend. Now or earlier while no session exists, after `Lost`,
    /// and while the lease has lapsed.
    ///
    /// The session proves its lease only while something needs it: a term held on it, a
    /// contender next in line, and a caller of this method, each for one session timeout after
    /// the last need. A session that nothing needed lets its lease run down (its own touches, an
    /// `exists` a follower answers, keep it alive and cost the quorum leader nothing); the first call then starts the heartbeats, and
    /// the deadline is proven again within a round trip to the quorum leader: until then it may
    /// be in the past.
    ///
    /// A leader that was frozen, suspended or partitioned past this instant must stop acting as
    /// soon as it runs again, before any network round trip: compare with
    /// [`Clock::now`](crate::clock::Clock::now) of [`clock`](Self::clock).
    pub fn safe_until(&self) -> BootTime {
        self.shared.demand.pulse();
        match self.live() {
            Ok(live) => live.safe_until(),
            Err(_) => self.clock().now(),
        }
    }

    /// Waits until a session is established (`Connected`, `Reconnected` or `ReadOnly`), at most
    /// `timeout`.
    ///
    /// # Errors
    /// [`Error::Timeout`] when none is in time, [`Error::Closed`] when the session closes.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    pub async fn wait_connected(&self, timeout: Duration) -> Result<()> {
        let mut rx = self.watch_status();
        let wait = rx.wait_for(|s| s.closed || s.state.is_some_and(ConnectionState::is_connected));
        match tokio::time::timeout(timeout, wait).await {
            Err(_) => Err(Error::Timeout(timeout)),
            Ok(Err(_)) => Err(Error::Closed),
            Ok(Ok(s)) if s.closed => Err(Error::Closed),
            Ok(Ok(_)) => Ok(()),
        }
    }

    /// Closes the session: ends the ZooKeeper session on the server (deleting this session's
    /// ephemeral nodes at once) and stops reconnecting. The last status it publishes has
    /// [`ConnectionState::Closed`] and `closed` set, never [`ConnectionState::Lost`]: a deliberate
    /// close is not a loss, so an alert on `Lost` does not fire on a clean shutdown. Recipes
    /// using the session end their terms and stop.
    ///
    /// It waits at most the connection timeout ([`SessionBuilder::connection_timeout`]) for the
    /// server to confirm. When ZooKeeper is unreachable it returns after that bound (the session
    /// then expires on the servers one session timeout after they last heard from it, and so do
    /// its nodes): give a pod's termination grace period at least the connection timeout plus
    /// the time your work needs to stop.
    ///
    /// # Errors
    /// None today; the `Result` leaves room for reporting a close the server did not confirm.
    ///
    /// # Cancel safety
    /// Cancel safe: the close is started before the first await and completes in the background.
    pub async fn close(&self) -> Result<()> {
        self.shared.stop.cancel();
        let task = self
            .shared
            .supervisor
            .lock()
            .ok()
            .and_then(|mut t| t.take());
        if let Some(task) = task {
            let _ = tokio::time::timeout(self.shared.config.connection_timeout, task).await;
        }
        Ok(())
    }

    /// A handle that does not keep the session open.
    pub(crate) fn downgrade(&self) -> WeakSession {
        WeakSession {
            shared: Arc::downgrade(&self.shared),
            closer: Arc::downgrade(&self._closer),
        }
    }

    /// A need for the lease: the session proves it while this is held, and for one session
    /// timeout after.
    pub(crate) fn demand_lease(&self) -> LeaseDemand {
        self.shared.demand.hold()
    }

    /// The live client of session `epoch`, if that session is still the current one.
    pub(crate) fn live_for(&self, epoch: u64) -> Option<Live> {
        self.live().ok().filter(|l| l.epoch == epoch)
    }

    /// The session timeout the lease counts with once there is a session
    /// ([`negotiated_timeout`](Self::negotiated_timeout)), else the requested one or the
    /// declared floor, whichever is lower.
    pub(crate) fn lease_timeout(&self) -> Duration {
        self.negotiated_timeout()
            .unwrap_or_else(|| self.shared.config.lowest_timeout())
    }

    /// The longest grace that a term's work (a selector's closure, a scheduled job's run, a
    /// command under `zkr`) can be given on this session: the timeout minus the lease margin,
    /// the relay allowance of a tick and a half, and three heartbeat intervals. A term whose
    /// lease is not renewed is ended this long before its deadline, so that its work can stop
    /// within its grace before a successor may start; a longer grace is refused
    /// ([`Error::GraceTooLong`]). With the timeout the lease counts with once there is a
    /// session, else the requested one or the declared floor, whichever is lower.
    pub fn grace_limit(&self) -> Duration {
        let config = &self.shared.config;
        let timeout = self.lease_timeout();
        let margin = config
            .lease_margin
            .unwrap_or_else(|| lease::default_margin(timeout));
        grace_limit(
            timeout,
            assumed_tick(config.server_tick_time, timeout),
            margin,
        )
    }

    /// The grace a recipe gives its work when none is asked for: 5 s, but at most half the
    /// [`grace_limit`](Self::grace_limit), so that a term whose lease is not renewed keeps the
    /// other half to ride out a short suspension before it ends.
    pub fn default_grace(&self) -> Duration {
        lease::default_grace(self.grace_limit())
    }

    /// The configured session timeout (what was asked for, not what was negotiated).
    pub(crate) fn requested_timeout(&self) -> Duration {
        self.shared.config.session_timeout
    }

    /// A receiver of every status change (what [`state_changes`](Self::state_changes) is built on).
    fn subscribe_changes(&self) -> broadcast::Receiver<SessionStatus> {
        self.shared.events_tx.subscribe()
    }

    pub(crate) fn live(&self) -> Result<Live> {
        if self.shared.stop.is_cancelled() {
            return Err(Error::Closed);
        }
        let current = self.shared.current.read().map_err(|_| Error::Closed)?;
        match &*current {
            Some(live) if !live.lease.is_lost() => Ok(live.clone()),
            _ => Err(Error::ConnectionLoss),
        }
    }

    /// Whether a client of ZooKeeper session `session_id` is connected right now.
    pub(crate) fn has_connected_client_of(&self, session_id: i64) -> bool {
        self.shared.current.read().ok().is_some_and(|c| {
            c.as_ref().is_some_and(|l| {
                l.session_id == session_id && l.client.state() == SessionState::SyncConnected
            })
        })
    }

    /// Waits until a client of ZooKeeper session `session_id` is connected to a server (whether
    /// or not its lease is proven: deleting our own nodes needs no lease) and returns it; `None`
    /// once that session is gone (lost, replaced) or this one is closed.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn connected_client_of(&self, session_id: i64) -> Option<Live> {
        let mut status = self.watch_status();
        loop {
            if self.shared.stop.is_cancelled() || status.borrow_and_update().closed {
                return None;
            }
            let current = self.shared.current.read().ok()?.clone();
            match current {
                Some(live) if live.session_id != session_id => return None,
                Some(live) if live.lease.is_lost() => return None,
                Some(live) => {
                    if live.client.state() == SessionState::SyncConnected {
                        return Some(live);
                    }
                    let mut client = live.client.state_watcher();
                    tokio::select! {
                        _ = client.changed() => {}
                        r = status.changed() => if r.is_err() { return None },
                    }
                }
                None => {
                    // Between two clients: resuming this session, or lost.
                    if status.borrow().state == Some(ConnectionState::Lost) {
                        return None;
                    }
                    if status.changed().await.is_err() {
                        return None;
                    }
                }
            }
        }
    }

    /// Waits for a live, writable session, at most `timeout`.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn wait_live(&self, timeout: Duration) -> Result<Live> {
        let mut rx = self.watch_status();
        let wait = rx.wait_for(|s| {
            s.closed
                || matches!(
                    s.state,
                    Some(ConnectionState::Connected | ConnectionState::Reconnected)
                )
        });
        match tokio::time::timeout(timeout, wait).await {
            Err(_) => Err(Error::Timeout(timeout)),
            Ok(Err(_)) => Err(Error::Closed),
            Ok(Ok(s)) if s.closed => Err(Error::Closed),
            Ok(Ok(_)) => self.live(),
        }
    }

    /// The configured connection timeout: how long recipes wait for a connection.
    pub(crate) fn connection_timeout(&self) -> Duration {
        self.shared.config.connection_timeout
    }

    /// The ACL that recipes, jobs and pools started on this session give their nodes when
    /// they are given none ([`NodeAcl::default_for`](crate::NodeAcl::default_for)):
    /// [`creator_all_anyone_read`](crate::NodeAcl::creator_all_anyone_read) when the session
    /// has an identity (digest credentials, a SASL login, or a TLS client certificate, which is
    /// an identity only where the servers run the x509 auth provider),
    /// [`anyone_all`](crate::NodeAcl::anyone_all) otherwise. A chroot the session creates gets
    /// it too, unless [`SessionBuilder::chroot_acl`] says otherwise.
    ///
    /// # Curator
    /// Curator's default ACL provider is open whatever the credentials; set
    /// `.acl(NodeAcl::anyone_all())` on a recipe to get that here.
    pub fn default_acl(&self) -> crate::NodeAcl {
        crate::NodeAcl::default_for(self.has_credentials())
    }

    /// Whether the session authenticates (so that creator ACLs can be used): digest
    /// credentials, a SASL login, or a client certificate (an identity where the servers run
    /// the x509 auth provider).
    pub(crate) fn has_credentials(&self) -> bool {
        self.shared.config.has_identity()
    }

    /// The largest request the servers accept, and the length of the chroot every path sent
    /// is prefixed with: what a request's size on the wire depends on.
    pub(crate) fn request_limits(&self) -> (usize, usize) {
        let chroot = self.shared.config.chroot.as_deref().map_or(0, str::len);
        (self.shared.config.jute_max_buffer, chroot)
    }
}

pub(crate) fn hex(id: i64) -> String {
    format!("{id:#x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
        assert_send_sync::<Session>();
        assert_send_sync::<SessionStatus>();
    }
}
