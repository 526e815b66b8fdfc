//! The benchmark: leader handover, joins, mutex throughput, many latches on one session and what
//! they cost the server while idle, with the server-side request counts.
//! `rigs/bench/CuratorBench.java` runs the same workloads on Apache Curator, and `rigs/bench/compare.sh`
//! runs both against one server and prints them side by side.
//!
//! ```text
//! cargo run --release --example bench -- [--connect HOSTS] <workload> <args>
//!
//!   handover N R   N LeaderLatch candidates, each on its own session; R measured handovers
//!   join N         N connected sessions start one LeaderLatch each on one empty path at once
//!   lock C S       C clients, each on its own session, acquire+release one mutex for S seconds
//!   many N         N LeaderLatches on one session, on N paths
//!   idle N [T]     N leading LeaderLatches on one session (timeout T s, default 10): packets/s
//!   floor R [S]    the server's own floors: a handover's requests (R rounds) and a lock's (S s)
//!   pool J R [T]   a LeaderPool of J jobs over R replica processes (timeout T s, default 4):
//!                  settle time, requests and assignment bytes after start, a join, a kill -9
//!   fleet N [T]    N sessions, one LeaderLatch each in one election, on the followers of a
//!                  three-server ensemble: what the fleet at rest costs the quorum leader
//!   server         start an embedded ZooKeeper, print `connect HOSTS`, serve until stdin closes
//!   cluster        start an embedded three-server ensemble, print `connect HOSTS`, serve until
//!                  stdin closes
//! ```
//!
//! Each workload prints one figure per line on stdout, `name value unit` with single spaces
//! (`handover_ms_p50 2.104 ms`), and nothing else; progress and diagnostics go to stderr. Bad
//! arguments print the usage on stderr and exit with status 2. `RUST_LOG` (say
//! `RUST_LOG=zookeeper_recipes=debug`) sends the library's tracing events to stderr, with
//! microsecond timestamps: that is how to see where the time of a handover goes.
//!
//! # The server
//!
//! `--connect HOSTS`, else `$ZK_CONNECT`, else an embedded standalone server that the bench
//! starts itself with the harness ([`TestingServer`]): `tickTime` 500 ms and ZooKeeper's default
//! `forceSync=yes` (every write is fsynced before it is acknowledged), session timeouts up to
//! 60 s. `mntr` is read from the first host of the connect string. The `server` workload starts
//! the same embedded server and serves it to other processes (`rigs/bench/compare.sh` runs both
//! sides against it).
//!
//! # Sessions
//!
//! Every session asks for a 60 s session timeout (the server may lower it; the negotiated value is
//! printed on stderr), so that heartbeats are rare: a session proves itself alive every 7.5 s
//! (1/8 of the timeout; zookeeper-client's own pings, after 9 s without a send at this timeout,
//! then never come). With N sessions that is still N / 7.5 packets a second that are not the
//! workload's, and in bursts, since sessions that connected together beat together; the control
//! windows below take them out of the counts. (A Curator client pings after 10 s without a send,
//! and also as soon as anything wakes it after such a silence, such as a watch event: see
//! `rigs/bench/CuratorBench.java`.)
//!
//! # Workloads
//!
//! - `handover N R`: N sessions; on one fresh path, N latches start one after another (each node
//!   exists before the next latch starts), so the leader and its successor are known. Then
//!   10 unmeasured warm-up rounds and R measured rounds of: the leader closes gracefully
//!   ([`LeaderLatch::close`]); the time from the start of that close until the successor's
//!   [`LeaderLatch::await_leadership`] returns (in a task that was waiting before the close began)
//!   is one handover. After the round is measured, the closed candidate rejoins at the back with a
//!   new latch on its same session, so there are always N candidates. Prints `handover_ms_p50`,
//!   `handover_ms_p99` (nearest rank) and `requests_per_handover_p50`.
//! - `join N`: N sessions, connected before the window opens; the election path exists and has no
//!   children. All N latches are started at once; the window ends when every latch has its node
//!   ([`LeaderLatch::wait_joined`]) and one of them knows it leads. That is done 5 times, each
//!   time on a fresh path after the previous latches have closed (one sample swings by 10x on a
//!   busy machine); prints the medians, `join_all_ms` and `join_requests`.
//! - `lock C S`: C sessions, each with an [`InterProcessMutex`] on one path, each looping
//!   acquire + release. After 1 s of unmeasured warm-up, the acquire+release cycles completed in
//!   the next S seconds, over all clients, divided by S: `lock_ops_per_s`.
//! - `floor R [S]`: no recipe at all: what the server needs, to tell how much of a handover or a
//!   lock cycle is the client's. Two sessions; per round one creates an ephemeral sequential
//!   node, the other watches it (getData), both stay idle for the control window as before a
//!   handover (an idle server and CPU wake up slower than busy ones), then the first deletes the
//!   node: the time until the second has its event is `floor_handover_ms_p50` / `_p99` (one
//!   fsynced delete and its event: the floor of a handover in which the successor claims on the
//!   event), and until it also has a listing of the parent, `floor_listed_handover_ms_p50` /
//!   `_p99` (the floor of a handover in which the successor lists first, as Curator's does).
//!   The listing rounds again with 199 and 999 other nodes in the line (named as the recipes
//!   name theirs, held by a third session): `floor_listed_handover200_ms_p50` / `_p99` and
//!   `floor_listed_handover1000_ms_p50` / `_p99`, the floors of `handover 200` and
//!   `handover 1000`, whose successors list that many names. Then S seconds (default 10, after a 1 s warm-up) of 1, and of 4, sessions each looping
//!   create (ephemeral sequential) + delete under one path, the two fsynced writes of an
//!   uncontended acquire+release: `floor_lock_ops_per_s` and `floor_lock4_ops_per_s`. Then the
//!   floor of a *contended* lock, S seconds each with 4 and with 16 sessions queueing for one
//!   lock on the raw client (create with a listing in the same round trip, watch the
//!   predecessor; on its deletion hold at once when it led the queue in the waiter's listing,
//!   else list again; hold, delete): each hand-over is one fsynced delete, the next holder's
//!   event and its listing when it must list: `floor_contended_lock_ops_per_s` (4 clients) and
//!   `floor_contended_lock16_ops_per_s`.
//! - `many N`: one session; N latches on N fresh paths (siblings under one existing parent),
//!   started at once. `many_start_ms` is the time until every latch has its node;
//!   `rss_kb_per_latch` is the growth of this process's resident set (`VmRSS` of
//!   `/proc/self/status`) from before the first start to then, divided by N.
//! - `idle N [T]`: what a session holding N leaderships costs the server while nothing happens.
//!   One session with session timeout T seconds (default 10; the server may lower or raise it,
//!   the negotiated value is printed on stderr); N latches on N fresh paths started at once as in
//!   `many`, so each leads alone. 2 s after the last one leads, the packets the server receives in
//!   the next 10 s, per second: `idle_packets_per_s`. The idle traffic is what is measured, so no
//!   background is taken out, only the window's closing `mntr` read (`per_read`, below): on a
//!   server with no other client (as under `rigs/bench/compare.sh`) it is this session's heartbeats,
//!   one `sync` every eighth of the negotiated timeout whatever N (each latch watches its own
//!   node rather than being polled). Every latch must still lead when the window ends.
//! - `pool J R [T]`: a [`LeaderPool`](zookeeper_recipes::LeaderPool) of J jobs (`job-0000` ..)
//!   over R replicas, each a process of its own (the bench re-executes itself with a hidden
//!   `pool-replica` workload, so that `kill -9` is real) with its own session of timeout T
//!   seconds (default 4). The replicas connect before any window opens and report what they see
//!   over their stdout, not through ZooKeeper; the pool has *settled* when every live replica has
//!   read the same assignment, it names exactly the live replicas and gives each its quota
//!   (`floor` or `ceil` of J / n), and every replica leads exactly its assigned jobs (valid
//!   terms). Three phases, each after a 1 s control window: **start** (the R replicas start
//!   their pools at once), **join** (one more replica starts), **kill** (`kill -9` of the
//!   coordinator's process: this phase's time is dominated by the server's expiry of its
//!   session, T plus up to one tick, see `recipes/leader-pool.md`). For each phase it prints
//!   `pool_<phase>_settle_ms` (from the `start` sent, or the kill, until settled),
//!   `pool_<phase>_requests` (the server's requests in that window, background taken out),
//!   `pool_<phase>_assignment_writes` (how many times the coordinator wrote the assignment node:
//!   its version's change) and `pool_<phase>_assignment_bytes` (the node's size after the phase:
//!   what each write costs; every live replica reads it back once per write); then
//!   `pool_assignment_bytes`, the node's size after start.
//! - `fleet N [T]`: what a fleet at rest costs a three-server ensemble, above all its quorum
//!   leader, which alone runs the request-preparation thread that every write and every `sync`
//!   goes through. N sessions of timeout T seconds (default 10, `zkr`'s), connected to the
//!   followers only, one `LeaderLatch` each in one election; with `--connect`, HOSTS must name
//!   the whole ensemble (the leader is found by `mntr`), else the bench starts one (tickTime
//!   2 s). After the fleet has settled and 5 s more, a window of 2T (at least 20 s):
//!   `leader_requests_per_s` (the leader's `zk_prep_processor_request_queued`, per second),
//!   `leader_requests_per_s_per_session`, `follower_packets_per_s` (the followers'
//!   `zk_packets_received`, summed) and `rss_kb_per_session`. See `bench/fleet.rs`.
//!
//! # Counting requests
//!
//! `zk_packets_received` of `mntr` counts every packet the server reads from a client: requests,
//! pings and heartbeats of every session. A request count for a window is
//!
//! ```text
//! (packets at the end - packets at the start) - per_read - background
//! ```
//!
//! - `per_read` is what one `mntr` read adds itself, calibrated in the same run as the median
//!   difference of 21 back-to-back reads (1 on ZooKeeper 3.8.0; measured, not assumed). The
//!   window's last read is the only read inside it.
//! - `background` is the other sessions' idle traffic (pings, heartbeats), measured by a control
//!   window right before: two reads with nothing of the benchmark happening between them (50 ms
//!   for a handover, 1 s for a join), their difference minus `per_read`, scaled to the measured
//!   window's length. Heartbeats come in bursts, so the control window is adjacent to the one it
//!   corrects rather than measured once per run. A burst that straddles the two still skews one
//!   round either way, which the median shrugs off.
//! - The window's end read waits 10 ms after the event that ends it (the successor knows it
//!   leads, every node exists), so that requests sent just after it (a watch the new leader sets,
//!   a latch's first listing) have arrived and are counted. The next window's control starts
//!   10 ms after the rejoined candidate has its node, for the same reason.
//!
//! Each round's count is rounded to a whole number of requests; `requests_per_handover_p50` is
//! their median. stderr also shows the spread: p90 and max of the times, how many rounds counted
//! how many requests, and the mean background taken out.

