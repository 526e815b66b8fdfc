//! [`LeaderPool`]: the protocol is in [`crate::specs::leader_pool`].

// The layout: the handle and what its tasks share here; `assignment`, the pure kernel (the
// assignment, the balancing rule, the size bound); `builder` (the settings, checked, and the
// start); `member` (what every member runs: following the assignment, standing for its jobs);
// `coordinator` (what the member leading the membership runs: keeping the assignment balanced).
mod assignment;
mod builder;
mod coordinator;
mod member;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::Stream;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, instrument, warn};

pub use assignment::Assignment;
pub use builder::LeaderPoolBuilder;

use crate::acl::NodeAcl;
use crate::error::{Error, Result};
use crate::fencing::{Leadership, TermEnd};
use crate::leader::latch::LeaderLatch;
use crate::session::{Change, Session, classify, flag_set, log_state, until_done};
use crate::state::{ConnectionState, ErrorPolicy};
use assignment::{MAX_MEMBER_ID_LEN, assignment_budget, assignment_worst_case};

/// The child of the pool root under which every replica holds its membership latch.
const MEMBERS: &str = "members";
/// The child of the pool root that holds the coordinator's assignment (JSON).
const ASSIGNMENT: &str = "assignment";
/// The child of the pool root under which each job has its election path.
const JOBS: &str = "jobs";

/// The election path of `job` in the pool under `root`: `<root>/jobs/<job>`.
fn job_path(root: &str, job: &str) -> String {
    format!("{root}/{JOBS}/{job}")
}

/// What a [`LeaderPool`] reports through [`LeaderPool::events`], in order per job.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum PoolEvent {
    /// This replica began a term for `job`.
    Leader {
        /// The job.
        job: String,
        /// The term: its own token and cancellation.
        term: Leadership,
    },
    /// This replica's term for `job` ended (released to its new assignee, or lost).
    NotLeader {
        /// The job.
        job: String,
        /// The term that ended ([`Leadership::ended_at`] says when it stopped being valid).
        term: Leadership,
        /// Why it ended ([`TermEnd::Closed`] for a release).
        reason: TermEnd,
    },
    /// This replica read a new assignment.
    Assignment(Assignment),
    /// The session's connection state changed.
    State(ConnectionState),
}

/// What the handle, the member's task and the coordinator's task share.
struct Shared {
    session: Session,
    root: String,
    id: String,
    jobs: Vec<String>,
    policy: ErrorPolicy,
    /// The ACL of every node the pool creates ([`LeaderPoolBuilder::acl`]).
    acl: NodeAcl,
    stop: CancellationToken,
    terms: BTreeMap<String, watch::Sender<Option<Leadership>>>,
    assignment_tx: watch::Sender<Option<Assignment>>,
    coordinator_tx: watch::Sender<bool>,
    events_tx: broadcast::Sender<PoolEvent>,
    done_tx: watch::Sender<bool>,
    failure: std::sync::OnceLock<Error>,
}

impl Shared {
    /// The server refuses something the pool needs for good: the pool stops (releasing every
    /// job), and says why.
    fn fail(&self, err: Error) {
        error!(error = %err, "the server refuses a request the pool needs; it stops (fix the cause and start a new one)");
        let _ = self.failure.set(err);
        self.stop.cancel();
    }
}

/// Sharded leadership: many singleton jobs spread evenly over the replicas of a service.
///
/// Each replica is a member of the pool; a coordinator (the leader of the membership latch)
/// assigns every job to one member so that nobody leads more than `ceil(jobs / members)`, and
/// each member stands (with a normal [`LeaderLatch`]) only for its jobs. Each job's term is a
/// normal [`Leadership`] with its own token, deadline and cancellation. See the
/// [spec](crate::specs::leader_pool) for the protocol, the balancing rule and the faults.
///
/// # Examples
/// ```no_run
/// # async fn demo(session: zookeeper_recipes::Session) -> zookeeper_recipes::Result<()> {
/// use futures::StreamExt;
/// use zookeeper_recipes::{LeaderPool, PoolEvent};
///
/// let pool = LeaderPool::builder(&session, "/pools/statements")
///     .id("replica-1")
///     .jobs(["billing", "mail", "reports"])
///     .start()
///     .await?;
/// let mut events = Box::pin(pool.events());
/// while let Some(event) = events.next().await {
///     if let PoolEvent::Leader { job, term } = event {
///         tokio::spawn(async move {
///             while term.is_valid() {
///                 // ... one step of `job`, writes fenced with term.token() ...
/// #               break;
///             }
///             let _ = job;
///         });
///     }
/// }
/// # Ok(()) }
/// ```
///
/// # Curator
/// No Curator recipe does this; it is built from `LeaderLatch`es (one for membership and
/// coordination, one per job), so every job path is an ordinary latch path that Curator's
/// `getParticipants()` can read.
pub struct LeaderPool {
    shared: Arc<Shared>,
    members: Arc<LeaderLatch>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for LeaderPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderPool")
            .field("root", &self.shared.root)
            .field("id", &self.shared.id)
            .field("leading", &self.leading())
            .finish()
    }
}

