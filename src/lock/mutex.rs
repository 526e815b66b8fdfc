//! [`InterProcessMutex`]: the protocol is in [`crate::specs::mutex`].

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{instrument, warn};

use crate::acl::NodeAcl;
use crate::checks;
use crate::contender::{self, Contender, ContenderSpec, Participant, Phase, TermMode};
use crate::error::{Error, Result};
use crate::fencing::{FencingToken, Leadership};
use crate::path::MUTEX_LOCK_NAME;
use crate::session::Session;
use crate::state::ErrorPolicy;

/// Builds an [`InterProcessMutex`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct InterProcessMutexBuilder {
    session: Session,
    path: String,
    id: Option<String>,
    policy: ErrorPolicy,
    acl: Option<NodeAcl>,
    stop_ahead: Duration,
}

impl InterProcessMutexBuilder {
    /// The participant id written as the node's data (Curator writes the host's IP address
    /// unless told otherwise). Default: `<hostname>-<pid>-<8 hex digits>`.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Which connection states end a hold (default [`ErrorPolicy::Standard`]: a suspended
    /// connection already means the lock can no longer be proven held).
    pub fn error_policy(mut self, policy: ErrorPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The ACL of the nodes this mutex creates: its own node, the lock path and its missing
    /// ancestors (as containers), and the nodes its holds' fenced writes create. Default: the
    /// session's [`default_acl`](Session::default_acl), decided at [`build`](Self::build): the
    /// creator's identity and read for anyone when the session has an identity, else
    /// [`NodeAcl::anyone_all`], as Curator. An existing lock path keeps its own ACL, and that ACL
    /// decides who may delete the nodes under it: see the spec's "Node ACL" section.
    pub fn acl(mut self, acl: impl Into<NodeAcl>) -> Self {
        self.acl = Some(acl.into());
        self
    }

    /// How long before its lease deadline a hold whose lease is not renewed ends (default zero:
    /// at the deadline). A holder that stops work with a grace of its own (`zkr lock` signals its
    /// command, then kills it after `--grace`) asks for that grace here, so that the work is
    /// asked to stop early enough to use its grace before a successor may start. It must fit in
    /// the lease the session timeout leaves ([`Session::grace_limit`]).
    pub fn stop_ahead(mut self, ahead: Duration) -> Self {
        self.stop_ahead = ahead;
        self
    }

    /// Validates the settings. Nothing is sent to the server until an acquire.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a relative or otherwise unusable path, [`Error::InvalidArgument`]
    /// for an id that breaks [`validate_id`](crate::path::validate_id)'s rules or a creator ACL on
    /// a session without credentials; [`Error::GraceTooLong`] for a `stop_ahead` that does not fit
    /// in the session's lease.
    pub fn build(self) -> Result<InterProcessMutex> {
        let (id, acl) = checks::identity(&self.session, &self.path, self.id, self.acl)?;
        checks::fits_in_lease(&self.session, self.stop_ahead)?;
        Ok(InterProcessMutex {
            session: self.session,
            path: self.path,
            id,
            policy: self.policy,
            acl,
            stop_ahead: self.stop_ahead,
        })
    }
}

/// Curator's `InterProcessMutex`: a fair lock across processes, wire compatible with Curator's.
///
/// Each acquire queues an ephemeral-sequential node `_c_<uuid>-lock-<seq>` under the lock path;
/// the lowest sequence holds the lock, and every waiter watches only the node before its own.
///
/// # Not re-entrant
/// Curator's mutex is re-entrant *per thread*: the same thread may acquire again and must release
/// as often. Async tasks move between threads and a thread runs many tasks, so "the same thread"
/// means nothing here. Every [`acquire`](Self::acquire) queues a new node; acquiring again while
/// holding a guard from the same mutex waits for yourself (a deadlock, as with
/// `tokio::sync::Mutex`). Pass the [`MutexGuard`] (or its [`Leadership`]) to the code that needs
/// the lock instead.
///
/// # Examples
/// ```no_run
/// # async fn demo(session: zookeeper_recipes::Session) -> zookeeper_recipes::Result<()> {
/// use std::time::Duration;
/// use zookeeper_recipes::InterProcessMutex;
///
/// let mutex = InterProcessMutex::builder(&session, "/locks/ledger").id("worker-7").build()?;
/// if let Some(guard) = mutex.acquire_timeout(Duration::from_secs(10)).await? {
///     let token = guard.token();
///     // ... write to the ledger, passing `token` so that stale holders are rejected ...
///     guard.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct InterProcessMutex {
    session: Session,
    path: String,
    id: String,
    policy: ErrorPolicy,
    acl: NodeAcl,
    stop_ahead: Duration,
}

