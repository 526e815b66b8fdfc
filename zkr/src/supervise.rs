//! Running a command for exactly as long as a leadership term (or lock hold) lasts.
//!
//! This is the engine of `zkr run` and `zkr lock`, usable from any program: it starts a command
//! when a [`Leadership`] term begins and makes sure the command does not outlive the term.
//!
//! - **Its own process group.** The command is started in a new process group, so that
//!   everything it forks (a shell's children, worker processes) can be signalled at once.
//! - **Stopped when the term ends, for any reason**: the term's [`Leadership::cancelled`] future
//!   fires (connection suspended, session lost, node deleted, recipe closed), *or* its deadline
//!   [`Leadership::valid_until`] passes. The deadline is on boot time, which counts a host's
//!   suspend (`zookeeper_recipes::BootTime`), and is checked every time the supervisor runs, so a process
//!   that was frozen past its session (`SIGSTOP`, a stalled host) or whose host was suspended
//!   stops its command the moment it runs again, before any network round trip. Stopping means
//!   `SIGTERM` (and `SIGCONT`, so a stopped process can act on it) to the whole group at once,
//!   and `SIGKILL` to the group when the grace period runs out **or the term's lease
//!   ([`Leadership::stop_by`]) passes, whichever comes first**: after the lease a successor may
//!   start, so a command that ignores `SIGTERM` is not given the rest of its grace then. (A
//!   selector whose lease is not renewed ends its term the grace before the lease's deadline,
//!   so a command that does stop gets its grace.)
//! - **What no clock of this host sees**: a hypervisor that pauses the VM and restores its clock
//!   on resume (`virsh suspend`, QEMU `stop`/`cont` with kvmclock) hides the pause from boot time
//!   too. The command is stopped only once the session sees the guest's wall clock stepped back
//!   into line (a lease voided by a wall clock that ran ahead of boot time), and until then only
//!   fencing protects the resource.
//! - **Done only when the whole group is gone**: [`SupervisedCommand::run`] returns once
//!   `killpg(pgid, 0)` says `ESRCH`, never while a process of the group may still act as leader.
//!   If the command exits by itself but leaves processes behind in its group, those are stopped
//!   the same way (reason [`StopReason::Leftovers`]). Orphans of the group become children of
//!   this process if it is a child subreaper ([`become_child_subreaper`]), and are then reaped
//!   here; otherwise the system's init reaps them, which may take a while.
//! - **Environment**: the command gets [`ENV_FENCING_TOKEN`] (the term's token as a decimal
//!   integer), [`ENV_LEADER_ID`] and [`ENV_LEADER_PATH`].
//! - **Parent death.** With a shim ([`CommandSpec::shim`]), the command is started as
//!   `<shim> __exec <our pid> -- CMD ARGS...`; the shim ([`exec_shim`]) asks the kernel to
//!   `SIGKILL` it when its parent dies (`PR_SET_PDEATHSIG`), checks that its parent is still the
//!   process that started it, and then `exec`s the command, which keeps that setting. So the
//!   command dies with this process even if this process is `SIGKILL`ed. This needs no `unsafe`
//!   (no `pre_exec`).
//!
//! # Limits
//! - The parent-death signal covers the command itself (the process the shim became), not the
//!   processes the command forks: those are covered by the group kill when the term ends, but not
//!   when this process is killed outright. A command that needs that should exit when its own
//!   children do, or use its own supervisor.
//! - `PR_SET_PDEATHSIG` fires when the *thread* that spawned the shim exits, not the process.
//!   Spawn from a thread that lives as long as the process: run the supervisor on a
//!   `current_thread` tokio runtime driven by the main thread (as `zkr` does), not on a
//!   multi-threaded runtime whose worker threads may come and go.
//! - A process that leaves the group (`setsid`, `setpgid`) escapes the group kill.
//! - The command's group is not the terminal's foreground group: Ctrl-C reaches the supervisor
//!   (which then stops the command as above), not the command, and a command that reads from the
//!   terminal is stopped by `SIGTTIN`. Run interactive programs some other way.
//! - While *this* process is frozen, nobody stops the command: a frozen supervisor cannot act
//!   until it runs again. That window is what the fencing token is for: the command should pass
//!   [`ENV_FENCING_TOKEN`] to every resource it writes, so that a successor's higher token wins.

