//! [`LeaderObserver`]: the protocol is in [`crate::specs::leader_observer`].

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::Stream;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, error, info, info_span, instrument, warn};
use zookeeper_client::{EventType, OneshotWatcher};

use crate::checks;
use crate::error::{Backoff, Error, Result};
use crate::fencing::FencingToken;
use crate::path;
use crate::session::{
    Change, Live, Session, SessionStatus, StatusFeed, classify, flag_set, hex, log_state,
    until_done,
};
use crate::state::ConnectionState;

/// Who leads an election path: what a [`LeaderObserver`] reports.
///
/// Two reports are the same leader when all three fields are equal; a node keeps its token for
/// its whole life, so the same node seen twice is never reported twice.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaderInfo {
    /// The leader's participant id: its node's data as UTF-8 (lossy). Curator selectors and
    /// mutexes without an id store the host's IP address there.
    pub id: String,
    /// The leader's fencing token: the creation zxid (`czxid`) of its node, as the leader's own
    /// [`Leadership::token`](crate::Leadership::token).
    pub token: FencingToken,
    /// The full path of the leader's node.
    pub node: String,
}

/// What a [`LeaderObserver`] reports through [`LeaderObserver::events`], in order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ObserverEvent {
    /// A new leader, read from the server.
    Leader(LeaderInfo),
    /// The server says there is no leader: no contender under the path, or no path.
    NoLeader,
    /// The observer's own connection state changed. While it is not `Connected` or
    /// `Reconnected`, the last report stands but is unconfirmed
    /// ([`LeaderObserver::is_confirmed`]).
    State(ConnectionState),
}

/// Builds a [`LeaderObserver`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct LeaderObserverBuilder {
    session: Session,
    path: String,
    lock_name: Option<String>,
}

impl LeaderObserverBuilder {
    /// The lock name of the contenders to follow: [`LATCH_LOCK_NAME`](crate::path::LATCH_LOCK_NAME)
    /// (`latch-`, Curator's `LeaderLatch`) or [`MUTEX_LOCK_NAME`](crate::path::MUTEX_LOCK_NAME)
    /// (`lock-`, `LeaderSelector` and `InterProcessMutex`). Default: chosen on every listing as
    /// [`participants_on`](crate::participants_on) does (`latch-` if any child is a latch node).
    pub fn lock_name(mut self, lock_name: impl Into<String>) -> Self {
        self.lock_name = Some(lock_name.into());
        self
    }

    /// Validates the settings and starts observing in the background; returns at once.
    ///
    /// The first report comes once the session is connected: until then
    /// [`LeaderObserver::leader`] is `None` and [`LeaderObserver::is_confirmed`] is `false`.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a relative or otherwise unusable path,
    /// [`Error::InvalidArgument`] for an empty lock name, [`Error::Closed`] when the session is
    /// closed, [`Error::NoRuntime`] outside a tokio runtime.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is sent before the returned observer exists.
    pub async fn start(self) -> Result<LeaderObserver> {
        path::validate_path(&self.path)?;
        if let Some(lock_name) = &self.lock_name {
            path::validate_lock_name(lock_name)?;
        }
        let runtime = checks::startable(&self.session)?;
        let (leader_tx, _) = watch::channel(None);
        let (done_tx, _) = watch::channel(false);
        let (events_tx, _) = broadcast::channel(256);
        let shared = std::sync::Arc::new(Shared {
            session: self.session,
            path: self.path,
            lock_name: self.lock_name,
            stop: CancellationToken::new(),
            leader_tx,
            confirmed: AtomicBool::new(false),
            events_tx,
            done_tx,
            failure: std::sync::OnceLock::new(),
        });
        let span = info_span!(parent: None, "observer", path = %shared.path);
        let task = runtime.spawn(run(std::sync::Arc::clone(&shared)).instrument(span));
        Ok(LeaderObserver {
            shared,
            task: Mutex::new(Some(task)),
        })
    }
}

struct Shared {
    session: Session,
    path: String,
    lock_name: Option<String>,
    stop: CancellationToken,
    leader_tx: watch::Sender<Option<LeaderInfo>>,
    confirmed: AtomicBool,
    events_tx: broadcast::Sender<ObserverEvent>,
    done_tx: watch::Sender<bool>,
    failure: std::sync::OnceLock<Error>,
}

