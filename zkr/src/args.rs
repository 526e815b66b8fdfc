//! The command line: clap's definitions of every subcommand and flag, and the checks an
//! argument gets before zkr connects (paths, ids, durations, the schedule, `--grace`).

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use zookeeper_recipes::ErrorPolicy;
use zookeeper_recipes::job::Schedule;

use crate::Fail;
use crate::auth::AclArg;
use crate::conn::Conn;

/// `zkr --version`: the package version and the commit it was built from (build.rs: `git
/// describe`, `$ZKR_COMMIT`, or `unknown`).
pub(crate) const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("ZKR_COMMIT"),
    ")"
);

/// Apache Curator's ZooKeeper recipes from the shell: leader latches, singleton commands, locks.
#[derive(Debug, Parser)]
#[command(name = "zkr", version = VERSION, after_long_help = include_str!("../HELP.md"))]
pub(crate) struct Cli {
    /// ZooKeeper connect string `host:port[,host:port...][/chroot]` [default: $ZK_CONNECT, else
    /// 127.0.0.1:2181]
    #[arg(long, value_name = "HOSTS", global = true)]
    pub(crate) connect: Option<String>,

    /// The session timeout to ask the server for (humantime: 3s, 500ms)
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration,
        default_value = "10s", global = true)]
    pub(crate) session_timeout: Duration,

    /// The servers' tickTime, which the lease's deadline depends on [default: assumed: 2s, at
    /// most a third of the session timeout, with a warning in the log]. A larger value is
    /// always safe; a smaller one than the servers' is not
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, global = true)]
    pub(crate) server_tick_time: Option<Duration>,

    /// The lowest session timeout any server may give the session: the lowest
    /// maxSessionTimeout of the ensemble, including one a rolling change is about to set
    /// [default: none]. zkr connects straight to the servers and cannot see what a reconnect
    /// renegotiates, so the lease counts with the lowest of this, the timeout the session was
    /// created with, and what a resumed session negotiated. Set it whenever the servers'
    /// limits differ or may change; a lower value is always safe
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, global = true)]
    pub(crate) session_timeout_floor: Option<Duration>,

    /// How long to wait for a ZooKeeper server to answer when connecting: one-shot commands
    /// then fail (exit 69), `cron run` tries again with a backoff
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration,
        default_value = "15s", global = true)]
    pub(crate) connect_timeout: Duration,

    /// Write the event lines that go to stderr (`run`, `lock`, `cron run`) to FILE instead
    /// (appended), so that CMD's own stderr stays apart from them
    #[arg(long, value_name = "FILE", global = true)]
    pub(crate) events: Option<std::path::PathBuf>,

    /// Authenticate with the digest credentials in FILE: one line `digest:USER:PASSWORD`,
    /// mode 600 or stricter (a file group or others may access is refused, exit 2)
    /// [default: $ZK_AUTH, else none]. The password is never an argument: it would show in `ps`
    #[arg(long, value_name = "FILE", global = true)]
    pub(crate) auth_file: Option<std::path::PathBuf>,

    /// Connect over TLS, trusting the CA certificates in the PEM FILE: hosts without a scheme
    /// are dialled over TLS, and each server's certificate must name the host dialled
    /// [default: $ZK_TLS_CA, else plaintext]
    #[arg(long, value_name = "FILE", global = true)]
    pub(crate) tls_ca: Option<std::path::PathBuf>,

    /// Present the client certificate (chain) in the PEM FILE, for servers with
    /// ssl.clientAuth=need; with their x509 auth provider it is zkr's identity (`--acl
    /// creator`). Needs --tls-key and --tls-ca [default: $ZK_TLS_CERT]
    #[arg(long, value_name = "FILE", global = true)]
    pub(crate) tls_cert: Option<std::path::PathBuf>,

    /// The private key of --tls-cert, PEM, mode 600 or stricter (a file group or others may
    /// access is refused, exit 2) [default: $ZK_TLS_KEY]
    #[arg(long, value_name = "FILE", global = true)]
    pub(crate) tls_key: Option<std::path::PathBuf>,

    /// Log in with SASL DIGEST-MD5 with the credentials in FILE: one line `USER:PASSWORD`,
    /// mode 600 or stricter (as --auth-file); the identity is `sasl:USER`
    #[arg(long, value_name = "FILE", global = true)]
    pub(crate) sasl_digest_file: Option<std::path::PathBuf>,

    /// The ACL of the nodes zkr creates (job, election, lock and pool nodes, their missing
    /// parents, and a chroot of the connect string): open (anyone), creator (the authenticated
    /// identity only), creator-read (creator, plus read for anyone). creator and creator-read
    /// need an identity: credentials, a SASL login or a client certificate (exit 2 without)
    /// [default: creator-read with an identity (--auth-file, $ZK_AUTH, --sasl-digest-file,
    /// --tls-cert), else open]
    #[arg(long, value_enum, value_name = "ACL", global = true)]
    pub(crate) acl: Option<AclArg>,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
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
pub(crate) struct SupervisedArgs {
    /// Participant id [default: HOSTNAME-PID-RANDOM]
    #[arg(long, value_parser = parse_id)]
    pub(crate) id: Option<String>,
    /// Time between SIGTERM and SIGKILL to CMD's process group, at most until the term's lease
    /// passes (a successor may start then). It must fit in the lease the session timeout
    /// leaves (2.75s for the default 10s with a 2s tick): a longer one is refused (exit 2)
    /// [default: 5s, lowered to half that limit]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub(crate) grace: Option<Duration>,
    #[command(flatten)]
    pub(crate) policy: PolicyArg,
    /// Serve the metrics (Prometheus text format, `/metrics`) and probes (`/healthz`, `/ready`
    /// while connected, `/leader` while leading) over HTTP on this address (HOST:PORT; port 0
    /// picks one: the `metrics_listening` event line says which) [default: off]
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_addr: Option<String>,
    /// The command and its arguments (after `--`)
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Election path (absolute, or a name under /election)
    #[arg(value_parser = parse_path)]
    pub(crate) path: String,
    /// Rejoin the election after each term and run CMD again the next time this leads
    #[arg(long)]
    pub(crate) requeue: bool,
    #[command(flatten)]
    pub(crate) supervised: SupervisedArgs,
}