use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitStatus;
use std::task::{Context, Poll};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use zookeeper_recipes::{FencingToken, Leadership};

/// The environment variable that carries the term's fencing token, as a decimal integer.
pub(crate) const ENV_FENCING_TOKEN: &str = "ZK_FENCING_TOKEN";
/// The environment variable that carries the leader's participant id.
pub(crate) const ENV_LEADER_ID: &str = "ZK_LEADER_ID";
/// The environment variable that carries the full path of the leader's node.
pub(crate) const ENV_LEADER_PATH: &str = "ZK_LEADER_PATH";
/// The (hidden) subcommand of the shim executable: `<shim> __exec <parent pid> -- CMD ARGS...`.
pub(crate) const SHIM_SUBCOMMAND: &str = "__exec";
/// The default grace period between `SIGTERM` and `SIGKILL`.
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(5);
/// How often the supervisor looks whether a group whose leader has exited is gone yet. There is
/// no notification for "the last process of a group exited", so this one wait is a poll.
const GROUP_POLL: Duration = Duration::from_millis(10);

/// Errors of command supervision.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ProcessError {
    /// The term was already over (ended or past its deadline): the command was not started.
    #[error("the term is over: the command was not started")]
    NotLeader,
    /// The command (or its shim) could not be started.
    #[error("could not start {program:?}: {source}")]
    Spawn {
        /// The program that was to be started (the shim's, when one is used).
        program: OsString,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Waiting for the command failed. Its group was sent `SIGKILL`.
    #[error("waiting for the command failed: {0}")]
    Wait(#[source] io::Error),
}

/// What to run: a program, its arguments, extra environment, and optionally the shim that
/// makes it die with this process.
///
/// # Examples
/// ```ignore
/// let cmd = CommandSpec::from_argv(["sh", "-c", "echo $ZK_FENCING_TOKEN"])?;
/// ```
#[derive(Debug, Clone)]
pub(crate) struct CommandSpec {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    shim: Option<PathBuf>,
}

impl CommandSpec {
    /// A command that runs `program` (looked up in `PATH` unless it contains a `/`).
    pub(crate) fn new(program: impl Into<OsString>) -> Self {
        CommandSpec {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            shim: None,
        }
    }

    /// A command from an argument vector: the program first, then its arguments.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] when `argv` is empty.
    pub(crate) fn from_argv<I, S>(argv: I) -> io::Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let mut argv = argv.into_iter().map(Into::into);
        let program = argv
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command given"))?;
        Ok(CommandSpec::new(program).args(argv))
    }

    /// Appends arguments.
    #[must_use]
    pub(crate) fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable for the command (on top of the inherited environment and
    /// the three `ZK_*` variables, which win).
    #[must_use]
    pub(crate) fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Starts the command through `exe`, an executable that runs [`exec_shim`] when called as
    /// `exe __exec <pid> -- CMD ARGS...` (`zkr` is one): the command then dies with this process.
    #[must_use]
    pub(crate) fn shim(mut self, exe: impl Into<PathBuf>) -> Self {
        self.shim = Some(exe.into());
        self
    }

    /// [`shim`](Self::shim) with the running executable ([`std::env::current_exe`]).
    ///
    /// # Errors
    /// When the running executable cannot be found.
    pub(crate) fn shim_current_exe(self) -> io::Result<Self> {
        Ok(self.shim(std::env::current_exe()?))
    }

    /// The process to spawn for `term`, in a process group of its own.
    fn command(&self, term: &Leadership) -> std::process::Command {
        use std::os::unix::process::CommandExt;
        let mut command = match &self.shim {
            Some(shim) => {
                let mut c = std::process::Command::new(shim);
                c.arg(SHIM_SUBCOMMAND)
                    .arg(std::process::id().to_string())
                    .arg("--")
                    .arg(&self.program)
                    .args(&self.args);
                c
            }
            None => {
                let mut c = std::process::Command::new(&self.program);
                c.args(&self.args);
                c
            }
        };
        command
            // zkr's credentials are its own: CMD does not inherit them.
            .env_remove(crate::auth::AUTH_ENV)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env(ENV_FENCING_TOKEN, term.token().to_string())
            .env(ENV_LEADER_ID, term.participant_id())
            .env(ENV_LEADER_PATH, term.path())
            .process_group(0);
        command
    }

    fn spawned_program(&self) -> OsString {
        self.shim
            .as_ref()
            .map_or_else(|| self.program.clone(), |s| s.clone().into_os_string())
    }
}

/// A signal sent to the command's process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum StopSignal {
    /// `SIGTERM`: please stop (followed by `SIGCONT`, so that a stopped process can).
    Term,
    /// `SIGKILL`: the grace period is over.
    Kill,
}

