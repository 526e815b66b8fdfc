//! The managed session: one ZooKeeper session at a time, Curator's connection states, a deadline
//! up to which the session is provably alive, and a new session by itself after expiry.
//!
//! A [`Session`] is what Curator calls the framework (`CuratorFramework` plus its
//! `ConnectionStateManager`). Recipes share one; it is cheap to clone. It owns a
//! [`zookeeper_client::Client`] and adds what the raw client does not give:
//!
//! - **Connection states** ([`ConnectionState`]): `Connected`, `Suspended`, `Reconnected`,
//!   `Lost`, `ReadOnly` (and `Closed` after [`Session::close`]), published through a [`tokio::sync::watch`] ([`Session::watch_status`])
//!   and a [`Stream`](futures::Stream) ([`Session::state_changes`]), each change logged with `tracing`.
//! - **Lost by deadline.** The client only declares a session expired once the server says so
//!   (or, by itself, after about 7/5 of the timeout). The quorum leader may expire the session as
//!   soon as it has not heard of us for the negotiated timeout, and a follower cut off from it
//!   keeps answering us meanwhile. So the session sends a `sync` every eighth of the timeout (a
//!   follower cannot answer one without its leader) and advances its lease to the *send time* of
//!   a heartbeat only once a later `sync` proves that the heartbeat's touch reached the leader
//!   (see "The deadline" in the latch's spec, and [`SessionBuilder::server_tick_time`]). The
//!   session can prove itself alive until that instant plus the timeout (minus a small margin):
//!   [`Session::safe_until`]. When that deadline passes without a newer proof, the session
//!   reports `Lost`, as Curator's "simulated session expiration" does, retires the client, closes
//!   its session on the servers, and starts a new ZooKeeper session.
//! - **A new session after loss**, reported as `Reconnected` with [`SessionStatus::new_session`]
//!   set and a higher [`SessionStatus::epoch`], so recipes know to re-create their nodes. A holder
//!   of the session never rebuilds it. Attempts to start one follow each other at most a second
//!   apart, however long the outage, so the session is back soon after the servers are.
//! - **Protected creates** shared by all recipes (Curator's `withProtection()`), which never leave
//!   an orphan node behind (CURATOR-18, CURATOR-498).
//!
//! # Curator
//! | Curator                                     | here                                  |
//! |---------------------------------------------|---------------------------------------|
//! | `CuratorFrameworkFactory.builder()`          | [`Session::builder`]                   |
//! | `start()` + `blockUntilConnected()`          | [`SessionBuilder::connect`]            |
//! | `getConnectionStateListenable()`             | [`Session::state_changes`], [`Session::watch_status`] |
//! | `ConnectionState`                           | [`ConnectionState`]                    |
//! | simulated session expiration                 | `Lost` at [`Session::safe_until`]      |
//! | `close()`                                   | [`Session::close`]                     |

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::stream::{BoxStream, FuturesUnordered, StreamExt};
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};
use zookeeper_client::{Acls, Client, CreateMode, SessionInfo, SessionState};

use crate::acl::NodeAcl;
use crate::error::{Error, Result};
use crate::path::{self, ConnectString};
use crate::state::{ClientSignal, ConnectionState, next_state};

/// Curator's default session timeout (the server clamps it to its own limits).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(60);
/// Curator's default connection timeout.
pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(15);
/// ZooKeeper's default `jute.maxbuffer`: the largest request packet, in bytes, a server accepts.
pub const DEFAULT_JUTE_MAX_BUFFER: usize = 0xfffff;

/// How often, as a fraction of the negotiated timeout, the session proves itself alive.
const HEARTBEATS_PER_TIMEOUT: u32 = 8;
/// At most this many heartbeats wait for an answer at once (they queue while disconnected).
const MAX_HEARTBEATS_IN_FLIGHT: usize = 2;

/// Builds a [`Session`].
///
/// # Examples
/// ```no_run
/// # async fn demo() -> zookeeper_recipes::Result<()> {
/// use std::time::Duration;
/// use zookeeper_recipes::Session;
///
/// let session = Session::builder("127.0.0.1:2181/services")
///     .session_timeout(Duration::from_secs(10))
///     .connection_timeout(Duration::from_secs(5))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `start` or `connect` is called"]
pub struct SessionBuilder {
    connect: String,
    chroot: Option<String>,
    session_timeout: Duration,
    connection_timeout: Duration,
    digest: Option<(String, String)>,
    read_only: bool,
    lease_margin: Option<Duration>,
    server_tick_time: Option<Duration>,
    jute_max_buffer: usize,
}

impl SessionBuilder {
    /// The session timeout to ask the server for (default 60 s, Curator's). The server clamps it
    /// to its `[minSessionTimeout, maxSessionTimeout]`; the negotiated value is what counts.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long [`connect`](Self::connect) waits for the first session (default 15 s).
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// A chroot (Curator's namespace) for every path; it is created (with its missing ancestors,
    /// open to anyone) if missing. One that cannot be created (no permission, an ephemeral node
    /// in its way) means no session: [`connect`](Self::connect) returns [`Error::Refused`]. The
    /// connect string may carry one instead (`host:2181/app`), not both.
    pub fn chroot(mut self, chroot: impl Into<String>) -> Self {
        self.chroot = Some(chroot.into());
        self
    }

