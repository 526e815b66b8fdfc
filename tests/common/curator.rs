//! Drives a real Apache Curator participant from Rust integration tests.
//!
//! `tests/java/CuratorPeer.java` is compiled once per test binary ([`compiled_peer`]) and run as a
//! long-lived JVM per [`CuratorPeer`]. The peer speaks a line protocol on stdin/stdout: every
//! command gets exactly one reply line, `ok <cmd> ...` or `err <cmd> <message>`, and things that
//! happen on their own (leadership gained or lost, lock acquired, connection states) arrive as
//! `event ... ts=<epoch millis>` lines. See the class comment of `CuratorPeer.java` for the
//! command list.
//!
//! Tests call [`require_java`] first: without a JDK or the Curator jars the test is skipped
//! locally, but fails when `CI=true`.

// Shared by several test binaries, each of which uses only part of it.
#![allow(dead_code, unreachable_pub)]

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How to get what the Curator interop tests need on Debian or Ubuntu.
pub const INSTALL_HINT: &str =
    "sudo apt-get install -y libcurator-recipes-java default-jdk-headless";

/// The jars a Curator client needs, one per line (`#` starts a comment), shared with
/// `bench/compare.sh`.
const JAR_LIST: &str = include_str!("../java/curator-jars.txt");

/// The jar file names of [`JAR_LIST`].
fn jars() -> impl Iterator<Item = &'static str> {
    JAR_LIST
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// Bound on one command's reply (`mutex_try` timeouts must stay well below it).
const CMD_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on JVM start + connect, up to the `ready` line.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on a clean `quit` before the peer is killed instead.
const QUIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the jars live: `$CURATOR_JAR_DIR`, else `/usr/share/java`.
fn jar_dir() -> PathBuf {
    std::env::var_os("CURATOR_JAR_DIR")
        .map_or_else(|| PathBuf::from("/usr/share/java"), PathBuf::from)
}

/// `$JAVA_HOME/bin/<tool>` if it exists, else `<tool>` found on `PATH`.
fn find_tool(tool: &str) -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        let p = Path::new(&home).join("bin").join(tool);
        if p.is_file() {
            return Some(p);
        }
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Checks for `java`, `javac` and the Curator jars, installing Debian's packages once when
/// they are missing and the harness may (see `zookeeper_recipes::testing::provision`); the
/// error says what is missing and how to install it.
pub fn java_available() -> Result<(), String> {
    static INSTALLED: OnceLock<Result<bool, String>> = OnceLock::new();
    let installed = INSTALLED.get_or_init(|| {
        zookeeper_recipes::testing::provision::install_debian_packages(
            &["libcurator-recipes-java", "default-jdk-headless"],
            "the Curator interop tests need a JDK and Apache Curator's jars, and they are missing",
            || java_missing().err(),
        )
        .map_err(|e| e.to_string())
    });
    if let Err(e) = installed {
        return Err(format!("installing the JDK and Curator failed: {e}"));
    }
    java_missing()
}

fn java_missing() -> Result<(), String> {
    let mut missing: Vec<String> = ["java", "javac"]
        .into_iter()
        .filter(|t| find_tool(t).is_none())
        .map(|t| format!("`{t}` (neither in $JAVA_HOME/bin nor on PATH)"))
        .collect();
    let dir = jar_dir();
    missing.extend(
        jars()
            .map(|j| dir.join(j))
            .filter(|p| !p.is_file())
            .map(|p| p.display().to_string()),
    );
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the Curator interop tests need a JDK and Apache Curator's jars; missing: {}; \
             install them with `{INSTALL_HINT}` (or set JAVA_HOME / CURATOR_JAR_DIR)",
            missing.join(", ")
        ))
    }
}

/// True when Java and Curator are there. Otherwise the test should return early: this prints a
/// skip note, or panics when `CI=true` (CI must fail, not silently skip).
pub fn require_java() -> bool {
    match java_available() {
        Ok(()) => true,
        Err(msg) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("{msg} (CI=true: the Curator interop tests must run, not skip)")
        }
        Err(msg) => {
            eprintln!("skipping Curator interop test: {msg}");
            false
        }
    }
}

/// Directory for compiled classes and peer stderr logs: inside target/ for integration tests.
fn scratch_root() -> PathBuf {
    option_env!("CARGO_TARGET_TMPDIR").map_or_else(std::env::temp_dir, PathBuf::from)
}

/// Removes `curator-peer-<pid>` dirs left by test processes that no longer exist (Linux only).
fn remove_stale_dirs(root: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("curator-peer-")) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn classpath(classes: &Path) -> std::ffi::OsString {
    let dir = jar_dir();
    let parts = std::iter::once(classes.to_path_buf()).chain(jars().map(|j| dir.join(j)));
    std::env::join_paths(parts).expect("classpath")
}

