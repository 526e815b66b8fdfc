//! Driving `zkr` as a child process: its JSON event lines as they come, with the instant each
//! was read, its other output kept for failure messages, signals, exit. Shared by the CLI tests
//! and the tests that need a participant in another process (a crash is a `kill -9` of it).

use std::ffi::OsStr;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

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