#[derive(Debug, Args)]
pub(crate) struct LockArgs {
    /// Lock path (absolute, or a name under /election)
    #[arg(value_parser = parse_path)]
    pub(crate) path: String,
    /// Give up after this long without the lock (exit 75) [default: wait for ever]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub(crate) timeout: Option<Duration>,
    #[command(flatten)]
    pub(crate) supervised: SupervisedArgs,
}

/// `zkr cron ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum CronCommand {
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
    /// The job's state as a JSON object: schedule, paused, leader, cursor, open slots, last slot,
    /// last success
    Status {
        /// Job path (absolute, or a name under /cron)
        #[arg(value_parser = parse_cron_path)]
        path: String,
        /// Check the job's health and exit with its code: 0 healthy, 10 no success within
        /// --max-age, 11 the latest slot failed or a slot is parked, 12 no leader (the first that
        /// applies of 12, 11, 10)
        #[arg(long)]
        check: bool,
        /// With --check: the longest time since the last success that is healthy (26h for a
        /// nightly job)
        #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration,
            requires = "check")]
        max_age: Option<Duration>,
    },
    /// Ask the leader to run the job now as an extra slot `trigger-N`; prints N
    Trigger {
        /// Job path (absolute, or a name under /cron)
        #[arg(value_parser = parse_cron_path)]
        path: String,
        /// The run is for this slot of the schedule (its key, as `history` prints it): CMD gets
        /// it as ZK_FOR_SLOT, and the slot's instant as ZK_NOMINAL
        #[arg(long, value_name = "KEY", conflicts_with = "date", value_parser = parse_slot_key)]
        slot: Option<String>,
        /// The run is for this business date (YYYY-MM-DD): CMD gets it as ZK_BUSINESS_DATE
        #[arg(long, value_name = "DATE", value_parser = parse_business_date)]
        date: Option<String>,
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
    /// The job's participants (its election, PATH/leader) as a JSON array, in election order
    Participants {
        /// Job path (absolute, or a name under /cron)
        #[arg(value_parser = parse_cron_path)]
        path: String,
    },
    /// Preview a schedule's next slots and their keys, without ZooKeeper (one line each)
    Next(CronNextArgs),
    /// Resolve a parked slot: `--done` records it succeeded, `--rerun` has the leader run it
    /// again (`--rerun` also takes a failed slot)
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

impl CronCommand {
    /// The job an admin command reads or steers (none for `run` and `next`).
    pub(crate) fn path(&self) -> Option<&str> {
        match self {
            CronCommand::History { path, .. }
            | CronCommand::Status { path, .. }
            | CronCommand::Trigger { path, .. }
            | CronCommand::Pause { path }
            | CronCommand::Resume { path }
            | CronCommand::Participants { path }
            | CronCommand::Resolve { path, .. } => Some(path),
            CronCommand::Run(_) | CronCommand::Next(_) => None,
        }
    }
}

/// `zkr cron next`: a schedule as `cron run` takes it, and how many slots to show.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("schedule").required(true).args(["every", "cron"])))]
pub(crate) struct CronNextArgs {
    /// Slots every DURATION, on the Unix epoch's grid
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub(crate) every: Option<Duration>,
    /// Slots at the instants of a cron expression in --tz (five fields, or six with seconds
    /// first)
    #[arg(long, value_name = "EXPR")]
    pub(crate) cron: Option<String>,
    /// The IANA time zone of --cron [default: UTC]
    #[arg(long, value_name = "ZONE", conflicts_with = "every")]
    pub(crate) tz: Option<String>,
    /// How many slots to show
    #[arg(long, value_name = "N", default_value_t = 5,
        value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) count: u32,
    /// Show the slots after this instant (RFC 3339, e.g. 2027-03-28T00:00:00Z) [default: now]
    #[arg(long, value_name = "INSTANT", value_parser = parse_instant_ms)]
    pub(crate) after: Option<i64>,
    /// One JSON object per slot instead of a human line
    #[arg(long)]
    pub(crate) json: bool,
}