    /// Authenticates with ZooKeeper's `digest` scheme as `user:password`.
    pub fn digest_auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.digest = Some((user.into(), password.into()));
        self
    }

    /// Accept read-only servers (Curator's `canBeReadOnly`); default `false`.
    ///
    /// A client that starts on a read-only server opens a brand-new ZooKeeper session when it
    /// reaches a writable one; the session reports that as `Lost` then a new session. Note that
    /// zookeeper-client 0.11 could not establish a session on a ZooKeeper 3.8 read-only server
    /// in our tests (it cannot parse the server's answer), so with those parts this setting
    /// only keeps connection attempts to such a server failing.
    pub fn can_be_read_only(mut self, allowed: bool) -> Self {
        self.read_only = allowed;
        self
    }

    /// How much earlier than the server could expire the session this process stops trusting it
    /// (default 1/20 of the negotiated timeout, at least 10 ms).
    pub fn lease_margin(mut self, margin: Duration) -> Self {
        self.lease_margin = Some(margin);
        self
    }

    /// The servers' `tickTime` (default: ZooKeeper's default of 2 s, but at most a third of the
    /// negotiated session timeout).
    ///
    /// In an ensemble only the quorum leader expires sessions, and a follower passes the sessions
    /// it has heard from to the leader only in its replies to the leader's pings, every half
    /// tick. So the session can prove a heartbeat reached the quorum only about a tick and a
    /// half after sending it, and its deadline ([`Session::safe_until`]) trails the timeout by
    /// that much (see the deadline section of `recipes/leader-latch.md`). Set this when the
    /// servers run a tick larger than the default assumes; a larger value is always safe, a
    /// smaller one than the servers' is not. A session timeout shorter than about four ticks
    /// leaves too little room, and the session is lost at every hiccup (a warning says so).
    pub fn server_tick_time(mut self, tick: Duration) -> Self {
        self.server_tick_time = Some(tick);
        self
    }

    /// The largest request the servers accept, in bytes: their `jute.maxbuffer` (default
    /// [`DEFAULT_JUTE_MAX_BUFFER`], 1 MiB - 1). A server closes the *connection* of a client that
    /// sends a bigger packet, which suspends the session and, under the Standard policy, ends
    /// every term on it; so a fenced write ([`Leadership::fenced`](crate::Leadership::fenced))
    /// bigger than this is refused before it is sent ([`Error::RequestTooLarge`]). Set it to the
    /// servers' value if they run with a larger one.
    pub fn jute_max_buffer(mut self, bytes: usize) -> Self {
        self.jute_max_buffer = bytes;
        self
    }

    fn validate(self) -> Result<Config> {
        let parsed = ConnectString::parse(&self.connect)?;
        let chroot = match (parsed.chroot.clone(), self.chroot) {
            (Some(_), Some(_)) => {
                return Err(Error::InvalidConnectString {
                    connect: self.connect,
                    reason: "a chroot is given both in the connect string and by `chroot()`".into(),
                });
            }
            (Some(c), None) => Some(c),
            (None, Some(c)) => {
                path::validate_chroot(&c)?;
                (c != "/").then_some(c)
            }
            (None, None) => None,
        };
        if self.session_timeout.is_zero() {
            return Err(Error::InvalidArgument {
                what: "session timeout",
                reason: "must be greater than zero".into(),
            });
        }
        if self.connection_timeout.is_zero() {
            return Err(Error::InvalidArgument {
                what: "connection timeout",
                reason: "must be greater than zero".into(),
            });
        }
        if let Some((user, _)) = &self.digest
            && (user.is_empty() || user.contains(':'))
        {
            return Err(Error::InvalidArgument {
                what: "digest user",
                reason: "must be non-empty and must not contain ':'".into(),
            });
        }
        if self.server_tick_time.is_some_and(|t| t.is_zero()) {
            return Err(Error::InvalidArgument {
                what: "server tick time",
                reason: "must be greater than zero".into(),
            });
        }
        if self.jute_max_buffer == 0 {
            return Err(Error::InvalidArgument {
                what: "jute.maxbuffer",
                reason: "must be greater than zero".into(),
            });
        }
        Ok(Config {
            hosts: parsed.hosts_joined(),
            chroot,
            session_timeout: self.session_timeout,
            connection_timeout: self.connection_timeout,
            digest: self.digest,
            read_only: self.read_only,
            lease_margin: self.lease_margin,
            server_tick_time: self.server_tick_time,
            jute_max_buffer: self.jute_max_buffer,
        })
    }

    /// Validates the settings and starts the session in the background; returns at once.
    ///
    /// The first state change is `Connected` once a server answers.
    ///
    /// # Errors
    /// [`Error::InvalidConnectString`], [`Error::InvalidPath`] (relative chroot),
    /// [`Error::InvalidArgument`] (zero timeout, bad digest user), [`Error::NoRuntime`] outside a
    /// tokio runtime.
    pub fn start(self) -> Result<Session> {
        let config = self.validate()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let (status_tx, _) = watch::channel(SessionStatus::initial());
        let (events_tx, _) = broadcast::channel(64);
        let shared = Arc::new(Shared {
            config,
            status_tx,
            events_tx,
            current: RwLock::new(None),
            stop: CancellationToken::new(),
            supervisor: Mutex::new(None),
            refusal: Mutex::new(None),
        });
        let task = runtime.spawn(supervise(Arc::clone(&shared)));
        if let Ok(mut slot) = shared.supervisor.lock() {
            *slot = Some(task);
        }
        let closer = Arc::new(StopOnDrop(shared.stop.clone()));
        Ok(Session {
            shared,
            _closer: closer,
        })
    }

    /// Starts the session and waits until the first ZooKeeper session is established, at most
    /// the connection timeout.
    ///
    /// # Errors
    /// As [`start`](Self::start), and when no session was established within the connection
    /// timeout (the session is then closed), why: [`Error::Unreachable`] when no host could be
    /// reached (its message says `connection refused` when nothing listens), [`Error::Refused`]
    /// (the chroot does not exist and cannot be created: no permission, or an ephemeral node in
    /// its way) or [`Error::AuthFailed`] when the servers answered but refused what a session
    /// needs, else [`Error::Timeout`]. Within the connection timeout it retries with a bounded
    /// backoff (at most a second between rounds of the hosts), logging each failed attempt at
    /// `warn` at once, so a server that is still starting is waited for.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops the session, which stops connecting.
    pub async fn connect(self) -> Result<Session> {
        let timeout = self.connection_timeout;
        let session = self.start()?;
        match session.wait_connected(timeout).await {
            Ok(()) => Ok(session),
            Err(Error::Timeout(t)) => {
                let refusal = session.shared.refusal.lock().ok().and_then(|r| r.clone());
                Err(refusal.unwrap_or(Error::Timeout(t)))
            }
            Err(e) => Err(e),
        }
    }
}

