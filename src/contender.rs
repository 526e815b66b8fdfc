//! The contender core: the one implementation of the predecessor-watch election that
//! `LeaderLatch`, `LeaderSelector` and `InterProcessMutex` share.
//!
//! Each contender owns one ephemeral-sequential node under the recipe path, made by the
//! session's protected create. The lowest sequence leads; every other contender watches only the
//! node just before its own (no herd). The loop below is a small state machine, one background
//! task per contender, and every transition is logged with the path, participant id, session id
//! and, for terms, the fencing token.
//!
//! The rules, each learned from a Curator bug:
//! - set leadership false *before* watching the predecessor (CURATOR-652/653);
//! - a predecessor already gone when the watch is set means re-list, not reset: deleting and
//!   re-creating our node there livelocks (CURATOR-644/645);
//! - never claim from a node of an earlier session (CURATOR-696: a node the server was still
//!   deleting after expiry once made two leaders): every node is tagged with the session that
//!   created it, a node of an earlier session is replaced first, and the listing that shows ours
//!   first is answered on that same session, so no read of our own node is needed;
//! - every contender keeps one watch on its own node, set in the same write as its first
//!   predecessor watch: a node deleted by someone else ends the term, or sends a waiter back into
//!   line, at once (CURATOR-724); the release's own delete uses the watch up;
//! - a waiter right behind the leader leads on the leader's deletion event, with no request, when
//!   the event proves it first (`first_without_listing`; the argument is in
//!   [`crate::specs::leader_latch`], "Claiming on the deletion event"); in every other case it lists
//!   again: a graceful handover costs the server the leader's delete and nothing else;
//! - our node, or the whole recipe path, vanished: create the node again (CURATOR-724);
//! - after a new session, the old node is deleted (if it still exists) and a new one created,
//!   which gives a new, higher fencing token;
//! - close and drop delete the node, also while its create is in flight (CURATOR-18);
//! - a request the server refuses for a reason that waiting does not change (no permission, an
//!   ephemeral election path, an ACL it rejects) stops the contender with
//!   [`Error::Refused`], which every wait of its recipe returns; other errors are retried.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, error, info, info_span, warn};

use crate::acl::NodeAcl;
use crate::error::{Backoff, Error, Result, is_transient};
use crate::fencing::{FencingToken, Leadership, TermEnd};
use crate::path::{self, Standing};
use crate::session::{LeaseDemand, Live, Session, SessionStatus, StatusFeed, hex};
use crate::state::{ConnectionState, ErrorPolicy};

/// A participant in an election or a lock queue, as Curator's `Participant`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Participant {
    /// The participant id: the node's data as UTF-8 (lossy). Curator latches store their id there;
    /// a Curator mutex or selector without an id stores the host's IP address.
    pub id: String,
    /// Whether this participant currently leads (holds the lock).
    pub is_leader: bool,
}

impl Participant {
    /// Curator's dummy participant, returned by `leader()` when there is none: empty id, not
    /// leader.
    pub fn none() -> Self {
        Participant {
            id: String::new(),
            is_leader: false,
        }
    }
}

/// Whether a contender stays in the election after a term ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TermMode {
    /// Stay (a latch): after a lost term, keep or re-create the node and compete again.
    Repeat,
    /// One term only (a lock hold, a selector term): when it ends, delete the node and stop.
    Once,
}

/// What a contender is configured with.
#[derive(Debug, Clone)]
pub(crate) struct ContenderSpec {
    pub(crate) path: String,
    pub(crate) lock_name: &'static str,
    pub(crate) id: String,
    pub(crate) data: Vec<u8>,
    /// The ACL of the node and of the parents it creates.
    pub(crate) acl: NodeAcl,
    pub(crate) policy: ErrorPolicy,
    pub(crate) mode: TermMode,
    /// `latch`, `selector`, `mutex`: for logs.
    pub(crate) recipe: &'static str,
    /// How long before its lease deadline a term whose lease is not renewed ends: the grace its
    /// holder gives the work (a selector's closure, a job's run), so that the work is asked to
    /// stop early enough to get its grace and still be stopped by the deadline (client-go's
    /// renew deadline before its lease duration). Zero for a latch or a mutex.
    pub(crate) stop_ahead: Duration,
}

/// Where a contender is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting for a session or creating its node.
    Joining,
    /// In line behind `position` others.
    Waiting { position: usize },
    /// Leading (a term is running).
    Leading,
    /// Its one term is over (`TermMode::Once`); the node stays until the contender is closed,
    /// so a successor cannot start before the holder has stopped.
    Ended,
    /// Finished: closed. The node is deleted.
    Done,
}

/// What a contender reports, in order.
#[derive(Debug, Clone)]
pub(crate) enum ContenderEvent {
    /// A term began.
    Leader(Leadership),
    /// The term ended.
    NotLeader { term: Leadership, reason: TermEnd },
    /// The session's connection state changed.
    State(ConnectionState),
    /// The contender stopped for good ([`Error::Refused`], [`Error::SequenceExhausted`]); its last
    /// event.
    Failed(Box<Error>),
}

/// How many events a subscriber may fall behind before it skips some.
const EVENTS_BUFFERED: usize = 256;

/// Our own node.
#[derive(Debug, Clone)]
struct OwnNode {
    path: String,
    name: String,
    /// The ZooKeeper session it belongs to (it was created, or adopted after a check of its
    /// owner, on that session's client).
    session_id: i64,
    /// The client it is watched on (a session whose client gave up on it is resumed by a new
    /// client: the node stays, the watch on it is set again).
    epoch: u64,
    /// Its creation zxid: the token of any term it wins.
    czxid: i64,
    /// When it joined the line (for the time-to-leadership metric).
    joined: Instant,
}

