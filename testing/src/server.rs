//! [`TestingServer`]: one standalone ZooKeeper server, as a child process (or a container).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::config::{ServerMode, Settings};
use super::server_process::{self as process, FLW_TIMEOUT, NodeFiles, ServerNode};
use super::tls::{ClientAuth, ServerCertificate, ServerTls};
use super::{Backend, HarnessError, Installation, Result};

/// How many fresh ports a first start tries when the port turns out to be taken.
const START_ATTEMPTS: usize = 5;

/// Parses `mntr` output (`key<TAB>value` lines).
pub(crate) fn parse_mntr(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// Builder for a [`TestingServer`] with non-default settings.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct TestingServerBuilder {
    settings: Settings,
}

impl TestingServerBuilder {
    /// ZooKeeper's `tickTime` (default 200 ms): the unit of its timers. Sessions expire on tick
    /// boundaries, so a session dies between its timeout and timeout + one tick.
    pub fn tick_time(mut self, tick: Duration) -> Self {
        self.settings.tick_time = tick;
        self
    }

    /// `minSessionTimeout` (default 400 ms): the server raises a shorter requested timeout to it.
    pub fn min_session_timeout(mut self, timeout: Duration) -> Self {
        self.settings.min_session_timeout = timeout;
        self
    }

    /// `maxSessionTimeout` (default 60 s): the server lowers a longer requested timeout to it.
    pub fn max_session_timeout(mut self, timeout: Duration) -> Self {
        self.settings.max_session_timeout = timeout;
        self
    }

