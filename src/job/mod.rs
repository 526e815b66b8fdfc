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

mod ensemble;
mod plan;
mod policy;
mod record;
mod schedule;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use tokio::sync::{broadcast, watch};
use tracing::{Instrument, debug, error, info, info_span, warn};
use zookeeper_client::CreateMode;

pub use policy::{CatchUp, OnCrash, Overlap, Resolution};
pub use record::{SlotRange, SlotRecord, SlotState};
pub use schedule::{Schedule, SkewedClock, SystemClock, WallClock};

use crate::acl::NodeAcl;
use crate::clock::BootTime;
use crate::contender::{self, Participant};
use crate::error::{Error, Result};
use crate::fencing::{FencedOp, FencedResult, FencingToken, Leadership};
use crate::leader::{BoxError, LeaderSelector, SelectorState};
use crate::path;
use crate::session::Session;
use crate::state::ErrorPolicy;
use ensemble::EnsembleClock;
use plan::{
    Crash, NotRun, NotRunReason, OverlapPlan, PendingReason, Records, Recovery, RunEnd,
    SettleReason, Step, Work,
};
use policy::Policies;
use record::{Control, JobState, UNPLACED};

/// The most slot records a job may keep ([`ScheduledJobBuilder::history_limit`]).
pub const MAX_HISTORY: usize = 10_000;

/// How long the loop sleeps at most before it reads the clock again: tokio's timers run on the
/// monotonic clock, which stands still in a host suspend, so a slot that came due during one is
/// noticed within this after the resume.
const TICK: Duration = Duration::from_secs(1);

/// A wake-up later than asked by more than this, on the boot clock, means the loop was stalled
/// (a frozen process, a starved runtime, a host suspend): the slots found due then are late and
/// go through the catch-up policy.
const STALL: Duration = Duration::from_secs(2);

/// The default [`ScheduledJobBuilder::clock_tolerance`].
pub const DEFAULT_CLOCK_TOLERANCE: Duration = Duration::from_secs(10);

/// A sample of the ensemble's clock older than this is renewed (one compare-and-set of `state`
/// onto itself) before the loop takes up work by it, so that the drift between this host's
/// boot clock and the ensemble's wall clock stays in the milliseconds.
const SAMPLE_MAX_AGE: Duration = Duration::from_secs(60);

/// How soon the next slot must be due for a stale sample to be renewed while the loop waits.
const SAMPLE_LEAD: Duration = Duration::from_secs(2);

/// How long a replica whose clock was found off the ensemble's stays out of the election after
/// its first such term; each further one in a row doubles it, up to [`SKEW_HOLD_MAX`].
const SKEW_HOLD_FIRST: Duration = Duration::from_secs(5);

/// The longest a skewed replica stays out of the election before it measures its clock again.
const SKEW_HOLD_MAX: Duration = Duration::from_secs(300);

/// Something that happened to a slot, as [`ScheduledJob::events`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobEvent {
    /// This replica claimed the slot and started the job.
    SlotStarted {
        /// The slot key.
        slot: String,
        /// The term's fencing token.
        token: FencingToken,
        /// 1 for the first run, more for a slot cut off before.
        attempt: u32,
        /// The slot was cut off before (or released by an operator) and is run again.
        recovering: bool,
    },
    /// A slot reached an end that is recorded: `succeeded` or `failed` after a run; `failed`
    /// or `parked` for a cut-off slot a new leader found.
    SlotFinished {
        /// The slot key.
        slot: String,
        /// `Succeeded`, `Failed` or `Parked`.
        outcome: SlotState,
        /// The job's exit code, when it reported one ([`SlotRun::set_exit_code`]).
        exit_code: Option<i32>,
        /// Why it failed or was parked without running (`cut_off`, `max_attempts`), or the
        /// job's error.
        reason: Option<String>,
    },
    /// A slot was recorded skipped.
    SlotSkipped {
        /// The slot key.
        slot: String,
        /// `overlap` or `paused`.
        reason: String,
    },
    /// A range of slots was recorded missed.
    SlotMissed {
        /// The first slot's key.
        from: String,
        /// The last slot's key.
        to: String,
        /// How many.
        count: u64,
        /// `catch_up`, `paused` or `overlap`.
        reason: String,
    },
    /// The job ended after its term had ended, and the record of its end was refused (the
    /// fenced write found the term over): the slot stays `running` for the next leader.
    SlotAbandoned {
        /// The slot key.
        slot: String,
        /// The token of the term that ran it.
        token: FencingToken,
        /// What refused the write.
        reason: String,
    },
    /// The leader saw the job paused or resumed by an operator ([`JobAdmin::pause`]): from
    /// now on it starts no slot but operator triggers, or starts them again.
    PauseChanged {
        /// Whether the job is paused now.
        paused: bool,
    },
    /// This leader's schedule differs from the one recorded with the job.
    ScheduleChanged {
        /// The recorded schedule ([`Schedule::spec`]).
        from: String,
        /// This replica's.
        to: String,
    },
    /// This replica's wall clock is off the ensemble's by more than the
    /// [`clock_tolerance`](ScheduledJobBuilder::clock_tolerance): it took up no slot, gave up
    /// its term, and stays out of the election for a while before it measures again.
    ClockSkew {
        /// This replica's wall clock minus the ensemble's (positive: ahead), in milliseconds.
        offset_ms: i64,
        /// The tolerance, in milliseconds.
        tolerance_ms: u64,
    },
    /// The job's cursor was found beyond the ensemble's time plus the clock tolerance (left by
    /// a leader of an earlier version whose clock ran ahead, or by an operator) and was brought
    /// back to the newest slot at or before the ensemble's now, so that the next slot runs on
    /// time. Slots recorded beyond it are not run again.
    CursorRewound {
        /// The slot key the cursor stood at.
        from: String,
        /// The slot key it was brought back to.
        to: String,
    },
}

/// One run of the job: the slot, the term, the attempt.
#[derive(Debug, Clone)]
pub struct SlotRun {
    slot: String,
    nominal_ms: i64,
    attempt: u32,
    recovering: bool,
    triggered: bool,
    term: Leadership,
    exit_code: Arc<Mutex<Option<i32>>>,
}

impl SlotRun {
    /// The slot key: the nominal instant in UTC (`2026-12-03T02:00:00Z`), or `trigger-N`.
    pub fn slot(&self) -> &str {
        &self.slot
    }

    /// The slot's nominal instant (for a trigger, when it was taken up).
    pub fn nominal(&self) -> SystemTime {
        let ms = u64::try_from(self.nominal_ms).unwrap_or(0);
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    /// The nominal instant in milliseconds since the Unix epoch.
    pub fn nominal_ms(&self) -> i64 {
        self.nominal_ms
    }

    /// 1 for the slot's first run; more when it was cut off before.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Whether this run takes up a slot that an earlier run started and did not finish (or an
    /// operator released): the job should check what that run left behind.
    pub fn is_recovering(&self) -> bool {
        self.recovering
    }

    /// Whether an operator asked for this run ([`JobAdmin::trigger`]) rather than the schedule.
    pub fn is_triggered(&self) -> bool {
        self.triggered
    }

    /// The leadership term this run belongs to: `cancelled()`, `is_valid()`, `fenced(..)`.
    pub fn leadership(&self) -> &Leadership {
        &self.term
    }

    /// The term's fencing token: carry it with every write, keyed by [`slot`](Self::slot).
    pub fn token(&self) -> FencingToken {
        self.term.token()
    }

    /// Reports an exit code to record with the slot (`zkr cron run` reports its command's).
    pub fn set_exit_code(&self, code: i32) {
        if let Ok(mut slot) = self.exit_code.lock() {
            *slot = Some(code);
        }
    }
}

/// The work a [`ScheduledJob`] runs for each slot.
///
/// Implemented for every `Fn(SlotRun) -> impl Future<Output = Result<(), E>>` closure. `Ok`
/// records the slot succeeded, `Err` failed (with the error's text). A run whose term ends should
/// stop promptly ([`Leadership::cancelled`]): its task is aborted at the end of its grace or at
/// the term's lease ([`Leadership::stop_by`]), whichever comes first.
pub trait SlotJob: Send + Sync + 'static {
    /// Runs one slot.
    fn run(
        &self,
        run: SlotRun,
    ) -> impl Future<Output = std::result::Result<(), BoxError>> + Send + 'static;
}