/// Compiles `tests/java/CuratorPeer.java` once per process into a directory kept for the
/// process lifetime, and returns that directory. Panics with javac's output on failure.
pub fn compiled_peer() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Err(msg) = java_available() {
            panic!("{msg}");
        }
        let root = scratch_root();
        remove_stale_dirs(&root);
        let dir = root.join(format!("curator-peer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/java/CuratorPeer.java");
        let out = std::process::Command::new(find_tool("javac").expect("javac"))
            .args(["-encoding", "UTF-8", "-Xlint:all,-path", "-d"])
            .arg(&dir)
            .arg("-cp")
            .arg(classpath(&dir))
            .arg(&src)
            .output()
            .unwrap_or_else(|e| panic!("cannot run javac: {e}"));
        if !out.status.success() {
            panic!(
                "javac {} failed ({}):\n{}{}",
                src.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        dir
    })
}

/// One running Curator JVM with one `CuratorFramework` (one ZooKeeper session).
pub struct CuratorPeer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<String>,
    /// Events not yet returned by `expect_event`.
    queued: VecDeque<String>,
    /// Every event line seen, in arrival order.
    events: Vec<String>,
    /// Replies still due for commands whose `cmd` future was dropped before its reply.
    outstanding: usize,
    session_id: i64,
    pid: u32,
    startup: Duration,
    stderr_path: PathBuf,
}

