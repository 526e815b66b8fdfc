//! The scheduled job's policies: what a leader does with missed, overlapping and cut-off slots,
//! and how an operator resolves a parked one.

use std::time::Duration;

/// What a new leader does with slots that came due while no replica ran the job (an outage, a
/// long failover, a stalled leader).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CatchUp {
    /// Run the newest missed slot if it is inside the catch-up window (default: one period, at
    /// most 24 h); record the older ones as one missed range.
    #[default]
    Latest,
    /// Run every missed slot, oldest first.
    All,
    /// Run none; record them as one missed range.
    None,
}

/// What happens to a slot that comes due while the previous one still runs. Two slots never
/// run at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Overlap {
    /// Record it skipped (`overlap`).
    #[default]
    Skip,
    /// Keep the first such slot (recorded `pending`) and run it when the current one ends;
    /// skip any further one.
    BufferOne,
}

/// What a new leader does with a slot that an earlier term started and never finished (its
/// runner crashed, froze past its session, lost its connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnCrash {
    /// Run it again with the new term's token and `attempt + 1`
    /// ([`SlotRun::is_recovering`](super::SlotRun::is_recovering)), up to the max-attempts
    /// bound; then record it failed (`max_attempts`).
    #[default]
    Retry,
    /// Record it failed (`cut_off`): at most once.
    Fail,
    /// Record it parked (`cut_off`) until an operator resolves it
    /// ([`JobAdmin::resolve`](super::JobAdmin::resolve)).
    Park,
}

/// How an operator resolves a parked slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resolution {
    /// The work was done (checked by hand): record it succeeded (`resolved`).
    Done,
    /// Run it again: the leader takes it up with `attempt + 1`.
    Rerun,
}

/// How many operator triggers may wait at once by default
/// ([`ScheduledJobBuilder::max_pending_triggers`](super::ScheduledJobBuilder::max_pending_triggers)).
pub const DEFAULT_MAX_PENDING_TRIGGERS: u64 = 10;

/// The policies a job was built with ([`ScheduledJobBuilder`](super::ScheduledJobBuilder)'s
/// setters): what the planner (`plan.rs`) decides by.
#[derive(Debug, Clone)]
pub(crate) struct Policies {
    /// Slots that came due while no replica ran the job.
    pub(crate) catch_up: CatchUp,
    /// How late the newest missed slot may be and still run under [`CatchUp::Latest`]
    /// (`None`: one period of the schedule, at most 24 h).
    pub(crate) window: Option<Duration>,
    /// A slot that comes due while the previous one runs.
    pub(crate) overlap: Overlap,
    /// A slot an earlier term started and never finished.
    pub(crate) on_crash: OnCrash,
    /// How many times a slot is started at most under [`OnCrash::Retry`].
    pub(crate) max_attempts: u32,
    /// How many slot records are kept.
    pub(crate) history_limit: usize,
    /// How old a settled slot record may get before it is deleted.
    pub(crate) history_max_age: Duration,
    /// Whether a changed schedule replays its slots since the job's cursor.
    pub(crate) replay_on_change: bool,
    /// How many times a run that returned an error is run again within its slot.
    pub(crate) retries: u32,
    /// How long the leader waits before each such retry.
    pub(crate) retry_backoff: Duration,
    /// How many operator triggers may wait at once (`control.triggers - state.triggers_done`):
    /// a jump beyond it is refused whole ([`super::plan::refused_triggers`]).
    pub(crate) max_pending_triggers: u64,
}

impl Default for Policies {
    fn default() -> Self {
        Policies {
            catch_up: CatchUp::default(),
            window: None,
            overlap: Overlap::default(),
            on_crash: OnCrash::default(),
            max_attempts: 3,
            history_limit: 100,
            history_max_age: Duration::from_secs(30 * 24 * 3600),
            replay_on_change: false,
            retries: 0,
            retry_backoff: Duration::ZERO,
            max_pending_triggers: DEFAULT_MAX_PENDING_TRIGGERS,
        }
    }
}