impl StopSignal {
    /// `"SIGTERM"` or `"SIGKILL"`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StopSignal::Term => "SIGTERM",
            StopSignal::Kill => "SIGKILL",
        }
    }
}

/// Why the command's group was signalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum StopReason {
    /// The term ended (see [`Leadership::cancelled`]); the recipe knows why.
    TermEnded,
    /// The term's deadline ([`Leadership::valid_until`]) passed, typically noticed on waking from
    /// a freeze, before the session task has said anything.
    DeadlinePassed,
    /// The caller asked for a stop ([`SupervisedCommand::shutdown`]).
    Shutdown,
    /// The command exited but left processes behind in its group.
    Leftovers,
    /// The grace period after `SIGTERM` ran out (the reason of every `SIGKILL`).
    GraceExpired,
}

impl StopReason {
    /// A short name for logs and JSON output: `term_ended`, `deadline_passed`, `shutdown`,
    /// `leftovers`, `grace_expired`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StopReason::TermEnded => "term_ended",
            StopReason::DeadlinePassed => "deadline_passed",
            StopReason::Shutdown => "shutdown",
            StopReason::Leftovers => "leftovers",
            StopReason::GraceExpired => "grace_expired",
        }
    }
}

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CmdExit(ExitStatus);

impl CmdExit {
    /// The exit code as a shell reports it: the code, or 128 + the signal number when the
    /// command was killed by a signal.
    pub(crate) fn code(self) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        match (self.0.code(), self.0.signal()) {
            (Some(code), _) => code,
            (None, Some(signal)) => 128 + signal,
            (None, None) => 255,
        }
    }
}

/// What [`SupervisedCommand::run`] reports, in order, through its callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum ProcessEvent {
    /// The command was started; `pid` is also its process group id.
    Started {
        /// The command's pid (the shim's, which becomes the command by `exec`).
        pid: u32,
        /// The term's token, as passed in [`ENV_FENCING_TOKEN`].
        token: FencingToken,
    },
    /// The command's process group was signalled.
    Signalled {
        /// Which signal.
        signal: StopSignal,
        /// Why.
        reason: StopReason,
    },
    /// The command itself (the group leader) exited. Other processes of its group may still be
    /// running; [`SupervisedCommand::run`] returns once they are gone too.
    Exited {
        /// How it ended.
        exit: CmdExit,
    },
}

/// How a supervised run ended: the command and its whole group are gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) struct Outcome {
    /// How the command exited.
    pub(crate) exit: CmdExit,
    /// Why the group was stopped, or `None` when the command exited by itself and left nothing
    /// behind.
    pub(crate) stopped: Option<StopReason>,
}

/// A command to run under a term, with its grace period and an optional shutdown token.
///
/// # Examples
/// ```ignore
/// # async fn demo(term: zookeeper_recipes::Leadership) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
///
/// let cmd = CommandSpec::from_argv(["./statement-job", "--once"])?.shim_current_exe()?;
/// let outcome = SupervisedCommand::new(cmd)
///     .grace(Duration::from_secs(10))
///     .run(&term, |event| eprintln!("{event:?}"))
///     .await?;
/// println!("exit code {}", outcome.exit.code());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub(crate) struct SupervisedCommand {
    cmd: CommandSpec,
    grace: Duration,
    shutdown: CancellationToken,
}

