//! What zkr prints, and how. The field names are a contract (scripts parse them): keep them,
//! and add fields only.
//!
//! - [`Event`]: the event lines, one JSON object per line and flushed at once ([`Out`]), on
//!   stdout for `latch`, `watch` and `pool`, on stderr for `run`, `lock` and `cron run`; the
//!   `print_*_event` functions turn the recipes' events into them.
//! - The JSON that `zkr participants` and `zkr cron status` print: zkr's own shapes, so that the
//!   library's types carry no serialization for the CLI.
//! - Ids and data read from ZooKeeper are strangers' input: every line goes through [`to_json`]
//!   (or [`to_json_vec`]), which escapes, beyond what JSON requires, every character that
//!   could drive a terminal or hide text (DEL, the C1 controls, the bidirectional and line
//!   separator marks), so that no control byte but the line's newline reaches the output; the
//!   one line printed bare, `zkr leader`'s, goes through [`bare_or_json`].

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use zookeeper_recipes::job::{JobEvent, JobStatus, SlotRecord};
use zookeeper_recipes::{
    BootTime, ElectionNode, LatchEvent, LeaderLatch, Leadership, ObserverEvent, Participant,
    PoolEvent, SessionStatus,
};

use crate::mono::MonotonicTime;

/// Whether JSON output escapes `c` although JSON would allow it raw: DEL and the C1 controls
/// (U+0080..U+009F: U+009B is CSI for a terminal that takes 8-bit controls), the bidirectional
/// marks and isolates (text that reads differently from what it is), the line and paragraph
/// separators (line breaks to some readers) and the byte order mark. The C0 controls, `"` and
/// `\` are escaped by JSON itself.
fn escaped_beyond_json(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}'
            | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// serde_json's compact output, with [`escaped_beyond_json`] characters written as `\uXXXX`.
struct SafeFormatter;

impl serde_json::ser::Formatter for SafeFormatter {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut start = 0;
        for (at, c) in fragment.char_indices() {
            if escaped_beyond_json(c) {
                writer.write_all(&fragment.as_bytes()[start..at])?;
                // Every such character is in the Basic Multilingual Plane: one `\u` escape.
                write!(writer, "\\u{:04x}", u32::from(c))?;
                start = at + c.len_utf8();
            }
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }
}

/// `value` as one line of JSON (no newline), safe to print: see [`escaped_beyond_json`].
pub(crate) fn to_json_vec<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(128);
    value.serialize(&mut serde_json::Serializer::with_formatter(
        &mut out,
        SafeFormatter,
    ))?;
    Ok(out)
}

/// [`to_json_vec`] as a string.
pub(crate) fn to_json<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    // The formatter writes whole UTF-8 characters and ASCII escapes only.
    String::from_utf8(to_json_vec(value)?).map_err(serde::ser::Error::custom)
}

/// An id as `zkr leader` prints it: bare when it is plain (no control character, no `"` or
/// `\`, none of the characters [`to_json`] escapes, no U+FFFD, which stands for bytes that were
/// not UTF-8), else as a JSON string literal. A line that starts with `"` is therefore always
/// JSON, and any other line is the id itself.
pub(crate) fn bare_or_json(id: &str) -> String {
    let plain = !id
        .chars()
        .any(|c| escaped_beyond_json(c) || matches!(c, '"' | '\\' | '\u{fffd}'));
    if plain {
        id.to_owned()
    } else {
        // A string always serializes.
        to_json(id).unwrap_or_else(|_| String::from("\"\""))
    }
}

/// One element of `zkr participants`: `{"id":"replica-1","leader":true}`; a foreign node (named
/// like a contender, but persistent) also carries `"foreign":true` and its `node` name.
#[derive(Debug, Serialize)]
pub(crate) struct ParticipantLine<'a> {
    id: &'a str,
    leader: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    foreign: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<&'a str>,
}

impl<'a> From<&'a Participant> for ParticipantLine<'a> {
    fn from(p: &'a Participant) -> Self {
        ParticipantLine {
            id: &p.id,
            leader: p.is_leader,
            foreign: false,
            node: None,
        }
    }
}

