//! The docker backend of [`super::TestingServer`] and [`super::TestingCluster`]: ZooKeeper
//! servers as containers (testcontainers), of the image `ZKR_ZOOKEEPER_IMAGE` (default
//! `zookeeper:3.9`, the official image; CI uses `zookeeper-recipes/zookeeper:3.8`, built from
//! Debian's packages by `docker/zookeeper/build.sh`, whose entrypoint honours the same
//! environment).
//!
//! - The client port is mapped to a fixed host port chosen when the container is created, so
//!   it stays the same across `docker stop` / `docker start` (an ephemeral mapping would move).
//! - `kill` is `docker kill` (`SIGKILL`), `pause` is `docker pause` (the cgroup freezer: the
//!   whole container freezes, as a frozen VM would).
//! - A cluster's servers share a private Docker network of their own and reach each other by
//!   container name on it. Partitions are `iptables` rules in the *containers'* network
//!   namespaces (entered with `nsenter` from the host, so the image needs no iptables and no
//!   `NET_ADMIN`): a cut direction `a -> b` is a `DROP` in `b`'s `INPUT` of what comes from
//!   `a`'s address on that network, so the bytes vanish silently as with the process backend's
//!   proxies, while clients (who come through the published port, from the network's gateway)
//!   still reach every server. The rules are rewritten on every change and after every restart
//!   (a restarted container has a new network namespace, perhaps a new address). This needs
//!   root on the host; elsewhere the partition operations return
//!   [`HarnessError::Unsupported`].
//! - A server's configuration is written once, by the image's entrypoint at the container's
//!   first start (it writes `$ZOO_CONF_DIR/zoo.cfg` from the environment only when there is
//!   none), and a restarted container keeps it. Session-timeout limits changed with
//!   `TestingCluster::set_session_timeouts` are therefore written into that file by the
//!   server's next restart, between the container's stop and its start (`docker cp` out, the
//!   two lines rewritten, `docker cp` in: `docker cp` works on a stopped container).
//! - Nothing leaks: a sidecar `sh` per server or cluster blocks on a pipe that only this
//!   process holds, and when it closes (the server is dropped, or this process dies however it
//!   dies) it runs `docker rm -f -v` on the containers and removes the network.
//!
//! Containers are bound to the tokio runtime that started them (testcontainers' Docker
//! client): stop, kill and restart them from that runtime. The synchronous operations (pause,
//! partitions, pid) use the `docker` command line and work from anywhere.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::try_join_all;
use testcontainers::core::IntoContainerPort;
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use super::config::{ServerMode, SessionLimits, Settings};
use super::server_process::{self as process, lock};
use super::{HarnessError, Result};

/// The image when `ZKR_ZOOKEEPER_IMAGE` is not set: the official one on Docker Hub.
pub(crate) const DEFAULT_IMAGE: &str = "zookeeper:3.9";
const CLIENT_PORT: u16 = 2181;
const QUORUM_PORT: u16 = 2888;
const ELECTION_PORT: u16 = 3888;
/// Seconds Docker waits after SIGTERM before SIGKILL on a graceful stop.
const STOP_GRACE_SECONDS: i32 = 10;
/// How long a killed container may take to be gone.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);
/// Probe bound (as the process backend's).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
const POLL: Duration = Duration::from_millis(50);
/// The server's JVM as the process backend runs it (small heap, fast start, containers checked
/// every 500 ms).
const JVMFLAGS: &str = "-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData \
     -Djava.net.preferIPv4Stack=true -Dznode.container.checkIntervalMs=500";
/// The iptables chain the harness owns in each container's network namespace.
const CHAIN: &str = "ZKR-PEERS";

/// The image the harness runs: `ZKR_ZOOKEEPER_IMAGE`, else [`DEFAULT_IMAGE`].
pub(crate) fn image_reference() -> String {
    std::env::var("ZKR_ZOOKEEPER_IMAGE")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_IMAGE.to_owned())
}

