#![doc = include_str!("../HELP.md")]
//!
//! [`ErrorPolicy`]: zookeeper_recipes::ErrorPolicy
//! [`MonotonicTime`]: mono::MonotonicTime
//! [`BootTime`]: zookeeper_recipes::BootTime
//! [`Leadership::started_at`]: zookeeper_recipes::Leadership::started_at
//! [`Leadership::ended_at`]: zookeeper_recipes::Leadership::ended_at

mod mono;
mod output;
mod supervise;

use std::cell::Cell;
use std::ffi::OsString;
use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Parser, Subcommand, ValueEnum};
use futures::{Stream, StreamExt};
use mono::MonotonicTime;
use serde::Serialize;
use supervise::{
    self as process, CommandSpec, Outcome, ProcessError, ProcessEvent, ShimArgs, StopReason,
    SupervisedCommand,
};
use tokio::signal::unix::{Signal as UnixSignal, SignalKind, signal};
use tokio::sync::broadcast;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use zookeeper_recipes::BootTime;
use zookeeper_recipes::job::{
    CatchUp, JobAdmin, JobEvent, OnCrash, Overlap, Resolution, Schedule, ScheduledJob, SlotRun,
};
use zookeeper_recipes::{
    CloseMode, ConnectionState, ErrorPolicy, InterProcessMutex, LatchEvent, LeaderLatch,
    LeaderObserver, LeaderPool, LeaderSelector, Leadership, ObserverEvent, PoolEvent,
    SelectorState, Session, SessionStatus, leader_of, participants_on,
};

/// The connect string when neither `--connect` nor `$ZK_CONNECT` is given.
const DEFAULT_CONNECT: &str = "127.0.0.1:2181";
/// The exit code of `zkr lock --timeout` when the lock was not acquired in time (EX_TEMPFAIL).
const EXIT_TIMEOUT: u8 = 75;

/// Apache Curator's ZooKeeper recipes from the shell: leader latches, singleton commands, locks.
#[derive(Debug, Parser)]
#[command(name = "zkr", version, after_long_help = include_str!("../HELP.md"))]
struct Cli {
    /// ZooKeeper connect string `host:port[,host:port...][/chroot]` [default: $ZK_CONNECT, else
    /// 127.0.0.1:2181]
    #[arg(long, value_name = "HOSTS", global = true)]
    connect: Option<String>,

    /// The session timeout to ask the server for (humantime: 3s, 500ms)
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration,
        default_value = "10s", global = true)]
    session_timeout: Duration,

    /// The servers' tickTime, which the lease's deadline depends on [default: assumed: 2s, at
    /// most a third of the session timeout, with a warning in the log]. A larger value is
    /// always safe; a smaller one than the servers' is not
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, global = true)]
    server_tick_time: Option<Duration>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Join a LeaderLatch and print its events as JSON lines on stdout until SIGINT/SIGTERM
    Latch {
        /// Election path (absolute, or a name under /election)
        #[arg(value_parser = parse_path)]
        path: String,
        /// Participant id [default: HOSTNAME-PID-RANDOM]
        #[arg(long, value_parser = parse_id)]
        id: Option<String>,
        #[command(flatten)]
        policy: PolicyArg,
    },
    /// Print the participants of a latch, selector or lock path as a JSON array, in election order
    Participants {
        /// Election path (absolute, or a name under /election)
        #[arg(value_parser = parse_path)]
        path: String,
    },
    /// Print the leader's id (an empty line when there is none)
    Leader {
        /// Election path (absolute, or a name under /election)
        #[arg(value_parser = parse_path)]
        path: String,
    },
    /// Follow who leads PATH without standing (a LeaderObserver); one JSON line per change
    ///
    /// Takes no --error-policy: an observer holds no term for a connection state to end. It
    /// prints its own connection's state lines instead; after a `state` line other than
    /// `reconnected`, the last leader line is unconfirmed until the next `reconnected`.
    Watch {
        /// Election path (absolute, or a name under /election)
        #[arg(value_parser = parse_path)]
        path: String,
        /// The contenders' lock name: `latch-` (LeaderLatch) or `lock-` (LeaderSelector,
        /// InterProcessMutex) [default: latch- if any child is a latch node, else lock-]
        #[arg(long, value_name = "NAME")]
        lock_name: Option<String>,
    },
    /// Be a member of a LeaderPool: lead a fair share of the jobs, print the events (stdout)
    Pool {
        /// Pool root (absolute, or a name under /election)
        #[arg(value_parser = parse_path)]
        root: String,
        /// The pool's jobs, comma-separated (every member must be given the same)
        #[arg(
            long,
            value_delimiter = ',',
            required = true,
            value_name = "JOB,JOB..."
        )]
        jobs: Vec<String>,
        /// Member id [default: HOSTNAME-PID-RANDOM]
        #[arg(long, value_parser = parse_id)]
        id: Option<String>,
        #[command(flatten)]
        policy: PolicyArg,
    },
    /// Run CMD while leader (a LeaderSelector); stop it the moment leadership is lost
    Run(RunArgs),
    /// Run CMD while holding an InterProcessMutex, like flock(1) across machines
    Lock(LockArgs),
    /// A scheduled job (ScheduledJob): run CMD once per slot on one replica; inspect and steer it
    #[command(subcommand)]
    Cron(CronCommand),
    /// The parent-death shim: `__exec <supervisor pid> -- CMD [ARGS...]`
    #[command(name = "__exec", hide = true)]
    Exec {
        /// The pid of the zkr that started this shim
        parent: i32,
        /// The command to become
        #[arg(last = true, required = true, value_name = "CMD")]
        argv: Vec<OsString>,
    },
}

/// What `run` and `lock` share: who takes part, and the command they supervise.
#[derive(Debug, Args)]
struct SupervisedArgs {
    /// Participant id [default: HOSTNAME-PID-RANDOM]
    #[arg(long, value_parser = parse_id)]
    id: Option<String>,
    /// Time between SIGTERM and SIGKILL to CMD's process group, at most until the term's lease
    /// passes (a successor may start then). It must fit in the lease the session timeout
    /// leaves (2.75s for the default 10s with a 2s tick): a longer one is refused (exit 2)
    /// [default: 5s, lowered to half that limit]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    grace: Option<Duration>,
    #[command(flatten)]
    policy: PolicyArg,
    /// The command and its arguments (after `--`)
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    command: Vec<OsString>,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Election path (absolute, or a name under /election)
    #[arg(value_parser = parse_path)]
    path: String,
    /// Rejoin the election after each term and run CMD again the next time this leads
    #[arg(long)]
    requeue: bool,
    #[command(flatten)]
    supervised: SupervisedArgs,
}

