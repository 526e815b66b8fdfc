//! The one place that starts, signals and reaps ZooKeeper JVMs (shared by the server and the
//! cluster), with the sidecar that kills a JVM when this process dies.
//!
//! Processes are `std::process` children, not tokio ones: they belong to no runtime, so a server
//! in a `static` can be used from every test's runtime. Waits poll `try_wait` on a short
//! `tokio::time::sleep`.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::config::ServerMode;
use super::{HarnessError, Installation, Result, server_logs_wanted};

/// The JVM's main class: it runs standalone or as a quorum peer depending on the config.
const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";
/// How long a graceful stop may take before the harness uses `SIGKILL`.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a killed process may take to be reaped.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on one four-letter-word exchange.
pub(crate) const FLW_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one readiness probe (a paused or overloaded server must not stall the loop).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long `SIGSTOP` may take to stop every thread of a JVM (a thread in uninterruptible disk
/// I/O stops only when the I/O ends).
const STOP_WAIT: Duration = Duration::from_secs(5);
/// Poll interval of every wait.
const POLL: Duration = Duration::from_millis(20);
/// How many log lines an error carries.
const LOG_TAIL_LINES: usize = 40;

/// Locks a std mutex, ignoring poisoning (the data is a process handle: still valid).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Every port [`free_ports`] and [`reserve_ports`] handed out in this process.
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// Free loopback ports, all distinct, and distinct from every port this process handed out
/// before (a bound-then-released port can be handed out again by the kernel).
///
/// Nothing holds them once this returns: a server that binds one later may find it taken by
/// anything that asked the kernel for a port meanwhile. For ports a server binds only now and
/// then (a quorum port), use [`reserve_ports`].
pub(crate) fn free_ports(n: usize) -> Result<Vec<u16>> {
    let mut handed_out = lock(&HANDED_OUT);
    let handed_out = handed_out.get_or_insert_with(HashSet::new);
    let mut listeners = Vec::with_capacity(n);
    let mut ports = Vec::with_capacity(n);
    // Listeners stay bound until all ports are chosen, so the kernel cannot repeat one.
    for _ in 0..n.saturating_mul(4).max(8) {
        if ports.len() == n {
            break;
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(HarnessError::io("binding a free loopback port"))?;
        let port = listener
            .local_addr()
            .map_err(HarnessError::io("reading a bound port"))?
            .port();
        if handed_out.insert(port) {
            ports.push(port);
        }
        listeners.push(listener);
    }
    if ports.len() < n {
        return Err(HarnessError::Io {
            context: "finding free loopback ports".to_owned(),
            source: used_ports(),
        });
    }
    Ok(ports)
}

fn used_ports() -> std::io::Error {
    std::io::Error::other("the kernel kept handing out used ports")
}

/// A loopback port held for a server for as long as this lives: a socket bound to it with
/// `SO_REUSEADDR`, never listening.
///
/// ZooKeeper binds each of its ports with `SO_REUSEADDR` too, and Linux lets it bind and listen
/// next to a bound socket that does not listen; but the kernel hands the port to nobody else
/// meanwhile: not to a `bind` to port 0 (a [`super::FaultProxy`] listener, [`free_ports`],
/// another process's), and not as the source port of an outgoing connection. That matters for
/// a server's quorum port, which only the quorum leader listens on: a server that follows
/// leaves it unbound for as long as it follows, and whoever got it meanwhile would answer for
/// that server once it is elected (see [`super::TestingCluster`]). It also keeps every port of
/// a server that restarts.
#[derive(Debug)]
pub(crate) struct ReservedPort {
    port: u16,
    _socket: tokio::net::TcpSocket,
}

impl ReservedPort {
    pub(crate) fn port(&self) -> u16 {
        self.port
    }
}

/// `n` loopback ports, held ([`ReservedPort`]) and distinct from every port this process
/// handed out before.
pub(crate) fn reserve_ports(n: usize) -> Result<Vec<ReservedPort>> {
    let mut handed_out = lock(&HANDED_OUT);
    let handed_out = handed_out.get_or_insert_with(HashSet::new);
    let mut reserved = Vec::with_capacity(n);
    // Ports handed out before stay bound until all are chosen, so the kernel moves past them.
    let mut passed = Vec::new();
    for _ in 0..n.saturating_mul(4).max(8) {
        if reserved.len() == n {
            break;
        }
        let socket = tokio::net::TcpSocket::new_v4()
            .and_then(|s| s.set_reuseaddr(true).map(|()| s))
            .and_then(|s| s.bind((Ipv4Addr::LOCALHOST, 0).into()).map(|()| s))
            .map_err(HarnessError::io("reserving a loopback port"))?;
        let port = socket
            .local_addr()
            .map_err(HarnessError::io("reading a reserved port"))?
            .port();
        if handed_out.insert(port) {
            reserved.push(ReservedPort {
                port,
                _socket: socket,
            });
        } else {
            passed.push(socket);
        }
    }
    if reserved.len() < n {
        return Err(HarnessError::Io {
            context: "reserving loopback ports".to_owned(),
            source: used_ports(),
        });
    }
    Ok(reserved)
}

/// Sends a four-letter word to `address` and reads the answer to EOF, bounded by `timeout`.
pub(crate) async fn four_letter_word(
    address: &str,
    cmd: &str,
    timeout: Duration,
) -> Result<String> {
    four_letter_word_over(address, None, cmd, timeout).await
}

/// The TLS client of a harness probe: what it presents and accepts.
pub(crate) type ProbeTls = Arc<rustls::ClientConfig>;

/// [`four_letter_word`] over TLS when `tls` is given (a TLS-only port: ZooKeeper answers the
/// words inside the TLS session, as it answers requests).
pub(crate) async fn four_letter_word_over(
    address: &str,
    tls: Option<&ProbeTls>,
    cmd: &str,
    timeout: Duration,
) -> Result<String> {
    if cmd.len() != 4 || !cmd.bytes().all(|b| b.is_ascii_lowercase()) {
        return Err(HarnessError::InvalidArgument {
            what: "four-letter word",
            reason: format!("{cmd:?} is not four lowercase ASCII letters"),
        });
    }
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(address).await?;
        match tls {
            None => exchange_word(stream, cmd).await,
            Some(config) => {
                let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
                let name = rustls::pki_types::ServerName::try_from(host.to_owned())
                    .map_err(std::io::Error::other)?;
                let stream = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, stream)
                    .await?;
                exchange_word(stream, cmd).await
            }
        }
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(out)) => Ok(String::from_utf8_lossy(&out).into_owned()),
        Ok(Err(source)) => Err(HarnessError::Io {
            context: format!(
                "four-letter word {cmd} to {address}{}",
                if tls.is_some() { " over TLS" } else { "" }
            ),
            source,
        }),
        Err(_) => Err(HarnessError::Timeout {
            what: format!("four-letter word {cmd} to {address} got no answer"),
            timeout,
        }),
    }
}

