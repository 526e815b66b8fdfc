//! What `run`, `lock` and `cron run` share: one term with CMD supervised under it, and the
//! lines that report the term (`leader`, `not_leader`, `cmd_*`).

use std::cell::Cell;
use std::ffi::OsString;
use std::process::ExitCode;

use futures::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use zookeeper_recipes::{ConnectionState, Leadership, Session, SessionStatus};

use crate::Fail;
use crate::output::{Event, Out, mono_ns, now_ms, term_end};
use crate::signals::Signals;
use crate::supervise::{
    CommandSpec, Outcome, ProcessError, ProcessEvent, StopReason, SupervisedCommand,
};

/// Why a term ended, as `TermEnd::as_str()` names it: the term's own record when it has one,
/// else read off the session at the moment the supervisor noticed (the supervisor may notice a
/// passed deadline before the contender's task has ended the term).
pub(crate) fn term_end_reason(
    session: &Session,
    term: &Leadership,
    reason: StopReason,
) -> &'static str {
    if let Some(end) = term.end_reason() {
        return end.as_str();
    }
    match reason {
        StopReason::DeadlinePassed => "deadline_passed",
        StopReason::Shutdown | StopReason::Leftovers => "closed",
        StopReason::GraceExpired => "closed",
        _ => {
            let status = session.status();
            match status.state {
                _ if status.closed => "closed",
                Some(ConnectionState::Suspended) => "suspended",
                Some(ConnectionState::ReadOnly) => "read_only",
                Some(ConnectionState::Lost) => "lost",
                _ if session.session_id() != Some(term.session_id()) => "lost",
                _ if session.clock().now() >= session.safe_until() => "deadline_passed",
                _ => "node_deleted",
            }
        }
    }
}

/// What one supervised term reports, and whether `not_leader` was written for it yet.
pub(crate) struct TermReport<'a> {
    pub(crate) out: Out,
    pub(crate) session: &'a Session,
    pub(crate) id: &'a str,
    pub(crate) term: &'a Leadership,
    pub(crate) not_leader_sent: Cell<bool>,
}

impl TermReport<'_> {
    pub(crate) fn leader(&self) {
        self.out.emit_best_effort(&Event::Leader {
            id: self.id,
            token: self.term.token().get(),
            path: self.term.path(),
            ts_ms: now_ms(),
            started_mono_ns: Some(mono_ns(self.term.started_at())),
            started_boot_ns: Some(self.term.started_at().as_nanos()),
        });
    }

    pub(crate) fn not_leader(&self, reason: &str) {
        if self.not_leader_sent.replace(true) {
            return;
        }
        self.out.emit_best_effort(&Event::NotLeader {
            id: self.id,
            token: self.term.token().get(),
            path: self.term.path(),
            reason,
            ts_ms: now_ms(),
            ended_mono_ns: mono_ns(term_end(self.term)),
            ended_boot_ns: term_end(self.term).as_nanos(),
        });
    }

    pub(crate) fn process_event(&self, event: ProcessEvent) {
        match event {
            ProcessEvent::Started { pid, token } => {
                self.out.emit_best_effort(&Event::CmdStarted {
                    pid,
                    token: token.get(),
                    ts_ms: now_ms(),
                });
            }
            ProcessEvent::Signalled { signal, reason } => {
                let lost = matches!(reason, StopReason::TermEnded | StopReason::DeadlinePassed);
                let why = if lost {
                    term_end_reason(self.session, self.term, reason)
                } else {
                    reason.as_str()
                };
                self.out.emit_best_effort(&Event::CmdSignalled {
                    signal: signal.as_str(),
                    reason: why,
                    ts_ms: now_ms(),
                });
                if lost {
                    self.not_leader(why);
                }
            }
            ProcessEvent::Exited { exit } => {
                self.out.emit_best_effort(&Event::CmdExited {
                    code: exit.code(),
                    ts_ms: now_ms(),
                });
            }
        }
    }

    /// After the run: `not_leader` for a term that ended by release (or was lost without a
    /// signal being needed).
    pub(crate) fn finish(&self, outcome: &Outcome) {
        let reason = match outcome.stopped {
            Some(r @ (StopReason::TermEnded | StopReason::DeadlinePassed)) => {
                term_end_reason(self.session, self.term, r)
            }
            _ => "closed",
        };
        self.not_leader(reason);
    }
}

/// Supervises CMD under `term` while reporting state changes and turning SIGINT/SIGTERM into a
/// shutdown. Everything runs in this one task, with the supervisor polled first: whatever wakes
/// the task, CMD is signalled before any other line is written (matters after a freeze).
pub(crate) async fn supervise<S>(
    report: &TermReport<'_>,
    supervisor: &SupervisedCommand,
    shutdown: &CancellationToken,
    signals: &mut Signals,
    states: &mut S,
) -> Result<Outcome, ProcessError>
where
    S: Stream<Item = SessionStatus> + Unpin,
{
    let run = supervisor.run(report.term, |event| report.process_event(event));
    tokio::pin!(run);
    loop {
        tokio::select! {
            biased;
            outcome = &mut run => return outcome,
            _ = signals.recv(), if !shutdown.is_cancelled() => shutdown.cancel(),
            Some(status) = states.next() => {
                report.out.state(&status, report.id, Some(report.term.path()));
            }
        }
    }
}

pub(crate) fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(u8::MAX))
}

pub(crate) fn command_spec(argv: Vec<OsString>) -> Result<CommandSpec, Fail> {
    let spec = CommandSpec::from_argv(argv)?;
    spec.shim_current_exe().map_err(|e| {
        Fail::new(format!(
            "cannot find zkr's own executable for the shim: {e}"
        ))
    })
}

/// Checks that CMD can be started, as `execvp` would look it up: a program with a `/` must be
/// an executable file; any other must be one in a directory of `PATH`. Exit code 127 when it
/// is not found, 126 when it is found but cannot be executed (the shell's codes).
pub(crate) fn check_command(argv: &[OsString]) -> Result<(), Fail> {
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Path, PathBuf};

    let Some(program) = argv.first() else {
        return Err(Fail::with_code(crate::codes::USAGE, "no command given"));
    };
    let executable =
        |p: &Path| p.is_file() && nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok();
    let shown = Path::new(program).display().to_string();
    if program.as_bytes().contains(&b'/') {
        let p = Path::new(program);
        if !p.exists() {
            return Err(Fail::with_code(
                crate::codes::NOT_FOUND,
                format!("CMD {shown} does not exist"),
            ));
        }
        if !executable(p) {
            return Err(Fail::with_code(
                crate::codes::NOT_EXECUTABLE,
                format!("CMD {shown} is not an executable file"),
            ));
        }
        return Ok(());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut found_not_executable: Option<PathBuf> = None;
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(program);
        if executable(&candidate) {
            return Ok(());
        }
        if candidate.exists() && found_not_executable.is_none() {
            found_not_executable = Some(candidate);
        }
    }
    match found_not_executable {
        Some(p) => Err(Fail::with_code(
            crate::codes::NOT_EXECUTABLE,
            format!(
                "CMD {shown} is found as {} but is not executable",
                p.display()
            ),
        )),
        None => Err(Fail::with_code(
            crate::codes::NOT_FOUND,
            format!(
                "CMD {shown} is not found on PATH ({})",
                path.to_string_lossy()
            ),
        )),
    }
}
