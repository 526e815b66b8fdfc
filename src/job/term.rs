//! One leadership term of a scheduled job: the leader's loop, and the fenced writes that carry
//! out what the planner ([`super::plan`]) decides. Reads the job's nodes at the term's start
//! (and after a failure), samples the ensemble's clock, checks this replica's, recovers the
//! slots earlier terms left open, then takes up triggers and due slots until the term ends.
//! A slot's own run (claim, run, overlap, end, history) is in [`slot`].

mod slot;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tracing::{debug, error, info, warn};
use zookeeper_client::CreateMode;

use super::admin::read_records;
use super::ensemble::{EnsembleClock, Sampled};
use super::plan::{self, Crash, NotRun, NotRunReason, Records, Recovery, SettleReason, Step, Work};
use super::record::{AttemptEnd, AttemptOutcome, Control, JobState, UNPLACED};
use super::{AbortOnDrop, Inner, JobEvent, Schedule, SlotJob, SlotRecord, SlotState};
use crate::clock::BootTime;
use crate::error::{Backoff, BoxError, Error, Result};
use crate::fencing::{FencedOp, FencedResult, Leadership};
use crate::path;

/// How long the loop sleeps at most before it reads the clock again: tokio's timers run on the
/// monotonic clock, which stands still in a host suspend, so a slot that came due during one is
/// noticed within this after the resume.
const TICK: Duration = Duration::from_secs(1);

/// A wake-up later than asked by more than this, on the boot clock, means the loop was stalled
/// (a frozen process, a starved runtime, a host suspend): the slots found due then are late and
/// go through the catch-up policy.
const STALL: Duration = Duration::from_secs(2);

/// A sample of the ensemble's clock older than this is renewed (one compare-and-set of `state`
/// onto itself) before the loop takes up work by it, so that the drift between this host's
/// boot clock and the ensemble's wall clock stays in the milliseconds.
const SAMPLE_MAX_AGE: Duration = Duration::from_secs(60);

/// How soon the next slot must be due for a stale sample to be renewed while the loop waits.
const SAMPLE_LEAD: Duration = Duration::from_secs(2);

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
pub(super) struct TermRun<'a> {
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
    /// Whether the running slot started late (a retry, a catch-up): a slot that comes due
    /// while it runs is buffered rather than skipped ([`plan::started_late`]).
    run_late: bool,
    /// A step of the ensemble's clock one of this term's writes found ([`Sampled::Step`]):
    /// the term takes up nothing more ([`Self::check_step`]).
    clock_step: Option<i64>,
}

/// What loading the job's nodes found.
enum Loaded {
    /// Everything read; the term may lead.
    Ready,
    /// `state` is refused ([`plan::state_refused`], or it does not parse): why.
    StateRefused(String),
}

impl<'a> TermRun<'a> {
    pub(super) fn new(inner: &'a Inner, term: &'a Leadership) -> Self {
        TermRun {
            inner,
            term,
            state: JobState {
                spec: String::new(),
                spec_hash: String::new(),
                cursor_ms: 0,
                triggers_done: 0,
                tzdb: None,
                records_until_ms: None,
            },
            state_version: -1,
            control: Control::default(),
            control_changed: Arc::new(tokio::sync::Notify::new()),
            control_watch: None,
            records: Records::new(),
            queue: VecDeque::new(),
            buffered: false,
            ensemble: EnsembleClock::default(),
            run_started: None,
            run_late: false,
            clock_step: None,
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
        if let Some(mtime) = results.iter().find_map(FencedResult::mtime_ms)
            && let Sampled::Step { step_ms } =
                self.ensemble
                    .sample(mtime, sent, answered, self.inner.clock_tolerance)
        {
            self.clock_step.get_or_insert(step_ms);
        }
        Ok(results)
    }

    /// Whether one of this term's writes found the ensemble's clock stepped: then the term
    /// takes up nothing more and deletes nothing; it is given up as after a clock skew (the
    /// hold-back), and the next term measures afresh (and its replica's clock is checked
    /// against the new one).
    fn check_step(&mut self) -> std::result::Result<(), Stop> {
        let Some(step_ms) = self.clock_step else {
            return Ok(());
        };
        let hold = self.inner.hold_back_after_skew(self.term.clock().now());
        let tolerance_ms = u64::try_from(self.tolerance_ms()).unwrap_or(u64::MAX);
        error!(
            path = %self.inner.path,
            id = %self.inner.id,
            token = %self.term.token(),
            step_ms,
            tolerance_ms,
            hold_back_ms = u64::try_from(hold.as_millis()).unwrap_or(u64::MAX),
            "the ensemble's clock (the mtime of the job's writes) stepped from one write to the next by more than the tolerance (a quorum leader with another wall clock, or a clock set): the sample is not used, nothing is deleted, no slot is taken up, and the term is given up (check the ZooKeeper servers' time sources)"
        );
        self.emit(JobEvent::EnsembleClockStep {
            step_ms,
            tolerance_ms,
        });
        Err(Stop::ClockSkew)
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
            JobEvent::SlotRetrying { .. } => crate::metrics::job_slot_retrying(path, id),
            JobEvent::ControlRefused { .. } => {
                crate::metrics::job_input_refused(path, id, "control");
            }
            JobEvent::StateRefused { .. } => crate::metrics::job_input_refused(path, id, "state"),
            JobEvent::RecordRefused { .. } => {
                crate::metrics::job_input_refused(path, id, "record");
            }
            JobEvent::EnsembleClockStep { .. } => {
                crate::metrics::job_input_refused(path, id, "clock");
            }
            _ => {}
        }
    }

