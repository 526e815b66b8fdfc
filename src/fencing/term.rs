//! A leadership term: its token, its deadline on the session's lease, its end, and the fenced
//! writes only the current leader can make.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use zookeeper_client::{CheckWriteError, CreateMode};

use crate::acl::NodeAcl;
use crate::clock::{BootTime, Clock};
use crate::error::{Error, Result};
use crate::session::{Lease, Live, Session, WeakSession};

use super::write::fenced_request_size;
use super::{FencedOp, FencedResult, FencingToken};

/// One leadership term (or lock hold).
///
/// Cheap to clone. The term ends when its [`cancelled`](Self::cancelled) token fires: connection
/// suspended (under [`ErrorPolicy::Standard`](crate::ErrorPolicy::Standard)), session lost, node
/// deleted, recipe closed, or the deadline passed. [`is_valid`](Self::is_valid) also turns false
/// the instant the deadline passes, without waiting for any task to run.
///
/// A term holds its session weakly: keeping an old term does not keep the session open.
#[derive(Clone)]
pub struct Leadership {
    inner: Arc<Term>,
}

/// Why a term ended ([`Leadership::end_reason`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TermEnd {
    /// The connection was suspended (ends terms under the Standard policy).
    Suspended,
    /// The session was lost.
    Lost,
    /// Connected to a read-only server, which cannot prove the session alive on the quorum.
    ReadOnly,
    /// The leader's node was deleted by someone else.
    NodeDeleted,
    /// The deadline ([`Leadership::valid_until`]) passed without the session being proven alive.
    DeadlinePassed,
    /// The recipe was closed, or the holder released.
    Closed,
    /// The term was interrupted on purpose (`LeaderSelector::interrupt_leadership`).
    Interrupted,
}

impl TermEnd {
    /// A short name for logs and JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            TermEnd::Suspended => "suspended",
            TermEnd::Lost => "lost",
            TermEnd::ReadOnly => "read_only",
            TermEnd::NodeDeleted => "node_deleted",
            TermEnd::DeadlinePassed => "deadline_passed",
            TermEnd::Closed => "closed",
            TermEnd::Interrupted => "interrupted",
        }
    }
}

impl std::fmt::Display for TermEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

struct Term {
    token: FencingToken,
    path: String,
    participant_id: String,
    /// The recipe's node ACL, for the nodes fenced writes create.
    acl: NodeAcl,
    session_id: i64,
    epoch: u64,
    cancel: CancellationToken,
    /// Set first when the term ends, before its instant is read: see [`Leadership::end`].
    ending: std::sync::atomic::AtomicBool,
    reason: std::sync::OnceLock<TermEnd>,
    /// When the term stopped being valid: set once, when it ends.
    ended_at: std::sync::OnceLock<BootTime>,
    /// The lease of the session that won the term: its deadline is the term's.
    lease: Arc<Lease>,
    /// Weak: an old term kept by the application does not keep the session open.
    session: WeakSession,
    started: BootTime,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("token", &self.inner.token)
            .field("path", &self.inner.path)
            .field("participant_id", &self.inner.participant_id)
            .field("session_id", &format_args!("{:#x}", self.inner.session_id))
            .field("ended", &self.inner.cancel.is_cancelled())
            .finish()
    }
}

impl PartialEq for Leadership {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Leadership {
    /// A term won on `live` by the node at `path`.
    pub(crate) fn new(
        token: FencingToken,
        path: String,
        participant_id: String,
        acl: NodeAcl,
        live: &Live,
        session: Session,
    ) -> Self {
        Leadership {
            inner: Arc::new(Term {
                token,
                path,
                participant_id,
                acl,
                session_id: live.session_id,
                epoch: live.epoch,
                cancel: CancellationToken::new(),
                ending: std::sync::atomic::AtomicBool::new(false),
                reason: std::sync::OnceLock::new(),
                ended_at: std::sync::OnceLock::new(),
                started: live.lease().clock().now(),
                lease: live.lease(),
                session: session.downgrade(),
            }),
        }
    }

    /// Ends the term for `reason` (idempotent: the first reason stays). Only the contender core
    /// calls this.
    pub(crate) fn end(&self, reason: TermEnd) {
        // The flag first, the instant after it: whoever found the term valid (the flag not yet
        // set) did so before the instant recorded, so `ended_at` is never earlier than a moment
        // at which `is_valid` said true. (Stamped first, a reader between the stamp and the
        // cancel saw the term valid after its recorded end: 17 µs in a fault trial on a loaded
        // machine, issue 41.) The instant before the cancel, so that whoever sees the term
        // ended (its token fired) also sees when. A term whose deadline passed before anyone
        // noticed (a frozen process) was valid only until then.
        self.inner
            .ending
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = self
            .inner
            .ended_at
            .set(self.clock().now().min(self.inner.lease.deadline()));
        let _ = self.inner.reason.set(reason);
        self.inner.cancel.cancel();
    }

