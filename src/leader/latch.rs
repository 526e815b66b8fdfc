//! [`LeaderLatch`]: the protocol is in [`crate::specs::leader_latch`].

use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::sync::watch;
use tracing::instrument;

use crate::acl::NodeAcl;
use crate::checks;
use crate::contender::{
    self, Contender, ContenderEvent, ContenderSpec, Participant, Phase, TermMode,
};
use crate::error::{Error, Result};
use crate::fencing::{FencingToken, Leadership, TermEnd};
use crate::path::LATCH_LOCK_NAME;
use crate::session::{Session, until_done};
use crate::state::{ConnectionState, ErrorPolicy};

/// What a latch tells its listeners on [`close`](LeaderLatch::close) while it leads.
///
/// # Curator
/// `LeaderLatch.CloseMode`: `SILENT` (the default) and `NOTIFY_LEADER`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CloseMode {
    /// No [`LatchEvent::NotLeader`] on close. The term still ends: its
    /// [`cancelled`](Leadership::cancelled) future completes and [`LeaderLatch::leadership`] turns
    /// `None`, because a closed latch must never look like a leader.
    #[default]
    Silent,
    /// A [`LatchEvent::NotLeader`] with reason [`TermEnd::Closed`] on close.
    NotifyLeader,
}

/// What a latch reports through [`LeaderLatch::events`], in order.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum LatchEvent {
    /// This latch became leader: a new term.
    Leader(Leadership),
    /// This latch's term ended.
    NotLeader {
        /// The token of the term that ended.
        token: FencingToken,
        /// Why it ended.
        reason: TermEnd,
    },
    /// The session's connection state changed.
    State(ConnectionState),
    /// The latch stopped for good: the server refused its requests ([`Error::Refused`]), or the
    /// path's sequence counter is exhausted ([`Error::SequenceExhausted`]). The last event.
    Failed(Error),
}

/// Builds and starts a [`LeaderLatch`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct LeaderLatchBuilder {
    session: Session,
    path: String,
    id: Option<String>,
    close_mode: CloseMode,
    policy: ErrorPolicy,
    acl: Option<NodeAcl>,
}

impl LeaderLatchBuilder {
    /// The participant id, stored as the node's data (Curator reads it in `getParticipants()`).
    /// Default: `<hostname>-<pid>-<8 hex digits>`.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// What listeners hear on close (default [`CloseMode::Silent`], as Curator).
    pub fn close_mode(mut self, mode: CloseMode) -> Self {
        self.close_mode = mode;
        self
    }

