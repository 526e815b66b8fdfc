//! The scheduled job's decisions, pure: no I/O, no async, no session.
//!
//! The leader's loop (`term.rs`) reads the facts (the slot records, the job's `state` and
//! `control`, its queue, the ensemble's time, the schedule and the policies), asks this module
//! what to do, and carries the answer out with its fenced writes. Every rule of
//! `recipes/scheduled-job.md` that chooses between running, retrying, skipping, folding into a
//! missed range, buffering, settling or waiting is decided here, so that it can be read in one
//! place and tested as a table:
//!
//! - [`crash`] and [`recovery`]: a slot an earlier term left `running` is retried, failed or
//!   parked ([`OnCrash`], max attempts);
//! - [`pending`]: slots recorded `pending` (buffered, or released by an operator) are queued;
//! - [`step`]: what one pass of the loop takes up next (a queued slot, a trigger, due slots),
//!   paused or not;
//! - [`due`]: slots that came due are run, or folded by the catch-up policy ([`CatchUp`]);
//! - [`overlap`]: slots that came due while one runs are skipped or buffered ([`Overlap`]);
//! - [`not_run`]: how slots not run are recorded (one `skipped` record, or a `missed` range);
//! - [`align`], [`claim`], [`prune`], [`outcome`]: the job's `state` on a new term and at a
//!   claim, the history kept, the record of a run's end;
//! - [`refused_triggers`], [`state_refused`], [`foreign_final`]: what the leader does not take
//!   on trust from the nodes anyone may write (issue 43): a trigger jump, a bad trigger
//!   argument, a `state` rewound behind the history, a final record the job did not write.
//!
//! The reasons a record carries are enums here ([`NotRunReason`], [`SettleReason`],
//! [`PendingReason`]); their strings are the wire format other replicas and `zkr` read.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::policy::{CatchUp, OnCrash, Overlap, Policies};
use super::record::{
    Control, JobState, SlotRange, SlotRecord, SlotState, TriggerFor, UNPLACED, trigger_key,
};
use super::schedule::Schedule;

/// How many due slots one pass takes up with catch-up `all` (the rest in the next passes).
pub(crate) const CATCH_UP_BATCH: u64 = 100;

/// The longest a slot may be past due, with a run still going, and not yet count as
/// overlapping it (the misfire tolerance is half a period, at most this).
pub(crate) const MISFIRE_MAX: Duration = Duration::from_secs(1);

/// The slot records the leader knows, with their data versions, by slot key.
pub(crate) type Records = BTreeMap<String, (SlotRecord, i32)>;

/// Why slots were not run: recorded `skipped` (one slot) or `missed` (a range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotRunReason {
    /// It came due while the previous slot still ran (`overlap`).
    Overlap,
    /// It came due while the job was paused (`paused`).
    Paused,
    /// It came due while no replica ran the job, and the catch-up policy did not run it
    /// (`catch_up`): always recorded as a missed range, even for one slot.
    CatchUp,
}

impl NotRunReason {
    /// The reason as records and events carry it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            NotRunReason::Overlap => "overlap",
            NotRunReason::Paused => "paused",
            NotRunReason::CatchUp => "catch_up",
        }
    }
}

/// Why a slot was settled without the job running it to an end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SettleReason {
    /// It was cut off (`cut_off`) and the on-crash policy fails or parks it.
    CutOff,
    /// It was cut off and had been started as many times as allowed (`max_attempts`).
    MaxAttempts,
    /// An operator recorded it done ([`Resolution::Done`](super::Resolution::Done)):
    /// `resolved`.
    Resolved,
}

impl SettleReason {
    /// The reason as records and events carry it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SettleReason::CutOff => "cut_off",
            SettleReason::MaxAttempts => "max_attempts",
            SettleReason::Resolved => "resolved",
        }
    }
}