impl InterProcessMutex {
    /// A builder for a mutex on `path` (absolute).
    pub fn builder(session: &Session, path: impl Into<String>) -> InterProcessMutexBuilder {
        InterProcessMutexBuilder {
            session: session.clone(),
            path: path.into(),
            id: None,
            policy: ErrorPolicy::default(),
            acl: None,
            stop_ahead: Duration::ZERO,
        }
    }

    fn contender(&self) -> Result<Contender> {
        let spec = ContenderSpec {
            path: self.path.clone(),
            lock_name: MUTEX_LOCK_NAME,
            data: self.id.as_bytes().to_vec(),
            id: self.id.clone(),
            acl: self.acl.clone(),
            policy: self.policy,
            mode: TermMode::Once,
            recipe: "mutex",
            stop_ahead: self.stop_ahead,
        };
        Contender::start(self.session.clone(), spec, true)
    }

    /// Waits until the lock is held and returns the guard.
    ///
    /// A hold that ends before this returns it (the connection suspended under the Standard
    /// policy, the hold's deadline passed, its node deleted by someone else, all between the
    /// claim and the moment this future runs) is not an error: its node is deleted and the
    /// acquire queues again with a new one, as Curator's `acquire()` retries. See the spec's
    /// "A hold that ends before acquire returns it".
    ///
    /// # Errors
    /// [`Error::Closed`] when the session is closed while waiting; [`Error::Refused`] when the
    /// server refused the node for good (no permission on the lock path, an ephemeral lock path,
    /// an ACL it rejects); [`Error::SequenceExhausted`] when the lock path's sequence counter
    /// has wrapped; [`Error::NoRuntime`].
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future withdraws from the queue and deletes the node, also when
    /// its create is still in flight.
    #[instrument(skip_all, fields(path = %self.path, id = %self.id))]
    pub async fn acquire(&self) -> Result<MutexGuard> {
        match self.acquire_until(None).await? {
            Some(guard) => Ok(guard),
            // Without a deadline the wait only ends with a hold or an error.
            None => Err(Error::Closed),
        }
    }

    /// Waits at most `timeout` for the lock: `None` when it was not acquired in time (the node is
    /// deleted before this returns).
    ///
    /// A hold that ends before this returns it is queued for again within the same `timeout`,
    /// as for [`acquire`](Self::acquire).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    ///
    /// # Curator
    /// `acquire(time, unit)`.
    #[instrument(skip_all, fields(path = %self.path, id = %self.id))]
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<MutexGuard>> {
        self.acquire_until(Some(tokio::time::Instant::now() + timeout))
            .await
    }

