//! The managed session ([`Session`] has what it adds to the raw client): builder, lease, protected create, status feed.

mod builder;
mod create;
mod lease;
mod relay;

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::stream::{BoxStream, FuturesUnordered, StreamExt};
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};
use zookeeper_client::{Acls, Client, CreateMode, SessionInfo, SessionState};

use builder::Config;
pub use builder::SessionBuilder;
pub(crate) use builder::{
    DEFAULT_CONNECTION_TIMEOUT, DEFAULT_JUTE_MAX_BUFFER, DEFAULT_SESSION_TIMEOUT,
};
pub(crate) use lease::Lease;
use lease::{QuorumProof, assumed_tick, grace_limit, heartbeat_interval, relay_allowance};
use relay::{Relay, RelayEvent};

use crate::clock::{BootTime, BootTimer, Clock};
use crate::error::{Error, Result};
use crate::state::{ClientSignal, ConnectionState, next_state};

/// At most this many heartbeats wait for an answer at once (they queue while disconnected).
const MAX_HEARTBEATS_IN_FLIGHT: usize = 2;

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
///   answering us meanwhile. So the session sends a `sync` every eighth of the timeout (a
///   follower cannot answer one without its leader) and advances its lease to the *send time* of
///   a heartbeat only once a later `sync` proves that the heartbeat's touch reached the leader
///   (see "The deadline" in the latch's spec, and [`SessionBuilder::server_tick_time`]). The
///   session can prove itself alive until that instant plus the timeout (minus a small margin):
///   [`Session::safe_until`], on boot time, which counts a host's suspend
///   ([`crate::Clock`]). The timeout is the lowest any connection of the session negotiated: a
///   relay on loopback reads each reconnect's negotiation, which zookeeper-client does not
///   report. When the deadline passes without a newer proof, every term won on the session ends
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

    /// The negotiated session timeout of the current session: the lowest any of its connections
    /// negotiated since the newest proof (each reconnect negotiates again).
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
    /// A leader that was frozen, suspended or partitioned past this instant must stop acting as
    /// soon as it runs again, before any network round trip: compare with
    /// [`Clock::now`](crate::clock::Clock::now) of [`clock`](Self::clock).
    pub fn safe_until(&self) -> BootTime {
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

    /// The live client of session `epoch`, if that session is still the current one.
    pub(crate) fn live_for(&self, epoch: u64) -> Option<Live> {
        self.live().ok().filter(|l| l.epoch == epoch)
    }

    /// The session timeout the lease counts with: the negotiated one once there is a session,
    /// else the requested one.
    pub(crate) fn lease_timeout(&self) -> Duration {
        self.negotiated_timeout()
            .unwrap_or(self.shared.config.session_timeout)
    }

    /// The longest grace that a term's work (a selector's closure, a scheduled job's run, a
    /// command under `zkr`) can be given on this session: the timeout minus the lease margin,
    /// the relay allowance of a tick and a half, and three heartbeat intervals. A term whose
    /// lease is not renewed is ended this long before its deadline, so that its work can stop
    /// within its grace before a successor may start; a longer grace is refused
    /// ([`Error::GraceTooLong`]). With the negotiated timeout once there is a session, else the
    /// requested one.
    pub fn grace_limit(&self) -> Duration {
        let config = &self.shared.config;
        let timeout = self.negotiated_timeout().unwrap_or(config.session_timeout);
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
    pub(crate) fn subscribe_changes(&self) -> broadcast::Receiver<SessionStatus> {
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

    /// Whether the session authenticates (so that creator ACLs can be used).
    pub(crate) fn has_credentials(&self) -> bool {
        self.shared.config.digest.is_some()
    }

    /// The largest request the servers accept, and the length of the chroot every path sent
    /// is prefixed with: what a request's size on the wire depends on.
    pub(crate) fn request_limits(&self) -> (usize, usize) {
        let chroot = self.shared.config.chroot.as_deref().map_or(0, str::len);
        (self.shared.config.jute_max_buffer, chroot)
    }
}

/// Every status change of a session, in order, for a recipe's task: the contender core, the
/// observer and the pool each read one.
pub(crate) struct StatusFeed {
    rx: broadcast::Receiver<SessionStatus>,
    session: Session,
}

impl StatusFeed {
    pub(crate) fn new(session: &Session) -> Self {
        StatusFeed {
            rx: session.subscribe_changes(),
            session: session.clone(),
        }
    }

    /// The next status change (the latest status when the feed fell behind; `closed` once the
    /// session is gone).
    pub(crate) async fn next(&mut self) -> SessionStatus {
        match self.rx.recv().await {
            Ok(status) => status,
            Err(broadcast::error::RecvError::Lagged(_)) => self.session.status(),
            Err(broadcast::error::RecvError::Closed) => {
                let mut status = self.session.status();
                status.closed = true;
                status
            }
        }
    }

    /// The session this feed follows.
    pub(crate) fn session(&self) -> &Session {
        &self.session
    }

    /// A change that is already queued, if any (the latest status when the feed fell behind).
    pub(crate) fn try_next(&mut self) -> Option<SessionStatus> {
        match self.rx.try_recv() {
            Ok(status) => Some(status),
            Err(broadcast::error::TryRecvError::Lagged(_)) => Some(self.session.status()),
            Err(_) => None,
        }
    }

    /// Waits until the session is `Connected` or `Reconnected` (not `ReadOnly`: a read-only
    /// server may lag arbitrarily) and returns its client; `None` when `stop` fires or the session
    /// closes. `seen` is called with every change that passes meanwhile.
    pub(crate) async fn wait_quorum(
        &mut self,
        stop: &CancellationToken,
        mut seen: impl FnMut(&SessionStatus),
    ) -> Option<Live> {
        loop {
            if stop.is_cancelled() {
                return None;
            }
            let status = self.session.status();
            if status.closed {
                return None;
            }
            if matches!(
                status.state,
                Some(ConnectionState::Connected | ConnectionState::Reconnected)
            ) && let Ok(live) = self.session.live()
            {
                return Some(live);
            }
            tokio::select! {
                _ = stop.cancelled() => return None,
                status = self.next() => {
                    seen(&status);
                    if status.closed {
                        return None;
                    }
                }
            }
        }
    }
}

/// Whether `e` says the request's fate is unknown or the session went away, rather than that the
/// server refused it: connection loss (zookeeper-client fails requests that were in flight when
/// the connection broke with the I/O error itself, a `Custom` error), expiry, a retired client.
pub(crate) fn is_transient(e: &zookeeper_client::Error) -> bool {
    use zookeeper_client::Error as Zk;
    matches!(
        e,
        Zk::ConnectionLoss
            | Zk::SessionExpired
            | Zk::SessionMoved
            | Zk::Timeout
            | Zk::ClientClosed
            | Zk::Custom(_)
    )
}

pub(crate) fn hex(id: i64) -> String {
    format!("{id:#x}")
}

/// How the client of one ZooKeeper session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EndOfSession {
    /// [`Session::close`].
    Closed,
    /// The client gave up on the session without the servers saying it expired (zookeeper-client
    /// declares a session expired by itself after about 7/5 of the timeout without a
    /// connection): the session may well be alive on the servers, and a new client resumes it.
    GaveUp,
    /// The servers said the session expired.
    Expired,
    /// The client ended for a reason a resume would meet again (refused credentials), or it
    /// left its session for another one (a read-only session it replaced).
    Failed,
}

/// A heartbeat's send time, the connection it went out on, and when it was answered.
type Heartbeat =
    Pin<Box<dyn std::future::Future<Output = (BootTime, u64, Option<BootTime>)> + Send>>;

/// A session whose client gave up on it: what a new client needs to resume it.
struct Resume {
    info: SessionInfo,
    lease: Arc<Lease>,
    timeout: Duration,
}

/// The session's one background task: connects, watches, proves the session alive, resumes a
/// session its client gave up on, starts a new session after loss. All state changes go through
/// `publish`.
async fn supervise(shared: Arc<Shared>) {
    let clock = shared.config.clock.clone();
    // Every connection of the client goes through the relay, which reads what each one
    // negotiates (see `relay`).
    let (relay_tx, mut relay_events) = mpsc::unbounded_channel();
    let relay = match Relay::start(&shared.config.hosts, clock.clone(), relay_tx).await {
        Ok(relay) => relay,
        Err(e) => {
            error!(error = %e, "cannot listen on loopback for the session's relay; the session cannot start");
            if let Ok(mut refusal) = shared.refusal.lock() {
                *refusal = Some(Error::Unreachable {
                    reason: format!("cannot listen on loopback for the session's relay: {e}"),
                });
            }
            publish_closed(&shared, None, 0);
            return;
        }
    };
    let mut epoch = 0u64;
    let mut state: Option<ConnectionState> = None;
    let mut failures = 0u32;
    let mut resume: Option<Resume> = None;
    loop {
        let started = clock.now();
        let connected = tokio::select! {
            _ = shared.stop.cancelled() => break,
            r = async {
                match &resume {
                    Some(r) => connect_resumed(&shared.config, &relay.local, r).await,
                    None => connect_client(&shared.config, &relay.local).await,
                }
            } => r,
        };
        let client = match connected {
            Ok(client) => client,
            Err(Error::SessionExpired) if resume.is_some() => {
                // The servers say the session the client gave up on is gone: now it is lost.
                if let Some(r) = resume.take() {
                    lose(
                        &shared,
                        &mut state,
                        epoch,
                        &r.lease,
                        "the servers say the session expired",
                    );
                }
                continue;
            }
            Err(err) => {
                failures = failures.saturating_add(1);
                let backoff = retry_backoff(
                    failures,
                    MAX_RECONNECT_PAUSE.min(shared.config.connection_timeout),
                );
                if matches!(
                    err,
                    Error::Refused { .. } | Error::AuthFailed | Error::Unreachable { .. }
                ) && let Ok(mut refusal) = shared.refusal.lock()
                {
                    *refusal = Some(err.clone());
                }
                if matches!(err, Error::AuthFailed) {
                    error!(hosts = %shared.config.hosts, "ZooKeeper refused the credentials; retrying in {backoff:?}");
                } else if resume.is_some() {
                    debug!(hosts = %shared.config.hosts, error = %err, "could not resume the session yet; retrying in {backoff:?}");
                } else {
                    warn!(hosts = %shared.config.hosts, error = %err, "could not establish a ZooKeeper session; retrying in {backoff:?}");
                }
                tokio::select! {
                    _ = shared.stop.cancelled() => break,
                    _ = tokio::time::sleep(backoff) => continue,
                }
            }
        };
        failures = 0;
        epoch += 1;
        let session_id = client.session_id().0;
        let resumed = resume.take();
        let (lease, timeout, new_session) = match resumed {
            Some(r) => {
                info!(session_id = %hex(session_id), epoch, "resumed the session its client had given up on: its nodes are still there");
                (r.lease, r.timeout, false)
            }
            None => {
                let timeout = client.session_timeout();
                let tick = assumed_tick(shared.config.server_tick_time, timeout);
                if shared.config.server_tick_time.is_none()
                    && !shared.tick_warned.swap(true, Ordering::AcqRel)
                {
                    warn!(
                        assumed_tick_ms = tick.as_millis() as u64,
                        negotiated_timeout_ms = timeout.as_millis() as u64,
                        "the servers' tickTime is not configured: the lease assumes {tick:?} (ZooKeeper's default, at most a third of the timeout); a larger real tick makes the lease unsafe, so set it (SessionBuilder::server_tick_time, zkr --server-tick-time)"
                    );
                }
                info!(session_id = %hex(session_id), epoch, negotiated_timeout_ms = timeout.as_millis() as u64,
                    "ZooKeeper session established");
                let lease = Arc::new(Lease::new(
                    clock.clone(),
                    started,
                    timeout,
                    shared.config.lease_margin,
                ));
                (lease, timeout, true)
            }
        };
        let tick = assumed_tick(shared.config.server_tick_time, timeout);
        let live = Live {
            client: client.clone(),
            epoch,
            session_id,
            lease: Arc::clone(&lease),
        };
        if let Ok(mut current) = shared.current.write() {
            *current = Some(live.clone());
        }
        let read_only = client.state() == SessionState::ConnectedReadOnly;
        // A resumed session whose lease has lapsed stays suspended until a heartbeat proves it.
        if new_session || read_only || lease.is_valid() {
            let signal = if read_only {
                ClientSignal::ConnectedReadOnly
            } else {
                ClientSignal::Connected
            };
            if let Some(next) = next_state(state, signal, new_session) {
                state = Some(next);
                publish(&shared, next, Some(session_id), epoch, new_session);
            }
        }
        let end = serve(&shared, &live, &mut state, &mut relay_events, tick).await;
        if let Ok(mut current) = shared.current.write() {
            *current = None;
        }
        // Release our handle before anything waits: the client ends its session only once its
        // last handle is gone.
        drop(live);
        match end {
            EndOfSession::Closed => {
                lease.mark_lost();
                // Tell recipes first, so that they drop their handles too, then close.
                publish_closed(&shared, state, epoch);
                close_client(client, shared.config.connection_timeout).await;
                return;
            }
            EndOfSession::GaveUp => {
                warn!(session_id = %hex(session_id), "the client gave up on the session without the servers saying it expired; resuming it with a new client (it is lost only if the servers say so)");
                if next_state(state, ClientSignal::Disconnected, false).is_some() {
                    state = Some(ConnectionState::Suspended);
                    publish(
                        &shared,
                        ConnectionState::Suspended,
                        Some(session_id),
                        epoch,
                        false,
                    );
                }
                resume = Some(Resume {
                    info: client.session().clone(),
                    lease,
                    timeout,
                });
                drop(client);
            }
            EndOfSession::Expired => {
                lose(
                    &shared,
                    &mut state,
                    epoch,
                    &lease,
                    "the servers say the session expired",
                );
                drop(client);
            }
            EndOfSession::Failed => {
                lose(
                    &shared,
                    &mut state,
                    epoch,
                    &lease,
                    "the client ended for good",
                );
                // Should the servers still hold the session, end it there: a clone of the
                // client that the application still holds (`Session::client()`) would
                // otherwise keep it, and its nodes, alive.
                let info = client.session().clone();
                drop(client);
                tokio::spawn(retire(shared.config.hosts.clone(), info, timeout));
            }
        }
    }
    publish_closed(&shared, state, epoch);
}

/// The session is lost: its lease ends and `Lost` is published; a new session follows.
fn lose(
    shared: &Shared,
    state: &mut Option<ConnectionState>,
    epoch: u64,
    lease: &Lease,
    why: &str,
) {
    lease.mark_lost();
    warn!(epoch, why, "session lost");
    if let Some(next) = next_state(*state, ClientSignal::Terminated, false) {
        *state = Some(next);
        publish(shared, next, None, epoch, false);
    }
}

/// Publishes the final status: closed.
fn publish_closed(shared: &Shared, state: Option<ConnectionState>, epoch: u64) {
    if let Ok(mut current) = shared.current.write() {
        *current = None;
    }
    let status = SessionStatus {
        state: state.map(|_| ConnectionState::Closed),
        session_id: None,
        epoch,
        new_session: false,
        closed: true,
    };
    info!(epoch, "session closed");
    if status.state.is_some() {
        crate::metrics::connection_state(ConnectionState::Closed.as_str(), false);
    }
    shared.status_tx.send_replace(status.clone());
    let _ = shared.events_tx.send(status);
}

/// What the client says of its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Connected,
    ReadOnly,
    Down,
}