/// Whether a Docker engine answers and has the image, or pulls it now (bounded by 5 min).
pub(crate) fn image_available() -> bool {
    let image = image_reference();
    if docker_cli(&["version", "--format", "{{.Server.Version}}"]).is_err() {
        return false;
    }
    if docker_cli(&["image", "inspect", "--format", "{{.Id}}", &image]).is_ok() {
        return true;
    }
    super::provision::say(format_args!(
        "zookeeper-recipes test harness: pulling {image}"
    ));
    let Ok(mut child) = Command::new("docker")
        .args(["pull", "--quiet", &image])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        return false;
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

/// `name:tag` split at the tag's colon (not a registry's port), tag `latest` when none.
fn split_reference(reference: &str) -> (String, String) {
    match reference.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name.to_owned(), tag.to_owned()),
        _ => (reference.to_owned(), "latest".to_owned()),
    }
}

fn docker_error(context: &str) -> impl FnOnce(testcontainers::TestcontainersError) -> HarnessError {
    let context = context.to_owned();
    move |source| HarnessError::Docker { context, source }
}

/// Runs the `docker` command line and returns its stdout.
pub(crate) fn docker_cli(args: &[&str]) -> Result<String> {
    let context = format!("docker {}", args.join(" "));
    let out = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(HarnessError::io(context.clone()))?;
    cli_output(context, out)
}

/// A finished `docker` command's trimmed stdout, or its stderr as the error.
fn cli_output(context: String, out: std::process::Output) -> Result<String> {
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(HarnessError::Io {
            context,
            source: std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
        })
    }
}

/// As [`docker_cli`], without blocking the runtime.
async fn docker_cli_async(args: &[&str]) -> Result<String> {
    let context = format!("docker {}", args.join(" "));
    let out = tokio::process::Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(HarnessError::io(context.clone()))?;
    cli_output(context, out)
}

/// A fresh name for containers and networks: `zkr-<8 hex digits>`.
fn fresh_name() -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("zkr-{}", &id[..8])
}

/// `sh` that waits for EOF on its stdin (this process closed it, or died), then removes the
/// containers (with their anonymous volumes) and the network. Spawned before the containers
/// are created, with the names they will have, so a crash in between leaks nothing either.
struct Reaper {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
}

const REAPER_SCRIPT: &str = r#"trap '' INT HUP TERM QUIT; read -r _; net=$1; shift; docker rm -f -v "$@" >/dev/null 2>&1; [ -z "$net" ] || docker network rm "$net" >/dev/null 2>&1; exit 0"#;

impl Reaper {
    fn spawn(network: Option<&str>, containers: &[String]) -> Result<Reaper> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(REAPER_SCRIPT)
            .arg("sh")
            .arg(network.unwrap_or(""))
            .args(containers)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(HarnessError::io(
                "starting the sidecar `sh` that removes the containers if this process dies",
            ))?;
        let stdin = child.stdin.take();
        Ok(Reaper {
            child: Some(child),
            stdin,
        })
    }
}

impl Drop for Reaper {
    /// Closes the pipe: the sidecar removes the containers now. Drop must not block, so a
    /// thread of its own waits for (and reaps) the sidecar.
    fn drop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"\n");
        }
        if let Some(mut child) = self.child.take() {
            let _ = std::thread::Builder::new()
                .name("zkr-docker-reaper".to_owned())
                .spawn(move || child.wait());
        }
    }
}

/// What one container is started with.
struct NodeSpec {
    name: String,
    network: Option<String>,
    env: Vec<(&'static str, String)>,
}

/// One server container.
struct Node {
    name: String,
    container: ContainerAsync<GenericImage>,
    address: SocketAddr,
    connect_string: String,
    running: AtomicBool,
    lifecycle: tokio::sync::Mutex<()>,
    /// Session-timeout limits that the next restart writes into the container's `zoo.cfg`.
    pending_session_limits: Mutex<Option<SessionLimits>>,
}

impl Node {
    async fn start(spec: NodeSpec) -> Result<Node> {
        let reference = image_reference();
        let (name, tag) = split_reference(&reference);
        let host_port = process::free_ports(1)?
            .first()
            .copied()
            .ok_or(HarnessError::Unsupported("no free port"))?;
        let mut request = GenericImage::new(name, tag)
            .with_exposed_port(CLIENT_PORT.tcp())
            .with_container_name(spec.name.clone())
            .with_mapped_port(host_port, CLIENT_PORT.tcp());
        if let Some(network) = &spec.network {
            request = request.with_network(network.clone());
        }
        for (key, value) in spec.env {
            request = request.with_env_var(key, value);
        }
        let container = request.start().await.map_err(docker_error(&format!(
            "starting a container of {reference} (build it with docker/zookeeper/build.sh, or \
             `docker pull` it, or set ZKR_ZOOKEEPER_IMAGE)"
        )))?;
        let connect_string = format!("127.0.0.1:{host_port}");
        let address = SocketAddr::from(([127, 0, 0, 1], host_port));
        Ok(Node {
            name: spec.name,
            container,
            address,
            connect_string,
            running: AtomicBool::new(true),
            lifecycle: tokio::sync::Mutex::new(()),
            pending_session_limits: Mutex::new(None),
        })
    }

