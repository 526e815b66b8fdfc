//! What a scheduled job keeps in ZooKeeper: one record per slot, the leader's cursor, and the
//! operators' controls. JSON, so that `zkr cron history` and people can read them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Where a slot stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SlotState {
    /// Claimed: a runner started it (`token`, `attempt`, `runner`, `started_ms`) and has not
    /// recorded an end. Found by a later leader, it was cut off (crash, lost term).
    Running,
    /// The job returned success.
    Succeeded,
    /// The job failed, or the slot was cut off and not retried (`reason`).
    Failed,
    /// Not run, on purpose (`reason`: `overlap`, `paused`).
    Skipped,
    /// Not run because it came due while no leader could run it; a record may stand for a
    /// range of slots (`range`).
    Missed,
    /// Cut off and parked (`--on-crash park`): waits for an operator
    /// ([`JobAdmin::resolve`](crate::job::JobAdmin::resolve)).
    Parked,
    /// Waits to be run by the leader: buffered behind a running slot (`reason: buffered`), or
    /// released by an operator (`reason: rerun`).
    Pending,
}

impl SlotState {
    /// The state's name in records and on the command line (`running`, `succeeded`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            SlotState::Running => "running",
            SlotState::Succeeded => "succeeded",
            SlotState::Failed => "failed",
            SlotState::Skipped => "skipped",
            SlotState::Missed => "missed",
            SlotState::Parked => "parked",
            SlotState::Pending => "pending",
        }
    }

    /// Whether the slot is settled: nothing more happens to it unless an operator acts.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            SlotState::Succeeded | SlotState::Failed | SlotState::Skipped | SlotState::Missed
        )
    }
}

/// A folded range of slots that one record stands for (missed after an outage).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRange {
    /// The first slot's key.
    pub from: String,
    /// The last slot's key.
    pub to: String,
    /// How many slots (for a cron schedule counted up to 10,000; `more` tells).
    pub count: u64,
    /// There were more than `count` (a cron schedule's long outage).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub more: bool,
}

/// One slot's record, as stored under `<job>/slots/<slot key>`.
///
/// The fields `zkr cron history` promises are `slot`, `state`, `token`, `attempt`, `runner`,
/// `started_ms`, `ended_ms` and `exit_code`; the others are extras.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SlotRecord {
    /// The slot key: the nominal instant in UTC (`2026-12-03T02:00:00Z`), or `trigger-N` for a
    /// run an operator asked for.
    pub slot: String,
    /// The nominal instant, in milliseconds since the Unix epoch (for a trigger, when it was
    /// taken up).
    pub nominal_ms: i64,
    /// Where it stands.
    pub state: SlotState,
    /// The fencing token of the term that last started it.
    pub token: Option<i64>,
    /// How many times it was started (0 when never).
    pub attempt: u32,
    /// The participant id of the replica that last started it.
    pub runner: Option<String>,
    /// When it was last started, in milliseconds since the Unix epoch by the ensemble's clock
    /// (the leader's estimate from the `mtime` of its writes, which is never ahead of it).
    pub started_ms: Option<i64>,
    /// When it ended, was settled or was recorded skipped or missed (the ensemble's clock, as
    /// `started_ms`; for a slot an operator resolved, read by a write to the job's `clock`
    /// node, see [`JobAdmin::ensemble_now`](crate::job::JobAdmin::ensemble_now)).
    pub ended_ms: Option<i64>,
    /// The exit code of the job's command (`zkr cron run`), when it reported one.
    pub exit_code: Option<i32>,
    /// Why it was skipped, missed, failed without running, parked or pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The job's error message, when it failed, cut at [`MAX_ATTEMPT_ERROR`] bytes (at a
    /// character boundary, ending in `…` when cut).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The slots a missed record stands for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<SlotRange>,
    /// Every attempt of the slot, oldest first: who ran it, with which token, when, and how it
    /// ended. The first attempt and the newest ones are kept, at most [`MAX_ATTEMPT_RECORDS`]
    /// (`attempts_dropped` counts the ones left out between them). Empty in a record that an
    /// earlier version wrote (its top-level fields describe its last attempt).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<AttemptRecord>,
    /// How many attempts were left out of `attempts` to keep the record small.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts_dropped: u32,
    /// How many of the slot's attempts returned an error (a non-zero exit of `zkr cron run`'s
    /// command): what the retries on failure
    /// ([`ScheduledJobBuilder::retries`](crate::job::ScheduledJobBuilder::retries)) are counted
    /// against. `attempt - failures` is how many were cut off.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failures: u32,
    /// For a trigger an operator gave a slot key ([`TriggerFor::slot`]): that slot's key. The
    /// run's nominal instant is that slot's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_slot: Option<String>,
    /// For a trigger an operator gave a business date ([`TriggerFor::date`]): the date,
    /// `YYYY-MM-DD`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub business_date: Option<String>,
}