impl<'a> From<&'a ElectionNode> for ParticipantLine<'a> {
    fn from(n: &'a ElectionNode) -> Self {
        ParticipantLine {
            id: &n.id,
            leader: n.is_leader,
            foreign: n.foreign,
            node: n.foreign.then_some(n.name.as_str()),
        }
    }
}

/// `zkr cron status`. Slot records print as they are stored (their wire format); an open
/// record whose runner's term is gone carries `"orphaned": true`.
#[derive(Debug, Serialize)]
pub(crate) struct StatusLine<'a> {
    path: &'a str,
    schedule: Option<&'a str>,
    paused: bool,
    leader: Option<&'a str>,
    cursor: Option<&'a str>,
    triggers_pending: u64,
    open: Vec<OpenSlot<'a>>,
    last: Option<&'a SlotRecord>,
    /// The keys of the open slots recorded `running` whose runner's term is gone.
    orphaned: &'a [String],
    /// The newest success the history holds: its slot, when it ended (the ensemble's clock,
    /// from the record) and how long ago (by `clock`: the ensemble's unless this identity
    /// cannot write the job's `clock` node).
    last_success: Option<LastSuccess<'a>>,
    /// With `--check`: what was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    check: Option<CheckLine>,
    /// The clock the ages are measured on.
    clock: Clock,
    /// Its time when the status was read (milliseconds since the Unix epoch).
    now_ms: i64,
}

/// The clock `zkr cron status` measures ages on: the ensemble's (the `mtime` of a write to the
/// job's `clock` node), or, when this identity cannot write there, this host's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Clock {
    Ensemble,
    Local,
}

/// An open slot of `zkr cron status`: the record, flagged when its runner is gone.
#[derive(Debug, Serialize)]
pub(crate) struct OpenSlot<'a> {
    #[serde(flatten)]
    record: &'a SlotRecord,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    orphaned: bool,
}

/// `last_success` of `zkr cron status`.
#[derive(Debug, Serialize)]
pub(crate) struct LastSuccess<'a> {
    slot: &'a str,
    ended_ms: Option<i64>,
    age_ms: Option<i64>,
}

/// `check` of `zkr cron status --check`.
#[derive(Debug, Serialize)]
pub(crate) struct CheckLine {
    healthy: bool,
    /// `no_leader`, `failed`, `parked`, `stale`, most pressing first.
    problems: Vec<&'static str>,
    max_age_ms: Option<u64>,
}

impl<'a> StatusLine<'a> {
    /// The status at time `now_ms` of `clock` (for the age of the last success).
    pub(crate) fn new(s: &'a JobStatus, now_ms: i64, clock: Clock) -> Self {
        StatusLine {
            path: &s.path,
            schedule: s.schedule.as_deref(),
            paused: s.paused,
            leader: s.leader.as_deref(),
            cursor: s.cursor.as_deref(),
            triggers_pending: s.triggers_pending,
            open: s
                .open
                .iter()
                .map(|record| OpenSlot {
                    record,
                    orphaned: s.orphaned.contains(&record.slot),
                })
                .collect(),
            last: s.last.as_ref(),
            orphaned: &s.orphaned,
            last_success: s.last_success.as_ref().map(|r| LastSuccess {
                slot: &r.slot,
                ended_ms: r.ended_ms,
                age_ms: r.ended_ms.map(|e| now_ms.saturating_sub(e)),
            }),
            check: None,
            clock,
            now_ms,
        }
    }

    /// With the result of `--check`.
    pub(crate) fn with_check(
        mut self,
        problems: Vec<&'static str>,
        max_age: Option<std::time::Duration>,
    ) -> Self {
        self.check = Some(CheckLine {
            healthy: problems.is_empty(),
            problems,
            max_age_ms: max_age.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        });
        self
    }
}

