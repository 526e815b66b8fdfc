//! Driving `zkr` as a child process: its JSON event lines as they come, with the instant each
//! was read, its other output kept for failure messages, signals, exit. Shared by the CLI tests
//! and the tests that need a participant in another process (a crash is a `kill -9` of it).

use std::ffi::OsStr;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use zookeeper_recipes::clock::BootTime;
use zookeeper_recipes::testing::FaultProxy;

/// One line zkr wrote, with the instant the test read it.
#[derive(Debug, Clone)]
pub struct Line {
    pub at: Instant,
    pub json: Value,
}

impl Line {
    pub fn event(&self) -> &str {
        self.json["event"].as_str().unwrap_or("")
    }

    pub fn str(&self, key: &str) -> &str {
        self.json[key]
            .as_str()
            .unwrap_or_else(|| panic!("{key} is not a string in {}", self.json))
    }

    pub fn int(&self, key: &str) -> i64 {
        self.json[key]
            .as_i64()
            .unwrap_or_else(|| panic!("{key} is not an integer in {}", self.json))
    }

    /// A `*_boot_ns` field (`boot_ns`: when the line was written) as a [`BootTime`].
    pub fn boot(&self, key: &str) -> BootTime {
        let ns = self.json[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} is not a boot time in {}", self.json));
        BootTime::from_nanos(ns)
    }
}

/// A running zkr: its event lines (stdout for `latch`, stderr for `run`/`lock`) as they come,
/// and the other stream kept for failure messages.
pub struct Zkr {
    pub name: String,
    pub child: Child,
    pub pid: Pid,
    pub events: mpsc::UnboundedReceiver<Line>,
    pub other: Arc<Mutex<Vec<String>>>,
    pub seen: Vec<Line>,
}

/// Which stream carries the events.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum EventsOn {
    Stdout,
    Stderr,
}

pub fn zkr(connect: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zkr"));
    c.arg("--connect")
        .arg(connect)
        // The harness's servers tick every 200 ms: a deployment tells zkr its servers' tick.
        .args(["--server-tick-time", "200ms"])
        .env_remove("ZK_CONNECT")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    c
}

/// Forwards the lines of `pipe`: JSON objects to `events`, anything else to `other`.
pub fn read_lines(
    pipe: impl AsyncRead + Unpin + Send + 'static,
    events: Option<mpsc::UnboundedSender<Line>>,
    other: Arc<Mutex<Vec<String>>>,
) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(pipe).lines();
        while let Ok(Some(text)) = lines.next_line().await {
            let at = Instant::now();
            match (&events, serde_json::from_str::<Value>(&text)) {
                (Some(tx), Ok(json)) if json.get("event").is_some() => {
                    let _ = tx.send(Line { at, json });
                }
                _ => other.lock().unwrap().push(text),
            }
        }
    });
}

impl Zkr {
    pub fn spawn(name: &str, mut cmd: Command, on: EventsOn) -> Zkr {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("zkr did not start");
        let pid = Pid::from_raw(child.id().expect("zkr has a pid") as i32);
        let (tx, events) = mpsc::unbounded_channel();
        let other = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (out_tx, err_tx) = match on {
            EventsOn::Stdout => (Some(tx), None),
            EventsOn::Stderr => (None, Some(tx)),
        };
        read_lines(stdout, out_tx, Arc::clone(&other));
        read_lines(stderr, err_tx, Arc::clone(&other));
        Zkr {
            name: name.to_owned(),
            child,
            pid,
            events,
            other,
            seen: Vec::new(),
        }
    }

    /// `zkr [--session-timeout T] latch PATH --id ID`.
    pub fn latch(connect: &str, path: &str, id: &str, session_timeout: Option<&str>) -> Zkr {
        let mut c = zkr(connect);
        if let Some(t) = session_timeout {
            c.args(["--session-timeout", t]);
        }
        c.args(["latch", path, "--id", id]);
        Zkr::spawn(id, c, EventsOn::Stdout)
    }

    /// `zkr [global...] run|lock ARGS...` with events on stderr; CMD's stdout is discarded.
    pub fn supervisor<S: AsRef<OsStr>>(connect: &str, name: &str, args: &[S]) -> Zkr {
        let mut c = zkr(connect);
        c.args(args);
        Zkr::spawn(name, c, EventsOn::Stderr)
    }

    pub fn context(&self) -> String {
        let seen: Vec<String> = self.seen.iter().map(|l| l.json.to_string()).collect();
        format!(
            "[{}] events so far:\n  {}\nother output:\n  {}",
            self.name,
            seen.join("\n  "),
            self.other.lock().unwrap().join("\n  ")
        )
    }