/// Serves one ZooKeeper session until it ends: proves it alive, follows the client's state and
/// what the relay saw of each reconnect, and publishes the state that follows from both.
///
/// The published state is `Suspended` while the client is disconnected *or* the lease has
/// lapsed, and `Connected`/`Reconnected` once both are right again: a lapsed lease ends every
/// term on the session, not the session.
async fn serve(
    shared: &Shared,
    live: &Live,
    state: &mut Option<ConnectionState>,
    relay_events: &mut mpsc::UnboundedReceiver<RelayEvent>,
    tick: Duration,
) -> EndOfSession {
    let client = &live.client;
    let lease = &live.lease;
    let clock = lease.clock().clone();
    let mut watcher = client.state_watcher();
    let timeout = lease.timeout();
    let relay = relay_allowance(tick);
    let room = lease::headroom(timeout, tick, lease.margin());
    if room < heartbeat_interval(timeout) * 2 {
        warn!(session_id = %hex(live.session_id), timeout_ms = timeout.as_millis() as u64,
            relay_ms = relay.as_millis() as u64,
            "the session timeout leaves almost no lease once a heartbeat's way to the quorum leader is allowed for: every hiccup will end its terms; use a timeout of at least four server ticks");
    }
    let mut link = if client.state() == SessionState::ConnectedReadOnly {
        Link::ReadOnly
    } else {
        Link::Connected
    };
    let mut lapsed = !lease.is_valid();
    // Whether a server answered a reconnect of this session with "expired".
    let mut expired_answer = false;
    let mut proof = QuorumProof::default();
    // What each server negotiated with this session last, for an attempt it never answered.
    let mut by_server: std::collections::HashMap<String, Duration> = Default::default();
    let mut timer = BootTimer::new(clock.clone());
    let next_beat = tokio::time::sleep(heartbeat_interval(timeout));
    tokio::pin!(next_beat);
    let mut heartbeats: FuturesUnordered<Heartbeat> = FuturesUnordered::new();
    loop {
        let deadline = lease.deadline();
        let signal = tokio::select! {
            biased;
            _ = shared.stop.cancelled() => return EndOfSession::Closed,
            // Before the client's own state: the relay reports a reconnect's negotiation before
            // the client can read it.
            Some(event) = relay_events.recv() => {
                match event {
                    RelayEvent::Negotiated { server, requested_session, answered_session, timeout: negotiated, sent, answered }
                        if requested_session == live.session_id && answered_session == live.session_id =>
                    {
                        let before = lease.timeout();
                        let conn = lease.connected(negotiated);
                        by_server.insert(server.clone(), negotiated);
                        if negotiated < before {
                            warn!(session_id = %hex(live.session_id), server, from_ms = before.as_millis() as u64,
                                to_ms = negotiated.as_millis() as u64,
                                "the reconnect renegotiated a shorter session timeout: the lease counts with it from now on");
                        } else {
                            debug!(session_id = %hex(live.session_id), server, timeout_ms = negotiated.as_millis() as u64, "reconnected");
                        }
                        // The server revalidated the session with the quorum leader before it
                        // answered: a heartbeat like any other.
                        if let Some((proven, on)) = proof.record(sent, answered, conn, relay) {
                            lease.advance(proven, on);
                        }
                    }
                    RelayEvent::Negotiated { requested_session, answered_session: 0, .. }
                        if requested_session == live.session_id =>
                    {
                        expired_answer = true;
                    }
                    RelayEvent::Unanswered { server, session_id, sent } if session_id == live.session_id => {
                        let timeout = by_server.get(&server).copied().unwrap_or(lease.timeout());
                        debug!(session_id = %hex(session_id), server, sent = %sent, timeout_ms = timeout.as_millis() as u64,
                            "a reconnect attempt went unanswered: the lease counts with the timeout that server gave last");
                        lease.unanswered_attempt(timeout);
                    }
                    _ => {}
                }
                match lapse_or_proof(shared, live, lease, &mut lapsed, link) {
                    Some(signal) => signal,
                    None => continue,
                }
            }
            _ = timer.sleep_until(deadline), if !lapsed => {
                match lapse_or_proof(shared, live, lease, &mut lapsed, link) {
                    Some(signal) => signal,
                    None => continue,
                }
            }
            zk = watcher.changed() => {
                debug!(session_id = %hex(live.session_id), zk_state = %zk, "client state changed");
                match zk {
                    SessionState::SyncConnected if client.session_id().0 != live.session_id => {
                        // A client that started on a read-only server opens a brand-new session
                        // when it finds a writable one. That is not the session we track (its
                        // nodes, its lease): end ours, and start over with a client of our own.
                        warn!(session_id = %hex(live.session_id), new_session_id = %hex(client.session_id().0),
                            "the client left its read-only session for a new one; starting over with a new session");
                        return EndOfSession::Failed;
                    }
                    SessionState::SyncConnected => {
                        link = Link::Connected;
                        heartbeats.push(heartbeat(live));
                        if lease.is_valid() {
                            lapsed = false;
                            ClientSignal::Connected
                        } else {
                            // Back on a server, but nothing proves the quorum heard of us yet:
                            // still suspended until a heartbeat does.
                            lapsed = true;
                            continue;
                        }
                    }
                    SessionState::ConnectedReadOnly => {
                        link = Link::ReadOnly;
                        ClientSignal::ConnectedReadOnly
                    }
                    SessionState::Disconnected => {
                        link = Link::Down;
                        ClientSignal::Disconnected
                    }
                    SessionState::Expired if expired_answer => return EndOfSession::Expired,
                    SessionState::AuthFailed => return EndOfSession::Failed,
                    // Expired by the client's own timer, or closed under us: the servers may
                    // still hold the session.
                    _ => return EndOfSession::GaveUp,
                }
            }
            Some((sent, conn, answered)) = heartbeats.next(), if !heartbeats.is_empty() => {
                if let Some((proven, on)) = answered.and_then(|at| proof.record(sent, at, conn, relay)) {
                    lease.advance(proven, on);
                }
                match lapse_or_proof(shared, live, lease, &mut lapsed, link) {
                    Some(signal) => signal,
                    None => continue,
                }
            }
            () = &mut next_beat => {
                next_beat.as_mut().reset(tokio::time::Instant::now() + heartbeat_interval(lease.timeout()));
                if lease.check_clocks() {
                    warn!(session_id = %hex(live.session_id),
                        "the wall clock ran ahead of boot time: a pause that boot time did not see (a hypervisor that restored the guest's clock); the lease is void until a later heartbeat proves it");
                    proof.forget_until(clock.now());
                }
                if heartbeats.len() < MAX_HEARTBEATS_IN_FLIGHT {
                    heartbeats.push(heartbeat(live));
                }
                match lapse_or_proof(shared, live, lease, &mut lapsed, link) {
                    Some(signal) => signal,
                    None => continue,
                }
            }
        };
        if let Some(next) = next_state(*state, signal, false) {
            *state = Some(next);
            publish(shared, next, Some(live.session_id), live.epoch, false);
        }
    }
}