use std::collections::VecDeque;
use std::future::Future;
use std::io::{Read as _, Write as _};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::ZooKeeper;
use futures::StreamExt;
use zookeeper_recipes::{InterProcessMutex, LeaderLatch, Session};
use zookeeper_recipes_testing::{self as testing, TestingServer, TestingServerBuilder};

use zookeeper_recipes_rigs::prologue as common;
#[path = "bench/fleet.rs"]
mod fleet;
#[path = "bench/pool.rs"]
mod pool;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = BoxError> = std::result::Result<T, E>;

const USAGE: &str = "\
usage: bench [--connect HOSTS] <workload> <args>

  handover N R   N LeaderLatch candidates (N >= 2), each on its own session; R measured handovers
  join N         N connected sessions start one LeaderLatch each on one empty path at once
  lock C S       C clients, each on its own session, acquire+release one mutex for S seconds
  many N         N LeaderLatches on one session, on N paths
  idle N [T]     N leading LeaderLatches on one session (timeout T s, default 10): packets/s
  floor R [S]    the server's floors on the raw client: R handover rounds, S s (default 10)
                 of a lock's create+delete with 1 and with 4 clients, and of a contended
                 lock's hand-overs with 4 and with 16 clients
  pool J R [T]   a LeaderPool of J jobs over R replica processes (timeout T s, default 4):
                 settle time, requests and assignment bytes after start, a join, a kill -9
  fleet N [T]    N sessions (timeout T s, default 10), one LeaderLatch each in one election,
                 on the followers of a three-server ensemble (HOSTS, else an embedded one): the
                 quorum leader's requests/s, the followers' packets/s, RSS per session at rest
  server         start an embedded ZooKeeper, print `connect HOSTS`, serve until stdin closes
  cluster        start an embedded three-server ensemble, print `connect HOSTS`, serve until
                 stdin closes

HOSTS defaults to $ZK_CONNECT, else an embedded ZooKeeper (tickTime 500, fsync on).
Figures go to stdout as `name value unit`, one per line; everything else goes to stderr.";

/// The session timeout every session asks for.
const SESSION_TIMEOUT: Duration = Duration::from_secs(60);
/// The embedded server's `tickTime`.
const TICK: Duration = Duration::from_millis(500);
/// Unmeasured handover rounds before the measured ones.
const WARMUP_ROUNDS: usize = 10;
/// Unmeasured mutex cycling before the measured seconds.
const LOCK_WARMUP: Duration = Duration::from_secs(1);
/// How long after the end of a window its last `mntr` read waits.
const SETTLE: Duration = Duration::from_millis(10);
/// The control window before a handover.
const HANDOVER_CONTROL: Duration = Duration::from_millis(50);
/// The control window before a join.
const JOIN_CONTROL: Duration = Duration::from_secs(1);
/// Joins measured; the figures are their medians.
const JOIN_REPEATS: usize = 5;
/// Back-to-back `mntr` reads that calibrate what one read adds.
const CALIBRATION_READS: usize = 21;
/// The bound on every single wait of the bench (a join of 1,000 included).
const WAIT: Duration = Duration::from_secs(120);
/// How many sessions connect at the same time.
const CONNECTS_IN_FLIGHT: usize = 32;
/// The session timeout of `idle` when none is given.
const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `idle` waits after every latch leads before its window opens.
const IDLE_SETTLE: Duration = Duration::from_secs(2);
/// The window in which `idle` counts the server's packets.
const IDLE_WINDOW: Duration = Duration::from_secs(10);
/// How long `floor` cycles the raw lock requests when no S is given.
const FLOOR_LOCK_SECONDS: u64 = 10;
/// The parent of every path the bench uses.
const ROOT: &str = "/zkr-bench";

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    Handover { candidates: usize, rounds: usize },
    Join { candidates: usize },
    Lock { clients: usize, seconds: u64 },
    Many { latches: usize },
    Idle { latches: usize, timeout: Duration },
    Floor { rounds: usize, seconds: u64 },
    Pool(pool::Params),
    PoolReplica(pool::Replica),
    Fleet(fleet::Params),
    Server,
    Cluster,
}