struct Shared {
    spec: ContenderSpec,
    session: Session,
    stop: CancellationToken,
    /// Ends the current term without leaving the line (`TermMode::Once`).
    interrupt: CancellationToken,
    /// The reason the interrupted term ends with: `Interrupted`, or `Closed` when the owner is
    /// closing and only wants its holder stopped before the node goes.
    interrupt_reason: std::sync::OnceLock<TermEnd>,
    leadership_tx: watch::Sender<Option<Leadership>>,
    phase_tx: watch::Sender<Phase>,
    node_tx: watch::Sender<Option<String>>,
    /// Made by the first subscriber: most contenders (every mutex acquire) never have one, and a
    /// channel's buffer is allocated up front.
    events_tx: std::sync::OnceLock<broadcast::Sender<ContenderEvent>>,
    notify_on_close: AtomicBool,
    /// Why the contender stopped by itself, set before its phase turns `Done`.
    failure: std::sync::OnceLock<Error>,
    /// Set when the node's deletion has to wait for the session's client to be connected
    /// again: `close()` returns then, and the deletion goes on in the background.
    deletion_deferred: tokio::sync::Notify,
    /// Held while this contender may need the session's lease soon: next in line, claiming,
    /// leading, or holding its node after its one term (the work's grace reads the lease).
    lease_demand: Mutex<Option<LeaseDemand>>,
}

impl Shared {
    /// Holds or lets go of this contender's need for the session's lease.
    fn want_lease(&self, yes: bool) {
        if let Ok(mut demand) = self.lease_demand.lock()
            && demand.is_some() != yes
        {
            *demand = yes.then(|| self.session.demand_lease());
        }
    }

    /// How long before its lease deadline a term ends: the configured grace, within the limit
    /// the session timeout leaves.
    fn stop_ahead(&self) -> Duration {
        self.spec.stop_ahead.min(self.session.grace_limit())
    }

    /// Reports `event` to the subscribers, if there are any.
    fn emit(&self, event: ContenderEvent) {
        if let Some(tx) = self.events_tx.get() {
            let _ = tx.send(event);
        }
    }
}

/// A running contender. Dropping it stops it; its task then deletes the node in the background.
pub(crate) struct Contender {
    shared: Arc<Shared>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Contender {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}

impl Contender {
    /// Starts the contender's task.
    pub(crate) fn start(
        session: Session,
        spec: ContenderSpec,
        notify_on_close: bool,
    ) -> Result<Self> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let (leadership_tx, _) = watch::channel(None);
        let (phase_tx, _) = watch::channel(Phase::Joining);
        let (node_tx, _) = watch::channel(None);
        let shared = Arc::new(Shared {
            spec,
            session,
            stop: CancellationToken::new(),
            interrupt: CancellationToken::new(),
            interrupt_reason: std::sync::OnceLock::new(),
            leadership_tx,
            phase_tx,
            node_tx,
            events_tx: std::sync::OnceLock::new(),
            notify_on_close: AtomicBool::new(notify_on_close),
            failure: std::sync::OnceLock::new(),
            deletion_deferred: tokio::sync::Notify::new(),
            lease_demand: Mutex::new(None),
        });
        let span = info_span!(parent: None, "contender", recipe = shared.spec.recipe, path = %shared.spec.path, id = %shared.spec.id);
        let task = runtime.spawn(run(Arc::clone(&shared)).instrument(span));
        Ok(Contender {
            shared,
            task: Mutex::new(Some(task)),
        })
    }

    pub(crate) fn leadership(&self) -> watch::Receiver<Option<Leadership>> {
        self.shared.leadership_tx.subscribe()
    }

    pub(crate) fn current_leadership(&self) -> Option<Leadership> {
        self.shared.leadership_tx.borrow().clone()
    }

    pub(crate) fn phase(&self) -> watch::Receiver<Phase> {
        self.shared.phase_tx.subscribe()
    }

    pub(crate) fn our_path(&self) -> Option<String> {
        self.shared.node_tx.borrow().clone()
    }

    pub(crate) fn events(&self) -> broadcast::Receiver<ContenderEvent> {
        self.shared
            .events_tx
            .get_or_init(|| broadcast::channel(EVENTS_BUFFERED).0)
            .subscribe()
    }

    pub(crate) fn set_notify_on_close(&self, notify: bool) {
        self.shared.notify_on_close.store(notify, Ordering::Release);
    }

    /// Ends the running term (its token fires) but keeps the node until [`close`](Self::close):
    /// the holder stops first, then the successor is elected.
    ///
    /// `reason` is what the term's [`end_reason`](Leadership::end_reason) says: `Interrupted`,
    /// or `Closed` when the owner is closing. The first call's reason stays.
    pub(crate) fn interrupt(&self, reason: TermEnd) {
        let _ = self.shared.interrupt_reason.set(reason);
        self.shared.interrupt.cancel();
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.shared.stop.is_cancelled()
    }

    /// Why the contender stopped by itself ([`Error::Refused`]), if it did.
    pub(crate) fn failure(&self) -> Option<Error> {
        self.shared.failure.get().cloned()
    }

    /// What a wait on a finished contender returns: its failure, or [`Error::Closed`].
    pub(crate) fn end_error(&self) -> Error {
        self.failure().unwrap_or(Error::Closed)
    }

    /// Waits until a term is running; once the contender is done (closed, its one term over, or
    /// stopped by a refusal), [`end_error`](Self::end_error).
    pub(crate) async fn await_term(&self) -> Result<Leadership> {
        let mut terms = self.leadership();
        let mut phase = self.phase();
        wait_for_term(&mut terms, &mut phase, |p| {
            matches!(p, Phase::Done | Phase::Ended)
        })
        .await
        .map_err(|_| self.end_error())
    }

    /// Stops the contender: ends a running term, deletes the node, and waits for that (at most
    /// the session's connection timeout plus session timeout). When no client of the node's
    /// session is connected, it returns at once and the deletion waits for one in the
    /// background (the session may outlive a lapsed lease, and its node with it).
    pub(crate) async fn close(&self) {
        self.shared.stop.cancel();
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            let bound =
                self.shared.session.connection_timeout() + self.shared.session.requested_timeout();
            let finished = async {
                tokio::select! {
                    _ = task => {}
                    () = self.shared.deletion_deferred.notified() => {
                        debug!(path = %self.shared.spec.path, "no connected client: our node is deleted in the background once there is one");
                    }
                }
            };
            if tokio::time::timeout(bound, finished).await.is_err() {
                warn!(path = %self.shared.spec.path, "contender did not finish its cleanup in time");
            }
        }
    }
}