    /// Which connection states end a term (default [`ErrorPolicy::Standard`]).
    pub fn error_policy(mut self, policy: ErrorPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The ACL of the nodes this latch creates: its own node, the election path and its missing
    /// ancestors (as containers), and the nodes its terms' fenced writes create. Default: the
    /// session's [`default_acl`](Session::default_acl), decided at [`start`](Self::start): the
    /// creator's identity and read for anyone when the session has an identity, else
    /// [`NodeAcl::anyone_all`], as Curator. An existing election path keeps its own ACL, and that
    /// ACL decides who may delete the nodes under it: see the spec's "Node ACL" section.
    pub fn acl(mut self, acl: impl Into<NodeAcl>) -> Self {
        self.acl = Some(acl.into());
        self
    }

    /// Validates the settings and joins the election in the background; returns at once.
    ///
    /// The node is created as soon as the session is connected (or, if it is not yet, once it
    /// is): a latch may be started while the server is down.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a relative or otherwise unusable path, [`Error::InvalidArgument`]
    /// for an id that breaks [`validate_id`](crate::path::validate_id)'s rules or a creator ACL on
    /// a session without credentials, [`Error::Closed`] when the session is closed,
    /// [`Error::NoRuntime`] outside a tokio runtime.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is sent before the returned latch exists.
    pub async fn start(self) -> Result<LeaderLatch> {
        let (id, acl) = checks::identity(&self.session, &self.path, self.id, self.acl)?;
        checks::startable(&self.session)?;
        let spec = ContenderSpec {
            path: self.path.clone(),
            lock_name: LATCH_LOCK_NAME,
            data: id.as_bytes().to_vec(),
            id: id.clone(),
            acl,
            policy: self.policy,
            mode: TermMode::Repeat,
            recipe: "latch",
            stop_ahead: Duration::ZERO,
        };
        let contender = Contender::start(
            self.session.clone(),
            spec,
            self.close_mode == CloseMode::NotifyLeader,
        )?;
        Ok(LeaderLatch {
            contender,
            session: self.session,
            path: self.path,
            id,
        })
    }
}

/// Curator's `LeaderLatch`: join an election and stay in it; at any moment at most one latch on
/// the path leads.
///
/// See [the spec](crate::specs::leader_latch) for the protocol.
///
/// # Examples
/// ```no_run
/// # async fn demo(session: zookeeper_recipes::Session) -> zookeeper_recipes::Result<()> {
/// use zookeeper_recipes::LeaderLatch;
///
/// let latch = LeaderLatch::builder(&session, "/election/statement-job")
///     .id("replica-1")
///     .start()
///     .await?;
/// let term = latch.await_leadership().await?;
/// while term.is_valid() {
///     // ... one step of the singleton job, writes fenced with term.token() ...
/// #   break;
/// }
/// latch.close().await?;
/// # Ok(()) }
/// ```
pub struct LeaderLatch {
    contender: Contender,
    session: Session,
    path: String,
    id: String,
}

impl std::fmt::Debug for LeaderLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderLatch")
            .field("path", &self.path)
            .field("id", &self.id)
            .field("our_path", &self.our_path())
            .field("has_leadership", &self.has_leadership())
            .finish()
    }
}

impl LeaderLatch {
    /// A builder for a latch on `path` (absolute, e.g. `/election/jobs`).
    pub fn builder(session: &Session, path: impl Into<String>) -> LeaderLatchBuilder {
        LeaderLatchBuilder {
            session: session.clone(),
            path: path.into(),
            id: None,
            close_mode: CloseMode::default(),
            policy: ErrorPolicy::default(),
            acl: None,
        }
    }

    /// Whether this latch leads right now: a term is running and its deadline has not passed.
    ///
    /// # Curator
    /// `hasLeadership()`, with the deadline check Curator does not make.
    pub fn has_leadership(&self) -> bool {
        self.contender
            .current_leadership()
            .is_some_and(|t| t.is_valid())
    }

    /// The current term, if any.
    pub fn current_leadership(&self) -> Option<Leadership> {
        self.contender
            .current_leadership()
            .filter(|t| !t.has_ended())
    }

    /// A watch of the current term: `Some` while leading, `None` otherwise.
    pub fn leadership(&self) -> watch::Receiver<Option<Leadership>> {
        self.contender.leadership()
    }