/// Follows who leads an election path without standing for election, at the cost of one watch.
///
/// Like client-go's `OnNewLeader` and etcd's `Election.Observe`: for a follower that forwards
/// requests to the leader, a dashboard, or readiness by role. It works on paths used by
/// [`LeaderLatch`](crate::LeaderLatch), [`LeaderSelector`](crate::LeaderSelector) and their
/// Curator counterparts. See [the spec](crate::specs::leader_observer) for the protocol.
///
/// Dropping the observer stops it (its watch is removed); [`close`](Self::close) also waits for
/// that.
///
/// # Examples
/// ```no_run
/// # async fn demo(session: zookeeper_recipes::Session) -> zookeeper_recipes::Result<()> {
/// use futures::StreamExt;
/// use zookeeper_recipes::{LeaderObserver, ObserverEvent};
///
/// let observer = LeaderObserver::builder(&session, "/election/statement-job").start().await?;
/// let mut events = Box::pin(observer.events());
/// while let Some(event) = events.next().await {
///     match event {
///         ObserverEvent::Leader(leader) => println!("{} leads (token {})", leader.id, leader.token),
///         ObserverEvent::NoLeader => println!("nobody leads"),
///         _ => {}
///     }
/// }
/// # Ok(()) }
/// ```
///
/// # Curator
/// Curator has no observer: `LeaderLatch.getLeader()` lists and reads every participant on each
/// call. This watches only the leader's node.
pub struct LeaderObserver {
    shared: std::sync::Arc<Shared>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for LeaderObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderObserver")
            .field("path", &self.shared.path)
            .field("leader", &*self.shared.leader_tx.borrow())
            .field("confirmed", &self.is_confirmed())
            .finish()
    }
}

impl Drop for LeaderObserver {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}

impl LeaderObserver {
    /// A builder for an observer of `path` (absolute); by default it chooses the lock name from
    /// the children.
    pub fn builder(session: &Session, path: impl Into<String>) -> LeaderObserverBuilder {
        LeaderObserverBuilder {
            session: session.clone(),
            path: path.into(),
            lock_name: None,
        }
    }

    /// The observed path.
    pub fn path(&self) -> &str {
        &self.shared.path
    }

    /// The last reported leader, `None` while there is none (or before the first report).
    pub fn leader(&self) -> Option<LeaderInfo> {
        self.shared.leader_tx.borrow().clone()
    }

    /// A watch of the reported leader: it changes only when the leader does.
    pub fn watch(&self) -> watch::Receiver<Option<LeaderInfo>> {
        self.shared.leader_tx.subscribe()
    }

    /// Whether the current report was read on the current connection and still holds as far as
    /// the server has said: `false` before the first report, while the connection is suspended,
    /// after the session was lost (until the observer has listed again), and between the
    /// server's notice that the leader's node is gone and the listing that names its successor.
    pub fn is_confirmed(&self) -> bool {
        self.shared.confirmed.load(Ordering::Acquire)
    }

    /// Every change from now on, in order: the first report (a leader, or `NoLeader`), then
    /// [`ObserverEvent::Leader`] and [`ObserverEvent::NoLeader`] only when the leader changed,
    /// and the observer's connection states. The stream ends when the observer is closed. A listener more than 256 events
    /// behind skips the ones it missed; [`watch`](Self::watch) always has the latest.
    pub fn events(&self) -> impl Stream<Item = ObserverEvent> + Send + 'static {
        until_done(
            self.shared.events_tx.subscribe(),
            flag_set(self.shared.done_tx.subscribe()),
        )
    }

    /// Stops observing: the watch is removed and [`events`](Self::events) ends. Waits at most the
    /// session's connection timeout for the background task.
    ///
    /// # Errors
    /// None today.
    ///
    /// # Cancel safety
    /// Cancel safe: the stop is signalled before the first await; if the future is dropped the
    /// task still stops by itself.
    #[instrument(skip_all, fields(path = %self.shared.path))]
    pub async fn close(&self) -> Result<()> {
        self.shared.stop.cancel();
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            let bound = self.shared.session.connection_timeout();
            if tokio::time::timeout(bound, task).await.is_err() {
                warn!(path = %self.shared.path, "observer did not stop in time");
            }
        }
        Ok(())
    }

    /// Whether [`close`](Self::close) was called (or the observer was dropped).
    pub fn is_closed(&self) -> bool {
        self.shared.stop.is_cancelled()
    }

    /// Why the observer stopped by itself ([`Error::Refused`]: the server refuses to let this
    /// session read the path, say for lack of permission; [`Error::TooManyChildren`]: the path
    /// has more than [`MAX_CHILDREN`](crate::path::MAX_CHILDREN) children), if it did. Its watch keeps the last
    /// report, unconfirmed, and [`events`](Self::events) has ended.
    pub fn failure(&self) -> Option<Error> {
        self.shared.failure.get().cloned()
    }
}

