//! Trace validation: a recorded history of a real run (a fault trial's terms, term ends, fenced
//! writes, session expiries, and the scheduled job's runs and slot records) replayed against the
//! model's observable actions.
//!
//! The recorded runs have more participants, more servers and far more time than the model's
//! bounded configuration, so a recorded event is not matched to one state of
//! [`ElectionModel`](crate::ElectionModel). It is matched to the model's *observable* action
//! (`Claim`, `EndTerm`, `Release`, `OwnNodeGone`, `Reconnect`, `SessionExpired`; for the job
//! `JobClaim` and `JobEnd`) and checked against an abstract state driven by the events so far:
//! per election the terms held now, the highest token and who got it; the sessions known
//! expired and the tokens of their nodes; per fenced resource the highest token accepted; per
//! job and slot its runs (holder, attempt, token, term, and how each ended). Each check is one
//! guard, rule or property of the model ([`Check`] names it); `model/README.md` ("Trace
//! validation") says what is and is not checked.
//!
//! The file format is JSON, versioned ([`FORMAT`]): see [`Trace`] and [`Event`]. Format 2 adds
//! the job's events ([`Event::RunStart`], [`Event::RunEnd`], [`Event::SlotRecord`]) to format
//! 1's; this crate reads both ([`READS`]) and writes format 2.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

/// The history file format this crate writes.
pub const FORMAT: u32 = 2;

/// The history file formats this crate reads: format 1 (claims, term ends, writes, expiries,
/// faults) and format 2 (format 1's events and the job's: `run_start`, `run_end`,
/// `slot_record`). A format 1 file with a job event is refused ([`TraceError::NotInFormat`]):
/// a reader of format 1 would not know it.
pub const READS: [u32; 2] = [1, 2];

/// Every event tag (`"event"`), and the first format that has it.
const TAGS: [(&str, u32); 8] = [
    ("claim", 1),
    ("term_end", 1),
    ("write", 1),
    ("session_expired", 1),
    ("fault", 1),
    ("run_start", 2),
    ("run_end", 2),
    ("slot_record", 2),
];

/// One recorded run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trace {
    /// The format version: [`FORMAT`].
    pub format: u32,
    /// What recorded it (for example `"fault trial"`).
    #[serde(default)]
    pub source: String,
    /// The trial's seed, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The contenders' session timeout, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_timeout_ms: Option<u64>,
    /// The events, in the order of their instants (`at_ns`); events at one instant in the
    /// order they happened (a run's end before its term's end, a term's end before a claim at
    /// the same instant, a claim before a run in its term, a resource's writes in arrival
    /// order). A term's end is never placed before its claim, nor a run's end before its start.
    pub events: Vec<Event>,
}

/// One recorded event. Instants are nanoseconds of the machine's `CLOCK_BOOTTIME` (the
/// recorder's `BootTime`), comparable across the run's processes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A term (or a lock hold) began: the model's `Claim` (or the claim in `PredDeleted`).
    Claim {
        /// When it began (the term's start).
        at_ns: u64,
        /// The election (or lock) it belongs to.
        election: String,
        /// The participant that holds it.
        holder: String,
        /// Its fencing token.
        token: i64,
        /// The ZooKeeper session that won it, when the recorder knows it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<i64>,
        /// The term's lease deadline as first seen by the recorder (never earlier than the
        /// deadline at the claim: a lease only moves forward), when it knows it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lease_ns: Option<u64>,
    },
    /// A term stopped being valid: when it was ended, or its deadline if that came first.
    TermEnd {
        /// When it stopped being valid.
        at_ns: u64,
        /// Its election.
        election: String,
        /// Its holder.
        holder: String,
        /// Its token.
        token: i64,
        /// Why it ended (the library's `TermEnd` names: `suspended`, `lost`, `read_only`,
        /// `node_deleted`, `deadline_passed`, `closed`, `interrupted`), when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A fenced resource received a write.
    Write {
        /// When the resource received it.
        at_ns: u64,
        /// The resource.
        resource: String,
        /// Who wrote.
        writer: String,
        /// The token the write carried.
        token: i64,
        /// Whether the resource accepted it.
        accepted: bool,
    },
    /// A participant heard that its session expired (it then runs on a new session): the
    /// model's `SessionExpired`.
    SessionExpired {
        /// When the participant saw it (when the new session was in place).
        at_ns: u64,
        /// The participant (or the shared session's name).
        participant: String,
        /// The session that expired.
        session: i64,
        /// The session that replaced it, if known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        new_session: Option<i64>,
    },
    /// A run of a scheduled job began (its closure was called): the model's `JobClaim`, whose
    /// landing starts the run (format 2).
    RunStart {
        /// When it began.
        at_ns: u64,
        /// The job; its leader's terms are the claims of the election of the same name.
        job: String,
        /// The slot key.
        slot: String,
        /// The replica that runs it (the holder of its term).
        holder: String,
        /// The attempt the job was given (1 for a slot's first run).
        attempt: u32,
        /// Its term's token.
        token: i64,
        /// Its term's ZooKeeper session, when the recorder knows it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<i64>,
    },
    /// A run stopped being allowed to act: when it returned with its term valid, else when its
    /// term ended (or its deadline passed), the earlier (format 2).
    RunEnd {
        /// When it stopped being allowed to act.
        at_ns: u64,
        /// The job.
        job: String,
        /// The slot key.
        slot: String,
        /// The replica that ran it.
        holder: String,
        /// Its attempt.
        attempt: u32,
        /// Its term's token.
        token: i64,
        /// `true` when it returned `Ok`, `false` when it returned an error, absent when it
        /// never returned (aborted at its term's end).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ok: Option<bool>,
    },
    /// A slot's record as the recorder read it (the fault trial: at its close, after every
    /// run ended) (format 2).
    SlotRecord {
        /// When it was read.
        at_ns: u64,
        /// The job.
        job: String,
        /// The slot key.
        slot: String,
        /// Its state (`running`, `succeeded`, `failed`, `pending`, `skipped`, `missed`, ...).
        state: String,
        /// The token of the term that last started it, if one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<i64>,
        /// How many times it was started (0 when never).
        attempt: u32,
        /// The replica that last started it, if one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        runner: Option<String>,
    },
    /// A fault the rig did, for the reader: not checked.
    Fault {
        /// When it was done.
        at_ns: u64,
        /// What it was.
        what: String,
    },
}

impl Event {
    /// The event's instant.
    pub fn at_ns(&self) -> u64 {
        match self {
            Event::Claim { at_ns, .. }
            | Event::TermEnd { at_ns, .. }
            | Event::Write { at_ns, .. }
            | Event::SessionExpired { at_ns, .. }
            | Event::RunStart { at_ns, .. }
            | Event::RunEnd { at_ns, .. }
            | Event::SlotRecord { at_ns, .. }
            | Event::Fault { at_ns, .. } => *at_ns,
        }
    }