#[derive(Debug)]
struct Config {
    hosts: String,
    chroot: Option<String>,
    session_timeout: Duration,
    connection_timeout: Duration,
    digest: Option<(String, String)>,
    read_only: bool,
    lease_margin: Option<Duration>,
    server_tick_time: Option<Duration>,
    jute_max_buffer: usize,
}

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

/// A managed ZooKeeper session shared by recipes. Cheap to clone; the session closes when the
/// last clone is dropped (or at [`close`](Self::close)).
///
/// See the [module docs](self) for what it adds to the raw client.
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
    pub(crate) fn safe_until(&self) -> Instant {
        self.lease.safe_until()
    }

    /// The lease of this session: what a term won on it keeps, to know its deadline without
    /// looking the session up (it is marked lost when the session ends).
    pub(crate) fn lease(&self) -> Arc<Lease> {
        Arc::clone(&self.lease)
    }
}

/// Tracks the send time of the last answered request of one ZooKeeper session.
pub(crate) struct Lease {
    acked: Mutex<Instant>,
    timeout: Duration,
    margin: Duration,
    lost: AtomicBool,
    lost_at: Mutex<Option<Instant>>,
}

impl Lease {
    fn new(acked: Instant, timeout: Duration, margin: Option<Duration>) -> Self {
        Lease {
            acked: Mutex::new(acked),
            timeout,
            margin: margin.unwrap_or_else(|| default_margin(timeout)),
            lost: AtomicBool::new(false),
            lost_at: Mutex::new(None),
        }
    }

    fn acked(&self) -> Instant {
        self.acked
            .lock()
            .map(|a| *a)
            .unwrap_or_else(|p| *p.into_inner())
    }

    /// Records that a request sent at `sent` was answered.
    fn advance(&self, sent: Instant) {
        if let Ok(mut acked) = self.acked.lock()
            && sent > *acked
        {
            *acked = sent;
        }
    }

    fn deadline(&self) -> Instant {
        lease_deadline(self.acked(), self.timeout, self.margin)
    }

    pub(crate) fn safe_until(&self) -> Instant {
        let deadline = self.deadline();
        if self.lost.load(Ordering::Acquire) {
            let lost_at = self.lost_at.lock().ok().and_then(|l| *l);
            return lost_at.map_or(deadline, |at| at.min(deadline));
        }
        deadline
    }

    fn mark_lost(&self) {
        if let Ok(mut at) = self.lost_at.lock() {
            at.get_or_insert_with(Instant::now);
        }
        self.lost.store(true, Ordering::Release);
    }
}

/// The lease margin when none is configured: 1/20 of the timeout, at least 10 ms, and never more
/// than half the timeout.
pub(crate) fn default_margin(timeout: Duration) -> Duration {
    (timeout / 20)
        .max(Duration::from_millis(10))
        .min(timeout / 2)
}

/// `acked + timeout - margin`: until then the server cannot have expired the session, because
/// the quorum leader heard of it no earlier than `acked` and expires a session only after
/// `timeout` of silence.
pub(crate) fn lease_deadline(acked: Instant, timeout: Duration, margin: Duration) -> Instant {
    acked + timeout.saturating_sub(margin)
}

/// How often the session proves itself alive.
pub(crate) fn heartbeat_interval(timeout: Duration) -> Duration {
    (timeout / HEARTBEATS_PER_TIMEOUT).max(Duration::from_millis(5))
}

/// ZooKeeper's default `tickTime`.
const DEFAULT_SERVER_TICK: Duration = Duration::from_secs(2);

/// The servers' tick as the session assumes it: the configured one; else ZooKeeper's default,
/// but at most a third of the negotiated timeout (a server whose tick is larger than that
/// leaves a lease too short to keep, see [`SessionBuilder::server_tick_time`]).
pub(crate) fn assumed_tick(configured: Option<Duration>, timeout: Duration) -> Duration {
    configured.unwrap_or_else(|| DEFAULT_SERVER_TICK.min(timeout / 3))
}