impl Drop for LeaderPool {
    fn drop(&mut self) {
        // The follower closes the job latches; the membership latch goes with `members`.
        self.shared.stop.cancel();
    }
}

impl LeaderPool {
    /// The longest id a pool member may have, in bytes as the assignment's JSON spells it (a `"` or
    /// a `\` takes two bytes there; other characters take their UTF-8 length).
    ///
    /// The assignment names an owner for every job, so this bounds its size (see
    /// [`LeaderPool::assignment_worst_case`]). 128 holds the default id (`<host name>-<pid>-<8 hex digits>`:
    /// at most 64 + 1 + 7 + 1 + 8 = 81 bytes on Linux) and a Kubernetes pod's host name (at most
    /// 63); a latch alone accepts ids up to [`path::MAX_ID_LEN`](crate::path::MAX_ID_LEN).
    pub const MAX_MEMBER_ID_LEN: usize = MAX_MEMBER_ID_LEN;

    /// The most the assignment of a pool may take at worst, in bytes of JSON: half of the servers'
    /// `jute.maxbuffer` (`jute_max_buffer`, 1 MiB - 1 by default, so 524,287 bytes).
    ///
    /// The coordinator writes the whole assignment in one request, and a server closes the
    /// connection of a client whose request exceeds `jute.maxbuffer`. Half of it goes to the jobs
    /// (checked by [`LeaderPoolBuilder::start`] with [`LeaderPool::assignment_worst_case`]); the other half
    /// holds the members list (each member adds its id and 3 bytes: about 4,000 more members of the
    /// longest id) and the fenced multi around the data (paths and headers, about 100 bytes).
    pub fn assignment_budget(jute_max_buffer: usize) -> usize {
        assignment_budget(jute_max_buffer)
    }

    /// The size in bytes of the largest assignment `jobs` can have with one member: every job owned
    /// by a member whose id takes [`LeaderPool::MAX_MEMBER_ID_LEN`] bytes, i.e.
    /// `26 + L + Σ (json(job) + L + 4) - 1` where `L` is [`LeaderPool::MAX_MEMBER_ID_LEN`] and `json(job)`
    /// the job's name as a JSON string, quotes included (its length + 2 for a plain name). With
    /// plain names of `n` bytes that is `153 + J × (n + 134)`: at the default limit
    /// ([`LeaderPool::assignment_budget`] of 1 MiB - 1), 3,691 jobs of 8 bytes, 3,157 of 32, 2,647 of 64.
    pub fn assignment_worst_case(jobs: &[String]) -> usize {
        assignment_worst_case(jobs)
    }

    /// A builder for a pool under `root` (absolute, e.g. `/pools/statements`).
    pub fn builder(session: &Session, root: impl Into<String>) -> LeaderPoolBuilder {
        LeaderPoolBuilder::new(session, root.into())
    }

    /// This replica's id.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// The pool root.
    pub fn root(&self) -> &str {
        &self.shared.root
    }

    /// The jobs this replica was configured with.
    pub fn jobs(&self) -> &[String] {
        &self.shared.jobs
    }

    /// The election path of `job`: `<root>/jobs/<job>`.
    pub fn job_path(&self, job: &str) -> String {
        job_path(&self.shared.root, job)
    }

    /// Whether this replica leads `job` right now (a valid term).
    pub fn is_leading(&self, job: &str) -> bool {
        self.leadership(job).is_some_and(|t| t.is_valid())
    }