#[derive(Debug, Args)]
struct LockArgs {
    /// Lock path (absolute, or a name under /election)
    #[arg(value_parser = parse_path)]
    path: String,
    /// Give up after this long without the lock (exit 75) [default: wait for ever]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    timeout: Option<Duration>,
    #[command(flatten)]
    supervised: SupervisedArgs,
}

/// `zkr cron ...`.
#[derive(Debug, Subcommand)]
enum CronCommand {
    /// Stand for the job; while leader, run CMD once per due slot, supervised as `run` does
    Run(CronRunArgs),
    /// The recorded slots, newest first, as a JSON array
    History {
        /// Job path (absolute, or a name under /cron)
        #[arg(value_parser = parse_cron_path)]
        path: String,
        /// At most this many slots
        #[arg(long, value_name = "N", default_value_t = 100)]
        limit: usize,
    },
    /// The job's state as a JSON object: schedule, paused, leader, cursor, open slots, last slot
    Status {
        /// Job path (absolute, or a name under /cron)
        #[arg(value_parser = parse_cron_path)]
        path: String,
    },
    /// Ask the leader to run the job now as an extra slot `trigger-N`; prints N
    Trigger {
        /// Job path (absolute, or a name under /cron)
        #[arg(value_parser = parse_cron_path)]
        path: String,
    },
    /// Pause the job: the leader records due slots skipped (`paused`) until `resume`
    Pause {
        /// Job path (absolute, or a name under /cron)
        #[arg(value_parser = parse_cron_path)]
        path: String,
    },
    /// Resume a paused job (the slots skipped meanwhile stay skipped)
    Resume {
        /// Job path (absolute, or a name under /cron)
        #[arg(value_parser = parse_cron_path)]
        path: String,
    },
    /// Resolve a parked slot: `--done` records it succeeded, `--rerun` has the leader run it again
    Resolve {
        /// Job path (absolute, or a name under /cron)
        #[arg(value_parser = parse_cron_path)]
        path: String,
        /// The parked slot's key, as `history` prints it
        slot: String,
        #[command(flatten)]
        resolution: ResolutionArg,
    },
}

/// `--done` or `--rerun`, exactly one.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
struct ResolutionArg {
    /// The work was done (checked by hand): record the slot succeeded
    #[arg(long)]
    done: bool,
    /// Run the slot again (attempt + 1)
    #[arg(long)]
    rerun: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("schedule").required(true).args(["every", "cron"])))]
struct CronRunArgs {
    /// Job path (absolute, or a name under /cron)
    #[arg(value_parser = parse_cron_path)]
    path: String,
    /// Slots every DURATION, on the Unix epoch's grid (`1m`: on the minute, UTC)
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    every: Option<Duration>,
    /// Slots at the instants of a cron expression in --tz (five fields, or six with seconds
    /// first)
    #[arg(long, value_name = "EXPR")]
    cron: Option<String>,
    /// The IANA time zone of --cron [default: UTC]
    #[arg(long, value_name = "ZONE", conflicts_with = "every")]
    tz: Option<String>,
    /// Slots that came due while no replica ran the job: run the newest (latest), every one in
    /// order (all), or none; the others are recorded missed
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = CatchUpArg::Latest)]
    catch_up: CatchUpArg,
    /// A slot that comes due while the previous one runs: record it skipped, or run the first
    /// such slot afterwards (buffer-one)
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = OverlapArg::Skip)]
    overlap: OverlapArg,
    /// A slot cut off by a crash or a lost term: run it again on the next leader (retry, up to
    /// --max-attempts), record it failed, or park it until `zkr cron resolve`
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = OnCrashArg::Retry)]
    on_crash: OnCrashArg,
    /// How many times a slot is started at most under --on-crash retry
    #[arg(long, value_name = "N", default_value_t = 3,
        value_parser = clap::value_parser!(u32).range(1..))]
    max_attempts: u32,
    /// On SIGINT/SIGTERM while CMD runs a slot: start no more slots and let CMD finish for up to
    /// DURATION (its end is recorded), then leave; after DURATION, stop CMD as without --drain
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    drain: Option<Duration>,
    /// How far this host's wall clock may be off the ensemble's: further, and this replica runs
    /// no slot and gives up its term (a `clock_skew` line) [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    clock_tolerance: Option<Duration>,
    #[command(flatten)]
    supervised: SupervisedArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum CatchUpArg {
    Latest,
    All,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OverlapArg {
    Skip,
    BufferOne,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OnCrashArg {
    Retry,
    Fail,
    Park,
}

impl CronRunArgs {
    /// The schedule, checked before anything connects (the typed error's text on failure).
    fn schedule(&self) -> Result<Schedule, Fail> {
        let schedule = match (&self.cron, self.every) {
            (Some(expr), _) => Schedule::cron(expr, self.tz.as_deref().unwrap_or("UTC")),
            (None, Some(period)) => Schedule::every(period),
            (None, None) => return Err(Fail("give --every or --cron".into())),
        };
        schedule.map_err(|e| Fail(e.to_string()))
    }
}

/// `--error-policy`, for the subcommands that hold a term.
#[derive(Debug, Args)]
struct PolicyArg {
    /// Which connection states end a term: `standard` (a suspended connection already does,
    /// Curator's default) or `session-expired` (only a lost session, or the term's deadline
    /// passing, does)
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = Policy::Standard)]
    error_policy: Policy,
}

/// The values of `--error-policy`: [`ErrorPolicy`]'s variants, as Curator names its policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Policy {
    /// Curator's StandardConnectionStateErrorPolicy: SUSPENDED and LOST end a term
    Standard,
    /// Curator's SessionConnectionStateErrorPolicy: only LOST ends a term
    SessionExpired,
}

impl PolicyArg {
    fn policy(&self) -> ErrorPolicy {
        match self.error_policy {
            Policy::Standard => ErrorPolicy::Standard,
            Policy::SessionExpired => ErrorPolicy::SessionExpired,
        }
    }
}

fn parse_path(s: &str) -> Result<String, String> {
    zookeeper_recipes::path::election_path(s).map_err(|e| e.to_string())
}

/// A job path: absolute, or a name under `/cron`.
fn parse_cron_path(s: &str) -> Result<String, String> {
    let path = if s.starts_with('/') {
        s.to_owned()
    } else {
        format!("/cron/{s}")
    };
    zookeeper_recipes::path::validate_path(&path).map_err(|e| e.to_string())?;
    Ok(path)
}