    /// The model action the event maps to, if any (`None`: the model has nothing it could be).
    pub fn model_action(&self) -> Option<&'static str> {
        match self {
            Event::Claim { .. } => Some("Claim"),
            Event::TermEnd { reason, .. } => match reason.as_deref() {
                Some("deadline_passed") => Some("EndTerm"),
                Some("closed" | "interrupted") => Some("Release"),
                Some("suspended") => Some("Reconnect"),
                Some("lost") => Some("SessionExpired"),
                Some("node_deleted") => Some("OwnNodeGone"),
                // A read-only server, or no reason: the model has no such step.
                _ => None,
            },
            // Fenced writes are not in the model; the write is checked against the token order
            // the model's claims make (see `Check::Fence`).
            Event::Write { .. } => Some("fenced write (token order)"),
            Event::SessionExpired { .. } => Some("SessionExpired"),
            Event::RunStart { .. } => Some("JobClaim"),
            Event::RunEnd { ok: Some(_), .. } => Some("JobEnd"),
            // Aborted: the term's end (any of the term-ending actions) stops the run.
            Event::RunEnd { ok: None, .. } => Some("run aborted at its term's end"),
            // The store's record, checked against the runs (see `Check::SucceedsAtMostOnce`).
            Event::SlotRecord { .. } => Some("slot record (the store at the close)"),
            Event::Fault { .. } => None,
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Claim {
                election,
                holder,
                token,
                session,
                lease_ns,
                ..
            } => {
                write!(f, "claim: {holder:?} leads {election} with token {token}")?;
                if let Some(s) = session {
                    write!(f, " on session {s:#x}")?;
                }
                if lease_ns.is_some() {
                    // The instant is printed by the divergence that concerns it, from the
                    // trace's first event.
                    f.write_str(", lease recorded")?;
                }
                Ok(())
            }
            Event::TermEnd {
                election,
                holder,
                token,
                reason,
                ..
            } => write!(
                f,
                "term end: {holder:?}'s term of {election} with token {token} ({})",
                reason.as_deref().unwrap_or("no reason recorded")
            ),
            Event::Write {
                resource,
                writer,
                token,
                accepted,
                ..
            } => write!(
                f,
                "write: {writer:?} to {resource} with token {token}, {}",
                if *accepted { "accepted" } else { "rejected" }
            ),
            Event::SessionExpired {
                participant,
                session,
                new_session,
                ..
            } => {
                write!(f, "session expired: {participant}'s session {session:#x}")?;
                if let Some(n) = new_session {
                    write!(f, ", replaced by {n:#x}")?;
                }
                Ok(())
            }
            Event::RunStart {
                job,
                slot,
                holder,
                attempt,
                token,
                ..
            } => write!(
                f,
                "run start: {holder:?} runs {job} slot {slot} attempt {attempt} with token {token}"
            ),
            Event::RunEnd {
                job,
                slot,
                holder,
                attempt,
                token,
                ok,
                ..
            } => write!(
                f,
                "run end: {holder:?}'s run of {job} slot {slot} attempt {attempt} with token {token} ({})",
                match ok {
                    Some(true) => "ok",
                    Some(false) => "returned an error",
                    None => "aborted",
                }
            ),
            Event::SlotRecord {
                job,
                slot,
                state,
                token,
                attempt,
                ..
            } => {
                write!(
                    f,
                    "slot record: {job} slot {slot} {state} attempt {attempt}"
                )?;
                if let Some(t) = token {
                    write!(f, " token {t}")?;
                }
                Ok(())
            }
            Event::Fault { what, .. } => write!(f, "fault: {what}"),
        }
    }
}

/// A history file that cannot be read.
#[derive(Debug)]
pub enum TraceError {
    /// Not JSON, or not the shape of a [`Trace`].
    Json(serde_json::Error),
    /// A format this crate does not read.
    Format(u32),
    /// An event whose tag no format has.
    UnknownEvent {
        /// The event's index.
        index: usize,
        /// Its tag.
        tag: String,
    },
    /// An event of a later format than the file's (a job event in a format 1 file).
    NotInFormat {
        /// The event's index.
        index: usize,
        /// Its tag.
        tag: String,
        /// The file's format.
        format: u32,
        /// The first format that has the tag.
        since: u32,
    },
    /// Events out of time order (a recorder's error, not a run's).
    Order {
        /// The event out of order.
        index: usize,
        /// Its instant.
        at_ns: u64,
        /// The instant of the event before it.
        previous_ns: u64,
    },
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Json(e) => write!(f, "not a history file: {e}"),
            TraceError::Format(v) => write!(
                f,
                "history format {v} is not supported (this replay reads formats {})",
                READS.map(|r| r.to_string()).join(" and ")
            ),
            TraceError::UnknownEvent { index, tag } => write!(
                f,
                "event {index} has the tag {tag:?}, which no history format has (known: {})",
                TAGS.map(|(t, _)| t).join(", ")
            ),
            TraceError::NotInFormat {
                index,
                tag,
                format,
                since,
            } => write!(
                f,
                "event {index} has the tag {tag:?}, which format {format} does not have (format {since} and later do)"
            ),
            TraceError::Order {
                index,
                at_ns,
                previous_ns,
            } => write!(
                f,
                "event {index} at {at_ns} ns comes after an event at {previous_ns} ns: events must be in time order"
            ),
        }
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TraceError::Json(e) => Some(e),
            _ => None,
        }
    }
}

impl Trace {
    /// A trace of format [`FORMAT`] with these events.
    pub fn new(source: impl Into<String>, events: Vec<Event>) -> Self {
        Trace {
            format: FORMAT,
            source: source.into(),
            seed: None,
            session_timeout_ms: None,
            events,
        }
    }

    /// Reads a history file's text, of any format in [`READS`].
    ///
    /// # Errors
    /// [`TraceError::Json`] when it is not a trace, [`TraceError::Format`] for a format not in
    /// [`READS`], [`TraceError::UnknownEvent`] for a tag no format has and
    /// [`TraceError::NotInFormat`] for a tag of a later format than the file's.
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        // The version first, so that another format is named as such, not as bad JSON.
        #[derive(Deserialize)]
        struct Version {
            format: u32,
        }
        let value: serde_json::Value = serde_json::from_str(text).map_err(TraceError::Json)?;
        let version = Version::deserialize(&value).map_err(TraceError::Json)?;
        if !READS.contains(&version.format) {
            return Err(TraceError::Format(version.format));
        }
        // Each event's tag before the events themselves, so that an unknown tag, or one of a
        // later format, is named as such rather than as a shape serde did not expect.
        let events = value.get("events").and_then(serde_json::Value::as_array);
        for (index, event) in events.into_iter().flatten().enumerate() {
            let Some(tag) = event.get("event").and_then(serde_json::Value::as_str) else {
                continue;
            };
            match TAGS.iter().find(|(t, _)| *t == tag) {
                None => {
                    return Err(TraceError::UnknownEvent {
                        index,
                        tag: tag.to_owned(),
                    });
                }
                Some((_, since)) if *since > version.format => {
                    return Err(TraceError::NotInFormat {
                        index,
                        tag: tag.to_owned(),
                        format: version.format,
                        since: *since,
                    });
                }
                Some(_) => {}
            }
        }
        Trace::deserialize(&value).map_err(TraceError::Json)
    }

    /// The trace as JSON, one event a line (readable, and diffable).
    pub fn to_json(&self) -> String {
        let mut out = String::from("{\n");
        let header = |k: &str, v: String| format!("  {}: {v},\n", serde_json::Value::from(k));
        out.push_str(&header("format", self.format.to_string()));
        out.push_str(&header(
            "source",
            serde_json::Value::from(self.source.as_str()).to_string(),
        ));
        if let Some(seed) = self.seed {
            out.push_str(&header("seed", seed.to_string()));
        }
        if let Some(t) = self.session_timeout_ms {
            out.push_str(&header("session_timeout_ms", t.to_string()));
        }
        out.push_str("  \"events\": [");
        for (i, e) in self.events.iter().enumerate() {
            out.push_str(if i == 0 { "\n    " } else { ",\n    " });
            // An event is plain data (strings and integers): it always serializes.
            out.push_str(&serde_json::to_string(e).unwrap_or_default());
        }
        out.push_str("\n  ]\n}\n");
        out
    }
}