/// The most attempts a slot record lists ([`SlotRecord::attempts`]): the first and the newest
/// ones. With errors cut at [`MAX_ATTEMPT_ERROR`] bytes, the list stays under about 20 KB (plus
/// the runner ids), far below ZooKeeper's 1 MB limit on a node's data (`jute.maxbuffer`).
pub const MAX_ATTEMPT_RECORDS: usize = 20;

/// How many bytes of a job's error an attempt keeps (cut at a character boundary).
pub const MAX_ATTEMPT_ERROR: usize = 512;

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// How one attempt of a slot ended ([`AttemptRecord::outcome`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// Started, no end recorded yet: the attempt in progress (or, found by a later leader, one
    /// that was cut off and not yet looked at).
    Running,
    /// The job returned success (`zkr cron run`: exit code 0).
    Succeeded,
    /// The job returned an error (`zkr cron run`: a non-zero exit, `exit_code`; the text in
    /// `error`).
    Failed,
    /// Its end was never recorded: a later leader (`found_by`, `found_token`) found it
    /// `running`. Its runner crashed, froze past its session, lost its connection, or its
    /// term ended (a close, a drain that ran out) before the end could be written.
    CutOff,
    /// An outcome a newer version wrote.
    #[serde(other)]
    Unknown,
}

/// One attempt of a slot, as [`SlotRecord::attempts`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AttemptRecord {
    /// Which attempt (1 for the first start).
    pub attempt: u32,
    /// The fencing token of the term that started it.
    pub token: Option<i64>,
    /// The participant id of the replica that ran it.
    pub runner: Option<String>,
    /// When it started (the ensemble's clock, as [`SlotRecord::started_ms`]).
    pub started_ms: Option<i64>,
    /// When it ended, or when a later leader found it cut off.
    pub ended_ms: Option<i64>,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The exit code the job reported (`zkr cron run`: its command's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The job's error, cut at [`MAX_ATTEMPT_ERROR`] bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For a cut-off attempt: the participant id of the leader that found it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found_by: Option<String>,
    /// For a cut-off attempt: the token of the term that found it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found_token: Option<i64>,
}

/// How an attempt ended, for [`SlotRecord::end_attempt`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AttemptEnd {
    pub(crate) outcome: AttemptOutcome,
    pub(crate) ended_ms: i64,
    pub(crate) exit_code: Option<i32>,
    pub(crate) error: Option<String>,
    /// A cut-off attempt: who found it, with which token.
    pub(crate) found: Option<(String, i64)>,
}

/// What an operator's trigger is for ([`JobAdmin::trigger_for`](crate::job::JobAdmin::trigger_for)):
/// nothing in particular (a plain trigger), one slot of the schedule, or a business date.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TriggerFor {
    /// A slot key of the job's schedule (`2026-12-03T01:00:00Z`): the run's nominal instant
    /// is that slot's ([`SlotRun::nominal`](crate::job::SlotRun::nominal)), and
    /// [`SlotRun::for_slot`](crate::job::SlotRun::for_slot) names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    /// A business date, `YYYY-MM-DD`
    /// ([`SlotRun::business_date`](crate::job::SlotRun::business_date)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<String>,
}

impl TriggerFor {
    /// A trigger for the slot with key `slot` ([`Schedule::key`](crate::job::Schedule::key)).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `slot` is not a slot key (an instant in UTC, RFC 3339).
    pub fn slot(slot: &str) -> Result<TriggerFor> {
        if crate::job::Schedule::parse_key(slot).is_none() {
            return Err(Error::InvalidArgument {
                what: "trigger slot",
                reason: format!(
                    "{slot:?} is not a slot key (an instant in UTC, RFC 3339, as `history` prints it: 2026-12-03T01:00:00Z)"
                ),
            });
        }
        Ok(TriggerFor {
            slot: Some(slot.to_owned()),
            date: None,
        })
    }