/// Why a slot waits, recorded `pending`, for the leader to run it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PendingReason {
    /// Buffered behind a running slot ([`Overlap::BufferOne`]): `buffered`.
    Buffered,
    /// Released by an operator ([`Resolution::Rerun`](super::Resolution::Rerun)): `rerun`.
    Rerun,
    /// Its run returned an error and it waits for its retry on failure
    /// ([`ScheduledJobBuilder::retries`](super::ScheduledJobBuilder::retries)): `retry`.
    Retry,
}

impl PendingReason {
    /// The reason as records carry it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PendingReason::Buffered => "buffered",
            PendingReason::Rerun => "rerun",
            PendingReason::Retry => "retry",
        }
    }

    /// The reason of a `pending` record (`None`: another, or none).
    pub(crate) fn of(record: &SlotRecord) -> Option<PendingReason> {
        match record.reason.as_deref() {
            Some("buffered") => Some(PendingReason::Buffered),
            Some("rerun") => Some(PendingReason::Rerun),
            Some("retry") => Some(PendingReason::Retry),
            _ => None,
        }
    }
}

/// A slot waiting to be run in this term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Work {
    /// The slot key.
    pub(crate) key: String,
    /// The slot's nominal instant (a trigger's: when it was taken up).
    pub(crate) nominal_ms: i64,
    /// The attempt this run will be.
    pub(crate) attempt: u32,
    /// Whether it takes up a slot cut off before, or released by an operator.
    pub(crate) recovering: bool,
    /// `Some(n)` for the `n`th operator trigger; `Some(0)` for a trigger's re-run, which must
    /// not move the job's trigger count; `None` for a slot of the schedule.
    pub(crate) trigger: Option<u64>,
}

impl Work {
    /// A scheduled slot's first run.
    pub(crate) fn first_run(slot_ms: i64) -> Work {
        Work {
            key: Schedule::key(slot_ms),
            nominal_ms: slot_ms,
            attempt: 1,
            recovering: false,
            trigger: None,
        }
    }
}

/// Slots in `(after, up_to]` to record as not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NotRun {
    /// The slot before the first one (the cursor, usually).
    pub(crate) after: i64,
    /// The last slot.
    pub(crate) up_to: i64,
    /// Why.
    pub(crate) reason: NotRunReason,
}

// ---------------------------------------------------------------------------------------------
// Cut-off slots

/// What becomes of a slot an earlier term started and never finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Crash {
    /// Run it again.
    Retry {
        /// The next cut-off count's start: `attempt + 1` of what [`crash`] was given (the
        /// run's own attempt number is the record's `attempt + 1`, in the [`Work`]).
        attempt: u32,
    },
    /// Record it `state` (failed or parked) for `reason`, without running it.
    Settle {
        /// [`SlotState::Failed`] or [`SlotState::Parked`].
        state: SlotState,
        /// Why.
        reason: SettleReason,
    },
}

/// The on-crash rule: a slot whose starts were cut off `attempt` times (this one included;
/// [`recovery`] passes `attempt - failures`, so that the starts that failed and were retried on
/// failure do not count) is retried under [`OnCrash::Retry`] while `attempt < max_attempts`,
/// then failed (`max_attempts`); failed (`cut_off`) under [`OnCrash::Fail`]; parked
/// (`cut_off`) under [`OnCrash::Park`].
pub(crate) fn crash(on_crash: OnCrash, max_attempts: u32, attempt: u32) -> Crash {
    match on_crash {
        OnCrash::Retry if attempt < max_attempts => Crash::Retry {
            attempt: attempt + 1,
        },
        OnCrash::Retry => Crash::Settle {
            state: SlotState::Failed,
            reason: SettleReason::MaxAttempts,
        },
        OnCrash::Fail => Crash::Settle {
            state: SlotState::Failed,
            reason: SettleReason::CutOff,
        },
        OnCrash::Park => Crash::Settle {
            state: SlotState::Parked,
            reason: SettleReason::CutOff,
        },
    }
}