/// One output line.
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum Event<'a> {
    Leader {
        id: &'a str,
        token: i64,
        path: &'a str,
        ts_ms: u64,
        /// Absent on `watch`'s lines: an observer does not know when another process's term
        /// began.
        #[serde(skip_serializing_if = "Option::is_none")]
        started_mono_ns: Option<u64>,
        /// The same instant on `CLOCK_BOOTTIME`.
        #[serde(skip_serializing_if = "Option::is_none")]
        started_boot_ns: Option<u64>,
    },
    NotLeader {
        id: &'a str,
        token: i64,
        path: &'a str,
        reason: &'a str,
        ts_ms: u64,
        ended_mono_ns: u64,
        /// The same instant on `CLOCK_BOOTTIME`.
        ended_boot_ns: u64,
    },
    State {
        state: &'a str,
        id: &'a str,
        path: Option<&'a str>,
        ts_ms: u64,
    },
    NoLeader {
        ts_ms: u64,
    },
    /// `--metrics-addr`: the metrics and probes are served on `addr` (the bound address).
    MetricsListening {
        addr: &'a str,
        ts_ms: u64,
    },
    /// A `leader` line of `pool`: one per job term.
    #[serde(rename = "leader")]
    JobLeader {
        job: &'a str,
        id: &'a str,
        token: i64,
        path: &'a str,
        since_ms: u64,
        ts_ms: u64,
    },
    /// A `not_leader` line of `pool`.
    #[serde(rename = "not_leader")]
    JobNotLeader {
        job: &'a str,
        id: &'a str,
        token: i64,
        path: &'a str,
        reason: &'a str,
        until_ms: u64,
        ts_ms: u64,
    },
    /// The assignment a `pool` member read: its own jobs and all members.
    Assignment {
        jobs: Vec<&'a str>,
        members: &'a [String],
        ts_ms: u64,
    },
    /// A `state` line of `watch`, which has no id and no node of its own.
    #[serde(rename = "state")]
    ObserverState {
        state: &'a str,
        ts_ms: u64,
    },
    CmdStarted {
        pid: u32,
        token: i64,
        ts_ms: u64,
    },
    CmdSignalled {
        signal: &'a str,
        reason: &'a str,
        ts_ms: u64,
    },
    CmdExited {
        code: i32,
        ts_ms: u64,
    },
    /// `cron run`: this replica claimed a slot and starts CMD for it.
    SlotStarted {
        slot: &'a str,
        token: i64,
        attempt: u32,
        recovering: bool,
        ts_ms: u64,
    },
    /// `cron run`: a slot's end was recorded (`parked`/`failed` without a run for a cut-off
    /// slot a new leader found; `reason` says why).
    SlotFinished {
        slot: &'a str,
        outcome: &'a str,
        exit_code: Option<i32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<&'a str>,
        ts_ms: u64,
    },
    SlotSkipped {
        slot: &'a str,
        reason: &'a str,
        ts_ms: u64,
    },
    SlotRetrying {
        slot: &'a str,
        attempt: u32,
        failures: u32,
        backoff_ms: u64,
        error: &'a str,
        ts_ms: u64,
    },
    SlotMissed {
        from: &'a str,
        to: &'a str,
        count: u64,
        reason: &'a str,
        ts_ms: u64,
    },
    /// `cron run`: the record of a slot's end was refused (the term was over): the slot stays
    /// `running` for the next leader.
    SlotAbandoned {
        slot: &'a str,
        token: i64,
        reason: &'a str,
        ts_ms: u64,
    },
    ScheduleChanged {
        from: &'a str,
        to: &'a str,
        ts_ms: u64,
    },
    /// `cron run`: the leader saw an operator's pause; it starts no slot but triggers.
    JobPaused {
        ts_ms: u64,
    },
    /// `cron run`: the leader saw the resume.
    JobResumed {
        ts_ms: u64,
    },
    /// `cron run`: this host's wall clock is off the ensemble's by more than the tolerance; the
    /// replica took up no slot and gave up its term.
    ClockSkew {
        offset_ms: i64,
        tolerance_ms: u64,
        ts_ms: u64,
    },
    /// `cron run`: the job's cursor was found in the future by the ensemble's clock and brought
    /// back.
    CursorRewound {
        from: &'a str,
        to: &'a str,
        ts_ms: u64,
    },
    /// `cron run`: this replica stands in the job's election and another leads (or none yet):
    /// `position` is its place in line (1: next), out of `participants`.
    Standby {
        id: &'a str,
        leader: Option<&'a str>,
        position: usize,
        participants: usize,
        ts_ms: u64,
    },
    /// Something an operator should fix: `kind` names it, `message` says what and why.
    Warning {
        kind: &'a str,
        message: &'a str,
        ts_ms: u64,
    },
    /// `cron run`: no ZooKeeper server answered at start; zkr tries again after `retry_in_ms`.
    ConnectFailed {
        attempt: u32,
        error: &'a str,
        retry_in_ms: u64,
        ts_ms: u64,
    },
    /// `cron run --drain`: a signal came while CMD ran `slot`; zkr lets it finish for up to
    /// `timeout_ms`.
    DrainStarted {
        slot: Option<&'a str>,
        timeout_ms: u64,
        ts_ms: u64,
    },
    /// `cron run --drain`: the drain is over: CMD `finished` in time, or it `ran_out` and CMD was
    /// stopped.
    DrainEnded {
        outcome: &'a str,
        ts_ms: u64,
    },
}

