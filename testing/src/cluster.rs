//! [`TestingCluster`]: a real ZooKeeper ensemble, one child process (or container) per server.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::future::{join_all, try_join_all};
use nix::sys::signal::Signal;

use super::config::{ServerMode, SessionLimits, Settings};
use super::proxy::FaultProxy;
use super::security::Prepared;
use super::server_process::{
    self as process, FLW_TIMEOUT, NodeFiles, ProbeTls, ReservedPort, ServerNode, lock,
};
use super::tls::{ClientAuth, ServerCertificate, ServerTls};
use super::{Backend, HarnessError, Installation, Result};

/// How long an ensemble may take to elect a leader after its JVMs start.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How many fresh port sets a start tries when a port turns out to be taken.
const START_ATTEMPTS: usize = 3;
/// Poll interval of the leader waits.
const POLL: Duration = Duration::from_millis(50);
/// ZooKeeper's `syncLimit` unless the builder says otherwise, in ticks.
const DEFAULT_SYNC_LIMIT: u32 = 5;
/// ZooKeeper's `initLimit` unless the builder says otherwise, in ticks.
const DEFAULT_INIT_LIMIT: u32 = 10;

fn is_member(mode: ServerMode) -> bool {
    matches!(mode, ServerMode::Leader | ServerMode::Follower)
}

/// Builder for a [`TestingCluster`] with non-default settings.
#[derive(Debug, Clone)]
#[must_use]
pub struct TestingClusterBuilder {
    servers: usize,
    settings: Settings,
    sync_limit: u32,
    init_limit: u32,
    read_only_mode: bool,
    snapshot_sync_only: bool,
    /// Servers whose session-timeout limits are their own: index -> (min, max).
    server_session_timeouts: BTreeMap<usize, (Duration, Duration)>,
}

impl Default for TestingClusterBuilder {
    fn default() -> Self {
        TestingClusterBuilder {
            servers: 3,
            sync_limit: DEFAULT_SYNC_LIMIT,
            init_limit: DEFAULT_INIT_LIMIT,
            read_only_mode: false,
            snapshot_sync_only: false,
            server_session_timeouts: BTreeMap::new(),
            settings: Settings {
                start_timeout: START_TIMEOUT,
                ..Settings::default()
            },
        }
    }
}

impl TestingClusterBuilder {
    /// How many servers (default 3).
    pub fn servers(mut self, servers: usize) -> Self {
        self.servers = servers;
        self
    }

    /// ZooKeeper's `tickTime` (default 200 ms).
    pub fn tick_time(mut self, tick: Duration) -> Self {
        self.settings.tick_time = tick;
        self
    }

    /// ZooKeeper's `syncLimit` in ticks (default 5): how long a follower and its leader go
    /// without hearing from each other before they part. A follower cut off from its peers
    /// keeps answering its clients for up to `syncLimit x tickTime`.
    pub fn sync_limit(mut self, ticks: u32) -> Self {
        self.sync_limit = ticks;
        self
    }

    /// ZooKeeper's `initLimit` in ticks (default 10): how long a follower may take to connect
    /// to and sync with its leader.
    pub fn init_limit(mut self, ticks: u32) -> Self {
        self.init_limit = ticks;
        self
    }

    /// `minSessionTimeout` of every server (default 400 ms), unless
    /// [`server_session_timeouts`](Self::server_session_timeouts) gives one its own.
    pub fn min_session_timeout(mut self, timeout: Duration) -> Self {
        self.settings.min_session_timeout = timeout;
        self
    }

    /// ZooKeeper's read-only mode (`readonlymode.enabled`, default off): a server that has lost
    /// its quorum serves reads to clients that accept a read-only server
    /// ([`SessionBuilder::can_be_read_only`](zookeeper_recipes::SessionBuilder::can_be_read_only)) instead of
    /// dropping them; its mode is then [`ServerMode::ReadOnly`].
    pub fn read_only_mode(mut self, enabled: bool) -> Self {
        self.read_only_mode = enabled;
        self
    }

    /// Whether a server that rejoins the quorum is always sent a whole snapshot
    /// (`zookeeper.forceSnapshotSync`, default off) instead of the transactions it missed (a
    /// DIFF). ZooKeeper 3.8.0 to 3.8.3 and 3.9.0 to 3.9.1, Debian's 3.8.0 among them, can lose
    /// committed transactions in a DIFF sync (ZOOKEEPER-4785): the rejoined server then answers
    /// reads from a data tree that misses writes the quorum acknowledged, for as long as it runs.
    /// Tests of the recipes that restart servers while clients write turn it on, so that what
    /// they judge is the recipes and not that bug.
    pub fn snapshot_sync_only(mut self, enabled: bool) -> Self {
        self.snapshot_sync_only = enabled;
        self
    }

    /// `maxSessionTimeout` of every server (default 60 s), unless
    /// [`server_session_timeouts`](Self::server_session_timeouts) gives one its own.
    pub fn max_session_timeout(mut self, timeout: Duration) -> Self {
        self.settings.max_session_timeout = timeout;
        self
    }

    /// Gives server `index` (from 0) its own `minSessionTimeout` and `maxSessionTimeout`, in
    /// place of the cluster-wide [`min_session_timeout`](Self::min_session_timeout) and
    /// [`max_session_timeout`](Self::max_session_timeout); a second call for the same index
    /// replaces the first.
    ///
    /// A server raises a shorter requested session timeout to its min and lowers a longer one
    /// to its max, and does so at every connect: a session that moves to a server with other
    /// limits is held to that server's. ZooKeeper takes whole milliseconds (sub-millisecond
    /// parts are dropped). To change a running server's limits, see
    /// [`TestingCluster::set_session_timeouts`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use zookeeper_recipes_testing::TestingCluster;
    ///
    /// // Server 1 holds every session to at most 4 s; servers 0 and 2 allow 60 s.
    /// let cluster = TestingCluster::builder()
    ///     .max_session_timeout(Duration::from_secs(60))
    ///     .server_session_timeouts(1, Duration::from_millis(400), Duration::from_secs(4))
    ///     .start()
    ///     .await?;
    /// assert_eq!(
    ///     cluster.session_timeouts(1)?,
    ///     (Duration::from_millis(400), Duration::from_secs(4))
    /// );
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// None here; [`start`](Self::start) fails with [`HarnessError::NoSuchServer`] when `index`
    /// is not below [`servers`](Self::servers), and with [`HarnessError::InvalidArgument`] when
    /// a limit is zero (or above `i32::MAX` ms) or `min` is above `max`.
    pub fn server_session_timeouts(mut self, index: usize, min: Duration, max: Duration) -> Self {
        self.server_session_timeouts.insert(index, (min, max));
        self
    }