/// What a term does with the slots earlier terms left `running`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Recovery {
    /// A slot is recorded running with this term's own token (found after a reload: the term
    /// claimed it but lost the reply of the claim or of the run's end). Running it again would
    /// restart it with the same token: the term is given up, and the next one (with a higher
    /// token) takes it up as cut off.
    GiveUpTerm {
        /// The slot's key.
        slot: String,
    },
    /// Each cut-off slot, oldest first, and what becomes of it: a retry (with the [`Work`] to
    /// queue) or a settlement.
    CutOff(Vec<(Work, Crash)>),
}

/// Handles the slots an earlier term left `running`, when this term runs none (at its start,
/// after a reload): every such record was cut off.
pub(crate) fn recovery(records: &Records, token: i64, policies: &Policies) -> Recovery {
    if let Some((key, _)) = records
        .iter()
        .find(|(_, (r, _))| r.state == SlotState::Running && r.token == Some(token))
    {
        return Recovery::GiveUpTerm { slot: key.clone() };
    }
    let mut cut_off: Vec<(i64, &String, &SlotRecord)> = records
        .iter()
        .filter(|(_, (r, _))| r.state == SlotState::Running)
        .map(|(k, (r, _))| (r.nominal_ms, k, r))
        .collect();
    cut_off.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    Recovery::CutOff(
        cut_off
            .into_iter()
            .map(|(nominal_ms, key, record)| {
                // Only the starts that were cut off count against max attempts; the ones that
                // failed count against the retries on failure.
                let cut_offs = record.attempt.saturating_sub(record.failures);
                let decision = crash(policies.on_crash, policies.max_attempts, cut_offs);
                let attempt = match decision {
                    Crash::Retry { .. } => record.attempt.saturating_add(1),
                    Crash::Settle { .. } => record.attempt,
                };
                let work = Work {
                    key: key.clone(),
                    nominal_ms,
                    attempt,
                    recovering: true,
                    // A trigger's re-run must not move the trigger count (`Some(0)`).
                    trigger: record.slot.starts_with("trigger-").then_some(0),
                };
                (work, decision)
            })
            .collect(),
    )
}