fn parse_id(s: &str) -> Result<String, String> {
    zookeeper_recipes::path::validate_id(s).map_err(|e| e.to_string())?;
    Ok(s.to_owned())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Exec { parent, argv } = cli.command {
        // Before any runtime or thread: this process is about to become CMD.
        process::exec_shim(ShimArgs { parent, argv });
    }
    init_tracing();
    // current_thread: every task, and so every spawn of the shim, runs on the main thread,
    // which lives as long as the process; PR_SET_PDEATHSIG follows the spawning thread.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("zkr: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(async_main(cli));
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

fn init_tracing() {
    let Ok(filter) = std::env::var("ZKR_LOG") else {
        return;
    };
    match tracing_subscriber::EnvFilter::try_new(&filter) {
        Ok(filter) => {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(std::io::stderr)
                .try_init();
        }
        Err(e) => eprintln!("zkr: ignoring ZKR_LOG={filter:?}: {e}"),
    }
}

/// An error that ends zkr with exit code 1 and a message on stderr.
#[derive(Debug)]
struct Fail(String);

impl<E: std::fmt::Display> From<E> for Fail {
    fn from(e: E) -> Self {
        Fail(e.to_string())
    }
}

async fn async_main(cli: Cli) -> ExitCode {
    let hosts = cli
        .connect
        .clone()
        .or_else(|| std::env::var("ZK_CONNECT").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| DEFAULT_CONNECT.to_owned());
    let conn = Conn {
        hosts,
        server_tick_time: cli.server_tick_time,
    };
    // CMD's grace must fit in the lease: refused before connecting, as a usage error.
    let grace = match &cli.command {
        Command::Run(RunArgs { supervised, .. })
        | Command::Lock(LockArgs { supervised, .. })
        | Command::Cron(CronCommand::Run(CronRunArgs { supervised, .. })) => {
            Some(resolve_grace(&conn, cli.session_timeout, supervised.grace))
        }
        _ => None,
    };
    let grace = match grace {
        Some(Err(message)) => {
            eprintln!("zkr: {message}");
            return ExitCode::from(2);
        }
        Some(Ok(grace)) => grace,
        None => process::DEFAULT_GRACE,
    };
    let result = match cli.command {
        Command::Latch { path, id, policy } => {
            latch(&conn, cli.session_timeout, path, id, policy.policy()).await
        }
        Command::Participants { path } => participants(&conn, cli.session_timeout, &path).await,
        Command::Leader { path } => leader(&conn, cli.session_timeout, &path).await,
        Command::Pool {
            root,
            jobs,
            id,
            policy,
        } => pool(&conn, cli.session_timeout, root, jobs, id, policy.policy()).await,
        Command::Watch { path, lock_name } => {
            watch(&conn, cli.session_timeout, path, lock_name).await
        }
        Command::Run(args) => run(&conn, cli.session_timeout, grace, args).await,
        Command::Lock(args) => lock(&conn, cli.session_timeout, grace, args).await,
        Command::Cron(CronCommand::Run(args)) => {
            cron_run(&conn, cli.session_timeout, grace, args).await
        }
        Command::Cron(admin) => cron_admin(&conn, cli.session_timeout, admin).await,
        Command::Exec { .. } => Err(Fail("__exec is handled before the runtime starts".into())),
    };
    match result {
        Ok(code) => code,
        Err(Fail(message)) => {
            eprintln!("zkr: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Where and how to connect: the global options.
#[derive(Debug, Clone)]
struct Conn {
    hosts: String,
    server_tick_time: Option<Duration>,
}

impl Conn {
    fn builder(&self, session_timeout: Duration) -> zookeeper_recipes::SessionBuilder {
        let builder = Session::builder(&self.hosts).session_timeout(session_timeout);
        match self.server_tick_time {
            Some(tick) => builder.server_tick_time(tick),
            None => builder,
        }
    }
}

async fn connect(conn: &Conn, session_timeout: Duration) -> Result<Session, Fail> {
    conn.builder(session_timeout).connect().await.map_err(|e| {
        Fail(format!(
            "cannot connect to ZooKeeper at {}: {e}",
            conn.hosts
        ))
    })
}

fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => Err("must be greater than zero".to_owned()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

/// CMD's grace: `--grace` when it fits in the lease the session timeout leaves, else a usage
/// error; without `--grace`, 5 s or the limit, whichever is shorter.
fn resolve_grace(
    conn: &Conn,
    session_timeout: Duration,
    asked: Option<Duration>,
) -> Result<Duration, String> {
    let limit = conn.builder(session_timeout).grace_limit();
    match asked {
        Some(grace) if grace > limit => Err(format!(
            "--grace {} does not fit in the lease of a {} session: at most {} (the timeout minus the lease margin, a tick and a half, and three heartbeats); lower --grace or raise --session-timeout",
            humantime::format_duration(grace),
            humantime::format_duration(session_timeout),
            humantime::format_duration(limit)
        )),
        Some(grace) => Ok(grace),
        None => Ok(conn.builder(session_timeout).default_grace()),
    }
}

/// How long zkr waits for the server to confirm the close of its session on the way out. A
/// close is one round trip; the bound only matters when the server stopped answering, and the
/// recipes have deleted their nodes explicitly before this, so nothing depends on the close.
const CLOSE_BOUND: Duration = Duration::from_secs(2);

/// Closes the session if it can reach a server; otherwise there is nobody to tell, and the
/// server ends the session by itself.
async fn close_session(session: &Session) {
    if session.state().is_some_and(ConnectionState::is_connected) {
        let _ = tokio::time::timeout(CLOSE_BOUND, session.close()).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Output

/// One output line.
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Event<'a> {
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
}

/// `CLOCK_MONOTONIC` in nanoseconds at boot time `at`.
fn mono_ns(at: BootTime) -> u64 {
    MonotonicTime::from_boot(at).as_nanos()
}

/// When `term` stopped being valid; for a term not ended yet, now or its deadline if earlier.
fn term_end(term: &Leadership) -> BootTime {
    term.ended_at()
        .unwrap_or_else(|| term.clock().now().min(term.valid_until()))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Where event lines go.
#[derive(Debug, Clone, Copy)]
enum Out {
    Stdout,
    Stderr,
}

impl Out {
    /// Writes one event as one line and flushes it.
    fn emit(self, event: &Event<'_>) -> std::io::Result<()> {
        let mut value = serde_json::to_value(event).map_err(std::io::Error::other)?;
        if let serde_json::Value::Object(fields) = &mut value {
            fields.insert("mono_ns".to_owned(), MonotonicTime::now().as_nanos().into());
            fields.insert("boot_ns".to_owned(), BootTime::now().as_nanos().into());
        }
        let mut line = serde_json::to_vec(&value).map_err(std::io::Error::other)?;
        line.push(b'\n');
        match self {
            Out::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(&line)?;
                out.flush()
            }
            Out::Stderr => {
                let mut out = std::io::stderr().lock();
                out.write_all(&line)?;
                out.flush()
            }
        }
    }

    /// [`emit`](Self::emit) for output nobody may be reading (stderr of run and lock): a write
    /// error must not stop the supervision of CMD.
    fn emit_best_effort(self, event: &Event<'_>) {
        let _ = self.emit(event);
    }

    fn state(self, status: &SessionStatus, id: &str, path: Option<&str>) {
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

/// SIGINT and SIGTERM, as one stream.
struct Signals {
    int: UnixSignal,
    term: UnixSignal,
}

impl Signals {
    fn new() -> Result<Signals, Fail> {
        let int = signal(SignalKind::interrupt())
            .map_err(|e| Fail(format!("cannot handle SIGINT: {e}")))?;
        let term = signal(SignalKind::terminate())
            .map_err(|e| Fail(format!("cannot handle SIGTERM: {e}")))?;
        Ok(Signals { int, term })
    }

    /// Waits for the next SIGINT or SIGTERM; returns the shell's exit code for it (128 + signal).
    async fn recv(&mut self) -> u8 {
        tokio::select! {
            _ = self.int.recv() => 128 + 2,
            _ = self.term.recv() => 128 + 15,
        }
    }
}

/// Prints every event of `events` (one JSON line each, on stdout) until SIGINT or SIGTERM. A
/// failure when stdout breaks, or `stopped()` when the events end by themselves.
async fn print_until_signal<S, T>(
    signals: &mut Signals,
    events: &mut S,
    mut print: impl FnMut(&T) -> std::io::Result<()>,
    stopped: impl FnOnce() -> Fail,
) -> Option<Fail>
where
    S: Stream<Item = T> + Unpin,
{
    loop {
        tokio::select! {
            biased;
            _ = signals.recv() => return None,
            event = events.next() => match event {
                Some(event) => {
                    if let Err(e) = print(&event) {
                        return Some(Fail(format!("cannot write to stdout: {e}")));
                    }
                }
                None => return Some(stopped()),
            },
        }
    }
}

// ---------------------------------------------------------------------------------------------
// latch, participants, leader

async fn latch(
    conn: &Conn,
    session_timeout: Duration,
    path: String,
    id: Option<String>,
    policy: ErrorPolicy,
) -> Result<ExitCode, Fail> {
    let mut signals = Signals::new()?;
    let session = connect(conn, session_timeout).await?;
    let mut builder = LeaderLatch::builder(&session, &path)
        .close_mode(CloseMode::NotifyLeader)
        .error_policy(policy);
    if let Some(id) = id {
        builder = builder.id(id);
    }
    let latch = builder.start().await?;
    // Subscribed before the latch's task first runs (nothing has awaited since `start`), so no
    // event is missed.
    let events = latch.events();
    tokio::pin!(events);
    let mut term: Option<Leadership> = None;
    let failure = print_until_signal(
        &mut signals,
        &mut events,
        |event| print_latch_event(&latch, event, &mut term),
        || match latch.failure() {
            Some(e) => Fail(format!("the latch stopped: {e}")),
            None => Fail("the latch stopped unexpectedly".into()),
        },
    )
    .await;
    // Deletes our node (the successor is elected at once) and, with NotifyLeader, reports
    // not_leader/closed if this latch led; then the event stream ends.
    latch.close().await?;
    let drain = async {
        while let Some(event) = events.next().await {
            if print_latch_event(&latch, &event, &mut term).is_err() {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
    close_session(&session).await;
    match failure {
        Some(f) => Err(f),
        None => Ok(ExitCode::SUCCESS),
    }
}

fn print_latch_event(
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

async fn watch(
    conn: &Conn,
    session_timeout: Duration,
    path: String,
    lock_name: Option<String>,
) -> Result<ExitCode, Fail> {
    let mut signals = Signals::new()?;
    let session = connect(conn, session_timeout).await?;
    let mut builder = LeaderObserver::builder(&session, &path);
    if let Some(lock_name) = lock_name {
        builder = builder.lock_name(lock_name);
    }
    let observer = builder.start()?;
    // Subscribed before the observer's task first runs: its first report is not missed.
    let events = observer.events();
    tokio::pin!(events);
    let failure =
        print_until_signal(
            &mut signals,
            &mut events,
            print_observer_event,
            || match observer.failure() {
                Some(e) => Fail(format!("the observer stopped: {e}")),
                None => Fail("the observer stopped unexpectedly".into()),
            },
        )
        .await;
    observer.close().await?;
    close_session(&session).await;
    match failure {
        Some(f) => Err(f),
        None => Ok(ExitCode::SUCCESS),
    }
}

async fn pool(
    conn: &Conn,
    session_timeout: Duration,
    root: String,
    jobs: Vec<String>,
    id: Option<String>,
    policy: ErrorPolicy,
) -> Result<ExitCode, Fail> {
    let mut signals = Signals::new()?;
    let session = connect(conn, session_timeout).await?;
    let mut builder = LeaderPool::builder(&session, &root)
        .jobs(jobs)
        .error_policy(policy);
    if let Some(id) = id {
        builder = builder.id(id);
    }
    let pool = builder.start().await?;
    let events = pool.events();
    tokio::pin!(events);
    let failure = print_until_signal(
        &mut signals,
        &mut events,
        |event| print_pool_event(pool.id(), event),
        || match pool.failure() {
            Some(e) => Fail(format!("the pool stopped: {e}")),
            None => Fail("the pool stopped unexpectedly".into()),
        },
    )
    .await;
    // Leaves gracefully; the events of the releases follow, then the stream ends.
    let close = pool.close();
    tokio::pin!(close);
    let mut closed = false;
    let drain = async {
        loop {
            tokio::select! {
                r = &mut close, if !closed => { closed = true; r?; }
                event = events.next() => match event {
                    Some(event) => { let _ = print_pool_event(pool.id(), &event); }
                    None => break,
                },
            }
        }
        if !closed {
            close.await?;
        }
        Ok::<(), zookeeper_recipes::Error>(())
    };
    let bound = session_timeout + Duration::from_secs(5);
    if let Ok(r) = tokio::time::timeout(bound, drain).await {
        r?;
    }
    close_session(&session).await;
    match failure {
        Some(f) => Err(f),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// Wall-clock milliseconds of a past instant.
fn wall_ms(at: BootTime) -> u64 {
    let ago = u64::try_from(BootTime::now().saturating_duration_since(at).as_millis())
        .unwrap_or(u64::MAX);
    now_ms().saturating_sub(ago)
}

fn print_pool_event(id: &str, event: &PoolEvent) -> std::io::Result<()> {
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

fn print_observer_event(event: &ObserverEvent) -> std::io::Result<()> {
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

async fn participants(
    conn: &Conn,
    session_timeout: Duration,
    path: &str,
) -> Result<ExitCode, Fail> {
    let session = connect(conn, session_timeout).await?;
    let result = participants_on(&session, path).await;
    close_session(&session).await;
    let list = result?;
    let lines: Vec<output::ParticipantLine<'_>> = list.iter().map(Into::into).collect();
    println!("{}", serde_json::to_string(&lines)?);
    Ok(ExitCode::SUCCESS)
}

async fn leader(conn: &Conn, session_timeout: Duration, path: &str) -> Result<ExitCode, Fail> {
    let session = connect(conn, session_timeout).await?;
    let result = participants_on(&session, path).await;
    close_session(&session).await;
    println!("{}", leader_of(result?).id);
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------------------------------------
// run and lock

/// Why a term ended, as `TermEnd::as_str()` names it: the term's own record when it has one,
/// else read off the session at the moment the supervisor noticed (the supervisor may notice a
/// passed deadline before the contender's task has ended the term).
fn term_end_reason(session: &Session, term: &Leadership, reason: StopReason) -> &'static str {
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
struct TermReport<'a> {
    out: Out,
    session: &'a Session,
    id: &'a str,
    term: &'a Leadership,
    not_leader_sent: Cell<bool>,
}

impl TermReport<'_> {
    fn leader(&self) {
        self.out.emit_best_effort(&Event::Leader {
            id: self.id,
            token: self.term.token().get(),
            path: self.term.path(),
            ts_ms: now_ms(),
            started_mono_ns: Some(mono_ns(self.term.started_at())),
            started_boot_ns: Some(self.term.started_at().as_nanos()),
        });
    }

    fn not_leader(&self, reason: &str) {
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

    fn process_event(&self, event: ProcessEvent) {
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
    fn finish(&self, outcome: &Outcome) {
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
async fn supervise<S>(
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

fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(u8::MAX))
}

fn command_spec(argv: Vec<OsString>) -> Result<CommandSpec, Fail> {
    let spec = CommandSpec::from_argv(argv)?;
    spec.shim_current_exe().map_err(|e| {
        Fail(format!(
            "cannot find zkr's own executable for the shim: {e}"
        ))
    })
}

async fn run(
    conn: &Conn,
    session_timeout: Duration,
    grace: Duration,
    args: RunArgs,
) -> Result<ExitCode, Fail> {
    let mut signals = Signals::new()?;
    let cmd = command_spec(args.supervised.command)?;
    if let Err(e) = process::become_child_subreaper() {
        tracing::warn!(error = %e, "cannot become a child subreaper; CMD's orphans go to init");
    }
    let session = connect(conn, session_timeout).await?;
    let shutdown = CancellationToken::new();
    let supervisor = SupervisedCommand::new(cmd)
        .grace(grace)
        .shutdown(shutdown.clone());

    // The selector's closure hands each term to this task and waits until CMD's group is gone.
    // zkr does its own stopping, so the selector's grace is set well beyond zkr's and the
    // selector never aborts the closure.
    let (term_tx, mut term_rx) = mpsc::channel::<(Leadership, oneshot::Sender<()>)>(1);
    let mut builder = LeaderSelector::builder(&session, &args.path)
        .auto_requeue(args.requeue)
        // A term whose lease is not renewed ends CMD's grace before the lease's deadline, so
        // that CMD gets its grace; zkr stops CMD itself (SIGTERM, the grace, SIGKILL, never past
        // the lease), and the closure waits beyond that for CMD's group to be gone.
        .stop_ahead(grace)
        .grace(grace * 2 + Duration::from_secs(5))
        .error_policy(args.supervised.policy.policy());
    if let Some(id) = &args.supervised.id {
        builder = builder.id(id.clone());
    }
    let selector = builder
        .start(move |term: Leadership| {
            let term_tx = term_tx.clone();
            async move {
                let (done_tx, done_rx) = oneshot::channel();
                if term_tx.send((term, done_tx)).await.is_ok() {
                    let _ = done_rx.await;
                }
                Ok::<(), std::io::Error>(())
            }
        })
        .await?;
    let id = selector.id().to_owned();
    let out = Out::Stderr;
    let states = session.state_changes();
    tokio::pin!(states);

    let mut code = ExitCode::SUCCESS;
    let mut failure: Option<Fail> = None;
    loop {
        let (term, done) = tokio::select! {
            biased;
            _ = signals.recv() => {
                // Not running CMD right now (any earlier run's code does not count).
                code = ExitCode::SUCCESS;
                break;
            }
            next = term_rx.recv() => match next {
                Some(next) => next,
                None => {
                    failure = Some(match selector.failure() {
                        Some(e) => Fail(format!("the leader selector stopped: {e}")),
                        None => Fail("the leader selector stopped unexpectedly".into()),
                    });
                    break;
                }
            },
            Some(status) = states.next() => {
                out.state(&status, &id, selector.our_path().as_deref());
                continue;
            }
        };
        let report = TermReport {
            out,
            session: &session,
            id: &id,
            term: &term,
            not_leader_sent: Cell::new(false),
        };
        report.leader();
        let result = supervise(&report, &supervisor, &shutdown, &mut signals, &mut states).await;
        match &result {
            Ok(outcome) => report.finish(outcome),
            Err(_) => report.not_leader(term_end_reason(&session, &term, StopReason::TermEnded)),
        }
        // CMD's group is gone: the closure returns and the selector relinquishes.
        let _ = done.send(());
        match result {
            Ok(outcome) => code = exit_code(outcome.exit.code()),
            Err(ProcessError::NotLeader) => {
                // The term was over before CMD could start: CMD did not run, so queue again.
                code = ExitCode::SUCCESS;
                if shutdown.is_cancelled() {
                    break;
                }
                if !args.requeue {
                    // `requeue` only works once the selector is idle, after it has deleted the
                    // node of the term that just ended.
                    let mut state = selector.watch_state();
                    let _ = state
                        .wait_for(|s| {
                            matches!(
                                s,
                                SelectorState::Idle | SelectorState::Closed | SelectorState::Failed
                            )
                        })
                        .await;
                    selector.requeue();
                }
                continue;
            }
            Err(e) => {
                failure = Some(Fail(e.to_string()));
                break;
            }
        }
        if shutdown.is_cancelled() || !args.requeue {
            break;
        }
    }
    // A term handed over but not taken up: dropping it lets the closure return at once.
    drop(term_rx);
    // Deletes our node if we are still queued or leading, at once.
    selector.close().await?;
    close_session(&session).await;
    match failure {
        Some(f) => Err(f),
        None => Ok(code),
    }
}

async fn lock(
    conn: &Conn,
    session_timeout: Duration,
    grace: Duration,
    args: LockArgs,
) -> Result<ExitCode, Fail> {
    let mut signals = Signals::new()?;
    let cmd = command_spec(args.supervised.command)?;
    if let Err(e) = process::become_child_subreaper() {
        tracing::warn!(error = %e, "cannot become a child subreaper; CMD's orphans go to init");
    }
    let session = connect(conn, session_timeout).await?;
    // A hold whose lease is not renewed ends CMD's grace before the lease's deadline, so that
    // CMD gets its grace (zkr stops it itself, never past the lease).
    let mut builder = InterProcessMutex::builder(&session, &args.path)
        .stop_ahead(grace)
        .error_policy(args.supervised.policy.policy());
    if let Some(id) = &args.supervised.id {
        builder = builder.id(id.clone());
    }
    let mutex = builder.build()?;
    let out = Out::Stderr;
    let states = session.state_changes();
    tokio::pin!(states);

    let acquire = async {
        match args.timeout {
            Some(timeout) => mutex.acquire_timeout(timeout).await,
            None => mutex.acquire().await.map(Some),
        }
    };
    tokio::pin!(acquire);
    let acquired = loop {
        tokio::select! {
            biased;
            code = signals.recv() => {
                // Dropping the acquire withdraws from the queue; closing the session makes sure
                // the node is gone before we exit. CMD never ran: exit 128 + signal, as a shell
                // does, so that `zkr lock ... && next` does not go on.
                close_session(&session).await;
                return Ok(ExitCode::from(code));
            }
            acquired = &mut acquire => break acquired,
            Some(status) = states.next() => out.state(&status, mutex.id(), None),
        }
    };
    let guard = match acquired {
        Ok(Some(guard)) => guard,
        Ok(None) => {
            close_session(&session).await;
            eprintln!(
                "zkr: timed out after {} waiting for the lock on {}",
                humantime::format_duration(args.timeout.unwrap_or_default()),
                args.path
            );
            return Ok(ExitCode::from(EXIT_TIMEOUT));
        }
        Err(e) => {
            close_session(&session).await;
            return Err(Fail(format!(
                "cannot acquire the lock on {}: {e}",
                args.path
            )));
        }
    };
    let term = guard.leadership().clone();
    let shutdown = CancellationToken::new();
    let supervisor = SupervisedCommand::new(cmd)
        .grace(grace)
        .shutdown(shutdown.clone());
    let report = TermReport {
        out,
        session: &session,
        id: mutex.id(),
        term: &term,
        not_leader_sent: Cell::new(false),
    };
    report.leader();
    let result = supervise(&report, &supervisor, &shutdown, &mut signals, &mut states).await;
    // CMD's group is gone: release, so the next waiter gets the lock at once.
    guard.release().await?;
    let code = match result {
        Ok(outcome) => {
            report.finish(&outcome);
            Ok(exit_code(outcome.exit.code()))
        }
        Err(e) => {
            report.not_leader(term_end_reason(&session, &term, StopReason::TermEnded));
            Err(Fail(e.to_string()))
        }
    };
    close_session(&session).await;
    code
}

// ---------------------------------------------------------------------------------------------
// cron

/// The slot key `cron run` gives CMD.
const ENV_SLOT: &str = "ZK_SLOT";
/// The attempt (1 for a slot's first run) `cron run` gives CMD.
const ENV_ATTEMPT: &str = "ZK_ATTEMPT";
/// `1` when the slot was cut off before (or an operator released it) and is run again, else `0`.
const ENV_RECOVERING: &str = "ZK_RECOVERING";

/// A slot the job hands to zkr's main task, and where the main task answers how CMD ended.
type SlotRequest = (SlotRun, SlotAnswer);

/// Where the main task answers how a slot's CMD ended (`Err`: the slot failed, and why).
type SlotAnswer = oneshot::Sender<Result<(), String>>;

/// What `cron run` answers for a slot whose CMD never ran because zkr is going away.
const SHUTTING_DOWN: &str = "zkr is shutting down: CMD was not started";

fn same_term(a: &Leadership, b: &Leadership) -> bool {
    a.token() == b.token() && a.path() == b.path()
}

/// The job's terms as `cron run` reports them: a `leader` line when one begins and one
/// `not_leader` line when it ends (written by whoever notices first: the supervisor of a
/// running CMD, the term's end, or the job's watch of its leadership).
struct Terms<'a> {
    session: &'a Session,
    id: &'a str,
    /// The term of the last `leader` line, and whether its `not_leader` line was written.
    current: Option<(Leadership, bool)>,
}

impl<'a> Terms<'a> {
    fn report<'t>(&self, term: &'t Leadership, not_leader_sent: bool) -> TermReport<'t>
    where
        'a: 't,
    {
        TermReport {
            out: Out::Stderr,
            session: self.session,
            id: self.id,
            term,
            not_leader_sent: Cell::new(not_leader_sent),
        }
    }

    /// Follows the job's term to `next`: `not_leader` for the term that is over (unless it was
    /// written already), `leader` for a new one.
    fn follow(&mut self, next: Option<&Leadership>) {
        if let (Some((current, _)), Some(next)) = (&self.current, next)
            && same_term(current, next)
        {
            return;
        }
        self.end_current();
        self.current = None;
        if let Some(next) = next {
            self.report(next, false).leader();
            self.current = Some((next.clone(), false));
        }
    }

    /// `not_leader` for the current term, unless it was written already.
    fn end_current(&mut self) {
        if let Some((term, sent)) = &self.current
            && !*sent
        {
            let report = self.report(term, false);
            report.not_leader(term_end_reason(self.session, term, StopReason::TermEnded));
        }
        if let Some((_, sent)) = &mut self.current {
            *sent = true;
        }
    }

    /// The current term while its `not_leader` line is still to be written.
    fn live(&self) -> Option<&Leadership> {
        self.current
            .as_ref()
            .filter(|(_, sent)| !*sent)
            .map(|(t, _)| t)
    }

    fn path(&self) -> Option<&str> {
        self.current.as_ref().map(|(t, _)| t.path())
    }
}

fn print_job_event(event: &JobEvent) {
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

/// The job's events, printed as they come; `None` once the job is gone.
async fn next_job_event(events: &mut broadcast::Receiver<JobEvent>) -> Option<JobEvent> {
    loop {
        match events.recv().await {
            Ok(event) => return Some(event),
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(missed = n, "zkr fell behind the job's events");
            }
            Err(broadcast::error::RecvError::Closed) => return None,
        }
    }
}

/// Prints the job's events that have arrived by now (before a slot's CMD starts, so that its
/// `slot_started` comes first).
fn print_arrived(events: &mut broadcast::Receiver<JobEvent>) {
    loop {
        match events.try_recv() {
            Ok(event) => print_job_event(&event),
            Err(broadcast::error::TryRecvError::Lagged(_)) => {}
            Err(_) => return,
        }
    }
}

/// Why the job stopped standing for good, if it did.
fn job_stopped(job: &ScheduledJob) -> Option<Fail> {
    job.is_stopped().then(|| match job.failure() {
        Some(e) => Fail(format!("the scheduled job stopped: {e}")),
        None => Fail("the scheduled job stopped unexpectedly".into()),
    })
}

/// A drain begun on SIGINT/SIGTERM (`--drain`): the job's drain, which leaves once the slot's
/// end is recorded.
type Draining<'a> = Pin<Box<dyn Future<Output = zookeeper_recipes::Result<()>> + Send + 'a>>;

/// Supervises one slot's CMD as `supervise` does for `run` (the supervisor polled first, so
/// CMD is signalled before anything else is written after a freeze), and prints the job's
/// events meanwhile (slots skipped because this one still runs).
///
/// SIGINT/SIGTERM stop CMD at once (`shutdown`), or with `--drain` begin the job's drain into
/// `draining` and stop CMD only once the drain's time is up.
#[allow(clippy::too_many_arguments)]
async fn supervise_slot<'j, S>(
    report: &TermReport<'_>,
    supervisor: &SupervisedCommand,
    shutdown: &CancellationToken,
    signals: &mut Signals,
    states: &mut S,
    events: &mut broadcast::Receiver<JobEvent>,
    job: &'j ScheduledJob,
    drain: Option<Duration>,
    draining: &mut Option<Draining<'j>>,
) -> Result<Outcome, ProcessError>
where
    S: Stream<Item = SessionStatus> + Unpin,
{
    let run = supervisor.run(report.term, |event| report.process_event(event));
    tokio::pin!(run);
    let mut events_open = true;
    let drain_over = tokio::time::sleep(Duration::MAX);
    tokio::pin!(drain_over);
    loop {
        tokio::select! {
            biased;
            outcome = &mut run => return outcome,
            _ = signals.recv(), if !shutdown.is_cancelled() => match drain {
                Some(timeout) if draining.is_none() => {
                    tracing::info!(timeout = ?timeout, "draining: CMD may finish its slot; no slot starts after it");
                    *draining = Some(Box::pin(job.drain(timeout)));
                    drain_over.as_mut().reset(tokio::time::Instant::now() + timeout);
                }
                // No drain, or a second signal during one: stop CMD now.
                _ => shutdown.cancel(),
            },
            _ = &mut drain_over, if draining.is_some() && !shutdown.is_cancelled() => {
                tracing::warn!("the drain's time is up: stopping CMD");
                shutdown.cancel();
            }
            Some(status) = states.next() => {
                report.out.state(&status, report.id, Some(report.term.path()));
            }
            event = next_job_event(events), if events_open => match event {
                Some(event) => print_job_event(&event),
                None => events_open = false,
            },
        }
    }
}

async fn cron_run(
    conn: &Conn,
    session_timeout: Duration,
    grace: Duration,
    args: CronRunArgs,
) -> Result<ExitCode, Fail> {
    // Before anything connects: a bad expression, zone or interval is the caller's to fix.
    let schedule = args.schedule()?;
    let mut signals = Signals::new()?;
    let cmd = command_spec(args.supervised.command)?;
    if let Err(e) = process::become_child_subreaper() {
        tracing::warn!(error = %e, "cannot become a child subreaper; CMD's orphans go to init");
    }
    let session = connect(conn, session_timeout).await?;

    // The job's closure hands each slot to this task and waits for CMD's outcome: everything
    // that prints or signals runs here, in the order it happens.
    let (slot_tx, mut slot_rx) = mpsc::channel::<SlotRequest>(1);
    let mut builder = ScheduledJob::builder(&session, &args.path)
        .schedule(schedule)
        .catch_up(match args.catch_up {
            CatchUpArg::Latest => CatchUp::Latest,
            CatchUpArg::All => CatchUp::All,
            CatchUpArg::None => CatchUp::None,
        })
        .overlap(match args.overlap {
            OverlapArg::Skip => Overlap::Skip,
            OverlapArg::BufferOne => Overlap::BufferOne,
        })
        .on_crash(match args.on_crash {
            OnCrashArg::Retry => OnCrash::Retry,
            OnCrashArg::Fail => OnCrash::Fail,
            OnCrashArg::Park => OnCrash::Park,
        })
        .max_attempts(args.max_attempts)
        // zkr stops CMD itself (SIGTERM, --grace, SIGKILL, never past the lease); a term whose
        // lease is not renewed ends CMD's grace before the lease's deadline, and the job waits
        // beyond that, so it never aborts a run whose CMD may still be alive.
        .stop_ahead(grace)
        .grace(grace * 2 + Duration::from_secs(5))
        .error_policy(args.supervised.policy.policy());
    if let Some(id) = args.supervised.id {
        builder = builder.id(id);
    }
    if let Some(tolerance) = args.clock_tolerance {
        builder = builder.clock_tolerance(tolerance);
    }
    let started = match builder.build() {
        Ok(prepared) => {
            prepared
                .start(move |run: SlotRun| {
                    let slot_tx = slot_tx.clone();
                    async move {
                        let (done_tx, done_rx) = oneshot::channel();
                        if slot_tx.send((run, done_tx)).await.is_err() {
                            return Err(SHUTTING_DOWN.to_owned());
                        }
                        done_rx
                            .await
                            .unwrap_or_else(|_| Err("zkr stopped before CMD ended".to_owned()))
                    }
                })
                .await
        }
        Err(e) => Err(e),
    };
    let job = match started {
        Ok(job) => job,
        Err(e) => {
            close_session(&session).await;
            return Err(Fail(format!("cannot start the job {}: {e}", args.path)));
        }
    };
    // Subscribed before the job's tasks first run (nothing awaited since `start`).
    let mut events = job.events();
    let mut leadership = job.leadership();
    let id = job.id().to_owned();
    let out = Out::Stderr;
    let states = session.state_changes();
    tokio::pin!(states);
    let shutdown = CancellationToken::new();
    let mut terms = Terms {
        session: &session,
        id: &id,
        current: None,
    };
    let mut code = ExitCode::SUCCESS;
    let mut failure: Option<Fail> = None;
    // A slot whose CMD zkr stopped on SIGINT/SIGTERM: answered only once the term is over, so
    // that its end is refused and the slot stays `running` for the next leader (a cut-off slot,
    // as `ScheduledJob::close` has it), rather than recorded failed by CMD's exit code.
    let mut interrupted: Option<(Leadership, SlotAnswer, Result<(), String>)> = None;
    // `--drain`: begun by a signal while CMD ran a slot.
    let mut draining: Option<Draining<'_>> = None;
    let mut events_open = true;
    let mut check = tokio::time::interval(Duration::from_secs(1));
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    loop {
        let term_end = terms.live().map(Leadership::cancelled);
        tokio::select! {
            biased;
            _ = signals.recv() => break,
            request = slot_rx.recv() => {
                let Some((run, done)) = request else {
                    failure = Some(job_stopped(&job).unwrap_or_else(|| {
                        Fail("the scheduled job stopped unexpectedly".into())
                    }));
                    break;
                };
                let term = run.leadership().clone();
                terms.follow(Some(&term));
                print_arrived(&mut events);
                let spec = cmd
                    .clone()
                    .env(ENV_SLOT, run.slot())
                    .env(ENV_ATTEMPT, run.attempt().to_string())
                    .env(ENV_RECOVERING, if run.is_recovering() { "1" } else { "0" });
                let supervisor = SupervisedCommand::new(spec)
                    .grace(grace)
                    .shutdown(shutdown.clone());
                let sent = terms.current.as_ref().is_some_and(|(_, sent)| *sent);
                let report = terms.report(&term, sent);
                let result = supervise_slot(
                    &report,
                    &supervisor,
                    &shutdown,
                    &mut signals,
                    &mut states,
                    &mut events,
                    &job,
                    args.drain,
                    &mut draining,
                )
                .await;
                let sent = report.not_leader_sent.get();
                if let Some((_, s)) = &mut terms.current {
                    *s = sent;
                }
                let answer = match &result {
                    Ok(outcome) => {
                        let c = outcome.exit.code();
                        run.set_exit_code(c);
                        if c == 0 {
                            Ok(())
                        } else {
                            Err(format!("CMD exited with code {c}"))
                        }
                    }
                    Err(ProcessError::NotLeader) => {
                        Err("the term was over before CMD could start".to_owned())
                    }
                    Err(e) => Err(format!("CMD did not run: {e}")),
                };
                if shutdown.is_cancelled() {
                    // CMD was running when the signal came: exit with its code.
                    if let Ok(outcome) = &result {
                        code = exit_code(outcome.exit.code());
                    }
                    if matches!(&result, Ok(o) if o.stopped == Some(StopReason::Shutdown)) {
                        interrupted = Some((term, done, answer));
                    } else {
                        let _ = done.send(answer);
                    }
                    break;
                }
                if draining.is_some() {
                    // CMD finished its slot within the drain: its end is recorded as usual,
                    // and the drain leaves once it is.
                    if let Ok(outcome) = &result {
                        code = exit_code(outcome.exit.code());
                    }
                    let _ = done.send(answer);
                    break;
                }
                let _ = done.send(answer);
            }
            changed = leadership.changed() => {
                if changed.is_err() {
                    failure = job_stopped(&job);
                    break;
                }
                let next = leadership.borrow_and_update().clone();
                terms.follow(next.as_ref());
                if let Some(f) = job_stopped(&job) {
                    failure = Some(f);
                    break;
                }
            }
            _ = async {
                match term_end {
                    Some(ended) => ended.await,
                    None => std::future::pending().await,
                }
            } => terms.end_current(),
            event = next_job_event(&mut events), if events_open => match event {
                Some(event) => print_job_event(&event),
                None => events_open = false,
            },
            Some(status) = states.next() => out.state(&status, &id, terms.path()),
            _ = check.tick() => {
                if let Some(f) = job_stopped(&job) {
                    failure = Some(f);
                    break;
                }
            }
        }
    }

    // Leave the election: the term ends (a slot still running is cut off and stays `running`
    // for the next leader) and our node is deleted at once. A drain whose CMD finished leaves
    // once the slot's end is recorded; one whose CMD was stopped closes as without a drain.
    let mut close: Draining<'_> = match draining.take() {
        Some(drained) if !shutdown.is_cancelled() => drained,
        _ => Box::pin(job.close()),
    };
    let bound = tokio::time::sleep(session_timeout + grace * 2 + Duration::from_secs(15));
    tokio::pin!(bound);
    let mut closed: Option<zookeeper_recipes::Result<()>> = None;
    let mut requests_open = true;
    while closed.is_none() {
        let held = interrupted.as_ref().map(|(term, ..)| term.cancelled());
        tokio::select! {
            biased;
            r = &mut close => closed = Some(r),
            _ = async {
                match held {
                    Some(ended) => ended.await,
                    None => std::future::pending().await,
                }
            } => {
                if let Some((_, done, answer)) = interrupted.take() {
                    let _ = done.send(answer);
                }
            }
            request = slot_rx.recv(), if requests_open => match request {
                Some((_, done)) => {
                    let _ = done.send(Err(SHUTTING_DOWN.to_owned()));
                }
                None => requests_open = false,
            },
            event = next_job_event(&mut events), if events_open => match event {
                Some(event) => print_job_event(&event),
                None => events_open = false,
            },
            _ = &mut bound => {
                tracing::warn!("the job did not finish closing in time");
                break;
            }
        }
    }
    print_arrived(&mut events);
    terms.follow(None);
    close_session(&session).await;
    if let Some(Err(e)) = closed {
        failure.get_or_insert(Fail(format!("closing the job failed: {e}")));
    }
    match failure {
        Some(f) => Err(f),
        None => Ok(code),
    }
}

async fn cron_admin(
    conn: &Conn,
    session_timeout: Duration,
    command: CronCommand,
) -> Result<ExitCode, Fail> {
    let session = connect(conn, session_timeout).await?;
    let result = cron_admin_on(&session, command).await;
    close_session(&session).await;
    if let Some(text) = result? {
        println!("{text}");
    }
    Ok(ExitCode::SUCCESS)
}

/// One admin command; what to print on stdout.
async fn cron_admin_on(session: &Session, command: CronCommand) -> Result<Option<String>, Fail> {
    let admin = |path: &str| JobAdmin::new(session, path).map_err(Fail::from);
    match command {
        CronCommand::History { path, limit } => {
            let history = admin(&path)?
                .history(limit)
                .await
                .map_err(|e| Fail(format!("cannot read the history of {path}: {e}")))?;
            Ok(Some(serde_json::to_string(&history)?))
        }
        CronCommand::Status { path } => {
            let status = admin(&path)?
                .status()
                .await
                .map_err(|e| Fail(format!("cannot read the status of {path}: {e}")))?;
            Ok(Some(serde_json::to_string(&output::StatusLine::from(
                &status,
            ))?))
        }
        CronCommand::Trigger { path } => {
            let n = admin(&path)?
                .trigger()
                .await
                .map_err(|e| Fail(format!("cannot trigger {path}: {e}")))?;
            Ok(Some(n.to_string()))
        }
        CronCommand::Pause { path } => {
            admin(&path)?
                .pause()
                .await
                .map_err(|e| Fail(format!("cannot pause {path}: {e}")))?;
            Ok(None)
        }
        CronCommand::Resume { path } => {
            admin(&path)?
                .resume()
                .await
                .map_err(|e| Fail(format!("cannot resume {path}: {e}")))?;
            Ok(None)
        }
        CronCommand::Resolve {
            path,
            slot,
            resolution,
        } => {
            let how = if resolution.done {
                Resolution::Done
            } else {
                Resolution::Rerun
            };
            admin(&path)?
                .resolve(&slot, how)
                .await
                .map_err(|e| Fail(format!("cannot resolve {slot} of {path}: {e}")))?;
            Ok(None)
        }
        CronCommand::Run(_) => Err(Fail("cron run is not an admin command".into())),
    }
}
