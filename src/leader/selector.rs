//! [`LeaderSelector`]: the protocol is in [`crate::specs::leader_selector`].

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::checks;
use crate::clock::BootTime;

use futures::FutureExt;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, error, info, info_span, instrument, warn};

use crate::acl::NodeAcl;
use crate::contender::{self, Contender, ContenderSpec, Participant, TermMode};
use crate::error::{Error, Result};
use crate::fencing::{FencingToken, Leadership, TermEnd};
use crate::path::MUTEX_LOCK_NAME;
use crate::session::Session;
use crate::state::ErrorPolicy;

use crate::error::BoxError;

/// The work a [`LeaderSelector`] runs while leader.
///
/// Implemented for every `Fn(Leadership) -> impl Future<Output = Result<(), E>>` closure; implement
/// it on a type for anything bigger.
///
/// # Curator
/// `LeaderSelectorListener.takeLeadership(client)`: leadership lasts until it returns. A term
/// that ends early (see [`Leadership::cancelled`]) is Curator's `CancelLeadershipException`:
/// stop promptly, the selector waits at most its grace period, then aborts the task.
///
/// # Work that outlives the term
/// The abort cannot stop blocking code (a `std::thread::sleep`, a synchronous call, a
/// `spawn_blocking` it awaits, a loop that never yields) nor tasks the closure spawned: they run
/// on while the node is deleted and the next leader starts. Fence every write with the term's
/// token so that the resource refuses them; the selector reports each such abort
/// ([`LeaderSelector::overruns`], [`Overrun`], an `error!` event).
pub trait LeaderSelectorListener: Send + Sync + 'static {
    /// Runs while leader; the term is relinquished when the returned future completes.
    fn take_leadership(
        &self,
        term: Leadership,
    ) -> impl Future<Output = std::result::Result<(), BoxError>> + Send + 'static;
}

impl<F, Fut, E> LeaderSelectorListener for F
where
    F: Fn(Leadership) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
    E: Into<BoxError> + 'static,
{
    fn take_leadership(
        &self,
        term: Leadership,
    ) -> impl Future<Output = std::result::Result<(), BoxError>> + Send + 'static {
        let fut = self(term);
        async move { fut.await.map_err(Into::into) }
    }
}

/// Builds and starts a [`LeaderSelector`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct LeaderSelectorBuilder {
    session: Session,
    path: String,
    id: Option<String>,
    auto_requeue: bool,
    grace: Option<Duration>,
    stop_ahead: Option<Duration>,
    bounded_by_lease: bool,
    policy: ErrorPolicy,
    acl: Option<NodeAcl>,
}

impl LeaderSelectorBuilder {
    /// The participant id, written as the node's data. Default: `<hostname>-<pid>-<8 hex>`.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Re-enter the election after every term (default `false`: one term, then done).
    pub fn auto_requeue(mut self, requeue: bool) -> Self {
        self.auto_requeue = requeue;
        self
    }

    /// How long a closure may run on after its term ended before its task is aborted (default
    /// 5 s, or less when the session's timeout leaves less: see below).
    ///
    /// The grace never runs past the term's lease ([`Leadership::stop_by`]): a successor may
    /// start once the quorum expires the session, so the closure is aborted at the end of the
    /// grace or at the lease's deadline, whichever comes first. So that a well-behaved closure
    /// still gets its grace when the lease is not being renewed (a cut link, a partition), the
    /// term then ends `grace` *before* the lease's deadline. The grace must therefore fit in
    /// the lease the session timeout leaves (the timeout minus the lease margin, a relay
    /// allowance of a tick and a half, and three heartbeat intervals; 2.75 s for a 10 s
    /// session with a 2 s tick, 31.5 s for Curator's 60 s): a longer one is refused by
    /// [`start`](Self::start) with [`Error::GraceTooLong`]. The default is 5 s, lowered to half
    /// that limit when the timeout is short ([`Session::default_grace`]), so that a term keeps
    /// the other half to ride out a short suspension.
    ///
    /// The abort stops the closure at its next `.await` only: blocking code and work it spawned
    /// run on while the node is released and the next leader starts. Such an abort is reported
    /// (`error!`, [`LeaderSelector::overruns`]); fencing is what protects the resource then.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// How long before its lease deadline a term whose lease is not renewed ends (default: the
    /// [`grace`](Self::grace)); it must fit in the lease the session timeout leaves (see
    /// `grace`). Set it apart from the grace when the closure waits for work that has a grace
    /// of its own and stops it itself (`zkr run` waits for its command, which it signals and
    /// kills): ask for the work's grace here and give the closure a longer grace, so that the
    /// closure outlives the work it waits for. The closure is still aborted by the term's lease
    /// ([`Leadership::stop_by`]) at the latest.
    pub fn stop_ahead(mut self, ahead: Duration) -> Self {
        self.stop_ahead = Some(ahead);
        self
    }