/// Whether the lease just lapsed (`Disconnected`: the state becomes `Suspended`) or was just
/// proven again on a connected client (`Connected`: `Reconnected`); `None` when neither.
fn lapse_or_proof(
    shared: &Shared,
    live: &Live,
    lease: &Lease,
    lapsed: &mut bool,
    link: Link,
) -> Option<ClientSignal> {
    let valid = lease.is_valid();
    match (*lapsed, valid) {
        (false, false) => {
            *lapsed = true;
            warn!(session_id = %hex(live.session_id),
                unproven_ms = lease.clock().now().saturating_duration_since(lease.acked()).as_millis() as u64,
                timeout_ms = lease.timeout().as_millis() as u64,
                "the quorum cannot be shown to have heard from this session within its timeout: its terms end; the session is kept and keeps proving itself");
            crate::metrics::lease_lapsed();
            lease.note_lapse();
            // A read-only link already keeps every term from starting; leave its state alone.
            (link != Link::ReadOnly).then_some(ClientSignal::Disconnected)
        }
        (true, true) => {
            *lapsed = false;
            info!(session_id = %hex(live.session_id), "the lease is proven again");
            let _ = shared;
            (link == Link::Connected).then_some(ClientSignal::Connected)
        }
        _ => None,
    }
}

/// One heartbeat: a `sync`, which only a server in touch with the quorum leader can answer (a
/// follower forwards it to the leader). Yields its send time, the connection it went out on,
/// and when it was answered. One request per heartbeat, whatever the number of terms the
/// session holds: each term watches its own node instead.
fn heartbeat(live: &Live) -> Heartbeat {
    let clock = live.lease.clock().clone();
    let sent = clock.now();
    let conn = live.lease.current_conn();
    let client = live.client.clone();
    Box::pin(async move {
        match client.sync("/").await {
            Ok(()) => (sent, conn, Some(clock.now())),
            Err(e) => {
                debug!(error = %e, "heartbeat failed");
                (sent, conn, None)
            }
        }
    })
}