/// What one look at the path found, and the one watch that says when to look again.
struct Look {
    leader: Option<LeaderInfo>,
    watcher: OneshotWatcher,
    /// What the watch is on, for logs.
    watching: &'static str,
}

/// What the observer remembers between looks.
#[derive(Debug, Default)]
struct Memory {
    /// The last report.
    reported: Option<LeaderInfo>,
    /// Whether anything was reported yet: the first look is always reported, even `None`.
    reported_once: bool,
    /// A node the server said is gone (a `NodeDeleted` on the leader's node): never reported
    /// again.
    gone: Option<String>,
    /// The highest token ever reported: a lower one can only come from a server that lags
    /// behind, even after a `None` report in between.
    highest: Option<FencingToken>,
    /// Children found to be foreign (named like contenders, but persistent): passed over.
    /// Pruned to the names of each listing.
    foreign: std::collections::HashSet<String>,
}

impl Memory {
    /// Whether the last report is a node the server said is gone.
    fn reported_is_gone(&self) -> bool {
        self.gone.is_some()
            && self.gone.as_deref() == self.reported.as_ref().map(|r| r.node.as_str())
    }
}

/// Whether a leader read from the server contradicts what this observer already knows, so that
/// the view must be from a server that lags behind (possible only on a new session, which may
/// connect to a lagging follower): a node the server said is gone, or an older token than any
/// reported so far. Leaders follow each other in creation order, so tokens only rise.
fn is_stale(found: &LeaderInfo, memory: &Memory) -> bool {
    memory.gone.as_deref() == Some(found.node.as_str())
        || memory.highest.is_some_and(|highest| found.token < highest)
}

/// How the wait on one look ended.
enum Wake {
    /// Look again on the same session.
    Look,
    /// The session changed or was lost: wait for a live one, then look.
    Reconnect,
    Stop,
}

async fn run(shared: std::sync::Arc<Shared>) {
    let mut feed = StatusFeed::new(&shared.session);
    let mut memory = Memory::default();
    let mut backoff = Backoff::new(shared.session.connection_timeout());
    'session: loop {
        let seen = |status: &SessionStatus| {
            shared.confirmed.store(false, Ordering::Release);
            report_state(&shared, status);
        };
        let Some(live) = feed.wait_quorum(&shared.stop, seen).await else {
            break;
        };
        loop {
            let look = tokio::select! {
                biased;
                _ = shared.stop.cancelled() => break 'session,
                look = look(&shared, &live, &mut memory) => look,
            };
            let look = match look {
                Ok(look) => {
                    backoff.succeed();
                    look
                }
                Err(LookFailed::TooManyChildren(err)) => {
                    error!(error = %err, "the election path has too many children to follow; the observer stops");
                    let _ = shared.failure.set(err);
                    break 'session;
                }
                Err(LookFailed::Zk(e)) if crate::error::is_refusal(&e) => {
                    let err = Error::Refused {
                        operation: "read",
                        path: shared.path.clone(),
                        source: e,
                    };
                    error!(error = %err, "the server refuses to let this observer read the path; it stops");
                    let _ = shared.failure.set(err);
                    break 'session;
                }
                Err(LookFailed::Zk(e)) => {
                    if memory.reported_is_gone() {
                        // The server said the leader is gone and we cannot ask who follows:
                        // say there is none rather than keep a leader known to be gone.
                        publish(&shared, &mut memory, None, live.session_id);
                    }
                    shared.confirmed.store(false, Ordering::Release);
                    let seen = |status: &SessionStatus| report_state(&shared, status);
                    if !feed
                        .pause_after(
                            "looking at the election path",
                            &e,
                            backoff.fail(),
                            &shared.stop,
                            seen,
                        )
                        .await
                    {
                        break 'session;
                    }
                    continue 'session;
                }
            };
            publish(&shared, &mut memory, look.leader.clone(), live.session_id);
            shared.confirmed.store(true, Ordering::Release);
            debug!(watching = look.watching, session_id = %hex(live.session_id), "watching");
            match wait(&shared, &mut feed, &live, look, &mut memory).await {
                Wake::Look => continue,
                Wake::Reconnect => continue 'session,
                Wake::Stop => break 'session,
            }
        }
    }
    shared.confirmed.store(false, Ordering::Release);
    shared.done_tx.send_replace(true);
    debug!("observer stopped");
}