    /// The instant the term stopped being valid, once it has ended: when it was ended, or its
    /// deadline if that passed first (a process frozen past its session ends its term only when
    /// it runs again, but [`is_valid`](Self::is_valid) was false from the deadline on). For
    /// histories of terms: a successor's term never starts before this instant, and no
    /// [`is_valid`](Self::is_valid) said true after it.
    pub fn ended_at(&self) -> Option<BootTime> {
        self.inner.ended_at.get().copied()
    }

    /// The clock the term is judged by: its session's ([`Session::clock`]).
    pub fn clock(&self) -> &Clock {
        self.inner.lease.clock()
    }

    /// Why the term ended, once it has.
    pub fn end_reason(&self) -> Option<TermEnd> {
        self.inner.reason.get().copied()
    }

    /// The term's fencing token.
    pub fn token(&self) -> FencingToken {
        self.inner.token
    }

    /// The full path of the leader's own node.
    pub fn path(&self) -> &str {
        &self.inner.path
    }

    /// The participant id of the leader (this process).
    pub fn participant_id(&self) -> &str {
        &self.inner.participant_id
    }

    /// The ZooKeeper session that holds the leader's node.
    pub fn session_id(&self) -> i64 {
        self.inner.session_id
    }

    /// When the term began (locally, boot time).
    pub fn started_at(&self) -> BootTime {
        self.inner.started
    }

    /// The term's stop signal: a future that completes when the term ends, for whatever reason
    /// (the connection state the error policy counts as loss, the session lost, the deadline
    /// passed, the node deleted, the recipe closed, an interrupt).
    ///
    /// This is the one future to await, typically in a `tokio::select!` against a step of the
    /// work; [`is_valid`](Self::is_valid) is the one check to make right before each side
    /// effect (it also catches a deadline that passed while the process was frozen, before the
    /// term is ended). The future owns what it needs (it does not borrow the term), so it can be
    /// created once and moved into a task.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn one_batch() {}
    /// # async fn demo(term: zookeeper_recipes::Leadership) {
    /// let stop = term.cancelled();
    /// tokio::pin!(stop);
    /// loop {
    ///     tokio::select! {
    ///         () = &mut stop => break, // the term is over: stop at once
    ///         () = one_batch() => {}
    ///     }
    ///     if !term.is_valid() {
    ///         break; // checked right before the next side effect
    ///     }
    /// }
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: dropping it only stops waiting.
    ///
    /// # Curator
    /// Where Curator interrupts the thread running `takeLeadership` (`CancelLeadershipException`),
    /// the closure awaits this.
    pub fn cancelled(&self) -> WaitForCancellationFutureOwned {
        self.inner.cancel.clone().cancelled_owned()
    }

    /// The term's stop signal as a [`CancellationToken`], for code that takes one (a spawned
    /// task, `CancellationToken::run_until_cancelled`). It is a child of the term's own token:
    /// cancelling it yourself does not end the term. `term.cancellation_token().cancelled()` is
    /// the same future as [`cancelled`](Self::cancelled).
    pub fn cancellation_token(&self) -> CancellationToken {
        self.inner.cancel.child_token()
    }

    /// Waits until the term ends: [`cancelled`](Self::cancelled), borrowing the term.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn ended(&self) {
        self.inner.cancel.cancelled().await
    }

    /// Whether the term has ended (its token fired).
    pub fn has_ended(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// The instant up to which the term is provably held: the session's
    /// [`safe_until`](Session::safe_until) while the session is the one that won the term; once
    /// the term has ended, when it stopped being valid ([`ended_at`](Self::ended_at)). It moves
    /// forward as the session hears from the server. Boot time: compare with
    /// [`clock`](Self::clock)`().now()`.
    pub fn valid_until(&self) -> BootTime {
        match self.inner.ended_at.get() {
            Some(at) => *at,
            None if self.has_ended() => self.clock().now(),
            None => self.inner.lease.deadline(),
        }
    }

    /// How long the term is provably held from now on: zero once it has ended or its deadline
    /// has passed.
    pub fn remaining(&self) -> Duration {
        if self.has_ended() {
            return Duration::ZERO;
        }
        self.inner
            .lease
            .deadline()
            .saturating_duration_since(self.clock().now())
    }

    /// Whether the term still holds right now: not ended and its deadline not passed. Needs no
    /// network; call it right before every side effect.
    pub fn is_valid(&self) -> bool {
        !self.inner.ending.load(std::sync::atomic::Ordering::SeqCst)
            && !self.has_ended()
            && self.inner.lease.is_valid()
    }

    /// The instant by which anything still acting for this term must have stopped, ended or
    /// not: the lease of the session that won it. The quorum cannot expire that session, and so
    /// no successor can start on its behalf, before it. It moves forward while the session
    /// proves itself alive. Work that outlives its term (a closure in its grace period, a child
    /// process after `SIGTERM`) is stopped by then at the latest.
    pub fn stop_by(&self) -> BootTime {
        self.inner.lease.deadline()
    }

    /// Waits until `bound` or [`stop_by`](Self::stop_by), whichever comes first, watching the
    /// lease as it moves: the end of a grace period that must not outlast the lease.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn until_stop_by(&self, bound: BootTime) {
        let clock = self.clock().clone();
        let mut changes = self.inner.lease.subscribe();
        let mut jumps = clock.jumps();
        loop {
            let target = bound.min(self.stop_by());
            let left = target.saturating_duration_since(clock.now());
            if left.is_zero() {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(left) => {}
                _ = changes.changed() => {}
                () = Clock::jumped(&mut jumps) => {}
            }
        }
    }