/// Writes the word and reads the answer until the server closes. ZooKeeper closes a TLS
/// connection after a word without a `close_notify`: an unexpected EOF ends the answer too.
async fn exchange_word<S>(mut stream: S, cmd: &str) -> std::io::Result<Vec<u8>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    stream.write_all(cmd.as_bytes()).await?;
    stream.flush().await?;
    let mut out = Vec::new();
    match stream.read_to_end(&mut out).await {
        Ok(_) => Ok(out),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(out),
        Err(e) => Err(e),
    }
}

/// Parses the `Mode:` line of a `srvr` answer; `NotServing` when there is none.
pub(crate) fn parse_mode(srvr: &str) -> ServerMode {
    srvr.lines()
        .find_map(|l| l.strip_prefix("Mode:"))
        .map_or(ServerMode::NotServing, |m| ServerMode::parse(m.trim()))
}

/// The last lines of a log file from byte `offset` on (empty when there is none).
pub(crate) fn log_tail(path: &Path, offset: u64) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        let mut bytes = Vec::new();
        if f.seek(SeekFrom::Start(offset)).is_ok() && f.read_to_end(&mut bytes).is_ok() {
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
    }
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
    if tail.is_empty() && !server_logs_wanted() {
        "(no log: set ZKR_TEST_ZK_LOG=1 to keep server logs)".to_owned()
    } else {
        tail
    }
}