    /// How long to wait for the server to serve (default 30 s).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.settings.start_timeout = timeout;
        self
    }

    /// Serves clients over TLS only, asking them for a certificate as `client_auth` says
    /// (ZooKeeper's `ssl.clientAuth`).
    ///
    /// The server gets a `secureClientPort` and no plaintext client port
    /// (`serverCnxnFactory=NettyServerCnxnFactory`, PEM key and trust stores), a CA of its
    /// own and a certificate from it for `IP:127.0.0.1` and `DNS:localhost`: see
    /// [`TestingServer::tls`] for the CA and client certificates to hand to a client, and
    /// [`tls_server_certificate`](Self::tls_server_certificate) for a certificate a client
    /// must refuse. [`TestingServer::connect_string`] is then `tcp+tls://127.0.0.1:PORT`.
    /// With [`ClientAuth::Want`] or [`ClientAuth::Need`] the x509 provider is on as well
    /// ([`x509_auth`](Self::x509_auth)): ZooKeeper 3.8 closes every connection that carries
    /// a certificate when no x509 provider is configured.
    ///
    /// The harness's own four-letter words ([`TestingServer::four_letter_word`], the wait
    /// for the server to serve) go over TLS too, with a client certificate of the server's
    /// CA (`CN=zkr-harness`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use zookeeper_recipes_testing::{ClientAuth, TestingServer};
    ///
    /// let server = TestingServer::builder().tls(ClientAuth::Need).start().await?;
    /// assert!(server.connect_string().starts_with("tcp+tls://127.0.0.1:"));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Curator
    ///
    /// curator-test's `TestingServer` has no TLS; this is what a Curator user sets up with
    /// `InstanceSpec` custom properties and a Java key store.
    pub fn tls(mut self, client_auth: ClientAuth) -> Self {
        self.settings.security.set_tls(client_auth);
        self
    }

    /// Which certificate a TLS server presents (default [`ServerCertificate::Valid`]): a
    /// wrong-host, expired or unknown-CA one for tests that a client refuses it. Turns TLS on
    /// (with [`ClientAuth::Need`]) unless [`tls`](Self::tls) was called.
    pub fn tls_server_certificate(mut self, certificate: ServerCertificate) -> Self {
        self.settings.security.set_server_certificate(certificate);
        self
    }

    /// Turns ZooKeeper's x509 authentication provider on
    /// (`authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider`): a
    /// client that presents a certificate is authenticated as `x509:<subject DN>`, such as
    /// `x509:CN=svc-client`, which ACLs can name. On by itself with [`ClientAuth::Want`] and
    /// [`ClientAuth::Need`].
    pub fn x509_auth(mut self, enabled: bool) -> Self {
        self.settings.security.x509_auth = enabled;
        self
    }

    /// Adds a SASL DIGEST-MD5 user: the harness writes a JAAS file with a `Server` section
    /// (`DigestLoginModule`, `user_<user>="<password>"`), passes it as
    /// `-Djava.security.auth.login.config` and sets
    /// `authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider`, so a
    /// client that logs in is `sasl:<user>` to ACLs. Works with or without TLS. Clients that
    /// do not log in are still served unless [`sasl_required`](Self::sasl_required).
    ///
    /// A user name is ASCII letters, digits, `-`, `_` and `.`; a password holds no `"`, `\`
    /// or control character ([`HarnessError::InvalidArgument`] at start otherwise).
    pub fn sasl_user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.settings
            .security
            .sasl_users
            .push((user.into(), password.into()));
        self
    }

    /// Whether a client must log in with SASL before anything else (default `false`):
    /// ZooKeeper 3.8's `enforce.auth.enabled=true` with `enforce.auth.schemes=sasl`; a session
    /// that has not authenticated is closed at its first request. Needs a
    /// [`sasl_user`](Self::sasl_user).
    pub fn sasl_required(mut self, required: bool) -> Self {
        self.settings.security.sasl_required = required;
        self
    }

    /// Starts the server and waits until it serves.
    ///
    /// # Errors
    ///
    /// [`HarnessError::InvalidArgument`] for bad settings; [`HarnessError::JavaNotFound`] and
    /// [`HarnessError::ZooKeeperNotFound`] when not installed; [`HarnessError::StartTimeout`] or
    /// [`HarnessError::ServerExited`] (after a few fresh ports) with the log's last lines;
    /// [`HarnessError::DockerFeatureMissing`] for `ZKR_TEST_BACKEND=docker` without feature
    /// `docker`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills a half-started server and removes its directory.
    pub async fn start(self) -> Result<TestingServer> {
        self.settings.validate()?;
        let inner = match super::backend()? {
            Backend::Process => start_process(&self.settings).await?,
            #[cfg(feature = "docker")]
            Backend::Docker if !self.settings.security.is_plain() => {
                return Err(HarnessError::Unsupported(
                    "TLS, x509 and SASL servers on the docker backend (use the process backend)",
                ));
            }
            #[cfg(feature = "docker")]
            Backend::Docker => {
                Inner::Docker(super::docker::DockerServer::start(&self.settings).await?)
            }
            #[cfg(not(feature = "docker"))]
            Backend::Docker => return Err(HarnessError::DockerFeatureMissing),
        };
        Ok(TestingServer { inner })
    }
}

/// A standalone ZooKeeper server for tests, on a free loopback port, with its own directory.
///
/// The JVM is a direct child process (its pid is the JVM's own) watched by a sidecar, so it dies
/// with the test process even if that is `SIGKILL`ed; dropping the server kills it at once and
/// removes its directory. All methods take `&self`, so a server can be shared (in a `static`, or
/// an `Arc` across tasks); start/stop/kill/restart are serialised.
///
/// Defaults: `tickTime` 200 ms, session timeouts clamped to [400 ms, 60 s], all four-letter
/// words allowed, no per-IP connection limit, no admin server.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use zookeeper_recipes_testing::TestingServer;
///
/// let server = TestingServer::start().await?;
/// let client = zookeeper_client::Client::connect(server.connect_string()).await?;
/// server.pause()?; // requests now hang
/// server.resume()?;
/// server.restart().await?; // same port, same data
/// # drop(client);
/// # Ok(())
/// # }
/// ```
///
/// # Curator
///
/// `org.apache.curator.test.TestingServer`; `pause`/`resume` have no Curator equivalent.
pub struct TestingServer {
    inner: Inner,
}

impl std::fmt::Debug for TestingServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestingServer")
            .field("connect_string", &self.connect_string())
            .field("pid", &self.pid())
            .finish()
    }
}