/// The parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Args {
    connect: Option<String>,
    workload: Workload,
}

/// Parses the arguments after the program name; the error says what is wrong.
fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut rest = args;
    let mut connect = None;
    if let [flag, tail @ ..] = rest
        && flag == "--connect"
    {
        let [hosts, tail @ ..] = tail else {
            return Err("--connect needs HOSTS".to_owned());
        };
        if hosts.is_empty() || hosts.starts_with('-') {
            return Err(format!("--connect needs HOSTS, got {hosts:?}"));
        }
        connect = Some(hosts.clone());
        rest = tail;
    }
    let Some((name, params)) = rest.split_first() else {
        return Err("no workload given".to_owned());
    };
    let expect = |n: usize, shape: &str| {
        if params.len() == n {
            Ok(())
        } else {
            Err(format!("`{name}` takes {shape}, got {params:?}"))
        }
    };
    let positive = |i: usize, what: &str, min: u64| -> Result<u64, String> {
        let text = params.get(i).map_or("", String::as_str);
        match text.parse::<u64>() {
            Ok(v) if v >= min => Ok(v),
            _ => Err(format!(
                "{what} must be a whole number >= {min}, got {text:?}"
            )),
        }
    };
    let count = |i: usize, what: &str, min: u64| {
        positive(i, what, min).and_then(|v| usize::try_from(v).map_err(|e| e.to_string()))
    };
    let workload = match name.as_str() {
        "handover" => {
            expect(2, "N R")?;
            Workload::Handover {
                candidates: count(0, "N (candidates)", 2)?,
                rounds: count(1, "R (rounds)", 1)?,
            }
        }
        "join" => {
            expect(1, "N")?;
            Workload::Join {
                candidates: count(0, "N (candidates)", 1)?,
            }
        }
        "lock" => {
            expect(2, "C S")?;
            Workload::Lock {
                clients: count(0, "C (clients)", 1)?,
                seconds: positive(1, "S (seconds)", 1)?,
            }
        }
        "many" => {
            expect(1, "N")?;
            Workload::Many {
                latches: count(0, "N (latches)", 1)?,
            }
        }
        "idle" => {
            if !(1..=2).contains(&params.len()) {
                return Err(format!("`{name}` takes N [T], got {params:?}"));
            }
            Workload::Idle {
                latches: count(0, "N (latches)", 1)?,
                timeout: if params.len() == 2 {
                    Duration::from_secs(positive(1, "T (session timeout, seconds)", 1)?)
                } else {
                    IDLE_TIMEOUT
                },
            }
        }
        "floor" => {
            if !(1..=2).contains(&params.len()) {
                return Err(format!("`{name}` takes R [S], got {params:?}"));
            }
            Workload::Floor {
                rounds: count(0, "R (rounds)", 1)?,
                seconds: if params.len() == 2 {
                    positive(1, "S (seconds)", 1)?
                } else {
                    FLOOR_LOCK_SECONDS
                },
            }
        }
        "pool" => Workload::Pool(pool::parse(params)?),
        // Hidden: one replica of `pool`, started by it as a child process.
        "pool-replica" => {
            if connect.is_none() {
                return Err("`pool-replica` needs --connect".to_owned());
            }
            Workload::PoolReplica(pool::parse_replica(params)?)
        }
        "server" => {
            expect(0, "no arguments")?;
            if connect.is_some() {
                return Err("`server` starts its own ZooKeeper: no --connect".to_owned());
            }
            Workload::Server
        }
        "fleet" => Workload::Fleet(fleet::parse(params)?),
        "cluster" => {
            expect(0, "no arguments")?;
            if connect.is_some() {
                return Err("`cluster` starts its own ensemble: no --connect".to_owned());
            }
            Workload::Cluster
        }
        other => return Err(format!("unknown workload {other:?}")),
    };
    Ok(Args { connect, workload })
}

/// The `host:port` of the first server in a connect string (`h1:p1,h2:p2/chroot`).
fn first_host(connect: &str) -> &str {
    let hosts = connect.split('/').next().unwrap_or(connect);
    hosts.split(',').next().unwrap_or(hosts).trim()
}

/// The nearest-rank percentile `q` (0 < q <= 1) of `values`; `None` when there are none.
fn percentile<T: Copy + PartialOrd>(values: &[T], q: f64) -> Option<T> {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len().max(1)) - 1).copied()
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

/// One `zk_packets_received` reading and when its answer came.
#[derive(Debug, Clone, Copy)]
struct Reading {
    packets: u64,
    at: Instant,
}

/// A measured window's request count: its packet difference, minus what its one closing read
/// adds, minus the background seen in the control window (`control.0` to `control.1`, which
/// ends where the window starts) scaled to the window's length. Also returns that background.
fn window_requests(control: (Reading, Reading), end: Reading, per_read: f64) -> (f64, f64) {
    let (from, start) = control;
    let idle = start.packets.saturating_sub(from.packets) as f64 - per_read;
    let idle_secs = start.at.saturating_duration_since(from.at).as_secs_f64();
    let window_secs = end.at.saturating_duration_since(start.at).as_secs_f64();
    let background = if idle_secs > 0.0 {
        idle.max(0.0) * window_secs / idle_secs
    } else {
        0.0
    };
    let counted = end.packets.saturating_sub(start.packets) as f64 - per_read;
    (counted - background, background)
}

/// The packets a second from `start` to `end`, less what the closing read adds.
fn packets_per_second(start: Reading, end: Reading, per_read: f64) -> f64 {
    let packets = end.packets.saturating_sub(start.packets) as f64 - per_read;
    let secs = end.at.saturating_duration_since(start.at).as_secs_f64();
    if secs > 0.0 {
        packets.max(0.0) / secs
    } else {
        f64::NAN
    }
}

/// Counts server-side requests with `mntr` (see the module docs).
struct Packets {
    address: String,
    per_read: f64,
}

/// An open window: its control window's two readings.
struct Opened {
    control: (Reading, Reading),
}

