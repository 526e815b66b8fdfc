//! Trace validation: a recorded history of a real run (a fault trial's terms, term ends, fenced
//! writes and session expiries) replayed against the model's observable actions.
//!
//! The recorded runs have more participants, more servers and far more time than the model's
//! bounded configuration, so a recorded event is not matched to one state of
//! [`ElectionModel`](crate::ElectionModel). It is matched to the model's *observable* action
//! (`Claim`, `EndTerm`, `Release`, `OwnNodeGone`, `Reconnect`, `SessionExpired`) and checked
//! against an abstract state driven by the events so far: per election the terms held now,
//! the highest token and who got it; the sessions known expired and the tokens of their nodes;
//! per fenced resource the highest token accepted. Each check is one guard or property of the
//! model ([`Check`] names it); `model/README.md` ("Trace validation") says what is and is not
//! checked.
//!
//! The file format is JSON, versioned ([`FORMAT`]): see [`Trace`] and [`Event`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

/// The history file format this crate writes and reads.
pub const FORMAT: u32 = 1;

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
    /// order they happened (a term's end before a claim at the same instant; a resource's
    /// writes in arrival order). A term's end is never placed before its claim.
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
                "history format {v} is not supported (this replay reads format {FORMAT})"
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

    /// Reads a history file's text.
    ///
    /// # Errors
    /// [`TraceError::Json`] when it is not a trace, [`TraceError::Format`] for another format.
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        // The version first, so that another format is named as such, not as bad JSON.
        #[derive(Deserialize)]
        struct Version {
            format: u32,
        }
        let version: Version = serde_json::from_str(text).map_err(TraceError::Json)?;
        if version.format != FORMAT {
            return Err(TraceError::Format(version.format));
        }
        serde_json::from_str(text).map_err(TraceError::Json)
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
}

impl Check {
    /// Every check.
    pub const ALL: [Check; 9] = [
        Check::AtMostOneValidTerm,
        Check::TokensRise,
        Check::ClaimOnlyWhenNotLeading,
        Check::TermStartsOnProvenLease,
        Check::EndOnlyAHeldTerm,
        Check::ExpiryAfterEveryTerm,
        Check::NoClaimOnExpiredSession,
        Check::Fence,
        Check::WriteWithAClaimedToken,
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
}

/// A term held now, in the abstract state.
#[derive(Clone, Debug)]
struct Held {
    holder: String,
    token: i64,
    session: Option<i64>,
    start: u64,
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
/// it is earlier (the recorder places an end that precedes its claim right after the claim;
/// the replay then reports it).
///
/// # Errors
/// [`TraceError::Order`] for the first event out of order.
pub fn check_order(trace: &Trace) -> Result<(), TraceError> {
    let mut previous = 0u64;
    let mut starts: BTreeMap<(&str, &str, i64), u64> = BTreeMap::new();
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

    #[test]
    fn every_check_has_a_crafted_divergence() {
        // The tests above cover each check; this keeps the list and the tests in step.
        assert_eq!(Check::ALL.len(), 9);
    }

    #[test]
    fn the_file_round_trips_and_its_format_is_checked() {
        let mut trace = Trace::new("fault trial", clean());
        trace.seed = Some(3);
        trace.session_timeout_ms = Some(2000);
        let text = trace.to_json();
        assert_eq!(Trace::parse(&text).unwrap(), trace);
        assert!(text.contains("\"event\":\"claim\""), "{text}");
        let other = text.replacen("\"format\": 1", "\"format\": 2", 1);
        assert!(matches!(Trace::parse(&other), Err(TraceError::Format(2))));
        assert!(matches!(
            Trace::parse("{\"format\": 1}"),
            Err(TraceError::Json(_))
        ));
        assert!(matches!(Trace::parse("nope"), Err(TraceError::Json(_))));
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