    /// A trigger for the business date `date` (`YYYY-MM-DD`, a date of the proleptic Gregorian
    /// calendar).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `date` is not such a date.
    pub fn date(date: &str) -> Result<TriggerFor> {
        if chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d").is_err() || date.len() != 10 {
            return Err(Error::InvalidArgument {
                what: "trigger date",
                reason: format!("{date:?} is not a date YYYY-MM-DD"),
            });
        }
        Ok(TriggerFor {
            slot: None,
            date: Some(date.to_owned()),
        })
    }

    /// Whether it names neither a slot nor a date.
    pub fn is_plain(&self) -> bool {
        self.slot.is_none() && self.date.is_none()
    }
}

impl SlotRecord {
    /// A record of a slot that was not started (skipped, missed, pending).
    pub(crate) fn not_run(
        slot: &str,
        nominal_ms: i64,
        state: SlotState,
        reason: &str,
        now_ms: i64,
    ) -> Self {
        SlotRecord {
            slot: slot.to_owned(),
            nominal_ms,
            state,
            token: None,
            attempt: 0,
            runner: None,
            started_ms: None,
            ended_ms: (state != SlotState::Pending).then_some(now_ms),
            exit_code: None,
            reason: Some(reason.to_owned()),
            error: None,
            range: None,
            attempts: Vec::new(),
            attempts_dropped: 0,
            failures: 0,
            for_slot: None,
            business_date: None,
        }
    }

    /// Lists the attempt the top-level fields now describe (just claimed) as running.
    pub(crate) fn begin_attempt(&mut self) {
        self.attempts.push(AttemptRecord {
            attempt: self.attempt,
            token: self.token,
            runner: self.runner.clone(),
            started_ms: self.started_ms,
            ended_ms: None,
            outcome: AttemptOutcome::Running,
            exit_code: None,
            error: None,
            found_by: None,
            found_token: None,
        });
        self.bound_attempts();
    }

    /// Records how the current attempt (the top-level `attempt`) ended. A record an earlier
    /// version wrote has no list: its attempt is listed from the top-level fields first.
    pub(crate) fn end_attempt(&mut self, end: AttemptEnd) {
        let current = self.attempt;
        let listed = self
            .attempts
            .last()
            .is_some_and(|a| a.attempt == current && a.outcome == AttemptOutcome::Running);
        if !listed {
            self.begin_attempt();
        }
        if let Some(a) = self.attempts.last_mut() {
            a.ended_ms = Some(end.ended_ms);
            a.outcome = end.outcome;
            a.exit_code = end.exit_code;
            a.error = end.error.map(|e| cut(&e, MAX_ATTEMPT_ERROR));
            if let Some((by, token)) = end.found {
                a.found_by = Some(by);
                a.found_token = Some(token);
            }
        }
    }

    /// Records the job's error of the last attempt, cut at [`MAX_ATTEMPT_ERROR`] bytes as an
    /// attempt's is: a command that fails with megabytes of output must not push the record
    /// past ZooKeeper's limit on a node (`jute.maxbuffer`), which would make the end unwritable.
    pub(crate) fn set_error(&mut self, error: Option<&str>) {
        self.error = error.map(|e| cut(e, MAX_ATTEMPT_ERROR));
    }

    /// Keeps the first attempt and the newest ones, at most [`MAX_ATTEMPT_RECORDS`].
    fn bound_attempts(&mut self) {
        while self.attempts.len() > MAX_ATTEMPT_RECORDS {
            self.attempts.remove(1);
            self.attempts_dropped = self.attempts_dropped.saturating_add(1);
        }
    }

    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub(crate) fn from_bytes(path: &str, bytes: &[u8]) -> Result<Self> {
        serde_json::from_slice(bytes).map_err(|e| corrupt(path, &e))
    }
}