/// Reports `leader` if it differs from the last report.
fn publish(shared: &Shared, memory: &mut Memory, leader: Option<LeaderInfo>, session_id: i64) {
    if memory.reported_once && memory.reported == leader {
        return;
    }
    if memory.reported_once {
        crate::metrics::leader_changed(&shared.path);
    }
    memory.reported_once = true;
    debug!(session_id = %hex(session_id), "observing on this session");
    match &leader {
        Some(l) => {
            // The id is the node's data: foreign input, logged escaped.
            info!(leader = ?l.id, node = %l.node, token = %l.token, "observed a new leader")
        }
        None => info!("observed that nobody leads"),
    }
    shared.leader_tx.send_if_modified(|current| {
        let changed = *current != leader;
        current.clone_from(&leader);
        changed
    });
    let event = match &leader {
        Some(l) => ObserverEvent::Leader(l.clone()),
        None => ObserverEvent::NoLeader,
    };
    let _ = shared.events_tx.send(event);
    if let Some(l) = &leader {
        memory.highest = memory.highest.max(Some(l.token));
    }
    memory.reported = leader;
}

/// Reports a connection change as an event.
fn report_state(shared: &Shared, status: &SessionStatus) {
    log_state(status, |state| {
        let _ = shared.events_tx.send(ObserverEvent::State(state));
    });
}

/// Why a look failed.
enum LookFailed {
    /// A request failed: retried, unless the server refuses (then the observer stops).
    Zk(zookeeper_client::Error),
    /// The path has more children than [`path::MAX_CHILDREN`]: the observer stops.
    TooManyChildren(Error),
}

impl From<zookeeper_client::Error> for LookFailed {
    fn from(e: zookeeper_client::Error) -> Self {
        LookFailed::Zk(e)
    }
}