    /// Leadership changes and connection-state changes, in order, from now on. The stream ends
    /// when the latch is closed. A listener more than 256 events behind skips the ones it missed.
    ///
    /// # Curator
    /// `addListener(LeaderLatchListener)` plus the framework's connection-state listener.
    pub fn events(&self) -> impl Stream<Item = LatchEvent> + Send + 'static {
        let mut phase = self.contender.phase();
        let done = async move {
            let _ = phase.wait_for(|p| *p == Phase::Done).await;
        };
        until_done(self.contender.events(), done).map(|event| match event {
            ContenderEvent::Leader(term) => LatchEvent::Leader(term),
            ContenderEvent::NotLeader { term, reason } => LatchEvent::NotLeader {
                token: term.token(),
                reason,
            },
            ContenderEvent::State(state) => LatchEvent::State(state),
            ContenderEvent::Failed(err) => LatchEvent::Failed(*err),
        })
    }

    /// Waits until this latch leads and returns the term.
    ///
    /// Compose with [`tokio::time::timeout`] for Curator's `await(timeout)`.
    ///
    /// # Errors
    /// [`Error::Closed`] when the latch is closed while waiting; [`Error::Refused`] when the
    /// server refused the latch's requests for good (no permission on the path, an ephemeral
    /// election path, an ACL it rejects) and the latch stopped; [`Error::SequenceExhausted`]
    /// when the path's sequence counter has wrapped and the latch stopped.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes; the latch stays in the election.
    #[instrument(skip_all, fields(path = %self.path, id = %self.id))]
    pub async fn await_leadership(&self) -> Result<Leadership> {
        self.contender.await_term().await
    }

    /// Waits until this latch's node exists and returns its path, at most `timeout`.
    ///
    /// # Errors
    /// [`Error::Timeout`]; [`Error::Closed`] when the latch is closed; [`Error::Refused`] when
    /// the server refused its node; [`Error::SequenceExhausted`] when the path's counter wrapped.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    pub async fn wait_joined(&self, timeout: Duration) -> Result<String> {
        let mut phase = self.contender.phase();
        let wait = async {
            loop {
                // Done first: a latch that stopped still has its node until it is deleted.
                if *phase.borrow_and_update() == Phase::Done {
                    return Err(self.contender.end_error());
                }
                if let Some(path) = self.contender.our_path() {
                    return Ok(path);
                }
                if phase.changed().await.is_err() {
                    return Err(self.contender.end_error());
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| Error::Timeout(timeout))?
    }

    /// Everyone in this election, in election order, the first marked leader. Foreign nodes
    /// (named like contenders, but persistent) are left out: see "Foreign nodes in line" in
    /// [the spec](crate::specs::leader_latch).
    ///
    /// # Errors
    /// [`Error::TooManyChildren`] when the path has more than
    /// [`MAX_CHILDREN`](crate::path::MAX_CHILDREN) children; [`Error::Timeout`] when no
    /// connection comes within the connection timeout; ZooKeeper errors.
    ///
    /// # Cancel safety
    /// Cancel safe: read-only.
    ///
    /// # Curator
    /// `getParticipants()`; works on paths that Curator latches use. Curator lists a foreign
    /// node too, and marks it leader when it sorts first.
    pub async fn participants(&self) -> Result<Vec<Participant>> {
        contender::participants(&self.session, &self.path, LATCH_LOCK_NAME).await
    }

    /// The current leader, or Curator's dummy participant (empty id, not leader) when none.
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
        &self.id
    }

    /// The election path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The full path of this latch's node, while it has one.
    pub fn our_path(&self) -> Option<String> {
        self.contender.our_path()
    }

    /// Leaves the election: ends a running term, deletes the node (so the successor is elected
    /// at once) and stops.
    ///
    /// # Errors
    /// None today.
    ///
    /// # Cancel safety
    /// Cancel safe: the close is started before the first await; if the future is dropped, the
    /// latch's task still deletes the node in the background.
    #[instrument(skip_all, fields(path = %self.path, id = %self.id))]
    pub async fn close(&self) -> Result<()> {
        self.contender.close().await;
        Ok(())
    }

    /// [`close`](Self::close), with `mode` instead of the configured close mode.
    ///
    /// # Errors
    /// None today.
    ///
    /// # Cancel safety
    /// As [`close`](Self::close).
    pub async fn close_with(&self, mode: CloseMode) -> Result<()> {
        self.contender
            .set_notify_on_close(mode == CloseMode::NotifyLeader);
        self.close().await
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.contender.is_stopped()
    }

    /// Why the latch stopped by itself ([`Error::Refused`], [`Error::SequenceExhausted`]), if it did.
    pub fn failure(&self) -> Option<Error> {
        self.contender.failure()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latch_types_are_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<LeaderLatch>();
        assert_send_sync::<LeaderLatchBuilder>();
        assert_send_sync::<LatchEvent>();
    }

    #[test]
    fn default_close_mode_is_silent_as_in_curator() {
        assert_eq!(CloseMode::default(), CloseMode::Silent);
    }
}