impl SupervisedCommand {
    /// Supervision of `cmd` with the default grace period (5 s) and no shutdown token.
    pub(crate) fn new(cmd: CommandSpec) -> Self {
        SupervisedCommand {
            cmd,
            grace: DEFAULT_GRACE,
            shutdown: CancellationToken::new(),
        }
    }

    /// How long the group has after `SIGTERM` before `SIGKILL` (default 5 s).
    #[must_use]
    pub(crate) fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// A token that stops the command as a lost term does (`SIGTERM`, grace, `SIGKILL`), for a
    /// supervisor that is itself asked to stop.
    #[must_use]
    pub(crate) fn shutdown(mut self, token: CancellationToken) -> Self {
        self.shutdown = token;
        self
    }

    /// Starts the command for `term` and supervises it until it and its whole process group are
    /// gone; `on_event` hears of each step as it happens (it is called synchronously, right after
    /// the step: a `Signalled` event is reported after the signal was sent).
    ///
    /// The group is stopped (`SIGTERM` + `SIGCONT`, then `SIGKILL` after the grace period) when
    /// the term ends or its deadline passes, when the shutdown token fires, or when the command
    /// exits leaving processes in its group.
    ///
    /// # Errors
    /// [`ProcessError::NotLeader`] when the term is already over (nothing was started);
    /// [`ProcessError::Spawn`] when the command cannot be started; [`ProcessError::Wait`] when
    /// waiting for it fails (its group is then sent `SIGKILL`).
    ///
    /// # Cancel safety
    /// Not cancel safe in the sense that matters: dropping the future sends `SIGKILL` to the
    /// command's process group at once (a command must not outlive its supervisor's interest in
    /// it), but cannot wait for the group to be gone. Await the future to the end to know that.
    pub(crate) async fn run(
        &self,
        term: &Leadership,
        mut on_event: impl FnMut(ProcessEvent),
    ) -> Result<Outcome, ProcessError> {
        if !term.is_valid() {
            return Err(ProcessError::NotLeader);
        }
        let mut child = tokio::process::Command::from(self.cmd.command(term))
            .spawn()
            .map_err(|source| ProcessError::Spawn {
                program: self.cmd.spawned_program(),
                source,
            })?;
        let Some(pid) = child.id() else {
            // Only possible if it was already reaped, which nothing here did.
            return Err(ProcessError::Wait(io::Error::other(
                "the command has no pid",
            )));
        };
        let pgid = Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
        let mut group = GroupGuard { pgid, armed: true };
        info!(pid, token = %term.token(), path = %term.path(), "command started");
        on_event(ProcessEvent::Started {
            pid,
            token: term.token(),
        });

        let mut loss = LossWatch::new(term);
        let shutdown = self.shutdown.clone();
        let mut stopping: Option<StopReason> = None;
        // Armed by the first stop: SIGKILL at the end of the grace, or at the term's lease,
        // whichever comes first.
        let mut kill_at: Option<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = None;
        let mut killed = false;
        let mut exit: Option<CmdExit> = None;
        let mut poll = tokio::time::interval(GROUP_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

        loop {
            if exit.is_some() && group_gone(pgid) {
                break;
            }
            tokio::select! {
                biased;
                reason = &mut loss, if stopping.is_none() => {
                    let reason = self.begin_stop(pgid, reason, term, &mut kill_at, &mut on_event);
                    stopping = Some(reason);
                }
                _ = shutdown.cancelled(), if stopping.is_none() => {
                    let reason = StopReason::Shutdown;
                    stopping = Some(self.begin_stop(pgid, reason, term, &mut kill_at, &mut on_event));
                }
                _ = maybe(&mut kill_at), if stopping.is_some() && !killed => {
                    killed = true;
                    match signal_group(pgid, Signal::SIGKILL) {
                        Ok(()) => {
                            warn!(pgid = pid, grace_ms = self.grace.as_millis() as u64,
                                "the command's group outlived the grace period (or the term's lease): sent SIGKILL");
                            on_event(ProcessEvent::Signalled {
                                signal: StopSignal::Kill,
                                reason: StopReason::GraceExpired,
                            });
                        }
                        Err(e) => {
                            debug!(pgid = pid, error = %e, "could not SIGKILL the command's group")
                        }
                    }
                }
                status = child.wait(), if exit.is_none() => {
                    let status = status.map_err(ProcessError::Wait)?;
                    let code = CmdExit(status);
                    exit = Some(code);
                    info!(pid, code = code.code(), "command exited");
                    on_event(ProcessEvent::Exited { exit: code });
                    if stopping.is_none() && !group_gone(pgid) {
                        stopping = Some(self.begin_stop(
                            pgid,
                            StopReason::Leftovers,
                            term,
                            &mut kill_at,
                            &mut on_event,
                        ));
                    }
                }
                _ = poll.tick(), if exit.is_some() => {}
            }
        }
        group.armed = false;
        debug!(pgid = pid, "the command's process group is gone");
        let exit = exit.ok_or_else(|| ProcessError::Wait(io::Error::other("no exit status")))?;
        Ok(Outcome {
            exit,
            stopped: stopping,
        })
    }
}

impl SupervisedCommand {
    /// `SIGTERM` (and `SIGCONT`) to the group, and the `SIGKILL` timer armed: the grace from
    /// now, or the term's lease, whichever comes first.
    fn begin_stop<'t>(
        &self,
        pgid: Pid,
        reason: StopReason,
        term: &'t Leadership,
        kill_at: &mut Option<Pin<Box<dyn Future<Output = ()> + Send + 't>>>,
        on_event: &mut impl FnMut(ProcessEvent),
    ) -> StopReason {
        match signal_group(pgid, Signal::SIGTERM) {
            Ok(()) => {
                let _ = signal_group(pgid, Signal::SIGCONT);
                warn!(
                    pgid = pgid.as_raw(),
                    reason = reason.as_str(),
                    "sent SIGTERM to the command's group"
                );
                on_event(ProcessEvent::Signalled {
                    signal: StopSignal::Term,
                    reason,
                });
            }
            Err(e) => {
                debug!(pgid = pgid.as_raw(), error = %e, "could not SIGTERM the command's group")
            }
        }
        let bound = term.clock().now() + self.grace;
        *kill_at = Some(Box::pin(term.until_stop_by(bound)));
        reason
    }
}

/// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`): processes that the
/// command's children leave orphaned become children of this process instead of init's, so
/// that [`SupervisedCommand::run`] can reap them and see their group gone without waiting for
/// init. It changes process-wide state; call it once, early.
///
/// # Errors
/// When the kernel refuses.
pub(crate) fn become_child_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}

/// The shim's arguments: `__exec <parent pid> -- CMD ARGS...`.
#[derive(Debug, Clone)]
pub(crate) struct ShimArgs {
    /// The pid of the supervisor that started the shim.
    pub(crate) parent: i32,
    /// The command and its arguments.
    pub(crate) argv: Vec<OsString>,
}

/// The shim: `SIGKILL` this process when its parent dies, check that the parent is still
/// `args.parent` (else exit 1: it died before the request took effect), then become the command
/// (`exec`). The command keeps the parent-death signal.
///
/// Call it first thing in `main` when the executable is run as
/// `<exe> __exec <pid> -- CMD ARGS...`, before starting any thread or runtime.
///
/// Never returns on success. On failure it prints why to stderr and exits as a shell does: 126
/// when the command cannot be executed, 127 when it is not found, 1 for the rest.
pub(crate) fn exec_shim(args: ShimArgs) -> ! {
    use std::os::unix::process::CommandExt;
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
        eprintln!("zkr __exec: cannot ask for a parent-death signal: {e}");
        std::process::exit(1);
    }
    // The parent may have died before the request took effect; it then no longer is our parent.
    if nix::unistd::getppid().as_raw() != args.parent {
        eprintln!(
            "zkr __exec: the supervisor (pid {}) is gone; not starting the command",
            args.parent
        );
        std::process::exit(1);
    }
    let mut argv = args.argv.into_iter();
    let Some(program) = argv.next() else {
        eprintln!("zkr __exec: no command given");
        std::process::exit(1);
    };
    let err = std::process::Command::new(&program).args(argv).exec();
    eprintln!("zkr: cannot run {}: {err}", program.to_string_lossy());
    let code = match err.kind() {
        io::ErrorKind::NotFound => 127,
        io::ErrorKind::PermissionDenied => 126,
        _ => 1,
    };
    std::process::exit(code)
}

