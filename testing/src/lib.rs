//! A test harness that runs real ZooKeeper servers and does faults to the world around a client.
//!
//! This is the Rust counterpart of Curator's `curator-test`: [`TestingServer`] (one standalone
//! server), [`TestingCluster`] (a real N-node ensemble on loopback whose servers reach each other
//! only through proxies of their own, so that a test can isolate, partition or cut one way
//! between servers while clients still reach them), [`FaultProxy`] (a TCP proxy that can cut,
//! blackhole or delay one client's link) and [`expire_session`] (Curator's
//! `KillSession`: expire a live session from a twin connection). It is a crate of its own, as
//! `curator-test` is an artifact of its own: add it to your `[dev-dependencies]`.
//!
//! # Crate features
//! - `docker`: lets the harness run servers as containers (`ZKR_TEST_BACKEND=docker`).
//! - `provision`: when no ZooKeeper is found, install Debian's packages (root or password-less
//!   sudo; `ZKR_NO_INSTALL=1` turns it off again). Off by default: a user's tests never run
//!   `apt-get` unless asked to; zookeeper-recipes' own tests turn it on.
//!
//! # Where ZooKeeper comes from
//!
//! Servers are Java processes started directly (`java ... QuorumPeerMain zoo.cfg`, no launcher
//! script, so the recorded pid is the JVM's own). The jars are found in `$ZOOKEEPER_HOME` (the
//! Apache tarball layout: `lib/*.jar` and `*.jar`) or else in Debian's `/usr/share/java` (package
//! `zookeeper`); `java` is `$JAVA_HOME/bin/java` or else the first `java` on `PATH`. Server logs
//! are discarded (slf4j-nop) unless `ZKR_TEST_ZK_LOG=1` selects slf4j-simple, when they go to the
//! `zookeeper.log` file in the server's directory ([`TestingServer::log_path`]). A
//! [`TestingCluster`] dropped by a panic (a failed assertion) keeps its directory (each server's
//! `zoo.cfg`, data and log) and says where on stderr; `ZKR_TEST_KEEP=1` keeps every cluster's.
//!
//! `ZKR_TEST_BACKEND=docker` makes [`TestingServer`] and [`TestingCluster`] run containers of
//! the image `ZKR_ZOOKEEPER_IMAGE` (default `zookeeper:3.9`) through testcontainers instead
//! (crate feature `docker`), with the same operations: stop, restart on the same port, kill
//! (`docker kill`), pause (`docker pause`), the leader's identity, and the partitions between a
//! cluster's servers (iptables rules in the containers' network namespaces on a private
//! network; root on the host). With no `ZKR_TEST_BACKEND`, [`backend`] picks: a local
//! ZooKeeper, else Docker, else (feature `provision`) Debian's packages installed by the harness.
//!
//! # Nothing leaks
//!
//! Every JVM has a sidecar: a tiny `sh` that blocks reading a pipe whose only write end this
//! process holds. However the test process ends (normal exit, panic, `SIGKILL`), the kernel closes
//! that pipe, the sidecar wakes, `SIGKILL`s the JVM and removes the server's directory. So a
//! server kept in a `static` that is never dropped still dies with the test binary. Dropping a
//! [`TestingServer`] or [`TestingCluster`] kills its processes at once and removes the directory.
//!
//! # Skipping when ZooKeeper is missing
//!
//! Tests start with [`require_zookeeper`]: it returns `Ok(false)` (and prints why) when Java or
//! ZooKeeper is not installed, so the test can return early, except under `CI=true`, where it
//! returns the error so that a CI machine without ZooKeeper fails instead of passing vacuously.
//!
//! # One shared server per test binary
//!
//! Starting a JVM costs about half a second of a core, so tests that do not fault the server
//! share one per test binary, held in a `static` [`tokio::sync::OnceCell`] and never dropped (the
//! sidecar kills it when the binary exits). Each `#[tokio::test]` has its own runtime, and the
//! server does not belong to any of them: it is a child process, and [`TestingServer`]'s methods
//! only poll it, so any runtime may call them. What *is* bound to a runtime is every
//! [`zookeeper_client::Client`] (its connection task runs on the runtime that connected it) and
//! every [`FaultProxy`] (its tasks too), and so every [`TestingCluster`] (its servers talk
//! through proxies): each test makes its own connections, proxies and clusters and never keeps
//! them in a static. Each test also works under its own [`unique_path`], so tests sharing a
//! server run in parallel. Tests that stop, kill, pause or restart a server start their own.
//!
//! ```no_run
//! use tokio::sync::OnceCell;
//! use zookeeper_recipes_testing::{self as testing, TestingServer};
//!
//! static SERVER: OnceCell<TestingServer> = OnceCell::const_new();
//!
//! async fn server() -> &'static TestingServer {
//!     SERVER
//!         .get_or_try_init(TestingServer::start)
//!         .await
//!         .expect("the shared ZooKeeper server did not start")
//! }
//!
//! #[tokio::test]
//! async fn creates_a_node() {
//!     if !testing::require_zookeeper().expect("ZooKeeper is required under CI=true") {
//!         return;
//!     }
//!     let client = zookeeper_client::Client::connect(server().await.connect_string())
//!         .await
//!         .expect("no connection to the shared server");
//!     let root = testing::unique_path("creates-a-node");
//!     // ... work under `root` only ...
//! #   drop((client, root));
//! }
//! # fn main() {}
//! ```
//!
//! # Secured servers: TLS, mutual TLS, x509 and SASL
//!
//! [`TestingServerBuilder::tls`] starts a server that serves over TLS only (a
//! `secureClientPort`, no plaintext port), with a [`TestCa`] of its own
//! ([`TestingServer::tls`] hands out its CA and client certificates as PEM files and strings),
//! [`ClientAuth`] for `ssl.clientAuth`, [`ServerCertificate`] for a certificate a client must
//! refuse (wrong host, expired, unknown CA), [`TestingServerBuilder::x509_auth`] for ACLs
//! such as `x509:CN=svc-client`, and [`TestingServerBuilder::sasl_user`] /
//! [`TestingServerBuilder::sasl_required`] for SASL DIGEST-MD5 (`sasl:<user>`). A TLS server's
//! [`TestingServer::connect_string`] is `tcp+tls://127.0.0.1:PORT`. [`TestingClusterBuilder`] has
//! the same options (one CA for the ensemble; links between servers stay plaintext). These are
//! process-backend servers: the docker backend answers [`HarnessError::Unsupported`].
//! [`expire_session`] and [`mntr`] speak plaintext only.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use zookeeper_recipes_testing::{ClientAuth, TestingServer};
//!
//! let server = TestingServer::builder()
//!     .tls(ClientAuth::Need)
//!     .sasl_user("svc", "svc-secret")
//!     .start()
//!     .await?;
//! let tls = server.tls().expect("a TLS server");
//! let client_cert = tls.client_cert("svc-client")?; // x509:CN=svc-client
//! println!("{} {} {}", tls.ca_path().display(), client_cert.cert_path().display(), client_cert.key_path().display());
//! # Ok(())
//! # }
//! ```
//!
//! # Checking histories, and fault trials
//!
//! [`history`] is a pure checker of recorded terms and fenced writes (no overlapping terms,
//! rising tokens, no stale write accepted, the time to a leader after a heal): record your own
//! terms and writes and check them with it. The repository's seeded fault trials
//! (`rigs/src/trial.rs`, run by `rigs/tests/fault_trials.rs` and `rigs/examples/chaos.rs`) are built on
//! it; they are the project's own test rig and not part of this API.
//!
//! # Curator
//!
//! `TestingServer`, `TestingCluster` (`killServer`, `restartServer`) and `KillSession` keep
//! their names and meaning; the proxy plays the part of the port-forwarding proxy in
//! zookeeper-client's own tests.