    #[cfg(feature = "job")]
    /// For a closure of this crate that stops its own work by the term's lease (the scheduled
    /// job's loop): abort it at the end of its grace only, not at the lease, so that it can
    /// still record (fenced, and so refused) what became of the work.
    pub(crate) fn closure_stops_its_work(mut self) -> Self {
        self.bounded_by_lease = false;
        self
    }

    /// Which connection states end a term (default [`ErrorPolicy::Standard`]).
    pub fn error_policy(mut self, policy: ErrorPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The ACL of the nodes this selector creates: its own node, the election path and its missing
    /// ancestors (as containers), and the nodes its terms' fenced writes create. Default: the
    /// session's [`default_acl`](Session::default_acl), decided at [`start`](Self::start): the
    /// creator's identity and read for anyone when the session has an identity, else
    /// [`NodeAcl::anyone_all`], as Curator. An existing election path keeps its own ACL, and that
    /// ACL decides who may delete the nodes under it: see the spec's "Node ACL" section.
    pub fn acl(mut self, acl: impl Into<NodeAcl>) -> Self {
        self.acl = Some(acl.into());
        self
    }

    /// Validates the settings and queues for leadership in the background; returns at once.
    ///
    /// # Errors
    /// [`Error::InvalidPath`], [`Error::InvalidArgument`] (an id that breaks
    /// [`validate_id`](crate::path::validate_id)'s rules, a creator ACL on a session without
    /// credentials), [`Error::GraceTooLong`] for a grace the session timeout leaves no room for
    /// (measured against the negotiated timeout once the session is connected, else the
    /// requested one), [`Error::Closed`] when the session is closed, [`Error::NoRuntime`].
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is sent before the returned selector exists.
    pub async fn start<L: LeaderSelectorListener>(self, listener: L) -> Result<LeaderSelector> {
        let (id, acl) = checks::identity(&self.session, &self.path, self.id, self.acl)?;
        let (grace, stop_ahead) = checks::grace(&self.session, self.grace, self.stop_ahead)?;
        let runtime = checks::startable(&self.session)?;
        let (leadership_tx, _) = watch::channel(None);
        let (state_tx, _) = watch::channel(SelectorState::Queued);
        let shared = Arc::new(Shared {
            session: self.session.clone(),
            path: self.path.clone(),
            id: id.clone(),
            auto_requeue: self.auto_requeue,
            grace,
            stop_ahead,
            bounded_by_lease: self.bounded_by_lease,
            policy: self.policy,
            acl,
            stop: CancellationToken::new(),
            requeue: Notify::new(),
            requeued: std::sync::atomic::AtomicBool::new(false),
            current: Mutex::new(None),
            leadership_tx,
            state_tx,
            failure: std::sync::OnceLock::new(),
            overruns: AtomicU64::new(0),
            overrun_tx: watch::channel(None).0,
        });
        let span = info_span!(parent: None, "selector", path = %self.path, id = %id);
        let task = runtime.spawn(run(Arc::clone(&shared), Arc::new(listener)).instrument(span));
        Ok(LeaderSelector {
            shared,
            task: Mutex::new(Some(task)),
        })
    }
}

/// Where a selector is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SelectorState {
    /// Queued for leadership.
    Queued,
    /// Leading: the closure runs.
    Leading,
    /// Not queued: the last term ended and auto-requeue is off. [`LeaderSelector::requeue`]
    /// queues again.
    Idle,
    /// Closed.
    Closed,
    /// Stopped by itself: the server refused its requests for good ([`Error::Refused`]) or the
    /// path's sequence counter wrapped ([`Error::SequenceExhausted`]); see
    /// [`LeaderSelector::failure`].
    Failed,
}