#[allow(
    clippy::large_enum_variant,
    reason = "one per server, built once and never moved in a hot path"
)]
enum Inner {
    /// Field order matters: the node (its JVM) goes before the directory it uses.
    Process {
        node: ServerNode,
        start_timeout: Duration,
        /// The client port, held from other binds (this and other processes') for the server's
        /// life, so that a restart finds it free.
        _port: process::ReservedPort,
        tls: Option<Arc<ServerTls>>,
        _dir: tempfile::TempDir,
    },
    #[cfg(feature = "docker")]
    Docker(super::docker::DockerServer),
}

async fn start_process(settings: &Settings) -> Result<Inner> {
    let install = Installation::discover()?;
    let dir = tempfile::Builder::new()
        .prefix("zkr-zookeeper-")
        .tempdir()
        .map_err(HarnessError::io(
            "creating the server's temporary directory",
        ))?;
    let data_dir = dir.path().join("data");
    std::fs::create_dir(&data_dir).map_err(HarnessError::io("creating the data directory"))?;
    let config = dir.path().join("zoo.cfg");
    let common = settings.common_config()?;
    let mut last_err = None;
    for attempt in 1..=START_ATTEMPTS {
        let reserved = process::reserve_ports(1)?
            .pop()
            .ok_or(HarnessError::Unsupported("no free port"))?;
        let port = reserved.port();
        let secured = settings.security.apply(dir.path(), port)?;
        let mut text = common.clone();
        let _ = writeln!(text, "dataDir={}", data_dir.display());
        text.push_str(&secured.config);
        std::fs::write(&config, text).map_err(HarnessError::io("writing zoo.cfg"))?;
        let node = ServerNode::new(
            install.clone(),
            NodeFiles {
                name: "ZooKeeper server".to_owned(),
                config: config.clone(),
                log: dir.path().join("zookeeper.log"),
                workdir: dir.path().to_path_buf(),
                data_dir: data_dir.clone(),
                cleanup_dir: dir.path().to_path_buf(),
                client_port: port,
                jvm_flags: secured.jvm_flags,
                probe_tls: secured.probe,
            },
        );
        node.spawn()?;
        match node.wait_serving(settings.start_timeout, |_| true).await {
            Ok(_) => {
                return Ok(Inner::Process {
                    node,
                    start_timeout: settings.start_timeout,
                    _port: reserved,
                    tls: secured.tls,
                    _dir: dir,
                });
            }
            Err(e @ HarnessError::ServerExited { .. }) => {
                tracing::debug!(attempt, port, error = %e, "ZooKeeper exited before serving; retrying on a fresh port");
                last_err = Some(e);
            }
            Err(e @ HarnessError::StartTimeout { .. }) if node.bind_failed() => {
                tracing::debug!(attempt, port, "port taken; retrying on a fresh port");
                last_err = Some(e);
            }
            Err(e) => return Err(e),
        }
        node.kill_now();
    }
    Err(last_err.unwrap_or(HarnessError::Unsupported("no start attempt was made")))
}

impl TestingServer {
    /// Starts a server with the default settings and waits until it serves.
    ///
    /// # Errors
    ///
    /// As [`TestingServerBuilder::start`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills a half-started server and removes its directory.
    pub async fn start() -> Result<TestingServer> {
        TestingServerBuilder::default().start().await
    }

    /// A builder for non-default settings.
    pub fn builder() -> TestingServerBuilder {
        TestingServerBuilder::default()
    }

    /// The connect string: `127.0.0.1:PORT`, or `tcp+tls://127.0.0.1:PORT` for a TLS server
    /// (what zookeeper-client's `tls` feature dials over TLS; a [`FaultProxy`](super::FaultProxy)
    /// started on it keeps the scheme). [`address`](Self::address) is the bare address.
    pub fn connect_string(&self) -> &str {
        match &self.inner {
            Inner::Process { node, .. } => node.connect_string(),
            #[cfg(feature = "docker")]
            Inner::Docker(d) => d.connect_string(),
        }
    }