impl<F, Fut, E> SlotJob for F
where
    F: Fn(SlotRun) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
    E: Into<BoxError> + 'static,
{
    fn run(
        &self,
        run: SlotRun,
    ) -> impl Future<Output = std::result::Result<(), BoxError>> + Send + 'static {
        let fut = self(run);
        async move { fut.await.map_err(Into::into) }
    }
}

/// Builds a [`ScheduledJob`]; [`build`](Self::build) checks every setting.
#[must_use]
pub struct ScheduledJobBuilder {
    session: Session,
    path: String,
    id: Option<String>,
    schedule: Option<Result<Schedule>>,
    policies: Policies,
    grace: Option<Duration>,
    stop_ahead: Option<Duration>,
    error_policy: ErrorPolicy,
    acl: NodeAcl,
    clock: Arc<dyn WallClock>,
    clock_tolerance: Duration,
}

impl std::fmt::Debug for ScheduledJobBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScheduledJobBuilder")
            .field("path", &self.path)
            .field("id", &self.id)
            .field("policies", &self.policies)
            .finish_non_exhaustive()
    }
}

impl ScheduledJobBuilder {
    /// Slots at the instants of a cron expression in an IANA time zone
    /// ([`Schedule::cron`]).
    pub fn cron(mut self, expression: &str, zone: &str) -> Self {
        self.schedule = Some(Schedule::cron(expression, zone));
        self
    }

    /// Slots every `period`, on the epoch's grid ([`Schedule::every`]).
    pub fn every(mut self, period: Duration) -> Self {
        self.schedule = Some(Schedule::every(period));
        self
    }

    /// Any schedule.
    pub fn schedule(mut self, schedule: Schedule) -> Self {
        self.schedule = Some(Ok(schedule));
        self
    }

    /// The participant id in the job's election, recorded as each slot's runner. Default:
    /// `<hostname>-<pid>-<8 hex>`.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Catch-up after an outage (default [`CatchUp::Latest`]).
    pub fn catch_up(mut self, catch_up: CatchUp) -> Self {
        self.policies.catch_up = catch_up;
        self
    }

    /// How late the newest missed slot may be and still run under [`CatchUp::Latest`]
    /// (default: one period of the schedule, at most 24 h).
    pub fn catch_up_window(mut self, window: Duration) -> Self {
        self.policies.window = Some(window);
        self
    }

    /// A slot that comes due while the previous one runs (default [`Overlap::Skip`]).
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.policies.overlap = overlap;
        self
    }

    /// A slot cut off by a crash or a lost term (default [`OnCrash::Retry`]).
    pub fn on_crash(mut self, on_crash: OnCrash) -> Self {
        self.policies.on_crash = on_crash;
        self
    }

    /// How many times a slot is started at most under [`OnCrash::Retry`] (default 3; at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.policies.max_attempts = attempts;
        self
    }

    /// How many slot records are kept (default 100, at most [`MAX_HISTORY`]); older settled
    /// ones are deleted.
    pub fn history_limit(mut self, records: usize) -> Self {
        self.policies.history_limit = records;
        self
    }

    /// How old a settled slot record may get before it is deleted (default 30 days).
    pub fn history_max_age(mut self, age: Duration) -> Self {
        self.policies.history_max_age = age;
        self
    }

    /// Whether a leader that finds another schedule recorded replays the slots of its own
    /// schedule since the job's cursor (by the catch-up policy). Default `false`: the new
    /// schedule starts from now.
    pub fn replay_on_schedule_change(mut self, replay: bool) -> Self {
        self.policies.replay_on_change = replay;
        self
    }

    /// How long a run may go on after its term ended before its task is aborted (default 5 s,
    /// or less when the session's timeout leaves less).
    ///
    /// As for a [`LeaderSelector`]'s grace: the run is aborted at the
    /// end of the grace or at its term's lease ([`Leadership::stop_by`]), whichever comes
    /// first, and a term whose lease is not renewed ends the grace before the lease's deadline,
    /// so that a run that stops when asked gets its grace. The grace must fit in the lease the
    /// session timeout leaves ([`Error::GraceTooLong`] at [`build`](Self::build)).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// How long before its lease deadline a term whose lease is not renewed ends (default: the
    /// [`grace`](Self::grace)); it must fit in the lease the session timeout leaves. As
    /// [`LeaderSelectorBuilder::stop_ahead`](crate::LeaderSelectorBuilder::stop_ahead): for a
    /// run that waits for work it stops itself (`zkr cron run` waits for its command), ask for
    /// the work's grace here and give the run a longer grace.
    pub fn stop_ahead(mut self, ahead: Duration) -> Self {
        self.stop_ahead = Some(ahead);
        self
    }

    /// Which connection states end a term (default [`ErrorPolicy::Standard`]).
    pub fn error_policy(mut self, policy: ErrorPolicy) -> Self {
        self.error_policy = policy;
        self
    }

    /// The ACL of the nodes the job creates (default [`NodeAcl::anyone_all`]).
    pub fn acl(mut self, acl: impl Into<NodeAcl>) -> Self {
        self.acl = acl.into();
        self
    }

    /// This replica's own wall clock (default [`SystemClock`]); tests step it. It decides
    /// nothing about the schedule: the ensemble's clock does (the `mtime` of the job's own
    /// writes). It is read only to measure how far it is from the ensemble's, against the
    /// [`clock_tolerance`](Self::clock_tolerance).
    pub fn wall_clock(mut self, clock: Arc<dyn WallClock>) -> Self {
        self.clock = clock;
        self
    }

    /// How far this replica's wall clock may be from the ensemble's before it takes up no slot
    /// (default [`DEFAULT_CLOCK_TOLERANCE`], 10 s; not zero).
    ///
    /// The ensemble's clock decides when slots are due whatever this replica's clock says, but
    /// the job itself reads this host's clock (a business date taken from "now", timestamps it
    /// writes, certificates it checks, a `zkr cron` command's `date`): a replica whose clock is
    /// off by more than this gives up its term ([`JobEvent::ClockSkew`], an `error!`, the
    /// metrics `zookeeper_recipes_job_clock_offset_seconds` and
    /// `zookeeper_recipes_job_clock_skew_terms_total`) so that an honest replica leads, and
    /// stays out of the election for 5 s, doubling with each further skewed term in a row up
    /// to 5 min, before it measures again. The default, 10 s, is far above what an
    /// NTP-disciplined host is off by (milliseconds) and than a measurement's error (half a
    /// round trip), so an honest replica is never refused, and well below the offsets that
    /// break jobs (a VM restored from a template or snapshot, a bad time source: minutes to
    /// days).
    pub fn clock_tolerance(mut self, tolerance: Duration) -> Self {
        self.clock_tolerance = tolerance;
        self
    }

    /// Checks every setting and returns the job ready to start.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a relative or malformed path; [`Error::InvalidSchedule`] for
    /// a missing or bad schedule (expression, zone, interval); [`Error::InvalidArgument`] for
    /// an id that breaks [`validate_id`](crate::path::validate_id)'s rules, zero max attempts,
    /// a history limit of 0 or above [`MAX_HISTORY`], or a zero clock tolerance;
    /// [`Error::GraceTooLong`] for a grace that does not fit in the session's lease.
    pub fn build(self) -> Result<PreparedJob> {
        path::validate_path(&self.path)?;
        let schedule = match self.schedule {
            Some(s) => s?,
            None => {
                return Err(Error::InvalidSchedule {
                    what: "schedule",
                    reason: "none given: call .cron(expression, zone) or .every(period)".into(),
                });
            }
        };
        let id = self.id.unwrap_or_else(contender::default_participant_id);
        path::validate_id(&id)?;
        if self.policies.max_attempts == 0 {
            return Err(Error::InvalidArgument {
                what: "max attempts",
                reason: "must be at least 1".into(),
            });
        }
        if self.policies.history_limit == 0 || self.policies.history_limit > MAX_HISTORY {
            return Err(Error::InvalidArgument {
                what: "history limit",
                reason: format!(
                    "{} is outside 1..={MAX_HISTORY}",
                    self.policies.history_limit
                ),
            });
        }
        if self.clock_tolerance.is_zero() {
            return Err(Error::InvalidArgument {
                what: "clock tolerance",
                reason: "must be more than zero: no two clocks agree to the nanosecond".into(),
            });
        }
        self.acl.check_usable(self.session.has_credentials())?;
        let limit = self.session.grace_limit();
        let grace = self.grace.unwrap_or_else(|| self.session.default_grace());
        let stop_ahead = self.stop_ahead.unwrap_or(grace);
        if (self.grace.is_some() || self.stop_ahead.is_some()) && stop_ahead > limit {
            return Err(Error::GraceTooLong {
                grace: stop_ahead,
                limit,
                timeout: self.session.lease_timeout(),
            });
        }
        Ok(PreparedJob {
            inner: Inner {
                session: self.session,
                path: self.path,
                id,
                schedule,
                policies: self.policies,
                clock: self.clock,
                clock_tolerance: self.clock_tolerance,
                skew: Mutex::new(SkewHold::default()),
                events: broadcast::channel(1024).0,
                acl: self.acl,
                grace,
                stop_ahead,
                activity: watch::channel(Activity::default()).0,
            },
            error_policy: self.error_policy,
        })
    }

    /// [`build`](Self::build), then [`PreparedJob::start`].
    ///
    /// # Errors
    /// Those of both.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is sent before the returned job exists.
    pub async fn start<J: SlotJob>(self, job: J) -> Result<ScheduledJob> {
        self.build()?.start(job).await
    }
}