/// Every connection-state change, in order, as seen by one contender, each reported as an
/// event as it passes.
struct StateFeed(StatusFeed);

impl StateFeed {
    fn new(session: &Session) -> Self {
        StateFeed(StatusFeed::new(session))
    }

    /// Takes the changes that are already queued.
    fn drain(&mut self, shared: &Shared) {
        while let Some(status) = self.0.try_next() {
            report_state(shared, &status);
        }
    }

    /// The next status change.
    async fn next(&mut self, shared: &Shared) -> SessionStatus {
        let status = self.0.next().await;
        report_state(shared, &status);
        status
    }
}

fn report_state(shared: &Shared, status: &SessionStatus) {
    if let Some(state) = status.state {
        shared.emit(ContenderEvent::State(state));
    }
}

/// How the main loop ends.
enum Exit {
    Closed,
    /// Our node was deleted by someone else (only between `wait_behind` and `step`).
    Gone,
    TermOver,
    /// Stopped for good: a refusal ([`Error::Refused`]) or an exhausted sequence counter.
    Failed(Error),
}

/// What to do after a step of the loop.
enum Step {
    /// Start over from the top (re-check the session, the node, the listing).
    Again,
    /// Like `Again`, after a pause (a non-transient error).
    Backoff,
    Exit(Exit),
}

