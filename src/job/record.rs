//! What a scheduled job keeps in ZooKeeper: one record per slot, the leader's cursor, and the
//! operators' controls. JSON, so that `zkr cron history` and people can read them.

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
    /// `started_ms`; for a slot an operator resolved, the operator's wall clock).
    pub ended_ms: Option<i64>,
    /// The exit code of the job's command (`zkr cron run`), when it reported one.
    pub exit_code: Option<i32>,
    /// Why it was skipped, missed, failed without running, parked or pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The job's error message, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The slots a missed record stands for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<SlotRange>,
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
}

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