/// The slots recorded `pending` that are not queued yet, oldest first: buffered ones as they
/// were, re-runs an operator asked for as recovering; each with `attempt + 1`.
pub(crate) fn pending(records: &Records, queue: &VecDeque<Work>) -> Vec<Work> {
    let mut pending: Vec<(i64, &String, &SlotRecord)> = records
        .iter()
        .filter(|(_, (r, _))| r.state == SlotState::Pending)
        .filter(|(k, _)| !queue.iter().any(|w| &w.key == *k))
        .map(|(k, (r, _))| (r.nominal_ms, k, r))
        .collect();
    pending.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    pending
        .into_iter()
        .map(|(nominal_ms, key, r)| Work {
            key: key.clone(),
            nominal_ms,
            attempt: r.attempt + 1,
            recovering: matches!(
                PendingReason::of(r),
                Some(PendingReason::Rerun | PendingReason::Retry)
            ),
            // A trigger's re-run must not move the trigger count (`Some(0)`).
            trigger: key.starts_with("trigger-").then_some(0),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// One pass of the loop

/// What one pass of the leader's loop takes up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Run the queued slot at this index.
    RunQueued(usize),
    /// Paused: drop the queued slots nobody has recorded yet ([`fresh`]) and record the slots
    /// up to `up_to` `paused`; then plan again.
    RecordQueuedPaused {
        /// The newest such slot.
        up_to: i64,
    },
    /// Queue the next operator trigger.
    QueueTrigger(Work),
    /// The slots in `(cursor, latest]` came due: see [`due`].
    TakeUpDue {
        /// The newest due slot.
        latest: i64,
    },
    /// Nothing to do: wait for the next slot, a change of the controls, or the term's end.
    Wait,
}

/// Whether a queued slot is one nobody has recorded yet (a due slot taken up before a pause),
/// as opposed to one that is owed: a trigger, a cut-off slot to retry, a buffered slot, a
/// re-run.
pub(crate) fn fresh(work: &Work, records: &Records) -> bool {
    work.trigger.is_none() && !records.contains_key(&work.key)
}

/// What the loop takes up next, at the ensemble's time `now`.
///
/// Not paused: the queue first, oldest first. Paused: only operator triggers start; queued slots
/// nobody has recorded are recorded `paused`, as slots that come due while paused are; owed
/// ones stay queued until the job resumes. Then a trigger asked for and not taken up; then
/// the slots that came due after the cursor; else wait.
pub(crate) fn step(
    schedule: &Schedule,
    state: &JobState,
    control: &Control,
    queue: &VecDeque<Work>,
    records: &Records,
    now: i64,
) -> Step {
    if control.paused {
        if let Some(i) = queue.iter().position(|w| w.trigger.is_some()) {
            return Step::RunQueued(i);
        }
        if let Some(up_to) = queue
            .iter()
            .filter(|w| fresh(w, records))
            .map(|w| w.nominal_ms)
            .max()
        {
            return Step::RecordQueuedPaused { up_to };
        }
    } else if !queue.is_empty() {
        return Step::RunQueued(0);
    }
    if control.triggers > state.triggers_done {
        let n = state.triggers_done + 1;
        return Step::QueueTrigger(Work {
            key: trigger_key(n),
            nominal_ms: now,
            attempt: 1,
            recovering: false,
            trigger: Some(n),
        });
    }
    match schedule
        .latest_at_or_before(now)
        .filter(|&l| l > state.cursor_ms)
    {
        Some(latest) => Step::TakeUpDue { latest },
        None => Step::Wait,
    }
}

/// What to do with the slots that came due.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Due {
    /// Slots to record as not run, first.
    pub(crate) not_run: Option<NotRun>,
    /// Then the slots to run, oldest first.
    pub(crate) run: Vec<Work>,
}

/// The slots in `(cursor, latest]` came due at the ensemble's time `now`; `late` when the loop
/// found them after an outage, a failover or a stall rather than by waiting for them.
///
/// Paused: all recorded `paused`. On time, or late under [`CatchUp::All`]: all run, oldest first
/// (at most [`CATCH_UP_BATCH`] per pass). Late under [`CatchUp::Latest`]: the newest runs if it
/// is at most the catch-up window late, and the ones before it are folded into one missed range
/// (`catch_up`); under [`CatchUp::None`], or beyond the window, all are.
pub(crate) fn due(
    schedule: &Schedule,
    policies: &Policies,
    cursor: i64,
    latest: i64,
    now: i64,
    late: bool,
    paused: bool,
) -> Due {
    if paused {
        return Due {
            not_run: Some(NotRun {
                after: cursor,
                up_to: latest,
                reason: NotRunReason::Paused,
            }),
            run: Vec::new(),
        };
    }
    if !late || policies.catch_up == CatchUp::All {
        let (slots, _) = schedule.slots_between(cursor, latest, CATCH_UP_BATCH);
        return Due {
            not_run: None,
            run: slots.into_iter().map(Work::first_run).collect(),
        };
    }
    let window = policies
        .window
        .unwrap_or_else(|| schedule.period_after(latest));
    let lateness = Duration::from_millis(u64::try_from(now.saturating_sub(latest)).unwrap_or(0));
    let run_latest = policies.catch_up == CatchUp::Latest && lateness <= window;
    let missed_up_to = if run_latest { latest - 1 } else { latest };
    Due {
        not_run: schedule
            .latest_at_or_before(missed_up_to)
            .filter(|&l| l > cursor)
            .map(|up_to| NotRun {
                after: cursor,
                up_to,
                reason: NotRunReason::CatchUp,
            }),
        run: if run_latest {
            vec![Work::first_run(latest)]
        } else {
            Vec::new()
        },
    }
}

/// The record of slots not run, and where it moves the cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotRunRecord {
    /// One `skipped` record (a single slot skipped on purpose), or one `missed` record with its
    /// range; keyed by the first slot.
    pub(crate) record: SlotRecord,
    /// The last slot: the cursor moves to it.
    pub(crate) last: i64,
    /// How many slots the record stands for.
    pub(crate) count: u64,
}

impl NotRunRecord {
    /// Whether the record is one slot skipped (else a missed range).
    pub(crate) fn is_skip(&self) -> bool {
        self.record.state == SlotState::Skipped
    }
}