impl Packets {
    /// Calibrates what one `mntr` read adds, with back-to-back reads.
    async fn calibrate(address: &str) -> Result<Packets> {
        let mut packets = Packets {
            address: address.to_owned(),
            per_read: 0.0,
        };
        let mut readings = Vec::with_capacity(CALIBRATION_READS);
        for _ in 0..CALIBRATION_READS {
            readings.push(packets.read().await?);
        }
        let deltas: Vec<f64> = readings
            .windows(2)
            .map(|w| w[1].packets.saturating_sub(w[0].packets) as f64)
            .collect();
        packets.per_read = percentile(&deltas, 0.5).unwrap_or(0.0);
        eprintln!(
            "bench: one mntr read adds {} packets (median of {} back-to-back reads of {address})",
            packets.per_read,
            deltas.len()
        );
        Ok(packets)
    }

    async fn read(&self) -> Result<Reading> {
        let mntr = testing::mntr(&self.address).await?;
        let packets = mntr
            .get("zk_packets_received")
            .ok_or_else(|| format!("mntr of {} has no zk_packets_received", self.address))?
            .parse()?;
        Ok(Reading {
            packets,
            at: Instant::now(),
        })
    }

    /// Opens a window after a control window of `control` in which nothing of ours happens.
    async fn open(&self, control: Duration) -> Result<Opened> {
        let from = self.read().await?;
        tokio::time::sleep(control).await;
        let start = self.read().await?;
        Ok(Opened {
            control: (from, start),
        })
    }

    /// Closes a window [`SETTLE`] after its end: returns the requests in it and the background
    /// that was taken out.
    async fn close(&self, opened: Opened) -> Result<(f64, f64)> {
        tokio::time::sleep(SETTLE).await;
        let end = self.read().await?;
        Ok(window_requests(opened.control, end, self.per_read))
    }
}

/// Waits for `fut` at most [`WAIT`]; the error says what did not happen.
async fn bounded<T>(what: impl FnOnce() -> String, fut: impl Future<Output = T>) -> Result<T> {
    tokio::time::timeout(WAIT, fut)
        .await
        .map_err(|_| format!("{} (waited {WAIT:?})", what()).into())
}

fn embedded_server() -> TestingServerBuilder {
    TestingServer::builder().tick_time(TICK)
}

async fn connect_one(connect: &str) -> Result<Session> {
    connect_with_timeout(connect, SESSION_TIMEOUT).await
}

async fn connect_with_timeout(connect: &str, session_timeout: Duration) -> Result<Session> {
    Ok(Session::builder(connect)
        .session_timeout(session_timeout)
        .connect()
        .await?)
}

/// `n` connected sessions, [`CONNECTS_IN_FLIGHT`] connecting at a time.
async fn connect_sessions(connect: &str, n: usize) -> Result<Vec<Session>> {
    let started = Instant::now();
    let sessions: Vec<Result<Session>> = futures::stream::iter(0..n)
        .map(|_| connect_one(connect))
        .buffer_unordered(CONNECTS_IN_FLIGHT)
        .collect()
        .await;
    let sessions = sessions.into_iter().collect::<Result<Vec<_>>>()?;
    let negotiated = sessions.first().and_then(Session::negotiated_timeout);
    eprintln!(
        "bench: {n} sessions connected in {:?} (session timeout {negotiated:?})",
        started.elapsed()
    );
    Ok(sessions)
}

async fn close_sessions(sessions: &[Session]) {
    futures::future::join_all(sessions.iter().map(Session::close)).await;
}

/// A fresh path under [`ROOT`], `/zkr-bench/<what>-rust-<8 hex digits>`.
fn fresh_path(what: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{ROOT}/{what}-rust-{}", &id[..8])
}