/// A leadership closure that was still running when its term had ended and the grace period
/// had run out, so its task was aborted (see [`LeaderSelector::last_overrun`]).
///
/// The abort stops the closure at its next `.await` at the earliest. Blocking code (a
/// `std::thread::sleep`, a `spawn_blocking` it awaits, a loop that never yields) and tasks it
/// spawned may run on after the abort, while the node is released and the next leader starts:
/// that is when the term's [fencing token](crate::FencingToken) is what protects the resource.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Overrun {
    /// The token of the term the closure overran.
    pub token: FencingToken,
    /// The full path of that term's node.
    pub node: String,
    /// Why the term ended (`None` if it had not been marked ended yet: the selector was
    /// closing).
    pub reason: Option<TermEnd>,
    /// How long the closure ran on after its term ended before its task was aborted: the grace
    /// period, plus any delay in noticing the end.
    pub overran: Duration,
    /// The number of this overrun in the selector's life (1 for the first):
    /// [`LeaderSelector::overruns`] when it was reported.
    pub count: u64,
}

struct Shared {
    session: Session,
    path: String,
    id: String,
    auto_requeue: bool,
    grace: Duration,
    stop_ahead: Duration,
    /// Whether the closure is aborted at the term's lease too (always, but for the crate's own
    /// closures that stop their work by it themselves).
    bounded_by_lease: bool,
    policy: ErrorPolicy,
    acl: NodeAcl,
    stop: CancellationToken,
    requeue: Notify,
    requeued: std::sync::atomic::AtomicBool,
    /// The contender of the current round, to interrupt it.
    current: Mutex<Option<Arc<Contender>>>,
    leadership_tx: watch::Sender<Option<Leadership>>,
    state_tx: watch::Sender<SelectorState>,
    /// Why the selector stopped by itself, set before its state turns `Failed`.
    failure: std::sync::OnceLock<Error>,
    /// How many closures were aborted after overrunning their grace period.
    overruns: AtomicU64,
    /// The last of them.
    overrun_tx: watch::Sender<Option<Overrun>>,
}

/// Curator's `LeaderSelector`: run a closure while leader; leadership ends when it returns.
///
/// Wire compatible with Curator's (which queues mutex nodes, `_c_<uuid>-lock-<seq>`), so Java and
/// Rust selectors can share one path.
///
/// # Examples
/// ```no_run
/// # async fn demo(session: zookeeper_recipes::Session) -> zookeeper_recipes::Result<()> {
/// use zookeeper_recipes::{LeaderSelector, Leadership};
///
/// let selector = LeaderSelector::builder(&session, "/election/outbox-relay")
///     .id("replica-2")
///     .auto_requeue(true)
///     .start(|term: Leadership| async move {
///         // is_valid: the term has not ended and its deadline has not passed.
///         while term.is_valid() {
///             // ... relay one batch, fenced with term.token() ...
/// #           break;
///         }
///         Ok::<(), std::io::Error>(())
///     })
///     .await?;
/// # selector.close().await?;
/// # Ok(()) }
/// ```
pub struct LeaderSelector {
    shared: Arc<Shared>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for LeaderSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderSelector")
            .field("path", &self.shared.path)
            .field("id", &self.shared.id)
            .field("state", &self.state())
            .finish()
    }
}

impl Drop for LeaderSelector {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}

impl LeaderSelector {
    /// A builder for a selector on `path` (absolute).
    pub fn builder(session: &Session, path: impl Into<String>) -> LeaderSelectorBuilder {
        LeaderSelectorBuilder {
            session: session.clone(),
            path: path.into(),
            id: None,
            auto_requeue: false,
            grace: None,
            stop_ahead: None,
            bounded_by_lease: true,
            policy: ErrorPolicy::default(),
            acl: None,
        }
    }

    /// Whether a term is running and still valid.
    pub fn has_leadership(&self) -> bool {
        self.shared
            .leadership_tx
            .borrow()
            .as_ref()
            .is_some_and(Leadership::is_valid)
    }