    pub(super) async fn run<J: SlotJob>(
        mut self,
        job: &Arc<J>,
    ) -> std::result::Result<(), BoxError> {
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
        self.check_step()?;
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
        let mut backoff = Backoff::new(TICK);
        loop {
            match self.step(job, &mut late).await {
                Ok(()) => backoff.succeed(),
                Err(Stop::Failed(e)) if needs_reload(&e) => {
                    // A write whose reply was lost, a read that failed, or a compare-and-set
                    // that lost to an operator: read everything again and decide afresh. A
                    // claim that did land is found `running` and handled as cut off (its run
                    // never started).
                    let pause = backoff.fail();
                    let failures = backoff.failures();
                    if failures > 3 {
                        warn!(error = %e, failures, "the job's loop keeps failing; reloading");
                    } else {
                        debug!(error = %e, failures, "the job's loop reloads its state");
                    }
                    tokio::select! {
                        _ = self.term.cancelled() => return Err(Stop::TermOver),
                        _ = tokio::time::sleep(pause) => {}
                    }
                    self.queue.clear();
                    self.buffered = false;
                    self.load_with_retries().await?;
                    self.check_step()?;
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
        self.check_step()?;
        self.check_clock()?;
        if let Some(refusal) = plan::refused_triggers(
            &self.state,
            &self.control,
            self.inner.policies.max_pending_triggers,
        ) {
            self.refuse_triggers(refusal).await?;
        }
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
        let mut backoff = Backoff::new(TICK);
        loop {
            match self.load().await {
                Ok(Loaded::Ready) => return Ok(()),
                Ok(Loaded::StateRefused(reason)) => {
                    self.hold_on_refused_state(&reason).await?;
                    backoff.succeed();
                }
                Err(e) if e.outcome_unknown() => {
                    let pause = backoff.fail();
                    debug!(error = %e, failures = backoff.failures(), "reading the job's state failed; retrying");
                    tokio::select! {
                        _ = self.term.cancelled() => return Err(Stop::TermOver),
                        _ = tokio::time::sleep(pause) => {}
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
    async fn load(&mut self) -> Result<Loaded> {
        let client = self.inner.session.client()?;
        let state_path = self.state_path();
        // The mtime of the state's last write before this term's: see `plan::state_refused`.
        let mut state_written = i64::MIN;
        match client.get_data(&state_path).await {
            Ok((data, stat)) => {
                self.state_version = stat.version;
                state_written = stat.mtime;
                match JobState::from_bytes(&state_path, &data) {
                    Ok(state) => self.state = state,
                    // Written by someone else: nothing is written over it (the sample below
                    // would be), and no replica should fail on it in turn.
                    Err(e) => return Ok(Loaded::StateRefused(e.to_string())),
                }
            }
            Err(zookeeper_client::Error::NoNode) => {
                // A new job: its cursor is placed on the ensemble's clock once it is sampled.
                let state = JobState {
                    spec: self.inner.schedule.spec(),
                    spec_hash: self.inner.schedule.spec_hash(),
                    cursor_ms: UNPLACED,
                    triggers_done: 0,
                    tzdb: None,
                    records_until_ms: None,
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
        self.records = read_records(&client, &self.inner.path).await?;
        if let Some(reason) = plan::state_refused(&self.state, &self.records, state_written) {
            return Ok(Loaded::StateRefused(format!("{state_path}: {reason}")));
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
        Ok(Loaded::Ready)
    }

    /// `state` is refused ([`Loaded::StateRefused`]): reports it, then keeps the term and waits
    /// for the node to change (an operator's fix: delete it, or write it back), taking up no
    /// slot and writing nothing. Holding the term, rather than giving it up, keeps the other
    /// replicas from taking it up in turn and failing the same way (a churn of terms).
    async fn hold_on_refused_state(&mut self, reason: &str) -> std::result::Result<(), Stop> {
        let state_path = self.state_path();
        error!(
            path = %self.inner.path,
            id = %self.inner.id,
            token = %self.term.token(),
            node = %state_path,
            reason,
            "the job's state is refused: this leader keeps its term, takes up no slot and deletes nothing until the node changes (the runbook's fix: delete the state node, or write it back)"
        );
        self.emit(JobEvent::StateRefused {
            reason: reason.to_owned(),
        });
        let client = self.inner.session.client()?;
        let refused_version = self.state_version;
        let mut backoff = Backoff::new(TICK);
        loop {
            let watcher = match client.get_and_watch_data(&state_path).await {
                Ok((_, stat, watcher)) => {
                    if stat.version != refused_version {
                        return Ok(());
                    }
                    watcher
                }
                // Deleted (the operator's fix): the reload creates a new job's state.
                Err(zookeeper_client::Error::NoNode) => return Ok(()),
                Err(e) => {
                    let e = Error::from(e);
                    if !e.outcome_unknown() {
                        return Err(e.into());
                    }
                    tokio::select! {
                        _ = self.term.cancelled() => return Err(Stop::TermOver),
                        _ = tokio::time::sleep(backoff.fail()) => continue,
                    }
                }
            };
            tokio::select! {
                _ = self.term.cancelled() => return Err(Stop::TermOver),
                _ = watcher.changed() => return Ok(()),
            }
        }
    }

    /// Triggers the leader does not run ([`plan::refused_triggers`]): recorded taken up
    /// (`triggers_done`, fenced, compare-and-set on `state`), so that they are refused once
    /// and the next trigger an operator adds runs as usual. `control` itself is left as the
    /// operators wrote it.
    async fn refuse_triggers(
        &mut self,
        refusal: plan::TriggerRefusal,
    ) -> std::result::Result<(), Stop> {
        let control_path = path::join(&self.inner.path, "control");
        let reason = format!("{control_path}: {}", refusal.reason);
        error!(
            path = %self.inner.path,
            id = %self.inner.id,
            token = %self.term.token(),
            node = %control_path,
            triggers = self.control.triggers,
            triggers_done = self.state.triggers_done,
            up_to = refusal.up_to,
            reason = %refusal.reason,
            "refused the job's triggers: they are recorded taken up and not run"
        );
        let mut next = self.state.clone();
        next.triggers_done = next.triggers_done.max(refusal.up_to);
        self.write_state(next, Vec::new()).await?;
        self.queue
            .retain(|w| w.trigger.is_none_or(|n| n == 0 || n > refusal.up_to));
        self.emit(JobEvent::ControlRefused { reason });
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
                    match Control::from_bytes(&control_path, &data) {
                        Ok(control) => self.control = control,
                        Err(e) => {
                            // Not the operators' tools' data: the controls read before (the
                            // defaults at a term's start) stay in force, and the job goes on.
                            error!(path = %self.inner.path, id = %self.inner.id, node = %control_path, error = %e, "the job's control node does not parse: it is ignored until it changes");
                            self.emit(JobEvent::ControlRefused {
                                reason: e.to_string(),
                            });
                        }
                    }
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
        let now = self.now();
        record.end_attempt(AttemptEnd {
            outcome: AttemptOutcome::CutOff,
            ended_ms: now,
            exit_code: None,
            error: None,
            found: Some((self.inner.id.clone(), self.term.token().get())),
        });
        record.state = state;
        record.reason = Some(reason.to_owned());
        record.ended_ms = Some(now);
        let results = self
            .fenced(vec![FencedOp::SetData {
                path: self.slot_path(key),
                data: record.to_bytes(),
                version: Some(version),
            }])
            .await?;
        self.remember(key, record, new_version(&results, 0));
        info!(slot = %key, token = %self.term.token(), outcome = state.as_str(), reason, "slot settled");
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

    /// Draining ([`ScheduledJob::drain`](super::ScheduledJob::drain)): nothing more to do in this
    /// term but wait for the close to end it.
    async fn idle_until_term_ends(&mut self) -> std::result::Result<(), Stop> {
        debug!("draining: this term starts no more slots");
        self.term.cancelled().await;
        Err(Stop::TermOver)
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
    e.outcome_unknown()
        || matches!(
            e,
            Error::Zookeeper(Zk::BadVersion | Zk::NodeExists | Zk::NoNode)
        )
}