fn publish(
    shared: &Shared,
    state: ConnectionState,
    session_id: Option<i64>,
    epoch: u64,
    new_session: bool,
) {
    let sid = session_id.map(hex).unwrap_or_default();
    crate::metrics::connection_state(state.as_str(), state == ConnectionState::Lost);
    match state {
        ConnectionState::Connected | ConnectionState::Reconnected | ConnectionState::Closed => {
            info!(session_id = %sid, epoch, new_session, state = %state, "connection state changed")
        }
        ConnectionState::ReadOnly | ConnectionState::Suspended | ConnectionState::Lost => {
            warn!(session_id = %sid, epoch, state = %state, "connection state changed")
        }
    }
    let status = SessionStatus {
        state: Some(state),
        session_id: (state != ConnectionState::Lost)
            .then_some(session_id)
            .flatten(),
        epoch,
        new_session,
        closed: false,
    };
    shared.status_tx.send_replace(status.clone());
    let _ = shared.events_tx.send(status);
}

/// Builds a client for a new ZooKeeper session, creating the chroot if needed.
/// How long [`probe_hosts`] waits for each host (or the connection timeout, if shorter).
const PROBE_BOUND: Duration = Duration::from_secs(1);

/// What each host of `hosts` does with a plain TCP connection, for the error that says why no
/// session could be established: `127.0.0.1:2181: connection refused, zk2:2181: no answer
/// within 15s`.
async fn probe_hosts(hosts: &str, bound: Duration) -> String {
    let mut reasons = Vec::new();
    for host in hosts.split(',') {
        let addr = host.trim().trim_start_matches("tcp://");
        let what = match tokio::time::timeout(bound, tokio::net::TcpStream::connect(addr)).await {
            Err(_) => format!("no answer within {bound:?}"),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                "connection refused".to_owned()
            }
            Ok(Err(e)) => e.to_string(),
            Ok(Ok(_)) => "accepts connections but established no session".to_owned(),
        };
        reasons.push(format!("{addr}: {what}"));
    }
    reasons.join(", ")
}