/// How long after a heartbeat was answered a later one must have been sent for the later one's
/// answer to prove that the first one's touch reached the quorum leader: a tick and a half.
///
/// Half a tick is the leader's ping period (a follower relays the sessions it heard from in its
/// next ping reply, on the same connection that later carries our `sync` to the leader), half a
/// tick more allows for late pings, and the last half covers a leader that has lost its quorum
/// but has not yet stepped down: it keeps answering for up to a tick and a half longer than its
/// followers take to leave it. The argument is in `recipes/leader-latch.md`, "The deadline".
pub(crate) fn relay_allowance(tick: Duration) -> Duration {
    tick * 3 / 2
}

/// The answered heartbeats of one session, kept until a later answer proves that they reached
/// the quorum leader.
///
/// A heartbeat is a `sync`, which a follower cannot answer without its leader. An answer to
/// heartbeat `k` proves that the server's link to the quorum leader carried `k` to the leader;
/// that same link carried, before it, the server's ping reply with our session's touch from
/// every heartbeat `j` it had answered at least [`relay_allowance`] before `k` was sent. So the
/// leader heard of the session no earlier than `j`'s send time.
#[derive(Debug, Default)]
pub(crate) struct QuorumProof {
    /// `(sent, answered)` of heartbeats not yet proven, oldest first.
    answered: std::collections::VecDeque<(Instant, Instant)>,
}

/// How many unproven heartbeats are kept at most (a few relay allowances' worth).
const MAX_UNPROVEN: usize = 64;

impl QuorumProof {
    /// Records that a heartbeat sent at `sent` was answered at `answered`; returns the send time
    /// of the newest earlier heartbeat that this answer proves reached the quorum leader.
    pub(crate) fn record(
        &mut self,
        sent: Instant,
        answered: Instant,
        relay: Duration,
    ) -> Option<Instant> {
        let proven = self
            .answered
            .iter()
            .filter(|(_, at)| *at + relay <= sent)
            .map(|(s, _)| *s)
            .max();
        if let Some(proven) = proven {
            self.answered.retain(|(s, _)| *s > proven);
        }
        if self.answered.len() >= MAX_UNPROVEN {
            self.answered.pop_front();
        }
        self.answered.push_back((sent, answered));
        proven
    }
}