/// The leader's own record of the job, under `<job>/state`: written only by the leader, in the
/// same fenced multi as the slot records it covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JobState {
    /// The schedule's canonical text ([`Schedule::spec`](crate::job::Schedule::spec)).
    pub spec: String,
    /// Its hash: a leader with another schedule sees the change.
    pub spec_hash: String,
    /// Every slot at or before this instant has a record, or was folded into a missed range, or
    /// belonged to a schedule that was replaced.
    pub cursor_ms: i64,
    /// Operator triggers taken up so far (`trigger-1` ... `trigger-N`).
    #[serde(default)]
    pub triggers_done: u64,
    /// The IANA tzdata release the last leader computed a cron schedule's slots with
    /// (chrono-tz's `IANA_TZDB_VERSION`); a leader built with another one warns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tzdb: Option<String>,
    /// Where a cursor found beyond the ensemble's time stood before a leader brought it back
    /// ([`JobEvent::CursorRewound`](crate::job::JobEvent::CursorRewound)): the records up to
    /// it are the job's, written under that cursor, though beyond the cursor now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records_until_ms: Option<i64>,
}

/// The cursor of a new job whose first leader has not yet placed it on the ensemble's clock:
/// the create of `state` comes before the write that samples the clock. The next leader to
/// load it places it at the newest slot at or before the ensemble's now; nothing is due before
/// that.
pub(crate) const UNPLACED: i64 = i64::MAX;

impl JobState {
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub(crate) fn from_bytes(path: &str, bytes: &[u8]) -> Result<Self> {
        serde_json::from_slice(bytes).map_err(|e| corrupt(path, &e))
    }
}

/// The operators' controls, under `<job>/control`: written by anyone (`zkr cron pause`,
/// `trigger`, `resolve`), read by the leader through a watch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Control {
    /// Due slots are recorded skipped (`paused`) instead of run.
    #[serde(default)]
    pub paused: bool,
    /// Triggers asked for so far.
    #[serde(default)]
    pub triggers: u64,
    /// What a trigger is for, by its number, when an operator said (a slot key, a business
    /// date). Kept for the newest [`TRIGGER_ARGS_KEPT`] triggers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub trigger_for: BTreeMap<u64, TriggerFor>,
}

/// How many triggers' [`Control::trigger_for`] entries an operator's write keeps.
pub(crate) const TRIGGER_ARGS_KEPT: u64 = 100;

impl Control {
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub(crate) fn from_bytes(path: &str, bytes: &[u8]) -> Result<Self> {
        if bytes.is_empty() {
            return Ok(Control::default());
        }
        serde_json::from_slice(bytes).map_err(|e| corrupt(path, &e))
    }
}

fn corrupt(path: &str, e: &serde_json::Error) -> Error {
    Error::InvalidArgument {
        what: "scheduled job record",
        reason: format!("{path} does not hold a record this crate wrote: {e}"),
    }
}