/// Builds a client that resumes the session `resume` describes (its own client gave up on it).
///
/// # Errors
/// [`Error::SessionExpired`] when the servers say the session is gone; others when no server
/// answered.
async fn connect_resumed(config: &Config, relayed: &str, resume: &Resume) -> Result<Client> {
    let mut connector = Client::connector()
        .with_session(resume.info.clone())
        .with_session_timeout(resume.timeout)
        .with_readonly(config.read_only);
    if let Some((user, password)) = &config.digest {
        connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
    }
    let client = match connector.with_fail_eagerly().connect(relayed).await {
        Ok(client) => client,
        Err(zookeeper_client::Error::SessionExpired) => return Err(Error::SessionExpired),
        Err(zookeeper_client::Error::NoHosts) => {
            return Err(Error::Unreachable {
                reason: probe_hosts(&config.hosts, config.connection_timeout.min(PROBE_BOUND))
                    .await,
            });
        }
        Err(e) => return Err(e.into()),
    };
    match &config.chroot {
        Some(chroot) => client
            .chroot(chroot.clone())
            .map_err(|_| Error::InvalidPath {
                path: chroot.clone(),
                reason: "the client refused this chroot",
            }),
        None => Ok(client),
    }
}

async fn connect_client(config: &Config, relayed: &str) -> Result<Client> {
    let mut connector = Client::connector()
        .with_session_timeout(config.session_timeout)
        .with_readonly(config.read_only);
    if let Some((user, password)) = &config.digest {
        connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
    }
    // One round of the hosts per attempt (the client would otherwise cycle through them until
    // the session timeout and report only `Timeout`): the supervisor retries with its own
    // bounded backoff, and can say why no host answered.
    let client = match connector.with_fail_eagerly().connect(relayed).await {
        Ok(client) => client,
        Err(zookeeper_client::Error::NoHosts) => {
            return Err(Error::Unreachable {
                reason: probe_hosts(&config.hosts, config.connection_timeout.min(PROBE_BOUND))
                    .await,
            });
        }
        Err(e) => return Err(e.into()),
    };
    let Some(chroot) = &config.chroot else {
        return Ok(client);
    };
    // Look before creating: the server checks CREATE on the parent before it checks whether the
    // node exists, so creating a chroot that an operator provisioned under a parent closed to us
    // would be refused although nothing needs creating (and a read-only server refuses every
    // create).
    if client.check_stat(chroot).await?.is_none() {
        let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
        match client.mkdir(chroot, &persistent).await {
            Ok(()) | Err(zookeeper_client::Error::NodeExists) => {}
            // Without its chroot a session could make no node at all: no session then, and a
            // refusal is what `connect` reports.
            Err(e) if crate::error::is_refusal(&e) => {
                return Err(Error::Refused {
                    operation: "create the chroot",
                    path: chroot.clone(),
                    source: e,
                });
            }
            Err(e) => return Err(e.into()),
        }
    }
    client
        .chroot(chroot.clone())
        .map_err(|_| Error::InvalidPath {
            path: chroot.clone(),
            reason: "the client refused this chroot",
        })
}

