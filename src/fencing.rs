//! Fencing tokens, leadership terms, and writes that only a current leader can make ([`FencingToken`] has the argument).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use zookeeper_client::{CheckWriteError, CreateMode, MultiWriteResult};

use crate::acl::NodeAcl;
use crate::clock::{BootTime, Clock};
use crate::error::{Error, Result};
use crate::session::{Lease, Live, Session, WeakSession};
use zookeeper_client::Acl;

/// Fencing tokens, leadership terms, and writes that only a current leader can make.
///
/// Electing one leader is not enough to make work run on one replica only: a leader that was
/// paused (GC, VM freeze, partition) past its session wakes up still believing it leads, while a
/// successor already acts. Two defences work together here:
///
/// - **A deadline.** Every [`Leadership`] term is valid only until the session can no longer be
///   proven alive ([`Leadership::valid_until`], on boot time: it counts a host's suspend, see
///   [`crate::Clock`]). Check [`Leadership::is_valid`] right before acting: it needs no network,
///   so a process that has just woken from a freeze or a suspend sees that its term is over
///   before it sends anything.
/// - **A fencing token.** Each term carries a [`FencingToken`]: the zxid at which the leader's
///   node was created (its `czxid`). A leader is always the lowest live sequence under the
///   election path and sequences are handed out in commit order, so a later term always has a
///   higher token. A resource that remembers the highest token it has seen and rejects lower ones
///   ([`Fence`]) cannot be written by a deposed leader, however long it slept. ZooKeeper state
///   itself can be written through [`Leadership::fenced`], a multi-op that first checks that the
///   leader's node still exists.
///
/// # Curator
/// Curator has no token (CURATOR-537 asks for one; `getLastPathIsLeader` is the nearest), and its
/// guarded writes are still an open issue (CURATOR-689).
///
/// The token of a leadership term or lock hold: the creation zxid of the holder's node.
///
/// Tokens are totally ordered; a later term has a strictly higher token than any earlier term
/// on the same path. A term regained after a suspension with its node intact keeps its token, as
/// nobody else can have led in between.
///
/// # Examples
/// ```
/// use zookeeper_recipes::FencingToken;
///
/// let old = FencingToken::from_raw(0x1_0000_0007);
/// let new = FencingToken::from_raw(0x1_0000_0012);
/// assert!(new > old);
/// assert_eq!(new.to_string(), "4294967314");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(i64);

impl FencingToken {
    /// A token from its raw value (a zxid), as read back from a resource or an environment
    /// variable.
    pub const fn from_raw(zxid: i64) -> Self {
        FencingToken(zxid)
    }

    /// The raw value: the zxid at which the holder's node was created.
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for FencingToken {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        s.trim().parse().map(FencingToken)
    }
}

/// The resource side of fencing: remembers the highest token admitted and rejects older ones.
///
/// **A `Fence` is in-process memory.** It protects a resource only when every writer goes
/// through the same `Fence` value, in one process (a resource server that admits writes from
/// many leaders, or a test). Replicas in separate processes each have their own `Fence`, which
/// protects nothing between them: the check must live where the data lives. In a database that
/// is one conditional write, the token stored beside the data and compared in the same
/// statement:
///
/// ```sql
/// UPDATE statement_runs
///    SET batches_done = :batch, updated_by = :writer, fencing_token = :token
///  WHERE id = :id AND fencing_token <= :token   -- 0 rows changed: a newer leader wrote; stop
/// ```
///
/// (the repository's `statement_job` and `service` examples do this in SQLite). For ZooKeeper
/// state itself, [`Leadership::fenced`] does the check on the server.
///
/// Equal tokens are admitted, so one term can write many times.
///
/// # Examples
/// ```
/// use zookeeper_recipes::{Fence, FencingToken};
///
/// let fence = Fence::new();
/// fence.admit(FencingToken::from_raw(20)).unwrap();
/// fence.admit(FencingToken::from_raw(20)).unwrap();
/// assert!(fence.admit(FencingToken::from_raw(7)).is_err());
/// ```
#[derive(Debug, Default)]
pub struct Fence {
    highest: AtomicI64,
}

/// A write carried a token older than one the resource has already admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stale fencing token {offered}: the resource has already admitted {highest}")]
pub struct StaleToken {
    /// The token that was offered.
    pub offered: FencingToken,
    /// The highest token admitted so far.
    pub highest: FencingToken,
}

impl Fence {
    /// A fence that has admitted nothing yet.
    pub fn new() -> Self {
        Fence {
            highest: AtomicI64::new(i64::MIN),
        }
    }

