//! One slot's run within a term: the claim, the job's task, the slots that come due meanwhile
//! (overlap), the record of its end, and the history kept.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::{Instrument, debug, error, info, info_span, warn};

use super::{Stop, TICK, TermRun, new_version};
use crate::error::Backoff;
use crate::fencing::{FencedOp, FencingToken};
use crate::job::plan::{self, OverlapPlan, PendingReason, RunEnd, Work};
use crate::job::record::{AttemptEnd, AttemptOutcome};
use crate::job::{
    AbortOnDrop, JobEvent, RunningSlot, Schedule, SlotJob, SlotRecord, SlotRun, SlotState,
};

/// How many times a slot's end is written before the term gives up on it (each lost reply is
/// looked at before the next write).
const MAX_END_ATTEMPTS: u32 = 20;

/// The reason of the [`JobEvent::SlotAbandoned`] of a slot whose run was not started because
/// its term ended after the claim.
const NOT_STARTED: &str = "the term ended after the claim, before the run started";

impl TermRun<'_> {
    /// Claims a slot, runs the job, records the end; with retries on failure, runs it again
    /// within the slot after each failure, while the budget lasts.
    pub(super) async fn run_slot<J: SlotJob>(
        &mut self,
        job: &Arc<J>,
        work: Work,
    ) -> std::result::Result<(), Stop> {
        let Some(_running) = RunningSlot::enter(self.inner) else {
            return self.idle_until_term_ends().await;
        };
        let key = work.key.clone();
        let mut work = work;
        let result = loop {
            match self.run_attempt(job, &work).await {
                Ok(Some(backoff)) => {
                    let draining = self.inner.activity.borrow().draining;
                    if !draining && let Err(stop) = self.wait_to_retry(&work.key, backoff).await {
                        break Err(stop);
                    }
                    if self.inner.activity.borrow().draining {
                        // A drain starts nothing: the retry stays `pending` for the next leader.
                        info!(slot = %work.key, token = %self.term.token(), "draining: the retry is left to the next leader");
                        break Ok(());
                    }
                    work = Work {
                        attempt: work.attempt.saturating_add(1),
                        recovering: true,
                        ..work
                    };
                }
                Ok(None) => break Ok(()),
                Err(stop) => break Err(stop),
            }
        };
        // A control change during the run may have queued this slot's `pending` record.
        self.queue.retain(|w| w.key != key);
        self.run_started = None;
        self.run_late = false;
        result
    }

    /// One attempt of a slot: the claim, the run, the record of its end. `Some(backoff)` when
    /// the run failed and is to be retried after `backoff` (the record is `pending`, `retry`).
    async fn run_attempt<J: SlotJob>(
        &mut self,
        job: &Arc<J>,
        work: &Work,
    ) -> std::result::Result<Option<Duration>, Stop> {
        let token = self.term.token();
        let key = work.key.clone();
        let mut existing = self.records.get(&key).cloned();
        if let Some((r, version)) = &existing
            && r.state.is_final()
            && plan::foreign_final(&self.state, work)
        {
            // Not the job's: it writes a record only with the cursor (or the trigger count)
            // that covers it. The slot is claimed over it (its version guards the write) and
            // runs; the record's text is in the log.
            let found = String::from_utf8_lossy(&r.to_bytes()).into_owned();
            let reason = format!(
                "{}: a {} record the job did not write (token {:?}, runner {:?}), beyond the job's cursor {} (or its trigger count {}): it suppresses nothing, the slot is run",
                self.slot_path(&key),
                r.state.as_str(),
                r.token,
                r.runner,
                Schedule::key(self.state.cursor_ms),
                self.state.triggers_done
            );
            error!(path = %self.inner.path, id = %self.inner.id, slot = %key, node = %self.slot_path(&key), record = %found, "refused a slot record the job did not write");
            self.emit(JobEvent::RecordRefused {
                slot: key.clone(),
                reason,
            });
            let fresh = SlotRecord::not_run(&key, work.nominal_ms, SlotState::Running, "", 0);
            existing = Some((fresh, *version));
        }
        if let Some((r, _)) = &existing
            && r.state.is_final()
        {
            // Settled meanwhile (an operator, an earlier pass): nothing to run.
            if let Some(cursor) = plan::cursor_past_settled(&self.state, work) {
                let mut next = self.state.clone();
                next.cursor_ms = cursor;
                self.write_state(next, Vec::new()).await?;
            }
            return Ok(None);
        }
        let now = self.now();
        let mut record = match &existing {
            Some((r, _)) => r.clone(),
            None => SlotRecord::not_run(&key, work.nominal_ms, SlotState::Running, "", now),
        };
        // (A foreign record's replacement is `running` with no attempt: nothing to end.)
        if existing.is_some() && record.state == SlotState::Running && record.attempt > 0 {
            // Cut off in an earlier term: its attempt ends here, found by this term.
            record.end_attempt(AttemptEnd {
                outcome: AttemptOutcome::CutOff,
                ended_ms: now,
                exit_code: None,
                error: None,
                found: Some((self.inner.id.clone(), token.get())),
            });
        }
        let was_buffered = record.state == SlotState::Pending
            && PendingReason::of(&record) == Some(PendingReason::Buffered);
        record.slot = key.clone();
        record.nominal_ms = work.nominal_ms;
        record.state = SlotState::Running;
        record.token = Some(token.get());
        record.attempt = work.attempt;
        record.runner = Some(self.inner.id.clone());
        record.started_ms = Some(now);
        record.ended_ms = None;
        record.exit_code = None;
        record.reason = None;
        record.error = None;
        record.range = None;
        if let Some(n) = work.trigger.filter(|&n| n > 0)
            && let Some(asked) = self.control.trigger_for.get(&n)
        {
            record.for_slot = asked.slot.clone();
            record.business_date = asked.date.clone();
        }
        record.begin_attempt();
        let claim = match &existing {
            Some((_, version)) => FencedOp::SetData {
                path: self.slot_path(&key),
                data: record.to_bytes(),
                version: Some(*version),
            },
            None => FencedOp::create(self.slot_path(&key), record.to_bytes()),
        };
        let next = plan::claim(&self.state, work);
        let results = self.write_state(next, vec![claim]).await?;
        let version = match &existing {
            Some(_) => new_version(&results, 0),
            None => Some(0),
        };
        self.remember(&key, record.clone(), version);
        if self.buffered && was_buffered {
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
        // The claim's sample of the ensemble's clock is checked before anything acts on it:
        // after a step the run is not started (the slot stays `running` for the next term).
        if self.clock_step.is_some() {
            self.emit(JobEvent::SlotAbandoned {
                slot: key.clone(),
                token,
                reason: "the ensemble's clock stepped at the claim".to_owned(),
            });
            return Err(self.check_step().err().unwrap_or(Stop::TermOver));
        }
        // Room for the new record within the history limit.
        self.prune().await;
        // The claim's reply, the wait for the slot's instant and the pruning all took time in
        // which the term may have ended (a round trip during a partition lasts as long as the
        // term has left). A run starts only in its holder's valid term: checked here, at the
        // moment it starts, which is the instant the run reports (`SlotRun::started_at`; read
        // before the check, so the term was valid then). A run that would start late is not
        // started: the claim stays `running`, and the next holder takes the slot up as cut
        // off, with its own token (issue 41: trial seeds 7 and 10 under load).
        let started_at = self.term.clock().now();
        if !self.term.is_valid() {
            warn!(slot = %key, token = %token, attempt = work.attempt, "the term ended between the slot's claim and its run's start: the run was not started, and the slot stays running for the next leader");
            self.emit(JobEvent::SlotAbandoned {
                slot: key.clone(),
                token,
                reason: NOT_STARTED.to_owned(),
            });
            return Err(Stop::TermOver);
        }
        info!(slot = %key, token = %token, attempt = work.attempt, recovering = work.recovering, runner = %self.inner.id, "slot started");
        self.emit(JobEvent::SlotStarted {
            slot: key.clone(),
            token,
            attempt: work.attempt,
            recovering: work.recovering,
        });

        let exit_code = Arc::new(Mutex::new(None));
        let run = SlotRun {
            slot: key.clone(),
            nominal_ms: record
                .for_slot
                .as_deref()
                .and_then(Schedule::parse_key)
                .unwrap_or(work.nominal_ms),
            attempt: work.attempt,
            recovering: work.recovering,
            triggered: work.trigger.is_some(),
            for_slot: record.for_slot.clone(),
            business_date: record.business_date.clone(),
            term: self.term.clone(),
            started_at,
            exit_code: Arc::clone(&exit_code),
        };
        let started = self.now();
        // A retry keeps the first attempt's start: its slots came due during the slot's run.
        if self.run_started.is_none() {
            self.run_started = Some((started, self.term.clock().now()));
        }
        self.run_late = plan::started_late(
            &self.inner.schedule,
            work.trigger.is_none().then_some(work.nominal_ms),
            work.recovering,
            started,
        );
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
        let retry = self.finish(&key, token, end, code).await?;
        if returned {
            // Slots that came due in the last moments of the run overlapped it too.
            self.overlap().await?;
        }
        Ok(retry)
    }

    /// Waits out the backoff before a retry on failure, applying the overlap policy to the
    /// slots that come due meanwhile (the slot's run goes on) and following the controls. A
    /// drain ends the wait at once (the caller then leaves the retry to the next leader).
    async fn wait_to_retry(
        &mut self,
        key: &str,
        backoff: Duration,
    ) -> std::result::Result<(), Stop> {
        let until = tokio::time::Instant::now() + backoff;
        let mut activity = self.inner.activity.subscribe();
        debug!(slot = %key, backoff = ?backoff, "waiting to retry the slot");
        loop {
            let control_changed = Arc::clone(&self.control_changed);
            tokio::select! {
                biased;
                _ = self.term.cancelled() => return Err(Stop::TermOver),
                // (The watch's guard is not `Send`: dropped inside.)
                () = async { drop(activity.wait_for(|a| a.draining).await) } => return Ok(()),
                _ = tokio::time::sleep_until(until) => return Ok(()),
                _ = control_changed.notified() => {
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
        }
    }

    /// How long until the next slot after the cursor comes due by the ensemble's clock, at most
    /// [`TICK`].
    pub(super) fn until_next_slot(&self) -> Duration {
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
    pub(super) async fn overlap(&mut self) -> std::result::Result<(), Stop> {
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
            late_start: self.run_started.is_some() && self.run_late,
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
    /// A run that returned an error, with retries on failure left, is recorded `pending`
    /// (`retry`) instead: `Some(backoff)`, the wait before the retry.
    pub(super) async fn finish(
        &mut self,
        key: &str,
        token: FencingToken,
        end: RunEnd,
        exit_code: Option<i32>,
    ) -> std::result::Result<Option<Duration>, Stop> {
        let returned_err = matches!(&end, RunEnd::Returned(Err(_)));
        let cut_off = matches!(&end, RunEnd::CutOff);
        let (state, error) = plan::outcome(end);
        let mut backoff = Backoff::new(TICK);
        loop {
            let Some((mut record, version)) = self.records.get(key).cloned() else {
                return Ok(None);
            };
            let now = self.now();
            let failures = if returned_err {
                record.failures.saturating_add(1)
            } else {
                record.failures
            };
            // Also while draining: the retry is then left `pending` to the next leader.
            let retry = returned_err
                && self.term.is_valid()
                && plan::retry_on_failure(self.inner.policies.retries, failures);
            record.end_attempt(AttemptEnd {
                outcome: match (cut_off, state) {
                    (true, _) => AttemptOutcome::CutOff,
                    (false, SlotState::Succeeded) => AttemptOutcome::Succeeded,
                    (false, _) => AttemptOutcome::Failed,
                },
                ended_ms: now,
                exit_code,
                error: error.clone(),
                found: None,
            });
            record.failures = failures;
            record.exit_code = exit_code;
            record.set_error(error.as_deref());
            if retry {
                record.state = SlotState::Pending;
                record.reason = Some(PendingReason::Retry.as_str().to_owned());
                record.ended_ms = None;
            } else {
                record.state = state;
                record.ended_ms = Some(now);
            }
            let attempt = record.attempt;
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
                    if retry {
                        let wait = self.inner.policies.retry_backoff;
                        warn!(slot = %key, token = %token, attempt, failures, exit_code, backoff = ?wait, error = error.as_deref().unwrap_or(""), "slot failed; retrying it");
                        self.emit(JobEvent::SlotRetrying {
                            slot: key.to_owned(),
                            attempt,
                            failures,
                            backoff: wait,
                            error: error.unwrap_or_default(),
                        });
                        return Ok(Some(wait));
                    }
                    info!(slot = %key, token = %token, attempt, outcome = state.as_str(), exit_code, "slot finished");
                    self.emit(JobEvent::SlotFinished {
                        slot: key.to_owned(),
                        outcome: state,
                        exit_code,
                        reason: error,
                    });
                    self.prune().await;
                    return Ok(None);
                }
                Err(e) if e.outcome_unknown() && backoff.failures() + 1 < MAX_END_ATTEMPTS => {
                    let pause = backoff.fail();
                    // The reply was lost: see what the record says now, and write again if it
                    // is still ours and running.
                    debug!(slot = %key, error = %e, "recording the slot's end failed; retrying");
                    tokio::select! {
                        _ = self.term.cancelled() => {}
                        _ = tokio::time::sleep(pause) => {}
                    }
                    if let Ok(client) = self.inner.session.client()
                        && let Ok((data, stat)) = client.get_data(&self.slot_path(key)).await
                        && let Ok(now) = SlotRecord::from_bytes(key, &data)
                    {
                        let still_ours =
                            now.state == SlotState::Running && now.token == Some(token.get());
                        self.remember(key, now, Some(stat.version));
                        if !still_ours {
                            // Landed (or taken over): a `pending` retry is queued for this
                            // term's loop.
                            self.queue_pending();
                            return Ok(None);
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
    pub(super) async fn prune(&mut self) {
        let limit = self.inner.policies.history_limit;
        // Deleting by age needs a sample of the ensemble's clock that the one before it
        // confirmed: a step (a quorum leader 40 days ahead) must not make the whole history
        // "old" (issue 43). The count limit does not depend on the clock.
        let max_age = if self.ensemble.confirmed() && self.clock_step.is_none() {
            i64::try_from(self.inner.policies.history_max_age.as_millis()).unwrap_or(i64::MAX)
        } else {
            i64::MAX
        };
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
