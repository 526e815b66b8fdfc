//! [`ScheduledJob`]: a job that runs once per schedule slot on exactly one replica, across
//! failovers, fenced.
//!
//! A thin policy over a [`LeaderSelector`]: the replicas stand in one election under
//! `<job>/leader`; the leader works through the slots that come due and records each one under
//! `<job>/slots/<slot key>` *before* it starts and *after* it ends, in multis that first check
//! the leader's own election node ([`Leadership::fenced`]). A deposed or frozen leader can
//! therefore neither claim, finish nor skip a slot, whatever it believes; a new leader reads,
//! for every slot, whether it was done, started and cut off, or never started. The
//! ensemble's clock (the `mtime` its own writes come back with) decides when a slot is due, not
//! the leader's wall clock; the slot records and a compare-and-set on the job's cursor decide
//! how many times it runs. A replica whose wall clock is off the ensemble's by more than a
//! tolerance takes up no slot and leaves the election for a while.
//!
//! The protocol, each policy and the failure table are in `recipes/scheduled-job.md`, included
//! below.
//!
//! # Examples
//! ```no_run
//! use zookeeper_recipes::job::{ScheduledJob, SlotRun};
//!
//! # async fn demo(session: zookeeper_recipes::Session) -> zookeeper_recipes::Result<()> {
//! let job = ScheduledJob::builder(&session, "/cron/statement-job")
//!     .cron("0 2 * * *", "Europe/Oslo")
//!     .id("replica-1")
//!     .start(|run: SlotRun| async move {
//!         // One business date per slot; every write carries the token and the slot key:
//!         //   UPDATE statement_run SET ... WHERE slot = :slot AND fencing_token < :token
//!         println!("{} attempt {} token {}", run.slot(), run.attempt(), run.token());
//!         Ok::<(), std::io::Error>(())
//!     })
//!     .await?;
//! # job.close().await?;
//! # Ok(()) }
//! ```

#![doc = include_str!("../../recipes/scheduled-job.md")]

// The layout: the handle and its election here; `policy` (the policy types), `event` (what the
// job reports and hands its work), `builder`, `admin` (the operators' handle and the reads it
// shares with the leader); `plan`, the pure decisions of a term, with its tables in
// `plan/tests.rs`; `term` (the leader's loop and its fenced writes) and `term/slot` (one slot's
// run); `record` (the nodes' JSON), `schedule` and `ensemble` (pure time).
mod admin;
mod builder;
mod ensemble;
mod event;
mod plan;
mod policy;
mod record;
mod schedule;
mod term;

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tracing::{debug, info, warn};

pub use admin::{JobAdmin, JobStatus};
pub use builder::{PreparedJob, ScheduledJobBuilder};
pub use event::{JobEvent, SlotJob, SlotRun};
pub use policy::{CatchUp, DEFAULT_MAX_PENDING_TRIGGERS, OnCrash, Overlap, Resolution};
pub use record::{
    AttemptOutcome, AttemptRecord, MAX_ATTEMPT_ERROR, MAX_ATTEMPT_RECORDS, SlotRange, SlotRecord,
    SlotState, TriggerFor,
};
pub use schedule::{Schedule, SkewedClock, SystemClock, WallClock};

use crate::acl::NodeAcl;
use crate::clock::BootTime;
use crate::error::{Error, Result};
use crate::fencing::Leadership;
use crate::leader::{LeaderSelector, SelectorState};
use crate::session::Session;
use policy::Policies;

/// The most slot records a job may keep ([`ScheduledJobBuilder::history_limit`]).
pub const MAX_HISTORY: usize = 10_000;

/// The default [`ScheduledJobBuilder::clock_tolerance`].
pub const DEFAULT_CLOCK_TOLERANCE: Duration = Duration::from_secs(10);

/// How long a replica whose clock was found off the ensemble's stays out of the election after
/// its first such term; each further one in a row doubles it, up to [`SKEW_HOLD_MAX`].
const SKEW_HOLD_FIRST: Duration = Duration::from_secs(5);

/// The longest a skewed replica stays out of the election before it measures its clock again.
const SKEW_HOLD_MAX: Duration = Duration::from_secs(300);