/// A check of the replay, each one a guard or a property of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Check {
    /// Property `at most one valid term`: a claim while another holder's term of the same
    /// election is still valid.
    AtMostOneValidTerm,
    /// Property `tokens rise`: a claim whose token is below an earlier term's, or equal to the
    /// token of another holder's term (equal only for the same holder leading again on the same
    /// node).
    TokensRise,
    /// The guard of `Claim` (phase `First`, never `Leading`): a claim by a holder that already
    /// holds a term of the election.
    ClaimOnlyWhenNotLeading,
    /// Rule `term-starts-on-proven-lease`: a term begins only while its lease is ahead
    /// (`now < lease`); a term whose lease was behind its start, or that stopped being valid
    /// before it began.
    TermStartsOnProvenLease,
    /// The guards of `EndTerm`, `Release`, `OwnNodeGone`, `Reconnect` and `SessionExpired`: a
    /// term ends only if it is held.
    EndOnlyAHeldTerm,
    /// The lease rules (`lease-needs-later-sync`, `lease-advances-to-earlier-touch`,
    /// `term-ends-at-deadline`) with expiry at the timeout: `SessionExpired` is enabled only
    /// once the quorum leader expired the session, by when every term on it is over. A term on
    /// the session still valid when its holder heard of the expiry.
    ExpiryAfterEveryTerm,
    /// Rules `expire-deletes-ephemerals` and `no-claim-from-node-of-earlier-session`: a claim
    /// on a session known expired, or on the node (token) of a term of an expired session.
    NoClaimOnExpiredSession,
    /// Fenced writes are not in the model: the resource's fence applies the token order that
    /// the property `tokens rise` gives. A write accepted with a token below one accepted
    /// before, or rejected with a token at or above every one accepted before.
    Fence,
    /// `Claim` is the only step that hands out a token (the node's sequence): a write whose
    /// writer was never given its token by a claim at or before it.
    WriteWithAClaimedToken,
    /// The guard of `JobClaim`: a claim is a fenced multi of the leader's valid term, so a run
    /// starts only while its holder holds a term of the job's election with the run's token
    /// (and its session, when both are recorded); a run that stopped being allowed to act
    /// before it began started on a term already over.
    RunInItsTerm,
    /// Property `no two attempts of a slot at once`: a run of a slot that starts while an
    /// earlier run of the slot is still allowed to act.
    NoTwoAttemptsAtOnce,
    /// Property `attempt tokens rise` (guarantee 3, "no restart within a term"): a run whose
    /// token is below the previous attempt's of its slot, or equal to it when the previous
    /// attempt was another term's or did not return an error its term could record (only a
    /// failure recorded `pending` is retried in the same term, with the same token); a slot's
    /// record whose token or attempt is below its last run's.
    AttemptTokensRise,
    /// The rules of `JobClaim` (a retry, after a failure or a cut-off, takes `attempt + 1`): a
    /// run's attempt not above the previous run's of its slot, or, in the same term, not
    /// exactly one above it (a claim of the slot that landed with no run between two runs of
    /// one term would have made that term give up).
    AttemptsCountUp,
    /// Property `each slot succeeds at most once`: a slot recorded `succeeded` with a token
    /// and attempt that no run of the slot ended `ok` with, a run of the slot after that
    /// attempt, or a second `succeeded` record of the slot.
    SucceedsAtMostOnce,
    /// Rule `run-stops-at-lease`: a run still allowed to act when its term ended.
    RunStopsAtLease,
    /// The guard of `JobEnd` (a going run): a run's end with no run of that slot, holder,
    /// attempt and token going.
    EndOnlyAGoingRun,
}

impl Check {
    /// Every check.
    pub const ALL: [Check; 16] = [
        Check::AtMostOneValidTerm,
        Check::TokensRise,
        Check::ClaimOnlyWhenNotLeading,
        Check::TermStartsOnProvenLease,
        Check::EndOnlyAHeldTerm,
        Check::ExpiryAfterEveryTerm,
        Check::NoClaimOnExpiredSession,
        Check::Fence,
        Check::WriteWithAClaimedToken,
        Check::RunInItsTerm,
        Check::NoTwoAttemptsAtOnce,
        Check::AttemptTokensRise,
        Check::AttemptsCountUp,
        Check::SucceedsAtMostOnce,
        Check::RunStopsAtLease,
        Check::EndOnlyAGoingRun,
    ];

    /// The model's property or rule (or guard) the check stands for.
    pub fn name(self) -> &'static str {
        match self {
            Check::AtMostOneValidTerm => "property `at most one valid term`",
            Check::TokensRise => "property `tokens rise`",
            Check::ClaimOnlyWhenNotLeading => "guard of `Claim` (not while leading)",
            Check::TermStartsOnProvenLease => "rule `term-starts-on-proven-lease`",
            Check::EndOnlyAHeldTerm => "guard of the term-ending actions (a held term)",
            Check::ExpiryAfterEveryTerm => {
                "lease rules with expiry at the timeout (`SessionExpired` after every term's deadline)"
            }
            Check::NoClaimOnExpiredSession => {
                "rules `expire-deletes-ephemerals` and `no-claim-from-node-of-earlier-session`"
            }
            Check::Fence => "property `tokens rise` at the fenced resource",
            Check::WriteWithAClaimedToken => "`Claim` is the only source of tokens",
            Check::RunInItsTerm => {
                "guard of `JobClaim` (a fenced write of the holder's valid term)"
            }
            Check::NoTwoAttemptsAtOnce => "property `no two attempts of a slot at once`",
            Check::AttemptTokensRise => "property `attempt tokens rise`",
            Check::AttemptsCountUp => "rules of `JobClaim` (a retry takes `attempt + 1`)",
            Check::SucceedsAtMostOnce => "property `each slot succeeds at most once`",
            Check::RunStopsAtLease => "rule `run-stops-at-lease`",
            Check::EndOnlyAGoingRun => "guard of `JobEnd` (a going run)",
        }
    }
}

/// One recorded event the model does not allow in the replay's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// The event's index in the trace (from 0).
    pub index: usize,
    /// The event, as text.
    pub event: String,
    /// The check it fails.
    pub check: Check,
    /// The abstract state's relevant part before the event.
    pub state: String,
    /// Why the model does not allow it.
    pub why: String,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "event {}: {}\n  state: {}\n  why: {} ({})",
            self.index,
            self.event,
            self.state,
            self.why,
            self.check.name()
        )
    }
}

/// What a replay found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Events in the trace.
    pub events: usize,
    /// Events that map to a model action (or to the fence's token order).
    pub mapped: usize,
    /// Every event the model does not allow.
    pub divergences: Vec<Divergence>,
    /// What the job's events held.
    pub job: JobCounts,
}

/// The job's events a replay met (format 2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobCounts {
    /// Runs started (`run_start`).
    pub runs: usize,
    /// Runs that returned `Ok`.
    pub ends_ok: usize,
    /// Runs that returned an error (in the fault trials: cut off, their term ended first).
    pub ends_error: usize,
    /// Runs aborted at their term's end (they never returned).
    pub ends_aborted: usize,
    /// Slot records checked (`slot_record`).
    pub records: usize,
    /// Attempts with no run: the numbers a slot's attempts skipped between two runs of
    /// different terms (or before its first run), each a claim that landed while its term
    /// ended or with its reply lost, whose run never started.
    pub attempts_without_run: u64,
}

/// A term held now, in the abstract state.
#[derive(Clone, Debug)]
struct Held {
    holder: String,
    token: i64,
    session: Option<i64>,
    start: u64,
    /// The index of its claim's event: the term's identity.
    claim: usize,
}

/// One run of a job's slot, in the abstract state.
#[derive(Clone, Debug)]
struct Run {
    holder: String,
    attempt: u32,
    token: i64,
    /// The claim (event index) of the term it ran in, when one was held.
    term: Option<usize>,
    start: u64,
    /// `None` while it is allowed to act; then how it ended (`Some(None)`: aborted).
    ended: Option<Option<bool>>,
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} attempt {} token {} {}",
            self.holder,
            self.attempt,
            self.token,
            match self.ended {
                None => "going",
                Some(Some(true)) => "ok",
                Some(Some(false)) => "returned an error",
                Some(None) => "aborted",
            }
        )
    }
}