    /// The current term, if one is running (ended terms are not returned): for a readiness
    /// endpoint or a metric that shows this replica's token. The closure gets the same term.
    ///
    /// # Curator
    /// No counterpart (`LeaderSelector.hasLeadership()` only); [`LeaderLatch`] has the same.
    ///
    /// [`LeaderLatch`]: crate::LeaderLatch
    pub fn current_leadership(&self) -> Option<Leadership> {
        self.shared
            .leadership_tx
            .borrow()
            .as_ref()
            .filter(|t| !t.has_ended())
            .cloned()
    }

    /// A watch of the current term.
    pub fn leadership(&self) -> watch::Receiver<Option<Leadership>> {
        self.shared.leadership_tx.subscribe()
    }

    /// A watch of the selector's state.
    pub fn watch_state(&self) -> watch::Receiver<SelectorState> {
        self.shared.state_tx.subscribe()
    }

    /// The selector's state now.
    pub fn state(&self) -> SelectorState {
        *self.shared.state_tx.borrow()
    }

    /// Ends the current term, if any: its token fires, the closure gets the grace period to
    /// return, then the node is deleted. With auto-requeue the selector queues again. Calling it
    /// twice is the same as once (CURATOR-518/671).
    ///
    /// # Curator
    /// `interruptLeadership()`.
    pub fn interrupt_leadership(&self) {
        if let Ok(current) = self.shared.current.lock()
            && let Some(contender) = current.as_ref()
        {
            contender.interrupt(TermEnd::Interrupted);
        }
    }

    /// Queues for leadership again if the selector is idle (its last term ended and
    /// auto-requeue is off). Returns whether it was idle.
    ///
    /// # Curator
    /// `requeue()`.
    pub fn requeue(&self) -> bool {
        if self.state() != SelectorState::Idle {
            return false;
        }
        self.shared
            .requeued
            .store(true, std::sync::atomic::Ordering::Release);
        // Wakes the loop if it waits; no permit is stored, so a requeue is never counted twice
        // (the flag is what the loop reads).
        self.shared.requeue.notify_waiters();
        true
    }

    /// Waits until the selector leads and returns the term.
    ///
    /// # Errors
    /// [`Error::Closed`] when the selector is closed; [`Error::Refused`] or
    /// [`Error::SequenceExhausted`] when it stopped by itself ([`SelectorState::Failed`]).
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    pub async fn await_leadership(&self) -> Result<Leadership> {
        let mut rx = self.shared.leadership_tx.subscribe();
        let mut state = self.shared.state_tx.subscribe();
        contender::wait_for_term(&mut rx, &mut state, |s| {
            matches!(s, SelectorState::Closed | SelectorState::Failed)
        })
        .await
        .map_err(|e| self.failure().unwrap_or(e))
    }

    /// How many leadership closures this selector aborted because they were still running when
    /// their term had ended and the grace period had run out. Each one may have left blocking
    /// work or spawned tasks running (see [`Overrun`]); a count that grows is a bug to fix in
    /// the closure. Every overrun is also logged with `error!`.
    pub fn overruns(&self) -> u64 {
        self.shared.overruns.load(Ordering::Acquire)
    }

    /// The last overrun, if any (see [`overruns`](Self::overruns)).
    pub fn last_overrun(&self) -> Option<Overrun> {
        self.shared.overrun_tx.borrow().clone()
    }

    /// A watch of the last overrun: changes with every closure aborted after its grace period,
    /// for an application that alerts on it or stops writing through anything the closure
    /// may still hold.
    pub fn watch_overrun(&self) -> watch::Receiver<Option<Overrun>> {
        self.shared.overrun_tx.subscribe()
    }

    /// Why the selector stopped by itself ([`Error::Refused`], [`Error::SequenceExhausted`]), if it did.
    pub fn failure(&self) -> Option<Error> {
        self.shared.failure.get().cloned()
    }

    /// Everyone queued on this path, in order, the leader first.
    ///
    /// # Errors
    /// [`Error::Timeout`] when no connection comes within the connection timeout; ZooKeeper
    /// errors.
    ///
    /// # Cancel safety
    /// Cancel safe: read-only.
    ///
    /// # Curator
    /// `getParticipants()`; works on paths Curator selectors use.
    pub async fn participants(&self) -> Result<Vec<Participant>> {
        contender::participants(&self.shared.session, &self.shared.path, MUTEX_LOCK_NAME).await
    }