impl Session {
    /// A builder for a session to the servers in `connect` (`host:port[,host:port...][/chroot]`).
    ///
    /// Nothing is validated or connected until [`SessionBuilder::start`] or
    /// [`SessionBuilder::connect`].
    pub fn builder(connect: impl Into<String>) -> SessionBuilder {
        SessionBuilder {
            connect: connect.into(),
            chroot: None,
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            connection_timeout: DEFAULT_CONNECTION_TIMEOUT,
            digest: None,
            read_only: false,
            lease_margin: None,
            server_tick_time: None,
            jute_max_buffer: DEFAULT_JUTE_MAX_BUFFER,
        }
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

    /// The negotiated session timeout of the current session.
    pub fn negotiated_timeout(&self) -> Option<Duration> {
        self.live().ok().map(|l| l.lease.timeout)
    }

    /// The id and password of the current ZooKeeper session, for tools that must act on it from
    /// outside (the test harness's `expire_session`). Keep it secret: it lets anyone take the
    /// session over.
    pub fn zookeeper_session(&self) -> Option<SessionInfo> {
        self.live().ok().map(|l| l.client.session().clone())
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
    /// alive on the server: the send time of the last answered request plus the negotiated
    /// timeout, minus a small margin. In the past while no session exists or after `Lost`.
    ///
    /// A leader that was frozen or partitioned past this instant must stop acting as soon as it
    /// runs again, before any network round trip: compare with [`Instant::now`].
    pub fn safe_until(&self) -> Instant {
        match self.live() {
            Ok(live) => live.safe_until(),
            Err(_) => Instant::now() - Duration::from_millis(1),
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

    /// The live client of session `epoch`, if that session is still the current one.
    pub(crate) fn live_for(&self, epoch: u64) -> Option<Live> {
        self.live().ok().filter(|l| l.epoch == epoch)
    }

    /// [`safe_until`](Self::safe_until) of session `epoch`; in the past once another session
    /// replaced it.
    pub(crate) fn safe_until_for(&self, epoch: u64) -> Instant {
        match self.live_for(epoch) {
            Some(live) => live.safe_until(),
            None => Instant::now() - Duration::from_millis(1),
        }
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
            Some(live) if !live.lease.lost.load(Ordering::Acquire) => Ok(live.clone()),
            _ => Err(Error::ConnectionLoss),
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

    /// Creates an ephemeral-sequential node `<parent>/_c_<uuid>-<lock_name><seq>` with `data`,
    /// Curator's protected create, creating missing parents as containers; the node and the
    /// parents get `acl`.
    ///
    /// When `list` is set, the parent's children are listed in the same round trip (the request is
    /// queued right behind the create), so the listing already contains the new node.
    ///
    /// After a connection loss it looks for its node by the uuid among the parent's children and
    /// adopts it only if the node belongs to the current session (CURATOR-498); a node of an
    /// earlier session is deleted and the create repeated. It gives up when `cancel` fires, and
    /// then deletes whatever it may have created; if the future is dropped mid-way, a background
    /// task does that deletion (CURATOR-18).
    ///
    /// # Errors
    /// [`Error::Closed`] when cancelled or the session closes; ZooKeeper errors other than
    /// connection loss and expiry (which are retried).
    ///
    /// # Cancel safety
    /// Dropping the future leaves no node behind once the background cleanup has run: the cleanup
    /// lists the parent on the same client, behind the in-flight create, so it sees the node if
    /// the create succeeded.
    pub(crate) async fn create_protected(
        &self,
        parent: &str,
        lock_name: &str,
        data: &[u8],
        acl: &NodeAcl,
        list: bool,
        cancel: &CancellationToken,
    ) -> Result<CreatedNode> {
        let uuid = uuid::Uuid::new_v4();
        let prefix = path::protected_prefix(&uuid);
        let mut guard = OrphanGuard {
            session: Some(self.clone()),
            parent: parent.to_owned(),
            prefix: prefix.clone(),
        };
        let result = tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(Error::Closed),
            r = self.create_protected_attempts(parent, lock_name, &prefix, data, acl, list) => r,
        };
        match result {
            Ok(node) => {
                guard.session = None;
                Ok(node)
            }
            Err(err) => {
                // Inline cleanup, so `close().await` returns with the node gone; the guard stays
                // armed in case this future is dropped meanwhile.
                self.delete_protected(parent, &prefix).await;
                guard.session = None;
                Err(err)
            }
        }
    }

    async fn create_protected_attempts(
        &self,
        parent: &str,
        lock_name: &str,
        prefix: &str,
        data: &[u8],
        acl: &NodeAcl,
        list: bool,
    ) -> Result<CreatedNode> {
        let node_prefix = path::join(parent, &format!("{prefix}{lock_name}"));
        let ephemeral = CreateMode::EphemeralSequential.with_acls(acl.as_acls());
        // Whether an earlier attempt may have created a node whose reply we never saw.
        let mut maybe_created = false;
        loop {
            if maybe_created {
                // Let the supervisor publish what broke before looking again (a retired client
                // fails at once, without any I/O to yield on).
                tokio::task::yield_now().await;
            }
            let live = self.wait_live(self.connection_timeout()).await?;
            if maybe_created {
                let found = match self.find_protected(&live, parent, prefix).await {
                    Ok(found) => found,
                    Err(e) if is_transient(&e) => continue,
                    Err(e) => return Err(e.into()),
                };
                // Ours: made on this session. Keep the first, delete every other node with our
                // prefix (a second create that also succeeded, or a node of an earlier session,
                // CURATOR-498) so that none stays in line behind our back.
                let adopt = found
                    .iter()
                    .position(|(_, stat)| stat.ephemeral_owner == live.session_id);
                let mut interrupted = false;
                for (i, (name, stat)) in found.iter().enumerate() {
                    if Some(i) == adopt {
                        continue;
                    }
                    warn!(parent, node = %name, owner = %hex(stat.ephemeral_owner),
                        "deleting a second node of our protected create (an earlier attempt's, or an earlier session's: CURATOR-498)");
                    match live.client.delete(&path::join(parent, name), None).await {
                        Ok(()) | Err(zookeeper_client::Error::NoNode) => {}
                        Err(e) if is_transient(&e) => {
                            interrupted = true;
                            break;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                if interrupted {
                    continue;
                }
                if let Some((name, stat)) = adopt.and_then(|i| found.into_iter().nth(i)) {
                    debug!(parent, node = %name, "adopted protected node after a lost create reply");
                    let children = if list {
                        live.client.list_children(parent).await.ok()
                    } else {
                        None
                    };
                    let sequence = path::sequence_of(&name, lock_name).unwrap_or_default();
                    return Ok(CreatedNode {
                        path: path::join(parent, &name),
                        name,
                        czxid: stat.czxid,
                        sequence,
                        epoch: live.epoch,
                        session_id: live.session_id,
                        children,
                    });
                }
            }
            let create = live.client.create(&node_prefix, data, &ephemeral);
            let listing = list.then(|| live.client.list_children(parent));
            match create.await {
                Ok((stat, sequence)) => {
                    let name = format!("{prefix}{lock_name}{sequence}");
                    let children = match listing {
                        Some(l) => l.await.ok(),
                        None => None,
                    };
                    return Ok(CreatedNode {
                        path: path::join(parent, &name),
                        name,
                        czxid: stat.czxid,
                        sequence: u64::try_from(sequence.into_i64()).unwrap_or_default(),
                        epoch: live.epoch,
                        session_id: live.session_id,
                        children,
                    });
                }
                Err(zookeeper_client::Error::NoNode) => {
                    self.create_parents(&live, parent, acl).await?;
                }
                Err(e) if is_transient(&e) => {
                    debug!(parent, error = %e, "protected create interrupted; will look for our node");
                    maybe_created = true;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Creates `path` and its missing ancestors as container nodes with `acl` (Curator's
    /// `creatingParentContainersIfNeeded`, which gives parents the ACL provider's ACL too).
    pub(crate) async fn create_parents(
        &self,
        live: &Live,
        path: &str,
        acl: &NodeAcl,
    ) -> Result<()> {
        let container = CreateMode::Container.with_acls(acl.as_acls());
        match live.client.mkdir(path, &container).await {
            Ok(()) | Err(zookeeper_client::Error::NodeExists) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The children of `parent` that carry `prefix`, in sequence order, with their stats. A
    /// `sync` goes first, in the same round trip: a server that lags behind the leader could
    /// otherwise hide a node that an earlier attempt made.
    async fn find_protected(
        &self,
        live: &Live,
        parent: &str,
        prefix: &str,
    ) -> std::result::Result<Vec<(String, zookeeper_client::Stat)>, zookeeper_client::Error> {
        let sync = live.client.sync(parent);
        let listing = live.client.list_children(parent);
        let children = match sync.await.and(listing.await) {
            Ok(c) => c,
            Err(zookeeper_client::Error::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut ours: Vec<String> = children
            .into_iter()
            .filter(|c| c.starts_with(prefix))
            .collect();
        ours.sort();
        let stats: Vec<_> = ours
            .iter()
            .map(|name| live.client.check_stat(&path::join(parent, name)))
            .collect();
        let mut found = Vec::with_capacity(ours.len());
        for (name, stat) in ours.into_iter().zip(stats) {
            if let Some(stat) = stat.await? {
                found.push((name, stat));
            }
        }
        Ok(found)
    }

    /// Deletes every child of `parent` that carries `prefix`, on the current session, waiting
    /// for a connection no longer than the session stays provably alive. A node that cannot be
    /// reached in that time dies with its session.
    pub(crate) async fn delete_protected(&self, parent: &str, prefix: &str) {
        let bound = self
            .shared
            .config
            .session_timeout
            .max(self.connection_timeout());
        let give_up = tokio::time::Instant::now() + bound;
        // An interrupted attempt is repeated on the next connection, until the bound.
        while let Some(left) = give_up.checked_duration_since(tokio::time::Instant::now()) {
            let Ok(live) = self.wait_live(left).await else {
                return;
            };
            match self.delete_protected_once(&live, parent, prefix).await {
                Ok(()) => return,
                // Let the supervisor publish what broke before looking again (a retired client
                // fails at once, without any I/O to yield on).
                Err(e) if is_transient(&e) => tokio::task::yield_now().await,
                Err(e) => {
                    warn!(parent, prefix, error = %e, "could not delete the nodes of an abandoned create");
                    return;
                }
            }
        }
    }

    async fn delete_protected_once(
        &self,
        live: &Live,
        parent: &str,
        prefix: &str,
    ) -> std::result::Result<(), zookeeper_client::Error> {
        // After a `sync`, in the same round trip: a lagging server could hide the node.
        let sync = live.client.sync(parent);
        let listing = live.client.list_children(parent);
        let children = match sync.await.and(listing.await) {
            Ok(children) => children,
            Err(zookeeper_client::Error::NoNode) => return Ok(()),
            Err(e) => return Err(e),
        };
        for name in children.into_iter().filter(|c| c.starts_with(prefix)) {
            let target = path::join(parent, &name);
            match live.client.delete(&target, None).await {
                Ok(()) | Err(zookeeper_client::Error::NoNode) => {
                    debug!(node = %target, "deleted node of an abandoned create")
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
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

/// The node made by [`Session::create_protected`].
#[derive(Debug, Clone)]
pub(crate) struct CreatedNode {
    pub(crate) path: String,
    pub(crate) name: String,
    pub(crate) czxid: i64,
    pub(crate) sequence: u64,
    pub(crate) epoch: u64,
    pub(crate) session_id: i64,
    pub(crate) children: Option<Vec<String>>,
}

/// Deletes the nodes of an abandoned protected create in the background.
struct OrphanGuard {
    session: Option<Session>,
    parent: String,
    prefix: String,
}

impl Drop for OrphanGuard {
    fn drop(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        let parent = std::mem::take(&mut self.parent);
        let prefix = std::mem::take(&mut self.prefix);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move { session.delete_protected(&parent, &prefix).await });
            }
            Err(_) => warn!(
                parent,
                prefix,
                "no runtime to clean up an abandoned create; the node ends with its session"
            ),
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

/// Why a ZooKeeper session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EndOfSession {
    Closed,
    Lost,
}

/// A heartbeat's send time and, when it was answered, the answer's time.
type Heartbeat = Pin<Box<dyn std::future::Future<Output = (Instant, Option<Instant>)> + Send>>;

/// The session's one background task: connects, watches, proves the session alive, starts a new
/// session after loss. All state changes go through `publish`.
async fn supervise(shared: Arc<Shared>) {
    let mut epoch = 0u64;
    let mut state: Option<ConnectionState> = None;
    let mut failures = 0u32;
    loop {
        let started = Instant::now();
        let connected = tokio::select! {
            _ = shared.stop.cancelled() => break,
            r = connect_client(&shared.config) => r,
        };
        let client = match connected {
            Ok(client) => client,
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
        let timeout = client.session_timeout();
        let lease = Arc::new(Lease::new(started, timeout, shared.config.lease_margin));
        let live = Live {
            client: client.clone(),
            epoch,
            session_id,
            lease: Arc::clone(&lease),
        };
        if let Ok(mut current) = shared.current.write() {
            *current = Some(live.clone());
        }
        info!(session_id = %hex(session_id), epoch, negotiated_timeout_ms = timeout.as_millis() as u64,
            "ZooKeeper session established");
        let signal = if client.state() == SessionState::ConnectedReadOnly {
            ClientSignal::ConnectedReadOnly
        } else {
            ClientSignal::Connected
        };
        if let Some(next) = next_state(state, signal, true) {
            state = Some(next);
            publish(&shared, next, Some(session_id), epoch, true);
        }
        let end = serve(&shared, &live, &mut state).await;
        lease.mark_lost();
        if let Ok(mut current) = shared.current.write() {
            *current = None;
        }
        // Release our handle before anything waits: the client ends its session only once its
        // last handle is gone.
        drop(live);
        match end {
            EndOfSession::Closed => {
                // Tell recipes first, so that they drop their handles too, then close.
                publish_closed(&shared, state, epoch);
                close_client(client, shared.config.connection_timeout).await;
                return;
            }
            EndOfSession::Lost => {
                // Retire the client, and end its session on the servers: a clone of the client
                // that the application still holds (`Session::client()`) would otherwise keep
                // that session, and its nodes, alive.
                let info = client.session().clone();
                drop(client);
                tokio::spawn(retire(shared.config.hosts.clone(), info, timeout));
            }
        }
    }
    publish_closed(&shared, state, epoch);
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
        crate::metrics::connection_state(ConnectionState::Closed);
    }
    shared.status_tx.send_replace(status.clone());
    let _ = shared.events_tx.send(status);
}

/// Serves one ZooKeeper session until it ends.
async fn serve(shared: &Shared, live: &Live, state: &mut Option<ConnectionState>) -> EndOfSession {
    let client = &live.client;
    let mut watcher = client.state_watcher();
    let timeout = live.lease.timeout;
    let interval = heartbeat_interval(timeout);
    let relay = relay_allowance(assumed_tick(shared.config.server_tick_time, timeout));
    let headroom = timeout
        .saturating_sub(live.lease.margin)
        .saturating_sub(relay)
        .saturating_sub(interval);
    if headroom < interval * 2 {
        warn!(session_id = %hex(live.session_id), timeout_ms = timeout.as_millis() as u64,
            relay_ms = relay.as_millis() as u64,
            "the session timeout leaves almost no lease once a heartbeat's way to the quorum leader is allowed for: the session will be lost at every hiccup; use a timeout of at least four server ticks");
    }
    let mut proof = QuorumProof::default();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut heartbeats: FuturesUnordered<Heartbeat> = FuturesUnordered::new();
    loop {
        let deadline = tokio::time::Instant::from_std(live.lease.deadline());
        let signal = tokio::select! {
            biased;
            _ = shared.stop.cancelled() => return EndOfSession::Closed,
            _ = tokio::time::sleep_until(deadline) => {
                // The timer may fire late (a frozen process): re-read the lease first, a
                // heartbeat answer may have moved it.
                if Instant::now() < live.lease.deadline() {
                    continue;
                }
                warn!(session_id = %hex(live.session_id),
                    unproven_ms = live.lease.acked().elapsed().as_millis() as u64,
                    "the quorum cannot be shown to have heard from this session within its timeout: session lost");
                ClientSignal::DeadlinePassed
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
                        ClientSignal::Terminated
                    }
                    SessionState::SyncConnected => {
                        heartbeats.push(heartbeat(live));
                        ClientSignal::Connected
                    }
                    SessionState::ConnectedReadOnly => ClientSignal::ConnectedReadOnly,
                    SessionState::Disconnected => ClientSignal::Disconnected,
                    _ => ClientSignal::Terminated,
                }
            }
            Some((sent, answered)) = heartbeats.next(), if !heartbeats.is_empty() => {
                if let Some(proven) = answered.and_then(|at| proof.record(sent, at, relay)) {
                    live.lease.advance(proven);
                }
                continue;
            }
            _ = ticker.tick() => {
                if heartbeats.len() < MAX_HEARTBEATS_IN_FLIGHT {
                    heartbeats.push(heartbeat(live));
                }
                continue;
            }
        };
        if let Some(next) = next_state(*state, signal, false) {
            *state = Some(next);
            publish(shared, next, Some(live.session_id), live.epoch, false);
        }
        if matches!(
            signal,
            ClientSignal::Terminated | ClientSignal::DeadlinePassed
        ) {
            return EndOfSession::Lost;
        }
    }
}

/// One heartbeat: a `sync`, which only a server in touch with the quorum leader can answer (a
/// follower forwards it to the leader). Yields its send time and when it was answered. One
/// request per heartbeat, whatever the number of terms the session holds: each term watches
/// its own node instead.
fn heartbeat(live: &Live) -> Heartbeat {
    let sent = Instant::now();
    let client = live.client.clone();
    Box::pin(async move {
        match client.sync("/").await {
            Ok(()) => (sent, Some(Instant::now())),
            Err(e) => {
                debug!(error = %e, "heartbeat failed");
                (sent, None)
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
    crate::metrics::connection_state(state);
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

async fn connect_client(config: &Config) -> Result<Client> {
    let mut connector = Client::connector()
        .with_session_timeout(config.session_timeout)
        .with_readonly(config.read_only);
    if let Some((user, password)) = &config.digest {
        connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
    }
    // One round of the hosts per attempt (the client would otherwise cycle through them until
    // the session timeout and report only `Timeout`): the supervisor retries with its own
    // bounded backoff, and can say why no host answered.
    let client = match connector.with_fail_eagerly().connect(&config.hosts).await {
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
    let give_up = Instant::now() + (timeout * 4).max(Duration::from_secs(30));
    let mut failures = 0u32;
    while Instant::now() < give_up {
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
    fn lease_deadline_is_last_ack_plus_timeout_minus_margin() {
        let t0 = Instant::now();
        let d = lease_deadline(t0, Duration::from_secs(2), Duration::from_millis(100));
        assert_eq!(d - t0, Duration::from_millis(1900));
        // A margin larger than the timeout never puts the deadline before the ack.
        assert_eq!(
            lease_deadline(t0, Duration::from_millis(5), Duration::from_secs(1)),
            t0
        );
    }

    #[test]
    fn default_margin_is_a_twentieth_with_a_floor() {
        assert_eq!(
            default_margin(Duration::from_secs(2)),
            Duration::from_millis(100)
        );
        assert_eq!(
            default_margin(Duration::from_millis(100)),
            Duration::from_millis(10)
        );
        assert_eq!(
            default_margin(Duration::from_millis(10)),
            Duration::from_millis(5)
        );
    }

    #[test]
    fn lease_only_moves_forward_and_stops_at_loss() {
        let t0 = Instant::now();
        let lease = Lease::new(t0, Duration::from_secs(10), Some(Duration::ZERO));
        lease.advance(t0 + Duration::from_secs(3));
        lease.advance(t0 + Duration::from_secs(1));
        assert_eq!(lease.safe_until(), t0 + Duration::from_secs(13));
        lease.mark_lost();
        assert!(lease.safe_until() <= Instant::now());
    }

    #[test]
    fn an_answer_proves_only_heartbeats_answered_a_relay_allowance_before_it_was_sent() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let relay = Duration::from_millis(750);
        let mut proof = QuorumProof::default();
        // Heartbeats every 250 ms, each answered 5 ms later.
        assert_eq!(proof.record(ms(0), ms(5), relay), None);
        assert_eq!(proof.record(ms(250), ms(255), relay), None);
        assert_eq!(proof.record(ms(500), ms(505), relay), None);
        // Sent 745 ms after the first answer: not yet enough.
        assert_eq!(proof.record(ms(750), ms(755), relay), None);
        // Sent 755 ms after it: proves the first, and only the first.
        assert_eq!(proof.record(ms(760), ms(765), relay), Some(ms(0)));
        // Later answers prove the newest heartbeat they can, never an older one again.
        assert_eq!(proof.record(ms(1010), ms(1015), relay), Some(ms(250)));
        assert_eq!(proof.record(ms(1600), ms(1605), relay), Some(ms(760)));
    }

    #[test]
    fn answers_out_of_order_prove_nothing_they_cannot() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let relay = Duration::from_millis(300);
        let mut proof = QuorumProof::default();
        // A heartbeat sent before another's answer proves nothing about it, whatever the order
        // in which their answers arrive.
        assert_eq!(proof.record(ms(100), ms(900), relay), None);
        assert_eq!(proof.record(ms(0), ms(950), relay), None);
        assert_eq!(proof.record(ms(1190), ms(1195), relay), None);
        assert_eq!(proof.record(ms(1260), ms(1270), relay), Some(ms(100)));
    }

    #[test]
    fn unproven_heartbeats_are_bounded() {
        let t0 = Instant::now();
        let mut proof = QuorumProof::default();
        let relay = Duration::from_secs(3600);
        for i in 0..1000 {
            let at = t0 + Duration::from_millis(i);
            assert_eq!(proof.record(at, at, relay), None);
        }
        assert!(proof.answered.len() <= MAX_UNPROVEN);
    }

    #[test]
    fn the_assumed_tick_is_the_configured_one_else_zookeepers_default_within_a_third() {
        assert_eq!(
            assumed_tick(Some(Duration::from_millis(500)), Duration::from_secs(2)),
            Duration::from_millis(500)
        );
        assert_eq!(
            assumed_tick(None, Duration::from_secs(60)),
            Duration::from_secs(2)
        );
        assert_eq!(
            assumed_tick(None, Duration::from_secs(3)),
            Duration::from_secs(1)
        );
        assert_eq!(
            relay_allowance(Duration::from_millis(500)),
            Duration::from_millis(750)
        );
    }

    #[test]
    fn heartbeats_are_an_eighth_of_the_timeout() {
        assert_eq!(
            heartbeat_interval(Duration::from_secs(8)),
            Duration::from_secs(1)
        );
        assert_eq!(
            heartbeat_interval(Duration::from_millis(16)),
            Duration::from_millis(5)
        );
    }

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
    fn bad_settings_are_rejected_before_connecting() {
        let bad = |b: SessionBuilder| b.validate().err();
        assert!(matches!(
            bad(Session::builder("")),
            Some(Error::InvalidConnectString { .. })
        ));
        assert!(matches!(
            bad(Session::builder("a:1,,b:2")),
            Some(Error::InvalidConnectString { .. })
        ));
        assert!(matches!(
            bad(Session::builder("a:1").session_timeout(Duration::ZERO)),
            Some(Error::InvalidArgument {
                what: "session timeout",
                ..
            })
        ));
        assert!(matches!(
            bad(Session::builder("a:1").connection_timeout(Duration::ZERO)),
            Some(Error::InvalidArgument {
                what: "connection timeout",
                ..
            })
        ));
        assert!(matches!(
            bad(Session::builder("a:1").chroot("app")),
            Some(Error::InvalidPath { .. })
        ));
        assert!(matches!(
            bad(Session::builder("a:1/x").chroot("/y")),
            Some(Error::InvalidConnectString { .. })
        ));
        assert!(matches!(
            bad(Session::builder("a:1").digest_auth("", "p")),
            Some(Error::InvalidArgument {
                what: "digest user",
                ..
            })
        ));
        assert!(matches!(
            bad(Session::builder("a:1").server_tick_time(Duration::ZERO)),
            Some(Error::InvalidArgument {
                what: "server tick time",
                ..
            })
        ));
        let ok = Session::builder("a:1").chroot("/app").validate().unwrap();
        assert_eq!(ok.chroot.as_deref(), Some("/app"));
    }

    #[test]
    fn start_outside_a_runtime_is_a_typed_error() {
        assert!(matches!(
            Session::builder("127.0.0.1:1").start(),
            Err(Error::NoRuntime)
        ));
    }

    #[test]
    fn session_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
        assert_send_sync::<Session>();
        assert_send_sync::<SessionStatus>();
    }
}