/// The abstract state of one election.
#[derive(Clone, Debug, Default)]
struct ElectionState {
    /// The terms held now (claimed, not yet ended).
    held: Vec<Held>,
    /// The highest token of any term so far, and its holder.
    max: Option<(i64, String)>,
    /// The session of each token's term, when known.
    token_sessions: BTreeMap<i64, i64>,
}

/// The abstract state the events drive.
#[derive(Debug, Default)]
struct Abstract {
    elections: BTreeMap<String, ElectionState>,
    /// Sessions heard expired.
    expired: BTreeSet<i64>,
    /// Per resource, the highest token accepted.
    accepted: BTreeMap<String, i64>,
    /// Every (holder, token) a claim handed out.
    claimed: BTreeSet<(String, i64)>,
    /// Per (job, slot), its runs in the order they started.
    runs: BTreeMap<(String, String), Vec<Run>>,
    /// The (job, slot)s with a `succeeded` record read.
    succeeded: BTreeSet<(String, String)>,
    /// The first event's instant: times are printed from it.
    origin: u64,
}

impl Abstract {
    fn rel(&self, ns: u64) -> String {
        st_rel(self.origin, ns)
    }

    fn election_text(&self, election: &str) -> String {
        let Some(e) = self.elections.get(election) else {
            return format!("{election}: no term yet");
        };
        let held: Vec<String> = e
            .held
            .iter()
            .map(|h| {
                let session = h
                    .session
                    .map_or(String::new(), |s| format!(" session {s:#x}"));
                format!(
                    "{:?} token {}{session} since {}",
                    h.holder,
                    h.token,
                    self.rel(h.start)
                )
            })
            .collect();
        let max = e
            .max
            .as_ref()
            .map_or("none".to_string(), |(t, h)| format!("{t} ({h:?})"));
        format!(
            "{election}: held [{}]; highest token {max}",
            held.join(", ")
        )
    }

    fn slot_text(&self, job: &str, slot: &str) -> String {
        let runs = self
            .runs
            .get(&(job.to_owned(), slot.to_owned()))
            .map_or_else(Vec::new, |runs| runs.iter().map(Run::to_string).collect());
        format!("{job} slot {slot}: runs [{}]", runs.join(", "))
    }

    fn expired_text(&self) -> String {
        let s: Vec<String> = self.expired.iter().map(|s| format!("{s:#x}")).collect();
        format!("sessions expired [{}]", s.join(", "))
    }
}