/// Creates [`ROOT`] and, as a container (as the recipes create their paths; the server removes it
/// once its last child has gone), `path`, outside any measured window.
async fn ensure_path(session: &Session, path: &str) -> Result<()> {
    use zookeeper_client::{Acls, CreateMode};
    let client = session.client()?;
    for (p, mode) in [
        (ROOT, CreateMode::Persistent),
        (path, CreateMode::Container),
    ] {
        match client
            .create(p, b"", &mode.with_acls(Acls::anyone_all()))
            .await
        {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// This process's resident set in KiB.
fn rss_kb() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .ok_or("no VmRSS in /proc/self/status")?;
    let kb = line.trim().trim_end_matches("kB").trim();
    Ok(kb.parse()?)
}

fn figure(name: &str, value: impl std::fmt::Display, unit: &str) {
    println!("{name} {value} {unit}");
}

/// A handover candidate: its session and its current latch.
struct Candidate {
    session: Session,
    latch: Arc<LeaderLatch>,
    id: String,
}

async fn start_latch(session: &Session, path: &str, id: &str) -> Result<Arc<LeaderLatch>> {
    let latch = LeaderLatch::builder(session, path).id(id).start().await?;
    bounded(
        || format!("latch {id} did not create its node on {path}"),
        latch.wait_joined(WAIT),
    )
    .await??;
    Ok(Arc::new(latch))
}

async fn handover(target: &ZooKeeper, candidates: usize, rounds: usize) -> Result<()> {
    let packets = Packets::calibrate(first_host(target.connect_string())).await?;
    let sessions = connect_sessions(target.connect_string(), candidates).await?;
    let path = fresh_path("handover");
    let mut queue = VecDeque::with_capacity(candidates);
    for (i, session) in sessions.iter().enumerate() {
        let id = format!("rust-{i}");
        let latch = start_latch(session, &path, &id).await?;
        queue.push_back(Candidate {
            session: session.clone(),
            latch,
            id,
        });
    }
    if let Some(first) = queue.front() {
        bounded(
            || format!("the first candidate {} did not become leader", first.id),
            first.latch.await_leadership(),
        )
        .await??;
    }
    eprintln!("bench: {candidates} candidates joined {path}");
    tokio::time::sleep(SETTLE).await;

    let mut millis = Vec::with_capacity(rounds);
    let mut requests = Vec::with_capacity(rounds);
    let mut backgrounds = Vec::with_capacity(rounds);
    for round in 0..WARMUP_ROUNDS + rounds {
        let leader = queue.pop_front().ok_or("no candidates")?;
        let successor = queue.front().ok_or("no successor")?;
        let successor_id = successor.id.clone();
        let opened = packets.open(HANDOVER_CONTROL).await?;
        // The successor waits before the close begins, in a task of its own.
        let waiting = Arc::clone(&successor.latch);
        let (ready, is_ready) = tokio::sync::oneshot::channel();
        let known = tokio::spawn(async move {
            let _ = ready.send(());
            waiting.await_leadership().await?;
            Ok::<_, zookeeper_recipes::Error>(Instant::now())
        });
        is_ready.await?;
        tracing::debug!(round, leader = %leader.id, successor = %successor_id, "bench: the leader closes");
        let t0 = Instant::now();
        leader.latch.close().await?;
        let known = bounded(
            || format!("round {round}: successor {successor_id} did not learn that it leads"),
            known,
        )
        .await???;
        tracing::debug!(round, successor = %successor_id, "bench: the successor knows it leads");
        let (count, background) = packets.close(opened).await?;
        if round >= WARMUP_ROUNDS {
            millis.push(known.saturating_duration_since(t0).as_secs_f64() * 1e3);
            requests.push(count);
            backgrounds.push(background);
        }
        // Back in line behind everyone, on the same session: N stays constant.
        let latch = start_latch(&leader.session, &path, &leader.id).await?;
        queue.push_back(Candidate { latch, ..leader });
        tokio::time::sleep(SETTLE).await;
    }

    let whole: Vec<i64> = requests.iter().map(|r| r.round() as i64).collect();
    let mut histogram = std::collections::BTreeMap::new();
    for r in &whole {
        *histogram.entry(*r).or_insert(0usize) += 1;
    }
    eprintln!(
        "bench: handover N={candidates} R={rounds}: ms p90 {:.3}, max {:.3}; requests per handover \
         mean {:.2}, rounds per count {histogram:?}; background taken out per window mean {:.2}",
        percentile(&millis, 0.9).unwrap_or(f64::NAN),
        percentile(&millis, 1.0).unwrap_or(f64::NAN),
        mean(&requests),
        mean(&backgrounds)
    );
    figure(
        "handover_ms_p50",
        format_args!("{:.3}", percentile(&millis, 0.5).unwrap_or(f64::NAN)),
        "ms",
    );
    figure(
        "handover_ms_p99",
        format_args!("{:.3}", percentile(&millis, 0.99).unwrap_or(f64::NAN)),
        "ms",
    );
    figure(
        "requests_per_handover_p50",
        percentile(&whole, 0.5).unwrap_or(-1),
        "requests",
    );

    for c in &queue {
        c.latch.close().await?;
    }
    close_sessions(&sessions).await;
    Ok(())
}

async fn floor(target: &ZooKeeper, rounds: usize, seconds: u64) -> Result<()> {
    use zookeeper_client::{Acls, CreateMode};
    let leader = connect_one(target.connect_string()).await?;
    let successor = connect_one(target.connect_string()).await?;
    let path = floor_path(&leader, "floor").await?;
    let (leader, successor) = (leader.client()?, successor.client()?);
    let ephemeral = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let (event_ms, listed_ms) = handover_floor_rounds(&leader, &successor, &path, rounds).await?;
    for (name, values, q) in [
        ("floor_handover_ms_p50", &event_ms, 0.5),
        ("floor_handover_ms_p99", &event_ms, 0.99),
        ("floor_listed_handover_ms_p50", &listed_ms, 0.5),
        ("floor_listed_handover_ms_p99", &listed_ms, 0.99),
    ] {
        figure(
            name,
            format_args!("{:.3}", percentile(values, q).unwrap_or(f64::NAN)),
            "ms",
        );
    }
    // The listing of a line of N candidates is N names long (about 56 bytes each in the
    // recipes' naming): a handover among 1,000 candidates cannot list faster than this.
    for candidates in LISTED_FLOOR_CANDIDATES {
        let waiting = connect_one(target.connect_string()).await?;
        let client = waiting.client()?;
        let names: Vec<String> = (1..candidates)
            .map(|_| format!("{path}/_c_{}-latch-", uuid::Uuid::new_v4()))
            .collect();
        let creates: Vec<_> = names
            .iter()
            .map(|name| client.create(name, b"floor", &ephemeral))
            .collect();
        for created in futures::future::join_all(creates).await {
            created?;
        }
        let (_, listed_ms) = handover_floor_rounds(&leader, &successor, &path, rounds).await?;
        for (q, at) in [(0.5, "p50"), (0.99, "p99")] {
            figure(
                &format!("floor_listed_handover{candidates}_ms_{at}"),
                format_args!("{:.3}", percentile(&listed_ms, q).unwrap_or(f64::NAN)),
                "ms",
            );
        }
        // Their nodes go with the session, but its close does not wait for the server to
        // delete them: the next round and the path's deletion must not see them.
        let deletes: Vec<_> = client
            .list_children(&path)
            .await?
            .into_iter()
            .filter(|name| name.starts_with("_c_"))
            .map(|name| format!("{path}/{name}"))
            .collect();
        for name in &deletes {
            match client.delete(name, None).await {
                Ok(()) | Err(zookeeper_client::Error::NoNode) => {}
                Err(e) => return Err(e.into()),
            }
        }
        waiting.close().await?;
    }
    leader.delete(&path, None).await?;
    for (name, clients) in [("floor_lock_ops_per_s", 1), ("floor_lock4_ops_per_s", 4)] {
        let ops = lock_floor(target, clients, seconds).await?;
        figure(name, format_args!("{ops:.1}"), "ops/s");
    }
    for (name, clients) in [
        ("floor_contended_lock_ops_per_s", 4),
        ("floor_contended_lock16_ops_per_s", 16),
    ] {
        let ops = contended_lock_floor(target, clients, seconds).await?;
        figure(name, format_args!("{ops:.1}"), "ops/s");
    }
    Ok(())
}

/// Candidates in the line whose listing the extra listed floors measure.
const LISTED_FLOOR_CANDIDATES: [usize; 2] = [200, 1000];

/// `rounds` handovers on the raw client after the warm-up: the leader's node is deleted, the
/// successor gets the event, then lists `path`. The milliseconds from the delete to the event
/// and to the listing's answer.
async fn handover_floor_rounds(
    leader: &zookeeper_client::Client,
    successor: &zookeeper_client::Client,
    path: &str,
    rounds: usize,
) -> Result<(Vec<f64>, Vec<f64>)> {
    use zookeeper_client::{Acls, CreateMode};
    let ephemeral = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let mut event_ms = Vec::with_capacity(rounds);
    let mut listed_ms = Vec::with_capacity(rounds);
    for round in 0..WARMUP_ROUNDS + rounds {
        let (_, sequence) = leader
            .create(&format!("{path}/n-"), b"floor", &ephemeral)
            .await?;
        let node = format!("{path}/n-{sequence}");
        let (_, _, watcher) = successor.get_and_watch_data(&node).await?;
        tokio::time::sleep(HANDOVER_CONTROL).await;
        let t0 = Instant::now();
        let delete = leader.delete(&node, None);
        bounded(
            || format!("round {round}: no event for the deleted node"),
            watcher.changed(),
        )
        .await?;
        let event = t0.elapsed();
        successor.list_children(path).await?;
        let listed = t0.elapsed();
        delete.await?;
        if round >= WARMUP_ROUNDS {
            event_ms.push(event.as_secs_f64() * 1e3);
            listed_ms.push(listed.as_secs_f64() * 1e3);
        }
    }
    Ok((event_ms, listed_ms))
}

/// What the server allows a contended lock: `clients` sessions queue for one lock on the raw
/// client, each looping create (ephemeral sequential) with a listing in the same round trip,
/// wait for its turn, delete. A waiter watches its predecessor; on the predecessor's deletion it holds at once if that
/// node led the queue in its listing, and lists again otherwise. So each hand-over is the chain a
/// mutex cannot go below: one fsynced delete, the next holder's event, and its listing when it
/// must list. Holds per second over all clients, for `seconds` after the warm-up.
async fn contended_lock_floor(target: &ZooKeeper, clients: usize, seconds: u64) -> Result<f64> {
    use zookeeper_client::{Acls, CreateMode};
    let (sessions, path) = floor_sessions(target, clients, "contended-floor").await?;
    let first = sessions.first().ok_or("no sessions")?;
    let measured_from = Instant::now() + LOCK_WARMUP;
    let until = measured_from + Duration::from_secs(seconds);
    let mut tasks = Vec::with_capacity(clients);
    for session in &sessions {
        let client = session.client()?;
        let path = path.clone();
        tasks.push(tokio::spawn(async move {
            let ephemeral = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
            let prefix = format!("{path}/lock-");
            let mut measured = 0u64;
            let mut relists = 0u64;
            loop {
                // The first listing goes out right behind the create, in the same round trip
                // (replies come in order, so it shows our node).
                let create = client.create(&prefix, b"floor", &ephemeral);
                let listing = client.list_children(&path);
                let (_, sequence) = create.await?;
                let me = format!("lock-{sequence}");
                let mut first = Some(listing.await?);
                loop {
                    let mut queue = match first.take() {
                        Some(queue) => queue,
                        None => client.list_children(&path).await?,
                    };
                    // One prefix and a fixed-width sequence: the names sort as the queue.
                    queue.sort_unstable();
                    let at = queue
                        .iter()
                        .position(|n| *n == me)
                        .ok_or("a waiter's node is gone")?;
                    let Some(ahead) = at.checked_sub(1).map(|i| &queue[i]) else {
                        break;
                    };
                    let (stat, watcher) = client
                        .check_and_watch_stat(&format!("{path}/{ahead}"))
                        .await?;
                    if stat.is_none() {
                        continue;
                    }
                    watcher.changed().await;
                    if at == 1 {
                        break;
                    }
                    relists += 1;
                }
                let now = Instant::now();
                client.delete(&format!("{path}/{me}"), None).await?;
                if now >= until {
                    return Ok::<_, BoxError>((measured, relists));
                }
                if now >= measured_from {
                    measured += 1;
                }
            }
        }));
    }
    let (mut total, mut relists) = (0u64, 0u64);
    for task in tasks {
        let (holds, lists) = bounded(
            || format!("a client of the contended lock floor on {path} did not finish"),
            task,
        )
        .await???;
        total += holds;
        relists += lists;
    }
    eprintln!(
        "bench: contended lock floor C={clients} S={seconds}: {total} holds, {relists} listings after an event"
    );
    first.client()?.delete(&path, None).await?;
    close_sessions(&sessions).await;
    Ok(total as f64 / seconds as f64)
}

/// A fresh path for a floor, created persistent, not as a container: between two rounds or
/// cycles it has no child, and the server removes empty containers that have had children (a
/// sweep in such a gap failed a run with "node not exists"). The floor deletes it at its end.
async fn floor_path(session: &Session, what: &str) -> Result<String> {
    use zookeeper_client::{Acls, CreateMode};
    let path = fresh_path(what);
    ensure_path(session, ROOT).await?;
    session
        .client()?
        .create(
            &path,
            b"",
            &CreateMode::Persistent.with_acls(Acls::anyone_all()),
        )
        .await?;
    Ok(path)
}

/// The sessions of a lock floor and the fresh path they lock on ([`floor_path`]).
async fn floor_sessions(
    target: &ZooKeeper,
    clients: usize,
    what: &str,
) -> Result<(Vec<Session>, String)> {
    let sessions = connect_sessions(target.connect_string(), clients).await?;
    let first = sessions.first().ok_or("no sessions")?;
    let path = floor_path(first, what).await?;
    Ok((sessions, path))
}

/// What the server allows a lock: `clients` sessions, each looping the two writes of an
/// uncontended acquire+release (create an ephemeral sequential node under one path, delete
/// it) on the raw client, for `seconds` after the warm-up; cycles per second over all clients.
async fn lock_floor(target: &ZooKeeper, clients: usize, seconds: u64) -> Result<f64> {
    use zookeeper_client::{Acls, CreateMode};
    let (sessions, path) = floor_sessions(target, clients, "lock-floor").await?;
    let first = sessions.first().ok_or("no sessions")?;
    let measured_from = Instant::now() + LOCK_WARMUP;
    let until = measured_from + Duration::from_secs(seconds);
    let mut tasks = Vec::with_capacity(clients);
    for session in &sessions {
        let client = session.client()?;
        let prefix = format!("{path}/lock-");
        tasks.push(tokio::spawn(async move {
            let ephemeral = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
            let mut measured = 0u64;
            loop {
                let (_, sequence) = client.create(&prefix, b"floor", &ephemeral).await?;
                client.delete(&format!("{prefix}{sequence}"), None).await?;
                let now = Instant::now();
                if now >= until {
                    return Ok::<_, BoxError>(measured);
                }
                if now >= measured_from {
                    measured += 1;
                }
            }
        }));
    }
    let mut total = 0u64;
    for task in tasks {
        total += task.await??;
    }
    eprintln!("bench: lock floor C={clients} S={seconds}: {total} create+delete cycles");
    first.client()?.delete(&path, None).await?;
    close_sessions(&sessions).await;
    Ok(total as f64 / seconds as f64)
}

async fn join(target: &ZooKeeper, candidates: usize) -> Result<()> {
    let packets = Packets::calibrate(first_host(target.connect_string())).await?;
    let sessions = connect_sessions(target.connect_string(), candidates).await?;
    let mut millis = Vec::with_capacity(JOIN_REPEATS);
    let mut requests = Vec::with_capacity(JOIN_REPEATS);
    for repeat in 1..=JOIN_REPEATS {
        let (ms, count, background) = join_once(&packets, &sessions).await?;
        eprintln!(
            "bench: join N={candidates} #{repeat}: {ms:.3} ms, {count:.1} requests \
             ({background:.1} background taken out)"
        );
        millis.push(ms);
        requests.push(count.round() as i64);
    }
    figure(
        "join_all_ms",
        format_args!("{:.3}", percentile(&millis, 0.5).unwrap_or(f64::NAN)),
        "ms",
    );
    figure(
        "join_requests",
        percentile(&requests, 0.5).unwrap_or(-1),
        "requests",
    );
    close_sessions(&sessions).await;
    Ok(())
}

/// One join of every session on a fresh, empty path: its time in ms, its requests and the
/// background taken out. The latches are closed (their nodes deleted) before it returns.
async fn join_once(packets: &Packets, sessions: &[Session]) -> Result<(f64, f64, f64)> {
    let first = sessions.first().ok_or("no sessions")?;
    let path = fresh_path("join");
    ensure_path(first, &path).await?;
    tokio::time::sleep(SETTLE).await;

    let opened = packets.open(JOIN_CONTROL).await?;
    let t0 = Instant::now();
    let mut latches = Vec::with_capacity(sessions.len());
    for (i, session) in sessions.iter().enumerate() {
        latches.push(
            LeaderLatch::builder(session, &path)
                .id(format!("rust-{i}"))
                .start()
                .await?,
        );
    }
    let all_joined = async {
        let joined = futures::future::join_all(latches.iter().map(|l| l.wait_joined(WAIT))).await;
        joined.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok::<_, zookeeper_recipes::Error>(Instant::now())
    };
    let one_leads = async {
        let waits = latches.iter().map(|l| Box::pin(l.await_leadership()));
        futures::future::select_ok(waits).await?;
        Ok::<_, zookeeper_recipes::Error>(Instant::now())
    };
    let (joined, led) = bounded(
        || {
            format!(
                "{} latches did not all join {path} with one leader",
                sessions.len()
            )
        },
        async { tokio::join!(all_joined, one_leads) },
    )
    .await?;
    let done = joined?.max(led?);
    let (count, background) = packets.close(opened).await?;

    // Close returns once the node is deleted: the next join starts from a quiet server.
    futures::future::join_all(latches.iter().map(LeaderLatch::close)).await;
    Ok(((done - t0).as_secs_f64() * 1e3, count, background))
}

async fn lock(target: &ZooKeeper, clients: usize, seconds: u64) -> Result<()> {
    let sessions = connect_sessions(target.connect_string(), clients).await?;
    let path = fresh_path("lock");
    let measured_from = Instant::now() + LOCK_WARMUP;
    let until = measured_from + Duration::from_secs(seconds);
    let mut tasks = Vec::with_capacity(clients);
    for (i, session) in sessions.iter().enumerate() {
        let mutex = InterProcessMutex::builder(session, &path)
            .id(format!("rust-{i}"))
            .build()?;
        tasks.push(tokio::spawn(async move {
            let mut measured = 0u64;
            let mut longest = Duration::ZERO;
            loop {
                let started = Instant::now();
                let guard = bounded(
                    || format!("client {i} did not acquire the mutex"),
                    mutex.acquire(),
                )
                .await??;
                guard.release().await?;
                let now = Instant::now();
                if now >= until {
                    return Ok::<_, BoxError>((measured, longest));
                }
                if now >= measured_from {
                    measured += 1;
                    longest = longest.max(now - started);
                }
            }
        }));
    }
    let mut total = 0u64;
    let mut per_client = Vec::with_capacity(clients);
    for task in tasks {
        let (measured, longest) = task.await??;
        total += measured;
        per_client.push(format!(
            "{measured} (longest {:.1} ms)",
            longest.as_secs_f64() * 1e3
        ));
    }
    eprintln!(
        "bench: lock C={clients} S={seconds}: {total} cycles in the measured {seconds} s; per client: {}",
        per_client.join(", ")
    );
    figure(
        "lock_ops_per_s",
        format_args!("{:.1}", total as f64 / seconds as f64),
        "ops/s",
    );
    close_sessions(&sessions).await;
    Ok(())
}

/// Starts `n` latches on `session`, one on each of the fresh paths `parent/e0` .. `parent/e{n-1}`
/// (`parent` exists), all at once, and returns them once every one has its node.
async fn start_latches(session: &Session, parent: &str, n: usize) -> Result<Vec<LeaderLatch>> {
    let mut started = Vec::with_capacity(n);
    for i in 0..n {
        // `start` only spawns the latch's task: the n creates are in flight together.
        started.push(
            LeaderLatch::builder(session, format!("{parent}/e{i}"))
                .id(format!("rust-{i}"))
                .start()
                .await?,
        );
    }
    let joined = bounded(
        || format!("{n} latches on one session did not all join under {parent}"),
        futures::future::join_all(started.iter().map(|l| l.wait_joined(WAIT))),
    )
    .await?;
    joined.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(started)
}

async fn many(target: &ZooKeeper, latches: usize) -> Result<()> {
    let session = connect_one(target.connect_string()).await?;
    let parent = fresh_path("many");
    ensure_path(&session, &parent).await?;
    let rss_before = rss_kb()?;
    let t0 = Instant::now();
    let started = start_latches(&session, &parent, latches).await?;
    let elapsed = t0.elapsed();
    let rss_after = rss_kb()?;
    eprintln!("bench: many N={latches}: RSS {rss_before} kB before, {rss_after} kB after");
    figure(
        "many_start_ms",
        format_args!("{:.3}", elapsed.as_secs_f64() * 1e3),
        "ms",
    );
    figure(
        "rss_kb_per_latch",
        format_args!(
            "{:.2}",
            (rss_after as f64 - rss_before as f64) / latches as f64
        ),
        "kb",
    );

    for latch in &started {
        latch.close().await?;
    }
    session.close().await?;
    Ok(())
}

async fn idle(target: &ZooKeeper, latches: usize, timeout: Duration) -> Result<()> {
    let packets = Packets::calibrate(first_host(target.connect_string())).await?;
    let session = connect_with_timeout(target.connect_string(), timeout).await?;
    let parent = fresh_path("idle");
    ensure_path(&session, &parent).await?;
    let t0 = Instant::now();
    let started = start_latches(&session, &parent, latches).await?;
    let led = bounded(
        || format!("{latches} latches on one session did not all lead under {parent}"),
        futures::future::join_all(started.iter().map(LeaderLatch::await_leadership)),
    )
    .await?;
    led.into_iter().collect::<Result<Vec<_>, _>>()?;
    eprintln!(
        "bench: idle N={latches}: all lead after {:?} (session timeout {:?} asked, {:?} negotiated)",
        t0.elapsed(),
        timeout,
        session.negotiated_timeout()
    );

    tokio::time::sleep(IDLE_SETTLE).await;
    let start = packets.read().await?;
    tokio::time::sleep(IDLE_WINDOW).await;
    let end = packets.read().await?;
    let leading = started.iter().filter(|l| l.has_leadership()).count();
    if leading != latches {
        return Err(
            format!("only {leading} of {latches} latches still lead after the window").into(),
        );
    }
    let per_s = packets_per_second(start, end, packets.per_read);
    eprintln!(
        "bench: idle N={latches}: {} packets in {:?}, less {} for the closing read",
        end.packets.saturating_sub(start.packets),
        end.at.saturating_duration_since(start.at),
        packets.per_read
    );
    figure(
        "idle_packets_per_s",
        format_args!("{per_s:.2}"),
        "packets/s",
    );

    futures::future::join_all(started.iter().map(LeaderLatch::close)).await;
    session.close().await?;
    Ok(())
}

/// Serves an embedded server until stdin closes.
async fn server() -> Result<()> {
    let server = embedded_server().start().await?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "connect {}", server.connect_string())?;
    out.flush()?;
    drop(out);
    eprintln!(
        "bench: serving ZooKeeper at {} (tickTime {TICK:?}, fsync on) until stdin closes",
        server.connect_string()
    );
    until_stdin_closes().await?;
    drop(server);
    Ok(())
}

/// Returns once this process's stdin is closed (the `server` and `cluster` workloads serve until
/// then).
async fn until_stdin_closes() -> Result<()> {
    tokio::task::spawn_blocking(|| {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 4096];
        while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
    })
    .await?;
    Ok(())
}