impl CuratorPeer {
    /// Starts a peer connected to `connect` and waits (up to 30 s) for its `ready` line.
    pub async fn spawn(connect: &str, session_timeout: Duration) -> CuratorPeer {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let dir = compiled_peer();
        let stderr_path = dir.join(format!(
            "peer-{}.stderr",
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let stderr = std::fs::File::create(&stderr_path)
            .unwrap_or_else(|e| panic!("create {}: {e}", stderr_path.display()));
        let started = Instant::now();
        let mut child = Command::new(find_tool("java").expect("java"))
            // C1 only and the serial GC: faster start, fewer threads on small CI machines.
            .args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp"])
            .arg(classpath(dir))
            .arg("CuratorPeer")
            .arg(connect)
            .arg(session_timeout.as_millis().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the Curator peer: {e}"));
        let pid = child.id().expect("pid of a fresh child");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut peer = CuratorPeer {
            stdin: child.stdin.take(),
            child,
            lines,
            queued: VecDeque::new(),
            events: Vec::new(),
            outstanding: 0,
            session_id: 0,
            pid,
            startup: Duration::ZERO,
            stderr_path,
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let line = peer.recv(deadline, "the `ready` line").await;
            if let Some(hex) = line.strip_prefix("ready ") {
                peer.session_id = parse_session_hex(hex);
                break;
            }
            if line.starts_with("event ") {
                peer.record_event(line);
            } else {
                peer.other_line(line);
            }
        }
        peer.startup = started.elapsed();
        peer
    }

    /// Sends one command line and returns its `ok ...` reply; panics on an `err` reply.
    pub async fn cmd(&mut self, line: &str) -> String {
        match self.try_cmd(line).await {
            Ok(reply) => reply,
            Err(reply) => panic!("{}", self.diagnostics(&format!("`{line}` failed: {reply}"))),
        }
    }

    /// Sends one command line; `Ok` with the `ok ...` reply or `Err` with the `err ...` reply.
    /// Events read meanwhile are queued for [`Self::expect_event`].
    pub async fn try_cmd(&mut self, line: &str) -> Result<String, String> {
        assert!(!line.contains('\n'), "one command per line: {line:?}");
        self.outstanding += 1;
        let write = async {
            let stdin = self.stdin.as_mut().ok_or("stdin already closed")?;
            stdin
                .write_all(format!("{line}\n").as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            stdin.flush().await.map_err(|e| e.to_string())
        };
        if let Err(e) = write.await {
            panic!(
                "{}",
                self.diagnostics(&format!("cannot send `{line}` to the Curator peer: {e}"))
            );
        }
        let deadline = Instant::now() + CMD_TIMEOUT;
        let what = format!("the reply to `{line}`");
        loop {
            let got = self.recv(deadline, &what).await;
            if got.starts_with("event ") {
                self.record_event(got);
            } else if got.starts_with("ok ") || got.starts_with("err ") {
                self.outstanding -= 1;
                if self.outstanding == 0 {
                    return if got.starts_with("ok ") {
                        Ok(got)
                    } else {
                        Err(got)
                    };
                }
            } else {
                self.other_line(got);
            }
        }
    }

    /// Returns (and consumes) the first queued or new event line for which `pred` holds; other
    /// events stay queued. Panics after `timeout` naming `what` and listing the events seen.
    pub async fn expect_event(
        &mut self,
        pred: impl Fn(&str) -> bool,
        timeout: Duration,
        what: &str,
    ) -> String {
        if let Some(i) = self.queued.iter().position(|l| pred(l)) {
            return self.queued.remove(i).expect("index from position");
        }
        let deadline = Instant::now() + timeout;
        let what = format!("event `{what}` (waited {timeout:?})");
        loop {
            let got = self.recv(deadline, &what).await;
            if got.starts_with("event ") {
                self.events.push(got.clone());
                if pred(&got) {
                    return got;
                }
                self.queued.push_back(got);
            } else if self.outstanding > 0 && (got.starts_with("ok ") || got.starts_with("err ")) {
                self.outstanding -= 1; // reply to an abandoned command
            } else {
                self.other_line(got);
            }
        }
    }

    /// All event lines seen so far, consumed or not, in arrival order.
    pub fn events(&self) -> &[String] {
        &self.events
    }

    /// The session id printed with `ready` (the first session; `session` gives the current one).
    pub fn session_id(&self) -> i64 {
        self.session_id
    }

    /// The JVM's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Time from spawning the JVM to its `ready` line (connected).
    pub fn startup(&self) -> Duration {
        self.startup
    }

    /// SIGKILLs the JVM and waits for it: its session stays alive on the server until it expires.
    pub async fn kill9(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// Sends `quit` (closes every recipe, then the client) and waits for the exit; kills the
    /// JVM if it takes longer than 10 s.
    pub async fn quit(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"quit\n").await;
            let _ = stdin.flush().await;
        }
        match tokio::time::timeout(QUIT_TIMEOUT, self.child.wait()).await {
            Ok(Ok(status)) if status.success() => {}
            Ok(other) => eprintln!("Curator peer {} ended badly: {other:?}", self.pid),
            Err(_) => {
                eprintln!(
                    "Curator peer {} did not quit within {QUIT_TIMEOUT:?}; killing it",
                    self.pid
                );
                self.kill9().await;
            }
        }
    }

    fn record_event(&mut self, line: String) {
        self.events.push(line.clone());
        self.queued.push_back(line);
    }

    fn other_line(&mut self, line: String) {
        eprintln!("Curator peer {}: unexpected output: {line}", self.pid);
    }

    /// Next raw stdout line; panics if the peer exits or `deadline` passes.
    async fn recv(&mut self, deadline: Instant, what: &str) -> String {
        match tokio::time::timeout_at(deadline, self.lines.recv()).await {
            Ok(Some(line)) => line,
            Ok(None) => panic!(
                "{}",
                self.diagnostics(&format!("the Curator peer exited while waiting for {what}"))
            ),
            Err(_) => panic!(
                "{}",
                self.diagnostics(&format!("timed out waiting for {what}"))
            ),
        }
    }

    /// A panic message: `headline`, the exit status if the JVM is gone, the events seen so far
    /// and the tail of the JVM's stderr.
    fn diagnostics(&mut self, headline: &str) -> String {
        let status = match self.child.try_wait() {
            Ok(Some(status)) => format!("exited: {status}"),
            Ok(None) => "running".to_owned(),
            Err(e) => format!("unknown: {e}"),
        };
        let events = if self.events.is_empty() {
            "(none)".to_owned()
        } else {
            self.events.join("\n  ")
        };
        let stderr = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let lines: Vec<&str> = stderr.lines().collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        format!(
            "Curator peer pid {} ({status}): {headline}\nevents seen:\n  {events}\nstderr tail ({}):\n{tail}",
            self.pid,
            self.stderr_path.display()
        )
    }
}

fn parse_session_hex(hex: &str) -> i64 {
    let digits = hex.trim().trim_start_matches("0x");
    u64::from_str_radix(digits, 16).unwrap_or_else(|e| panic!("bad session id {hex:?}: {e}")) as i64
}

/// The `ts=<millis>` of an event line (the peer's `System.currentTimeMillis()`).
pub fn event_ts(line: &str) -> u64 {
    line.rsplit(' ')
        .next()
        .and_then(|t| t.strip_prefix("ts="))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no ts=<millis> at the end of {line:?}"))
}

/// The `(id, is_leader)` list of an `ok participants [...]` reply, in Curator's order.
pub fn parse_participants(reply: &str) -> Vec<(String, bool)> {
    let start = reply
        .find('[')
        .unwrap_or_else(|| panic!("no participants array in {reply:?}"));
    let value: serde_json::Value = serde_json::from_str(&reply[start..])
        .unwrap_or_else(|e| panic!("bad participants JSON in {reply:?}: {e}"));
    value
        .as_array()
        .unwrap_or_else(|| panic!("participants is not an array: {reply:?}"))
        .iter()
        .map(|p| {
            let id = p["id"]
                .as_str()
                .unwrap_or_else(|| panic!("participant without id: {p}"));
            let leader = p["leader"]
                .as_bool()
                .unwrap_or_else(|| panic!("participant without leader: {p}"));
            (id.to_owned(), leader)
        })
        .collect()
}