/// Sends `signal` to the group; `ESRCH` (gone) is an error the caller may ignore.
fn signal_group(pgid: Pid, signal: Signal) -> nix::Result<()> {
    killpg(pgid, signal)
}

/// Whether no process of the group is left, after reaping the group's orphans that were handed
/// to us (child subreaper). Call only once the group leader was reaped: before that, `waitid`
/// could take the leader's status away from tokio.
fn group_gone(pgid: Pid) -> bool {
    loop {
        match waitid(Id::PGid(pgid), WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG) {
            Ok(WaitStatus::StillAlive) | Err(_) => break,
            Ok(status) => debug!(?status, "reaped an orphan of the command's group"),
        }
    }
    matches!(killpg(pgid, None), Err(Errno::ESRCH))
}

/// `SIGKILL`s the group if the supervising future is dropped before the group is gone.
struct GroupGuard {
    pgid: Pid,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            warn!(
                pgid = self.pgid.as_raw(),
                "supervision dropped: sending SIGKILL to the command's group"
            );
            let _ = killpg(self.pgid, Signal::SIGKILL);
        }
    }
}

/// Completes when the term is over: its token fired, or its deadline passed. Checks the term on
/// every poll, whatever woke the task, so a wake from a freeze is noticed at the first poll; a
/// host's suspend ends the term from the session's boot-time timer.
struct LossWatch<'a> {
    term: &'a Leadership,
    wait: Pin<Box<dyn Future<Output = ()> + Send + 'a>>,
}

impl<'a> LossWatch<'a> {
    fn new(term: &'a Leadership) -> Self {
        LossWatch {
            term,
            wait: Self::wait(term),
        }
    }

    fn wait(term: &'a Leadership) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            tokio::select! {
                () = term.ended() => {}
                () = term.lease_ended() => {}
            }
        })
    }
}

impl Future for LossWatch<'_> {
    type Output = StopReason;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<StopReason> {
        loop {
            if self.term.has_ended() {
                return Poll::Ready(StopReason::TermEnded);
            }
            if !self.term.is_valid() {
                return Poll::Ready(StopReason::DeadlinePassed);
            }
            match self.wait.as_mut().poll(cx) {
                // Something moved: look at the term again, and wait anew if it still holds.
                Poll::Ready(()) => {
                    let term = self.term;
                    self.wait = Self::wait(term);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Waits for `fut` when there is one, for ever when there is none.
async fn maybe<F: Future + Unpin>(fut: &mut Option<F>) -> F::Output {
    match fut {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_needs_a_program() {
        assert!(CommandSpec::from_argv(Vec::<String>::new()).is_err());
        let cmd = CommandSpec::from_argv(["sh", "-c", "exit 3"]).unwrap();
        assert_eq!(cmd.program, "sh");
        assert_eq!(cmd.args, ["-c", "exit 3"]);
    }

    #[test]
    fn exit_codes_are_reported_as_a_shell_does() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(CmdExit(ExitStatus::from_raw(3 << 8)).code(), 3);
        // Killed by SIGTERM (15).
        let killed = CmdExit(ExitStatus::from_raw(15));
        assert_eq!(killed.code(), 143);
        assert_eq!(killed.0.signal(), Some(15));
    }

    #[test]
    fn names_are_stable() {
        assert_eq!(StopSignal::Term.as_str(), "SIGTERM");
        assert_eq!(StopSignal::Kill.as_str(), "SIGKILL");
        assert_eq!(StopReason::DeadlinePassed.as_str(), "deadline_passed");
        assert_eq!(StopReason::GraceExpired.as_str(), "grace_expired");
    }

    #[test]
    fn process_types_are_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<CommandSpec>();
        assert_send_sync::<SupervisedCommand>();
        assert_send_sync::<ProcessEvent>();
        assert_send_sync::<Outcome>();
        assert_send_sync::<ProcessError>();
    }
}