/// `--events FILE`: where the event lines that would go to stderr go instead.
static EVENTS_FILE: std::sync::OnceLock<std::sync::Mutex<std::fs::File>> =
    std::sync::OnceLock::new();

/// Sends the event lines meant for stderr to `file` (appended), for the rest of the process.
pub(crate) fn events_to(file: &std::path::Path) -> std::io::Result<()> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)?;
    let _ = EVENTS_FILE.set(std::sync::Mutex::new(f));
    Ok(())
}

/// `CLOCK_MONOTONIC` in nanoseconds at boot time `at`.
pub(crate) fn mono_ns(at: BootTime) -> u64 {
    MonotonicTime::from_boot(at).as_nanos()
}

/// When `term` stopped being valid; for a term not ended yet, now or its deadline if earlier.
pub(crate) fn term_end(term: &Leadership) -> BootTime {
    term.ended_at()
        .unwrap_or_else(|| term.clock().now().min(term.valid_until()))
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Where event lines go.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Out {
    Stdout,
    Stderr,
}

impl Out {
    /// Writes one event as one line and flushes it.
    pub(crate) fn emit(self, event: &Event<'_>) -> std::io::Result<()> {
        let mut value = serde_json::to_value(event).map_err(std::io::Error::other)?;
        if let serde_json::Value::Object(fields) = &mut value {
            fields.insert("mono_ns".to_owned(), MonotonicTime::now().as_nanos().into());
            fields.insert("boot_ns".to_owned(), BootTime::now().as_nanos().into());
        }
        let mut line = to_json_vec(&value).map_err(std::io::Error::other)?;
        line.push(b'\n');
        match self {
            Out::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(&line)?;
                out.flush()
            }
            Out::Stderr => match EVENTS_FILE.get() {
                // One write per line (O_APPEND): whole lines, also beside other writers.
                Some(file) => {
                    let mut f = file.lock().map_err(|_| std::io::Error::other("poisoned"))?;
                    f.write_all(&line)?;
                    f.flush()
                }
                None => {
                    let mut out = std::io::stderr().lock();
                    out.write_all(&line)?;
                    out.flush()
                }
            },
        }
    }

    /// [`emit`](Self::emit) for output nobody may be reading (stderr of run and lock): a write
    /// error must not stop the supervision of CMD.
    pub(crate) fn emit_best_effort(self, event: &Event<'_>) {
        let _ = self.emit(event);
    }

    /// A `warning` line (also a tracing warning).
    pub(crate) fn warning(self, kind: &str, message: &str) {
        tracing::warn!(kind, "{message}");
        self.emit_best_effort(&Event::Warning {
            kind,
            message,
            ts_ms: now_ms(),
        });
    }

    pub(crate) fn state(self, status: &SessionStatus, id: &str, path: Option<&str>) {
        if let Some(state) = status.state {
            self.emit_best_effort(&Event::State {
                state: state.as_str(),
                id,
                path,
                ts_ms: now_ms(),
            });
        }
    }
}