/// A scheduled job whose settings were checked ([`ScheduledJobBuilder::build`]).
#[derive(Debug)]
pub struct PreparedJob {
    inner: Inner,
    error_policy: ErrorPolicy,
}

impl PreparedJob {
    /// Stands for the job in the background (its election under `<path>/leader`); returns at once.
    ///
    /// # Errors
    /// [`Error::Closed`] when the session is closed, [`Error::NoRuntime`].
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is sent before the returned job exists.
    pub async fn start<J: SlotJob>(self, job: J) -> Result<ScheduledJob> {
        let inner = Arc::new(self.inner);
        let job = Arc::new(job);
        let for_terms = Arc::clone(&inner);
        let selector = LeaderSelector::builder(&inner.session, path::join(&inner.path, "leader"))
            .id(inner.id.clone())
            // Requeued by `requeue_between_terms`: at once, or after a hold-back when the term
            // found this replica's clock off the ensemble's.
            .auto_requeue(false)
            // The job's own grace decides when a run is aborted, and how early a term whose
            // lease is not renewed ends; the selector waits beyond it for the loop to record
            // the end (the lease still bounds it).
            .stop_ahead(inner.stop_ahead)
            .grace(inner.grace + Duration::from_secs(5))
            // The loop stops the run by the lease itself, then records what became of it.
            .closure_stops_its_work()
            .error_policy(self.error_policy)
            .acl(inner.acl.clone())
            .start(move |term: Leadership| {
                let inner = Arc::clone(&for_terms);
                let job = Arc::clone(&job);
                let span = info_span!("scheduled_job", path = %inner.path, token = %term.token());
                async move { TermRun::new(&inner, &term).run(&job).await }.instrument(span)
            })
            .await?;
        let selector = Arc::new(selector);
        let requeue = AbortOnDrop(tokio::spawn(
            requeue_between_terms(
                Arc::clone(&inner),
                Arc::downgrade(&selector),
                selector.watch_state(),
            )
            .instrument(info_span!("scheduled_job", path = %inner.path)),
        ));
        Ok(ScheduledJob {
            inner,
            selector,
            _requeue: requeue,
        })
    }
}

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
        ScheduledJobBuilder {
            session: session.clone(),
            path: path.into(),
            id: None,
            schedule: None,
            policies: Policies::default(),
            grace: None,
            stop_ahead: None,
            error_policy: ErrorPolicy::default(),
            acl: NodeAcl::default(),
            clock: Arc::new(SystemClock),
            clock_tolerance: DEFAULT_CLOCK_TOLERANCE,
        }
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
        JobAdmin {
            session: self.inner.session.clone(),
            path: self.inner.path.clone(),
            acl: self.inner.acl.clone(),
        }
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

/// The job's state as [`JobAdmin::status`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobStatus {
    /// The job's path.
    pub path: String,
    /// The schedule recorded by the last leader ([`Schedule::spec`]), if any leader ran yet.
    pub schedule: Option<String>,
    /// Whether the job is paused.
    pub paused: bool,
    /// The participant id of the leader, if one leads.
    pub leader: Option<String>,
    /// The newest slot the leader has taken up (run, skipped or missed).
    pub cursor: Option<String>,
    /// Triggers asked for and not yet taken up.
    pub triggers_pending: u64,
    /// Slots recorded `running`, `pending` or `parked`.
    pub open: Vec<SlotRecord>,
    /// The newest settled slot.
    pub last: Option<SlotRecord>,
}

/// An operator's handle on a job: read its history and status, trigger, pause, resume, resolve
/// parked slots. Needs no stake in the election; `zkr cron history|status|trigger|pause|resume|
/// resolve` use it.
#[derive(Debug, Clone)]
pub struct JobAdmin {
    session: Session,
    path: String,
    acl: NodeAcl,
}

impl JobAdmin {
    /// A handle on the job at `path` (absolute).
    ///
    /// # Errors
    /// [`Error::InvalidPath`].
    pub fn new(session: &Session, path: impl Into<String>) -> Result<JobAdmin> {
        let path = path.into();
        path::validate_path(&path)?;
        Ok(JobAdmin {
            session: session.clone(),
            path,
            acl: NodeAcl::default(),
        })
    }

    /// The ACL of the nodes this handle creates when no replica has yet (the job's path, its
    /// missing ancestors, and its `control`): give it the job's own ([`ScheduledJobBuilder::acl`]), so that a pause or
    /// trigger sent before the first leader does not leave `control` open to anyone. Default
    /// [`NodeAcl::default`] (open, as ZooKeeper's and Curator's). [`ScheduledJob::admin`]
    /// uses the job's.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a creator ACL on a session without credentials.
    pub fn with_acl(mut self, acl: impl Into<NodeAcl>) -> Result<JobAdmin> {
        let acl = acl.into();
        acl.check_usable(self.session.has_credentials())?;
        self.acl = acl;
        Ok(self)
    }