/// Ends a retired ZooKeeper session on the servers, from a twin client that takes the session
/// over and closes it. Gives up once the servers say the session is gone, or after a few session
/// timeouts: by then a session that nobody else keeps alive has expired anyway.
async fn retire(hosts: String, info: SessionInfo, timeout: Duration) {
    let id = hex(info.id().0);
    let give_up = tokio::time::Instant::now() + (timeout * 4).max(Duration::from_secs(30));
    let mut failures = 0u32;
    while tokio::time::Instant::now() < give_up {
        let twin = Client::connector()
            .with_session(info.clone())
            .with_session_timeout(timeout)
            .connect(&hosts);
        match tokio::time::timeout(timeout, twin).await {
            Ok(Ok(twin)) => {
                close_client(twin, timeout).await;
                info!(session_id = %id, "closed the retired session on the servers");
                return;
            }
            Ok(Err(zookeeper_client::Error::SessionExpired)) => {
                debug!(session_id = %id, "the retired session is gone from the servers");
                return;
            }
            Ok(Err(e)) => {
                debug!(session_id = %id, error = %e, "could not reach the retired session yet")
            }
            Err(_) => debug!(session_id = %id, "could not reach the retired session yet"),
        }
        failures = failures.saturating_add(1);
        tokio::time::sleep(retry_backoff(failures, MAX_RECONNECT_PAUSE)).await;
    }
    warn!(session_id = %id, "could not close the retired session; it ends when the servers expire it");
}