    /// Completes once the term's lease has run out: [`stop_by`](Self::stop_by) has passed on
    /// boot time (a host's suspend counts), following the lease as later proofs move it. After
    /// that instant a successor may begin; a supervisor kills what is left of the term's work.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn lease_ended(&self) {
        loop {
            if self.clock().now() >= self.stop_by() {
                return;
            }
            self.inner.lease.until_within(Duration::ZERO).await;
        }
    }

    /// Runs `ops` as one ZooKeeper multi that first checks that the leader's node still exists,
    /// so a deposed leader's write fails instead of landing. Nodes it creates get the recipe's
    /// node ACL ([`NodeAcl`]; by default the session's
    /// [`default_acl`](crate::Session::default_acl): the creator and read for anyone with an
    /// identity, anyone may do anything without).
    ///
    /// A request bigger than the server accepts (its `jute.maxbuffer`,
    /// [`SessionBuilder::jute_max_buffer`](crate::SessionBuilder::jute_max_buffer)) is refused
    /// here, before it is sent: the server would close the connection, which suspends the
    /// session and, under the Standard policy, ends this very term.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(term: zookeeper_recipes::Leadership) -> zookeeper_recipes::Result<()> {
    /// use zookeeper_recipes::FencedOp;
    ///
    /// term.fenced([FencedOp::set_data("/jobs/statement/last-run", b"2026-12-02")]).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::NotLeader`] when the term has ended, its deadline has passed, the session changed,
    /// or the node no longer exists on the server (nothing was written in all these cases).
    /// [`Error::RequestTooLarge`] when the request would exceed the server's limit (nothing was
    /// sent; the term goes on).
    /// [`Error::ConnectionLoss`] when the reply was lost: the write may or may not have been
    /// applied. Other ZooKeeper errors for the operations themselves.
    ///
    /// # Cancel safety
    /// The request is sent when the future is first polled. Dropping the future after that does
    /// not withdraw it: the multi is applied or not as a whole, and the caller does not learn which.
    pub async fn fenced(
        &self,
        ops: impl IntoIterator<Item = FencedOp>,
    ) -> Result<Vec<FencedResult>> {
        if self.has_ended() {
            return Err(Error::NotLeader {
                reason: "the term has ended",
            });
        }
        if !self.inner.lease.is_valid() {
            return Err(Error::NotLeader {
                reason: "the term's deadline has passed",
            });
        }
        let session = self.inner.session.upgrade().ok_or(Error::NotLeader {
            reason: "the session that won the term is gone",
        })?;
        let live = session.live_for(self.inner.epoch).ok_or(Error::NotLeader {
            reason: "the session that won the term is gone",
        })?;
        let ops: Vec<FencedOp> = ops.into_iter().collect();
        let (limit, chroot) = session.request_limits();
        let size = fenced_request_size(chroot, &self.inner.path, &ops, self.inner.acl.entries());
        if size > limit {
            return Err(Error::RequestTooLarge { size, limit });
        }
        let mut writer = live.client.new_check_writer(&self.inner.path, None)?;
        let persistent = CreateMode::Persistent.with_acls(self.inner.acl.as_acls());
        for op in &ops {
            match op {
                FencedOp::Create { path, data } => writer.add_create(path, data, &persistent)?,
                FencedOp::SetData {
                    path,
                    data,
                    version,
                } => writer.add_set_data(path, data, *version)?,
                FencedOp::Delete { path, version } => writer.add_delete(path, *version)?,
                FencedOp::Check { path, version } => writer.add_check_version(path, *version)?,
            }
        }
        match writer.commit().await {
            Ok(results) => Ok(results.into_iter().map(FencedResult::from).collect()),
            Err(CheckWriteError::CheckFailed {
                source: zookeeper_client::Error::NoNode,
            }) => Err(Error::NotLeader {
                reason: "the leader's node no longer exists",
            }),
            Err(CheckWriteError::CheckFailed { source }) => Err(source.into()),
            Err(CheckWriteError::RequestFailed { source }) => Err(source.into()),
            Err(CheckWriteError::OperationFailed { source, .. }) => Err(source.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fencing::Fence;

    #[test]
    fn term_end_names_are_stable() {
        assert_eq!(TermEnd::DeadlinePassed.to_string(), "deadline_passed");
        assert_eq!(TermEnd::NodeDeleted.as_str(), "node_deleted");
    }

    #[test]
    fn leadership_and_fence_are_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Leadership>();
        assert_send_sync::<Fence>();
        assert_send_sync::<FencingToken>();
    }
}