async fn run(shared: Arc<Shared>) {
    let mut feed = StateFeed::new(&shared.session);
    let mut node: Option<OwnNode> = None;
    let mut watch: Option<OwnWatch> = None;
    let mut listing: Option<Vec<String>> = None;
    // Children of the path found to be foreign (named like contenders, but persistent): they
    // take no place in line. Pruned to the names of each listing.
    let mut foreign: HashSet<String> = HashSet::new();
    let mut backoff = Backoff::new(shared.session.connection_timeout());
    let exit = loop {
        let step = step(
            &shared,
            &mut feed,
            &mut node,
            &mut watch,
            &mut listing,
            &mut foreign,
        )
        .await;
        match step {
            Step::Again => {
                backoff.succeed();
                // A step that failed without I/O (a retired client) must not starve the session's
                // task, which is about to publish why.
                tokio::task::yield_now().await;
            }
            Step::Backoff => {
                let pause = backoff.fail();
                tokio::select! {
                    _ = shared.stop.cancelled() => break Exit::Closed,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
            Step::Exit(exit) => break exit,
        }
    };
    if let Exit::TermOver = exit {
        shared.phase_tx.send_replace(Phase::Ended);
        shared.stop.cancelled().await;
    }
    shared.want_lease(false);
    if let Exit::Failed(err) = &exit {
        error!(error = %err, "this contender stops for good (fix the cause and start a new one)");
        let _ = shared.failure.set(err.clone());
        shared.emit(ContenderEvent::Failed(Box::new(err.clone())));
    }
    shared.phase_tx.send_replace(Phase::Done);
    if let Some(node) = node.take() {
        delete_own(&shared, &node).await;
    }
    // Only now: a watch dropped before its node is deleted costs a request to remove it.
    drop(watch);
    shared.node_tx.send_replace(None);
    match exit {
        Exit::Closed => debug!("contender closed"),
        Exit::TermOver => debug!("contender's term is over"),
        Exit::Failed(_) => debug!("contender stopped for good"),
        Exit::Gone => debug!("contender's node is gone"),
    }
}

/// One pass: make sure there is a session and a node, look at the listing, then lead or wait.
async fn step(
    shared: &Shared,
    feed: &mut StateFeed,
    node: &mut Option<OwnNode>,
    watch: &mut Option<OwnWatch>,
    listing: &mut Option<Vec<String>>,
    foreign: &mut HashSet<String>,
) -> Step {
    let spec = &shared.spec;
    let Some(live) = wait_writable(shared, feed).await else {
        return Step::Exit(Exit::Closed);
    };
    if let Some(own) = node
        .as_mut()
        .filter(|n| n.session_id == live.session_id && n.epoch != live.epoch)
    {
        // The same session, resumed by a new client after its old one gave up on it: the node
        // is still ours, only the watch on it went with the old client.
        debug!(node = %own.path, session_id = %hex(live.session_id), "the session was resumed by a new client: watching our node again");
        own.epoch = live.epoch;
        *watch = Some(watch_own(
            shared.session.clone(),
            own.path.clone(),
            live.epoch,
            live.session_id,
        ));
    }
    if let Some(old) = node.as_ref().filter(|n| n.session_id != live.session_id) {
        // Our node belonged to an earlier session: gone, or about to go when the server expires
        // that session. Deleting it now hands its place on without waiting for the expiry.
        info!(node = %old.path, "new session: replacing our node of the earlier session");
        debug!(node = %old.path, session_id = %hex(live.session_id), "replacing the node on this session");
        match live.client.delete(&old.path, None).await {
            Ok(()) | Err(zookeeper_client::Error::NoNode) => {}
            // Keep it, and try again on the next pass: while the old session lives (a client
            // handle the application still holds keeps it alive), the node stays in line ahead
            // of everyone.
            Err(e) if is_transient(&e) => return Step::Again,
            Err(e) => {
                warn!(node = %old.path, error = %e, "could not delete the earlier session's node; it ends with that session")
            }
        }
        forget_node(shared, node, watch);
    }
    let own = match node.clone() {
        Some(own) => own,
        None => {
            shared.phase_tx.send_replace(Phase::Joining);
            match shared
                .session
                .create_protected(
                    &spec.path,
                    spec.lock_name,
                    &spec.data,
                    &spec.acl,
                    true,
                    &shared.stop,
                )
                .await
            {
                Ok(created) => {
                    info!(node = %created.path, czxid = created.czxid, sequence = created.sequence, "joined");
                    debug!(node = %created.path, session_id = %hex(created.session_id), "joined on this session");
                    *listing = created.children;
                    let own = OwnNode {
                        path: created.path,
                        name: created.name,
                        session_id: created.session_id,
                        epoch: created.epoch,
                        czxid: created.czxid,
                        joined: Instant::now(),
                    };
                    shared.node_tx.send_replace(Some(own.path.clone()));
                    *watch = Some(watch_own(
                        shared.session.clone(),
                        own.path.clone(),
                        created.epoch,
                        created.session_id,
                    ));
                    *node = Some(own.clone());
                    if path::sequence_of(&own.name, spec.lock_name).is_none() {
                        // A name we cannot order (the counter wrapped): it would be missing from
                        // every listing, and joining again would only make more such nodes.
                        return Step::Exit(Exit::Failed(Error::SequenceExhausted {
                            path: spec.path.clone(),
                        }));
                    }
                    own
                }
                Err(Error::Closed) => return Step::Exit(Exit::Closed),
                Err(e) => return on_error("create a node under", &spec.path, e),
            }
        }
    };
    let children = match listing.take() {
        Some(children) => children,
        None => {
            // One request: a successor claims leadership one round trip after its predecessor's
            // deletion, with nothing else to read (see `lead_if_owned`).
            match live.client.list_children(&spec.path).await {
                Ok(children) => children,
                Err(zookeeper_client::Error::NoNode) => {
                    warn!(node = %own.path, "the recipe path is gone, and our node with it; joining again (CURATOR-724)");
                    forget_node(shared, node, watch);
                    return Step::Again;
                }
                Err(e) => return on_error("list the children of", &spec.path, e.into()),
            }
        }
    };
    if let Err(e) = path::check_children(&spec.path, &children) {
        // Read once and dropped: stop rather than read it again on every step.
        return Step::Exit(Exit::Failed(e));
    }
    if !foreign.is_empty() {
        let listed: HashSet<&str> = children.iter().map(String::as_str).collect();
        foreign.retain(|name| listed.contains(name.as_str()));
    }
    let sorted = path::skip_foreign(path::sort_contenders(&children, spec.lock_name), foreign);
    match path::standing(&sorted, &own.name) {
        Standing::Missing => {
            warn!(node = %own.path, "our node is gone; joining again (CURATOR-724)");
            forget_node(shared, node, watch);
            Step::Again
        }
        Standing::First => lead_if_owned(shared, feed, &live, &own, node, watch).await,
        Standing::Behind {
            predecessor,
            position,
        } => match wait_behind(shared, feed, &live, watch, &predecessor, position).await {
            Waited::Claim => lead_if_owned(shared, feed, &live, &own, node, watch).await,
            Waited::Foreign => {
                // Skip it from now on, and look again at the same listing: one read per foreign
                // node, once, whatever the size of the line.
                foreign.insert(predecessor);
                *listing = Some(children);
                Step::Again
            }
            Waited::Step(Step::Exit(Exit::Gone)) => {
                warn!(node = %own.path, "our node was deleted by someone else while waiting; joining again (CURATOR-724)");
                forget_node(shared, node, watch);
                Step::Again
            }
            Waited::Step(step) => step,
        },
    }
}

fn forget_node(shared: &Shared, node: &mut Option<OwnNode>, watch: &mut Option<OwnWatch>) {
    *node = None;
    *watch = None;
    shared.node_tx.send_replace(None);
}

/// What to do after a failed request: start over when it was interrupted, stop for good when the
/// server refused it for a reason that waiting does not change, otherwise back off and retry.
fn on_error(operation: &'static str, path: &str, e: Error) -> Step {
    match e {
        e if e.outcome_unknown() || matches!(e, Error::SessionExpired | Error::Closed) => {
            debug!(error = %e, path, "{operation}: interrupted; starting over");
            Step::Again
        }
        Error::Zookeeper(zk) if is_transient(&zk) => {
            debug!(error = %zk, path, "{operation}: interrupted; starting over");
            Step::Again
        }
        Error::Zookeeper(zk) if crate::error::is_refusal(&zk) => {
            Step::Exit(Exit::Failed(Error::Refused {
                operation,
                path: path.to_owned(),
                source: zk,
            }))
        }
        refused @ Error::Refused { .. } => Step::Exit(Exit::Failed(refused)),
        other => {
            error!(error = %other, path, "{operation} failed; retrying");
            Step::Backoff
        }
    }
}

/// Waits until the session is connected for writes; `None` when closed.
async fn wait_writable(shared: &Shared, feed: &mut StateFeed) -> Option<Live> {
    feed.0
        .wait_quorum(&shared.stop, |status| report_state(shared, status))
        .await
}

/// First in line: lead until the term ends.
///
/// The node is known to be ours without reading it (CURATOR-696): it was created (or adopted
/// after checking its owner) on the client of session `own.epoch`, `step` only gets here when
/// that is the live session, and the listing that shows the node first was answered on that same
/// session, so the node was alive and ours when the server answered. Its token is the czxid the
/// create returned. Someone else deleting it later fires the watch on our own node
/// ([`watch_own`]).
async fn lead_if_owned(
    shared: &Shared,
    feed: &mut StateFeed,
    live: &Live,
    own: &OwnNode,
    node: &mut Option<OwnNode>,
    watch: &mut Option<OwnWatch>,
) -> Step {
    let spec = &shared.spec;
    if own.epoch != live.epoch {
        // Unreachable by construction (`step` replaces a node of an earlier session first);
        // never claim from such a node.
        warn!(node = %own.path, "first in line with a node of an earlier session; not claiming (CURATOR-696)");
        return Step::Again;
    }
    if shared.stop.is_cancelled() {
        return Step::Exit(Exit::Closed);
    }
    // State changes queued while we were creating and listing are history now; what counts is
    // the state at the moment of the claim.
    feed.drain(shared);
    let now = shared.session.status();
    if now.closed {
        return Step::Exit(Exit::Closed);
    }
    if now.epoch != live.epoch
        || !matches!(
            now.state,
            Some(ConnectionState::Connected | ConnectionState::Reconnected)
        )
    {
        return Step::Again;
    }
    // A term begins only on a lease proven with room for its grace, and one that will be
    // renewed before that room runs out. The next in line has kept it proven all along; a
    // contender that came first from further back (the line moved without it listing) starts
    // the heartbeats now, and the first `sync` proves the session's last touch: one round trip
    // to the quorum leader. If that touch is too old for the lease to last until the first new
    // heartbeat can be proven (a relay allowance later), the term waits for that proof.
    shared.want_lease(true);
    let lease = live.lease();
    let ahead = shared.stop_ahead();
    if !lease.term_may_begin(ahead) {
        debug!(node = %own.path, "first in line: waiting for the lease to be proven, and renewable in time, before the term begins");
        tokio::select! {
            biased;
            _ = shared.stop.cancelled() => return Step::Exit(Exit::Closed),
            () = lease.until_term_may_begin(ahead) => {}
            // Any change of the connection: look again from the top.
            _ = feed.next(shared) => return Step::Again,
            () = own_node_gone(watch) => {
                warn!(node = %own.path, "our node was deleted by someone else (CURATOR-724)");
                forget_node(shared, node, watch);
                return Step::Again;
            }
        }
    }
    let term = Leadership::new(
        FencingToken::from_raw(own.czxid),
        own.path.clone(),
        spec.id.clone(),
        spec.acl.clone(),
        live,
        shared.session.clone(),
    );
    shared.phase_tx.send_replace(Phase::Leading);
    shared.leadership_tx.send_replace(Some(term.clone()));
    info!(node = %own.path, token = %term.token(), "elected leader");
    debug!(node = %own.path, session_id = %hex(live.session_id), token = %term.token(), "leading on this session");
    crate::metrics::term_started(
        &spec.path,
        &spec.id,
        term.token().get(),
        own.joined.elapsed(),
    );
    shared.emit(ContenderEvent::Leader(term.clone()));

    let end = hold(shared, feed, live, own, watch).await;

    term.end(end);
    shared.leadership_tx.send_replace(None);
    info!(node = %own.path, token = %term.token(), reason = %end, "leadership ended");
    crate::metrics::term_ended(
        &spec.path,
        &spec.id,
        end.as_str(),
        end == TermEnd::DeadlinePassed,
    );
    let notify = end != TermEnd::Closed || shared.notify_on_close.load(Ordering::Acquire);
    if notify {
        shared.emit(ContenderEvent::NotLeader { term, reason: end });
    }
    match end {
        // Closed by `close()` (the node goes now), or by an interrupt of a closing owner (the
        // node stays until `close()`, like any interrupted term).
        TermEnd::Closed if shared.stop.is_cancelled() => Step::Exit(Exit::Closed),
        TermEnd::Closed => Step::Exit(Exit::TermOver),
        _ if spec.mode == TermMode::Once => Step::Exit(Exit::TermOver),
        TermEnd::NodeDeleted => {
            forget_node(shared, node, watch);
            Step::Again
        }
        TermEnd::Interrupted => Step::Exit(Exit::TermOver),
        TermEnd::Suspended | TermEnd::ReadOnly => {
            shared.phase_tx.send_replace(Phase::Joining);
            wait_for_recovery(shared, feed).await
        }
        TermEnd::Lost | TermEnd::DeadlinePassed => {
            shared.phase_tx.send_replace(Phase::Joining);
            Step::Again
        }
    }
}

/// Holds a term until something ends it.
///
/// Its deadline is the session's lease: a lease that lapses ends the term (`DeadlinePassed`),
/// and so does one that comes within `stop_ahead` of its deadline without being renewed, so that
/// the holder's work is asked to stop early enough to use its grace before the deadline.
async fn hold(
    shared: &Shared,
    feed: &mut StateFeed,
    live: &Live,
    own: &OwnNode,
    watch: &mut Option<OwnWatch>,
) -> TermEnd {
    let policy = shared.spec.policy;
    let lease = live.lease();
    let limit = shared.session.grace_limit();
    let ahead = shared.stop_ahead();
    if shared.spec.stop_ahead > limit {
        warn!(node = %own.path, grace_ms = shared.spec.stop_ahead.as_millis() as u64, limit_ms = limit.as_millis() as u64,
            "the grace does not fit in the lease this session's timeout leaves: a term whose lease is not renewed ends only this long before its deadline, and its work is stopped by the deadline");
    }
    loop {
        if !lease.is_valid() || lease.clock().now() + ahead >= lease.deadline() {
            warn!(node = %own.path, token = own.czxid, ahead_ms = ahead.as_millis() as u64,
                "the term's deadline is passing: the session can no longer be proven alive in time");
            return TermEnd::DeadlinePassed;
        }
        tokio::select! {
            biased;
            _ = shared.stop.cancelled() => return TermEnd::Closed,
            _ = shared.interrupt.cancelled() => {
                return shared.interrupt_reason.get().copied().unwrap_or(TermEnd::Interrupted);
            }
            () = lease.until_within(ahead) => {}
            status = feed.next(shared) => {
                // Judge by the state now, not by the event alone: an event may be stale (a
                // suspension that is already over does not end a term whose node survived).
                let current = shared.session.status();
                if status.closed
                    || current.closed
                    || current.epoch != live.epoch
                    || current.state == Some(ConnectionState::Lost)
                {
                    return TermEnd::Lost;
                }
                match current.state {
                    Some(ConnectionState::ReadOnly) => return TermEnd::ReadOnly,
                    Some(state) if policy.is_error_state(state) => return TermEnd::Suspended,
                    _ => {}
                }
            }
            () = own_node_gone(watch) => {
                warn!(node = %own.path, token = own.czxid, "our node was deleted by someone else (CURATOR-724)");
                return TermEnd::NodeDeleted;
            }
        }
    }
}

/// After a suspension ended a term: wait until the connection is back (same session: start over
/// with the same node) or the session is lost (start over with a new one).
async fn wait_for_recovery(shared: &Shared, feed: &mut StateFeed) -> Step {
    loop {
        let status = shared.session.status();
        if status.closed {
            return Step::Exit(Exit::Closed);
        }
        if !matches!(
            status.state,
            Some(ConnectionState::Suspended | ConnectionState::ReadOnly)
        ) {
            return Step::Again;
        }
        tokio::select! {
            _ = shared.stop.cancelled() => return Step::Exit(Exit::Closed),
            _ = feed.next(shared) => {}
        }
    }
}

/// How a wait behind a predecessor ends.
enum Waited {
    /// First in line now, known without a listing ([`first_without_listing`]): lead.
    Claim,
    /// The predecessor is foreign: named like a contender but persistent. It never leaves by
    /// itself; it is reported, and skipped from now on.
    Foreign,
    /// Anything else, for `step` to return.
    Step(Step),
}

/// How far back in line, by its last listing, a waiting contender keeps its lease proven.
const LEASE_KEPT_BY_POSITIONS: usize = 2;

/// Behind someone: watch only the predecessor until it goes.
///
/// `position` is how many nodes were ahead of ours in the listing: when it is 1, the
/// predecessor's deletion can make us the leader without listing again
/// ([`first_without_listing`]).
async fn wait_behind(
    shared: &Shared,
    feed: &mut StateFeed,
    live: &Live,
    watch: &mut Option<OwnWatch>,
    predecessor: &str,
    position: usize,
) -> Waited {
    // Leadership is already false here (it is set false whenever a term ends), before the watch
    // is set (CURATOR-652/653).
    shared.phase_tx.send_replace(Phase::Waiting { position });
    // The first two in line by this listing keep the session's lease proven: the next in line
    // leads on the leader's deletion without first proving it, and the one behind it, which
    // no event tells that it moved up when the leader goes, needs none either when it comes
    // first in turn (every failover of three replicas). The rest of the line needs no lease.
    shared.want_lease(position <= LEASE_KEPT_BY_POSITIONS);
    let predecessor_path = path::join(&shared.spec.path, predecessor);
    // Taken before any request below goes out: a change of the client's connection from here on
    // means the predecessor's event may be a replay, out of zxid order.
    let mut connection = live.client.state_watcher();
    let steady = connection.state() == zookeeper_client::SessionState::SyncConnected;
    let leads_next = position == 1;
    // Our node's watch goes out in the same write as the predecessor's, ahead of it.
    if own_watch_fired(watch) {
        return Waited::Step(Step::Exit(Exit::Gone));
    }
    let watcher = match live.client.get_and_watch_data(&predecessor_path).await {
        Ok((data, stat, watcher)) => {
            if is_foreign(&stat) {
                // Named like a contender but persistent (made or rewritten by hand, or by
                // another tool): it never leaves by itself. No contender of ours has such a
                // node, so skipping it can never make two leaders; Curator contenders still
                // wait behind it.
                report_foreign(&shared.spec.path, &predecessor_path, &data, "contender");
                return Waited::Foreign;
            }
            watcher
        }
        Err(zookeeper_client::Error::NoNode) => {
            // Gone between listing and watching: keep our node (CURATOR-644/645), and list again
            // unless the predecessor was the leader.
            if own_watch_fired(watch) {
                return Waited::Step(Step::Exit(Exit::Gone));
            }
            if leads_next && first_without_listing(watch, &mut connection, steady) {
                debug!(predecessor = %predecessor_path, "the leader ahead of us is already gone; leading without listing again");
                return Waited::Claim;
            }
            debug!(predecessor = %predecessor_path, "predecessor already gone; listing again");
            return Waited::Step(Step::Again);
        }
        Err(e) => return Waited::Step(on_error("watch", &predecessor_path, e.into())),
    };
    debug!(predecessor = %predecessor_path, position, "waiting behind predecessor");
    let mut predecessor_watch = Box::pin(watcher.changed());
    loop {
        tokio::select! {
            biased;
            _ = shared.stop.cancelled() => return Waited::Step(Step::Exit(Exit::Closed)),
            event = &mut predecessor_watch => {
                debug!(predecessor = %predecessor_path, event = ?event.event_type, "predecessor event");
                if own_watch_fired(watch) {
                    return Waited::Step(Step::Exit(Exit::Gone));
                }
                if leads_next
                    && event.event_type == zookeeper_client::EventType::NodeDeleted
                    && first_without_listing(watch, &mut connection, steady)
                {
                    debug!(predecessor = %predecessor_path, "the leader ahead of us is gone; leading without listing again");
                    return Waited::Claim;
                }
                return Waited::Step(Step::Again);
            }
            () = own_node_gone(watch) => return Waited::Step(Step::Exit(Exit::Gone)),
            status = feed.next(shared) => {
                // The watch survives a reconnect within the session (the client re-registers it
                // and the server replays what was missed). A new session or a loss: start over.
                if status.closed || status.epoch != live.epoch || !matches!(status.state,
                    Some(ConnectionState::Suspended | ConnectionState::Reconnected | ConnectionState::Connected)) {
                    return Waited::Step(Step::Again);
                }
            }
        }
    }
}

/// Whether a waiter whose predecessor was first in its listing, and is now deleted, leads
/// without listing again. Call it only after the predecessor's deletion was seen and our own
/// watch was polled (`own_watch_fired` returned false).
///
/// The argument: sequence numbers only grow, so a node created after our listing sorts after
/// ours, and with the first node gone ours is first, unless ours was deleted too. ZooKeeper
/// sends a connection's replies and events in zxid order, and our node's watch was registered
/// (or re-registered when the connection was made) ahead of the predecessor's watch: had our
/// node been deleted first, its event (or the check's answer that it is missing) would have
/// arrived first. That needs:
/// - the client's connection unchanged since before the predecessor's watch went out
///   (`steady` at the start, no state change since): events that a reconnect replays are not in
///   zxid order;
/// - our node's watch registered, that is its check answered and not fired since (`armed`): a
///   check still in flight, or re-sent after our node changed, may be answered after the event.
///
/// Otherwise the caller lists. The session-level checks (same session, connected) follow in
/// `lead_if_owned`, as for a claim after a listing.
fn first_without_listing(
    watch: &mut Option<OwnWatch>,
    connection: &mut zookeeper_client::StateWatcher,
    steady: bool,
) -> bool {
    use futures::FutureExt;
    steady
        && connection.changed().now_or_never().is_none()
        && watch.as_ref().is_some_and(OwnWatch::is_armed)
}

/// The one watch a contender keeps on its own node, for as long as the node lives: `fired`
/// completes when the node is deleted or no longer ours.
struct OwnWatch {
    fired: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    /// Set while the watch is known to be registered on the server: its check was answered with
    /// the node alive and ours, and it has not fired since. Cleared while a check is in flight.
    armed: Arc<AtomicBool>,
}

impl OwnWatch {
    fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Acquire)
    }
}