/// Drops the last handle of `client` (which makes it send CloseSession) and waits, bounded, for
/// the client to report that it is closed.
async fn close_client(client: Client, bound: Duration) {
    let mut watcher = client.state_watcher();
    drop(client);
    let closed = async {
        while !watcher.peek_state().is_terminated() {
            watcher.changed().await;
        }
    };
    if tokio::time::timeout(bound, closed).await.is_err() {
        debug!("server did not confirm the session close in time");
    }
}

/// The longest pause between two attempts to start a ZooKeeper session. Each attempt already
/// takes up to the client's own timeout; a longer pause would only delay the recovery once the
/// servers are back (the fault trials found pauses of up to the connection timeout making the
/// first leader after a long outage come seconds late). ZooKeeper's Java client, under Curator,
/// also pauses at most a second between rounds of its hosts.
const MAX_RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// Pause before the next connect attempt: doubles from 100 ms, at most `cap`.
pub(crate) fn retry_backoff(failures: u32, cap: Duration) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    Duration::from_millis(100)
        .saturating_mul(1u32 << exp)
        .min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_backoff_doubles_up_to_the_cap() {
        let cap = Duration::from_secs(1);
        assert_eq!(retry_backoff(1, cap), Duration::from_millis(100));
        assert_eq!(retry_backoff(2, cap), Duration::from_millis(200));
        assert_eq!(retry_backoff(4, cap), Duration::from_millis(800));
        assert_eq!(retry_backoff(5, cap), cap);
        assert_eq!(retry_backoff(u32::MAX, cap), cap);
    }

    #[test]
    fn session_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
        assert_send_sync::<Session>();
        assert_send_sync::<SessionStatus>();
    }
}