/// Queues the replica in the job's election again after each term: at once, or, after a term
/// that found this replica's clock off the ensemble's, once its hold-back has passed, so that a
/// skewed replica alone does not lead and give up in a loop. Ends when the selector is closed
/// or gone.
async fn requeue_between_terms(
    inner: Arc<Inner>,
    selector: Weak<LeaderSelector>,
    mut state: watch::Receiver<SelectorState>,
) {
    let clock = inner.session.clock().clone();
    loop {
        let idle = match state
            .wait_for(|s| {
                matches!(
                    s,
                    SelectorState::Idle | SelectorState::Closed | SelectorState::Failed
                )
            })
            .await
        {
            Ok(s) => *s == SelectorState::Idle,
            Err(_) => false,
        };
        if !idle {
            return;
        }
        if let Some(until) = inner.take_hold_back() {
            info!(path = %inner.path, id = %inner.id, hold_ms = (until - clock.now()).as_millis(), "out of the job's election until the hold-back after a clock skew has passed");
            tokio::select! {
                () = clock.sleep_until(until) => {}
                left = state.wait_for(|s| *s != SelectorState::Idle) => {
                    // Closed (or dropped) meanwhile: done.
                    let gone = left.map_or(true, |s| {
                        matches!(*s, SelectorState::Closed | SelectorState::Failed)
                    });
                    if gone {
                        return;
                    }
                    continue;
                }
            }
        }
        let Some(selector) = selector.upgrade() else {
            return;
        };
        selector.requeue();
        drop(selector);
        if state.wait_for(|s| *s != SelectorState::Idle).await.is_err() {
            return;
        }
    }
}

#[derive(Debug)]
struct Inner {
    session: Session,
    path: String,
    id: String,
    schedule: Schedule,
    policies: Policies,
    clock: Arc<dyn WallClock>,
    /// How far this replica's wall clock may be from the ensemble's.
    clock_tolerance: Duration,
    /// Terms given up in a row for a clock skew, and until when to stay out of the election.
    skew: Mutex<SkewHold>,
    events: broadcast::Sender<JobEvent>,
    acl: NodeAcl,
    grace: Duration,
    /// How long before its lease deadline a term whose lease is not renewed ends.
    stop_ahead: Duration,
    /// Whether slots may start, and whether one runs ([`ScheduledJob::drain`]).
    activity: watch::Sender<Activity>,
}

/// How long a replica stays out of the election after its `terms`th skewed term in a row:
/// [`SKEW_HOLD_FIRST`], doubling, at most [`SKEW_HOLD_MAX`].
fn skew_hold_back(terms: u32) -> Duration {
    let doubling = 2u32.saturating_pow(terms.saturating_sub(1).min(16));
    SKEW_HOLD_FIRST.saturating_mul(doubling).min(SKEW_HOLD_MAX)
}

/// A skewed replica's hold-back: how many terms in a row found its clock off the ensemble's,
/// and until when it stays out of the election.
#[derive(Debug, Default)]
struct SkewHold {
    terms: u32,
    until: Option<BootTime>,
}

impl Inner {
    /// A term found the clock off the ensemble's at `at`: the hold-back before the replica
    /// stands again (5 s, doubling with each such term in a row, at most 5 min).
    fn hold_back_after_skew(&self, at: BootTime) -> Duration {
        let Ok(mut hold) = self.skew.lock() else {
            return SKEW_HOLD_FIRST;
        };
        hold.terms = hold.terms.saturating_add(1);
        let back = skew_hold_back(hold.terms);
        hold.until = Some(at + back);
        back
    }

    /// A term found the clock within the tolerance: the next skew starts the hold-back afresh.
    fn clock_agrees(&self) {
        if let Ok(mut hold) = self.skew.lock() {
            hold.terms = 0;
        }
    }

    /// The end of the hold-back the last term asked for, if any (taken: asked once).
    fn take_hold_back(&self) -> Option<BootTime> {
        self.skew.lock().ok().and_then(|mut hold| hold.until.take())
    }
}

/// Whether this replica may start slots, and whether it runs one now.
#[derive(Debug, Default, Clone, Copy)]
struct Activity {
    /// [`ScheduledJob::drain`] was called: no slot starts any more.
    draining: bool,
    /// A slot is being claimed, run or recorded.
    running: bool,
}

/// Marks a slot running from its claim to the record of its end (also when the loop is dropped
/// in between), so that [`ScheduledJob::drain`] can wait for it.
struct RunningSlot<'a>(&'a Inner);

impl<'a> RunningSlot<'a> {
    /// `None` once the job drains: no slot starts then. Checking and marking are one step, so
    /// a drain either sees this slot running (and waits for it) or this slot sees the drain.
    fn enter(inner: &'a Inner) -> Option<Self> {
        let mut entered = false;
        inner.activity.send_if_modified(|a| {
            entered = !a.draining;
            a.running |= entered;
            entered
        });
        entered.then_some(RunningSlot(inner))
    }
}

impl Drop for RunningSlot<'_> {
    fn drop(&mut self) {
        crate::metrics::job_idle(&self.0.path, &self.0.id);
        self.0.activity.send_modify(|a| a.running = false);
    }
}

impl std::fmt::Debug for dyn WallClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WallClock")
    }
}