    /// The next event line, whatever it is.
    pub async fn next(&mut self, within: Duration, what: &str) -> Line {
        match tokio::time::timeout(within, self.events.recv()).await {
            Ok(Some(line)) => {
                self.seen.push(line.clone());
                line
            }
            Ok(None) => panic!("{what}: zkr closed its output first\n{}", self.context()),
            Err(_) => panic!("{what}: nothing within {within:?}\n{}", self.context()),
        }
    }

    /// The next event named `event`, skipping others.
    pub async fn wait_for(&mut self, event: &str, within: Duration, what: &str) -> Line {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let line = self.next(left, what).await;
            if line.event() == event {
                return line;
            }
        }
    }

    /// Every event line that has arrived by now, without waiting.
    pub fn drain(&mut self) -> Vec<Line> {
        let mut out = Vec::new();
        while let Ok(line) = self.events.try_recv() {
            self.seen.push(line.clone());
            out.push(line);
        }
        out
    }

    /// Every event line zkr wrote, once its output has ended (after it exited).
    pub async fn all_lines(&mut self, within: Duration) -> Vec<Line> {
        let deadline = tokio::time::Instant::now() + within;
        while let Ok(Some(line)) = tokio::time::timeout_at(deadline, self.events.recv()).await {
            self.seen.push(line);
        }
        self.seen.clone()
    }

    pub async fn exit(&mut self, within: Duration, what: &str) -> ExitStatus {
        match tokio::time::timeout(within, self.child.wait()).await {
            Ok(status) => status.expect("waiting for zkr failed"),
            Err(_) => panic!(
                "{what}: zkr did not exit within {within:?}\n{}",
                self.context()
            ),
        }
    }

    pub fn signal(&self, signal: Signal) {
        kill(self.pid, signal).expect("zkr can be signalled");
    }
}

/// Kills the recorded CMD process groups when the test ends, however it ends.
#[derive(Default)]
pub struct Groups(Vec<Pid>);

impl Groups {
    /// Records the process group of the CMD a `cmd_started` line names; returns it.
    pub fn add(&mut self, started: &Line) -> Pid {
        let pgid = Pid::from_raw(started.int("pid") as i32);
        self.0.push(pgid);
        pgid
    }
}

impl Drop for Groups {
    fn drop(&mut self) {
        for pgid in &self.0 {
            let _ = nix::sys::signal::killpg(*pgid, Signal::SIGKILL);
        }
    }
}