mod backend;
mod cluster;
mod config;
#[cfg(feature = "docker")]
mod docker;
mod expire;
pub mod history;
mod jvm;
#[cfg(feature = "provision")]
pub mod provision;
#[cfg(not(feature = "provision"))]
#[allow(dead_code)]
mod provision;
mod proxy;
mod security;
mod server;
mod server_process;
mod tls;

use std::collections::BTreeMap;

use std::time::Duration;

pub use backend::{Backend, backend};
pub use cluster::{TestingCluster, TestingClusterBuilder};
pub use config::ServerMode;
pub use expire::expire_session;
pub(crate) use jvm::Installation;
pub use proxy::FaultProxy;
pub use server::{TestingServer, TestingServerBuilder};
pub use server_process::process_state;
pub use tls::{
    CertifiedKey, ClientAuth, SERVER_NAMES, ServerCertificate, ServerTls, TestCa, WRONG_HOST,
};

/// Errors of the test harness.
///
/// The variants about a missing installation say how to fix it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// The ZooKeeper jars were not found.
    #[error(
        "ZooKeeper not found (looked in {searched}): on Debian/Ubuntu run `sudo apt-get install -y zookeeper`, or set ZOOKEEPER_HOME to an Apache ZooKeeper 3.8+ installation, or start a Docker engine that has or can pull the image ZKR_ZOOKEEPER_IMAGE (default zookeeper:3.9; docker/zookeeper/build.sh builds one from Debian's packages)"
    )]
    ZooKeeperNotFound {
        /// Where the jars were looked for, and which were missing.
        searched: String,
    },

    /// No `java` executable was found.
    #[error(
        "Java not found (looked in {searched}): on Debian/Ubuntu run `sudo apt-get install -y default-jre-headless zookeeper`, or set JAVA_HOME to a Java 11+ installation, or start a Docker engine that has or can pull the image ZKR_ZOOKEEPER_IMAGE (default zookeeper:3.9; docker/zookeeper/build.sh builds one from Debian's packages)"
    )]
    JavaNotFound {
        /// Where `java` was looked for.
        searched: String,
    },

    /// An I/O operation of the harness failed.
    #[error("{context}: {source}")]
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A server or ensemble did not start serving in time.
    #[error("{what} did not start serving in time; last lines of its log:\n{log_tail}")]
    StartTimeout {
        /// Which server or ensemble.
        what: String,
        /// The last lines of the server log (empty unless `ZKR_TEST_ZK_LOG=1`).
        log_tail: String,
    },

    /// A server process exited while the harness waited for it to serve.
    #[error("{what} exited before serving ({status}); last lines of its log:\n{log_tail}")]
    ServerExited {
        /// Which server.
        what: String,
        /// Its exit status.
        status: String,
        /// The last lines of the server log (empty unless `ZKR_TEST_ZK_LOG=1`).
        log_tail: String,
    },

    /// A bounded wait of the harness ran out.
    #[error("timed out after {timeout:?}: {what}")]
    Timeout {
        /// What did not happen.
        what: String,
        /// How long the harness waited.
        timeout: Duration,
    },

    /// The operation needs a running server, and this one is stopped or killed.
    #[error("{0} is not running")]
    NotRunning(String),

    /// A cluster server index is out of range.
    #[error("no server {index} in a cluster of {len}")]
    NoSuchServer {
        /// The index asked for.
        index: usize,
        /// How many servers the cluster has.
        len: usize,
    },

    /// An argument was rejected (a zero tick time, a four-letter word that is not four letters).
    #[error("invalid {what}: {reason}")]
    InvalidArgument {
        /// The argument.
        what: &'static str,
        /// Why it was rejected.
        reason: String,
    },

    /// A certificate, key or TLS setting of the harness could not be made.
    #[error("TLS: {what}: {reason}")]
    Tls {
        /// What the harness was making.
        what: String,
        /// Why it failed.
        reason: String,
    },

    /// The operation is not available on this backend.
    #[error("unsupported: {0}")]
    Unsupported(&'static str),

    /// `ZKR_TEST_BACKEND=docker` is set, but the crate was built without its feature `docker`.
    #[error(
        "ZKR_TEST_BACKEND=docker needs the crate feature `docker` (build with `--features docker`), or unset ZKR_TEST_BACKEND to run ZooKeeper as a local process"
    )]
    DockerFeatureMissing,

    /// `ZKR_TEST_BACKEND` has a value the harness does not know.
    #[error(
        "unknown ZKR_TEST_BACKEND {0:?}: use `process`, `docker`, or nothing (the harness picks)"
    )]
    UnknownBackend(String),

    /// A ZooKeeper client operation of the harness failed.
    #[error("ZooKeeper client error: {0}")]
    ZooKeeper(#[from] zookeeper_client::Error),

    /// A Docker operation failed.
    #[cfg(feature = "docker")]
    #[error("docker: {context}: {source}")]
    Docker {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: testcontainers::TestcontainersError,
    },
}