/// How the slots of `not_run` are recorded at the ensemble's time `now`: a single slot skipped
/// on purpose (`overlap`, `paused`) as one `skipped` record, anything else (a range, or a slot
/// the catch-up policy did not run) as one `missed` record for the range. `None` when no slot
/// lies in the range.
pub(crate) fn not_run(schedule: &Schedule, not_run: NotRun, now: i64) -> Option<NotRunRecord> {
    let NotRun {
        after,
        up_to,
        reason,
    } = not_run;
    let (count, more) = schedule.count_between(after, up_to);
    let first = schedule.next_after(after).filter(|&f| f <= up_to)?;
    let last = schedule.latest_at_or_before(up_to).unwrap_or(first);
    let key = Schedule::key(first);
    let single = count == 1 && reason != NotRunReason::CatchUp;
    let state = if single {
        SlotState::Skipped
    } else {
        SlotState::Missed
    };
    let mut record = SlotRecord::not_run(&key, first, state, reason.as_str(), now);
    if !single {
        record.range = Some(SlotRange {
            from: key,
            to: Schedule::key(last),
            count,
            more,
        });
    }
    Some(NotRunRecord {
        record,
        last,
        count,
    })
}

// ---------------------------------------------------------------------------------------------
// While a slot runs

/// What the loop knows, while a slot runs, to decide about the slots that came due since.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Running<'a> {
    /// The ensemble's time now (the estimate).
    pub(crate) now: i64,
    /// The run's start: the ensemble's time then, and the boot time waited since, in ms.
    /// `None` between runs (the last moments of one that just returned are judged by `now`).
    pub(crate) started: Option<(i64, i64)>,
    /// The slots queued in this term.
    pub(crate) queue: &'a VecDeque<Work>,
    /// The job's cursor.
    pub(crate) cursor: i64,
    /// Whether the job is paused.
    pub(crate) paused: bool,
    /// Whether a slot is buffered already.
    pub(crate) buffered: bool,
    /// Whether the running slot started late: a retry of a cut-off slot (a failover), or a
    /// slot started more than the misfire tolerance after its instant (a catch-up). A slot that
    /// comes due while such a run goes on is buffered, not skipped, under [`Overlap::Skip`]
    /// too: the overlap is the failover's doing, not the job's.
    pub(crate) late_start: bool,
}

/// What becomes of the slots that came due while one runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OverlapPlan {
    /// None did, or they are taken up after the run.
    Nothing,
    /// Record them not run (`overlap`, or `paused`).
    NotRun(NotRun),
    /// Buffer the first one (record it `pending` at `now`, move the cursor to it, queue it),
    /// then record the rest not run (`overlap`).
    Buffer {
        /// The buffered slot.
        first: i64,
        /// The ensemble's time the pending record carries.
        now: i64,
        /// The slots after it.
        rest: Option<NotRun>,
    },
}