pub(crate) fn print_latch_event(
    latch: &LeaderLatch,
    event: &LatchEvent,
    current: &mut Option<Leadership>,
) -> std::io::Result<()> {
    let id = latch.id();
    match event {
        LatchEvent::Leader(term) => {
            *current = Some(term.clone());
            Out::Stdout.emit(&Event::Leader {
                id,
                token: term.token().get(),
                path: term.path(),
                ts_ms: now_ms(),
                started_mono_ns: Some(mono_ns(term.started_at())),
                started_boot_ns: Some(term.started_at().as_nanos()),
            })
        }
        LatchEvent::NotLeader { token, reason } => {
            // The term this ends is the last one reported (events come in order).
            let term = current.take().filter(|t| t.token() == *token);
            let path = term
                .as_ref()
                .map(|t| t.path().to_owned())
                .or_else(|| latch.our_path())
                .unwrap_or_default();
            let ended = term.as_ref().map_or_else(BootTime::now, term_end);
            Out::Stdout.emit(&Event::NotLeader {
                id,
                token: token.get(),
                path: &path,
                reason: reason.as_str(),
                ts_ms: now_ms(),
                ended_mono_ns: mono_ns(ended),
                ended_boot_ns: ended.as_nanos(),
            })
        }
        LatchEvent::State(state) => {
            let path = latch.our_path();
            Out::Stdout.emit(&Event::State {
                state: state.as_str(),
                id,
                path: path.as_deref(),
                ts_ms: now_ms(),
            })
        }
        _ => Ok(()),
    }
}

/// Wall-clock milliseconds of a past instant.
fn wall_ms(at: BootTime) -> u64 {
    let ago = u64::try_from(BootTime::now().saturating_duration_since(at).as_millis())
        .unwrap_or(u64::MAX);
    now_ms().saturating_sub(ago)
}

pub(crate) fn print_pool_event(id: &str, event: &PoolEvent) -> std::io::Result<()> {
    match event {
        PoolEvent::Leader { job, term } => Out::Stdout.emit(&Event::JobLeader {
            job,
            id,
            token: term.token().get(),
            path: term.path(),
            since_ms: wall_ms(term.started_at()),
            ts_ms: now_ms(),
        }),
        PoolEvent::NotLeader { job, term, reason } => Out::Stdout.emit(&Event::JobNotLeader {
            job,
            id,
            token: term.token().get(),
            path: term.path(),
            reason: reason.as_str(),
            until_ms: wall_ms(term.ended_at().unwrap_or_else(BootTime::now)),
            ts_ms: now_ms(),
        }),
        PoolEvent::Assignment(a) => Out::Stdout.emit(&Event::Assignment {
            jobs: a.jobs_of(id),
            members: &a.members,
            ts_ms: now_ms(),
        }),
        PoolEvent::State(state) => Out::Stdout.emit(&Event::State {
            state: state.as_str(),
            id,
            path: None,
            ts_ms: now_ms(),
        }),
        _ => Ok(()),
    }
}

pub(crate) fn print_observer_event(event: &ObserverEvent) -> std::io::Result<()> {
    match event {
        ObserverEvent::Leader(leader) => Out::Stdout.emit(&Event::Leader {
            id: &leader.id,
            token: leader.token.get(),
            path: &leader.node,
            ts_ms: now_ms(),
            started_mono_ns: None,
            started_boot_ns: None,
        }),
        ObserverEvent::NoLeader => Out::Stdout.emit(&Event::NoLeader { ts_ms: now_ms() }),
        ObserverEvent::State(state) => Out::Stdout.emit(&Event::ObserverState {
            state: state.as_str(),
            ts_ms: now_ms(),
        }),
        _ => Ok(()),
    }
}