/// Replays `trace` against the model's observable actions: every event is checked in the
/// abstract state the events before it left (see [`Check`]), and applied whether it diverged
/// or not (so one bad event is reported once, not for every event after it).
pub fn replay(trace: &Trace) -> ReplayReport {
    let mut st = Abstract {
        origin: trace.events.first().map_or(0, Event::at_ns),
        ..Abstract::default()
    };
    let mut report = ReplayReport {
        events: trace.events.len(),
        ..ReplayReport::default()
    };
    for (index, event) in trace.events.iter().enumerate() {
        if event.model_action().is_some() {
            report.mapped += 1;
        }
        let at = event.at_ns();
        let origin = st.origin;
        let mut diverge = |check: Check, state: String, why: String| {
            report.divergences.push(Divergence {
                index,
                event: format!("{} at {}", event, st_rel(origin, at)),
                check,
                state,
                why,
            });
        };
        match event {
            Event::Claim {
                election,
                holder,
                token,
                session,
                lease_ns,
                ..
            } => {
                let state = format!("{}; {}", st.election_text(election), st.expired_text());
                let e = st.elections.entry(election.clone()).or_default();
                if let Some(own) = e.held.iter().find(|h| &h.holder == holder) {
                    diverge(
                        Check::ClaimOnlyWhenNotLeading,
                        state.clone(),
                        format!(
                            "{holder:?} already holds a term (token {}); a leading contender does not claim",
                            own.token
                        ),
                    );
                }
                for other in e.held.iter().filter(|h| &h.holder != holder) {
                    diverge(
                        Check::AtMostOneValidTerm,
                        state.clone(),
                        format!(
                            "{:?}'s term with token {} is still valid: two valid terms of {election}",
                            other.holder, other.token
                        ),
                    );
                }
                if let Some((max, max_holder)) = &e.max {
                    let same_node = max_holder == holder
                        && match (session, e.token_sessions.get(max)) {
                            (Some(a), Some(b)) => a == b,
                            _ => true,
                        };
                    if token < max {
                        diverge(
                            Check::TokensRise,
                            state.clone(),
                            format!("token {token} is below token {max} of an earlier term"),
                        );
                    } else if token == max && !same_node {
                        diverge(
                            Check::TokensRise,
                            state.clone(),
                            format!(
                                "token {token} is that of {max_holder:?}'s earlier term: equal only for the same holder on the same node"
                            ),
                        );
                    }
                }
                if let Some(lease) = lease_ns
                    && *lease <= at
                {
                    diverge(
                        Check::TermStartsOnProvenLease,
                        state.clone(),
                        format!(
                            "the lease (until {}) was not ahead of the claim: a term begins only while now < lease",
                            st_rel(origin, *lease)
                        ),
                    );
                }
                let on_dead = session.filter(|s| st.expired.contains(s)).or_else(|| {
                    e.token_sessions
                        .get(token)
                        .copied()
                        .filter(|s| st.expired.contains(s))
                });
                if let Some(dead) = on_dead {
                    diverge(
                        Check::NoClaimOnExpiredSession,
                        state.clone(),
                        format!(
                            "session {dead:#x} was heard expired before: its nodes are gone, and no term is claimed on it"
                        ),
                    );
                }
                e.held.push(Held {
                    holder: holder.clone(),
                    token: *token,
                    session: *session,
                    start: at,
                    claim: index,
                });
                if e.max.as_ref().is_none_or(|(m, _)| token >= m) {
                    e.max = Some((*token, holder.clone()));
                }
                if let Some(s) = session {
                    e.token_sessions.entry(*token).or_insert(*s);
                }
                st.claimed.insert((holder.clone(), *token));
            }
            Event::TermEnd {
                election,
                holder,
                token,
                ..
            } => {
                let state = st.election_text(election);
                let e = st.elections.entry(election.clone()).or_default();
                match e
                    .held
                    .iter()
                    .position(|h| &h.holder == holder && h.token == *token)
                {
                    None => diverge(
                        Check::EndOnlyAHeldTerm,
                        state,
                        format!("{holder:?} holds no term of {election} with token {token}"),
                    ),
                    Some(i) => {
                        let held = e.held.remove(i);
                        for run in st
                            .runs
                            .values()
                            .flatten()
                            .filter(|r| r.term == Some(held.claim) && r.ended.is_none())
                        {
                            diverge(
                                Check::RunStopsAtLease,
                                state.clone(),
                                format!(
                                    "{:?}'s run (attempt {}, since {}) of this term is still allowed to act: a run stops at its term's end",
                                    run.holder,
                                    run.attempt,
                                    st_rel(origin, run.start)
                                ),
                            );
                        }
                        if at < held.start {
                            diverge(
                                Check::TermStartsOnProvenLease,
                                state,
                                format!(
                                    "the term stopped being valid before it began (at {}): its lease had lapsed at the claim",
                                    st_rel(origin, held.start)
                                ),
                            );
                        }
                    }
                }
            }
            Event::Write {
                resource,
                writer,
                token,
                accepted,
                ..
            } => {
                let highest = st.accepted.get(resource).copied();
                let state = format!(
                    "{resource}: highest token accepted {}",
                    highest.map_or("none".to_string(), |h| h.to_string())
                );
                if !st.claimed.contains(&(writer.clone(), *token)) {
                    diverge(
                        Check::WriteWithAClaimedToken,
                        state.clone(),
                        format!("no claim gave {writer:?} token {token} before this write"),
                    );
                }
                let stale = highest.is_some_and(|h| *token < h);
                if *accepted && stale {
                    diverge(
                        Check::Fence,
                        state,
                        "a token below one accepted before was accepted".to_string(),
                    );
                } else if !*accepted && !stale {
                    diverge(
                        Check::Fence,
                        state,
                        "a token at or above every one accepted before was rejected".to_string(),
                    );
                }
                if *accepted {
                    st.accepted
                        .insert(resource.clone(), highest.map_or(*token, |h| h.max(*token)));
                }
            }
            Event::SessionExpired {
                participant,
                session,
                ..
            } => {
                for (name, e) in &st.elections {
                    for h in e.held.iter().filter(|h| h.session == Some(*session)) {
                        diverge(
                            Check::ExpiryAfterEveryTerm,
                            st.election_text(name),
                            format!(
                                "{participant} heard its session {session:#x} expired while {:?}'s term of {name} with token {} on it was still valid",
                                h.holder, h.token
                            ),
                        );
                    }
                }
                st.expired.insert(*session);
            }
            Event::RunStart {
                job,
                slot,
                holder,
                attempt,
                token,
                session,
                ..
            } => {
                report.job.runs += 1;
                let state = format!("{}; {}", st.slot_text(job, slot), st.election_text(job));
                let term = st.elections.get(job).and_then(|e| {
                    e.held.iter().find(|h| {
                        &h.holder == holder
                            && h.token == *token
                            && match (session, h.session) {
                                (Some(a), Some(b)) => *a == b,
                                _ => true,
                            }
                    })
                });
                let term = term.map(|h| h.claim);
                if term.is_none() {
                    diverge(
                        Check::RunInItsTerm,
                        state.clone(),
                        format!(
                            "{holder:?} holds no term of {job} with token {token}: a slot is claimed, and its run started, only in its holder's valid term"
                        ),
                    );
                }
                let runs = st.runs.entry((job.clone(), slot.clone())).or_default();
                for going in runs.iter().filter(|r| r.ended.is_none()) {
                    diverge(
                        Check::NoTwoAttemptsAtOnce,
                        state.clone(),
                        format!(
                            "{:?}'s attempt {} (token {}) of the slot is still allowed to act",
                            going.holder, going.attempt, going.token
                        ),
                    );
                }
                match runs.last() {
                    Some(prev) => {
                        let same_term = term.is_some() && prev.term == term;
                        if *token < prev.token {
                            diverge(
                                Check::AttemptTokensRise,
                                state.clone(),
                                format!(
                                    "token {token} is below token {} of the slot's previous attempt",
                                    prev.token
                                ),
                            );
                        } else if *token == prev.token && !same_term {
                            diverge(
                                Check::AttemptTokensRise,
                                state.clone(),
                                format!(
                                    "the previous attempt, with token {token} too, was another term's: a restart in a new term carries a strictly higher token"
                                ),
                            );
                        } else if *token == prev.token && prev.ended != Some(Some(false)) {
                            diverge(
                                Check::AttemptTokensRise,
                                state.clone(),
                                format!(
                                    "the previous attempt of this term ({prev}) did not return an error its term could record `pending`: no restart within a term"
                                ),
                            );
                        }
                        if *attempt <= prev.attempt {
                            diverge(
                                Check::AttemptsCountUp,
                                state.clone(),
                                format!(
                                    "attempt {attempt} is not above the previous run's attempt {}",
                                    prev.attempt
                                ),
                            );
                        } else if same_term && *attempt != prev.attempt + 1 {
                            diverge(
                                Check::AttemptsCountUp,
                                state.clone(),
                                format!(
                                    "attempt {attempt} follows attempt {} of the same term: a retry within a term takes `attempt + 1`",
                                    prev.attempt
                                ),
                            );
                        } else {
                            report.job.attempts_without_run +=
                                u64::from(*attempt - prev.attempt - 1);
                        }
                    }
                    None if *attempt == 0 => diverge(
                        Check::AttemptsCountUp,
                        state.clone(),
                        "attempt 0: a slot's attempts count from 1".to_string(),
                    ),
                    None => report.job.attempts_without_run += u64::from(*attempt - 1),
                }
                runs.push(Run {
                    holder: holder.clone(),
                    attempt: *attempt,
                    token: *token,
                    term,
                    start: at,
                    ended: None,
                });
            }
            Event::RunEnd {
                job,
                slot,
                holder,
                attempt,
                token,
                ok,
                ..
            } => {
                match ok {
                    Some(true) => report.job.ends_ok += 1,
                    Some(false) => report.job.ends_error += 1,
                    None => report.job.ends_aborted += 1,
                }
                let state = st.slot_text(job, slot);
                let going = st
                    .runs
                    .get_mut(&(job.clone(), slot.clone()))
                    .and_then(|runs| {
                        runs.iter_mut().rev().find(|r| {
                            r.ended.is_none()
                                && &r.holder == holder
                                && r.token == *token
                                && r.attempt == *attempt
                        })
                    });
                match going {
                    None => diverge(
                        Check::EndOnlyAGoingRun,
                        state,
                        format!(
                            "no run of the slot by {holder:?} with attempt {attempt} and token {token} is going"
                        ),
                    ),
                    Some(run) => {
                        if at < run.start {
                            diverge(
                                Check::RunInItsTerm,
                                state,
                                format!(
                                    "the run stopped being allowed to act before it began (at {}): its term was over when it started",
                                    st_rel(origin, run.start)
                                ),
                            );
                        }
                        run.ended = Some(*ok);
                    }
                }
            }
            Event::SlotRecord {
                job,
                slot,
                state: recorded,
                token,
                attempt,
                ..
            } => {
                report.job.records += 1;
                let state = st.slot_text(job, slot);
                let key = (job.clone(), slot.clone());
                let runs = st.runs.get(&key).map_or(&[][..], Vec::as_slice);
                let mut diverged = false;
                if recorded == "succeeded" {
                    diverged = true;
                    if st.succeeded.contains(&key) {
                        diverge(
                            Check::SucceedsAtMostOnce,
                            state.clone(),
                            "the slot was recorded succeeded before".to_string(),
                        );
                    } else if !runs.iter().any(|r| {
                        Some(r.token) == *token
                            && r.attempt == *attempt
                            && r.ended == Some(Some(true))
                    }) {
                        diverge(
                            Check::SucceedsAtMostOnce,
                            state.clone(),
                            format!(
                                "no run of the slot with token {} and attempt {attempt} returned `Ok`",
                                token.map_or("none".to_string(), |t| t.to_string())
                            ),
                        );
                    } else if let Some(later) = runs.iter().find(|r| r.attempt > *attempt) {
                        diverge(
                            Check::SucceedsAtMostOnce,
                            state.clone(),
                            format!(
                                "the run [{later}] started after the attempt recorded succeeded: a slot recorded succeeded is never run again"
                            ),
                        );
                    } else {
                        diverged = false;
                    }
                }
                if !diverged
                    && let (Some(last), Some(token)) = (runs.last(), token)
                    && (*token < last.token || *attempt < last.attempt)
                {
                    diverge(
                        Check::AttemptTokensRise,
                        state,
                        format!(
                            "the record's token {token} and attempt {attempt} are below the slot's last run's ({last}): the record is the slot's newest attempt"
                        ),
                    );
                }
                if recorded == "succeeded" {
                    st.succeeded.insert(key);
                }
            }
            Event::Fault { .. } => {}
        }
    }
    report
}