impl CronNextArgs {
    /// The schedule, checked as `cron run` checks it.
    pub(crate) fn schedule(&self) -> Result<Schedule, Fail> {
        build_schedule(self.cron.as_deref(), self.tz.as_deref(), self.every)
    }
}

/// An RFC 3339 instant as milliseconds since the Unix epoch.
fn parse_instant_ms(s: &str) -> Result<i64, String> {
    let t = humantime::parse_rfc3339_weak(s).map_err(|e| e.to_string())?;
    let since = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| "before the Unix epoch".to_owned())?;
    i64::try_from(since.as_millis()).map_err(|_| "too far in the future".to_owned())
}

/// `--done` or `--rerun`, exactly one.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub(crate) struct ResolutionArg {
    /// The work was done (checked by hand): record the slot succeeded
    #[arg(long)]
    pub(crate) done: bool,
    /// Run the slot again (attempt + 1); a parked or a failed slot
    #[arg(long)]
    pub(crate) rerun: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("schedule").required(true).args(["every", "cron"])))]
pub(crate) struct CronRunArgs {
    /// Job path (absolute, or a name under /cron)
    #[arg(value_parser = parse_cron_path)]
    pub(crate) path: String,
    /// Slots every DURATION, on the Unix epoch's grid (`1m`: on the minute, UTC)
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub(crate) every: Option<Duration>,
    /// Slots at the instants of a cron expression in --tz (five fields, or six with seconds
    /// first)
    #[arg(long, value_name = "EXPR")]
    pub(crate) cron: Option<String>,
    /// The IANA time zone of --cron [default: UTC]
    #[arg(long, value_name = "ZONE", conflicts_with = "every")]
    pub(crate) tz: Option<String>,
    /// Slots that came due while no replica ran the job: run the newest (latest), every one in
    /// order (all), or none; the others are recorded missed
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = CatchUpArg::Latest)]
    pub(crate) catch_up: CatchUpArg,
    /// A slot that comes due while the previous one runs: record it skipped, or run the first
    /// such slot afterwards (buffer-one)
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = OverlapArg::Skip)]
    pub(crate) overlap: OverlapArg,
    /// A slot cut off by a crash or a lost term: run it again on the next leader (retry, up to
    /// --max-attempts), record it failed, or park it until `zkr cron resolve`
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = OnCrashArg::Retry)]
    pub(crate) on_crash: OnCrashArg,
    /// How many times a slot is started at most under --on-crash retry
    #[arg(long, value_name = "N", default_value_t = 3,
        value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_attempts: u32,
    /// Retries on failure: a slot whose CMD exits non-zero is run again, up to N times, within
    /// its slot (each retry attempt + 1, recorded; distinct from --max-attempts, which counts
    /// cut-off runs)
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) retries: u32,
    /// How long to wait before each retry on failure
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration,
        default_value = "10s")]
    pub(crate) retry_backoff: Duration,
    /// On SIGINT/SIGTERM while CMD runs a slot: start no more slots and let CMD finish for up to
    /// DURATION (its end is recorded), then leave; after DURATION, stop CMD as without --drain
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub(crate) drain: Option<Duration>,
    /// How far this host's wall clock may be off the ensemble's: further, and this replica runs
    /// no slot and gives up its term (a `clock_skew` line) [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub(crate) clock_tolerance: Option<Duration>,
    #[command(flatten)]
    pub(crate) supervised: SupervisedArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum CatchUpArg {
    Latest,
    All,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OverlapArg {
    Skip,
    BufferOne,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OnCrashArg {
    Retry,
    Fail,
    Park,
}

impl CronRunArgs {
    /// The schedule, checked before anything connects (the typed error's text on failure).
    pub(crate) fn schedule(&self) -> Result<Schedule, Fail> {
        build_schedule(self.cron.as_deref(), self.tz.as_deref(), self.every)
    }
}

/// The schedule of `--cron`/`--tz` or `--every`; a refused one is a usage error (exit 2).
fn build_schedule(
    cron: Option<&str>,
    tz: Option<&str>,
    every: Option<Duration>,
) -> Result<Schedule, Fail> {
    let schedule = match (cron, every) {
        (Some(expr), _) => Schedule::cron(expr, tz.unwrap_or("UTC")),
        (None, Some(period)) => Schedule::every(period),
        (None, None) => {
            return Err(Fail::with_code(
                crate::codes::USAGE,
                "give --every or --cron",
            ));
        }
    };
    schedule.map_err(|e| Fail::with_code(crate::codes::USAGE, e.to_string()))
}

/// `--error-policy`, for the subcommands that hold a term.
#[derive(Debug, Args)]
pub(crate) struct PolicyArg {
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
    pub(crate) fn policy(&self) -> ErrorPolicy {
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

/// A slot key of a schedule (`2026-12-03T01:00:00Z`), for `cron trigger --slot`.
fn parse_slot_key(s: &str) -> Result<String, String> {
    zookeeper_recipes::job::TriggerFor::slot(s).map_err(|e| e.to_string())?;
    Ok(s.to_owned())
}

/// A business date `YYYY-MM-DD`, for `cron trigger --date`.
fn parse_business_date(s: &str) -> Result<String, String> {
    zookeeper_recipes::job::TriggerFor::date(s).map_err(|e| e.to_string())?;
    Ok(s.to_owned())
}

fn parse_id(s: &str) -> Result<String, String> {
    zookeeper_recipes::path::validate_id(s).map_err(|e| e.to_string())?;
    Ok(s.to_owned())
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
pub(crate) fn resolve_grace(
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