impl HarnessError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> HarnessError {
        let context = context.into();
        move |source| HarnessError::Io { context, source }
    }
}

/// The harness's result type.
pub type Result<T, E = HarnessError> = std::result::Result<T, E>;

/// Checks that the harness has a backend: see [`backend`] (which may install Debian's
/// packages, once, when nothing else is there).
///
/// # Errors
///
/// [`HarnessError::JavaNotFound`] or [`HarnessError::ZooKeeperNotFound`], whose messages say how
/// to install them; [`HarnessError::DockerFeatureMissing`] or [`HarnessError::UnknownBackend`]
/// for a bad `ZKR_TEST_BACKEND`.
pub fn zookeeper_available() -> Result<()> {
    backend().map(drop)
}

/// Decides whether a test that needs ZooKeeper runs: `Ok(true)` to run, `Ok(false)` to skip.
///
/// When ZooKeeper or Java is missing it prints why to stderr and returns `Ok(false)`, except when
/// the environment has `CI=true` (or `CI=1`): then it returns the error, so CI fails rather than
/// skipping. Tests use it as
/// `if !require_zookeeper().expect("ZooKeeper is required under CI=true") { return; }`.
///
/// # Errors
///
/// Under `CI=true`, whatever [`zookeeper_available`] returns; a misconfigured
/// `ZKR_TEST_BACKEND` always.
pub fn require_zookeeper() -> Result<bool> {
    match zookeeper_available() {
        Ok(()) => Ok(true),
        Err(e @ (HarnessError::DockerFeatureMissing | HarnessError::UnknownBackend(_))) => Err(e),
        Err(e) if is_ci() => Err(e),
        Err(e) => {
            eprintln!("skipping a test that needs ZooKeeper: {e}");
            Ok(false)
        }
    }
}