fn st_rel(origin: u64, ns: u64) -> String {
    let d = ns.saturating_sub(origin);
    format!(
        "t+{}.{:06}s",
        d / 1_000_000_000,
        (d % 1_000_000_000) / 1_000
    )
}

/// Checks that the events are in time order, a term's end counted at its claim's instant when
/// it is earlier, and a run's end at its start's (the recorder places an end that precedes its
/// beginning right after it; the replay then reports it).
///
/// # Errors
/// [`TraceError::Order`] for the first event out of order.
pub fn check_order(trace: &Trace) -> Result<(), TraceError> {
    let mut previous = 0u64;
    let mut starts: BTreeMap<(&str, &str, i64), u64> = BTreeMap::new();
    let mut run_starts: BTreeMap<(&str, &str, &str, u32, i64), u64> = BTreeMap::new();
    for (index, event) in trace.events.iter().enumerate() {
        let key = match event {
            Event::Claim {
                at_ns,
                election,
                holder,
                token,
                ..
            } => {
                starts.insert((election, holder, *token), *at_ns);
                *at_ns
            }
            Event::TermEnd {
                at_ns,
                election,
                holder,
                token,
                ..
            } => starts
                .get(&(election.as_str(), holder.as_str(), *token))
                .map_or(*at_ns, |s| (*at_ns).max(*s)),
            Event::RunStart {
                at_ns,
                job,
                slot,
                holder,
                attempt,
                token,
                ..
            } => {
                run_starts.insert((job, slot, holder, *attempt, *token), *at_ns);
                *at_ns
            }
            Event::RunEnd {
                at_ns,
                job,
                slot,
                holder,
                attempt,
                token,
                ..
            } => run_starts
                .get(&(
                    job.as_str(),
                    slot.as_str(),
                    holder.as_str(),
                    *attempt,
                    *token,
                ))
                .map_or(*at_ns, |s| (*at_ns).max(*s)),
            other => other.at_ns(),
        };
        if key < previous {
            return Err(TraceError::Order {
                index,
                at_ns: event.at_ns(),
                previous_ns: previous,
            });
        }
        previous = key;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn claim(at: u64, holder: &str, token: i64, session: Option<i64>) -> Event {
        Event::Claim {
            at_ns: at * MS,
            election: "latch".into(),
            holder: holder.into(),
            token,
            session,
            lease_ns: Some((at + 1000) * MS),
        }
    }

    fn end(at: u64, holder: &str, token: i64, reason: &str) -> Event {
        Event::TermEnd {
            at_ns: at * MS,
            election: "latch".into(),
            holder: holder.into(),
            token,
            reason: Some(reason.into()),
        }
    }

    fn write(at: u64, writer: &str, token: i64, accepted: bool) -> Event {
        Event::Write {
            at_ns: at * MS,
            resource: "latch-row".into(),
            writer: writer.into(),
            token,
            accepted,
        }
    }

    fn expired(at: u64, session: i64) -> Event {
        Event::SessionExpired {
            at_ns: at * MS,
            participant: "session-0".into(),
            session,
            new_session: Some(session + 100),
        }
    }

    /// A clean history: every kind of event, every check passes.
    fn clean() -> Vec<Event> {
        vec![
            Event::Fault {
                at_ns: 0,
                what: "cut session-1's link".into(),
            },
            claim(10, "a", 5, Some(1)),
            write(11, "a", 5, true),
            end(100, "a", 5, "suspended"),
            claim(100, "b", 7, Some(2)), // at the instant a's term ended: allowed
            write(120, "b", 7, true),
            write(130, "a", 5, false), // a stale write, rejected
            end(200, "b", 7, "closed"),
            claim(250, "b", 7, Some(2)), // b leads again on the same node
            end(300, "b", 7, "deadline_passed"),
            expired(400, 2),
            claim(500, "a", 9, Some(1)),
            end(600, "a", 9, "read_only"), // not a model action: unmapped, still applied
        ]
    }

    /// Replays `events` and returns the one divergence, which must be at `index` and fail
    /// `check`.
    fn one_divergence(events: Vec<Event>, index: usize, check: Check) -> Divergence {
        let trace = Trace::new("test", events);
        assert!(check_order(&trace).is_ok(), "{:?}", check_order(&trace));
        let report = replay(&trace);
        match &report.divergences[..] {
            [d] => {
                assert_eq!((d.index, d.check), (index, check), "{d}");
                d.clone()
            }
            other => panic!("expected one divergence, got {other:#?}"),
        }
    }

    #[test]
    fn a_clean_history_has_no_divergence_and_counts_what_it_maps() {
        let trace = Trace::new("test", clean());
        let report = replay(&trace);
        assert_eq!(report.divergences, vec![]);
        assert_eq!(report.events, 13);
        // The fault and the read-only end map to nothing the model has.
        assert_eq!(report.mapped, 11);
    }

    #[test]
    fn two_valid_terms_diverge_at_the_second_claim() {
        let d = one_divergence(
            vec![
                claim(10, "a", 5, Some(1)),
                claim(50, "b", 7, Some(2)),
                end(100, "a", 5, "closed"),
                end(150, "b", 7, "closed"),
            ],
            1,
            Check::AtMostOneValidTerm,
        );
        assert!(d.event.contains("\"b\" leads latch with token 7"), "{d}");
        assert!(d.state.contains("\"a\" token 5"), "{d}");
        assert!(d.to_string().contains("at most one valid term"), "{d}");
    }

    #[test]
    fn a_falling_token_diverges() {
        one_divergence(
            vec![
                claim(10, "a", 7, None),
                end(100, "a", 7, "closed"),
                claim(150, "b", 5, None),
            ],
            2,
            Check::TokensRise,
        );
    }

    #[test]
    fn an_equal_token_of_another_holder_or_session_diverges() {
        one_divergence(
            vec![
                claim(10, "a", 7, None),
                end(100, "a", 7, "closed"),
                claim(150, "b", 7, None),
            ],
            2,
            Check::TokensRise,
        );
        one_divergence(
            vec![
                claim(10, "a", 7, Some(1)),
                end(100, "a", 7, "closed"),
                claim(150, "a", 7, Some(3)),
            ],
            2,
            Check::TokensRise,
        );
    }

    #[test]
    fn a_claim_while_leading_diverges() {
        one_divergence(
            vec![
                claim(10, "a", 5, None),
                claim(20, "a", 6, None),
                end(100, "a", 5, "closed"),
                end(100, "a", 6, "closed"),
            ],
            1,
            Check::ClaimOnlyWhenNotLeading,
        );
    }

    #[test]
    fn a_claim_on_a_lapsed_lease_diverges() {
        let mut lapsed = claim(10, "a", 5, None);
        if let Event::Claim { lease_ns, .. } = &mut lapsed {
            *lease_ns = Some(10 * MS);
        }
        one_divergence(
            vec![lapsed, end(20, "a", 5, "closed")],
            0,
            Check::TermStartsOnProvenLease,
        );
        // A term that stopped being valid before it began: the recorder places its end right
        // after its claim.
        let d = one_divergence(
            vec![claim(10, "a", 5, None), end(8, "a", 5, "deadline_passed")],
            1,
            Check::TermStartsOnProvenLease,
        );
        assert!(d.why.contains("before it began"), "{d}");
    }

    #[test]
    fn an_end_of_a_term_not_held_diverges() {
        one_divergence(
            vec![
                claim(10, "a", 5, None),
                end(100, "a", 6, "closed"),
                end(110, "a", 5, "closed"),
            ],
            1,
            Check::EndOnlyAHeldTerm,
        );
    }

    #[test]
    fn an_expiry_heard_while_a_term_on_the_session_is_valid_diverges() {
        let d = one_divergence(
            vec![
                claim(10, "a", 5, Some(1)),
                expired(50, 1),
                end(60, "a", 5, "lost"),
            ],
            1,
            Check::ExpiryAfterEveryTerm,
        );
        assert!(d.why.contains("0x1 expired"), "{d}");
        // A term on another session is not concerned.
        let trace = Trace::new(
            "test",
            vec![
                claim(10, "a", 5, Some(2)),
                expired(50, 1),
                end(60, "a", 5, "closed"),
            ],
        );
        assert_eq!(replay(&trace).divergences, vec![]);
    }

    #[test]
    fn a_claim_on_an_expired_session_or_its_node_diverges() {
        one_divergence(
            vec![expired(5, 1), claim(10, "a", 5, Some(1))],
            1,
            Check::NoClaimOnExpiredSession,
        );
        // The node's token, claimed again without a session recorded (a `zkr` child's line).
        one_divergence(
            vec![
                claim(10, "a", 5, Some(1)),
                end(20, "a", 5, "suspended"),
                expired(30, 1),
                claim(40, "a", 5, None),
            ],
            3,
            Check::NoClaimOnExpiredSession,
        );
    }

    #[test]
    fn the_fence_diverges_both_ways() {
        one_divergence(
            vec![
                claim(10, "a", 5, None),
                end(20, "a", 5, "closed"),
                claim(30, "b", 7, None),
                write(31, "b", 7, true),
                write(32, "a", 5, true),
            ],
            4,
            Check::Fence,
        );
        one_divergence(
            vec![
                claim(10, "a", 5, None),
                write(11, "a", 5, true),
                write(12, "a", 5, false),
            ],
            2,
            Check::Fence,
        );
    }

    #[test]
    fn a_write_with_a_token_never_claimed_diverges() {
        one_divergence(
            vec![claim(10, "a", 5, None), write(11, "b", 5, true)],
            1,
            Check::WriteWithAClaimedToken,
        );
    }

    fn job_claim(at: u64, holder: &str, token: i64, session: i64) -> Event {
        Event::Claim {
            at_ns: at * MS,
            election: "job".into(),
            holder: holder.into(),
            token,
            session: Some(session),
            lease_ns: Some((at + 1000) * MS),
        }
    }

    fn job_end(at: u64, holder: &str, token: i64, reason: &str) -> Event {
        Event::TermEnd {
            at_ns: at * MS,
            election: "job".into(),
            holder: holder.into(),
            token,
            reason: Some(reason.into()),
        }
    }

    fn run_start(at: u64, holder: &str, slot: &str, attempt: u32, token: i64) -> Event {
        Event::RunStart {
            at_ns: at * MS,
            job: "job".into(),
            slot: slot.into(),
            holder: holder.into(),
            attempt,
            token,
            session: None,
        }
    }

    fn run_end(
        at: u64,
        holder: &str,
        slot: &str,
        attempt: u32,
        token: i64,
        ok: Option<bool>,
    ) -> Event {
        Event::RunEnd {
            at_ns: at * MS,
            job: "job".into(),
            slot: slot.into(),
            holder: holder.into(),
            attempt,
            token,
            ok,
        }
    }

    fn record(slot: &str, state: &str, token: Option<i64>, attempt: u32) -> Event {
        Event::SlotRecord {
            at_ns: 1000 * MS,
            job: "job".into(),
            slot: slot.into(),
            state: state.into(),
            token,
            attempt,
            runner: None,
        }
    }

    /// A clean job history: every kind of job event, a retry after an error in the same term
    /// (same token, `attempt + 1`), a run aborted at its term's end, its retry in the next term
    /// with a higher token after a claim that had no run (attempt 3 after 1), the records.
    fn clean_job() -> Vec<Event> {
        vec![
            job_claim(10, "job-0", 5, 1),
            run_start(20, "job-0", "A", 1, 5),
            Event::Write {
                at_ns: 25 * MS,
                resource: "job-row".into(),
                writer: "job-0".into(),
                token: 5,
                accepted: true,
            },
            run_end(40, "job-0", "A", 1, 5, Some(false)),
            run_start(50, "job-0", "A", 2, 5),
            run_end(60, "job-0", "A", 2, 5, Some(true)),
            run_start(70, "job-0", "B", 1, 5),
            // At its term's end: the run's end comes first.
            run_end(100, "job-0", "B", 1, 5, None),
            job_end(100, "job-0", 5, "suspended"),
            job_claim(110, "job-1", 7, 2),
            run_start(120, "job-1", "B", 3, 7),
            run_end(150, "job-1", "B", 3, 7, Some(true)),
            job_end(200, "job-1", 7, "closed"),
            record("A", "succeeded", Some(5), 2),
            record("B", "succeeded", Some(7), 3),
            record("C", "skipped", None, 0),
        ]
    }

    /// Replays `events` and returns every divergence as (index, check).
    fn divergences(events: Vec<Event>) -> Vec<(usize, Check)> {
        let trace = Trace::new("test", events);
        assert!(check_order(&trace).is_ok(), "{:?}", check_order(&trace));
        replay(&trace)
            .divergences
            .iter()
            .map(|d| (d.index, d.check))
            .collect()
    }

    #[test]
    fn a_clean_job_history_has_no_divergence_and_counts_its_runs() {
        let report = replay(&Trace::new("test", clean_job()));
        assert_eq!(report.divergences, vec![]);
        assert_eq!((report.events, report.mapped), (16, 16));
        assert_eq!(
            report.job,
            JobCounts {
                runs: 4,
                ends_ok: 2,
                ends_error: 1,
                ends_aborted: 1,
                records: 3,
                attempts_without_run: 1,
            }
        );
    }

    #[test]
    fn a_run_outside_its_holders_term_diverges() {
        let d = one_divergence(
            vec![run_start(20, "job-0", "A", 1, 5)],
            0,
            Check::RunInItsTerm,
        );
        assert!(d.why.contains("holds no term of job with token 5"), "{d}");
        // A run whose end (its term's end) came before its start.
        let d = one_divergence(
            vec![
                job_claim(10, "job-0", 5, 1),
                run_start(20, "job-0", "A", 1, 5),
                run_end(15, "job-0", "A", 1, 5, Some(false)),
                job_end(30, "job-0", 5, "closed"),
            ],
            2,
            Check::RunInItsTerm,
        );
        assert!(d.why.contains("before it began"), "{d}");
    }

    #[test]
    fn two_runs_of_a_slot_at_once_diverge() {
        // A run going on after its term ended (the rule is broken at the term's end), and the
        // next term's attempt of the slot while it goes.
        assert_eq!(
            divergences(vec![
                job_claim(10, "job-0", 5, 1),
                run_start(20, "job-0", "A", 1, 5),
                job_end(30, "job-0", 5, "suspended"),
                job_claim(40, "job-1", 7, 2),
                run_start(50, "job-1", "A", 2, 7),
                run_end(60, "job-0", "A", 1, 5, Some(false)),
                run_end(70, "job-1", "A", 2, 7, Some(true)),
                job_end(80, "job-1", 7, "closed"),
            ]),
            vec![(2, Check::RunStopsAtLease), (4, Check::NoTwoAttemptsAtOnce)]
        );
    }

    #[test]
    fn a_run_going_on_after_its_term_diverges_at_the_terms_end() {
        let d = one_divergence(
            vec![
                job_claim(10, "job-0", 5, 1),
                run_start(20, "job-0", "A", 1, 5),
                job_end(30, "job-0", 5, "deadline_passed"),
                run_end(40, "job-0", "A", 1, 5, None),
            ],
            2,
            Check::RunStopsAtLease,
        );
        assert!(d.why.contains("still allowed to act"), "{d}");
    }

    #[test]
    fn attempt_tokens_that_do_not_rise_diverge() {
        // The same token in another term (the same node led again): not strictly above.
        let d = one_divergence(
            vec![
                job_claim(10, "job-0", 5, 1),
                run_start(20, "job-0", "A", 1, 5),
                run_end(30, "job-0", "A", 1, 5, Some(false)),
                job_end(40, "job-0", 5, "closed"),
                job_claim(50, "job-0", 5, 1),
                run_start(60, "job-0", "A", 2, 5),
                run_end(70, "job-0", "A", 2, 5, Some(true)),
            ],
            5,
            Check::AttemptTokensRise,
        );
        assert!(d.why.contains("another term's"), "{d}");
        // The same token in the same term after a run that returned `Ok`.
        let d = one_divergence(
            vec![
                job_claim(10, "job-0", 5, 1),
                run_start(20, "job-0", "A", 1, 5),
                run_end(30, "job-0", "A", 1, 5, Some(true)),
                run_start(40, "job-0", "A", 2, 5),
                run_end(50, "job-0", "A", 2, 5, Some(true)),
            ],
            3,
            Check::AttemptTokensRise,
        );
        assert!(d.why.contains("no restart within a term"), "{d}");
        // A lower token: only with a term of a lower token still held (two valid terms).
        assert_eq!(
            divergences(vec![
                job_claim(10, "job-1", 5, 2),
                job_claim(20, "job-0", 7, 1),
                run_start(30, "job-0", "A", 1, 7),
                run_end(40, "job-0", "A", 1, 7, Some(false)),
                run_start(50, "job-1", "A", 2, 5),
                run_end(60, "job-1", "A", 2, 5, Some(true)),
            ]),
            vec![
                (1, Check::AtMostOneValidTerm),
                (4, Check::AttemptTokensRise)
            ]
        );
        // A record below the slot's last run.
        let d = one_divergence(
            vec![
                job_claim(10, "job-0", 5, 1),
                run_start(20, "job-0", "A", 1, 5),
                run_end(30, "job-0", "A", 1, 5, Some(false)),
                job_end(40, "job-0", 5, "closed"),
                record("A", "running", Some(3), 1),
            ],
            4,
            Check::AttemptTokensRise,
        );
        assert!(d.why.contains("the record's token 3"), "{d}");
    }

    #[test]
    fn attempts_that_do_not_count_up_diverge() {
        one_divergence(
            vec![
                job_claim(10, "job-0", 5, 1),
                run_start(20, "job-0", "A", 1, 5),
                run_end(30, "job-0", "A", 1, 5, None),
                job_end(30, "job-0", 5, "suspended"),
                job_claim(40, "job-1", 7, 2),
                run_start(50, "job-1", "A", 1, 7),
            ],
            5,
            Check::AttemptsCountUp,
        );
        // Within a term, a retry is the next attempt.
        let d = one_divergence(
            vec![
                job_claim(10, "job-0", 5, 1),
                run_start(20, "job-0", "A", 1, 5),
                run_end(30, "job-0", "A", 1, 5, Some(false)),
                run_start(40, "job-0", "A", 3, 5),
            ],
            3,
            Check::AttemptsCountUp,
        );
        assert!(d.why.contains("same term"), "{d}");
        one_divergence(
            vec![
                job_claim(10, "job-0", 5, 1),
                run_start(20, "job-0", "A", 0, 5),
            ],
            1,
            Check::AttemptsCountUp,
        );
    }

    #[test]
    fn a_slot_succeeding_twice_or_with_no_ok_run_diverges() {
        let start = vec![
            job_claim(10, "job-0", 5, 1),
            run_start(20, "job-0", "A", 1, 5),
            run_end(30, "job-0", "A", 1, 5, Some(false)),
            job_end(40, "job-0", 5, "closed"),
        ];
        let mut no_ok = start.clone();
        no_ok.push(record("A", "succeeded", Some(5), 1));
        let d = one_divergence(no_ok, 4, Check::SucceedsAtMostOnce);
        assert!(d.why.contains("returned `Ok`"), "{d}");
        // Attempt 1 recorded succeeded, and attempt 2 ran after it.
        let mut later = vec![
            job_claim(10, "job-0", 5, 1),
            run_start(20, "job-0", "A", 1, 5),
            run_end(30, "job-0", "A", 1, 5, Some(true)),
            job_end(40, "job-0", 5, "closed"),
            job_claim(50, "job-1", 7, 2),
            run_start(60, "job-1", "A", 2, 7),
            run_end(70, "job-1", "A", 2, 7, Some(true)),
            job_end(80, "job-1", 7, "closed"),
        ];
        later.push(record("A", "succeeded", Some(5), 1));
        let d = one_divergence(later, 8, Check::SucceedsAtMostOnce);
        assert!(d.why.contains("never run again"), "{d}");
        let mut twice = clean_job();
        twice.push(record("A", "succeeded", Some(5), 2));
        let d = one_divergence(twice, 16, Check::SucceedsAtMostOnce);
        assert!(d.why.contains("recorded succeeded before"), "{d}");
    }

    #[test]
    fn an_end_of_a_run_not_going_diverges() {
        one_divergence(
            vec![
                job_claim(10, "job-0", 5, 1),
                run_end(20, "job-0", "A", 1, 5, Some(true)),
            ],
            1,
            Check::EndOnlyAGoingRun,
        );
    }

    #[test]
    fn every_check_has_a_crafted_divergence() {
        // The tests above cover each check; this keeps the list and the tests in step.
        assert_eq!(Check::ALL.len(), 16);
    }

    #[test]
    fn the_file_round_trips_and_its_format_is_checked() {
        let mut trace = Trace::new("fault trial", clean());
        trace.seed = Some(3);
        trace.session_timeout_ms = Some(2000);
        let text = trace.to_json();
        assert_eq!(Trace::parse(&text).unwrap(), trace);
        assert!(text.contains("\"event\":\"claim\""), "{text}");
        assert!(text.contains("\"format\": 2"), "{text}");
        let other = text.replacen("\"format\": 2", "\"format\": 3", 1);
        assert!(matches!(Trace::parse(&other), Err(TraceError::Format(3))));
        // Format 1 still reads: the same events with no job event.
        let one = text.replacen("\"format\": 2", "\"format\": 1", 1);
        assert_eq!(Trace::parse(&one).unwrap().events, trace.events);
        assert!(matches!(
            Trace::parse("{\"format\": 1}"),
            Err(TraceError::Json(_))
        ));
        assert!(matches!(Trace::parse("nope"), Err(TraceError::Json(_))));
    }

    #[test]
    fn job_events_need_format_2_and_unknown_tags_are_named() {
        let trace = Trace::new("fault trial", clean_job());
        let text = trace.to_json();
        assert_eq!(Trace::parse(&text).unwrap(), trace);
        let one = text.replacen("\"format\": 2", "\"format\": 1", 1);
        let err = Trace::parse(&one).unwrap_err();
        assert!(
            matches!(&err, TraceError::NotInFormat { index: 1, tag, format: 1, since: 2 } if tag == "run_start"),
            "{err}"
        );
        assert!(err.to_string().contains("format 1 does not have"), "{err}");
        let unknown = r#"{"format": 2, "events": [{"event": "run_stop", "at_ns": 1}]}"#;
        let err = Trace::parse(unknown).unwrap_err();
        assert!(
            matches!(&err, TraceError::UnknownEvent { index: 0, tag } if tag == "run_stop"),
            "{err}"
        );
        assert!(err.to_string().contains("no history format has"), "{err}");
    }

    #[test]
    fn events_out_of_time_order_are_a_bad_file() {
        let trace = Trace::new(
            "test",
            vec![claim(10, "a", 5, None), write(5, "a", 5, true)],
        );
        assert!(matches!(
            check_order(&trace),
            Err(TraceError::Order { index: 1, .. })
        ));
    }
}