    /// The TLS side of a server started with [`TestingServerBuilder::tls`]: its CA and the
    /// client certificates to hand to clients. `None` for a plaintext server.
    pub fn tls(&self) -> Option<&ServerTls> {
        match &self.inner {
            Inner::Process { tls, .. } => tls.as_deref(),
            #[cfg(feature = "docker")]
            Inner::Docker(_) => None,
        }
    }

    /// The client port (kept across restarts).
    pub fn port(&self) -> u16 {
        self.address().port()
    }

    /// The client address.
    pub fn address(&self) -> SocketAddr {
        match &self.inner {
            Inner::Process { node, .. } => node.address(),
            #[cfg(feature = "docker")]
            Inner::Docker(d) => d.address(),
        }
    }

    /// The server's data directory (`None` on the docker backend).
    pub fn data_dir(&self) -> Option<&Path> {
        match &self.inner {
            Inner::Process { node, .. } => Some(node.data_dir()),
            #[cfg(feature = "docker")]
            Inner::Docker(_) => None,
        }
    }

    /// The server's log file: its stdout and stderr, with ZooKeeper's own log lines when
    /// `ZKR_TEST_ZK_LOG=1` (`None` on the docker backend).
    pub fn log_path(&self) -> Option<&Path> {
        match &self.inner {
            Inner::Process { node, .. } => Some(node.log_path()),
            #[cfg(feature = "docker")]
            Inner::Docker(_) => None,
        }
    }

    /// The JVM's pid while it runs (`None` when stopped or killed). On the docker backend,
    /// the host pid of the container's main process, which is the JVM.
    pub fn pid(&self) -> Option<u32> {
        match &self.inner {
            Inner::Process { node, .. } => node.pid(),
            #[cfg(feature = "docker")]
            Inner::Docker(d) => d.pid(),
        }
    }

    /// Whether the server process runs (a paused server runs).
    pub fn is_running(&self) -> bool {
        match &self.inner {
            Inner::Process { node, .. } => node.is_running(),
            #[cfg(feature = "docker")]
            Inner::Docker(d) => d.is_running(),
        }
    }

    /// Stops the server gracefully (`SIGTERM`; `SIGKILL` after 10 s), waiting until it has
    /// exited. Its port and data are kept for [`restart`](Self::restart). A no-op when stopped.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Io`] if signalling fails, [`HarnessError::Timeout`] if even `SIGKILL`
    /// does not end it.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while it waits for another start, stop or restart of this server to
    /// finish does nothing; once it has taken the process, dropping it `SIGKILL`s the server, so
    /// it ends stopped either way.
    pub async fn stop(&self) -> Result<()> {
        match &self.inner {
            Inner::Process { node, .. } => node.stop().await,
            #[cfg(feature = "docker")]
            Inner::Docker(d) => d.stop().await,
        }
    }

    /// Kills the server with `SIGKILL` (a crash: nothing is flushed beyond what ZooKeeper has
    /// already synced) and waits until it has exited. A no-op when stopped.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Timeout`] if it does not exit.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while it waits for another start, stop or restart of this server to
    /// finish does nothing; once it has taken the process, dropping it still kills the server.
    pub async fn kill(&self) -> Result<()> {
        match &self.inner {
            Inner::Process { node, .. } => node.kill().await,
            #[cfg(feature = "docker")]
            Inner::Docker(d) => d.kill().await,
        }
    }

    /// Starts the server again on the same port with the same data, and waits until it serves.
    ///
    /// Works after [`stop`](Self::stop), after [`kill`](Self::kill), and on a running (or paused)
    /// server, which is stopped first.
    ///
    /// # Errors
    ///
    /// As [`stop`](Self::stop), then [`HarnessError::StartTimeout`] or
    /// [`HarnessError::ServerExited`] (say if the port was taken meanwhile).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the server stopped or starting (never two JVMs):
    /// [`is_running`](Self::is_running) tells which, and `restart` may be called again.
    pub async fn restart(&self) -> Result<()> {
        match &self.inner {
            Inner::Process {
                node,
                start_timeout,
                ..
            } => node.restart(*start_timeout, |_| true).await.map(drop),
            #[cfg(feature = "docker")]
            Inner::Docker(d) => d.restart().await,
        }
    }

