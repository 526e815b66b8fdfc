//! The prologue every example shares: find ZooKeeper (an embedded server started by the crate's
//! test harness, or the ensemble named by `$ZK_CONNECT`), turn on logs when `RUST_LOG` is set,
//! and report a failure the way a command-line tool should.
//!
//! Each example takes it with `use zookeeper_recipes_rigs::prologue as common;`. Nothing here is needed in your own service: there
//! the connect string comes from your configuration.

// Each example uses only part of this module.
#![allow(dead_code)]

use std::process::ExitCode;

use zookeeper_recipes_testing::{TestingServer, TestingServerBuilder};

/// The environment variable that names an existing ensemble (`host:port[,host:port...][/chroot]`).
pub const ZK_CONNECT: &str = "ZK_CONNECT";

/// The ZooKeeper an example talks to. Keep it alive while the example runs: dropping it stops an
/// embedded server.
pub struct ZooKeeper {
    connect: String,
    embedded: Option<TestingServer>,
}

impl ZooKeeper {
    /// `$ZK_CONNECT` when set; otherwise a fresh embedded server (a real ZooKeeper process, from
    /// Debian's `zookeeper` package or `$ZOOKEEPER_HOME`). When Java or ZooKeeper is missing, the
    /// error is the harness's, which says what to install.
    pub async fn from_env() -> Result<ZooKeeper, String> {
        ZooKeeper::given_or_embedded(None, TestingServer::builder()).await
    }

    /// `connect` when given (a `--connect` option), else as [`from_env`](Self::from_env), with an
    /// embedded server started by `server` (for non-default settings, such as a tick time).
    pub async fn given_or_embedded(
        connect: Option<String>,
        server: TestingServerBuilder,
    ) -> Result<ZooKeeper, String> {
        let given = connect.or_else(|| std::env::var(ZK_CONNECT).ok());
        if let Some(connect) = given.filter(|c| !c.trim().is_empty()) {
            return Ok(ZooKeeper {
                connect,
                embedded: None,
            });
        }
        let server = server.start().await.map_err(|e| {
            format!(
                "could not start an embedded ZooKeeper: {e}\n\
                 (or run against an existing ensemble: {ZK_CONNECT}=host:port[,host:port...])"
            )
        })?;
        Ok(ZooKeeper {
            connect: server.connect_string().to_owned(),
            embedded: Some(server),
        })
    }

    /// The connect string to hand to `Session::builder`.
    pub fn connect_string(&self) -> &str {
        &self.connect
    }

    /// Where it is, in words: `an embedded ZooKeeper on 127.0.0.1:PORT` or `ZK_CONNECT=...`.
    pub fn describe(&self) -> String {
        match &self.embedded {
            Some(_) => format!("an embedded ZooKeeper on {}", self.connect),
            None => format!("{ZK_CONNECT}={}", self.connect),
        }
    }
}

/// Logs to stderr when `RUST_LOG` is set (`RUST_LOG=zookeeper_recipes=debug` shows the watch
/// traffic); colours only on a terminal, so that a log file can be read and parsed.
pub fn init_tracing() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .try_init();
    }
}

/// The exit code for an example's result; prints the error (with its line breaks) to stderr.
pub fn exit_code(result: Result<(), Box<dyn std::error::Error>>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