    fn is_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    /// The container's last log lines (stdout and stderr: the server logs to stderr).
    fn log_tail(&self) -> String {
        match Command::new("docker")
            .args(["logs", "--tail", "40", &self.name])
            .stdin(Stdio::null())
            .output()
        {
            Ok(out) => format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => format!("(docker logs failed: {e})"),
        }
    }

    /// Waits until the server's mode satisfies `accept`; an exited container fails at once.
    async fn wait_serving(&self, timeout: Duration, accept: fn(ServerMode) -> bool) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut polls = 0_u32;
        loop {
            if let Ok(srvr) =
                process::four_letter_word(&self.connect_string, "srvr", PROBE_TIMEOUT).await
                && accept(process::parse_mode(&srvr))
            {
                return Ok(());
            }
            polls += 1;
            if polls.is_multiple_of(20) && !self.container.is_running().await.unwrap_or(true) {
                let status = self
                    .container
                    .exit_code()
                    .await
                    .ok()
                    .flatten()
                    .map_or_else(|| "exited".to_owned(), |c| format!("exit code {c}"));
                return Err(HarnessError::ServerExited {
                    what: format!("container {} ({})", self.name, image_reference()),
                    status,
                    log_tail: self.log_tail(),
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(HarnessError::StartTimeout {
                    what: format!(
                        "container {} ({}, {})",
                        self.name,
                        image_reference(),
                        self.connect_string
                    ),
                    log_tail: self.log_tail(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn stop(&self) -> Result<()> {
        let _guard = self.lifecycle.lock().await;
        if !self.is_running() {
            return Ok(());
        }
        self.running.store(false, Ordering::SeqCst);
        self.container
            .stop_with_timeout(Some(STOP_GRACE_SECONDS))
            .await
            .map_err(docker_error("stopping the container"))
    }

    /// `docker kill` (`SIGKILL` to every process of the container), then waits until it is gone.
    async fn kill(&self) -> Result<()> {
        let _guard = self.lifecycle.lock().await;
        if !self.is_running() {
            return Ok(());
        }
        self.running.store(false, Ordering::SeqCst);
        // A paused container takes SIGKILL too (the kernel thaws it to die).
        docker_cli_async(&["kill", &self.name]).await?;
        match tokio::time::timeout(KILL_TIMEOUT, docker_cli_async(&["wait", &self.name])).await {
            Ok(r) => r.map(drop),
            Err(_) => Err(HarnessError::Timeout {
                what: format!("container {} to exit after docker kill", self.name),
                timeout: KILL_TIMEOUT,
            }),
        }
    }

    async fn restart(&self, timeout: Duration, accept: fn(ServerMode) -> bool) -> Result<()> {
        {
            let _guard = self.lifecycle.lock().await;
            if self.is_running() {
                // A paused container cannot be stopped gracefully: thaw it first.
                let _ = docker_cli_async(&["unpause", &self.name]).await;
                self.running.store(false, Ordering::SeqCst);
                self.container
                    .stop_with_timeout(Some(STOP_GRACE_SECONDS))
                    .await
                    .map_err(docker_error("stopping the container"))?;
            }
            // Taken only once written: after a failed rewrite the next restart tries again.
            let pending = *lock(&self.pending_session_limits);
            if let Some(limits) = pending {
                self.write_session_limits(limits).await?;
                let mut slot = lock(&self.pending_session_limits);
                if *slot == pending {
                    *slot = None;
                }
            }
            self.container
                .start()
                .await
                .map_err(docker_error("starting the container again"))?;
            self.running.store(true, Ordering::SeqCst);
        }
        // The host port is a fixed mapping, so it is the same after the restart.
        self.wait_serving(timeout, accept).await
    }

    /// Rewrites the `minSessionTimeout` and `maxSessionTimeout` lines of the stopped
    /// container's `zoo.cfg`, keeping every other line: `docker cp` out, edit, `docker cp` in
    /// (both work on a stopped container, where `docker exec` does not). The entrypoint writes
    /// `zoo.cfg` only when there is none, so the next start reads this file; it runs as root
    /// and hands the configuration directory to the server's user, and the copy is
    /// world-readable for images whose entrypoint does not.
    async fn write_session_limits(&self, limits: SessionLimits) -> Result<()> {
        let config = format!("{}/zoo.cfg", self.conf_dir().await?);
        let scratch = tempfile::Builder::new()
            .prefix("zkr-zoo-cfg-")
            .tempdir()
            .map_err(HarnessError::io(
                "creating a directory for a container's zoo.cfg",
            ))?;
        let local = scratch.path().join("zoo.cfg");
        let local_arg = local.to_string_lossy().into_owned();
        let remote = format!("{}:{config}", self.name);
        docker_cli_async(&["cp", &remote, &local_arg]).await?;
        let old = std::fs::read_to_string(&local).map_err(HarnessError::io(format!(
            "reading {config} of {}",
            self.name
        )))?;
        std::fs::write(&local, limits.apply_to(&old)).map_err(HarnessError::io(format!(
            "rewriting {config} of {}",
            self.name
        )))?;
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o644))
                .map_err(HarnessError::io("making a container's zoo.cfg readable"))?;
        }
        docker_cli_async(&["cp", &local_arg, &remote]).await?;
        let (min, max) = limits.durations();
        tracing::debug!(container = %self.name, ?min, ?max, "session-timeout limits written into zoo.cfg");
        Ok(())
    }

    /// The container's `ZOO_CONF_DIR` (the official image's and ours are `/conf`).
    async fn conf_dir(&self) -> Result<String> {
        let env = docker_cli_async(&[
            "inspect",
            "-f",
            "{{range .Config.Env}}{{println .}}{{end}}",
            &self.name,
        ])
        .await?;
        Ok(env
            .lines()
            .find_map(|l| l.strip_prefix("ZOO_CONF_DIR="))
            .map(|d| d.trim_end_matches('/'))
            .filter(|d| !d.is_empty())
            .unwrap_or("/conf")
            .to_owned())
    }

    fn pause(&self) -> Result<()> {
        if !self.is_running() {
            return Err(HarnessError::NotRunning(self.name.clone()));
        }
        docker_cli(&["pause", &self.name]).map(drop)
    }

    fn resume(&self) -> Result<()> {
        if !self.is_running() {
            return Err(HarnessError::NotRunning(self.name.clone()));
        }
        docker_cli(&["unpause", &self.name]).map(drop)
    }

    /// The host pid of the container's main process (the JVM: the entrypoint execs it).
    fn pid(&self) -> Option<u32> {
        if !self.is_running() {
            return None;
        }
        docker_cli(&["inspect", "-f", "{{.State.Pid}}", &self.name])
            .ok()
            .and_then(|p| p.parse::<u32>().ok())
            .filter(|p| *p != 0)
    }

    /// The container's address on `network`.
    fn ip(&self, network: &str) -> Option<String> {
        let format = format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}");
        docker_cli(&["inspect", "-f", &format, &self.name])
            .ok()
            .filter(|ip| !ip.is_empty())
    }
}

/// Env entries every harness server has: the process backend's `zoo.cfg`, in the official
/// image's variables, with this server's session-timeout limits.
fn common_env(
    settings: &Settings,
    session_limits: SessionLimits,
    extra_cfg: &[String],
) -> Result<Vec<(&'static str, String)>> {
    let tick = settings.tick_ms()?;
    let mut cfg = vec![session_limits.min_line(), session_limits.max_line()];
    cfg.extend(extra_cfg.iter().cloned());
    Ok(vec![
        ("ZOO_TICK_TIME", tick.to_string()),
        ("ZOO_4LW_COMMANDS_WHITELIST", "*".to_owned()),
        ("ZOO_MAX_CLIENT_CNXNS", "0".to_owned()),
        ("ZOO_ADMINSERVER_ENABLED", "false".to_owned()),
        ("ZOO_CFG_EXTRA", cfg.join(" ")),
    ])
}

/// A standalone server in a container.
pub(crate) struct DockerServer {
    // Field order: the container handle goes before the reaper that removes it.
    node: Node,
    start_timeout: Duration,
    _reaper: Reaper,
}

impl DockerServer {
    pub(crate) async fn start(settings: &Settings) -> Result<DockerServer> {
        let name = fresh_name();
        let reaper = Reaper::spawn(None, std::slice::from_ref(&name))?;
        let mut env = common_env(settings, settings.session_limits()?, &[])?;
        env.push(("JVMFLAGS", JVMFLAGS.to_owned()));
        let node = Node::start(NodeSpec {
            name,
            network: None,
            env,
        })
        .await?;
        node.wait_serving(settings.start_timeout, ServerMode::is_serving)
            .await?;
        Ok(DockerServer {
            node,
            start_timeout: settings.start_timeout,
            _reaper: reaper,
        })
    }

    pub(crate) fn connect_string(&self) -> &str {
        &self.node.connect_string
    }

    pub(crate) fn address(&self) -> SocketAddr {
        self.node.address
    }

    pub(crate) fn is_running(&self) -> bool {
        self.node.is_running()
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.node.pid()
    }

    pub(crate) async fn stop(&self) -> Result<()> {
        self.node.stop().await
    }

    pub(crate) async fn kill(&self) -> Result<()> {
        self.node.kill().await
    }

    pub(crate) async fn restart(&self) -> Result<()> {
        self.node
            .restart(self.start_timeout, ServerMode::is_serving)
            .await
    }

    pub(crate) fn pause(&self) -> Result<()> {
        self.node.pause()
    }

    pub(crate) fn resume(&self) -> Result<()> {
        self.node.resume()
    }
}

/// What a cluster is started with (see `TestingClusterBuilder`).
pub(crate) struct ClusterSpec<'a> {
    pub(crate) servers: usize,
    pub(crate) settings: &'a Settings,
    /// Each server's session-timeout limits, by index.
    pub(crate) session_limits: &'a [SessionLimits],
    pub(crate) init_limit: u32,
    pub(crate) sync_limit: u32,
    pub(crate) read_only_mode: bool,
    pub(crate) snapshot_sync_only: bool,
}

/// An ensemble of containers on a private network.
pub(crate) struct DockerCluster {
    // Field order: the container handles go before the reaper that removes them.
    nodes: Vec<Node>,
    network: String,
    /// Directed pairs `(from, to)` whose bytes are dropped.
    cut: Mutex<BTreeSet<(usize, usize)>>,
    _reaper: Reaper,
}

impl DockerCluster {
    /// Starts every container at once; the caller waits for the quorum.
    pub(crate) async fn start(spec: ClusterSpec<'_>) -> Result<DockerCluster> {
        let n = spec.servers;
        let network = fresh_name();
        let names: Vec<String> = (1..=n).map(|i| format!("{network}-zk{i}")).collect();
        let reaper = Reaper::spawn(Some(&network), &names)?;
        let servers = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                format!(
                    "server.{}={name}:{QUORUM_PORT}:{ELECTION_PORT};{CLIENT_PORT}",
                    i + 1
                )
            })
            .collect::<Vec<_>>()
            .join(" ");
        // Peers bind their quorum and election ports on every address: a server's own name
        // may not resolve yet when it starts.
        let extra_cfg = ["quorumListenOnAllIPs=true".to_owned()];
        let common_limits = spec.settings.session_limits()?;
        let node_env = |i: usize| -> Result<Vec<(&'static str, String)>> {
            let limits = spec.session_limits.get(i).copied().unwrap_or(common_limits);
            let mut env = common_env(spec.settings, limits, &extra_cfg)?;
            env.push(("ZOO_MY_ID", (i + 1).to_string()));
            Ok(env)
        };
        // What every server of the ensemble has beyond `node_env`.
        let mut shared_env = vec![
            ("ZOO_INIT_LIMIT", spec.init_limit.to_string()),
            ("ZOO_SYNC_LIMIT", spec.sync_limit.to_string()),
            ("ZOO_SERVERS", servers),
        ];
        if n == 1 {
            // A one-server "ensemble" is a quorum of one (Mode: leader), as on the process backend.
            shared_env.push(("ZOO_STANDALONE_ENABLED", "false".to_owned()));
        }
        let mut jvm = JVMFLAGS.to_owned();
        if spec.read_only_mode {
            jvm.push_str(" -Dreadonlymode.enabled=true");
        }
        if spec.snapshot_sync_only {
            jvm.push_str(" -Dzookeeper.forceSnapshotSync=true");
        }
        shared_env.push(("JVMFLAGS", jvm));
        // Created one after another (the first creates the network), started at once.
        let mut nodes = Vec::with_capacity(n);
        if let Some(first) = names.first() {
            let mut env = node_env(0)?;
            env.extend(shared_env.iter().cloned());
            nodes.push(
                Node::start(NodeSpec {
                    name: first.clone(),
                    network: Some(network.clone()),
                    env,
                })
                .await?,
            );
        }
        let specs = names
            .iter()
            .enumerate()
            .skip(1)
            .map(|(i, name)| {
                let mut env = node_env(i)?;
                env.extend(shared_env.iter().cloned());
                Ok(NodeSpec {
                    name: name.clone(),
                    network: Some(network.clone()),
                    env,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let rest = try_join_all(specs.into_iter().map(Node::start)).await?;
        nodes.extend(rest);
        Ok(DockerCluster {
            nodes,
            network,
            cut: Mutex::new(BTreeSet::new()),
            _reaper: reaper,
        })
    }

    fn node(&self, index: usize) -> Result<&Node> {
        self.nodes.get(index).ok_or(HarnessError::NoSuchServer {
            index,
            len: self.nodes.len(),
        })
    }

    pub(crate) fn connect_strings(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| n.connect_string.clone())
            .collect()
    }

    pub(crate) fn log_tail(&self, index: usize) -> String {
        self.nodes
            .get(index)
            .map(Node::log_tail)
            .unwrap_or_default()
    }

    pub(crate) fn is_running(&self, index: usize) -> Result<bool> {
        Ok(self.node(index)?.is_running())
    }

    pub(crate) fn pid(&self, index: usize) -> Result<Option<u32>> {
        Ok(self.node(index)?.pid())
    }

    pub(crate) async fn kill(&self, index: usize) -> Result<()> {
        self.node(index)?.kill().await
    }

    pub(crate) async fn stop(&self, index: usize) -> Result<()> {
        self.node(index)?.stop().await
    }

    pub(crate) async fn restart(
        &self,
        index: usize,
        timeout: Duration,
        accept: fn(ServerMode) -> bool,
    ) -> Result<()> {
        let node = self.node(index)?;
        let restarted = node.restart(timeout, accept).await;
        // A restarted container has a fresh network namespace (and perhaps a new address):
        // the cuts in force are written again everywhere, whether or not it came up.
        if !lock(&self.cut).is_empty() {
            self.apply_cuts()?;
        }
        restarted
    }

    /// Keeps server `index`'s new session-timeout limits for its next restart, which writes
    /// them into the container's `zoo.cfg` between its stop and its start.
    pub(crate) fn set_session_limits(&self, index: usize, limits: SessionLimits) -> Result<()> {
        *lock(&self.node(index)?.pending_session_limits) = Some(limits);
        Ok(())
    }

    pub(crate) fn pause(&self, index: usize) -> Result<()> {
        self.node(index)?.pause()
    }

    pub(crate) fn resume(&self, index: usize) -> Result<()> {
        self.node(index)?.resume()
    }

    /// Adds directed cuts and rewrites every container's rules.
    pub(crate) fn cut(&self, pairs: &[(usize, usize)]) -> Result<()> {
        for (from, to) in pairs {
            self.node(*from)?;
            self.node(*to)?;
        }
        lock(&self.cut).extend(pairs.iter().copied());
        self.apply_cuts()
    }

    pub(crate) fn heal(&self) -> Result<()> {
        let was_cut = {
            let mut cut = lock(&self.cut);
            let was = !cut.is_empty();
            cut.clear();
            was
        };
        if was_cut { self.apply_cuts() } else { Ok(()) }
    }

    /// Writes each running container's `ZKR-PEERS` chain: a `DROP` of what comes from each
    /// peer whose direction to it is cut.
    fn apply_cuts(&self) -> Result<()> {
        let cut = lock(&self.cut).clone();
        let ips: Vec<Option<String>> = self
            .nodes
            .iter()
            .map(|n| n.ip(&self.network).filter(|_| n.is_running()))
            .collect();
        for (to, node) in self.nodes.iter().enumerate() {
            let Some(pid) = node.pid() else { continue };
            let mut script = format!(
                "iptables -w -N {CHAIN} 2>/dev/null || true; \
                 iptables -w -C INPUT -j {CHAIN} 2>/dev/null || iptables -w -I INPUT -j {CHAIN}; \
                 iptables -w -F {CHAIN}"
            );
            for (from, _) in cut.iter().filter(|(_, t)| *t == to) {
                if let Some(Some(ip)) = ips.get(*from) {
                    script.push_str(&format!("; iptables -w -A {CHAIN} -s {ip} -j DROP"));
                }
            }
            let out = Command::new("nsenter")
                .args(["-t", &pid.to_string(), "-n", "sh", "-ec", &script])
                .stdin(Stdio::null())
                .output()
                .map_err(HarnessError::io(
                    "running nsenter (package util-linux) for iptables in a container",
                ))?;
            if !out.status.success() {
                return Err(HarnessError::Io {
                    context: format!(
                        "writing the peer rules of container {} (partitions on the docker \
                         backend need root on the host, for nsenter and iptables)",
                        node.name
                    ),
                    source: std::io::Error::other(
                        String::from_utf8_lossy(&out.stderr).trim().to_owned(),
                    ),
                });
            }
        }
        tracing::debug!(?cut, "peer cuts written into the containers");
        Ok(())
    }

    /// Established TCP connections that server `from` opened to `to`'s quorum or election
    /// port, from `/proc/<pid>/net/tcp` of `from`'s network namespace.
    pub(crate) fn peer_connections(&self, from: usize, to: usize) -> Result<usize> {
        let from_node = self.node(from)?;
        let to_node = self.node(to)?;
        let (Some(pid), Some(ip)) = (from_node.pid(), to_node.ip(&self.network)) else {
            return Ok(0);
        };
        let Ok(ip) = ip.parse::<std::net::Ipv4Addr>() else {
            return Ok(0);
        };
        // /proc shows an IPv4 address as the hex of its in-memory (network order) u32.
        let hex_ip = format!("{:08X}", u32::from_ne_bytes(ip.octets()));
        let remotes = [QUORUM_PORT, ELECTION_PORT].map(|p| format!("{hex_ip}:{p:04X}"));
        let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp"))
            .map_err(HarnessError::io(format!("reading /proc/{pid}/net/tcp")))?;
        Ok(table
            .lines()
            .skip(1)
            .filter(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.get(3) == Some(&"01")
                    && cols
                        .get(2)
                        .is_some_and(|r| remotes.contains(&(*r).to_owned()))
            })
            .count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references_split_at_the_tag() {
        assert_eq!(
            split_reference("zookeeper:3.9"),
            ("zookeeper".to_owned(), "3.9".to_owned())
        );
        assert_eq!(
            split_reference("zookeeper-recipes/zookeeper:3.8"),
            ("zookeeper-recipes/zookeeper".to_owned(), "3.8".to_owned())
        );
        assert_eq!(
            split_reference("registry:5000/zookeeper"),
            ("registry:5000/zookeeper".to_owned(), "latest".to_owned())
        );
    }
}