    /// The current term of `job`, if this replica leads it.
    pub fn leadership(&self, job: &str) -> Option<Leadership> {
        self.shared
            .terms
            .get(job)
            .and_then(|tx| tx.borrow().clone())
            .filter(|t| !t.has_ended())
    }

    /// A watch of this replica's term for `job` (`Some` while leading); `None` for an unknown
    /// job.
    pub fn watch_job(&self, job: &str) -> Option<watch::Receiver<Option<Leadership>>> {
        self.shared.terms.get(job).map(watch::Sender::subscribe)
    }

    /// The jobs this replica leads right now, in name order.
    pub fn leading(&self) -> Vec<String> {
        self.shared
            .jobs
            .iter()
            .filter(|job| self.is_leading(job))
            .cloned()
            .collect()
    }

    /// A watch of the assignment this replica last read (`None` before the first).
    pub fn assignment(&self) -> watch::Receiver<Option<Assignment>> {
        self.shared.assignment_tx.subscribe()
    }

    /// Why the pool stopped by itself ([`Error::Refused`]: the server refuses a read or write the
    /// pool needs, such as a job path this session may not use), if it did. It has released
    /// every job and [`events`](Self::events) has ended.
    pub fn failure(&self) -> Option<Error> {
        self.shared.failure.get().cloned()
    }

    /// Whether this replica is the pool's coordinator (leads the membership latch).
    pub fn is_coordinator(&self) -> bool {
        *self.shared.coordinator_tx.borrow()
    }

    /// Every job's leader and not-leader events, new assignments and connection states, from
    /// now on. The stream ends when the pool is closed, after the last job's `NotLeader`. A
    /// listener more than 1024 events behind skips the ones it missed.
    pub fn events(&self) -> impl Stream<Item = PoolEvent> + Send + 'static {
        until_done(
            self.shared.events_tx.subscribe(),
            flag_set(self.shared.done_tx.subscribe()),
        )
    }

    /// Leaves the pool gracefully: gives up membership first (the coordinator reassigns this
    /// replica's jobs and their new owners queue for them), waits until the assignment no longer
    /// names this replica (at most the session's connection timeout), then releases every job
    /// (each successor is elected at once) and stops.
    ///
    /// # Errors
    /// None today.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped part way, the pool stops all the same (it leaves
    /// the membership, releases every job and deletes every node in the background); only the
    /// wait for the hand-over is cut short.
    #[instrument(skip_all, fields(root = %self.shared.root, id = %self.shared.id))]
    pub async fn close(&self) -> Result<()> {
        // Dropped (with the future, or below once the jobs have new owners): the pool stops.
        let stop = self.shared.stop.clone().drop_guard();
        self.members.close().await?;
        let id = self.shared.id.clone();
        let mut assignment = self.shared.assignment_tx.subscribe();
        // Someone else is there to take the jobs over: wait for the assignment that says who.
        let others = assignment
            .borrow()
            .as_ref()
            .is_some_and(|a| a.members.iter().any(|m| *m != id));
        let handed_over =
            assignment.wait_for(|a| a.as_ref().is_none_or(|a| a.jobs_of(&id).is_empty()));
        if others
            && tokio::time::timeout(self.shared.session.connection_timeout(), handed_over)
                .await
                .is_err()
        {
            debug!("no assignment without this replica in time; releasing anyway");
        }
        drop(stop);
        let tasks = self
            .tasks
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default();
        // Each job's latch deletes its node as it closes; while disconnected that waits at most
        // until the session is known to be gone, so this is bounded by about the session
        // timeout. Say so when it takes longer than that and the connection timeout together.
        let session = &self.shared.session;
        let bound = session.connection_timeout()
            + session
                .negotiated_timeout()
                .unwrap_or(crate::session::DEFAULT_SESSION_TIMEOUT);
        for task in tasks {
            if tokio::time::timeout(bound, task).await.is_err() {
                warn!(
                    ?bound,
                    "a pool task did not stop in time; it goes on in the background"
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_types_are_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<LeaderPool>();
        assert_send_sync::<LeaderPoolBuilder>();
        assert_send_sync::<PoolEvent>();
        assert_send_sync::<Assignment>();
    }
}