    /// Each server's session-timeout limits: its own if it has them, else the cluster-wide
    /// ones.
    fn session_limits(&self) -> Result<Vec<SessionLimits>> {
        let common = self.settings.session_limits()?;
        let mut limits = vec![common; self.servers];
        for (&index, &(min, max)) in &self.server_session_timeouts {
            let slot = limits.get_mut(index).ok_or(HarnessError::NoSuchServer {
                index,
                len: self.servers,
            })?;
            *slot = SessionLimits::new(min, max)?;
        }
        Ok(limits)
    }

    /// How long to wait for the ensemble to elect a leader (default 60 s); also the bound of
    /// [`TestingCluster::restart_server`].
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.settings.start_timeout = timeout;
        self
    }

    /// Every server serves clients over TLS only, as
    /// [`TestingServerBuilder::tls`](super::TestingServerBuilder::tls) says; the servers share
    /// one CA and one server certificate ([`TestingCluster::tls`]), and
    /// [`TestingCluster::connect_string`] names each as `tcp+tls://127.0.0.1:PORT`. Links
    /// between the servers stay plaintext (no `sslQuorum`).
    pub fn tls(mut self, client_auth: ClientAuth) -> Self {
        self.settings.security.set_tls(client_auth);
        self
    }

    /// Which certificate every TLS server presents: see
    /// [`TestingServerBuilder::tls_server_certificate`](super::TestingServerBuilder::tls_server_certificate).
    pub fn tls_server_certificate(mut self, certificate: ServerCertificate) -> Self {
        self.settings.security.set_server_certificate(certificate);
        self
    }

    /// ZooKeeper's x509 provider on every server: see
    /// [`TestingServerBuilder::x509_auth`](super::TestingServerBuilder::x509_auth).
    pub fn x509_auth(mut self, enabled: bool) -> Self {
        self.settings.security.x509_auth = enabled;
        self
    }

    /// A SASL DIGEST-MD5 user on every server: see
    /// [`TestingServerBuilder::sasl_user`](super::TestingServerBuilder::sasl_user).
    pub fn sasl_user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.settings
            .security
            .sasl_users
            .push((user.into(), password.into()));
        self
    }

    /// Whether clients must log in with SASL: see
    /// [`TestingServerBuilder::sasl_required`](super::TestingServerBuilder::sasl_required).
    pub fn sasl_required(mut self, required: bool) -> Self {
        self.settings.security.sasl_required = required;
        self
    }

    /// Starts every server at once and waits until each is a leader or follower and exactly
    /// one is the leader.
    ///
    /// Every connection between two servers goes through a [`FaultProxy`] of that pair (see
    /// [`TestingCluster`]); the proxies run on the tokio runtime this is called on.
    ///
    /// # Errors
    ///
    /// [`HarnessError::InvalidArgument`] for zero servers or bad settings;
    /// [`HarnessError::NoSuchServer`] for
    /// [`server_session_timeouts`](Self::server_session_timeouts) of a server beyond
    /// [`servers`](Self::servers); [`HarnessError::JavaNotFound`] and
    /// [`HarnessError::ZooKeeperNotFound`] when not installed; [`HarnessError::StartTimeout`] or
    /// [`HarnessError::ServerExited`] (after a few fresh port sets) with that server's log tail.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills every started server and removes the directory.
    pub async fn start(self) -> Result<TestingCluster> {
        if self.servers == 0 {
            return Err(HarnessError::InvalidArgument {
                what: "cluster size",
                reason: "a cluster needs at least one server".to_owned(),
            });
        }
        self.settings.validate()?;
        let session_limits = self.session_limits()?;
        for (what, ticks) in [
            ("sync limit", self.sync_limit),
            ("init limit", self.init_limit),
        ] {
            if ticks == 0 {
                return Err(HarnessError::InvalidArgument {
                    what,
                    reason: "must be at least one tick".to_owned(),
                });
            }
        }
        if super::backend()? == Backend::Docker {
            #[cfg(feature = "docker")]
            if !self.settings.security.is_plain() {
                return Err(HarnessError::Unsupported(
                    "TLS, x509 and SASL clusters on the docker backend (use the process backend)",
                ));
            }
            return self.start_docker(session_limits).await;
        }
        let install = Installation::discover()?;
        let dir = tempfile::Builder::new()
            .prefix("zkr-ensemble-")
            .tempdir()
            .map_err(HarnessError::io(
                "creating the ensemble's temporary directory",
            ))?;
        let secured = self.settings.security.prepare(dir.path())?;
        let mut last_err = None;
        for attempt in 1..=START_ATTEMPTS {
            let (nodes, links, ports) = self
                .prepare(&install, dir.path(), &session_limits, &secured)
                .await?;
            for node in &nodes {
                node.spawn()?;
            }
            let addresses: Vec<String> = nodes
                .iter()
                .map(|n| n.connect_string().to_owned())
                .collect();
            let timeout = self.settings.start_timeout;
            let ready = async {
                try_join_all(nodes.iter().map(|n| n.wait_serving(timeout, is_member))).await?;
                wait_ready(&addresses, secured.probe.as_ref(), timeout, |i| {
                    nodes.get(i).map(ServerNode::log_tail).unwrap_or_default()
                })
                .await
            };
            match ready.await {
                Ok(()) => {
                    return Ok(TestingCluster {
                        servers: Servers::Process {
                            nodes,
                            links,
                            _ports: ports,
                            _dir: dir,
                        },
                        connect_string: addresses.join(","),
                        addresses,
                        probe: secured.probe.clone(),
                        tls: secured.tls.clone(),
                        tick_time: self.settings.tick_time,
                        start_timeout: self.settings.start_timeout,
                        session_limits: Mutex::new(session_limits),
                    });
                }
                Err(e) => {
                    let retry = matches!(e, HarnessError::ServerExited { .. })
                        || nodes.iter().any(ServerNode::bind_failed);
                    for node in &nodes {
                        node.kill_now();
                    }
                    if !retry {
                        return Err(e);
                    }
                    tracing::debug!(attempt, error = %e, "ensemble did not start; retrying on fresh ports");
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.unwrap_or(HarnessError::Unsupported("no start attempt was made")))
    }

    /// The docker backend: one container per server on a private network (see
    /// [`super::docker`]).
    #[cfg(feature = "docker")]
    async fn start_docker(self, session_limits: Vec<SessionLimits>) -> Result<TestingCluster> {
        let cluster = super::docker::DockerCluster::start(super::docker::ClusterSpec {
            servers: self.servers,
            settings: &self.settings,
            session_limits: &session_limits,
            init_limit: self.init_limit,
            sync_limit: self.sync_limit,
            read_only_mode: self.read_only_mode,
            snapshot_sync_only: self.snapshot_sync_only,
        })
        .await?;
        let addresses = cluster.connect_strings();
        wait_ready(&addresses, None, self.settings.start_timeout, |i| {
            cluster.log_tail(i)
        })
        .await?;
        Ok(TestingCluster {
            servers: Servers::Docker(cluster),
            connect_string: addresses.join(","),
            addresses,
            probe: None,
            tls: None,
            tick_time: self.settings.tick_time,
            start_timeout: self.settings.start_timeout,
            session_limits: Mutex::new(session_limits),
        })
    }

    #[cfg(not(feature = "docker"))]
    async fn start_docker(self, _session_limits: Vec<SessionLimits>) -> Result<TestingCluster> {
        Err(HarnessError::DockerFeatureMissing)
    }

    /// Fresh ports, the proxies of every directed link, fresh data dirs with `myid`, and a
    /// `zoo.cfg` per server (with that server's `session_limits`).
    ///
    /// The servers' ports are held ([`ReservedPort`]) before the proxies bind theirs, and for as
    /// long as the cluster lives: a server's quorum port is listened on only while it leads,
    /// and a port left free meanwhile could be handed to anyone who asks the kernel for one (a
    /// proxy listener of this very cluster included). A server elected while another socket
    /// listens on its quorum port cannot lead ("Couldn't bind", back to an election it wins
    /// again), and its followers, connecting through their link proxies to whatever listens
    /// there, are closed at once: no quorum for as long as that socket lives.
    ///
    /// Server i's `zoo.cfg` names its own quorum and election ports on its own `server.i`
    /// line (it binds them), and on the line of every other server j the listen addresses of
    /// the proxy of link i -> j, which forwards to j's real ports. ZooKeeper reads only its
    /// own line for binding, so each server reaches every peer through a proxy of the pair.
    async fn prepare(
        &self,
        install: &Installation,
        root: &Path,
        session_limits: &[SessionLimits],
        secured: &Prepared,
    ) -> Result<(Vec<ServerNode>, Vec<PeerLink>, Vec<ReservedPort>)> {
        let n = self.servers;
        let ports = process::reserve_ports(3 * n)?;
        let port = |k: usize| ports.get(k).map(ReservedPort::port).unwrap_or_default();
        let quorum = |i: usize| format!("127.0.0.1:{}", port(3 * i + 1));
        let election = |i: usize| format!("127.0.0.1:{}", port(3 * i + 2));
        // A follower retries a refused connect to its new leader for up to initLimit ticks; a
        // link proxy holds a connection to a peer that does not listen yet as long (see
        // `FaultProxy::start_peer_link`).
        let hold = self.settings.tick_time.saturating_mul(self.init_limit);
        let mut links = Vec::with_capacity(n * n.saturating_sub(1));
        for from in 0..n {
            for to in (0..n).filter(|to| *to != from) {
                let announce = Arc::new(OnceLock::new());
                let proxy =
                    FaultProxy::start_peer_link(quorum(to), election(to), announce.clone(), hold)
                        .await?;
                links.push(PeerLink {
                    from,
                    to,
                    proxy,
                    announce,
                });
            }
        }
        // A server announces its election address to the peers it connects to, and a peer
        // with the larger id connects back to that address: make it the reverse link's proxy.
        for link in &links {
            let back = links
                .iter()
                .find(|l| l.from == link.to && l.to == link.from)
                .and_then(|l| l.proxy.listen_address(1));
            if let Some(back) = back {
                let _ = link.announce.set(back.to_string());
            }
        }
        let mut common = self.settings.common_config()?;
        let _ = write!(
            common,
            "initLimit={}\nsyncLimit={}\n",
            self.init_limit, self.sync_limit
        );
        if n == 1 {
            // A one-server "ensemble" is a quorum of one (Mode: leader), not a standalone server.
            common.push_str("standaloneEnabled=false\n");
        }
        common.push_str(&secured.config);
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let node_dir: PathBuf = root.join(format!("server-{}", i + 1));
            let data_dir = node_dir.join("data");
            if data_dir.exists() {
                std::fs::remove_dir_all(&data_dir)
                    .map_err(HarnessError::io("clearing a data directory"))?;
            }
            std::fs::create_dir_all(&data_dir)
                .map_err(HarnessError::io("creating a data directory"))?;
            std::fs::write(data_dir.join("myid"), format!("{}\n", i + 1))
                .map_err(HarnessError::io("writing myid"))?;
            let client_port = port(3 * i);
            let mut text = common.clone();
            let _ = write!(
                text,
                "dataDir={}\n{}",
                data_dir.display(),
                secured.port_lines(client_port)
            );
            for j in 0..n {
                let (q, e) = if j == i {
                    (port(3 * j + 1), port(3 * j + 2))
                } else {
                    let proxy = links
                        .iter()
                        .find(|l| l.from == i && l.to == j)
                        .map(|l| &l.proxy);
                    let listen = |k: usize| {
                        proxy
                            .and_then(|p| p.listen_address(k))
                            .map_or(0, |a| a.port())
                    };
                    (listen(0), listen(1))
                };
                let _ = writeln!(text, "server.{}=127.0.0.1:{q}:{e}", j + 1);
            }
            if let Some(limits) = session_limits.get(i) {
                text = limits.apply_to(&text);
            }
            let config = node_dir.join("zoo.cfg");
            std::fs::write(&config, text).map_err(HarnessError::io("writing zoo.cfg"))?;
            nodes.push(ServerNode::new(
                install.clone(),
                NodeFiles {
                    name: format!("ZooKeeper server {i} of {n}"),
                    config,
                    log: node_dir.join("zookeeper.log"),
                    workdir: node_dir.clone(),
                    data_dir,
                    cleanup_dir: root.to_path_buf(),
                    client_port,
                    // ZooKeeper reads this one from the JVM's properties only, not from zoo.cfg.
                    jvm_flags: self
                        .read_only_mode
                        .then(|| "-Dreadonlymode.enabled=true".to_owned())
                        .into_iter()
                        .chain(
                            self.snapshot_sync_only
                                .then(|| "-Dzookeeper.forceSnapshotSync=true".to_owned()),
                        )
                        .chain(secured.jvm_flags.iter().cloned())
                        .collect(),
                    probe_tls: secured.probe.clone(),
                },
            ));
        }
        Ok((nodes, links, ports))
    }
}