    /// The recorded slots, newest first (by nominal instant), at most `limit`.
    ///
    /// # Errors
    /// Connection and ZooKeeper errors; [`Error::InvalidArgument`] when a record under the
    /// job's `slots` node was not written by this crate.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn history(&self, limit: usize) -> Result<Vec<SlotRecord>> {
        let client = self.session.client()?;
        let mut records: Vec<SlotRecord> = read_records(&client, &self.path)
            .await?
            .into_values()
            .map(|(r, _)| r)
            .collect();
        records.sort_by(|a, b| (b.nominal_ms, &b.slot).cmp(&(a.nominal_ms, &a.slot)));
        records.truncate(limit);
        Ok(records)
    }

    /// The job's schedule, pause state, leader, cursor and open slots.
    ///
    /// # Errors
    /// As [`history`](Self::history).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn status(&self) -> Result<JobStatus> {
        let client = self.session.client()?;
        let state_path = path::join(&self.path, "state");
        let state = match client.get_data(&state_path).await {
            Ok((data, _)) => Some(JobState::from_bytes(&state_path, &data)?),
            Err(zookeeper_client::Error::NoNode) => None,
            Err(e) => return Err(e.into()),
        };
        let control = read_control(&client, &self.path).await?.0;
        let leader = match contender::participants_on(
            &self.session,
            &path::join(&self.path, "leader"),
        )
        .await
        {
            Ok(participants) => Some(contender::leader_of(participants)),
            Err(Error::Zookeeper(zookeeper_client::Error::NoNode)) => None,
            Err(e) => return Err(e),
        }
        .filter(|p: &Participant| p.is_leader)
        .map(|p| p.id);
        let mut records: Vec<SlotRecord> = read_records(&client, &self.path)
            .await?
            .into_values()
            .map(|(r, _)| r)
            .collect();
        records.sort_by(|a, b| (b.nominal_ms, &b.slot).cmp(&(a.nominal_ms, &a.slot)));
        let last = records.iter().find(|r| r.state.is_final()).cloned();
        let open = records
            .into_iter()
            .filter(|r| !r.state.is_final())
            .collect();
        Ok(JobStatus {
            path: self.path.clone(),
            schedule: state.as_ref().map(|s| s.spec.clone()),
            paused: control.paused,
            leader,
            cursor: state
                .as_ref()
                .filter(|s| s.cursor_ms != UNPLACED)
                .map(|s| Schedule::key(s.cursor_ms)),
            triggers_pending: control
                .triggers
                .saturating_sub(state.as_ref().map_or(0, |s| s.triggers_done)),
            open,
            last,
        })
    }

    /// Asks the leader to run the job now, as an extra slot `trigger-N` (also while paused: an
    /// operator asked). Returns N.
    ///
    /// # Errors
    /// Connection and ZooKeeper errors.
    ///
    /// # Cancel safety
    /// The request is sent when the future is first polled; dropped after that, the trigger may
    /// or may not have been recorded.
    pub async fn trigger(&self) -> Result<u64> {
        let mut n = 0;
        self.update_control(|c| {
            c.triggers += 1;
            n = c.triggers;
        })
        .await?;
        Ok(n)
    }

    /// Pauses the job: until [`resume`](Self::resume), the leader starts no slot but
    /// triggers. It records due slots as skipped (`paused`), also those it had taken up but not
    /// started; slots that have a record already (a cut-off slot to retry, a buffered slot, a
    /// re-run) wait for the resume. A slot already running goes on.
    ///
    /// # Errors
    /// Connection and ZooKeeper errors.
    ///
    /// # Cancel safety
    /// As [`trigger`](Self::trigger).
    pub async fn pause(&self) -> Result<()> {
        self.update_control(|c| c.paused = true).await
    }

    /// Resumes a paused job. Slots that came due while paused stay skipped; the ones that waited
    /// run.
    ///
    /// # Errors
    /// Connection and ZooKeeper errors.
    ///
    /// # Cancel safety
    /// As [`trigger`](Self::trigger).
    pub async fn resume(&self) -> Result<()> {
        self.update_control(|c| c.paused = false).await
    }

    /// Resolves a parked slot: [`Resolution::Done`] records it succeeded (`resolved`),
    /// [`Resolution::Rerun`] hands it back to the leader, which runs it with `attempt + 1`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the slot has no record or is not parked; connection and
    /// ZooKeeper errors.
    ///
    /// # Cancel safety
    /// As [`trigger`](Self::trigger).
    pub async fn resolve(&self, slot: &str, resolution: Resolution) -> Result<()> {
        let client = self.session.client()?;
        let slot_path = path::join(&path::join(&self.path, "slots"), slot);
        let (data, stat) = match client.get_data(&slot_path).await {
            Ok(found) => found,
            Err(zookeeper_client::Error::NoNode) => {
                return Err(Error::InvalidArgument {
                    what: "slot",
                    reason: format!("{slot:?} has no record under {}", self.path),
                });
            }
            Err(e) => return Err(e.into()),
        };
        let mut record = SlotRecord::from_bytes(&slot_path, &data)?;
        if record.state != SlotState::Parked {
            return Err(Error::InvalidArgument {
                what: "slot",
                reason: format!("{slot:?} is {}, not parked", record.state.as_str()),
            });
        }
        match resolution {
            Resolution::Done => {
                record.state = SlotState::Succeeded;
                record.reason = Some(SettleReason::Resolved.as_str().to_owned());
                record.ended_ms = Some(schedule::now_ms());
            }
            Resolution::Rerun => {
                record.state = SlotState::Pending;
                record.reason = Some(PendingReason::Rerun.as_str().to_owned());
            }
        }
        // Compare-and-set: a leader that changed the record meanwhile wins.
        client
            .set_data(&slot_path, &record.to_bytes(), Some(stat.version))
            .await?;
        // Wake the leader, which reads pending slots when the controls change.
        self.update_control(|_| {}).await
    }

    /// Reads, changes and writes the control node (compare-and-set, retried on a race).
    async fn update_control(&self, mut change: impl FnMut(&mut Control)) -> Result<()> {
        let client = self.session.client()?;
        let control_path = path::join(&self.path, "control");
        for _ in 0..100 {
            let (mut control, version) = read_control(&client, &self.path).await?;
            change(&mut control);
            let result = match version {
                Some(v) => client
                    .set_data(&control_path, &control.to_bytes(), Some(v))
                    .await
                    .map(|_| ()),
                None => {
                    let mode = CreateMode::Persistent.with_acls(self.acl.as_acls());
                    match client.mkdir(&self.path, &mode).await {
                        Ok(()) | Err(zookeeper_client::Error::NodeExists) => {}
                        Err(e) => return Err(e.into()),
                    }
                    client
                        .create(&control_path, &control.to_bytes(), &mode)
                        .await
                        .map(|_| ())
                }
            };
            match result {
                Ok(()) => return Ok(()),
                Err(zookeeper_client::Error::BadVersion | zookeeper_client::Error::NodeExists) => {
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::InvalidArgument {
            what: "control",
            reason: "lost 100 compare-and-set races in a row".into(),
        })
    }
}

/// The control node and its version (`None`: it does not exist yet).
async fn read_control(
    client: &zookeeper_client::Client,
    job: &str,
) -> Result<(Control, Option<i32>)> {
    let control_path = path::join(job, "control");
    match client.get_data(&control_path).await {
        Ok((data, stat)) => Ok((
            Control::from_bytes(&control_path, &data)?,
            Some(stat.version),
        )),
        Err(zookeeper_client::Error::NoNode) => Ok((Control::default(), None)),
        Err(e) => Err(e.into()),
    }
}

/// Every slot record with its version, by key. Records that are not this crate's are skipped
/// with a warning.
async fn read_records(client: &zookeeper_client::Client, job: &str) -> Result<Records> {
    let slots = path::join(job, "slots");
    let children = match client.list_children(&slots).await {
        Ok(c) => c,
        Err(zookeeper_client::Error::NoNode) => return Ok(BTreeMap::new()),
        Err(e) => return Err(e.into()),
    };
    let reads: Vec<_> = children
        .iter()
        .map(|name| client.get_data(&path::join(&slots, name)))
        .collect();
    let mut records = BTreeMap::new();
    for (name, read) in children
        .into_iter()
        .zip(futures::future::join_all(reads).await)
    {
        let node = path::join(&slots, &name);
        match read {
            Ok((data, stat)) => match SlotRecord::from_bytes(&node, &data) {
                Ok(record) => {
                    records.insert(name, (record, stat.version));
                }
                Err(e) => warn!(node = %node, error = %e, "ignoring a slot record"),
            },
            Err(zookeeper_client::Error::NoNode) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(records)
}

// ---------------------------------------------------------------------------------------------
// The leader's loop

/// Why a term's loop stops.
enum Stop {
    /// The term is over (or the selector is closing): return and let the selector requeue.
    TermOver,
    /// This replica's wall clock is off the ensemble's: the term is given up (the requeue
    /// waits out the hold-back).
    ClockSkew,
    /// Something went wrong that a reload does not fix.
    Failed(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        match e {
            Error::NotLeader { .. } | Error::Closed | Error::SessionExpired => Stop::TermOver,
            other => Stop::Failed(other),
        }
    }
}

/// One leadership term of the job.
struct TermRun<'a> {
    inner: &'a Inner,
    term: &'a Leadership,
    state: JobState,
    state_version: i32,
    control: Control,
    /// Notified when the control node's watch fires.
    control_changed: Arc<tokio::sync::Notify>,
    /// The watch on the control node: one task, replaced at each reload and aborted with the
    /// term, so that watch tasks do not pile up across reloads and terms.
    control_watch: Option<AbortOnDrop<()>>,
    records: Records,
    queue: VecDeque<Work>,
    buffered: bool,
    /// The ensemble's clock, learned from this term's writes: it decides what is due.
    ensemble: EnsembleClock,
    /// While a slot runs: the ensemble's time and the boot time at its start. A slot counts as
    /// having come due during the run only up to the start plus the boot time since: slots
    /// beyond that came due because the estimate moved on a new sample, not by waiting, and
    /// are taken up as on time after the run.
    run_started: Option<(i64, BootTime)>,
}

impl<'a> TermRun<'a> {
    fn new(inner: &'a Inner, term: &'a Leadership) -> Self {
        TermRun {
            inner,
            term,
            state: JobState {
                spec: String::new(),
                spec_hash: String::new(),
                cursor_ms: 0,
                triggers_done: 0,
                tzdb: None,
            },
            state_version: -1,
            control: Control::default(),
            control_changed: Arc::new(tokio::sync::Notify::new()),
            control_watch: None,
            records: BTreeMap::new(),
            queue: VecDeque::new(),
            buffered: false,
            ensemble: EnsembleClock::default(),
            run_started: None,
        }
    }

    fn slots_path(&self) -> String {
        path::join(&self.inner.path, "slots")
    }

    fn slot_path(&self, key: &str) -> String {
        path::join(&self.slots_path(), key)
    }

    fn state_path(&self) -> String {
        path::join(&self.inner.path, "state")
    }

    /// The ensemble's time now, by the lower bound of the estimate ([`EnsembleClock::now_ms`]).
    /// Every term samples it before it reads the time (its first write, in `load`); before
    /// that, nothing is due.
    fn now(&self) -> i64 {
        self.ensemble
            .now_ms(self.term.clock().now())
            .unwrap_or(i64::MIN)
    }

    fn tolerance_ms(&self) -> i64 {
        i64::try_from(self.inner.clock_tolerance.as_millis()).unwrap_or(i64::MAX)
    }

    /// A fenced write that also samples the ensemble's clock from the `mtime` it reports.
    async fn fenced(&mut self, ops: Vec<FencedOp>) -> Result<Vec<FencedResult>> {
        let sent = self.term.clock().now();
        let results = self.term.fenced(ops).await?;
        let answered = self.term.clock().now();
        if let Some(mtime) = results.iter().find_map(FencedResult::mtime_ms) {
            self.ensemble.sample(mtime, sent, answered);
        }
        Ok(results)
    }

    /// A compare-and-set of `state` onto itself: a write that always reports an `mtime` (a
    /// multi's create may not: ZOOKEEPER-4026), for a fresh sample of the ensemble's clock.
    async fn sample_clock(&mut self) -> Result<()> {
        let same = self.state.clone();
        self.write_state(same, Vec::new()).await.map(|_| ())
    }

    /// Whether this replica's wall clock is within the tolerance of the ensemble's; when it is
    /// not, the term is given up ([`Stop::ClockSkew`]). Measured only on a fresh sample: an old
    /// one has drifted.
    fn check_clock(&mut self) -> std::result::Result<(), Stop> {
        let at = self.term.clock().now();
        if self.ensemble.age(at).is_none_or(|age| age > SAMPLE_MAX_AGE) {
            return Ok(());
        }
        let Some(offset) = self.ensemble.offset(self.inner.clock.now_ms(), at) else {
            return Ok(());
        };
        crate::metrics::job_clock_offset(&self.inner.path, &self.inner.id, offset.offset_ms);
        if !offset.beyond(self.inner.clock_tolerance) {
            self.inner.clock_agrees();
            return Ok(());
        }
        let hold = self.inner.hold_back_after_skew(at);
        let tolerance_ms = u64::try_from(self.tolerance_ms()).unwrap_or(u64::MAX);
        error!(
            path = %self.inner.path,
            id = %self.inner.id,
            token = %self.term.token(),
            offset_ms = offset.offset_ms,
            tolerance_ms,
            hold_back_ms = u64::try_from(hold.as_millis()).unwrap_or(u64::MAX),
            "this replica's wall clock is off the ensemble's by more than the tolerance: it takes up no slot, gives up its term and stays out of the election for the hold-back (fix the host's time source)"
        );
        self.emit(JobEvent::ClockSkew {
            offset_ms: offset.offset_ms,
            tolerance_ms,
        });
        Err(Stop::ClockSkew)
    }

    /// Whether the loop has something to take up now or within [`SAMPLE_LEAD`]: then a stale
    /// sample of the ensemble's clock is renewed first.
    fn work_is_near(&self) -> bool {
        let lead = i64::try_from(SAMPLE_LEAD.as_millis()).unwrap_or(0);
        !self.queue.is_empty()
            || self.control.triggers > self.state.triggers_done
            || self
                .inner
                .schedule
                .next_after(self.state.cursor_ms)
                .is_some_and(|next| next <= self.now().saturating_add(lead))
    }

    fn emit(&self, event: JobEvent) {
        self.record_metrics(&event);
        let _ = self.inner.events.send(event);
    }

    /// The job's metrics for `event` ([`crate::metrics`]): this module maps its events onto
    /// them.
    fn record_metrics(&self, event: &JobEvent) {
        let (path, id) = (&self.inner.path, &self.inner.id);
        let run_time = || self.run_started.map(|(_, at)| self.term.clock().now() - at);
        match event {
            JobEvent::SlotStarted { .. } => crate::metrics::job_slot_started(path, id),
            JobEvent::SlotFinished { outcome, .. } => crate::metrics::job_slot_ended(
                path,
                id,
                outcome.as_str(),
                run_time(),
                (*outcome == SlotState::Succeeded).then(|| self.now()),
            ),
            JobEvent::SlotAbandoned { .. } => {
                crate::metrics::job_slot_ended(path, id, "abandoned", run_time(), None);
            }
            JobEvent::SlotSkipped { reason, .. } => {
                crate::metrics::job_slots_not_run(path, id, reason, 1);
            }
            JobEvent::SlotMissed { count, reason, .. } => {
                crate::metrics::job_slots_not_run(path, id, reason, *count);
            }
            JobEvent::ClockSkew { .. } => crate::metrics::job_clock_skew_term(path, id),
            _ => {}
        }
    }

    async fn run<J: SlotJob>(mut self, job: &Arc<J>) -> std::result::Result<(), BoxError> {
        match self.lead(job).await {
            Ok(()) | Err(Stop::TermOver) | Err(Stop::ClockSkew) => Ok(()),
            Err(Stop::Failed(e)) => {
                warn!(error = %e, "scheduled job stops leading after an error");
                Err(Box::new(e))
            }
        }
    }

    async fn lead<J: SlotJob>(&mut self, job: &Arc<J>) -> std::result::Result<(), Stop> {
        self.load_with_retries().await?;
        self.check_clock()?;
        self.recover().await?;
        info!(
            token = %self.term.token(),
            cursor = %Schedule::key(self.state.cursor_ms),
            queued = self.queue.len(),
            "leading the scheduled job"
        );
        // The first look at the schedule in a term finds the slots that came due while no
        // replica ran the job: they are late.
        let mut late = true;
        let mut failures = 0u32;
        loop {
            match self.step(job, &mut late).await {
                Ok(()) => failures = 0,
                Err(Stop::Failed(e)) if needs_reload(&e) => {
                    // A write whose reply was lost, a read that failed, or a compare-and-set
                    // that lost to an operator: read everything again and decide afresh. A
                    // claim that did land is found `running` and handled as cut off (its run
                    // never started).
                    failures += 1;
                    if failures > 3 {
                        warn!(error = %e, failures, "the job's loop keeps failing; reloading");
                    } else {
                        debug!(error = %e, failures, "the job's loop reloads its state");
                    }
                    tokio::select! {
                        _ = self.term.cancelled() => return Err(Stop::TermOver),
                        _ = tokio::time::sleep(crate::session::retry_backoff(failures, TICK)) => {}
                    }
                    self.queue.clear();
                    self.buffered = false;
                    self.load_with_retries().await?;
                    self.check_clock()?;
                    self.recover().await?;
                    late = true;
                }
                Err(stop) => return Err(stop),
            }
        }
    }

    /// One pass of the loop: run a queued slot, take up a trigger or due slots, or wait.
    async fn step<J: SlotJob>(
        &mut self,
        job: &Arc<J>,
        late: &mut bool,
    ) -> std::result::Result<(), Stop> {
        if !self.term.is_valid() {
            return Err(Stop::TermOver);
        }
        if self.inner.activity.borrow().draining {
            return self.idle_until_term_ends().await;
        }
        // A change of the controls (a pause) is taken up before the next slot starts, not
        // only when the queue has run dry.
        if self.control_changed.notified().now_or_never().is_some() {
            debug!("the job's controls changed");
            self.reload_control(true).await?;
        }
        // Time is the ensemble's, from a recent sample, and this replica's clock agrees with
        // it, before anything is taken up.
        let stale = self
            .ensemble
            .age(self.term.clock().now())
            .is_none_or(|age| age > SAMPLE_MAX_AGE);
        if stale && self.work_is_near() {
            debug!("renewing the sample of the ensemble's clock before taking up work");
            self.sample_clock().await?;
        }
        self.check_clock()?;
        loop {
            let now = self.now();
            let step = plan::step(
                &self.inner.schedule,
                &self.state,
                &self.control,
                &self.queue,
                &self.records,
                now,
            );
            match step {
                Step::RunQueued(i) => {
                    if let Some(work) = self.queue.remove(i) {
                        return self.run_slot(job, work).await;
                    }
                    return Ok(());
                }
                Step::RecordQueuedPaused { up_to } => {
                    // Paused: queued slots nobody has recorded yet (due slots taken up before
                    // the pause) are recorded `paused`, as slots that come due while paused
                    // are; owed ones (a retry, a buffered slot, a re-run) stay queued until the
                    // job resumes. Then the pass goes on.
                    let records = &self.records;
                    self.queue.retain(|w| !plan::fresh(w, records));
                    let after = self.state.cursor_ms;
                    self.record_not_run(NotRun {
                        after,
                        up_to,
                        reason: NotRunReason::Paused,
                    })
                    .await?;
                }
                Step::QueueTrigger(work) => {
                    self.queue.push_back(work);
                    return Ok(());
                }
                Step::TakeUpDue { latest } => {
                    self.take_up_due(latest, now, *late).await?;
                    *late = false;
                    return Ok(());
                }
                Step::Wait => break,
            }
        }
        let wait = self.until_next_slot();
        let before = self.term.clock().now();
        let control_changed = Arc::clone(&self.control_changed);
        tokio::select! {
            biased;
            _ = self.term.cancelled() => return Err(Stop::TermOver),
            _ = control_changed.notified() => {
                debug!("the job's controls changed");
                self.reload_control(true).await?;
            }
            _ = tokio::time::sleep(wait) => {}
        }
        // On the boot clock: a host suspend during the wait is a stall too.
        *late = self.term.clock().now() - before > wait + STALL;
        Ok(())
    }

    /// Reads the job's nodes, retrying transient failures while the term is valid.
    async fn load_with_retries(&mut self) -> std::result::Result<(), Stop> {
        let mut failures = 0u32;
        loop {
            match self.load().await {
                Ok(()) => return Ok(()),
                Err(e @ (Error::ConnectionLoss | Error::Timeout(_))) => {
                    failures += 1;
                    debug!(error = %e, failures, "reading the job's state failed; retrying");
                    tokio::select! {
                        _ = self.term.cancelled() => return Err(Stop::TermOver),
                        _ = tokio::time::sleep(crate::session::retry_backoff(failures, TICK)) => {}
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Reads the job's nodes. The term's first write is a compare-and-set of `state` onto
    /// itself (after creating it, for a new job), which samples the ensemble's clock before
    /// anything reads the time. Then, unless this replica's clock is off the ensemble's (the
    /// caller gives the term up), it aligns `state` with the ensemble's time and this replica's
    /// schedule.
    async fn load(&mut self) -> Result<()> {
        let client = self.inner.session.client()?;
        let state_path = self.state_path();
        match client.get_data(&state_path).await {
            Ok((data, stat)) => {
                self.state = JobState::from_bytes(&state_path, &data)?;
                self.state_version = stat.version;
            }
            Err(zookeeper_client::Error::NoNode) => {
                // A new job: its cursor is placed on the ensemble's clock once it is sampled.
                let state = JobState {
                    spec: self.inner.schedule.spec(),
                    spec_hash: self.inner.schedule.spec_hash(),
                    cursor_ms: UNPLACED,
                    triggers_done: 0,
                    tzdb: None,
                };
                self.fenced(vec![FencedOp::create(&state_path, state.to_bytes())])
                    .await?;
                self.state = state;
                self.state_version = 0;
            }
            Err(e) => return Err(e.into()),
        }
        self.sample_clock().await?;
        // The records' parent, created fenced like every other write of the job.
        match self
            .fenced(vec![FencedOp::create(self.slots_path(), Vec::new())])
            .await
        {
            Ok(_) | Err(Error::Zookeeper(zookeeper_client::Error::NodeExists)) => {}
            Err(e) => return Err(e),
        }
        let at = self.term.clock().now();
        let skewed = self
            .ensemble
            .offset(self.inner.clock.now_ms(), at)
            .is_some_and(|o| o.beyond(self.inner.clock_tolerance));
        if !skewed {
            self.align_state().await?;
        }
        self.reload_control(false).await?;
        self.records = read_records(&client, &self.inner.path).await?;
        Ok(())
    }

    /// Brings `state` in line with the ensemble's time and this replica's schedule: places a
    /// new job's cursor at the newest slot at or before the ensemble's now (a new job owes
    /// nothing from before it existed), brings back a cursor found beyond the ensemble's time
    /// plus the tolerance, records a schedule change and the tzdata that decides this
    /// schedule's slots.
    async fn align_state(&mut self) -> Result<()> {
        let now = self.now();
        let alignment = plan::align(
            &self.state,
            &self.inner.schedule,
            now,
            self.tolerance_ms(),
            self.inner.policies.replay_on_change,
        );
        let next = alignment.next;
        if let Some(cursor) = alignment.placed {
            debug!(cursor = %Schedule::key(cursor), "a new job's cursor placed on the ensemble's clock");
        }
        if let Some((from, to)) = alignment.rewound {
            warn!(
                cursor = %Schedule::key(from),
                ensemble_now = %Schedule::key(now),
                to = %Schedule::key(to),
                ahead_ms = from - now,
                "the job's cursor is beyond the ensemble's time (left by a leader whose clock ran ahead, or by an operator): bringing it back so that the next slot runs on time"
            );
            self.emit(JobEvent::CursorRewound {
                from: Schedule::key(from),
                to: Schedule::key(to),
            });
        }
        if let Some((from, to)) = alignment.schedule_changed {
            warn!(from = %from, to = %to, "the job's schedule changed");
            self.emit(JobEvent::ScheduleChanged { from, to });
        }
        if let Some((recorded, ours)) = alignment.tzdb_differs {
            warn!(
                recorded,
                ours,
                schedule = %next.spec,
                "the last leader of this job computed its slots with another IANA tzdata release: where the two releases disagree about the zone, one local time has two slot keys and may run twice (or not at all); build every replica with the same chrono-tz"
            );
        }
        if next != self.state {
            self.write_state(next, Vec::new()).await?;
        }
        Ok(())
    }

    /// Reads the controls and sets a watch on them; creates the node if nobody has. With
    /// `changed` (the watch fired), also reads the slot records again: an operator's `resolve`
    /// changes a record, then rewrites the controls to say so.
    async fn reload_control(&mut self, changed: bool) -> Result<()> {
        let client = self.inner.session.client()?;
        let control_path = path::join(&self.inner.path, "control");
        let before = self.control.clone();
        loop {
            match client.get_and_watch_data(&control_path).await {
                Ok((data, _, watcher)) => {
                    self.control = Control::from_bytes(&control_path, &data)?;
                    // The watch fires once (a change, or the session's end); a reload sets
                    // the next one, and its task replaces (aborts) the one before, which may
                    // still be waiting (a reload after a failure, not after a change).
                    let changed = Arc::clone(&self.control_changed);
                    self.control_watch = Some(AbortOnDrop(tokio::spawn(async move {
                        let _ = watcher.changed().await;
                        changed.notify_one();
                    })));
                    break;
                }
                Err(zookeeper_client::Error::NoNode) => {
                    let mode = CreateMode::Persistent.with_acls(self.inner.acl.as_acls());
                    match client
                        .create(&control_path, &Control::default().to_bytes(), &mode)
                        .await
                    {
                        Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        if before.paused != self.control.paused {
            info!(paused = self.control.paused, "the job's pause changed");
            self.emit(JobEvent::PauseChanged {
                paused: self.control.paused,
            });
        }
        if changed {
            self.records = read_records(&client, &self.inner.path).await?;
            self.queue_pending();
        }
        Ok(())
    }

    /// Queues the slots recorded `pending` that are not queued yet ([`plan::pending`]).
    fn queue_pending(&mut self) {
        let pending = plan::pending(&self.records, &self.queue);
        self.queue.extend(pending);
    }

    /// Handles the slots an earlier term left open: `running` ones were cut off, `pending`
    /// ones wait to be run.
    async fn recover(&mut self) -> std::result::Result<(), Stop> {
        let ours = self.term.token().get();
        let cut_off = match plan::recovery(&self.records, ours, &self.inner.policies) {
            Recovery::GiveUpTerm { slot } => {
                // Found after a reload: this term claimed the slot but lost the reply of the
                // claim or of the run's end. Running it again here would restart it with the
                // same token; the term is given up instead, and the next one (with a higher
                // token) takes the slot up as cut off.
                warn!(slot = %slot, token = ours, "a slot of this term is recorded running but does not run here; leaving the term so that the next one takes it up with a higher token");
                return Err(Stop::TermOver);
            }
            Recovery::CutOff(cut_off) => cut_off,
        };
        for (work, decision) in cut_off {
            if let Some((record, _)) = self.records.get(&work.key) {
                warn!(
                    slot = %work.key,
                    attempt = record.attempt,
                    runner = record.runner.as_deref().unwrap_or(""),
                    old_token = record.token.unwrap_or(0),
                    "found a slot cut off in an earlier term"
                );
            }
            match decision {
                Crash::Retry { .. } => self.queue.push_back(work),
                Crash::Settle { state, reason } => self.settle(&work.key, state, reason).await?,
            }
        }
        self.queue_pending();
        Ok(())
    }

    /// Records a cut-off slot failed or parked without running it.
    async fn settle(
        &mut self,
        key: &str,
        state: SlotState,
        reason: SettleReason,
    ) -> std::result::Result<(), Stop> {
        let reason = reason.as_str();
        let Some((record, version)) = self.records.get(key).cloned() else {
            return Ok(());
        };
        let mut record = record;
        record.state = state;
        record.reason = Some(reason.to_owned());
        record.ended_ms = Some(self.now());
        let results = self
            .fenced(vec![FencedOp::SetData {
                path: self.slot_path(key),
                data: record.to_bytes(),
                version: Some(version),
            }])
            .await?;
        self.remember(key, record, new_version(&results, 0));
        info!(slot = %key, outcome = state.as_str(), reason, "slot settled");
        self.emit(JobEvent::SlotFinished {
            slot: key.to_owned(),
            outcome: state,
            exit_code: None,
            reason: Some(reason.to_owned()),
        });
        Ok(())
    }

    fn remember(&mut self, key: &str, record: SlotRecord, version: Option<i32>) {
        self.records
            .insert(key.to_owned(), (record, version.unwrap_or(0)));
    }

    /// Writes the job's state (compare-and-set on its version) with `ops`, fenced. The cursor
    /// never moves past the ensemble's time plus the clock tolerance: such a write is refused
    /// before it is sent (it would be a bug of this loop).
    async fn write_state(
        &mut self,
        next: JobState,
        mut ops: Vec<FencedOp>,
    ) -> Result<Vec<FencedResult>> {
        let limit = self.now().saturating_add(self.tolerance_ms());
        if next.cursor_ms > self.state.cursor_ms && next.cursor_ms > limit {
            return Err(Error::InvalidArgument {
                what: "scheduled job cursor",
                reason: format!(
                    "refusing to move the cursor to {}, beyond the ensemble's time {} plus the clock tolerance",
                    Schedule::key(next.cursor_ms),
                    Schedule::key(self.now())
                ),
            });
        }
        let index = ops.len();
        ops.push(FencedOp::SetData {
            path: self.state_path(),
            data: next.to_bytes(),
            version: Some(self.state_version),
        });
        let results = self.fenced(ops).await?;
        if let Some(v) = new_version(&results, index) {
            self.state_version = v;
        }
        self.state = next;
        Ok(results)
    }

    /// The slots in `(cursor, latest]` came due: run, skip or fold them by the policies
    /// ([`plan::due`]).
    async fn take_up_due(
        &mut self,
        latest: i64,
        now: i64,
        late: bool,
    ) -> std::result::Result<(), Stop> {
        let due = plan::due(
            &self.inner.schedule,
            &self.inner.policies,
            self.state.cursor_ms,
            latest,
            now,
            late,
            self.control.paused,
        );
        if let Some(not_run) = due.not_run {
            self.record_not_run(not_run).await?;
        }
        self.queue.extend(due.run);
        Ok(())
    }

    /// Records the slots in `(after, up_to]` as not run ([`plan::not_run`]): one `skipped`
    /// record for a single slot skipped on purpose (`overlap`, `paused`), else one `missed`
    /// record for the range. Moves the cursor to `up_to`.
    async fn record_not_run(&mut self, not_run: NotRun) -> std::result::Result<(), Stop> {
        let Some(plan) = plan::not_run(&self.inner.schedule, not_run, self.now()) else {
            return Ok(());
        };
        let reason = not_run.reason.as_str();
        let key = plan.record.slot.clone();
        let mut next = self.state.clone();
        next.cursor_ms = next.cursor_ms.max(plan.last);
        let ops = if self.records.contains_key(&key) {
            // Recorded already (a replayed schedule reached an old slot): move on.
            Vec::new()
        } else {
            vec![FencedOp::create(
                self.slot_path(&key),
                plan.record.to_bytes(),
            )]
        };
        let created = !ops.is_empty();
        self.write_state(next, ops).await?;
        let skipped = plan.is_skip();
        let count = plan.count;
        if created {
            self.remember(&key, plan.record, Some(0));
        }
        if skipped {
            info!(slot = %key, reason, "slot skipped");
            self.emit(JobEvent::SlotSkipped {
                slot: key,
                reason: reason.to_owned(),
            });
        } else {
            info!(from = %key, to = %Schedule::key(plan.last), count, reason, "slots missed");
            self.emit(JobEvent::SlotMissed {
                from: key,
                to: Schedule::key(plan.last),
                count,
                reason: reason.to_owned(),
            });
        }
        self.prune().await;
        Ok(())
    }

    /// Draining ([`ScheduledJob::drain`]): nothing more to do in this term but wait for the
    /// close to end it.
    async fn idle_until_term_ends(&mut self) -> std::result::Result<(), Stop> {
        debug!("draining: this term starts no more slots");
        self.term.cancelled().await;
        Err(Stop::TermOver)
    }

    /// Claims a slot, runs the job, records the end.
    async fn run_slot<J: SlotJob>(
        &mut self,
        job: &Arc<J>,
        work: Work,
    ) -> std::result::Result<(), Stop> {
        let Some(_running) = RunningSlot::enter(self.inner) else {
            return self.idle_until_term_ends().await;
        };
        let token = self.term.token();
        let key = work.key.clone();
        let existing = self.records.get(&key).cloned();
        if let Some((r, _)) = &existing
            && r.state.is_final()
        {
            // Settled meanwhile (an operator, an earlier pass): nothing to run.
            if let Some(cursor) = plan::cursor_past_settled(&self.state, &work) {
                let mut next = self.state.clone();
                next.cursor_ms = cursor;
                self.write_state(next, Vec::new()).await?;
            }
            return Ok(());
        }
        let record = SlotRecord {
            slot: key.clone(),
            nominal_ms: work.nominal_ms,
            state: SlotState::Running,
            token: Some(token.get()),
            attempt: work.attempt,
            runner: Some(self.inner.id.clone()),
            started_ms: Some(self.now()),
            ended_ms: None,
            exit_code: None,
            reason: None,
            error: None,
            range: None,
        };
        let claim = match &existing {
            Some((_, version)) => FencedOp::SetData {
                path: self.slot_path(&key),
                data: record.to_bytes(),
                version: Some(*version),
            },
            None => FencedOp::create(self.slot_path(&key), record.to_bytes()),
        };
        let next = plan::claim(&self.state, &work);
        let results = self.write_state(next, vec![claim]).await?;
        let version = match &existing {
            Some(_) => new_version(&results, 0),
            None => Some(0),
        };
        self.remember(&key, record.clone(), version);
        if self.buffered && existing.is_some() {
            self.buffered = false;
        }
        // The claim sampled the ensemble's clock afresh: should the estimate that found the
        // slot due have drifted ahead, the run waits for the slot's nominal instant (by the
        // fresh sample), so that no slot starts before it by the ensemble's clock.
        while work.trigger.is_none() && self.now() < work.nominal_ms {
            let early = u64::try_from(work.nominal_ms.saturating_sub(self.now())).unwrap_or(0);
            debug!(slot = %key, early_ms = early, "claimed ahead of the ensemble's clock; waiting for the slot's instant");
            tokio::select! {
                _ = self.term.cancelled() => return Err(Stop::TermOver),
                _ = tokio::time::sleep(Duration::from_millis(early).min(TICK)) => {}
            }
        }
        // Room for the new record within the history limit.
        self.prune().await;
        info!(slot = %key, token = %token, attempt = work.attempt, recovering = work.recovering, "slot started");
        self.emit(JobEvent::SlotStarted {
            slot: key.clone(),
            token,
            attempt: work.attempt,
            recovering: work.recovering,
        });

        let exit_code = Arc::new(Mutex::new(None));
        let run = SlotRun {
            slot: key.clone(),
            nominal_ms: work.nominal_ms,
            attempt: work.attempt,
            recovering: work.recovering,
            triggered: work.trigger.is_some(),
            term: self.term.clone(),
            exit_code: Arc::clone(&exit_code),
        };
        self.run_started = Some((self.now(), self.term.clock().now()));
        let span = info_span!("slot", slot = %key, attempt = work.attempt);
        // Aborted when dropped: if the selector aborts this loop, the run goes with it.
        let mut task = AbortOnDrop(tokio::spawn(job.run(run).instrument(span)));
        let end = loop {
            let control_changed = Arc::clone(&self.control_changed);
            tokio::select! {
                biased;
                joined = &mut task.0 => {
                    break match joined {
                        Ok(result) => RunEnd::Returned(result.map_err(|e| e.to_string())),
                        Err(e) => RunEnd::Returned(Err(format!("the job's task failed: {e}"))),
                    };
                }
                _ = self.term.cancelled() => {
                    // The grace, but never past the term's lease: a successor may start then.
                    let ended = self.term.ended_at().unwrap_or_else(|| self.term.clock().now());
                    tokio::select! {
                        biased;
                        joined = &mut task.0 => match joined {
                            Ok(result) => break RunEnd::Returned(result.map_err(|e| e.to_string())),
                            Err(_) => break RunEnd::CutOff,
                        },
                        () = self.term.until_stop_by(ended + self.inner.grace) => {
                            warn!(slot = %key, grace = ?self.inner.grace, "the run outlived its term and its grace (or the term's lease); aborting it");
                            task.0.abort();
                            break RunEnd::CutOff;
                        }
                    }
                }
                _ = control_changed.notified() => {
                    debug!("the job's controls changed while a slot runs");
                    if let Err(e) = self.reload_control(true).await {
                        debug!(error = %e, "reading the controls failed");
                    }
                }
                _ = tokio::time::sleep(self.until_next_slot()) => {
                    if let Err(Stop::Failed(e)) = self.overlap().await {
                        debug!(error = %e, "recording an overlapping slot failed");
                    }
                }
            }
        };
        let code = exit_code.lock().ok().and_then(|c| *c);
        let returned = matches!(end, RunEnd::Returned(_));
        self.finish(&key, token, end, code).await?;
        let result = if returned {
            // Slots that came due in the last moments of the run overlapped it too.
            self.overlap().await
        } else {
            Ok(())
        };
        self.run_started = None;
        result
    }

    /// How long until the next slot after the cursor comes due by the ensemble's clock, at most
    /// [`TICK`].
    fn until_next_slot(&self) -> Duration {
        let now = self.now();
        self.inner
            .schedule
            .next_after(now.max(self.state.cursor_ms))
            .map_or(TICK, |next| {
                Duration::from_millis(u64::try_from(next.saturating_sub(now)).unwrap_or(0))
                    .min(TICK)
            })
    }

    /// While a slot runs: the slots that have come due since are skipped or buffered
    /// ([`plan::overlap`]).
    async fn overlap(&mut self) -> std::result::Result<(), Stop> {
        let started = self.run_started.map(|(started, at)| {
            let waited = self.term.clock().now() - at;
            (
                started,
                i64::try_from(waited.as_millis()).unwrap_or(i64::MAX),
            )
        });
        let running = plan::Running {
            now: self.now(),
            started,
            queue: &self.queue,
            cursor: self.state.cursor_ms,
            paused: self.control.paused,
            buffered: self.buffered,
        };
        match plan::overlap(&self.inner.schedule, &self.inner.policies, &running) {
            OverlapPlan::Nothing => Ok(()),
            OverlapPlan::NotRun(not_run) => self.record_not_run(not_run).await,
            OverlapPlan::Buffer { first, now, rest } => {
                let key = Schedule::key(first);
                let record = SlotRecord::not_run(
                    &key,
                    first,
                    SlotState::Pending,
                    PendingReason::Buffered.as_str(),
                    now,
                );
                let mut next = self.state.clone();
                next.cursor_ms = first;
                self.write_state(
                    next,
                    vec![FencedOp::create(self.slot_path(&key), record.to_bytes())],
                )
                .await?;
                self.remember(&key, record, Some(0));
                self.buffered = true;
                info!(slot = %key, "slot buffered behind the running one");
                self.queue.push_back(Work::first_run(first));
                if let Some(rest) = rest {
                    self.record_not_run(rest).await?;
                }
                Ok(())
            }
        }
    }

    /// Records how a run ended, fenced; a refusal leaves the slot `running` for the next leader.
    async fn finish(
        &mut self,
        key: &str,
        token: FencingToken,
        end: RunEnd,
        exit_code: Option<i32>,
    ) -> std::result::Result<(), Stop> {
        let (state, error) = plan::outcome(end);
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let Some((mut record, version)) = self.records.get(key).cloned() else {
                return Ok(());
            };
            record.state = state;
            record.ended_ms = Some(self.now());
            record.exit_code = exit_code;
            record.error = error.clone();
            let result = self
                .fenced(vec![FencedOp::SetData {
                    path: self.slot_path(key),
                    data: record.to_bytes(),
                    version: Some(version),
                }])
                .await;
            match result {
                Ok(results) => {
                    let v = new_version(&results, 0);
                    self.remember(key, record, v);
                    info!(slot = %key, token = %token, outcome = state.as_str(), exit_code, "slot finished");
                    self.emit(JobEvent::SlotFinished {
                        slot: key.to_owned(),
                        outcome: state,
                        exit_code,
                        reason: error,
                    });
                    self.prune().await;
                    return Ok(());
                }
                Err(e @ (Error::ConnectionLoss | Error::Timeout(_))) if attempts < 20 => {
                    // The reply was lost: see what the record says now, and write again if it
                    // is still ours and running.
                    debug!(slot = %key, error = %e, "recording the slot's end failed; retrying");
                    tokio::select! {
                        _ = self.term.cancelled() => {}
                        _ = tokio::time::sleep(crate::session::retry_backoff(attempts, TICK)) => {}
                    }
                    if let Ok(client) = self.inner.session.client()
                        && let Ok((data, stat)) = client.get_data(&self.slot_path(key)).await
                        && let Ok(now) = SlotRecord::from_bytes(key, &data)
                    {
                        let still_ours =
                            now.state == SlotState::Running && now.token == Some(token.get());
                        self.remember(key, now, Some(stat.version));
                        if !still_ours {
                            return Ok(());
                        }
                    }
                }
                Err(e) => {
                    warn!(slot = %key, token = %token, error = %e, "the slot's end was not recorded; it stays running for the next leader");
                    self.emit(JobEvent::SlotAbandoned {
                        slot: key.to_owned(),
                        token,
                        reason: e.to_string(),
                    });
                    return Err(e.into());
                }
            }
        }
    }

    /// Deletes the oldest settled records beyond the history limit or age (best effort).
    async fn prune(&mut self) {
        let limit = self.inner.policies.history_limit;
        let max_age =
            i64::try_from(self.inner.policies.history_max_age.as_millis()).unwrap_or(i64::MAX);
        let doomed = plan::prune(&self.records, limit, max_age, self.now());
        for batch in doomed.chunks(50) {
            let ops: Vec<FencedOp> = batch
                .iter()
                .map(|(k, v)| FencedOp::Delete {
                    path: self.slot_path(k),
                    version: Some(*v),
                })
                .collect();
            match self.fenced(ops).await {
                Ok(_) => {
                    for (k, _) in batch {
                        self.records.remove(k);
                    }
                    debug!(deleted = batch.len(), "pruned the job's history");
                }
                Err(e) => {
                    debug!(error = %e, "pruning the job's history failed; next time");
                    return;
                }
            }
        }
    }
}

/// The data version a [`FencedResult::DataSet`] at `index` reports.
fn new_version(results: &[FencedResult], index: usize) -> Option<i32> {
    match results.get(index) {
        Some(FencedResult::DataSet { version, .. }) => Some(*version),
        Some(FencedResult::Created { .. }) => Some(0),
        _ => None,
    }
}

/// Whether an error of the leader's loop is cured by reading the job's nodes again: a lost
/// connection, or a compare-and-set that found the nodes changed (an operator's `resolve`).
fn needs_reload(e: &Error) -> bool {
    use zookeeper_client::Error as Zk;
    matches!(
        e,
        Error::ConnectionLoss
            | Error::Timeout(_)
            | Error::Zookeeper(Zk::BadVersion | Zk::NodeExists | Zk::NoNode)
    )
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