/// Watches our node `path` of session `epoch` (id `session_id`) and completes when it is deleted,
/// found missing or owned by another session. The watch request goes out on the first poll, in
/// the same write as whatever the contender sends next, so it costs no round trip of its own on
/// the way to leadership; a term that starts before it is answered still ends at once if the
/// answer shows the node gone. The watch survives reconnects (the client re-registers it, and
/// the server fires it if the node went meanwhile); when the session ends it never completes,
/// and the session's own `Lost` ends the term instead.
fn watch_own(session: Session, path: String, epoch: u64, session_id: i64) -> OwnWatch {
    let armed = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&armed);
    let fired = Box::pin(async move {
        loop {
            flag.store(false, Ordering::Release);
            let Some(live) = session.live_for(epoch) else {
                return std::future::pending().await;
            };
            match live.client.check_and_watch_stat(&path).await {
                Ok((Some(stat), watcher)) if stat.ephemeral_owner == session_id => {
                    flag.store(true, Ordering::Release);
                    let event = watcher.changed().await;
                    flag.store(false, Ordering::Release);
                    match event.event_type {
                        zookeeper_client::EventType::NodeDeleted => return,
                        zookeeper_client::EventType::Session => {
                            return std::future::pending().await;
                        }
                        // Someone wrote to it: watch again.
                        _ => {
                            debug!(node = %path, event = ?event.event_type, "our node changed; watching it again")
                        }
                    }
                }
                Ok(_) => return,
                Err(e) if is_transient(&e) => {
                    // Interrupted before the watch was set: again once this session is back.
                    let mut status = session.watch_status();
                    let back = status
                        .wait_for(|s| {
                            s.closed
                                || s.epoch != epoch
                                || s.state.is_some_and(ConnectionState::is_connected)
                        })
                        .await
                        .map(|s| !s.closed && s.epoch == epoch);
                    if !matches!(back, Ok(true)) {
                        return std::future::pending().await;
                    }
                    tokio::task::yield_now().await;
                }
                Err(e) => {
                    warn!(node = %path, error = %e, "could not watch our node");
                    return std::future::pending().await;
                }
            }
        }
    });
    OwnWatch { fired, armed }
}