pub(crate) fn print_job_event(event: &JobEvent) {
    let out = Out::Stderr;
    let ts_ms = now_ms();
    match event {
        JobEvent::SlotStarted {
            slot,
            token,
            attempt,
            recovering,
        } => out.emit_best_effort(&Event::SlotStarted {
            slot,
            token: token.get(),
            attempt: *attempt,
            recovering: *recovering,
            ts_ms,
        }),
        JobEvent::SlotFinished {
            slot,
            outcome,
            exit_code,
            reason,
        } => out.emit_best_effort(&Event::SlotFinished {
            slot,
            outcome: outcome.as_str(),
            exit_code: *exit_code,
            reason: reason.as_deref(),
            ts_ms,
        }),
        JobEvent::SlotRetrying {
            slot,
            attempt,
            failures,
            backoff,
            error,
        } => out.emit_best_effort(&Event::SlotRetrying {
            slot,
            attempt: *attempt,
            failures: *failures,
            backoff_ms: u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX),
            error,
            ts_ms,
        }),
        JobEvent::SlotSkipped { slot, reason } => out.emit_best_effort(&Event::SlotSkipped {
            slot,
            reason,
            ts_ms,
        }),
        JobEvent::SlotMissed {
            from,
            to,
            count,
            reason,
        } => out.emit_best_effort(&Event::SlotMissed {
            from,
            to,
            count: *count,
            reason,
            ts_ms,
        }),
        JobEvent::SlotAbandoned {
            slot,
            token,
            reason,
        } => out.emit_best_effort(&Event::SlotAbandoned {
            slot,
            token: token.get(),
            reason,
            ts_ms,
        }),
        JobEvent::ScheduleChanged { from, to } => {
            out.emit_best_effort(&Event::ScheduleChanged { from, to, ts_ms });
        }
        JobEvent::PauseChanged { paused: true } => {
            out.emit_best_effort(&Event::JobPaused { ts_ms })
        }
        JobEvent::PauseChanged { paused: false } => {
            out.emit_best_effort(&Event::JobResumed { ts_ms });
        }
        JobEvent::ClockSkew {
            offset_ms,
            tolerance_ms,
        } => out.emit_best_effort(&Event::ClockSkew {
            offset_ms: *offset_ms,
            tolerance_ms: *tolerance_ms,
            ts_ms,
        }),
        JobEvent::CursorRewound { from, to } => {
            out.emit_best_effort(&Event::CursorRewound { from, to, ts_ms });
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_participant_prints_as_before() {
        let p = Participant {
            id: "replica-1".into(),
            is_leader: true,
        };
        assert_eq!(
            serde_json::to_string(&[ParticipantLine::from(&p)]).unwrap(),
            r#"[{"id":"replica-1","leader":true}]"#
        );
    }

    /// The id of the issue: an OSC title sequence, a bell, a newline and a command.
    const HOSTILE: &str = "\u{1b}]0;pwned\u{7}\nrm -rf";

    #[test]
    fn json_output_carries_no_control_byte_and_reads_back_the_same() {
        for id in [
            HOSTILE,
            "del\u{7f} csi\u{9b}31m nel\u{85}",
            "bidi \u{202e}txt.exe\u{2066} ls\u{2028}ps\u{2029} bom\u{feff} alm\u{61c}",
            "quote\" backslash\\ tab\t nul\u{0}",
            "plain-id \u{e9}\u{20ac} \u{1f600}",
        ] {
            let line = to_json(&[ParticipantLine::from(&Participant {
                id: id.into(),
                is_leader: true,
            })])
            .unwrap();
            assert!(
                line.chars()
                    .all(|c| !escaped_beyond_json(c) && !c.is_control()),
                "{line:?}"
            );
            let back: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(back[0]["id"], id, "{line}");
        }
        // What needs no escape is written as serde_json writes it.
        let value = serde_json::json!({"id": "a \u{e9} \"q\" \n", "n": [1, true, null]});
        assert_eq!(
            to_json(&value).unwrap(),
            serde_json::to_string(&value).unwrap()
        );
    }

    #[test]
    fn a_plain_id_prints_bare_and_any_other_as_a_json_string() {
        for plain in [
            "replica-1",
            "10.0.0.12",
            "pod-7f9c/job \u{e9}\u{20ac}",
            "",
            "a b",
        ] {
            assert_eq!(bare_or_json(plain), plain);
        }
        for other in [
            HOSTILE,
            "\"quoted\"",
            "back\\slash",
            "lossy \u{fffd}",
            "c1\u{9b}",
            "rlo\u{202e}",
        ] {
            let printed = bare_or_json(other);
            assert!(printed.starts_with('"'), "{printed:?}");
            assert!(!printed.chars().any(|c| c.is_control()), "{printed:?}");
            assert_eq!(serde_json::from_str::<String>(&printed).unwrap(), other);
        }
        assert_eq!(bare_or_json(HOSTILE), r#""\u001b]0;pwned\u0007\nrm -rf""#);
    }
}
