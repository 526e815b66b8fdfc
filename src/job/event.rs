//! What a scheduled job reports and what it hands its work: [`JobEvent`], [`SlotRun`], and the
//! [`SlotJob`] the work implements.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::SlotState;
use crate::clock::BootTime;
use crate::error::BoxError;
use crate::fencing::{FencingToken, Leadership};

/// Something that happened to a slot, as [`ScheduledJob::events`](super::ScheduledJob::events)
/// reports it.
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
    /// A run returned an error and will be run again within its slot
    /// ([`ScheduledJobBuilder::retries`](super::ScheduledJobBuilder::retries)): the slot is
    /// recorded `pending` (`reason: retry`) until the retry starts.
    SlotRetrying {
        /// The slot key.
        slot: String,
        /// The attempt that failed.
        attempt: u32,
        /// The slot's failed attempts so far, this one included.
        failures: u32,
        /// How long until the retry starts.
        backoff: Duration,
        /// The job's error.
        error: String,
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
    /// The slot stays `running` for the next leader, which takes it up as cut off: either the
    /// job ended after its term had ended and the record of its end was refused (the fenced
    /// write found the term over), or the term ended after the slot's claim and before its run
    /// started, and the run was not started (a run starts only in a valid term).
    SlotAbandoned {
        /// The slot key.
        slot: String,
        /// The token of the term that ran it.
        token: FencingToken,
        /// What refused the write, or that the run was not started.
        reason: String,
    },
    /// The leader saw the job paused or resumed by an operator
    /// ([`JobAdmin::pause`](super::JobAdmin::pause)): from now on it starts no slot but operator
    /// triggers, or starts them again.
    PauseChanged {
        /// Whether the job is paused now.
        paused: bool,
    },
    /// This leader's schedule differs from the one recorded with the job.
    ScheduleChanged {
        /// The recorded schedule ([`Schedule::spec`](super::Schedule::spec)).
        from: String,
        /// This replica's.
        to: String,
    },
    /// This replica's wall clock is off the ensemble's by more than the
    /// [`clock_tolerance`](super::ScheduledJobBuilder::clock_tolerance): it took up no slot, gave
    /// up its term, and stays out of the election for a while before it measures again.
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
    /// The leader refused what it read in the job's `control` node: a trigger count more than
    /// [`max_pending_triggers`](super::ScheduledJobBuilder::max_pending_triggers) ahead of the
    /// triggers taken up (none of them runs; they are recorded taken up), a trigger whose
    /// `trigger_for` is not a slot key or a date (it does not run), or data that does not
    /// parse (the controls read before stay in force). Nothing else stops.
    ControlRefused {
        /// What was refused, naming the node.
        reason: String,
    },
    /// The leader refused the job's `state` node: it does not parse, or it moves the cursor (or
    /// the trigger count) back behind a slot the job has a record of. The leader keeps its
    /// term (so that the other replicas do not take it up in turn and fail the same way),
    /// takes up no slot and deletes nothing, and loads `state` again when it changes: the
    /// operator's fix is in `docs/zkr-cron-runbook.md` (delete the node, or write it back).
    StateRefused {
        /// What is wrong, naming the node.
        reason: String,
    },
    /// A slot record the job did not write: a final record (`succeeded`, ...) found at a slot
    /// beyond the job's cursor (or a trigger beyond the triggers taken up) when the slot came
    /// due. The job writes a record only in the multi that moves its cursor (or trigger count)
    /// to it, so such a record suppresses nothing: the leader claims the slot over it (with
    /// the record's version) and runs it.
    RecordRefused {
        /// The slot key.
        slot: String,
        /// What the record said, and why it was refused.
        reason: String,
    },
    /// A sample of the ensemble's clock (a write's `mtime`) disagreed with the one before it,
    /// projected on this host's boot clock, by more than the
    /// [`clock_tolerance`](super::ScheduledJobBuilder::clock_tolerance): the ensemble's clock
    /// stepped (a quorum leader with another wall clock was elected, or its clock was set).
    /// The sample is not used: the term takes up no more slots, deletes nothing (pruning by
    /// age needs a sample confirmed by the one before it), and is given up as after a
    /// [`ClockSkew`](Self::ClockSkew); the next term measures afresh.
    EnsembleClockStep {
        /// The new sample minus the projection of the one before (positive: forward), in
        /// milliseconds.
        step_ms: i64,
        /// The tolerance, in milliseconds.
        tolerance_ms: u64,
    },
}

/// One run of the job: the slot, the term, the attempt.
#[derive(Debug, Clone)]
pub struct SlotRun {
    pub(super) slot: String,
    pub(super) nominal_ms: i64,
    pub(super) attempt: u32,
    pub(super) recovering: bool,
    pub(super) triggered: bool,
    pub(super) for_slot: Option<String>,
    pub(super) business_date: Option<String>,
    pub(super) term: Leadership,
    pub(super) started_at: BootTime,
    pub(super) exit_code: Arc<Mutex<Option<i32>>>,
}

impl SlotRun {
    /// The slot key: the nominal instant in UTC (`2026-12-03T02:00:00Z`), or `trigger-N`.
    pub fn slot(&self) -> &str {
        &self.slot
    }

    /// The slot's nominal instant (for a trigger, when it was taken up; for a trigger an
    /// operator gave a slot key, [`for_slot`](Self::for_slot), that slot's instant).
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

    /// Whether an operator asked for this run ([`JobAdmin::trigger`](super::JobAdmin::trigger))
    /// rather than the schedule.
    pub fn is_triggered(&self) -> bool {
        self.triggered
    }

    /// For a trigger an operator gave a slot key (`zkr cron trigger --slot KEY`,
    /// [`TriggerFor::slot`](super::TriggerFor::slot)): that slot's key. [`slot`](Self::slot) is
    /// still the trigger's own key (`trigger-N`), under which it is recorded.
    pub fn for_slot(&self) -> Option<&str> {
        self.for_slot.as_deref()
    }

    /// For a trigger an operator gave a business date (`zkr cron trigger --date 2026-12-03`,
    /// [`TriggerFor::date`](super::TriggerFor::date)): the date, `YYYY-MM-DD`. `None` for a
    /// scheduled slot: its business date is the job's to derive from [`nominal`](Self::nominal)
    /// in its own zone.
    pub fn business_date(&self) -> Option<&str> {
        self.business_date.as_deref()
    }

    /// The leadership term this run belongs to: `cancelled()`, `is_valid()`, `fenced(..)`.
    pub fn leadership(&self) -> &Leadership {
        &self.term
    }

    /// When the job started this run, on the term's clock: the last instant at which the job
    /// found the term valid before it handed the run over. A run never starts in a term that
    /// had ended; the work itself may begin a little later (when its task is first polled),
    /// and should check [`Leadership::is_valid`] before it acts, as always.
    pub fn started_at(&self) -> BootTime {
        self.started_at
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

/// The work a [`ScheduledJob`](super::ScheduledJob) runs for each slot.
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