/// The proxy of one directed link between two servers: `from` reaches `to` through it.
struct PeerLink {
    from: usize,
    to: usize,
    /// Listener 0 forwards to `to`'s quorum port, listener 1 to its election port.
    proxy: FaultProxy,
    /// What `from` is made to announce as its election address: the reverse link's proxy.
    announce: Arc<OnceLock<String>>,
}

/// Every server a leader or follower, and exactly one leader; `log_tail(i)` says why not.
async fn wait_ready(
    addresses: &[String],
    probe: Option<&ProbeTls>,
    timeout: Duration,
    log_tail: impl Fn(usize) -> String,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let modes = modes(addresses, probe).await;
        let leaders = modes
            .iter()
            .filter(|m| **m == Some(ServerMode::Leader))
            .count();
        if leaders == 1 && modes.iter().all(|m| m.is_some_and(is_member)) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            let log_tail = addresses
                .iter()
                .zip(&modes)
                .enumerate()
                .filter(|(_, (_, m))| !m.is_some_and(is_member))
                .map(|(i, (a, _))| format!("--- {a}:\n{}", log_tail(i)))
                .collect::<Vec<_>>()
                .join("\n");
            return Err(HarnessError::StartTimeout {
                what: format!("ensemble of {} (modes {modes:?})", addresses.len()),
                log_tail,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Each server's mode, `None` where it does not answer.
async fn modes(addresses: &[String], probe: Option<&ProbeTls>) -> Vec<Option<ServerMode>> {
    join_all(addresses.iter().map(|a| async move {
        process::four_letter_word_over(bare(a), probe, "srvr", FLW_TIMEOUT)
            .await
            .ok()
            .map(|s| process::parse_mode(&s))
    }))
    .await
}

/// A client address without its scheme (`tcp+tls://` for a TLS server): where the probes go.
fn bare(address: &str) -> &str {
    address
        .strip_prefix("tcp+tls://")
        .or_else(|| address.strip_prefix("tcp://"))
        .unwrap_or(address)
}

/// A ZooKeeper ensemble for tests: N servers on loopback, each with its own client, peer and
/// election ports and data directory.
///
/// Servers are numbered from 0 here (their `myid` is index + 1). Every JVM has the same
/// sidecar protection as a [`super::TestingServer`]; dropping the cluster kills all of them and
/// removes the directory.
///
/// # Partitions between servers
///
/// Every TCP connection between two servers (the quorum link from a follower to its leader,
/// the election link between every pair) crosses a [`FaultProxy`] owned by that directed pair:
/// each server has its own `zoo.cfg` in which every *other* server's line names the proxy
/// of the link to it. So [`isolate`](Self::isolate), [`partition`](Self::partition) and
/// [`cut_one_way`](Self::cut_one_way) separate servers without root, while clients still reach
/// every server directly. A cut link holds bytes back silently, like a firewall that drops
/// packets: no connection is reset, so each server notices only through its own timeouts
/// (`syncLimit x tickTime` between a follower and its leader), as in a real partition.
/// [`heal`](Self::heal) lets the held bytes flow again. A connection to a server that does not
/// listen (still starting, just elected and not yet listening for its followers, or down) is
/// held by the proxy for up to `initLimit x tickTime` and forwarded once the server listens,
/// then reset: through a proxy a connect cannot be refused, and a retried refused connect is
/// what ZooKeeper expects there (a follower that reaches its new leader before the leader
/// listens retries the connect, while a connection accepted and then reset ends its attempt
/// to follow, and the election starts over after the leader's `initLimit`). Each call sets the state of the links it
/// names and leaves the others alone (so a [`cut_one_way`](Self::cut_one_way) on a pair already
/// cut both ways makes it one-way); `heal` restores every link. The proxies stay across
/// [`restart_server`](Self::restart_server), and [`peer_connections`](Self::peer_connections)
/// counts the connections through one of them.
///
/// On the docker backend the servers are containers on a private network, connected directly,
/// and a cut is an iptables `DROP` in the receiving container's network namespace of what the
/// other sends (silent as well; clients still reach every server through its published port);
/// the cuts in force are written again after a restart. [`peer_connections`](Self::peer_connections)
/// then reads the sending container's TCP table.
///
/// The proxies run on the tokio runtime that started the cluster: use the cluster from that
/// runtime, and do not keep it in a `static` shared between tests' runtimes (when its runtime
/// shuts down, the servers lose each other).
///
/// # Session-timeout limits per server
///
/// Each server has its own `minSessionTimeout` and `maxSessionTimeout`: the cluster-wide ones
/// unless [`TestingClusterBuilder::server_session_timeouts`] gives it others, and
/// [`set_session_timeouts`](Self::set_session_timeouts) changes them for the server's next
/// [`restart_server`](Self::restart_server) (a rolling configuration change), so that a test can
/// move a session to a server that renegotiates its timeout.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use zookeeper_recipes_testing::TestingCluster;
///
/// let cluster = TestingCluster::start(3).await?;
/// let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
/// cluster.kill_server(leader).await?;
/// let next = cluster.wait_for_leader(Duration::from_secs(10)).await?;
/// assert_ne!(leader, next);
/// cluster.restart_server(leader).await?; // rejoins as a follower
///
/// let follower = (leader + 1) % 3;
/// cluster.isolate(follower)?; // its clients still reach it, its peers do not
/// cluster.heal();
/// # Ok(())
/// # }
/// ```
///
/// # Curator
///
/// `org.apache.curator.test.TestingCluster` with `killServer` / `restartServer`; Curator finds
/// servers by `InstanceSpec`, this harness by index.
pub struct TestingCluster {
    servers: Servers,
    /// Each server's client address (`tcp+tls://` for TLS servers).
    addresses: Vec<String>,
    /// The TLS client of the harness's probes, for TLS servers.
    probe: Option<ProbeTls>,
    tls: Option<Arc<ServerTls>>,
    tick_time: Duration,
    connect_string: String,
    start_timeout: Duration,
    /// Each server's session-timeout limits as its next (re)start applies them; held while a
    /// server's configuration is rewritten, so that two changes do not interleave.
    session_limits: Mutex<Vec<SessionLimits>>,
}

/// The servers of a cluster, by backend.
enum Servers {
    /// Field order: the nodes (their JVMs) go before the directory they use.
    Process {
        nodes: Vec<ServerNode>,
        links: Vec<PeerLink>,
        /// Every server's client, quorum and election ports, held while the cluster lives.
        _ports: Vec<ReservedPort>,
        _dir: tempfile::TempDir,
    },
    #[cfg(feature = "docker")]
    Docker(super::docker::DockerCluster),
}

impl std::fmt::Debug for TestingCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestingCluster")
            .field("connect_string", &self.connect_string)
            .finish()
    }
}

impl Drop for TestingCluster {
    /// Keeps the directory (data, `zoo.cfg`, `zookeeper.log` of every server) when the cluster
    /// is dropped by a panic, such as a failed assertion, or when `ZKR_TEST_KEEP=1`, and says
    /// where it is: a rare failure can then be read afterwards.
    fn drop(&mut self) {
        if let Servers::Process { _dir: dir, .. } = &mut self.servers
            && (std::thread::panicking() || super::keep_wanted())
        {
            dir.disable_cleanup(true);
            let logs = if super::server_logs_wanted() {
                ""
            } else {
                " (server logs only with ZKR_TEST_ZK_LOG=1)"
            };
            super::provision::say(format_args!(
                "zookeeper-recipes test harness: kept the ensemble's directory {}{logs}",
                dir.path().display()
            ));
        }
    }
}

impl TestingCluster {
    /// Starts an ensemble of `servers` with the default settings and waits for its leader.
    ///
    /// # Errors
    ///
    /// As [`TestingClusterBuilder::start`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills every started server and removes the directory.
    pub async fn start(servers: usize) -> Result<TestingCluster> {
        TestingClusterBuilder::default()
            .servers(servers)
            .start()
            .await
    }

    /// A builder for non-default settings.
    pub fn builder() -> TestingClusterBuilder {
        TestingClusterBuilder::default()
    }

    fn check(&self, index: usize) -> Result<()> {
        if index < self.addresses.len() {
            Ok(())
        } else {
            Err(HarnessError::NoSuchServer {
                index,
                len: self.addresses.len(),
            })
        }
    }

    /// Two distinct servers of the cluster.
    fn pair(&self, from: usize, to: usize) -> Result<()> {
        self.check(from)?;
        self.check(to)?;
        if from == to {
            return Err(HarnessError::InvalidArgument {
                what: "server pair",
                reason: format!("server {from} has no link to itself"),
            });
        }
        Ok(())
    }

    fn link<'a>(&self, links: &'a [PeerLink], from: usize, to: usize) -> Result<&'a FaultProxy> {
        self.pair(from, to)?;
        links
            .iter()
            .find(|l| l.from == from && l.to == to)
            .map(|l| &l.proxy)
            .ok_or(HarnessError::InvalidArgument {
                what: "server pair",
                reason: format!("server {from} has no link to itself"),
            })
    }

    /// The servers' `tickTime`, so that tests can tell a session the servers' tick.
    pub fn tick_time(&self) -> Duration {
        self.tick_time
    }

    /// The TLS side of a cluster started with [`TestingClusterBuilder::tls`]: the CA every
    /// server trusts and has its certificate from, and client certificates for clients.
    /// `None` for plaintext servers.
    pub fn tls(&self) -> Option<&ServerTls> {
        self.tls.as_deref()
    }

    /// Cuts server `index` off from all its peers, both ways; its clients still reach it.
    ///
    /// Bytes between it and its peers are held back silently (no reset), on every link to or
    /// from it, until [`heal`](Self::heal). A follower so isolated keeps answering its clients
    /// from its own state until it gives up on its leader (`syncLimit x tickTime`); an
    /// isolated quorum leader steps down after as long, while the others elect a new leader.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`] for an index out of range.
    pub fn isolate(&self, index: usize) -> Result<()> {
        self.check(index)?;
        match &self.servers {
            Servers::Process { links, .. } => {
                for link in links.iter().filter(|l| l.from == index || l.to == index) {
                    link.proxy.blackhole();
                }
            }
            #[cfg(feature = "docker")]
            Servers::Docker(d) => {
                let pairs: Vec<(usize, usize)> = (0..self.len())
                    .filter(|j| *j != index)
                    .flat_map(|j| [(index, j), (j, index)])
                    .collect();
                d.cut(&pairs)?;
            }
        }
        tracing::debug!(server = index, "isolated from its peers");
        Ok(())
    }

    /// Splits the servers into two groups that cannot reach each other (both ways, silently,
    /// until [`heal`](Self::heal)); links within a group are left as they are. A server in
    /// neither group keeps its links to both.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`] for an index out of range;
    /// [`HarnessError::InvalidArgument`] when a server is in both groups.
    pub fn partition(&self, side_a: &[usize], side_b: &[usize]) -> Result<()> {
        for i in side_a.iter().chain(side_b) {
            self.check(*i)?;
        }
        if let Some(both) = side_a.iter().find(|i| side_b.contains(i)) {
            return Err(HarnessError::InvalidArgument {
                what: "partition",
                reason: format!("server {both} is on both sides"),
            });
        }
        match &self.servers {
            Servers::Process { links, .. } => {
                for a in side_a {
                    for b in side_b {
                        self.link(links, *a, *b)?.blackhole();
                        self.link(links, *b, *a)?.blackhole();
                    }
                }
            }
            #[cfg(feature = "docker")]
            Servers::Docker(d) => {
                let pairs: Vec<(usize, usize)> = side_a
                    .iter()
                    .flat_map(|a| side_b.iter().flat_map(move |b| [(*a, *b), (*b, *a)]))
                    .collect();
                d.cut(&pairs)?;
            }
        }
        tracing::debug!(?side_a, ?side_b, "partitioned");
        Ok(())
    }

    /// Cuts one direction between two servers: what server `from` sends to server `to` is held
    /// back (silently, until [`heal`](Self::heal)) on every link between them, whichever of
    /// the two opened the connection, while what `to` sends to `from` still arrives.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`] for an index out of range;
    /// [`HarnessError::InvalidArgument`] when `from == to`.
    pub fn cut_one_way(&self, from: usize, to: usize) -> Result<()> {
        match &self.servers {
            Servers::Process { links, .. } => {
                // On the link from -> to, `from` is the proxy's client; on to -> from, its server.
                self.link(links, from, to)?.blackhole_requests();
                self.link(links, to, from)?.blackhole_replies();
            }
            #[cfg(feature = "docker")]
            Servers::Docker(d) => {
                self.pair(from, to)?;
                d.cut(&[(from, to)])?;
            }
        }
        tracing::debug!(from, to, "cut one way");
        Ok(())
    }

    /// Restores every link between servers; bytes held back by a cut flow again.
    ///
    /// On the docker backend, a failure to rewrite a container's rules is logged (`warn`).
    pub fn heal(&self) {
        match &self.servers {
            Servers::Process { links, .. } => {
                for link in links {
                    link.proxy.heal();
                }
            }
            #[cfg(feature = "docker")]
            Servers::Docker(d) => {
                if let Err(error) = d.heal() {
                    tracing::warn!(%error, "healing the peer links failed");
                }
            }
        }
        tracing::debug!("every peer link healed");
    }

    /// How many TCP connections from server `from` to server `to` are open now (through the
    /// proxy of that link): the quorum connection of a follower to its leader, and the
    /// election connection, which ZooKeeper keeps only when the larger server id opened it.
    /// A connection held while `to` does not listen counts too.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`] for an index out of range;
    /// [`HarnessError::InvalidArgument`] when `from == to`.
    pub fn peer_connections(&self, from: usize, to: usize) -> Result<usize> {
        match &self.servers {
            Servers::Process { links, .. } => Ok(self.link(links, from, to)?.connection_count()),
            #[cfg(feature = "docker")]
            Servers::Docker(d) => {
                self.pair(from, to)?;
                d.peer_connections(from, to)
            }
        }
    }

    /// Every server's client address, comma-joined: the connect string for clients.
    pub fn connect_string(&self) -> &str {
        &self.connect_string
    }

    /// How many servers the ensemble has.
    pub fn len(&self) -> usize {
        self.addresses.len()
    }

    /// Whether the ensemble has no servers (never true: a cluster has at least one).
    pub fn is_empty(&self) -> bool {
        self.addresses.is_empty()
    }

    /// Server `index`'s client address alone, `127.0.0.1:PORT` (`tcp+tls://127.0.0.1:PORT`
    /// for TLS servers).
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`] for an index out of range.
    pub fn server_connect_string(&self, index: usize) -> Result<&str> {
        self.check(index)?;
        Ok(self.addresses[index].as_str())
    }

    /// Server `index`'s JVM pid while it runs.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`] for an index out of range.
    pub fn server_pid(&self, index: usize) -> Result<Option<u32>> {
        match &self.servers {
            Servers::Process { nodes, .. } => Ok(node(nodes, index)?.pid()),
            #[cfg(feature = "docker")]
            Servers::Docker(d) => d.pid(index),
        }
    }

    /// Whether server `index`'s process runs (a paused one runs).
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`] for an index out of range.
    pub fn is_running(&self, index: usize) -> Result<bool> {
        match &self.servers {
            Servers::Process { nodes, .. } => Ok(node(nodes, index)?.is_running()),
            #[cfg(feature = "docker")]
            Servers::Docker(d) => d.is_running(index),
        }
    }

    /// Kills server `index` with `SIGKILL` and waits until it has exited.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`]; [`HarnessError::Timeout`] if it does not exit.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while it waits for another start, stop or restart of this server to
    /// finish does nothing; once it has taken the process, dropping it still kills the server.
    pub async fn kill_server(&self, index: usize) -> Result<()> {
        match &self.servers {
            Servers::Process { nodes, .. } => node(nodes, index)?.kill().await,
            #[cfg(feature = "docker")]
            Servers::Docker(d) => d.kill(index).await,
        }
    }

    /// Stops server `index` gracefully (`SIGTERM`, `SIGKILL` after 10 s).
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`]; [`HarnessError::Io`] or [`HarnessError::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while it waits for another start, stop or restart of this server to
    /// finish does nothing; once it has taken the process, dropping it `SIGKILL`s the server, so
    /// it ends stopped either way.
    pub async fn stop_server(&self, index: usize) -> Result<()> {
        match &self.servers {
            Servers::Process { nodes, .. } => node(nodes, index)?.stop().await,
            #[cfg(feature = "docker")]
            Servers::Docker(d) => d.stop(index).await,
        }
    }

    /// Starts server `index` again with the same ports and data (stopping it first if it runs)
    /// and waits until it is a leader or follower. That needs a quorum: restarting one server
    /// of a 3-server ensemble whose other two are down waits out the start timeout. The server
    /// starts with the session-timeout limits of [`session_timeouts`](Self::session_timeouts)
    /// (see [`set_session_timeouts`](Self::set_session_timeouts)).
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`]; [`HarnessError::StartTimeout`] or
    /// [`HarnessError::ServerExited`]; on the docker backend, [`HarnessError::Io`] when new
    /// session-timeout limits cannot be written into the stopped container (it stays stopped).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the server stopped or starting (never two JVMs).
    pub async fn restart_server(&self, index: usize) -> Result<()> {
        match &self.servers {
            Servers::Process { nodes, .. } => node(nodes, index)?
                .restart(self.start_timeout, is_member)
                .await
                .map(drop),
            #[cfg(feature = "docker")]
            Servers::Docker(d) => d.restart(index, self.start_timeout, is_member).await,
        }
    }

    /// Sets server `index`'s `minSessionTimeout` and `maxSessionTimeout` for its next
    /// [`restart_server`](Self::restart_server) and every start after it: a rolling
    /// configuration change, one server at a time, as an operator does it. The running server
    /// keeps its current limits until then, and so do the sessions it holds.
    ///
    /// A server raises a shorter requested session timeout to its min and lowers a longer one
    /// to its max, at every connect: a session that reconnects to a restarted server with a
    /// lower max gets the lower timeout. ZooKeeper takes whole milliseconds (sub-millisecond
    /// parts are dropped); [`session_timeouts`](Self::session_timeouts) reads back what the
    /// next start uses.
    ///
    /// The process backend rewrites the two lines of the server's own `zoo.cfg` now and keeps
    /// every other line. The docker backend keeps the change and applies it at the container's
    /// next restart, between its stop and its start: it copies the container's
    /// `$ZOO_CONF_DIR/zoo.cfg` out (`docker cp`, which works on a stopped container too),
    /// rewrites the two lines, and copies it back. The image's entrypoint writes `zoo.cfg` from
    /// its environment only when there is none, so the restarted server reads the rewritten
    /// file; a failed copy fails that restart (with the container stopped) instead of starting
    /// the server with its old limits.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use zookeeper_recipes_testing::TestingCluster;
    ///
    /// let cluster = TestingCluster::builder()
    ///     .max_session_timeout(Duration::from_secs(60))
    ///     .start()
    ///     .await?;
    /// // Lower server 0's max to 2 s, then restart it with the new limits.
    /// cluster.set_session_timeouts(0, Duration::from_millis(400), Duration::from_secs(2))?;
    /// cluster.restart_server(0).await?;
    /// let client = zookeeper_client::Client::connector()
    ///     .with_session_timeout(Duration::from_secs(60))
    ///     .connect(cluster.server_connect_string(0)?)
    ///     .await?;
    /// assert_eq!(client.session_timeout(), Duration::from_secs(2));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`] for an index out of range;
    /// [`HarnessError::InvalidArgument`] when a limit is zero (or above `i32::MAX` ms) or `min`
    /// is above `max`; [`HarnessError::Io`] when the process backend cannot rewrite the
    /// server's `zoo.cfg` (the limits in force are then unchanged).
    pub fn set_session_timeouts(&self, index: usize, min: Duration, max: Duration) -> Result<()> {
        self.check(index)?;
        let limits = SessionLimits::new(min, max)?;
        let mut all = lock(&self.session_limits);
        match &self.servers {
            Servers::Process { nodes, .. } => {
                node(nodes, index)?.edit_config(|config| limits.apply_to(config))?;
            }
            #[cfg(feature = "docker")]
            Servers::Docker(d) => d.set_session_limits(index, limits)?,
        }
        if let Some(slot) = all.get_mut(index) {
            *slot = limits;
        }
        let (min, max) = limits.durations();
        tracing::debug!(
            server = index,
            ?min,
            ?max,
            "session-timeout limits set for the next restart"
        );
        Ok(())
    }

    /// Server `index`'s `minSessionTimeout` and `maxSessionTimeout` as its configuration has
    /// them now: what its next (re)start applies, which is what the running server uses unless
    /// [`set_session_timeouts`](Self::set_session_timeouts) changed them since it started.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`] for an index out of range.
    pub fn session_timeouts(&self, index: usize) -> Result<(Duration, Duration)> {
        self.check(index)?;
        lock(&self.session_limits)
            .get(index)
            .map(|l| l.durations())
            .ok_or(HarnessError::NoSuchServer {
                index,
                len: self.len(),
            })
    }

    /// Freezes server `index` with `SIGSTOP` (`docker pause` on the docker backend). Returns
    /// once every thread of the server is stopped (blocking for the moment that takes, usually
    /// well under a millisecond): from then on it answers nothing.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`]; [`HarnessError::NotRunning`] when it is stopped;
    /// [`HarnessError::Timeout`] if its threads did not all stop within 5 s.
    pub fn pause_server(&self, index: usize) -> Result<()> {
        match &self.servers {
            Servers::Process { nodes, .. } => node(nodes, index)?.signal(Signal::SIGSTOP),
            #[cfg(feature = "docker")]
            Servers::Docker(d) => d.pause(index),
        }
    }

    /// Unfreezes server `index` with `SIGCONT`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`]; [`HarnessError::NotRunning`] when it is stopped.
    pub fn resume_server(&self, index: usize) -> Result<()> {
        match &self.servers {
            Servers::Process { nodes, .. } => node(nodes, index)?.signal(Signal::SIGCONT),
            #[cfg(feature = "docker")]
            Servers::Docker(d) => d.resume(index),
        }
    }

    /// Server `index`'s mode from `srvr`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`]; [`HarnessError::Io`] when it is down;
    /// [`HarnessError::Timeout`] when it does not answer within 5 s (paused).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn mode(&self, index: usize) -> Result<ServerMode> {
        let srvr = self.four_letter_word(index, "srvr").await?;
        Ok(process::parse_mode(&srvr))
    }

    /// Sends a four-letter word to server `index`, bounded by 5 s.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`], then as [`super::TestingServer::four_letter_word`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn four_letter_word(&self, index: usize, cmd: &str) -> Result<String> {
        let address = bare(self.server_connect_string(index)?);
        process::four_letter_word_over(address, self.probe.as_ref(), cmd, FLW_TIMEOUT).await
    }

    /// The index of the server whose `srvr` says `Mode: leader`, if any answers so now.
    ///
    /// Servers that are down or paused count as not leading (each is asked at once, bounded by
    /// 5 s).
    ///
    /// # Errors
    ///
    /// None at present; the `Result` leaves room for backends that can fail.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn leader_index(&self) -> Result<Option<usize>> {
        Ok(modes(&self.addresses, self.probe.as_ref())
            .await
            .iter()
            .position(|m| *m == Some(ServerMode::Leader)))
    }

    /// Waits until some server is the leader, and returns its index.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Timeout`] if no server leads within `timeout`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<usize> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(i) = self.leader_index().await? {
                return Ok(i);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(HarnessError::Timeout {
                    what: format!(
                        "no server of the ensemble became leader; last lines of the logs:\n{}",
                        self.log_tails()
                    ),
                    timeout,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl TestingCluster {
    /// Waits until the ensemble is whole again (every server a leader or a follower, exactly one
    /// of them leading), and returns the leader's index.
    ///
    /// Unlike [`TestingCluster::wait_for_leader`], this does not take a server that was paused
    /// and has just resumed for the leader: until its first tick it still says `leader`, while
    /// the others follow a new one.
    ///
    /// # Errors
    ///
    /// [`HarnessError::StartTimeout`] if the ensemble is not whole within `timeout`, with the
    /// logs of the servers that are not members.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn wait_whole(&self, timeout: Duration) -> Result<usize> {
        wait_ready(&self.addresses, self.probe.as_ref(), timeout, |i| {
            self.log_tail(i)
        })
        .await?;
        self.wait_for_leader(timeout).await
    }

    /// The last lines of every server's log, each under its address.
    fn log_tails(&self) -> String {
        (0..self.len())
            .map(|i| format!("--- {}:\n{}", self.addresses[i], self.log_tail(i)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The last lines of server `index`'s log.
    fn log_tail(&self, index: usize) -> String {
        match &self.servers {
            Servers::Process { nodes, .. } => nodes
                .get(index)
                .map(ServerNode::log_tail)
                .unwrap_or_default(),
            #[cfg(feature = "docker")]
            Servers::Docker(d) => d.log_tail(index),
        }
    }
}

fn node(nodes: &[ServerNode], index: usize) -> Result<&ServerNode> {
    nodes.get(index).ok_or(HarnessError::NoSuchServer {
        index,
        len: nodes.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server's quorum port is held while it does not lead, so that it can lead once elected.
    /// It used to be free then: any bind to port 0 (a link proxy of the cluster itself, about
    /// one cluster in 200) could get it, and once that server was elected the two survivors of
    /// a failed leader formed no quorum for as long as that socket lived ("Couldn't bind" in
    /// the new leader's log; its follower's connections closed within 2 ms, an
    /// `EOFException`, every 400 ms).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_followers_quorum_port_is_held_until_it_leads() {
        if !crate::require_zookeeper().expect("ZooKeeper is required under CI=true")
            || crate::backend().ok() != Some(Backend::Process)
        {
            return;
        }
        let cluster = TestingCluster::start(3).await.expect("ensemble");
        let leader = cluster
            .wait_for_leader(Duration::from_secs(30))
            .await
            .expect("a leader");
        let Servers::Process { nodes, .. } = &cluster.servers else {
            unreachable!("process backend")
        };
        for i in (0..3).filter(|i| *i != leader) {
            let config = std::fs::read_to_string(nodes[i].config_path()).expect("zoo.cfg");
            let line = format!("server.{}=", i + 1);
            let quorum: u16 = config
                .lines()
                .find_map(|l| l.strip_prefix(line.as_str()))
                .and_then(|a| a.split(':').nth(1))
                .and_then(|p| p.parse().ok())
                .expect("the server's own quorum port");
            let other = tokio::net::TcpSocket::new_v4().expect("socket");
            let taken = other.bind((std::net::Ipv4Addr::LOCALHOST, quorum).into());
            assert!(
                taken.is_err(),
                "server {i}'s quorum port {quorum} was free while it followed"
            );
        }
        cluster.kill_server(leader).await.expect("kill the leader");
        let next = cluster
            .wait_for_leader(Duration::from_secs(30))
            .await
            .expect("a follower leads on its held quorum port");
        assert_ne!(next, leader);
    }
}