/// The overlap rule: slots that come due while a slot runs are skipped, or the first one
/// buffered ([`Overlap`]); paused, they are recorded `paused`.
///
/// A slot counts as overlapping only once it is more than the misfire tolerance (half a period,
/// at most [`MISFIRE_MAX`]) past due with the run still going: a run that ends just after a
/// slot's instant leaves that slot to run, a little late, instead of skipping it. It counts as
/// having come due during the run only up to the run's start plus the boot time since: slots
/// beyond that came due because the estimate moved on a new sample, not by waiting, and are
/// taken up as on time after the run. Slots queued already are taken up in turn; under
/// [`CatchUp::All`] with a queue, the new ones join the catch-up; and a run that started late
/// (slots were due already at its start) leaves them to the catch-up policy after it.
pub(crate) fn overlap(schedule: &Schedule, policies: &Policies, run: &Running<'_>) -> OverlapPlan {
    let now = match run.started {
        Some((started, waited)) => run.now.min(started.saturating_add(waited)),
        None => run.now,
    };
    let tolerance = schedule.latest_at_or_before(now).map_or(0, |slot| {
        let half = schedule.period_after(slot) / 2;
        i64::try_from(half.min(MISFIRE_MAX).as_millis()).unwrap_or(0)
    });
    let now = now.saturating_sub(tolerance);
    let cursor = run
        .queue
        .iter()
        .filter(|w| w.trigger.is_none())
        .map(|w| w.nominal_ms)
        .fold(run.cursor, i64::max);
    let Some(latest) = schedule.latest_at_or_before(now).filter(|&l| l > cursor) else {
        return OverlapPlan::Nothing;
    };
    if policies.catch_up == CatchUp::All && !run.queue.is_empty() {
        return OverlapPlan::Nothing;
    }
    if let Some((started, _)) = run.started
        && schedule
            .next_after(cursor)
            .is_some_and(|next| next <= started)
    {
        return OverlapPlan::Nothing;
    }
    if run.paused {
        return OverlapPlan::NotRun(NotRun {
            after: cursor,
            up_to: latest,
            reason: NotRunReason::Paused,
        });
    }
    if (policies.overlap == Overlap::BufferOne || run.late_start)
        && !run.buffered
        && let Some(first) = schedule.next_after(cursor)
    {
        return OverlapPlan::Buffer {
            first,
            now,
            rest: (latest > first).then_some(NotRun {
                after: first,
                up_to: latest,
                reason: NotRunReason::Overlap,
            }),
        };
    }
    OverlapPlan::NotRun(NotRun {
        after: cursor,
        up_to: latest,
        reason: NotRunReason::Overlap,
    })
}

// ---------------------------------------------------------------------------------------------
// The job's state, claims, ends, history

/// What a new term changes in the job's `state`, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Alignment {
    /// The state to write (when it differs from the one read).
    pub(crate) next: JobState,
    /// A new job's cursor was placed here.
    pub(crate) placed: Option<i64>,
    /// The cursor was found beyond the ensemble's time plus the tolerance and brought back:
    /// from, to.
    pub(crate) rewound: Option<(i64, i64)>,
    /// The recorded schedule differs from this replica's: from, to ([`Schedule::spec`]).
    pub(crate) schedule_changed: Option<(String, String)>,
    /// The last leader computed the slots with another tzdata release: recorded, ours.
    pub(crate) tzdb_differs: Option<(String, String)>,
}

/// Brings `state` in line with the ensemble's time `now` and this replica's schedule: places a
/// new job's cursor at the newest slot at or before now (a new job owes nothing from before it
/// existed), brings back a cursor beyond now plus `tolerance_ms`, records a schedule change
/// (and, unless `replay_on_change`, moves the cursor up to now) and the tzdata release.
pub(crate) fn align(
    state: &JobState,
    schedule: &Schedule,
    now: i64,
    tolerance_ms: i64,
    replay_on_change: bool,
) -> Alignment {
    let spec = schedule.spec();
    let hash = schedule.spec_hash();
    let fresh_cursor = schedule.latest_at_or_before(now).unwrap_or(now);
    let mut next = state.clone();
    let mut placed = None;
    let mut rewound = None;
    let mut schedule_changed = None;
    if next.cursor_ms == UNPLACED {
        placed = Some(fresh_cursor);
        next.cursor_ms = fresh_cursor;
    } else if next.cursor_ms > now.saturating_add(tolerance_ms) {
        rewound = Some((next.cursor_ms, fresh_cursor));
        // The records up to where the cursor stood are the job's (a claim moved it there):
        // they stay final and are not taken for foreign ones ([`foreign_final`]).
        next.records_until_ms = Some(
            next.cursor_ms
                .max(next.records_until_ms.unwrap_or(i64::MIN)),
        );
        next.cursor_ms = fresh_cursor;
    }
    if next.spec_hash != hash {
        schedule_changed = Some((next.spec.clone(), spec.clone()));
        next.spec = spec;
        next.spec_hash = hash;
        if !replay_on_change {
            next.cursor_ms = next.cursor_ms.max(fresh_cursor);
        }
    }
    let tzdb = schedule.tzdb_version();
    let tzdb_differs = match (next.tzdb.as_deref(), tzdb) {
        (Some(recorded), Some(ours)) if recorded != ours => {
            Some((recorded.to_owned(), ours.to_owned()))
        }
        _ => None,
    };
    next.tzdb = tzdb.map(str::to_owned);
    Alignment {
        next,
        placed,
        rewound,
        schedule_changed,
        tzdb_differs,
    }
}