    /// Queues until a hold is seen running, the deadline passes (`None`), or an error that
    /// waiting does not cure. A hold that ended before it was seen is queued for again.
    async fn acquire_until(
        &self,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Option<MutexGuard>> {
        loop {
            let contender = self.contender()?;
            let outcome = match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, contender.await_term())
                    .await
                    .ok(),
                None => Some(contender.await_term().await),
            };
            match outcome {
                Some(Ok(hold)) => return Ok(Some(MutexGuard { contender, hold })),
                None => {
                    contender.close().await;
                    return Ok(None);
                }
                Some(Err(e)) => {
                    let requeue = self.hold_ended_unseen(&contender);
                    contender.close().await;
                    if !requeue {
                        return Err(e);
                    }
                    if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                        // The deletion used up the rest of the time: no new node for nothing.
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Whether a wait on `contender` failed only because its hold ended before the caller saw
    /// it, on a session that is still open: its one term is over ([`Phase::Ended`], which only
    /// a term that ran reaches), it did not stop for good, and nobody closed it. Then queueing
    /// again is what the caller asked for; anything else is reported as it is.
    fn hold_ended_unseen(&self, contender: &Contender) -> bool {
        let ended = *contender.phase().borrow() == Phase::Ended;
        let unseen = ended
            && contender.failure().is_none()
            && !contender.is_stopped()
            && !self.session.status().closed;
        if unseen {
            warn!(path = %self.path, id = %self.id,
                "the hold ended before acquire could return it; deleting its node and queueing again");
        }
        unseen
    }

    /// Takes the lock only if nobody holds it or waits for it: queues a node, looks once, and
    /// withdraws when it is not first. Waits for a connection at most the connection timeout.
    /// When the lock was free but the hold ended before this could return it (see
    /// [`acquire`](Self::acquire)), it deletes that node and looks again with a new one.
    ///
    /// # Errors
    /// [`Error::Timeout`] when no connection came in time; as [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    #[instrument(skip_all, fields(path = %self.path, id = %self.id))]
    pub async fn try_acquire(&self) -> Result<Option<MutexGuard>> {
        loop {
            let contender = self.contender()?;
            let mut phase = contender.phase();
            let bound = self.session.connection_timeout();
            let decided = phase.wait_for(|p| !matches!(p, Phase::Joining));
            let outcome = match tokio::time::timeout(bound, decided).await {
                Err(_) => Err(Error::Timeout(bound)),
                Ok(Err(_)) => Err(Error::Closed),
                Ok(Ok(p)) => Ok(p.clone()),
            };
            match outcome {
                Ok(Phase::Leading | Phase::Ended) => match contender.await_term().await {
                    Ok(hold) => return Ok(Some(MutexGuard { contender, hold })),
                    Err(e) => {
                        // The lock was free, but the hold ended before it could be returned:
                        // look again with a new node, as acquire does.
                        let requeue = self.hold_ended_unseen(&contender);
                        contender.close().await;
                        if !requeue {
                            return Err(e);
                        }
                    }
                },
                Ok(Phase::Done) if contender.failure().is_some() => {
                    return Err(contender.end_error());
                }
                Ok(_) => {
                    contender.close().await;
                    return Ok(None);
                }
                Err(e) => {
                    contender.close().await;
                    return Err(e);
                }
            }
        }
    }

    /// Everyone holding or waiting, in queue order, the holder first and marked leader.
    ///
    /// # Errors
    /// [`Error::Timeout`] when no connection comes within the connection timeout; ZooKeeper
    /// errors.
    ///
    /// # Cancel safety
    /// Cancel safe: read-only.
    ///
    /// # Curator
    /// `getParticipantNodes()`, with each node's data read as the id.
    pub async fn participants(&self) -> Result<Vec<Participant>> {
        contender::participants(&self.session, &self.path, MUTEX_LOCK_NAME).await
    }

    /// The lock path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The participant id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// A held [`InterProcessMutex`]. Dropping it releases the lock in the background;
/// [`release`](Self::release) does so and waits.
///
/// The hold can end without a release: the connection suspended (under the Standard policy),
/// the session lost, the node deleted by someone else, or the deadline passed. Then
/// [`lost`](Self::lost) completes and [`lost_token`](Self::lost_token) fires. The node stays
/// until the guard is released or dropped, so that nobody else gets the lock while this holder
/// may still be acting: stop, then drop the guard.
#[must_use = "dropping the guard releases the lock"]
pub struct MutexGuard {
    contender: Contender,
    hold: Leadership,
}

impl std::fmt::Debug for MutexGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutexGuard")
            .field("hold", &self.hold)
            .finish()
    }
}

impl MutexGuard {
    /// The hold's fencing token.
    pub fn token(&self) -> FencingToken {
        self.hold.token()
    }

    /// The hold as a term: its path, deadline, fenced writes.
    pub fn leadership(&self) -> &Leadership {
        &self.hold
    }

    /// Whether the lock is still provably held right now.
    pub fn is_held(&self) -> bool {
        self.hold.is_valid()
    }

    /// Completes when the lock can no longer be proven held.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lost(&self) {
        self.hold.ended().await
    }

    /// A token that fires when the lock can no longer be proven held.
    pub fn lost_token(&self) -> CancellationToken {
        self.hold.cancellation_token()
    }

    /// Releases the lock: deletes the node (the next waiter gets the lock at once) and waits for
    /// that.
    ///
    /// # Errors
    /// None today.
    ///
    /// # Cancel safety
    /// Cancel safe: the release is started before the first await and finishes in the background.
    pub async fn release(self) -> Result<()> {
        self.contender.close().await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutex_types_are_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<InterProcessMutex>();
        assert_send_sync::<MutexGuard>();
    }
}
