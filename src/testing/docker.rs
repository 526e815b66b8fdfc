//! The docker backend of [`super::TestingServer`] (`ZKR_TEST_BACKEND=docker`): the
//! `zookeeper:3.9` image through testcontainers.
//!
//! The client port is mapped to a fixed host port chosen when the container is created, so it
//! stays the same across `docker stop` / `docker start` (an ephemeral mapping would move). The
//! container is bound to the tokio runtime that started it (testcontainers' Docker client), and
//! testcontainers removes it when the server is dropped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use testcontainers::core::IntoContainerPort;
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use super::config::Settings;
use super::process;
use super::{HarnessError, Result};

const IMAGE: &str = "zookeeper";
const TAG: &str = "3.9";
const CLIENT_PORT: u16 = 2181;
/// Seconds Docker waits after SIGTERM before SIGKILL on a graceful stop.
const STOP_GRACE_SECONDS: i32 = 10;
/// Probe bound (as the process backend's).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

fn docker(context: &str) -> impl FnOnce(testcontainers::TestcontainersError) -> HarnessError {
    let context = context.to_owned();
    move |source| HarnessError::Docker { context, source }
}

pub(crate) struct DockerServer {
    container: ContainerAsync<GenericImage>,
    address: SocketAddr,
    connect_string: String,
    start_timeout: Duration,
    running: AtomicBool,
    lifecycle: tokio::sync::Mutex<()>,
}

impl DockerServer {
    pub(crate) async fn start(settings: &Settings) -> Result<DockerServer> {
        let tick = settings.tick_ms()?;
        let (min, max) = settings.session_ms()?;
        let host_port = process::free_ports(1)?
            .first()
            .copied()
            .ok_or(HarnessError::Unsupported("no free port"))?;
        let container = GenericImage::new(IMAGE, TAG)
            .with_exposed_port(CLIENT_PORT.tcp())
            .with_env_var("ZOO_4LW_COMMANDS_WHITELIST", "*")
            .with_env_var("ZOO_TICK_TIME", tick.to_string())
            .with_env_var("ZOO_MAX_CLIENT_CNXNS", "0")
            .with_env_var("ZOO_ADMINSERVER_ENABLED", "false")
            .with_env_var(
                "ZOO_CFG_EXTRA",
                format!("minSessionTimeout={min} maxSessionTimeout={max}"),
            )
            .with_env_var(
                "JVMFLAGS",
                "-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dznode.container.checkIntervalMs=500",
            )
            .with_mapped_port(host_port, CLIENT_PORT.tcp())
            .start()
            .await
            .map_err(docker("starting a zookeeper:3.9 container"))?;
        let host = container
            .get_host()
            .await
            .map_err(docker("reading the container's host"))?
            .to_string();
        let connect_string = format!("{host}:{host_port}");
        let address = tokio::net::lookup_host(connect_string.as_str())
            .await
            .map_err(HarnessError::io(format!("resolving {connect_string}")))?
            .find(SocketAddr::is_ipv4)
            .ok_or_else(|| HarnessError::Io {
                context: format!("resolving {connect_string}"),
                source: std::io::Error::other("no IPv4 address"),
            })?;
        let server = DockerServer {
            container,
            address,
            connect_string,
            start_timeout: settings.start_timeout,
            running: AtomicBool::new(true),
            lifecycle: tokio::sync::Mutex::new(()),
        };
        server.wait_serving().await?;
        Ok(server)
    }

    pub(crate) fn connect_string(&self) -> &str {
        &self.connect_string
    }

    pub(crate) fn address(&self) -> SocketAddr {
        self.address
    }

    pub(crate) fn is_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    async fn wait_serving(&self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + self.start_timeout;
        loop {
            if let Ok(srvr) =
                process::four_letter_word(&self.connect_string, "srvr", PROBE_TIMEOUT).await
                && process::parse_mode(&srvr).is_serving()
            {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                let log = self
                    .container
                    .stdout_to_vec()
                    .await
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                return Err(HarnessError::StartTimeout {
                    what: format!("zookeeper:3.9 container ({})", self.connect_string),
                    log_tail: lines[lines.len().saturating_sub(40)..].join("\n"),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn stop_with(&self, grace_seconds: i32) -> Result<()> {
        self.running.store(false, Ordering::SeqCst);
        self.container
            .stop_with_timeout(Some(grace_seconds))
            .await
            .map_err(docker("stopping the container"))
    }

    pub(crate) async fn stop(&self) -> Result<()> {
        let _guard = self.lifecycle.lock().await;
        if !self.is_running() {
            return Ok(());
        }
        self.stop_with(STOP_GRACE_SECONDS).await
    }

    /// Docker's stop with no grace period: SIGTERM and SIGKILL at once.
    pub(crate) async fn kill(&self) -> Result<()> {
        let _guard = self.lifecycle.lock().await;
        if !self.is_running() {
            return Ok(());
        }
        self.stop_with(0).await
    }

    pub(crate) async fn restart(&self) -> Result<()> {
        let _guard = self.lifecycle.lock().await;
        if self.is_running() {
            self.stop_with(STOP_GRACE_SECONDS).await?;
        }
        self.container
            .start()
            .await
            .map_err(docker("starting the container again"))?;
        self.running.store(true, Ordering::SeqCst);
        // The host port is a fixed mapping, so it is the same after the restart.
        self.wait_serving().await
    }
}