/// Sends `sig` to a child that has not been reaped (so its pid cannot have been recycled).
fn send(pid: u32, sig: Signal) -> Result<()> {
    let raw = i32::try_from(pid).map_err(|_| HarnessError::InvalidArgument {
        what: "pid",
        reason: format!("{pid} does not fit a pid_t"),
    })?;
    signal::kill(Pid::from_raw(raw), sig).map_err(|e| HarnessError::Io {
        context: format!("sending {sig} to {pid}"),
        source: e.into(),
    })
}

/// The state letter of process `pid` as `ps` shows it (`R`, `S`, `D`, `T`, `Z`...), from
/// `/proc/PID/stat`; `None` when there is no such process (or no `/proc`).
pub fn process_state(pid: u32) -> Option<char> {
    thread_state(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Whether every thread of `pid` is stopped (`T`), traced (`t`) or gone (`Z`, `X`, or its
/// directory vanished between listing and reading).
fn all_threads_stopped(pid: u32) -> std::io::Result<bool> {
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let stat = match std::fs::read_to_string(entry?.path().join("stat")) {
            Ok(stat) => stat,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if !matches!(thread_state(&stat), Some('T' | 't' | 'Z' | 'X')) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The state letter of a `/proc/.../stat` line: the first field after the command name, which
/// is in parentheses and may itself hold spaces and parentheses.
fn thread_state(stat: &str) -> Option<char> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.trim_start().chars().next()
}

/// Blocks until a `SIGKILL`ed child is reaped, bounded.
fn reap_blocking(child: &mut Child) {
    let deadline = Instant::now() + KILL_TIMEOUT;
    while Instant::now() < deadline {
        match child.try_wait() {
            Ok(None) => std::thread::sleep(Duration::from_millis(1)),
            Ok(Some(_)) | Err(_) => return,
        }
    }
}

/// `sh` that waits for EOF on its stdin, then kills the JVM and removes the directory.
///
/// Only this process holds the pipe's write end (std creates pipes close-on-exec), so EOF comes
/// exactly when this process dies, however it dies. `trap` keeps a terminal's Ctrl-C (sent to the
/// whole process group) from killing the sidecar before it has done its job.
struct Sidecar {
    child: Child,
}

const SIDECAR_SCRIPT: &str =
    r#"trap '' INT HUP TERM QUIT; read -r _; kill -9 "$1" 2>/dev/null; rm -rf "$2""#;

impl Sidecar {
    fn spawn(jvm_pid: u32, cleanup_dir: &Path) -> std::io::Result<Sidecar> {
        let child = Command::new("sh")
            .arg("-c")
            .arg(SIDECAR_SCRIPT)
            .arg("sh")
            .arg(jvm_pid.to_string())
            .arg(cleanup_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(Sidecar { child })
    }
}

impl Drop for Sidecar {
    /// Disarms the sidecar: `SIGKILL` and reap it *before* its pipe closes (the `stdin` field is
    /// dropped after this body), so it never acts on a JVM the harness has already reaped.
    fn drop(&mut self) {
        let _ = self.child.kill();
        reap_blocking(&mut self.child);
    }
}

/// One running (or exited but not yet forgotten) JVM.
pub(crate) struct JvmProcess {
    // Field order: the sidecar is disarmed (dropped) only after `Drop` has killed the JVM.
    child: Child,
    sidecar: Option<Sidecar>,
    exited: Option<ExitStatus>,
    /// Where this run's output starts in the log file.
    log_offset: u64,
}

impl JvmProcess {
    fn spawn(
        install: &Installation,
        jvm_flags: &[String],
        config: &Path,
        log: &Path,
        workdir: &Path,
        cleanup_dir: &Path,
    ) -> Result<JvmProcess> {
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(HarnessError::io(format!("opening {}", log.display())))?;
        let log_offset = out.metadata().map(|m| m.len()).unwrap_or(0);
        let err = out
            .try_clone()
            .map_err(HarnessError::io("duplicating the log file handle"))?;
        let mut cmd = Command::new(&install.java);
        cmd.args([
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:-UsePerfData",
            "-Djava.net.preferIPv4Stack=true",
            "-Dzookeeper.admin.enableServer=false",
            "-Dznode.container.checkIntervalMs=500",
        ]);
        if server_logs_wanted() {
            cmd.arg("-Dorg.slf4j.simpleLogger.showDateTime=true");
        }
        cmd.args(jvm_flags);
        cmd.arg("-cp")
            .arg(&install.classpath)
            .arg(MAIN_CLASS)
            .arg(config)
            .current_dir(workdir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let mut child = cmd.spawn().map_err(HarnessError::io(format!(
            "starting {}",
            install.java.display()
        )))?;
        let sidecar = match Sidecar::spawn(child.id(), cleanup_dir) {
            Ok(s) => s,
            Err(source) => {
                let _ = child.kill();
                reap_blocking(&mut child);
                return Err(HarnessError::Io {
                    context: "starting the sidecar `sh` that kills the server if this process dies"
                        .to_owned(),
                    source,
                });
            }
        };
        Ok(JvmProcess {
            child,
            sidecar: Some(sidecar),
            exited: None,
            log_offset,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the JVM has exited (reaping it), `None` while it runs.
    fn poll_exit(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            match self.child.try_wait() {
                Ok(Some(status)) => self.exited = Some(status),
                Ok(None) => {}
                // ECHILD: nothing to wait for any more; treat as gone.
                Err(_) => {
                    self.exited = Some(std::os::unix::process::ExitStatusExt::from_raw(0));
                }
            }
        }
        self.exited
    }

    /// Sends `sig`. For `SIGSTOP` it returns only once every thread of the JVM is stopped:
    /// `kill` only queues the signal, and a thread that is on a CPU (or in the kernel) when it is
    /// sent can still answer a request that arrives a moment later. CI saw exactly that on a
    /// loaded machine (`pause_stalls_requests_until_resume`: a request sent after `pause()`
    /// returned was answered).
    fn signal(&mut self, sig: Signal) -> Result<()> {
        if self.poll_exit().is_some() {
            return Err(HarnessError::NotRunning(format!("JVM {}", self.pid())));
        }
        send(self.pid(), sig)?;
        if sig == Signal::SIGSTOP {
            self.wait_stopped()?;
        }
        Ok(())
    }

    /// Blocks (polling `/proc/PID/task/*/stat`, usually for well under a millisecond) until no
    /// thread of the JVM can run, at most [`STOP_WAIT`].
    fn wait_stopped(&mut self) -> Result<()> {
        let pid = self.pid();
        let deadline = Instant::now() + STOP_WAIT;
        loop {
            if self.poll_exit().is_some() {
                return Err(HarnessError::NotRunning(format!("JVM {pid}")));
            }
            match all_threads_stopped(pid) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(source) => {
                    return Err(HarnessError::Io {
                        context: format!("reading the thread states of JVM {pid}"),
                        source,
                    });
                }
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout {
                    what: format!("every thread of JVM {pid} to stop after SIGSTOP"),
                    timeout: STOP_WAIT,
                });
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Waits (polling) until the JVM has exited, at most `timeout`.
    async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.poll_exit() {
                return Some(status);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// `SIGKILL` and reap.
    async fn kill(mut self) -> Result<()> {
        self.sidecar.take();
        if self.poll_exit().is_none() {
            let _ = self.child.kill();
        }
        match self.wait_exit(KILL_TIMEOUT).await {
            Some(_) => Ok(()),
            None => Err(HarnessError::Timeout {
                what: format!("killed JVM {} did not exit", self.pid()),
                timeout: KILL_TIMEOUT,
            }),
        }
    }

    /// `SIGTERM` (and `SIGCONT`, in case it is paused), wait, then `SIGKILL` if it lingers.
    async fn terminate(mut self) -> Result<()> {
        self.sidecar.take();
        if self.poll_exit().is_none() {
            send(self.pid(), Signal::SIGTERM)?;
            let _ = send(self.pid(), Signal::SIGCONT);
            if self.wait_exit(STOP_TIMEOUT).await.is_some() {
                return Ok(());
            }
            tracing::warn!(
                pid = self.pid(),
                "ZooKeeper ignored SIGTERM; sending SIGKILL"
            );
        }
        self.kill().await
    }
}

impl Drop for JvmProcess {
    fn drop(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            reap_blocking(&mut self.child);
        }
        // `sidecar` is dropped (disarmed) after this, once the JVM is reaped.
    }
}

/// Files and settings of one server, fixed for its life; the process comes and goes.
pub(crate) struct ServerNode {
    name: String,
    install: Installation,
    config: PathBuf,
    log: PathBuf,
    workdir: PathBuf,
    data_dir: PathBuf,
    /// What the sidecar removes if this process dies (the server's or the cluster's directory).
    cleanup_dir: PathBuf,
    jvm_flags: Vec<String>,
    address: SocketAddr,
    /// `address` as `host:port`, where the probes go.
    probe_address: String,
    probe_tls: Option<ProbeTls>,
    connect_string: String,
    /// Serialises start/stop/kill/restart (held across awaits).
    lifecycle: tokio::sync::Mutex<()>,
    /// The process; locked only briefly, never across an await.
    process: Mutex<Option<JvmProcess>>,
}

/// The parts of a [`ServerNode`] that are not the process.
pub(crate) struct NodeFiles {
    pub(crate) name: String,
    pub(crate) config: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) workdir: PathBuf,
    pub(crate) data_dir: PathBuf,
    pub(crate) cleanup_dir: PathBuf,
    pub(crate) client_port: u16,
    /// Java system properties beyond the harness's own (`-Dkey=value`).
    pub(crate) jvm_flags: Vec<String>,
    /// For a TLS-only server: the TLS client of the harness's probes. The connect string is
    /// then `tcp+tls://127.0.0.1:PORT`.
    pub(crate) probe_tls: Option<ProbeTls>,
}

impl ServerNode {
    pub(crate) fn new(install: Installation, files: NodeFiles) -> ServerNode {
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, files.client_port));
        ServerNode {
            name: files.name,
            install,
            config: files.config,
            log: files.log,
            workdir: files.workdir,
            data_dir: files.data_dir,
            cleanup_dir: files.cleanup_dir,
            jvm_flags: files.jvm_flags,
            address,
            probe_address: address.to_string(),
            connect_string: match files.probe_tls {
                Some(_) => format!("tcp+tls://{address}"),
                None => address.to_string(),
            },
            probe_tls: files.probe_tls,
            lifecycle: tokio::sync::Mutex::new(()),
            process: Mutex::new(None),
        }
    }

    pub(crate) fn address(&self) -> SocketAddr {
        self.address
    }

    pub(crate) fn connect_string(&self) -> &str {
        &self.connect_string
    }

    /// Sends a four-letter word to this server (over TLS for a TLS-only one).
    pub(crate) async fn four_letter_word(&self, cmd: &str, timeout: Duration) -> Result<String> {
        four_letter_word_over(&self.probe_address, self.probe_tls.as_ref(), cmd, timeout).await
    }

    pub(crate) fn log_path(&self) -> &Path {
        &self.log
    }

    pub(crate) fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Starts the JVM (the caller holds `lifecycle` or owns the node exclusively).
    pub(crate) fn spawn(&self) -> Result<()> {
        drop_torn_logs(&self.data_dir.join("version-2"));
        let process = JvmProcess::spawn(
            &self.install,
            &self.jvm_flags,
            &self.config,
            &self.log,
            &self.workdir,
            &self.cleanup_dir,
        )?;
        tracing::debug!(server = %self.name, pid = process.pid(), port = self.address.port(), "started ZooKeeper");
        // Replacing an old (exited) process drops it, which reaps it and disarms its sidecar.
        *lock(&self.process) = Some(process);
        Ok(())
    }

    /// This server's `zoo.cfg`.
    #[cfg(test)]
    pub(crate) fn config_path(&self) -> &Path {
        &self.config
    }

    /// Rewrites this server's `zoo.cfg` through `edit`, for its next start (the JVM reads the
    /// file only when it starts). The new text goes to a file beside it that is then renamed
    /// over it, so a JVM starting meanwhile reads the old file or the new one, never half.
    pub(crate) fn edit_config(&self, edit: impl FnOnce(&str) -> String) -> Result<()> {
        let old = std::fs::read_to_string(&self.config).map_err(HarnessError::io(format!(
            "reading {}",
            self.config.display()
        )))?;
        let mut staged = self.config.clone().into_os_string();
        staged.push(".next");
        let staged = PathBuf::from(staged);
        std::fs::write(&staged, edit(&old))
            .map_err(HarnessError::io(format!("writing {}", staged.display())))?;
        std::fs::rename(&staged, &self.config).map_err(HarnessError::io(format!(
            "replacing {}",
            self.config.display()
        )))
    }

    /// The last lines this run of the server wrote to its log.
    pub(crate) fn log_tail(&self) -> String {
        let offset = lock(&self.process).as_ref().map_or(0, |p| p.log_offset);
        log_tail(&self.log, offset)
    }

    /// `Some(status)` once the current process has exited, `None` while it runs; `Err` when
    /// there is no process at all.
    fn exit_status(&self) -> Result<Option<ExitStatus>> {
        match lock(&self.process).as_mut() {
            Some(p) => Ok(p.poll_exit()),
            None => Err(HarnessError::NotRunning(self.name.clone())),
        }
    }

    /// Whether the log of this run says the port was taken.
    pub(crate) fn bind_failed(&self) -> bool {
        self.log_tail().contains("Address already in use")
    }

    /// Waits until the server answers `srvr` with a `Mode:` that `accept` takes, and `conf`
    /// confirms it is this server (not another one that got the port), at most `timeout`.
    pub(crate) async fn wait_serving(
        &self,
        timeout: Duration,
        accept: impl Fn(ServerMode) -> bool,
    ) -> Result<ServerMode> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut identity_checked = false;
        loop {
            if let Some(status) = self.exit_status()? {
                return Err(HarnessError::ServerExited {
                    what: self.name.clone(),
                    status: status.to_string(),
                    log_tail: self.log_tail(),
                });
            }
            if let Ok(srvr) = self.four_letter_word("srvr", PROBE_TIMEOUT).await {
                let mode = parse_mode(&srvr);
                if mode != ServerMode::NotServing {
                    if !identity_checked {
                        identity_checked = self.is_mine().await?;
                    }
                    if identity_checked && accept(mode) {
                        return Ok(mode);
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(HarnessError::StartTimeout {
                    what: format!("{} ({})", self.name, self.connect_string),
                    log_tail: self.log_tail(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Whether the server on our port runs with our data directory.
    async fn is_mine(&self) -> Result<bool> {
        let Ok(conf) = self.four_letter_word("conf", PROBE_TIMEOUT).await else {
            return Ok(false);
        };
        let ours = self.data_dir.to_string_lossy();
        let found = conf
            .lines()
            .filter_map(|l| l.strip_prefix("dataDir="))
            .any(|d| d.starts_with(ours.as_ref()));
        if !found && conf.contains("dataDir=") {
            // Someone else serves on our port: our JVM will fail to bind and exit.
            tracing::warn!(server = %self.name, port = self.address.port(), "another server answers on this port");
        }
        Ok(found)
    }

    pub(crate) fn is_running(&self) -> bool {
        matches!(self.exit_status(), Ok(None))
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        let mut process = lock(&self.process);
        let p = process.as_mut()?;
        p.poll_exit().is_none().then(|| p.pid())
    }

    pub(crate) fn signal(&self, sig: Signal) -> Result<()> {
        match lock(&self.process).as_mut() {
            Some(p) => p.signal(sig),
            None => Err(HarnessError::NotRunning(self.name.clone())),
        }
    }

    /// Gracefully stops the process (no-op when there is none).
    pub(crate) async fn stop(&self) -> Result<()> {
        let _guard = self.lifecycle.lock().await;
        self.stop_locked().await
    }

    async fn stop_locked(&self) -> Result<()> {
        // Taken out first: if this future is dropped mid-way, the JvmProcess's Drop kills it.
        let process = lock(&self.process).take();
        match process {
            Some(p) => p.terminate().await,
            None => Ok(()),
        }
    }

    /// `SIGKILL`s the process (no-op when there is none).
    pub(crate) async fn kill(&self) -> Result<()> {
        let _guard = self.lifecycle.lock().await;
        let process = lock(&self.process).take();
        match process {
            Some(p) => p.kill().await,
            None => Ok(()),
        }
    }

    /// Stops the process if it runs, starts it again on the same port and data, and waits until
    /// it serves in a mode `accept` takes.
    pub(crate) async fn restart(
        &self,
        timeout: Duration,
        accept: impl Fn(ServerMode) -> bool,
    ) -> Result<ServerMode> {
        let _guard = self.lifecycle.lock().await;
        self.stop_locked().await?;
        self.spawn()?;
        self.wait_serving(timeout, accept).await
    }

    /// Kills the process now, without waiting asynchronously (for `Drop` and failed starts).
    pub(crate) fn kill_now(&self) {
        lock(&self.process).take();
    }
}

/// The size of a transaction log's file header (magic, version, database id).
const TXN_LOG_HEADER: u64 = 16;

/// Deletes the transaction logs in `dir` too short to hold their header: a server killed while
/// it opened a new log leaves one, and ZooKeeper 3.8.0 then refuses to start (`EOFException` in
/// `FileHeader.deserialize`, ZOOKEEPER-1621). Such a file holds no transaction, so deleting it
/// loses nothing; it is what an operator does by hand.
fn drop_torn_logs(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let torn = entry.file_name().to_string_lossy().starts_with("log.")
            && entry.metadata().is_ok_and(|m| m.len() < TXN_LOG_HEADER);
        if torn && std::fs::remove_file(entry.path()).is_ok() {
            tracing::info!(file = %entry.path().display(), "deleted a transaction log without its header (a server killed as it opened it; ZOOKEEPER-1621)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transaction_logs_shorter_than_their_header_are_deleted() {
        let dir = std::env::temp_dir().join(format!("zkr-torn-logs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("log.8"), [0u8; 5]).unwrap();
        std::fs::write(dir.join("log.1"), [0u8; 64]).unwrap();
        std::fs::write(dir.join("snapshot.7"), [0u8; 5]).unwrap();
        drop_torn_logs(&dir);
        assert!(!dir.join("log.8").exists(), "a torn log is deleted");
        assert!(dir.join("log.1").exists(), "a log with its header stays");
        assert!(dir.join("snapshot.7").exists(), "snapshots are not logs");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn mode_is_parsed_from_srvr() {
        let srvr = "Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0.0/0\nMode: follower\nNode count: 5\n";
        assert_eq!(parse_mode(srvr), ServerMode::Follower);
        assert_eq!(
            parse_mode("This ZooKeeper instance is not currently serving requests\n"),
            ServerMode::NotServing
        );
        assert_eq!(parse_mode("Mode: standalone\n"), ServerMode::Standalone);
        assert_eq!(parse_mode("Mode: leader\n"), ServerMode::Leader);
    }

    #[test]
    fn thread_state_is_read_after_the_last_parenthesis() {
        assert_eq!(thread_state("42 (java) S 1 42 42 0"), Some('S'));
        assert_eq!(thread_state("43 (VM Thread) T 1 42"), Some('T'));
        assert_eq!(thread_state("44 (a) b) (c)) t 1"), Some('t'));
        assert_eq!(thread_state("45 (no end"), None);
    }

    #[test]
    fn a_stopped_child_counts_as_stopped_and_a_running_one_does_not() {
        let mut child = Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        let waited = (|| {
            send(pid, Signal::SIGSTOP)?;
            let deadline = Instant::now() + STOP_WAIT;
            while !all_threads_stopped(pid).map_err(HarnessError::io("proc"))? {
                if Instant::now() >= deadline {
                    return Err(HarnessError::Timeout {
                        what: "sleep to stop".to_owned(),
                        timeout: STOP_WAIT,
                    });
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            send(pid, Signal::SIGCONT)?;
            let deadline = Instant::now() + STOP_WAIT;
            while all_threads_stopped(pid).map_err(HarnessError::io("proc"))? {
                if Instant::now() >= deadline {
                    return Err(HarnessError::Timeout {
                        what: "sleep to run again".to_owned(),
                        timeout: STOP_WAIT,
                    });
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        })();
        let _ = child.kill();
        let _ = child.wait();
        waited.expect("stop state");
    }

    #[test]
    fn free_ports_are_distinct() {
        let a = free_ports(6).expect("ports");
        let b = free_ports(6).expect("ports");
        let all: HashSet<u16> = a.iter().chain(&b).copied().collect();
        assert_eq!(all.len(), 12);
    }

    /// What a cluster relies on: a reserved port is handed to nobody who asks the kernel for a
    /// port (bind to port 0, the source port of a connect), refused to a plain bind, and yet a
    /// server that binds it as ZooKeeper does (`SO_REUSEADDR`) listens on it, again and again.
    #[test]
    fn a_reserved_port_is_held_from_others_but_not_from_its_server() {
        let reserved = reserve_ports(64).expect("reserved ports");
        let held: HashSet<u16> = reserved.iter().map(ReservedPort::port).collect();
        assert_eq!(held.len(), 64);
        assert!(
            free_ports(6)
                .expect("ports")
                .iter()
                .all(|p| !held.contains(p))
        );
        // About 14,000 candidates for a bind to port 0: with 64 of them free, 2000 binds would
        // hit one about nine times over.
        for _ in 0..2000 {
            let any = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind port 0");
            let port = any.local_addr().expect("address").port();
            assert!(
                !held.contains(&port),
                "bind(0) was handed reserved port {port}"
            );
        }
        let sink = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("listener");
        for _ in 0..200 {
            let out =
                std::net::TcpStream::connect(sink.local_addr().expect("address")).expect("connect");
            let port = out.local_addr().expect("address").port();
            assert!(!held.contains(&port), "a connect got reserved port {port}");
            // Accepted, so that the backlog never fills.
            let _ = sink.accept().expect("accept");
        }

        let port = reserved[0].port();
        let plain = tokio::net::TcpSocket::new_v4().expect("socket");
        let err = plain
            .bind((Ipv4Addr::LOCALHOST, port).into())
            .expect_err("a plain bind of a reserved port");
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
        assert!(
            std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err(),
            "nothing listens on a reserved port by itself"
        );
        for _ in 0..2 {
            // std's listener sets SO_REUSEADDR, as ZooKeeper does for each of its ports.
            let server = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("the server binds");
            let _client =
                std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).expect("connect");
            server.accept().expect("the server accepts");
        }
    }

    #[tokio::test]
    async fn four_letter_words_are_validated() {
        for bad in ["ruo", "ruokk", "RUOK", "ru k"] {
            assert!(matches!(
                four_letter_word("127.0.0.1:1", bad, FLW_TIMEOUT).await,
                Err(HarnessError::InvalidArgument { .. })
            ));
        }
    }
}