/// A job that runs once per schedule slot on exactly one replica, across failovers, fenced.
///
/// See the [module documentation](self) and `recipes/scheduled-job.md`.
#[derive(Debug)]
pub struct ScheduledJob {
    inner: Arc<Inner>,
    selector: Arc<LeaderSelector>,
    /// Queues the replica again after each term (aborted with the job).
    _requeue: AbortOnDrop<()>,
}

impl ScheduledJob {
    /// A builder for the job at `path` (absolute; `/cron/<name>` by convention).
    pub fn builder(session: &Session, path: impl Into<String>) -> ScheduledJobBuilder {
        ScheduledJobBuilder::new(session, path.into())
    }

    /// What happens to the slots this replica handles, from now on.
    pub fn events(&self) -> broadcast::Receiver<JobEvent> {
        self.inner.events.subscribe()
    }

    /// A watch of this replica's current term (`None` while it does not lead).
    pub fn leadership(&self) -> watch::Receiver<Option<Leadership>> {
        self.selector.leadership()
    }

    /// Whether this replica leads the job now.
    pub fn has_leadership(&self) -> bool {
        self.selector.has_leadership()
    }

    /// The participant id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The job's path.
    pub fn path(&self) -> &str {
        &self.inner.path
    }

    /// The operator's handle on this job (history, status, trigger, pause, resolve).
    pub fn admin(&self) -> JobAdmin {
        JobAdmin::for_job(&self.inner.session, &self.inner.path, &self.inner.acl)
    }

    /// Leaves the job after the running slot, if any, has finished: a graceful shutdown, for a
    /// deploy or a scale-down, that does not turn the slot in progress into a retry.
    ///
    /// From the moment `drain` is called (before the returned future is first polled), this
    /// replica starts no slot, nor a trigger. A slot that runs goes on for at most `timeout`; its
    /// end is recorded as usual (`succeeded` or `failed`), and then the replica leaves the
    /// election as [`close`](Self::close) does, so that another replica takes the job over at
    /// once. If the run outlasts `timeout`, the close goes on as `close` does: the run's term
    /// ends, it gets the grace period, and the slot is cut off and retried by the next leader.
    /// The job learns of a drain only through its term's end: give it a `timeout` that its
    /// longest run fits in, or make it stop when [`Leadership::cancelled`] fires.
    ///
    /// # Errors
    /// As [`close`](Self::close).
    ///
    /// # Cancel safety
    /// If the future is dropped, the replica still starts no slot but keeps its place in the
    /// election (and its term, if it leads): call [`close`](Self::close) then.
    pub fn drain(&self, timeout: Duration) -> impl Future<Output = Result<()>> + Send + '_ {
        self.inner.activity.send_modify(|a| a.draining = true);
        let mut activity = self.inner.activity.subscribe();
        info!(path = %self.inner.path, id = %self.inner.id, "draining the scheduled job: no slot starts any more");
        async move {
            match tokio::time::timeout(timeout, activity.wait_for(|a| !a.running)).await {
                Ok(_) => debug!(path = %self.inner.path, "drained: no slot runs"),
                Err(_) => warn!(
                    path = %self.inner.path,
                    timeout = ?timeout,
                    "the running slot did not finish within the drain's timeout; closing anyway (it is cut off)"
                ),
            }
            self.selector.close().await
        }
    }

    /// Leaves the job's election. A running slot's term ends: the run gets the grace period,
    /// then it is aborted, and the slot stays `running` for the next leader (a cut-off slot,
    /// handled by the [`OnCrash`] policy). Waits for all of that. [`drain`](Self::drain)
    /// lets the slot finish first.
    ///
    /// # Errors
    /// None today.
    ///
    /// # Cancel safety
    /// Cancel safe: the close is started before the first await and finishes in the background.
    pub async fn close(&self) -> Result<()> {
        self.selector.close().await
    }

    /// Why the job's election stopped for good, if the server refused it (as
    /// [`LeaderSelector::failure`]).
    pub fn failure(&self) -> Option<Error> {
        self.selector.failure()
    }

    /// Whether the job stopped standing for good: closed, or its election refused for good.
    pub fn is_stopped(&self) -> bool {
        matches!(
            self.selector.state(),
            SelectorState::Closed | SelectorState::Failed
        )
    }
}

/// A task handle that aborts its task when dropped.
#[derive(Debug)]
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skewed_replica_holds_back_longer_each_term_in_a_row_up_to_five_minutes() {
        let holds: Vec<u64> = (1..=9).map(|n| skew_hold_back(n).as_secs()).collect();
        assert_eq!(holds, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(skew_hold_back(u32::MAX), SKEW_HOLD_MAX);
    }

    #[test]
    fn job_types_are_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<ScheduledJob>();
        assert_send_sync::<ScheduledJobBuilder>();
        assert_send_sync::<JobEvent>();
    }
}