async fn run(args: Args) -> Result<()> {
    match args.workload {
        Workload::Server => return server().await,
        // Both start (or are given) a three-server ensemble, not the embedded server.
        Workload::Cluster => return fleet::serve().await,
        Workload::Fleet(params) => return fleet::run(args.connect, params).await,
        _ => {}
    }
    if let (Workload::PoolReplica(replica), Some(connect)) = (args.workload, &args.connect) {
        return pool::replica(connect, replica).await;
    }
    let target = ZooKeeper::given_or_embedded(args.connect, embedded_server()).await?;
    eprintln!("bench: ZooKeeper is {}", target.describe());
    match args.workload {
        Workload::Handover { candidates, rounds } => handover(&target, candidates, rounds).await,
        Workload::Join { candidates } => join(&target, candidates).await,
        Workload::Lock { clients, seconds } => lock(&target, clients, seconds).await,
        Workload::Many { latches } => many(&target, latches).await,
        Workload::Idle { latches, timeout } => idle(&target, latches, timeout).await,
        Workload::Floor { rounds, seconds } => floor(&target, rounds, seconds).await,
        Workload::Pool(params) => pool::run(&target, params).await,
        Workload::PoolReplica(_) => Err("`pool-replica` needs --connect".into()),
        Workload::Server => server().await,
        Workload::Cluster => fleet::serve().await,
        Workload::Fleet(params) => {
            fleet::run(Some(target.connect_string().to_owned()), params).await
        }
    }
}

