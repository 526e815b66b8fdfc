#![doc = include_str!("../../recipes/leader-selector.md")]

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, error, info, info_span, instrument, warn};

use crate::acl::NodeAcl;
use crate::contender::{self, Contender, ContenderSpec, Participant, TermEnd, TermMode};
use crate::error::{Error, Result};
use crate::fencing::Leadership;
use crate::path::{self, MUTEX_LOCK_NAME};
use crate::session::Session;
use crate::state::ErrorPolicy;

/// The error a leadership closure may return; it is logged, and the term relinquished.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// How long a closure may run on after its term ended before its task is aborted, by default.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// The work a [`LeaderSelector`] runs while leader.
///
/// Implemented for every `Fn(Leadership) -> impl Future<Output = Result<(), E>>` closure; implement
/// it on a type for anything bigger.
///
/// # Curator
/// `LeaderSelectorListener.takeLeadership(client)`: leadership lasts until it returns. A term
/// that ends early (see [`Leadership::cancelled`]) is Curator's `CancelLeadershipException`:
/// stop promptly, the selector waits at most its grace period.
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
    grace: Duration,
    policy: ErrorPolicy,
    acl: NodeAcl,
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

    /// How long a closure may run on after its term ended before it is aborted (default 5 s).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Which connection states end a term (default [`ErrorPolicy::Standard`]).
    pub fn error_policy(mut self, policy: ErrorPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The ACL of the nodes this selector creates: its own node, the election path and its missing
    /// ancestors (as containers), and the nodes its terms' fenced writes create. Default:
    /// [`NodeAcl::anyone_all`], as Curator. An existing election path keeps its own ACL, and that ACL
    /// decides who may delete the nodes under it: see the spec's "Node ACL" section.
    pub fn acl(mut self, acl: impl Into<NodeAcl>) -> Self {
        self.acl = acl.into();
        self
    }

    /// Validates the settings and queues for leadership in the background; returns at once.
    ///
    /// # Errors
    /// [`Error::InvalidPath`], [`Error::InvalidArgument`] (an id that breaks
    /// [`validate_id`](crate::path::validate_id)'s rules, a creator ACL on a session without
    /// credentials), [`Error::Closed`] when the session is closed, [`Error::NoRuntime`].
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is sent before the returned selector exists.
    pub async fn start<L: LeaderSelectorListener>(self, listener: L) -> Result<LeaderSelector> {
        path::validate_path(&self.path)?;
        let id = self.id.unwrap_or_else(contender::default_participant_id);
        path::validate_id(&id)?;
        self.acl.check_usable(self.session.has_credentials())?;
        if self.session.status().closed {
            return Err(Error::Closed);
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let (leadership_tx, _) = watch::channel(None);
        let (state_tx, _) = watch::channel(SelectorState::Queued);
        let shared = Arc::new(Shared {
            session: self.session.clone(),
            path: self.path.clone(),
            id: id.clone(),
            auto_requeue: self.auto_requeue,
            grace: self.grace,
            policy: self.policy,
            acl: self.acl,
            stop: CancellationToken::new(),
            requeue: Notify::new(),
            requeued: std::sync::atomic::AtomicBool::new(false),
            current: Mutex::new(None),
            leadership_tx,
            state_tx,
            failure: std::sync::OnceLock::new(),
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

struct Shared {
    session: Session,
    path: String,
    id: String,
    auto_requeue: bool,
    grace: Duration,
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
///         let stop = term.cancelled();
///         while !stop.is_cancelled() && term.is_valid() {
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
            grace: DEFAULT_GRACE,
            policy: ErrorPolicy::default(),
            acl: NodeAcl::default(),
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
        self.shared.requeue.notify_one();
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
        let requeued = shared
            .requeued
            .swap(false, std::sync::atomic::Ordering::AcqRel);
        if !requeued {
            tokio::select! {
                _ = shared.stop.cancelled() => break,
                _ = shared.requeue.notified() => {
                    shared.requeued.store(false, std::sync::atomic::Ordering::Release);
                }
            }
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
            // and gets the grace period to return.
            if shared.stop.is_cancelled()
                && let Ok(current) = shared.current.lock()
                && let Some(c) = current.as_ref()
            {
                c.interrupt(TermEnd::Closed);
            }
            match tokio::time::timeout(shared.grace, &mut task).await {
                Ok(r) => r,
                Err(_) => {
                    warn!(token = %term.token(), grace_ms = shared.grace.as_millis() as u64,
                        "leadership closure did not return within the grace period after its term ended; aborting it");
                    task.abort();
                    let _ = task.await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_types_are_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<LeaderSelector>();
        assert_send_sync::<LeaderSelectorBuilder>();
    }

    #[test]
    fn closures_are_listeners() {
        fn takes<L: LeaderSelectorListener>(_: L) {}
        takes(|_term: Leadership| async { Ok::<(), std::io::Error>(()) });
    }
}