/// The job's state once `work` is claimed: a scheduled slot moves the cursor up to it, a
/// trigger the trigger count (a trigger's re-run, `Some(0)`, neither).
pub(crate) fn claim(state: &JobState, work: &Work) -> JobState {
    let mut next = state.clone();
    match work.trigger {
        Some(n) if n > next.triggers_done => next.triggers_done = n,
        Some(_) => {}
        None => next.cursor_ms = next.cursor_ms.max(work.nominal_ms),
    }
    next
}

/// A queued slot found settled already (by an operator, or an earlier pass) is not run; a
/// scheduled one beyond the cursor still moves the cursor to it: the cursor to write, if any.
pub(crate) fn cursor_past_settled(state: &JobState, work: &Work) -> Option<i64> {
    (work.trigger.is_none() && work.nominal_ms > state.cursor_ms).then_some(work.nominal_ms)
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunEnd {
    /// The job returned (its error's text when it failed).
    Returned(std::result::Result<(), String>),
    /// The term ended first and the job was aborted after the grace period (or panicked).
    CutOff,
}

/// The record of a run's end: its state and the error it carries.
pub(crate) fn outcome(end: RunEnd) -> (SlotState, Option<String>) {
    match end {
        RunEnd::Returned(Ok(())) => (SlotState::Succeeded, None),
        RunEnd::Returned(Err(e)) => (SlotState::Failed, Some(e)),
        RunEnd::CutOff => (
            SlotState::Failed,
            Some("cut off: the term ended".to_owned()),
        ),
    }
}

/// Whether a run started at the ensemble's time `started` for a slot whose instant is
/// `nominal` (`None`: a trigger) started late: a retry of a cut-off slot or of a failed run, or
/// more than the misfire tolerance (half a period, at most [`MISFIRE_MAX`]) after its instant.
pub(crate) fn started_late(
    schedule: &Schedule,
    nominal: Option<i64>,
    recovering: bool,
    started: i64,
) -> bool {
    if recovering {
        return true;
    }
    nominal.is_some_and(|nominal| {
        let half = schedule.period_after(nominal) / 2;
        let tolerance = i64::try_from(half.min(MISFIRE_MAX).as_millis()).unwrap_or(0);
        started.saturating_sub(nominal) > tolerance
    })
}

/// Whether a run that returned an error is retried on failure: `failures` (this one
/// included) is at most `retries`.
pub(crate) fn retry_on_failure(retries: u32, failures: u32) -> bool {
    failures <= retries
}

/// The settled records to delete, oldest first, with their versions: beyond `limit` records
/// in all, or settled slots older than `max_age_ms` at the ensemble's time `now`. Open records
/// (`running`, `pending`, `parked`) are never deleted.
pub(crate) fn prune(
    records: &Records,
    limit: usize,
    max_age_ms: i64,
    now: i64,
) -> Vec<(String, i32)> {
    let mut settled: Vec<(i64, &String, i32)> = records
        .iter()
        .filter(|(_, (r, _))| r.state.is_final())
        .map(|(k, (r, v))| (r.nominal_ms, k, *v))
        .collect();
    settled.sort();
    let excess = records.len().saturating_sub(limit);
    settled
        .into_iter()
        .enumerate()
        .filter(|(i, (nominal, _, _))| *i < excess || now.saturating_sub(*nominal) > max_age_ms)
        .map(|(_, (_, k, v))| (k.clone(), v))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Inputs not taken on trust (issue 43)

/// Triggers the leader refuses to run ([`refused_triggers`]): it records them taken up
/// (`triggers_done = up_to`) without running them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TriggerRefusal {
    /// The trigger count to record as taken up.
    pub(crate) up_to: u64,
    /// Why (without the node's path).
    pub(crate) reason: String,
}

/// Whether the next triggers of `control` are refused: a count more than `max_pending` ahead of
/// the triggers taken up is refused whole (`up_to` = the count: none of them runs, so that one
/// write of a huge count cannot run the job back to back for ever); otherwise the next trigger
/// is refused alone when what it is for is neither a slot key nor a date `YYYY-MM-DD`.
pub(crate) fn refused_triggers(
    state: &JobState,
    control: &Control,
    max_pending: u64,
) -> Option<TriggerRefusal> {
    let pending = control.triggers.saturating_sub(state.triggers_done);
    if pending > max_pending {
        return Some(TriggerRefusal {
            up_to: control.triggers,
            reason: format!(
                "{pending} triggers are waiting (count {}, {} taken up), more than the {max_pending} allowed at once: none of them runs; `zkr cron trigger` adds one at a time",
                control.triggers, state.triggers_done
            ),
        });
    }
    if pending == 0 {
        return None;
    }
    let n = state.triggers_done.saturating_add(1);
    let asked = control.trigger_for.get(&n)?;
    let bad = |e: crate::error::Error| TriggerRefusal {
        up_to: n,
        reason: format!("trigger {n} is refused: {e}"),
    };
    if let Some(slot) = &asked.slot
        && let Err(e) = TriggerFor::slot(slot)
    {
        return Some(bad(e));
    }
    if let Some(date) = &asked.date
        && let Err(e) = TriggerFor::date(date)
    {
        return Some(bad(e));
    }
    None
}

/// Whether `state`, as loaded, is refused against the job's records: it moves the cursor back
/// behind a slot the job has a record of, that is a record at a slot key after both the
/// cursor and `records_until_ms` (the cursor a leader brought back from the future) and at or
/// before `written_ms`, the `mtime` of the state's last write (as read, before this term wrote
/// anything). The job writes a record only in the multi that moves the cursor to it, and takes
/// up due slots as it writes, so its own writes never leave the cursor behind a record of a
/// slot that was due when it wrote; a record at a slot still to come then (a forged one) is
/// not evidence against the state ([`foreign_final`] deals with it). A new job's unplaced
/// cursor is not checked. A trigger count moved back is bounded by the cap on pending
/// triggers ([`refused_triggers`]) and the records above it are not the job's
/// ([`foreign_final`]): it is not checked here. The reason names the record; `None` when the
/// state stands.
pub(crate) fn state_refused(
    state: &JobState,
    records: &Records,
    written_ms: i64,
) -> Option<String> {
    if state.cursor_ms == UNPLACED {
        return None;
    }
    let covered = state
        .cursor_ms
        .max(state.records_until_ms.unwrap_or(i64::MIN));
    let newest = records
        .keys()
        .filter_map(|k| Schedule::parse_key(k).map(|at| (at, k)))
        .filter(|&(at, _)| at <= written_ms && at > covered)
        .max()?;
    Some(format!(
        "its cursor {} is behind the record of slot {}: it was moved back (every slot since would be run again), or that record is not the job's",
        Schedule::key(state.cursor_ms),
        newest.1
    ))
}

/// Whether a final record found when `work` is about to be claimed was written by someone else:
/// the job writes a scheduled slot's record only in the multi that moves the cursor to it
/// (or a trigger's in the one that counts it taken up), so a record beyond the cursor (and
/// beyond `records_until_ms`), or of a trigger beyond `triggers_done`, is not the job's and
/// suppresses nothing. A trigger's re-run and a retry are of records the job wrote.
pub(crate) fn foreign_final(state: &JobState, work: &Work) -> bool {
    match work.trigger {
        Some(0) => false,
        Some(n) => n > state.triggers_done,
        None => {
            work.nominal_ms > state.cursor_ms
                && work.nominal_ms > state.records_until_ms.unwrap_or(i64::MIN)
        }
    }
}

#[cfg(test)]
mod tests;