fn main() -> ExitCode {
    common::init_tracing();
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if matches!(raw.first().map(String::as_str), Some("-h" | "--help")) {
        eprintln!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let args = match parse_args(&raw) {
        Ok(args) => args,
        Err(why) => {
            eprintln!("bench: {why}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return common::exit_code(Err(e.into())),
    };
    common::exit_code(
        runtime
            .block_on(run(args))
            .map_err(|e| -> Box<dyn std::error::Error> { e }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Result<Args, String> {
        let v: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        parse_args(&v)
    }

    #[test]
    fn workloads_and_connect_are_parsed() {
        assert_eq!(
            args("handover 20 200"),
            Ok(Args {
                connect: None,
                workload: Workload::Handover {
                    candidates: 20,
                    rounds: 200
                }
            })
        );
        assert_eq!(
            args("--connect h1:2181,h2:2181 lock 4 10"),
            Ok(Args {
                connect: Some("h1:2181,h2:2181".into()),
                workload: Workload::Lock {
                    clients: 4,
                    seconds: 10
                }
            })
        );
        assert_eq!(
            args("join 200").map(|a| a.workload),
            Ok(Workload::Join { candidates: 200 })
        );
        assert_eq!(
            args("many 1000").map(|a| a.workload),
            Ok(Workload::Many { latches: 1000 })
        );
        assert_eq!(
            args("idle 1000").map(|a| a.workload),
            Ok(Workload::Idle {
                latches: 1000,
                timeout: Duration::from_secs(10)
            })
        );
        assert_eq!(
            args("--connect h:1 idle 100 30").map(|a| a.workload),
            Ok(Workload::Idle {
                latches: 100,
                timeout: Duration::from_secs(30)
            })
        );
        assert_eq!(
            args("floor 200").map(|a| a.workload),
            Ok(Workload::Floor {
                rounds: 200,
                seconds: 10
            })
        );
        assert_eq!(
            args("floor 200 3").map(|a| a.workload),
            Ok(Workload::Floor {
                rounds: 200,
                seconds: 3
            })
        );
        assert_eq!(args("server").map(|a| a.workload), Ok(Workload::Server));
        assert_eq!(args("cluster").map(|a| a.workload), Ok(Workload::Cluster));
        assert_eq!(
            args("fleet 2000").map(|a| a.workload),
            Ok(Workload::Fleet(fleet::Params {
                sessions: 2000,
                timeout: Duration::from_secs(10)
            }))
        );
        assert_eq!(
            args("--connect a:1,b:1,c:1 fleet 100 2").map(|a| a.workload),
            Ok(Workload::Fleet(fleet::Params {
                sessions: 100,
                timeout: Duration::from_secs(2)
            }))
        );
    }

    #[test]
    fn bad_arguments_are_rejected_with_a_reason() {
        for (line, says) in [
            ("", "no workload"),
            ("handover 1 10", "N (candidates)"),
            ("handover 20", "takes N R"),
            ("handover 20 x", "R (rounds)"),
            ("lock 1 0", "S (seconds)"),
            ("floor 200 0", "S (seconds)"),
            ("floor 200 3 1", "takes R [S]"),
            ("join -3", "N (candidates)"),
            ("many 10 10", "takes N"),
            ("idle", "takes N [T]"),
            ("idle 10 10 10", "takes N [T]"),
            ("idle 0", "N (latches)"),
            ("idle 10 0", "T (session timeout"),
            ("idle 10 1.5", "T (session timeout"),
            ("bogus 1", "unknown workload"),
            ("--connect", "needs HOSTS"),
            ("--connect server", "no workload"),
            ("--connect h:1 server", "no --connect"),
            ("join 5 --connect h:1", "takes N"),
            ("fleet", "takes N [T]"),
            ("fleet 1", "N (sessions)"),
            ("fleet 10 0", "T (session timeout"),
            ("fleet 10 10 10", "takes N [T]"),
            ("--connect h:1 cluster", "no --connect"),
            ("cluster 3", "no arguments"),
        ] {
            let err = args(line).expect_err(line);
            assert!(err.contains(says), "{line:?}: {err}");
        }
    }

    #[test]
    fn idle_rate_takes_out_the_closing_read() {
        let t = Instant::now();
        let at = |ms: u64, packets: u64| Reading {
            packets,
            at: t + Duration::from_millis(ms),
        };
        // 9 packets in 10 s, one of them the closing read: 0.8 a second.
        let rate = packets_per_second(at(0, 100), at(10_000, 109), 1.0);
        assert!((rate - 0.8).abs() < 1e-9, "{rate}");
        // Nothing but the read: zero, never negative.
        assert_eq!(packets_per_second(at(0, 5), at(10_000, 5), 1.0), 0.0);
        assert!(packets_per_second(at(0, 5), at(0, 9), 1.0).is_nan());
    }

    #[test]
    fn mntr_goes_to_the_first_host() {
        assert_eq!(first_host("127.0.0.1:2181"), "127.0.0.1:2181");
        assert_eq!(first_host("a:1,b:2,c:3/chroot/x"), "a:1");
        assert_eq!(first_host("a:1/chroot"), "a:1");
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), Some(100.0));
        assert_eq!(percentile(&v, 0.99), Some(198.0));
        assert_eq!(percentile(&[3, 1, 2], 0.5), Some(2));
        assert_eq!(percentile(&[7], 0.99), Some(7));
        assert_eq!(percentile::<i64>(&[], 0.5), None);
    }

    #[test]
    fn window_counts_take_out_the_read_and_the_scaled_background() {
        let t = Instant::now();
        let at = |ms: u64, packets: u64| Reading {
            packets,
            at: t + Duration::from_millis(ms),
        };
        // 50 ms of control with 4 background packets (and 1 for the read): 2 expected in 25 ms.
        let (count, background) = window_requests((at(0, 100), at(50, 105)), at(75, 111), 1.0);
        assert!((background - 2.0).abs() < 1e-9, "{background}");
        assert!((count - 3.0).abs() < 1e-9, "{count}");
        // Nothing in the background: the difference less the read.
        let (count, background) = window_requests((at(0, 10), at(50, 10)), at(60, 14), 0.0);
        assert_eq!((count, background), (4.0, 0.0));
    }
}
