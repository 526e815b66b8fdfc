//! [`TestingCluster`]: a real ZooKeeper ensemble on loopback, one child process per server.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::future::{join_all, try_join_all};
use nix::sys::signal::Signal;

use super::process::{self, FLW_TIMEOUT, NodeFiles, ServerNode};
use super::server::{ServerMode, Settings};
use super::{HarnessError, Installation, Result};

/// How long an ensemble may take to elect a leader after its JVMs start.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How many fresh port sets a start tries when a port turns out to be taken.
const START_ATTEMPTS: usize = 3;
/// Poll interval of the leader waits.
const POLL: Duration = Duration::from_millis(50);

fn is_member(mode: ServerMode) -> bool {
    matches!(mode, ServerMode::Leader | ServerMode::Follower)
}

/// Builder for a [`TestingCluster`] with non-default settings.
#[derive(Debug, Clone)]
#[must_use]
pub struct TestingClusterBuilder {
    servers: usize,
    settings: Settings,
}

impl Default for TestingClusterBuilder {
    fn default() -> Self {
        TestingClusterBuilder {
            servers: 3,
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

    /// ZooKeeper's `tickTime` (default 200 ms; `initLimit` is 10 and `syncLimit` 5 ticks).
    pub fn tick_time(mut self, tick: Duration) -> Self {
        self.settings.tick_time = tick;
        self
    }

    /// `minSessionTimeout` (default 400 ms).
    pub fn min_session_timeout(mut self, timeout: Duration) -> Self {
        self.settings.min_session_timeout = timeout;
        self
    }

    /// `maxSessionTimeout` (default 60 s).
    pub fn max_session_timeout(mut self, timeout: Duration) -> Self {
        self.settings.max_session_timeout = timeout;
        self
    }

    /// How long to wait for the ensemble to elect a leader (default 60 s); also the bound of
    /// [`TestingCluster::restart_server`].
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.settings.start_timeout = timeout;
        self
    }

    /// Starts every server at once and waits until each is a leader or follower and exactly
    /// one is the leader.
    ///
    /// # Errors
    ///
    /// [`HarnessError::InvalidArgument`] for zero servers or bad settings;
    /// [`HarnessError::JavaNotFound`] and [`HarnessError::ZooKeeperNotFound`] when not
    /// installed; [`HarnessError::StartTimeout`] or [`HarnessError::ServerExited`] (after a few
    /// fresh port sets) with that server's log tail.
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
        let install = Installation::discover()?;
        let dir = tempfile::Builder::new()
            .prefix("zkr-ensemble-")
            .tempdir()
            .map_err(HarnessError::io(
                "creating the ensemble's temporary directory",
            ))?;
        let mut last_err = None;
        for attempt in 1..=START_ATTEMPTS {
            let nodes = self.prepare(&install, dir.path())?;
            for node in &nodes {
                node.spawn()?;
            }
            match wait_ready(&nodes, self.settings.start_timeout).await {
                Ok(()) => {
                    let connect_string = nodes
                        .iter()
                        .map(ServerNode::connect_string)
                        .collect::<Vec<_>>()
                        .join(",");
                    return Ok(TestingCluster {
                        nodes,
                        connect_string,
                        start_timeout: self.settings.start_timeout,
                        _dir: dir,
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

    /// Fresh ports, fresh data dirs with `myid`, and a `zoo.cfg` per server.
    fn prepare(&self, install: &Installation, root: &Path) -> Result<Vec<ServerNode>> {
        let n = self.servers;
        let ports = process::free_ports(3 * n)?;
        let port = |k: usize| ports.get(k).copied().unwrap_or_default();
        let mut common = self.settings.common_config()?;
        common.push_str("initLimit=10\nsyncLimit=5\n");
        if n == 1 {
            // A one-server "ensemble" is a quorum of one (Mode: leader), not a standalone server.
            common.push_str("standaloneEnabled=false\n");
        }
        for i in 0..n {
            let _ = writeln!(
                common,
                "server.{}=127.0.0.1:{}:{}",
                i + 1,
                port(3 * i + 1),
                port(3 * i + 2)
            );
        }
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
                "dataDir={}\nclientPort={client_port}\n",
                data_dir.display()
            );
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
                },
            ));
        }
        Ok(nodes)
    }
}

/// Every node a leader or follower, and exactly one leader.
async fn wait_ready(nodes: &[ServerNode], timeout: Duration) -> Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    try_join_all(nodes.iter().map(|n| n.wait_serving(timeout, is_member))).await?;
    loop {
        let modes = modes(nodes).await;
        let leaders = modes
            .iter()
            .filter(|m| **m == Some(ServerMode::Leader))
            .count();
        if leaders == 1 && modes.iter().all(|m| m.is_some_and(is_member)) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            let log_tail = nodes
                .iter()
                .zip(&modes)
                .filter(|(_, m)| !m.is_some_and(is_member))
                .map(|(n, _)| format!("--- {}:\n{}", n.connect_string(), n.log_tail()))
                .collect::<Vec<_>>()
                .join("\n");
            return Err(HarnessError::StartTimeout {
                what: format!("ensemble of {} (modes {modes:?})", nodes.len()),
                log_tail,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Each node's mode, `None` where it does not answer.
async fn modes(nodes: &[ServerNode]) -> Vec<Option<ServerMode>> {
    join_all(nodes.iter().map(|n| async move {
        process::four_letter_word(n.connect_string(), "srvr", FLW_TIMEOUT)
            .await
            .ok()
            .map(|s| process::parse_mode(&s))
    }))
    .await
}

/// A ZooKeeper ensemble for tests: N servers on loopback, each with its own client, peer and
/// election ports and data directory.
///
/// Servers are numbered from 0 here (their `myid` is index + 1). Every JVM has the same
/// sidecar protection as a [`super::TestingServer`]; dropping the cluster kills all of them and
/// removes the directory.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use zookeeper_recipes::testing::TestingCluster;
///
/// let cluster = TestingCluster::start(3).await?;
/// let leader = cluster.wait_for_leader(Duration::from_secs(10)).await?;
/// cluster.kill_server(leader).await?;
/// let next = cluster.wait_for_leader(Duration::from_secs(10)).await?;
/// assert_ne!(leader, next);
/// cluster.restart_server(leader).await?; // rejoins as a follower
/// # Ok(())
/// # }
/// ```
///
/// # Curator
///
/// `org.apache.curator.test.TestingCluster` with `killServer` / `restartServer`; Curator finds
/// servers by `InstanceSpec`, this harness by index.
pub struct TestingCluster {
    // Field order: the nodes (their JVMs) go before the directory they use.
    nodes: Vec<ServerNode>,
    connect_string: String,
    start_timeout: Duration,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for TestingCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestingCluster")
            .field("connect_string", &self.connect_string)
            .finish()
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

    fn node(&self, index: usize) -> Result<&ServerNode> {
        self.nodes.get(index).ok_or(HarnessError::NoSuchServer {
            index,
            len: self.nodes.len(),
        })
    }

    /// Every server's client address, comma-joined: the connect string for clients.
    pub fn connect_string(&self) -> &str {
        &self.connect_string
    }

    /// How many servers the ensemble has.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the ensemble has no servers (never true: a cluster has at least one).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Server `index`'s client address alone, `127.0.0.1:PORT`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`] for an index out of range.
    pub fn server_connect_string(&self, index: usize) -> Result<&str> {
        Ok(self.node(index)?.connect_string())
    }

    /// Server `index`'s JVM pid while it runs.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`] for an index out of range.
    pub fn server_pid(&self, index: usize) -> Result<Option<u32>> {
        Ok(self.node(index)?.pid())
    }

    /// Whether server `index`'s process runs (a paused one runs).
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`] for an index out of range.
    pub fn is_running(&self, index: usize) -> Result<bool> {
        Ok(self.node(index)?.is_running())
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
        self.node(index)?.kill().await
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
        self.node(index)?.stop().await
    }

    /// Starts server `index` again with the same ports and data (stopping it first if it runs)
    /// and waits until it is a leader or follower. That needs a quorum: restarting one server
    /// of a 3-server ensemble whose other two are down waits out the start timeout.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`]; [`HarnessError::StartTimeout`] or
    /// [`HarnessError::ServerExited`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the server stopped or starting (never two JVMs).
    pub async fn restart_server(&self, index: usize) -> Result<()> {
        self.node(index)?
            .restart(self.start_timeout, is_member)
            .await
            .map(drop)
    }

    /// Freezes server `index` with `SIGSTOP`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`]; [`HarnessError::NotRunning`] when it is stopped.
    pub fn pause_server(&self, index: usize) -> Result<()> {
        self.node(index)?.signal(Signal::SIGSTOP)
    }

    /// Unfreezes server `index` with `SIGCONT`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoSuchServer`]; [`HarnessError::NotRunning`] when it is stopped.
    pub fn resume_server(&self, index: usize) -> Result<()> {
        self.node(index)?.signal(Signal::SIGCONT)
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
        let node = self.node(index)?;
        process::four_letter_word(node.connect_string(), cmd, FLW_TIMEOUT).await
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
        Ok(modes(&self.nodes)
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
                    what: "no server of the ensemble became leader".to_owned(),
                    timeout,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