/// Polls the watch on our node once, which sends its request if it has not gone out yet; whether
/// it has already fired (the watch is used up then).
fn own_watch_fired(watch: &mut Option<OwnWatch>) -> bool {
    use futures::FutureExt;
    let fired = watch
        .as_mut()
        .is_some_and(|w| w.fired.as_mut().now_or_never().is_some());
    if fired {
        *watch = None;
    }
    fired
}

/// Completes when the watch on our node fires (never when there is none); the watch is used up
/// then. Cancel safe: the watch's progress lives in the box.
async fn own_node_gone(watch: &mut Option<OwnWatch>) {
    match watch {
        Some(own) => {
            own.fired.as_mut().await;
            *watch = None;
        }
        None => std::future::pending().await,
    }
}

/// Deletes our node on the way out, as soon as a client of the session that owns it is
/// connected. A node of a session that is gone needs no deletion (the server deletes it with the
/// session); but a session whose lease lapsed, or whose client gave up on it, is not gone: the
/// node would stay first in line for as long as the session lives, so it is deleted once the
/// session is back (the contender's task runs on after `close()` gave up waiting for it).
async fn delete_own(shared: &Shared, node: &OwnNode) {
    let session = &shared.session;
    loop {
        if !session.has_connected_client_of(node.session_id) {
            shared.deletion_deferred.notify_one();
        }
        let Some(live) = session.connected_client_of(node.session_id).await else {
            debug!(node = %node.path, "session gone; our node goes with it");
            return;
        };
        match live.client.delete(&node.path, None).await {
            Ok(()) => {
                info!(node = %node.path, "deleted our node");
                return;
            }
            Err(zookeeper_client::Error::NoNode) => return,
            // Interrupted: look at the session again (reconnected, or gone with the node), once
            // the supervisor has had the chance to publish what broke.
            Err(e) if is_transient(&e) => tokio::task::yield_now().await,
            Err(e) => {
                warn!(node = %node.path, error = %e, "could not delete our node; it ends with the session");
                return;
            }
        }
    }
}