    /// The current leader, or Curator's dummy participant (empty id, not leader).
    ///
    /// # Errors
    /// As [`participants`](Self::participants).
    ///
    /// # Cancel safety
    /// Cancel safe: read-only.
    pub async fn leader(&self) -> Result<Participant> {
        Ok(contender::leader_of(self.participants().await?))
    }

    /// The participant id.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// The full path of this selector's node, while it is queued or leading.
    pub fn our_path(&self) -> Option<String> {
        let current = self.shared.current.lock().ok()?;
        current.as_ref().and_then(|c| c.our_path())
    }

    /// The election path.
    pub fn path(&self) -> &str {
        &self.shared.path
    }

    /// Leaves the election: a running term ends, the closure gets the grace period to return (and
    /// is aborted after it), the node is deleted. Waits for all of that.
    ///
    /// # Errors
    /// None today.
    ///
    /// # Cancel safety
    /// Cancel safe: the close is started before the first await and finishes in the background.
    #[instrument(skip_all, fields(path = %self.shared.path, id = %self.shared.id))]
    pub async fn close(&self) -> Result<()> {
        self.shared.stop.cancel();
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            let bound = self.shared.grace
                + self.shared.session.connection_timeout()
                + self.shared.session.requested_timeout();
            if tokio::time::timeout(bound, task).await.is_err() {
                warn!(path = %self.shared.path, "selector did not finish closing in time");
            }
        }
        Ok(())
    }
}

/// The selector's loop: queue, lead (run the closure), relinquish, maybe requeue.
async fn run<L: LeaderSelectorListener>(shared: Arc<Shared>, listener: Arc<L>) {
    loop {
        if shared.stop.is_cancelled() {
            break;
        }
        shared.state_tx.send_replace(SelectorState::Queued);
        let spec = ContenderSpec {
            path: shared.path.clone(),
            lock_name: MUTEX_LOCK_NAME,
            id: shared.id.clone(),
            data: shared.id.as_bytes().to_vec(),
            acl: shared.acl.clone(),
            policy: shared.policy,
            mode: TermMode::Once,
            recipe: "selector",
            stop_ahead: shared.stop_ahead,
        };
        let contender = match Contender::start(shared.session.clone(), spec, true) {
            Ok(c) => Arc::new(c),
            Err(e) => {
                error!(error = %e, "cannot queue for leadership");
                break;
            }
        };
        if let Ok(mut current) = shared.current.lock() {
            *current = Some(Arc::clone(&contender));
        }
        let term = tokio::select! {
            _ = shared.stop.cancelled() => None,
            r = contender.await_term() => r.ok(),
        };
        if let Some(term) = term {
            lead(&shared, listener.as_ref(), &term).await;
        }
        contender.close().await;
        if let Ok(mut current) = shared.current.lock() {
            *current = None;
        }
        if let Some(err) = contender.failure() {
            // Requeueing would be refused the same way: stop, and say why.
            let _ = shared.failure.set(err);
            shared.leadership_tx.send_replace(None);
            shared.state_tx.send_replace(SelectorState::Failed);
            return;
        }
        if shared.stop.is_cancelled() {
            break;
        }
        if shared.auto_requeue {
            continue;
        }
        shared.state_tx.send_replace(SelectorState::Idle);
        // Waits for a requeue: the flag says it came, the notification only wakes. Registered
        // before the flag is read, so a requeue between the two is not missed.
        loop {
            let notified = shared.requeue.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if shared
                .requeued
                .swap(false, std::sync::atomic::Ordering::AcqRel)
            {
                break;
            }
            tokio::select! {
                _ = shared.stop.cancelled() => break,
                _ = notified => {}
            }
        }
        if shared.stop.is_cancelled() {
            break;
        }
    }
    shared.leadership_tx.send_replace(None);
    shared.state_tx.send_replace(SelectorState::Closed);
}