/// Whether no process of group `pgid` is left.
pub fn group_gone(pgid: Pid) -> bool {
    matches!(
        nix::sys::signal::killpg(pgid, None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// Runs `zkr ARGS` and asserts that clap refused the arguments: exit code 2 and a usage hint.
pub async fn assert_usage_error(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_zkr"))
        .args(args)
        .output()
        .await
        .expect("zkr ran");
    assert_eq!(out.status.code(), Some(2), "zkr {args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Usage:") || err.contains("--help"),
        "zkr {args:?}: {err}"
    );
}

/// A command for `bash -c` that ignores SIGTERM, as do the `sleep`s it forks (a signal ignored
/// across `exec` stays ignored), and appends the wall-clock time (`$EPOCHREALTIME`: seconds
/// with microseconds) to `file` every 50 ms for as long as it runs. Only SIGKILL stops it; the
/// file's last line is the last moment it was seen running ([`last_beat`]).
pub fn stubborn_script(file: &Path) -> String {
    format!(
        "export LC_ALL=C; trap '' TERM; \
         while true; do echo \"$EPOCHREALTIME\" >> '{}'; sleep 0.05; done",
        file.display()
    )
}

/// The last time [`stubborn_script`] wrote to `file`, on boot time (`None` before its first
/// line).
pub fn last_beat(file: &Path) -> Option<BootTime> {
    let text = std::fs::read_to_string(file).ok()?;
    // A line being written may be torn: the last complete one counts.
    let (secs, micros) = text
        .lines()
        .rev()
        .filter_map(|l| l.split_once('.'))
        .find(|(_, micros)| micros.len() == 6)?;
    let wall_ns = secs.parse::<i128>().ok()? * 1_000_000_000 + micros.parse::<i128>().ok()? * 1_000;
    Some(boot_of_wall(wall_ns))
}

/// Boot time minus wall-clock time, sampled once per test binary: converts the wall-clock
/// times a command writes to the boot time of zkr's `*_boot_ns` fields. (Nothing in these
/// tests steps the wall clock.)
fn wall_to_boot_ns() -> i128 {
    static OFFSET: OnceLock<i128> = OnceLock::new();
    *OFFSET.get_or_init(|| {
        let boot = i128::from(BootTime::now().as_nanos());
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("the wall clock is after 1970")
            .as_nanos() as i128;
        boot - wall
    })
}

/// The boot time at wall-clock nanoseconds `wall_ns`.
pub fn boot_of_wall(wall_ns: i128) -> BootTime {
    BootTime::from_nanos(u64::try_from(wall_ns + wall_to_boot_ns()).unwrap_or(0))
}

/// `to - from` in milliseconds, negative when `to` came first.
pub fn boot_ms(from: BootTime, to: BootTime) -> f64 {
    (i128::from(to.as_nanos()) - i128::from(from.as_nanos())) as f64 / 1e6
}

/// Watches a process group from a thread of its own, looking every millisecond, and keeps
/// the boot time at which it first found no process of the group left: the moment a successor
/// may start at the earliest.
pub struct GroupWatch {
    gone: Arc<OnceLock<BootTime>>,
    stop: Arc<AtomicBool>,
}

impl GroupWatch {
    pub fn start(pgid: Pid) -> GroupWatch {
        let gone = Arc::new(OnceLock::new());
        let stop = Arc::new(AtomicBool::new(false));
        let (g, s) = (Arc::clone(&gone), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if group_gone(pgid) {
                    let _ = g.set(BootTime::now());
                    return;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        GroupWatch { gone, stop }
    }

    /// When the group was found gone, if it was.
    pub fn gone_at(&self) -> Option<BootTime> {
        self.gone.get().copied()
    }

    /// Waits at most `bound` for the group to be gone; when it was found gone.
    pub async fn wait(&self, bound: Duration, what: &str) -> BootTime {
        let deadline = Instant::now() + bound;
        loop {
            if let Some(at) = self.gone_at() {
                return at;
            }
            if Instant::now() >= deadline {
                panic!("{what}: the process group is not gone after {bound:?}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for GroupWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// What the handover from a leader whose CMD ignores SIGTERM measured, on boot time.
pub struct Handover {
    /// When the test blackholed A's link.
    pub holed: BootTime,
    /// A's `cmd_signalled` lines: SIGTERM, then SIGKILL.
    pub sigterm: Line,
    pub sigkill: Line,
    /// A's `not_leader` line.
    pub not_leader: Line,
    /// When A's CMD group was found gone.
    pub gone: BootTime,
    /// The last time A's CMD wrote its heartbeat.
    pub last_beat: BootTime,
    /// B's term began (its `leader` line's `started_boot_ns`).
    pub successor: BootTime,
    /// B's CMD started (its `cmd_started` line).
    pub successor_cmd: BootTime,
}

impl Handover {
    /// Prints the figures (ms after the blackhole) and asserts that the successor began only
    /// after A's whole group was gone, and that SIGKILL came no later than the grace after
    /// SIGTERM; with `full_grace`, not much sooner either (the term ended the grace before its
    /// lease's deadline). Not exactly the grace: the lease may still shrink during the grace
    /// (a reconnect attempt that gets no answer counts with a shorter timeout), and the lease
    /// wins; measured here, 417 to 426 ms of a 425 ms grace.
    pub fn check(&self, what: &str, grace: Duration, full_grace: bool) {
        let at = |t: BootTime| boot_ms(self.holed, t);
        let gap = boot_ms(self.gone, self.successor);
        eprintln!(
            "{what}: after the blackhole: SIGTERM ({}) {:.0} ms, not_leader (ended {:.0} ms) {:.0} ms, \
             SIGKILL {:.0} ms, CMD's last heartbeat {:.0} ms, its group gone {:.0} ms; \
             successor's term began {:.0} ms, its CMD started {:.0} ms: {}",
            self.sigterm.str("reason"),
            at(self.sigterm.boot("boot_ns")),
            at(self.not_leader.boot("ended_boot_ns")),
            at(self.not_leader.boot("boot_ns")),
            at(self.sigkill.boot("boot_ns")),
            at(self.last_beat),
            at(self.gone),
            at(self.successor),
            at(self.successor_cmd),
            if gap > 0.0 {
                format!("GAP of {gap:.0} ms between A's group gone and B's term")
            } else {
                format!(
                    "OVERLAP of {:.0} ms: A's group outlived the start of B's term",
                    -gap
                )
            },
        );
        assert_eq!(
            (self.sigterm.str("signal"), self.sigkill.str("signal")),
            ("SIGTERM", "SIGKILL"),
            "{what}"
        );
        assert_eq!(self.sigkill.str("reason"), "grace_expired", "{what}");
        assert!(
            self.gone < self.successor,
            "{what}: A's CMD group was still there {:.0} ms after B's term began",
            -gap
        );
        assert!(
            self.last_beat < self.successor,
            "{what}: A's CMD ran {:.0} ms after B's term began",
            boot_ms(self.successor, self.last_beat)
        );
        let waited = boot_ms(self.sigterm.boot("boot_ns"), self.sigkill.boot("boot_ns"));
        let grace_ms = grace.as_secs_f64() * 1000.0;
        assert!(
            waited <= grace_ms + 250.0,
            "{what}: SIGKILL came {waited:.0} ms after SIGTERM, with a grace of {grace:?}"
        );
        assert!(
            !full_grace || waited >= grace_ms * 0.8,
            "{what}: SIGKILL came {waited:.0} ms after SIGTERM: the command did not get its \
             grace of {grace:?} inside the lease"
        );
    }
}

/// The scenario of a leader whose CMD ignores SIGTERM: A (`a_args`, through `proxy`) leads and
/// runs [`stubborn_script`] writing to `beats`; B (`b_args`, on the direct connect string
/// `direct`) queues on `election`; the test blackholes A's link and waits for B to lead and
/// start its CMD, and for A's group to be gone. Returns both zkr and the figures; the CMD
/// groups are recorded in `groups`.
pub async fn stubborn_handover<A: AsRef<OsStr>, B: AsRef<OsStr>>(
    proxy: &FaultProxy,
    direct: &str,
    election: &str,
    a_args: &[A],
    b_args: &[B],
    beats: &Path,
    groups: &mut Groups,
) -> (Zkr, Zkr, Handover) {
    let bound = Duration::from_secs(30);
    let mut a = Zkr::supervisor(&proxy.connect_string(), "a", a_args);
    let started = a
        .wait_for("cmd_started", bound, "A never started its command")
        .await;
    let watch = GroupWatch::start(groups.add(&started));
    let deadline = Instant::now() + bound;
    while last_beat(beats).is_none() {
        assert!(
            Instant::now() < deadline,
            "A's command wrote no heartbeat within {bound:?}\n{}",
            a.context()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut b = Zkr::supervisor(direct, "b", b_args);
    let zk = tokio::time::timeout(bound, zookeeper_client::Client::connect(direct))
        .await
        .expect("no ZooKeeper connection in time")
        .expect("ZooKeeper connection failed");
    loop {
        let queued = zk.list_children(election).await.map_or(0, |c| c.len());
        if queued == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "B did not queue on {election} within {bound:?}\n{}",
            b.context()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let holed = BootTime::now();
    proxy.blackhole();
    let lead = b
        .wait_for("leader", bound, "B never led after A's link was blackholed")
        .await;
    let b_cmd = b
        .wait_for("cmd_started", bound, "B led but never started its command")
        .await;
    groups.add(&b_cmd);
    // Not gone yet is the failure this scenario looks for: wait on, to measure by how much.
    let gone = watch
        .wait(bound, "A's command outlived the handover by far")
        .await;
    // SIGTERM, SIGKILL and not_leader, in whatever order A wrote them.
    let (mut sigterm, mut sigkill, mut not_leader) = (None, None, None);
    while sigterm.is_none() || sigkill.is_none() || not_leader.is_none() {
        let line = a
            .next(bound, "A's signals to its command and its not_leader")
            .await;
        match (line.event(), line.json["signal"].as_str()) {
            ("cmd_signalled", Some("SIGTERM")) => sigterm.get_or_insert(line),
            ("cmd_signalled", _) => sigkill.get_or_insert(line),
            ("not_leader", _) => not_leader.get_or_insert(line),
            _ => continue,
        };
    }
    let handover = Handover {
        holed,
        sigterm: sigterm.expect("seen"),
        sigkill: sigkill.expect("seen"),
        not_leader: not_leader.expect("seen"),
        gone,
        last_beat: last_beat(beats).expect("heartbeats were seen before"),
        successor: lead.boot("started_boot_ns"),
        successor_cmd: b_cmd.boot("boot_ns"),
    };
    (a, b, handover)
}

/// libfaketime's preload library, for a zkr whose wall clock is off: installed with Debian's
/// `faketime` package when missing, where the harness may install (as it installs ZooKeeper).
/// `None` (the test skips, saying why) where it can be neither found nor installed; under
/// `CI=true` that fails the test instead.
pub fn libfaketime() -> Option<std::path::PathBuf> {
    match zookeeper_recipes::testing::provision::libfaketime() {
        Ok(lib) => Some(lib),
        Err(e) if std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1") => {
            panic!("libfaketime is required under CI=true: {e}")
        }
        Err(e) => {
            eprintln!("skipping a test that needs libfaketime: {e}");
            None
        }
    }
}

/// Makes `cmd` (a zkr, and the commands it starts) see the wall clock shifted by `offset`
/// (libfaketime's syntax: `+1h`, `-30s`); its monotonic and boot clocks stay the machine's.
pub fn skew_wall_clock(cmd: &mut Command, lib: &Path, offset: &str) {
    cmd.env("LD_PRELOAD", lib)
        .env("FAKETIME", offset)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
}