    /// Freezes the server with `SIGSTOP` (on the docker backend, `docker pause`: the whole
    /// container freezes): connections stay open but nothing is answered, as with a long GC
    /// pause or a hung machine. Clients see their requests hang, then (after their connection
    /// timeout) a disconnect; sessions are not expired by a frozen server. Returns once every
    /// thread of the server is stopped (blocking for the moment that takes, usually well under
    /// a millisecond), so a request sent afterwards is not answered.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NotRunning`] when stopped; [`HarnessError::Io`] if `docker pause`
    /// fails; [`HarnessError::Timeout`] if the threads did not all stop within 5 s.
    pub fn pause(&self) -> Result<()> {
        match &self.inner {
            Inner::Process { node, .. } => node.signal(Signal::SIGSTOP),
            #[cfg(feature = "docker")]
            Inner::Docker(d) => d.pause(),
        }
    }

    /// Unfreezes a paused server with `SIGCONT` (`docker unpause` on the docker backend).
    ///
    /// # Errors
    ///
    /// As [`pause`](Self::pause).
    pub fn resume(&self) -> Result<()> {
        match &self.inner {
            Inner::Process { node, .. } => node.signal(Signal::SIGCONT),
            #[cfg(feature = "docker")]
            Inner::Docker(d) => d.resume(),
        }
    }

    /// Sends a four-letter word (`srvr`, `mntr`, `cons`, `wchc`, ...) and returns the answer,
    /// bounded by 5 s. On a TLS server the word goes over TLS, as the harness's client
    /// `CN=zkr-harness`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::InvalidArgument`] unless `cmd` is four lowercase letters;
    /// [`HarnessError::Io`] if the server cannot be reached; [`HarnessError::Timeout`] if it
    /// does not answer (say, paused).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the words are read-only.
    pub async fn four_letter_word(&self, cmd: &str) -> Result<String> {
        match &self.inner {
            Inner::Process { node, .. } => node.four_letter_word(cmd, FLW_TIMEOUT).await,
            #[cfg(feature = "docker")]
            Inner::Docker(d) => {
                process::four_letter_word(d.connect_string(), cmd, FLW_TIMEOUT).await
            }
        }
    }

    /// The server's `mntr` figures (`zk_packets_received`, `zk_num_alive_connections`, ...).
    ///
    /// # Errors
    ///
    /// As [`four_letter_word`](Self::four_letter_word).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn mntr(&self) -> Result<BTreeMap<String, String>> {
        Ok(parse_mntr(&self.four_letter_word("mntr").await?))
    }

    /// The server's mode from `srvr` ([`ServerMode::Standalone`] when serving).
    ///
    /// # Errors
    ///
    /// As [`four_letter_word`](Self::four_letter_word).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn mode(&self) -> Result<ServerMode> {
        Ok(process::parse_mode(&self.four_letter_word("srvr").await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mntr_lines_are_parsed() {
        let m = parse_mntr("zk_version\t3.8.0-abc\nzk_packets_received\t12\n\nnot a pair\n");
        assert_eq!(m.get("zk_packets_received").map(String::as_str), Some("12"));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn settings_are_validated() {
        assert!(Settings::default().validate().is_ok());
        let zero = Settings {
            tick_time: Duration::ZERO,
            ..Settings::default()
        };
        assert!(zero.validate().is_err());
        let inverted = Settings {
            min_session_timeout: Duration::from_secs(10),
            max_session_timeout: Duration::from_secs(1),
            ..Settings::default()
        };
        assert!(inverted.validate().is_err());
        let cfg = Settings::default().common_config().expect("config");
        for line in [
            "tickTime=200",
            "minSessionTimeout=400",
            "maxSessionTimeout=60000",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
            "maxClientCnxns=0",
        ] {
            assert!(cfg.lines().any(|l| l == line), "{line} missing from {cfg}");
        }
    }
}