/// Runs one term: the closure in a task of its own (so that a panic is caught and an overrun can
/// be aborted) until it returns or the term ends and the grace period runs out.
async fn lead<L: LeaderSelectorListener>(shared: &Shared, listener: &L, term: &Leadership) {
    shared.state_tx.send_replace(SelectorState::Leading);
    shared.leadership_tx.send_replace(Some(term.clone()));
    let work = std::panic::AssertUnwindSafe(listener.take_leadership(term.clone())).catch_unwind();
    let mut task = tokio::spawn(work);
    let outcome = tokio::select! {
        r = &mut task => Some(r),
        _ = term.ended() => None,
        _ = shared.stop.cancelled() => None,
    };
    let outcome = match outcome {
        Some(r) => r,
        None => {
            // The term is over (or the selector is closing): the closure sees its token fire
            // and gets the grace period to return, but never past the term's lease, after which
            // a successor may start.
            let waiting_since = term.clock().now();
            if shared.stop.is_cancelled()
                && let Ok(current) = shared.current.lock()
                && let Some(c) = current.as_ref()
            {
                c.interrupt(TermEnd::Closed);
            }
            let ended = term.ended_at().unwrap_or(waiting_since);
            let bound = async {
                if shared.bounded_by_lease {
                    term.until_stop_by(ended + shared.grace).await;
                } else {
                    term.clock().sleep_until(ended + shared.grace).await;
                }
            };
            tokio::select! {
                biased;
                r = &mut task => r,
                () = bound => {
                    abort_overrun(shared, term, task, waiting_since);
                    shared.leadership_tx.send_replace(None);
                    return;
                }
            }
        }
    };
    match outcome {
        Ok(Ok(Ok(()))) => {
            info!(token = %term.token(), "leadership closure returned; relinquishing")
        }
        Ok(Ok(Err(e))) => {
            error!(token = %term.token(), error = %e, "leadership closure failed; relinquishing")
        }
        Ok(Err(_panic)) => {
            error!(token = %term.token(), "leadership closure panicked; relinquishing")
        }
        Err(e) => {
            error!(token = %term.token(), error = %e, "leadership task failed; relinquishing")
        }
    }
    shared.leadership_tx.send_replace(None);
}

/// The grace period ran out with the closure still running: abort its task, and report that
/// this may not stop it. `abort` only takes effect at the closure's next `.await`; blocking code
/// (a `std::thread::sleep`, a `spawn_blocking` it awaits, a loop that never yields) and tasks it
/// spawned run on. The node is released right after this and the next leader starts, so from
/// here on only fencing protects the resource. Not awaited: waiting for a closure that never
/// yields would hold up the election for as long as it runs.
fn abort_overrun(
    shared: &Shared,
    term: &Leadership,
    task: tokio::task::JoinHandle<TaskResult>,
    waiting_since: BootTime,
) {
    let ended = term.ended_at().unwrap_or(waiting_since);
    let overran = term.clock().now().saturating_duration_since(ended);
    task.abort();
    let count = shared.overruns.fetch_add(1, Ordering::AcqRel) + 1;
    crate::metrics::selector_overrun(&shared.path);
    let reason = term.end_reason();
    error!(path = %shared.path, node = %term.path(), token = %term.token(),
        reason = %reason.map_or("unknown", TermEnd::as_str),
        overran_ms = u64::try_from(overran.as_millis()).unwrap_or(u64::MAX),
        grace_ms = u64::try_from(shared.grace.as_millis()).unwrap_or(u64::MAX),
        overruns = count,
        "leadership closure still running after its term ended and the grace period ran out; \
         aborting its task, but blocking code and tasks it spawned may run on while the node is \
         released and the next leader starts: only fencing protects the resource now");
    shared.overrun_tx.send_replace(Some(Overrun {
        token: term.token(),
        node: term.path().to_owned(),
        reason,
        overran,
        count,
    }));
    let path = shared.path.clone();
    let token = term.token();
    let aborted = Instant::now();
    tokio::spawn(
        async move {
            let _ = task.await;
            warn!(path = %path, token = %token,
                after_abort_ms = u64::try_from(aborted.elapsed().as_millis()).unwrap_or(u64::MAX),
                "the overrunning leadership closure's task has stopped (work it spawned may not have)");
        }
        .in_current_span(),
    );
}

/// What the closure's task returns: its own result, or the panic it caught.
type TaskResult = std::thread::Result<std::result::Result<(), BoxError>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_types_are_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<LeaderSelector>();
        assert_send_sync::<LeaderSelectorBuilder>();
        assert_send_sync::<Overrun>();
    }

    #[test]
    fn closures_are_listeners() {
        fn takes<L: LeaderSelectorListener>(_: L) {}
        takes(|_term: Leadership| async { Ok::<(), std::io::Error>(()) });
    }
}