    /// Admits `token` if it is not older than any token admitted before.
    ///
    /// # Errors
    /// [`StaleToken`] when a newer token was already admitted.
    pub fn admit(&self, token: FencingToken) -> std::result::Result<(), StaleToken> {
        let previous = self.highest.fetch_max(token.0, Ordering::AcqRel);
        if token.0 < previous {
            return Err(StaleToken {
                offered: token,
                highest: FencingToken(previous),
            });
        }
        Ok(())
    }

    /// The highest token admitted, if any.
    pub fn highest(&self) -> Option<FencingToken> {
        let h = self.highest.load(Ordering::Acquire);
        (h != i64::MIN).then_some(FencingToken(h))
    }
}

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
        // Before the cancel, so that whoever sees the term ended also sees when. A term whose
        // deadline passed before anyone noticed (a frozen process) was valid only until then.
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
    /// histories of terms: a successor's term never starts before this instant.
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
        !self.has_ended() && self.inner.lease.is_valid()
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
            let jumped = async {
                match jumps.as_mut() {
                    Some(rx) => {
                        let _ = rx.changed().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(left) => {}
                _ = changes.changed() => {}
                () = jumped => {}
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
    /// node ACL ([`NodeAcl`], default: anyone may do anything).
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

/// The size in bytes of the multi request [`Leadership::fenced`] sends, as the server measures it
/// against `jute.maxbuffer` (everything after the 4-byte length prefix), in jute's encoding:
/// the request header, the check of the leader's node, each operation behind a multi header,
/// and the closing multi header. Every path goes out with the chroot in front.
fn fenced_request_size(chroot: usize, leader_node: &str, ops: &[FencedOp], acl: &[Acl]) -> usize {
    const INT: usize = 4;
    const REQUEST_HEADER: usize = INT + INT; // xid, op code
    const MULTI_HEADER: usize = INT + 1 + INT; // op code, done, error
    let path = |p: &str| INT + chroot + p.len();
    let buffer = |b: &[u8]| INT + b.len();
    let acl_size: usize = INT
        + acl
            .iter()
            .map(|a| INT + INT + a.scheme().len() + INT + a.id().len())
            .sum::<usize>();
    let op_size = |op: &FencedOp| match op {
        // path, data, ACL vector, flags
        FencedOp::Create { path: p, data } => path(p) + buffer(data) + acl_size + INT,
        // path, data, version
        FencedOp::SetData { path: p, data, .. } => path(p) + buffer(data) + INT,
        // path, version
        FencedOp::Delete { path: p, .. } | FencedOp::Check { path: p, .. } => path(p) + INT,
    };
    REQUEST_HEADER
        + MULTI_HEADER
        + path(leader_node)
        + INT
        + ops
            .iter()
            .map(|op| MULTI_HEADER + op_size(op))
            .sum::<usize>()
        + MULTI_HEADER
}

/// One operation of a fenced write ([`Leadership::fenced`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FencedOp {
    /// Create a persistent node.
    Create {
        /// Absolute path.
        path: String,
        /// Node data.
        data: Vec<u8>,
    },
    /// Set a node's data.
    SetData {
        /// Absolute path.
        path: String,
        /// New data.
        data: Vec<u8>,
        /// Expected version, or `None` for any.
        version: Option<i32>,
    },
    /// Delete a node.
    Delete {
        /// Absolute path.
        path: String,
        /// Expected version, or `None` for any.
        version: Option<i32>,
    },
    /// Check a node's version (`-1`: only that it exists).
    Check {
        /// Absolute path.
        path: String,
        /// Expected version.
        version: i32,
    },
}

impl FencedOp {
    /// Create a persistent node.
    pub fn create(path: impl Into<String>, data: impl Into<Vec<u8>>) -> Self {
        FencedOp::Create {
            path: path.into(),
            data: data.into(),
        }
    }

    /// Set a node's data, whatever its version.
    pub fn set_data(path: impl Into<String>, data: impl AsRef<[u8]>) -> Self {
        FencedOp::SetData {
            path: path.into(),
            data: data.as_ref().to_vec(),
            version: None,
        }
    }

    /// Delete a node, whatever its version.
    pub fn delete(path: impl Into<String>) -> Self {
        FencedOp::Delete {
            path: path.into(),
            version: None,
        }
    }

    /// Check that a node exists.
    pub fn exists(path: impl Into<String>) -> Self {
        FencedOp::Check {
            path: path.into(),
            version: -1,
        }
    }
}

/// The result of one [`FencedOp`].
///
/// A write's `mtime_ms` is the quorum leader's wall clock when it prepared the transaction: the
/// ensemble's view of time, the same for every replica (the scheduled job decides what is due by
/// it, not by its own clock).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FencedResult {
    /// A node was created at `path`.
    #[non_exhaustive]
    Created {
        /// Its path.
        path: String,
        /// Its `mtime` (milliseconds since the Unix epoch), when the server reported a valid
        /// `Stat` (ZooKeeper before 3.7 does not, in a multi: ZOOKEEPER-4026).
        mtime_ms: Option<i64>,
    },
    /// A node's data was set; it now has `version`.
    #[non_exhaustive]
    DataSet {
        /// The new data version.
        version: i32,
        /// Its new `mtime` (milliseconds since the Unix epoch).
        mtime_ms: i64,
    },
    /// A node was deleted.
    Deleted,
    /// A check passed.
    Checked,
}

impl FencedResult {
    /// The ensemble's time of the write, for a create or a set that reported one.
    pub fn mtime_ms(&self) -> Option<i64> {
        match self {
            FencedResult::Created { mtime_ms, .. } => *mtime_ms,
            FencedResult::DataSet { mtime_ms, .. } => Some(*mtime_ms),
            _ => None,
        }
    }
}

impl From<MultiWriteResult> for FencedResult {
    fn from(r: MultiWriteResult) -> Self {
        match r {
            MultiWriteResult::Create { path, stat } => FencedResult::Created {
                path,
                mtime_ms: (stat.mzxid > 0 && stat.mtime > 0).then_some(stat.mtime),
            },
            MultiWriteResult::SetData { stat } => FencedResult::DataSet {
                version: stat.version,
                mtime_ms: stat.mtime,
            },
            MultiWriteResult::Delete => FencedResult::Deleted,
            _ => FencedResult::Checked,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn term_end_names_are_stable() {
        assert_eq!(TermEnd::DeadlinePassed.to_string(), "deadline_passed");
        assert_eq!(TermEnd::NodeDeleted.as_str(), "node_deleted");
    }

    #[test]
    fn tokens_order_by_zxid_and_round_trip_as_text() {
        let a = FencingToken::from_raw(5);
        let b = FencingToken::from_raw(0x1_0000_0001);
        assert!(a < b);
        assert_eq!(b.to_string().parse::<FencingToken>().unwrap(), b);
        assert!("x".parse::<FencingToken>().is_err());
    }

    #[test]
    fn fence_admits_equal_and_newer_and_rejects_older() {
        let fence = Fence::new();
        assert_eq!(fence.highest(), None);
        fence.admit(FencingToken::from_raw(10)).unwrap();
        fence.admit(FencingToken::from_raw(10)).unwrap();
        fence.admit(FencingToken::from_raw(11)).unwrap();
        let err = fence.admit(FencingToken::from_raw(10)).unwrap_err();
        assert_eq!(err.highest, FencingToken::from_raw(11));
        assert_eq!(fence.highest(), Some(FencingToken::from_raw(11)));
    }

    #[test]
    fn fenced_request_size_counts_jutes_encoding() {
        let acl = NodeAcl::anyone_all();
        // header 8 + check (9 + 4 + 2 + 4) + closing header 9
        assert_eq!(fenced_request_size(0, "/l", &[], acl.entries()), 36);
        // + set data: 9 + (4 + 2) + (4 + 3) + 4
        let set = [FencedOp::set_data("/d", b"abc")];
        assert_eq!(fenced_request_size(0, "/l", &set, acl.entries()), 36 + 26);
        // A chroot goes in front of both paths.
        assert_eq!(
            fenced_request_size(4, "/l", &set, acl.entries()),
            36 + 26 + 8
        );
        // + create: 9 + (4 + 2) + (4 + 1) + ACL (4 + 4 + 4 + "world" + 4 + "anyone") + flags 4
        let create = [FencedOp::create("/c", b"x".to_vec())];
        assert_eq!(
            fenced_request_size(0, "/l", &create, acl.entries()),
            36 + 9 + 6 + 5 + (4 + 4 + 9 + 10) + 4
        );
        // delete and check: 9 + (4 + 2) + 4 each
        let small = [FencedOp::delete("/x"), FencedOp::exists("/y")];
        assert_eq!(fenced_request_size(0, "/l", &small, acl.entries()), 36 + 38);
    }

    #[test]
    fn leadership_and_fence_are_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Leadership>();
        assert_send_sync::<Fence>();
        assert_send_sync::<FencingToken>();
    }
}