/// Curator's `getParticipants()`: sorted contenders with their ids, the first existing one marked
/// leader. A node that vanishes mid-read is skipped; a missing path gives an empty list.
pub(crate) async fn participants(
    session: &Session,
    path: &str,
    lock_name: &str,
) -> Result<Vec<Participant>> {
    let (live, children) = list_for_participants(session, path).await?;
    read_participants(&live, path, &children, lock_name).await
}

/// A live session and the children of `path` (none when it does not exist).
async fn list_for_participants(session: &Session, path: &str) -> Result<(Live, Vec<String>)> {
    let live = session.wait_live(session.connection_timeout()).await?;
    let children = match live.client.list_children(path).await {
        Ok(children) => children,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    Ok((live, children))
}

/// Reads the ids of the contenders among `children`, in election order. Foreign nodes (named
/// like contenders, but persistent) are left out: they are not participants, and none leads.
pub(crate) async fn read_participants(
    live: &Live,
    path: &str,
    children: &[String],
    lock_name: &str,
) -> Result<Vec<Participant>> {
    Ok(read_election(live, path, children, lock_name)
        .await?
        .into_iter()
        .filter(|n| !n.foreign)
        .map(|n| Participant {
            id: n.id,
            is_leader: n.is_leader,
        })
        .collect())
}

/// Reads every node named like a contender among `children`, in election order, foreign ones
/// marked.
async fn read_election(
    live: &Live,
    path: &str,
    children: &[String],
    lock_name: &str,
) -> Result<Vec<ElectionNode>> {
    path::check_children(path, children)?;
    let sorted = path::sort_contenders(children, lock_name);
    let paths: Vec<String> = sorted.iter().map(|c| path::join(path, &c.name)).collect();
    // All reads are queued before the first is awaited: one round trip in all.
    let reads: Vec<_> = paths.iter().map(|p| live.client.get_data(p)).collect();
    let mut out = Vec::with_capacity(reads.len());
    let mut leader_found = false;
    for ((read, contender), node) in reads.into_iter().zip(sorted).zip(&paths) {
        match read.await {
            Ok((data, stat)) => {
                let foreign = is_foreign(&stat);
                if foreign {
                    // Marked, not reported: a dashboard that lists every second would count it
                    // every second. The contenders and observers that meet it report it once.
                    debug!(node = %node, data = ?String::from_utf8_lossy(&data), "a foreign node in line");
                }
                let is_leader = !foreign && !leader_found;
                leader_found |= is_leader;
                out.push(ElectionNode {
                    name: contender.name,
                    id: String::from_utf8_lossy(&data).into_owned(),
                    is_leader,
                    foreign,
                });
            }
            Err(zookeeper_client::Error::NoNode) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

/// Whether a node named like a contender is foreign: persistent (`ephemeralOwner == 0`), so that
/// it never leaves by itself. Every contender's node is ephemeral. Only 0 counts: a container or
/// TTL node's marker could be mistaken for a live session's id, and skipping a live contender
/// would make two leaders.
pub(crate) fn is_foreign(stat: &zookeeper_client::Stat) -> bool {
    stat.ephemeral_owner == 0
}

/// Reports a foreign node found in line on `path`: an `error!` naming it (its name and data
/// are foreign input: logged escaped, with `?`) and the foreign-nodes metric.
pub(crate) fn report_foreign(path: &str, node: &str, data: &[u8], by: &'static str) {
    error!(node = ?node, data = ?String::from_utf8_lossy(data), by,
        "a persistent node is named like a contender: it never leaves by itself, so it takes no place in line here; Curator peers still wait behind it (the election stalls for them) until an operator deletes it");
    crate::metrics::foreign_node(path);
}

/// A node under an election path named like a contender, as [`election_nodes_on`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ElectionNode {
    /// The child's name (`_c_<uuid>-latch-<seq>`, or whatever a foreign node is called).
    pub name: String,
    /// Its data as UTF-8 (lossy): the participant id. Foreign input: escape it before printing.
    pub id: String,
    /// Whether it leads: the first node in line that is not foreign.
    pub is_leader: bool,
    /// Named like a contender but persistent (`ephemeralOwner == 0`): it never leaves by
    /// itself, so the recipes give it no place in line (a Curator peer still waits behind it).
    pub foreign: bool,
}

/// The participants on `path` whatever recipe uses it: latch nodes (`latch-`) if any child is
/// one, otherwise selector and mutex nodes (`lock-`). For tools like `zkr participants` that are
/// pointed at a path without being told which recipe runs there.
///
/// Nodes named like contenders but persistent are foreign: left out (the contenders and
/// observers that meet one report it; [`election_nodes_on`] lists it).
///
/// # Errors
/// [`Error::TooManyChildren`] when the path has more than [`MAX_CHILDREN`](path::MAX_CHILDREN)
/// children; [`Error::Timeout`] when no connection comes within the connection timeout;
/// ZooKeeper errors.
///
/// # Cancel safety
/// Cancel safe: read-only.
pub async fn participants_on(session: &Session, path: &str) -> Result<Vec<Participant>> {
    path::validate_path(path)?;
    let (live, children) = list_for_participants(session, path).await?;
    read_participants(&live, path, &children, path::lock_name_for(&children)).await
}

/// Every node on `path` named like a contender, in election order, foreign ones marked: what
/// [`participants_on`] reads, with the nodes it leaves out. For tools that show an operator what
/// stands in line (`zkr participants`).
///
/// # Errors
/// [`Error::TooManyChildren`] when the path has more than [`MAX_CHILDREN`](path::MAX_CHILDREN)
/// children; [`Error::Timeout`] when no connection comes within the connection timeout;
/// ZooKeeper errors.
///
/// # Cancel safety
/// Cancel safe: read-only.
pub async fn election_nodes_on(session: &Session, path: &str) -> Result<Vec<ElectionNode>> {
    path::validate_path(path)?;
    let (live, children) = list_for_participants(session, path).await?;
    read_election(&live, path, &children, path::lock_name_for(&children)).await
}

/// The leader among `participants`, or Curator's dummy participant (empty id, not leader).
pub fn leader_of(participants: Vec<Participant>) -> Participant {
    participants
        .into_iter()
        .find(|p| p.is_leader)
        .unwrap_or_else(Participant::none)
}

/// Waits until `terms` holds a running term; [`Error::Closed`] once `state` satisfies `done`.
/// Shared by every recipe's wait for leadership.
pub(crate) async fn wait_for_term<S>(
    terms: &mut watch::Receiver<Option<Leadership>>,
    state: &mut watch::Receiver<S>,
    done: impl Fn(&S) -> bool,
) -> Result<Leadership> {
    loop {
        if let Some(term) = terms.borrow_and_update().clone()
            && !term.has_ended()
        {
            return Ok(term);
        }
        if done(&state.borrow_and_update()) {
            return Err(Error::Closed);
        }
        tokio::select! {
            r = terms.changed() => if r.is_err() { return Err(Error::Closed) },
            r = state.changed() => if r.is_err() { return Err(Error::Closed) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_of_falls_back_to_curators_dummy() {
        assert_eq!(leader_of(vec![]), Participant::none());
        let ps = vec![
            Participant {
                id: "a".into(),
                is_leader: true,
            },
            Participant {
                id: "b".into(),
                is_leader: false,
            },
        ];
        assert_eq!(leader_of(ps).id, "a");
    }
}