/// The `mntr` figures (`zk_packets_received`, `zk_num_alive_connections`, ...) of the
/// ZooKeeper server at `address` (`host:port`), which need not be one the harness started: a
/// benchmark reads them from a server given by a connect string. Bounded by 5 s.
///
/// A [`TestingServer`] has the same as [`TestingServer::mntr`].
///
/// # Errors
///
/// [`HarnessError::Io`] if the server cannot be reached; [`HarnessError::Timeout`] if it does
/// not answer (say, paused).
///
/// # Cancel safety
///
/// Cancel safe: `mntr` is read-only.
pub async fn mntr(address: &str) -> Result<BTreeMap<String, String>> {
    let text =
        server_process::four_letter_word(address, "mntr", server_process::FLW_TIMEOUT).await?;
    Ok(server::parse_mntr(&text))
}

/// A fresh znode path for one test: `/zkr-test/<prefix>-<8 hex digits>`.
///
/// Tests that share a server each work under their own path, so they can run in parallel.
pub fn unique_path(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("/zkr-test/{prefix}-{}", &id[..8])
}

fn is_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// Whether server logs are wanted (`ZKR_TEST_ZK_LOG=1`).
pub(crate) fn server_logs_wanted() -> bool {
    std::env::var("ZKR_TEST_ZK_LOG").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// Whether every ensemble directory is to be kept after the test (`ZKR_TEST_KEEP=1`); without
/// it, only the directory of an ensemble dropped by a panic is kept.
pub(crate) fn keep_wanted() -> bool {
    std::env::var("ZKR_TEST_KEEP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_paths_differ_and_have_the_shape() {
        let a = unique_path("latch");
        let b = unique_path("latch");
        assert_ne!(a, b);
        assert!(a.starts_with("/zkr-test/latch-"));
        assert_eq!(a.len(), "/zkr-test/latch-".len() + 8);
    }

    #[test]
    fn missing_installation_messages_say_how_to_fix() {
        let zk = HarnessError::ZooKeeperNotFound {
            searched: "/nowhere".into(),
        }
        .to_string();
        assert!(zk.contains("sudo apt-get install -y zookeeper"), "{zk}");
        assert!(zk.contains("ZOOKEEPER_HOME"), "{zk}");
        let java = HarnessError::JavaNotFound {
            searched: "PATH".into(),
        }
        .to_string();
        assert!(java.contains("default-jre-headless"), "{java}");
        assert!(java.contains("JAVA_HOME"), "{java}");
    }
}