/// Lists the path and sets the one watch: on the first contender's node (its data and stat
/// are the report), else on the path's children, else on the path's existence. A node named like
/// a contender but persistent is foreign: reported once, remembered, and passed over (one read
/// each, once), as the contenders do.
async fn look(
    shared: &Shared,
    live: &Live,
    memory: &mut Memory,
) -> std::result::Result<Look, LookFailed> {
    use zookeeper_client::Error as Zk;
    let client = &live.client;
    let path = shared.path.as_str();
    let mut synced = false;
    'list: loop {
        let children = match client.list_children(path).await {
            Ok(children) => children,
            Err(Zk::NoNode) => match client.check_and_watch_stat(path).await {
                Ok((None, watcher)) => {
                    return Ok(Look {
                        leader: None,
                        watcher,
                        watching: "the path's creation",
                    });
                }
                // Created in between: list again (dropping the watcher removes its watch).
                Ok((Some(_), _)) => continue,
                Err(e) => return Err(e.into()),
            },
            Err(e) => return Err(e.into()),
        };
        path::check_children(path, &children).map_err(LookFailed::TooManyChildren)?;
        if !memory.foreign.is_empty() {
            let listed: std::collections::HashSet<&str> =
                children.iter().map(String::as_str).collect();
            memory.foreign.retain(|name| listed.contains(name.as_str()));
        }
        let lock_name = shared
            .lock_name
            .as_deref()
            .unwrap_or_else(|| path::lock_name_for(&children));
        let mut in_line =
            path::skip_foreign(path::sort_contenders(&children, lock_name), &memory.foreign)
                .into_iter();
        loop {
            let Some(first) = in_line.next() else {
                // No contender: watch the children, and judge by the listing that set the watch.
                match client.list_and_watch_children(path).await {
                    Ok((children, watcher)) => {
                        let lock_name = shared
                            .lock_name
                            .as_deref()
                            .unwrap_or_else(|| path::lock_name_for(&children));
                        let sorted = path::sort_contenders(&children, lock_name);
                        if path::skip_foreign(sorted, &memory.foreign).is_empty() {
                            return Ok(Look {
                                leader: None,
                                watcher,
                                watching: "the path's children",
                            });
                        }
                        continue 'list;
                    }
                    Err(Zk::NoNode) => continue 'list,
                    Err(e) => return Err(e.into()),
                }
            };
            let node = path::join(path, &first.name);
            match client.get_and_watch_data(&node).await {
                Ok((data, stat, watcher)) => {
                    if crate::contender::is_foreign(&stat) {
                        crate::contender::report_foreign(path, &node, &data, "observer");
                        memory.foreign.insert(first.name);
                        drop(watcher);
                        continue;
                    }
                    let found = LeaderInfo {
                        id: String::from_utf8_lossy(&data).into_owned(),
                        token: FencingToken::from_raw(stat.czxid),
                        node,
                    };
                    if is_stale(&found, memory) {
                        if synced {
                            if memory.gone.as_deref() == Some(found.node.as_str()) {
                                // Still there after a sync: a server contradicting itself. Try
                                // again later rather than report a node it said is gone.
                                return Err(Zk::ConnectionLoss.into());
                            }
                            // An older token after a sync is the truth (say the contenders
                            // switched lock names): report it.
                        } else {
                            debug!(node = %found.node, "listing contradicts what we saw; syncing the server first");
                            drop(watcher);
                            client.sync(path).await?;
                            synced = true;
                            continue 'list;
                        }
                    }
                    return Ok(Look {
                        leader: Some(found),
                        watcher,
                        watching: "the leader's node",
                    });
                }
                // Gone between listing and reading: list again.
                Err(Zk::NoNode) => continue 'list,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Waits for the look's watch or a connection change.
async fn wait(
    shared: &Shared,
    feed: &mut StatusFeed,
    live: &Live,
    look: Look,
    memory: &mut Memory,
) -> Wake {
    let mut watch = Box::pin(look.watcher.changed());
    loop {
        tokio::select! {
            biased;
            _ = shared.stop.cancelled() => return Wake::Stop,
            event = &mut watch => {
                debug!(event = ?event.event_type, path = %event.path, watching = look.watching, "watch fired");
                return match event.event_type {
                    // Only the leader's node is watched while there is a leader.
                    EventType::NodeDeleted if look.leader.is_some() => {
                        memory.gone = look.leader.as_ref().map(|l| l.node.clone());
                        shared.confirmed.store(false, Ordering::Release);
                        Wake::Look
                    }
                    EventType::Session => Wake::Reconnect,
                    _ => Wake::Look,
                };
            }
            status = feed.next() => {
                report_state(shared, &status);
                if status.closed {
                    return Wake::Stop;
                }
                match classify(&status, live.epoch) {
                    // The watch survives a reconnect within the session; look again anyway to
                    // catch up.
                    Change::Reconnected => return Wake::Look,
                    Change::Interrupted => shared.confirmed.store(false, Ordering::Release),
                    Change::SessionGone => {
                        shared.confirmed.store(false, Ordering::Release);
                        return Wake::Reconnect;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(node: &str, token: i64) -> LeaderInfo {
        LeaderInfo {
            id: "a".into(),
            token: FencingToken::from_raw(token),
            node: node.into(),
        }
    }

    #[test]
    fn a_node_the_server_said_is_gone_is_stale() {
        let memory = Memory {
            reported: Some(info("/e/n1", 10)),
            reported_once: true,
            gone: Some("/e/n1".into()),
            highest: Some(FencingToken::from_raw(10)),
            ..Memory::default()
        };
        assert!(is_stale(&info("/e/n1", 10), &memory));
        assert!(!is_stale(&info("/e/n2", 12), &memory));
    }

    #[test]
    fn an_older_token_than_any_report_is_stale_and_the_same_node_is_not() {
        let memory = Memory {
            reported: Some(info("/e/n2", 20)),
            reported_once: true,
            gone: None,
            highest: Some(FencingToken::from_raw(20)),
            ..Memory::default()
        };
        assert!(is_stale(&info("/e/n1", 10), &memory));
        assert!(!is_stale(&info("/e/n2", 20), &memory));
        assert!(!is_stale(&info("/e/n3", 30), &Memory::default()));
        // A "no leader" report in between does not make an older leader new again.
        let memory = Memory {
            reported: None,
            ..memory
        };
        assert!(is_stale(&info("/e/n1", 10), &memory));
    }

    #[test]
    fn observer_types_are_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<LeaderObserver>();
        assert_send_sync::<LeaderObserverBuilder>();
        assert_send_sync::<LeaderInfo>();
        assert_send_sync::<ObserverEvent>();
    }
}