/// `text` cut to at most `max` bytes, at a character boundary, with `…` when cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The key of the `n`th operator trigger.
pub(crate) fn trigger_key(n: u64) -> String {
    format!("trigger-{n}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_serialises_the_fields_history_promises() {
        let mut r =
            SlotRecord::not_run("2026-12-03T02:00:00Z", 5, SlotState::Skipped, "overlap", 7);
        r.token = Some(42);
        let v: serde_json::Value = serde_json::from_slice(&r.to_bytes()).unwrap();
        for field in [
            "slot",
            "state",
            "token",
            "attempt",
            "runner",
            "started_ms",
            "ended_ms",
            "exit_code",
        ] {
            assert!(v.get(field).is_some(), "{field} missing in {v}");
        }
        assert_eq!(v["state"], "skipped");
        assert_eq!(v["reason"], "overlap");
        assert_eq!(SlotRecord::from_bytes("/x", &r.to_bytes()).unwrap(), r);
    }

    #[test]
    fn a_record_of_an_earlier_version_parses_and_its_attempt_is_listed_when_it_ends() {
        // As an earlier version wrote it: no `attempts`, `failures`, `for_slot`.
        let old = br#"{"slot":"2026-12-03T01:00:00Z","nominal_ms":5,"state":"running","token":7,
            "attempt":1,"runner":"old","started_ms":6,"ended_ms":null,"exit_code":null}"#;
        let mut r = SlotRecord::from_bytes("/x", old).unwrap();
        assert!(r.attempts.is_empty());
        assert_eq!(r.failures, 0);
        r.end_attempt(AttemptEnd {
            outcome: AttemptOutcome::CutOff,
            ended_ms: 9,
            exit_code: None,
            error: None,
            found: Some(("new".into(), 8)),
        });
        assert_eq!(r.attempts.len(), 1);
        let a = &r.attempts[0];
        assert_eq!(
            (
                a.attempt,
                a.token,
                a.runner.as_deref(),
                a.started_ms,
                a.ended_ms
            ),
            (1, Some(7), Some("old"), Some(6), Some(9))
        );
        assert_eq!(
            (a.found_by.as_deref(), a.found_token),
            (Some("new"), Some(8))
        );
        // A record without the new fields serialises as before; an outcome a newer version
        // wrote still parses.
        let plain = SlotRecord::not_run("k", 1, SlotState::Skipped, "overlap", 2);
        let v: serde_json::Value = serde_json::from_slice(&plain.to_bytes()).unwrap();
        for field in [
            "attempts",
            "attempts_dropped",
            "failures",
            "for_slot",
            "business_date",
        ] {
            assert!(v.get(field).is_none(), "{field} in {v}");
        }
        let newer = br#"{"slot":"k","nominal_ms":1,"state":"failed","token":1,"attempt":1,
            "runner":"a","started_ms":1,"ended_ms":2,"exit_code":null,
            "attempts":[{"attempt":1,"token":1,"runner":"a","started_ms":1,"ended_ms":2,
            "outcome":"timed_out"}]}"#;
        let r = SlotRecord::from_bytes("/x", newer).unwrap();
        assert_eq!(r.attempts[0].outcome, AttemptOutcome::Unknown);
    }

    #[test]
    fn the_attempts_list_keeps_the_first_and_the_newest_and_cuts_long_errors() {
        let mut r = SlotRecord::not_run("k", 1, SlotState::Running, "", 0);
        for n in 1..=50u32 {
            r.attempt = n;
            r.token = Some(i64::from(n));
            r.begin_attempt();
            r.end_attempt(AttemptEnd {
                outcome: AttemptOutcome::Failed,
                ended_ms: i64::from(n),
                exit_code: Some(1),
                error: Some("é".repeat(10_000)),
                found: None,
            });
        }
        assert_eq!(r.attempts.len(), MAX_ATTEMPT_RECORDS);
        assert_eq!(r.attempts_dropped, 50 - MAX_ATTEMPT_RECORDS as u32);
        assert_eq!(r.attempts[0].attempt, 1);
        assert_eq!(r.attempts[1].attempt, 32);
        assert_eq!(r.attempts.last().map(|a| a.attempt), Some(50));
        assert!(r.attempts.iter().all(|a| {
            a.error
                .as_ref()
                .is_some_and(|e| e.len() <= MAX_ATTEMPT_ERROR)
        }));
        // The bound on the record's size that the spec promises.
        r.runner = Some("x".repeat(200));
        assert!(
            r.to_bytes().len() < 20 * 1024 + 20_000,
            "{}",
            r.to_bytes().len()
        );
    }

    #[test]
    fn the_records_own_error_is_cut_as_an_attempts_error_is() {
        let mut r = SlotRecord::not_run("k", 1, SlotState::Running, "", 0);
        let long = "é".repeat(10_000);
        r.set_error(Some(&long));
        let kept = r.error.clone().unwrap_or_default();
        assert!(kept.len() <= MAX_ATTEMPT_ERROR, "{} bytes", kept.len());
        assert!(kept.ends_with('…') && long.starts_with(kept.trim_end_matches('…')));
        r.set_error(Some("exit 5"));
        assert_eq!(r.error.as_deref(), Some("exit 5"));
        r.set_error(None);
        assert_eq!(r.error, None);
    }

    #[test]
    fn garbage_is_a_typed_error_and_an_empty_control_is_the_default() {
        assert!(matches!(
            SlotRecord::from_bytes("/x", b"{"),
            Err(Error::InvalidArgument { .. })
        ));
        assert_eq!(Control::from_bytes("/c", b"").unwrap(), Control::default());
        assert!(SlotState::Missed.is_final());
        assert!(!SlotState::Parked.is_final());
    }
}
