#![doc = include_str!("../HELP.md")]
//!
//! [`ErrorPolicy`]: zookeeper_recipes::ErrorPolicy
//! [`MonotonicTime`]: mono::MonotonicTime
//! [`BootTime`]: zookeeper_recipes::BootTime
//! [`Leadership::started_at`]: zookeeper_recipes::Leadership::started_at
//! [`Leadership::ended_at`]: zookeeper_recipes::Leadership::ended_at

mod args;
mod auth;
mod conn;
mod cron;
mod lock;
mod mono;
mod observe;
mod output;
mod run;
mod serve;
mod signals;
mod supervise;
mod term;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use args::{Cli, Command, CronCommand, CronRunArgs, LockArgs, RunArgs, resolve_grace};
use conn::Conn;
use supervise::{self as process, ShimArgs};

/// The connect string when neither `--connect` nor `$ZK_CONNECT` is given.
const DEFAULT_CONNECT: &str = "127.0.0.1:2181";

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

/// An error that ends zkr with a message on stderr and an exit code (1 unless a more specific
/// one applies: see [`codes`]).
#[derive(Debug)]
pub(crate) struct Fail {
    pub(crate) message: String,
    pub(crate) code: u8,
}

impl Fail {
    /// A failure with exit code 1.
    pub(crate) fn new(message: impl Into<String>) -> Fail {
        Fail {
            message: message.into(),
            code: codes::FAILURE,
        }
    }

    /// A failure with its own exit code.
    pub(crate) fn with_code(code: u8, message: impl Into<String>) -> Fail {
        Fail {
            message: message.into(),
            code,
        }
    }
}

impl<E: std::fmt::Display> From<E> for Fail {
    fn from(e: E) -> Self {
        Fail::new(e.to_string())
    }
}

/// zkr's own exit codes (HELP.md's table). CMD's exit code, and 128 + N for a signal, come on
/// top of these for the commands that supervise CMD.
pub(crate) mod codes {
    /// A run-time failure: the server refused, the job stopped, `resolve` refused a slot.
    pub(crate) const FAILURE: u8 = 1;
    /// A usage or argument error, found before connecting (clap's code, and zkr's own checks
    /// of values: `--grace`, `--server-tick-time`, `--session-timeout-floor`,
    /// `--clock-tolerance`, the schedule).
    pub(crate) const USAGE: u8 = 2;
    /// `cron history|status|participants|pause|resume|trigger|resolve`: no job at PATH
    /// (sysexits' EX_NOINPUT).
    pub(crate) const UNKNOWN_JOB: u8 = 66;
    /// No ZooKeeper server answered within `--connect-timeout` (sysexits' EX_UNAVAILABLE).
    pub(crate) const UNAVAILABLE: u8 = 69;
    /// The server denied access: a node's ACL refuses this session's identity (`NoAuth`), or
    /// the server refused the credentials (sysexits' EX_NOPERM).
    pub(crate) const DENIED: u8 = 77;
    /// CMD is found but cannot be executed: the shell's code.
    pub(crate) const NOT_EXECUTABLE: u8 = 126;
    /// CMD is not found (not a file, nor on `PATH`): the shell's code.
    pub(crate) const NOT_FOUND: u8 = 127;
}

async fn async_main(cli: Cli) -> ExitCode {
    let hosts = cli
        .connect
        .clone()
        .or_else(|| std::env::var("ZK_CONNECT").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| DEFAULT_CONNECT.to_owned());
    // Credentials and the ACL: checked before connecting, as usage errors (exit 2).
    // TLS and SASL too: each file read and checked now.
    let secured = auth::load(cli.auth_file.as_deref()).and_then(|auth| {
        let tls = auth::load_tls(
            cli.tls_ca.as_deref(),
            cli.tls_cert.as_deref(),
            cli.tls_key.as_deref(),
        )?;
        let sasl = auth::load_sasl(cli.sasl_digest_file.as_deref())?;
        let identity =
            auth.is_some() || sasl.is_some() || tls.as_ref().is_some_and(|t| t.has_identity());
        // Least privilege by default: with an identity, what zkr creates is its own (and
        // readable by anyone); `--acl open` says otherwise.
        let acl = cli.acl.unwrap_or(auth::AclArg::default_for(identity));
        auth::check_acl(acl, identity)?;
        if !identity {
            tracing::warn!(
                acl = acl.name(),
                "no identity (--auth-file, $ZK_AUTH, --sasl-digest-file, --tls-cert): what zkr creates is open to everyone"
            );
        }
        Ok((auth, tls, sasl, acl))
    });
    let (auth, tls, sasl, acl) = match secured {
        Ok(secured) => secured,
        Err(Fail { message, code }) => {
            eprintln!("zkr: {message}");
            return ExitCode::from(code);
        }
    };
    let conn = Conn {
        hosts,
        server_tick_time: cli.server_tick_time,
        session_timeout_floor: cli.session_timeout_floor,
        connect_timeout: cli.connect_timeout,
        auth,
        tls,
        sasl,
        acl,
    };
    if let Some(file) = &cli.events
        && let Err(e) = output::events_to(file)
    {
        eprintln!("zkr: cannot open --events {}: {e}", file.display());
        return ExitCode::from(codes::USAGE);
    }
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
            return ExitCode::from(codes::USAGE);
        }
        Some(Ok(grace)) => grace,
        None => process::DEFAULT_GRACE,
    };
    // Before connecting: the first connection state is counted, and a taken port is found
    // before anything joins.
    let metrics_addr = match &cli.command {
        Command::Run(RunArgs { supervised, .. })
        | Command::Lock(LockArgs { supervised, .. })
        | Command::Cron(CronCommand::Run(CronRunArgs { supervised, .. })) => {
            supervised.metrics_addr.clone()
        }
        _ => None,
    };
    if let Some(addr) = metrics_addr
        && let Err(Fail { message, code }) = serve::start(&addr).await
    {
        eprintln!("zkr: {message}");
        return ExitCode::from(code);
    }
    let result = match cli.command {
        Command::Latch { path, id, policy } => {
            observe::latch(&conn, cli.session_timeout, path, id, policy.policy()).await
        }
        Command::Participants { path } => {
            observe::participants(&conn, cli.session_timeout, &path).await
        }
        Command::Leader { path } => observe::leader(&conn, cli.session_timeout, &path).await,
        Command::Pool {
            root,
            jobs,
            id,
            policy,
        } => observe::pool(&conn, cli.session_timeout, root, jobs, id, policy.policy()).await,
        Command::Watch { path, lock_name } => {
            observe::watch(&conn, cli.session_timeout, path, lock_name).await
        }
        Command::Run(args) => run::run(&conn, cli.session_timeout, grace, args).await,
        Command::Lock(args) => lock::lock(&conn, cli.session_timeout, grace, args).await,
        Command::Cron(CronCommand::Run(args)) => {
            cron::cron_run(&conn, cli.session_timeout, grace, args).await
        }
        Command::Cron(CronCommand::Next(args)) => cron::cron_next(&args),
        Command::Cron(admin) => cron::cron_admin(&conn, cli.session_timeout, admin).await,
        Command::Exec { .. } => Err(Fail::new("__exec is handled before the runtime starts")),
    };
    match result {
        Ok(code) => code,
        Err(Fail { message, code }) => {
            eprintln!("zkr: {message}");
            ExitCode::from(code)
        }
    }
}
