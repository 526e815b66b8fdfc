//! Seeded fault trials: a three-server ensemble, contenders in this process and in `zkr run`
//! children, a random schedule of faults, and the [history checker](zookeeper_recipes_testing::history) at the end.
//!
//! One trial ([`run_trial`]):
//!
//! 1. starts a [`TestingCluster`] of three real servers, with the `syncLimit` of the trial's
//!    [`Setup`] (drawn from the seed: in some trials a follower cut off from its peers keeps
//!    answering its clients for longer than their session timeout);
//! 2. starts the contenders, each session behind its own [`FaultProxy`] (so its link can be cut
//!    or blackholed):
//!    - three [`LeaderLatch`]es (`latch-0..2`, one per in-process session) on `<root>/latch`,
//!      guarding the fenced resource `latch-row`; `latch-2` has the policy of the trial's
//!      [`Setup`], [`ErrorPolicy::SessionExpired`] (it keeps its term through a suspension
//!      until its deadline) or [`ErrorPolicy::Standard`] (it ends its term at a suspension, as
//!      the others do);
//!    - a [`LeaderSelector`] (`selector-0`), an [`InterProcessMutex`] holder that takes and
//!      releases the lock over and over (`mutex-1`), and two `zkr run --requeue` children
//!      (`zkr-0`, `zkr-1`, separate processes with sessions of their own) on `<root>/lock`,
//!      guarding the fenced resource `lock-row`. Latch (`latch-`) and lock (`lock-`) nodes never
//!      share a path;
//!    - a [`ScheduledJob`] on `<root>/job` (`every(300 ms)`, catch-up `all`), one replica per
//!      in-process session (`job-0..2`; `job-2` has latch-2's drawn policy), whose runs write
//!      to the fenced resource `job-row` with the run's token while the term is valid; a
//!      restart of an in-process contender restarts the replica on its session too (taken
//!      down by `close()` and by `drain()` in turn: a run going on is cut off, or finishes
//!      first);
//! 3. every leader writes to its path's resource while it leads: in-process ones check
//!    [`Leadership::is_valid`] and write with the term's token; a `zkr run` child's command is a
//!    `bash` loop that sends `"$ZK_LEADER_ID $ZK_FENCING_TOKEN"` lines to the resource's TCP port
//!    (bash's `/dev/tcp`) every 50 ms, so a stale leader's late write is really attempted. Each
//!    resource is a [`Fence`] that records every write it receives, accepted or rejected;
//! 4. runs a schedule of rounds drawn from the seed ([`plan`]): each round does one or two
//!    faults ([`FaultKind`]: to servers, to the links between servers, to clients' links, to
//!    sessions and processes), and in two rounds of five one of time or operations on top
//!    ([`FaultKind::TIME`]: a host suspended, with its boot and wall clocks standing still
//!    through the session's [`TestClock`] and its work held, then resumed with both clocks
//!    jumping; a job replica's wall clock stepped or skewed from its start; the quorum leader
//!    silent past `syncLimit x tickTime`; a rolling restart that changes `maxSessionTimeout`),
//!    holds them for a while, then heals everything (servers back and in the quorum, links
//!    healed, frozen processes woken, suspended hosts resumed, clocks set right, closed
//!    contenders started again) and measures the time to a leader on each path;
//! 5. closes every contender, waits for the election paths to be empty (a node of a killed
//!    process goes when the server expires its session), and checks the recorded
//!    [`History`]: no overlapping terms, rising tokens, no stale write accepted, a leader within
//!    session timeout + 2 s after each heal, no node left. The job is paused first and waited
//!    for until no slot is open, then closed; its runs are checked as terms of their own
//!    ([`JOB_ELECTION`]: runs never overlap in valid time, tokens never fall from one start to
//!    the next, no stale write to `job-row` accepted) and against its slot records
//!    ([`check_job`]: each slot recorded succeeded by exactly one run, every record's token one
//!    of its runs', nothing left `running`). Work is also checked as it really ran, not as long
//!    as its term was valid ([`check_late_work`]: a job run or a selector's closure that had not
//!    stopped when a successor's term began), no run may begin before its slot's time by the
//!    host's wall clock, which is the servers' ([`check_early_slots`]), a term that a host's
//!    suspend outlived must end at once on the resume, and sessions replaced are counted (those
//!    that no fault of their round explains are listed: a silent leader or a rolling restart
//!    must keep every session). The history is then replayed against the protocol's model
//!    (trace validation, `model/README.md`): claims, term ends, fenced writes, sessions
//!    heard expired, and the job's runs and slot records as the model's actions and properties
//!    allow them ([`TrialReport::trace_replay`]; a divergence fails the trial); [`TrialConfig::histories`] or `ZKR_HISTORIES` writes the
//!    history out for `zookeeper-recipes-model replay`.
//!
//! # Reproducing
//! The seed drives the schedule (which faults, on what, for how long, in what order), through a
//! small xorshift generator: no wall-clock randomness. The processes themselves run on real
//! time, so a replay repeats the schedule, not every interleaving. [`TrialReport::summary`]
//! prints the seed and the schedule; `rigs/tests/fault_trials.rs` replays one with `ZKR_SEED=<n>`.
//!
//! # Requirements
//! ZooKeeper and Java as for the rest of the harness, `bash` (for its `/dev/tcp`), and the `zkr`
//! binary ([`TrialConfig::new`] takes its path). Trials are heavy (three JVMs): run them one
//! after another.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use zookeeper_recipes::job::{
    CatchUp, JobAdmin, MAX_HISTORY, Schedule, ScheduledJob, SkewedClock, SlotRecord, SlotRun,
    SlotState, SystemClock, WallClock,
};
use zookeeper_recipes::{BootTime, TestClock};
use zookeeper_recipes::{
    ErrorPolicy, Fence, FencingToken, InterProcessMutex, LatchEvent, LeaderLatch, LeaderSelector,
    Leadership, Session,
};
use zookeeper_recipes_model::trace::{self as model_trace, ReplayReport, Trace};
use zookeeper_recipes_testing::history::{History, Term, Violation, Write};
use zookeeper_recipes_testing::{
    FaultProxy, HarnessError, Result, ServerMode, TestingCluster, expire_session, unique_path,
};

/// Locks a mutex, taking the data of a poisoned one (a panicked trial task has already failed
/// the trial; its book is still worth reporting).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// [`HarnessError::Io`] with a context, as the harness builds it.
fn io_error(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> HarnessError {
    let context = context.into();
    move |source| HarnessError::Io { context, source }
}

/// The election name (and path suffix) of the latches.
pub const LATCH_ELECTION: &str = "latch";
/// The election name (and path suffix) of the selector, the mutex holder and the `zkr run`
/// children.
pub const LOCK_ELECTION: &str = "lock";
const ELECTIONS: [&str; 2] = [LATCH_ELECTION, LOCK_ELECTION];
/// The election name (and path suffix) of the scheduled job: its terms in the history are the
/// job's runs, one per slot started, and its resource is `job-row`. The job's own election is
/// under `<root>/job/leader`.
pub const JOB_ELECTION: &str = "job";
/// The replicas of the scheduled job, one per in-process session (`job-i` on session `i`):
/// they share their session with the latches, the selector and the mutex holder, so every fault
/// to a session or its link reaches a replica too. A restart of an in-process contender
/// restarts the job replica on its session as well (so a run is cut off mid-slot).
const JOB_IDS: [&str; SESSIONS] = ["job-0", "job-1", "job-2"];
/// The job's period (on the epoch's grid, catch-up `all`).
const JOB_EVERY: Duration = Duration::from_millis(300);
/// In-process sessions, each behind its own proxy (links `0..SESSIONS`).
const SESSIONS: usize = 3;
/// `zkr run` children, each behind its own proxy (links `SESSIONS..SESSIONS + CHILDREN`).
const CHILDREN: usize = 2;
const LINKS: usize = SESSIONS + CHILDREN;
/// Sessions `0..EXPIRABLE_SESSIONS` may be expired from outside. The last session hosts
/// `latch-2`, whose [`ErrorPolicy::SessionExpired`] keeps a term through a suspension until its
/// deadline: safe against a session that expires by timeout (the server waits at least the
/// timeout after it last heard from the client), not against one closed on the server at once by
/// a twin (Curator's `KillSession`), which no real network fault does.
const EXPIRABLE_SESSIONS: usize = SESSIONS - 1;
const SERVERS: usize = 3;
/// How often an in-process leader writes.
const WRITE_EVERY: Duration = Duration::from_millis(25);
/// Bound on the harness's own waits that do not measure the recipes (a JVM restart, a child
/// exiting): generous, for a loaded two-core machine.
const HARNESS_BOUND: Duration = Duration::from_secs(40);
/// How soon after its host resumes a term that the suspend outlived must have ended: the
/// session's deadline timers wake on the clock's jump, so this is scheduling time (generous,
/// for a loaded two-core machine). Later is a term running on after a suspend.
const RESUME_BOUND: Duration = Duration::from_secs(1);
/// How early a run may start by the host's wall clock (the ensemble's: its servers run here)
/// and still count as on time: `Stat.mtime` is whole milliseconds.
const EARLY_SLACK_MS: i64 = 2;

// ---------------------------------------------------------------------------------------------
// The seeded generator

/// A small xorshift64* generator: the one source of randomness of a schedule.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value, zero included).
    pub fn new(seed: u64) -> Self {
        // splitmix64 of the seed, so that nearby seeds give unrelated streams (never zero).
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        usize::try_from(self.next_u64() % n as u64).unwrap_or(0)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    /// A duration in `[lo, hi]`, to the millisecond.
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (lo_ms, hi_ms) = (lo.as_millis() as u64, hi.as_millis() as u64);
        if hi_ms <= lo_ms {
            return lo;
        }
        Duration::from_millis(lo_ms + self.next_u64() % (hi_ms - lo_ms + 1))
    }
}

// ---------------------------------------------------------------------------------------------
// The schedule

/// The kinds of fault a trial does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum FaultKind {
    /// `SIGKILL` a server; restart it at the heal.
    KillServer,
    /// `SIGKILL` whichever server is the quorum leader at that moment; restart it at the heal.
    KillLeader,
    /// `SIGSTOP` a server; `SIGCONT` at the heal.
    PauseServer,
    /// `SIGKILL` two servers: no quorum, no leader anywhere, every session suspended; restart
    /// both at the heal. The time to a leader after this heal is the ensemble's and the
    /// sessions' whole recovery.
    LoseQuorum,
    /// Reset one client's link (its proxy refuses connections) until the heal.
    CutLink,
    /// Pass nothing on one client's link (a partition) until the heal.
    BlackholeLink,
    /// Hold back the replies on one client's link for a moment, then cut it: requests the server
    /// applied (a create, a delete) lose their replies. Healed at the heal.
    LoseReplies,
    /// `SIGSTOP` a `zkr run` child and its command's process group (a VM freeze) past its session
    /// timeout; `SIGCONT` at the heal. The child that leads at that moment, if one does.
    FreezeProcess,
    /// Expire an in-process session on the servers (Curator's `KillSession`, its link cut first).
    ExpireSession,
    /// Close a contender (a `zkr run` child by `SIGTERM`); start it again at the heal.
    RestartContender,
    /// `SIGKILL` a `zkr run` child (its command dies with it); start a new one at the heal.
    KillProcess,
    /// Cut a follower off from its peers, silently, while its clients still reach it (one
    /// that serves an in-process leader's session if one does, chosen when it happens): it answers them from its own state for up to `syncLimit x tickTime`
    /// while the quorum may expire their sessions. Healed at the heal.
    IsolateFollower,
    /// Cut the quorum leader of that moment off from its peers while its clients still reach
    /// it: it steps down after `syncLimit x tickTime`, the other two elect a leader.
    IsolateLeader,
    /// Split the ensemble into a minority of one server (leader or follower, as it falls) and
    /// a majority of two that cannot reach each other; clients reach both sides.
    SplitMinority,
    /// Cut one direction between a follower (chosen as for [`FaultKind::IsolateFollower`]) and
    /// the leader of that moment: what one sends the other does not receive, the other way
    /// still flows.
    OneWayCut,
    /// The host of an in-process session suspends (a laptop lid, a hibernated VM): its link
    /// passes nothing, its boot clock stands still (the session's [`TestClock`]: what its
    /// timers and deadlines read) and its work is held at its next write, as a stopped process
    /// is; at the heal the clock jumps to the real time at once (the suspend counted, as
    /// `CLOCK_BOOTTIME` counts it), the work goes on, then the link heals. Held past the
    /// session timeout, so that the quorum expires the session and another leads meanwhile.
    Suspend,
    /// One job replica's wall clock is off: stepped now by an offset, or the replica restarted
    /// with it (a template VM, a bad NTP source); stepped back at the heal. Offsets within and
    /// far beyond the job's clock tolerance ([`SKEWS`]).
    SkewClock,
    /// `SIGSTOP` the quorum leader of that moment for longer than `syncLimit x tickTime`: a
    /// host that dies silently, without a reset; the followers wait out the sync limit, then
    /// elect another. Leases lapse meanwhile; sessions must not be thrown away.
    SilentLeader,
    /// Restart every server in turn with another `maxSessionTimeout` (a rolling configuration
    /// change): sessions that move to a restarted server renegotiate their timeout, down or
    /// back up ([`ROLLING_MAX`]).
    RollingRestart,
}

impl FaultKind {
    /// Every kind, in table order: [`CLASSIC`](Self::CLASSIC), then [`TIME`](Self::TIME).
    pub const ALL: [FaultKind; 19] = {
        let mut all = [FaultKind::KillServer; 19];
        let mut i = 0;
        while i < Self::CLASSIC.len() {
            all[i] = Self::CLASSIC[i];
            i += 1;
        }
        while i < all.len() {
            all[i] = Self::TIME[i - Self::CLASSIC.len()];
            i += 1;
        }
        all
    };

    /// The kinds of time and everyday operations, drawn by [`plan`] from a generator of their
    /// own, so that the rounds every seed drew before they came stay what they were.
    pub const TIME: [FaultKind; 4] = [
        FaultKind::Suspend,
        FaultKind::SkewClock,
        FaultKind::SilentLeader,
        FaultKind::RollingRestart,
    ];

    /// The kinds drawn first for every round.
    const CLASSIC: [FaultKind; 15] = [
        FaultKind::KillServer,
        FaultKind::KillLeader,
        FaultKind::PauseServer,
        FaultKind::LoseQuorum,
        FaultKind::CutLink,
        FaultKind::BlackholeLink,
        FaultKind::LoseReplies,
        FaultKind::FreezeProcess,
        FaultKind::ExpireSession,
        FaultKind::RestartContender,
        FaultKind::KillProcess,
        FaultKind::IsolateFollower,
        FaultKind::IsolateLeader,
        FaultKind::SplitMinority,
        FaultKind::OneWayCut,
    ];

    /// A short name for tables.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::KillServer => "kill-server",
            FaultKind::KillLeader => "kill-leader",
            FaultKind::PauseServer => "pause-server",
            FaultKind::LoseQuorum => "lose-quorum",
            FaultKind::CutLink => "cut-link",
            FaultKind::BlackholeLink => "blackhole",
            FaultKind::LoseReplies => "lose-replies",
            FaultKind::FreezeProcess => "freeze",
            FaultKind::ExpireSession => "expire",
            FaultKind::RestartContender => "restart",
            FaultKind::KillProcess => "kill-zkr",
            FaultKind::IsolateFollower => "isolate-follower",
            FaultKind::IsolateLeader => "isolate-leader",
            FaultKind::SplitMinority => "split",
            FaultKind::OneWayCut => "one-way-cut",
            FaultKind::Suspend => "suspend",
            FaultKind::SkewClock => "skew-clock",
            FaultKind::SilentLeader => "silent-leader",
            FaultKind::RollingRestart => "rolling-restart",
        }
    }

    fn is_server_fault(self) -> bool {
        matches!(
            self,
            FaultKind::KillServer
                | FaultKind::KillLeader
                | FaultKind::PauseServer
                | FaultKind::LoseQuorum
                | FaultKind::IsolateFollower
                | FaultKind::IsolateLeader
                | FaultKind::SplitMinority
                | FaultKind::OneWayCut
                | FaultKind::SilentLeader
                | FaultKind::RollingRestart
        )
    }
}

/// The wall-clock offsets of [`FaultKind::SkewClock`], in milliseconds, and whether the replica
/// is restarted with it (else its running clock steps): an hour either way, thirty days
/// ahead, and two seconds either way (within the job's tolerance: it runs on, by the
/// ensemble's clock).
pub const SKEWS: [(i64, bool); 6] = [
    (3_600_000, false),
    (-3_600_000, false),
    (30 * 86_400_000, true),
    (3_600_000, true),
    (2_000, false),
    (-2_000, true),
];

/// The `maxSessionTimeout` of a [`FaultKind::RollingRestart`], in percent of the trials'
/// session timeout; 0 is back to the cluster's own (60 s).
pub const ROLLING_MAX: [u32; 3] = [50, 75, 0];

/// The lowest session timeout a [`FaultKind::RollingRestart`] may give a session: every session
/// (and `zkr` child) of a trial declares it as its floor (`session_timeout_floor`), as an
/// operator whose servers' limits change must, since the session cannot see what a reconnect
/// renegotiates (`docs/decisions/0001-no-relay.md`).
pub fn session_timeout_floor(session_timeout: Duration) -> Duration {
    let lowest = ROLLING_MAX
        .iter()
        .filter(|p| **p > 0)
        .min()
        .copied()
        .unwrap_or(100);
    session_timeout * lowest / 100
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One fault and its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// What is done.
    pub kind: FaultKind,
    /// To which server, link, session, contender or child (an index; unused for
    /// [`FaultKind::KillLeader`] and [`FaultKind::IsolateLeader`], whose target is found when
    /// it happens; for [`FaultKind::IsolateFollower`] which follower, 0 or 1, in index order,
    /// among those serving an in-process leader's session if any do, else among all;
    /// for [`FaultKind::OneWayCut`] which follower (bit 0) and which way (bit 1 clear: the
    /// follower's bytes to the leader are held, set: the leader's bytes to the follower)).
    pub target: usize,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            FaultKind::KillLeader => write!(f, "kill-leader"),
            FaultKind::IsolateLeader => write!(f, "isolate-leader"),
            FaultKind::IsolateFollower => write!(f, "isolate follower {}", self.target % 2),
            FaultKind::SplitMinority => write!(f, "split: server {} alone", self.target),
            FaultKind::OneWayCut => {
                let (from, to) = if self.target & 2 == 0 {
                    ("follower", "leader")
                } else {
                    ("leader", "follower")
                };
                write!(
                    f,
                    "one-way cut: follower {}'s {from} -> {to} held",
                    self.target % 2
                )
            }
            FaultKind::KillServer | FaultKind::PauseServer => {
                write!(f, "{} server {}", self.kind, self.target)
            }
            FaultKind::LoseQuorum => write!(f, "lose-quorum: all but server {}", self.target),
            FaultKind::Suspend => write!(f, "suspend session-{}'s host", self.target),
            FaultKind::SkewClock => {
                let (offset, restart) = SKEWS[(self.target / SESSIONS) % SKEWS.len()];
                write!(
                    f,
                    "skew {}'s wall clock {offset:+} ms ({})",
                    JOB_IDS[self.target % SESSIONS],
                    if restart {
                        "restarted with it"
                    } else {
                        "stepped"
                    }
                )
            }
            FaultKind::SilentLeader => write!(f, "silent-leader: SIGSTOP past the sync limit"),
            FaultKind::RollingRestart => match ROLLING_MAX[self.target % ROLLING_MAX.len()] {
                0 => write!(f, "rolling-restart: maxSessionTimeout back to 60 s"),
                p => write!(
                    f,
                    "rolling-restart: maxSessionTimeout {p}% of the session timeout"
                ),
            },
            FaultKind::CutLink | FaultKind::BlackholeLink | FaultKind::LoseReplies => {
                write!(f, "{} {}", self.kind, link_name(self.target))
            }
            FaultKind::ExpireSession => write!(f, "expire session-{}", self.target),
            // The leading child is frozen if one leads; the log says which one was.
            FaultKind::FreezeProcess => {
                write!(f, "freeze the leading zkr (else zkr-{})", self.target)
            }
            FaultKind::KillProcess => write!(f, "{} zkr-{}", self.kind, self.target),
            FaultKind::RestartContender => {
                write!(
                    f,
                    "restart {}",
                    CONTENDERS[self.target % CONTENDERS.len()].id
                )
            }
        }
    }
}

/// One round: faults done together, held for a while, then healed; then a quiet spell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Round {
    /// The faults, done in this order.
    pub faults: Vec<Fault>,
    /// How long they are held before the heal.
    pub hold: Duration,
    /// How long the world stays whole after a leader is back on every path.
    pub settle: Duration,
}

fn link_name(link: usize) -> String {
    if link < SESSIONS {
        format!("session-{link}'s link")
    } else {
        format!("zkr-{}'s link", link - SESSIONS)
    }
}

/// The schedule of `rounds` rounds for `seed`: a pure function of its arguments.
///
/// Each round has one fault, or two (one time in three) on different targets, at most one of
/// them on a server (the quorum survives a round; it is the clients' faults that are combined).
/// Holds range from a tenth of the session timeout to two and a half times it; a frozen process
/// is held past its session timeout (1.5 to 3 times it).
///
/// Then, from a generator of their own (so that the faults drawn before stay what they were),
/// two rounds in five get one fault of time or operations more ([`FaultKind::TIME`]), on a
/// target none of the round's faults touches: a suspended host is held past its session
/// timeout (1.5 to 3 times it), a silent quorum leader past `syncLimit x tickTime` (by half a
/// second to a second and a half).
pub fn plan(seed: u64, rounds: usize, session_timeout: Duration) -> Vec<Round> {
    let mut out = classic_plan(seed, rounds, session_timeout);
    let sync_timeout = setup(seed, session_timeout).sync_timeout();
    let mut rng = Rng::new(seed ^ 0x7133_0000_0000);
    for round in &mut out {
        if !rng.chance(40) {
            continue;
        }
        let kind = FaultKind::TIME[rng.below(FaultKind::TIME.len())];
        let target = match kind {
            FaultKind::Suspend => rng.below(SESSIONS),
            FaultKind::SkewClock => rng.below(SESSIONS * SKEWS.len()),
            FaultKind::RollingRestart => rng.below(ROLLING_MAX.len()),
            _ => 0,
        };
        let fault = Fault { kind, target };
        let hold = match kind {
            FaultKind::Suspend => rng.between(session_timeout * 3 / 2, session_timeout * 3),
            FaultKind::SilentLeader => {
                sync_timeout + rng.between(Duration::from_millis(500), Duration::from_millis(1500))
            }
            _ => round.hold,
        };
        if round.faults.iter().any(|f| conflicts(f, &fault)) {
            continue;
        }
        round.faults.push(fault);
        round.hold = round.hold.max(hold);
    }
    out
}

/// The rounds of the kinds drawn first ([`FaultKind::CLASSIC`]).
fn classic_plan(seed: u64, rounds: usize, session_timeout: Duration) -> Vec<Round> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let count = if rng.chance(33) { 2 } else { 1 };
        let mut faults: Vec<Fault> = Vec::with_capacity(count);
        while faults.len() < count {
            let kind = FaultKind::CLASSIC[rng.below(FaultKind::CLASSIC.len())];
            let target = match kind {
                FaultKind::KillServer | FaultKind::PauseServer | FaultKind::LoseQuorum => {
                    rng.below(SERVERS)
                }
                FaultKind::KillLeader | FaultKind::IsolateLeader => 0,
                FaultKind::IsolateFollower => rng.below(2),
                FaultKind::SplitMinority => rng.below(SERVERS),
                FaultKind::OneWayCut => rng.below(4),
                FaultKind::CutLink | FaultKind::BlackholeLink | FaultKind::LoseReplies => {
                    rng.below(LINKS)
                }
                FaultKind::ExpireSession => rng.below(EXPIRABLE_SESSIONS),
                FaultKind::FreezeProcess | FaultKind::KillProcess => rng.below(CHILDREN),
                FaultKind::RestartContender => rng.below(CONTENDERS.len()),
                // Drawn by `plan` only.
                FaultKind::Suspend
                | FaultKind::SkewClock
                | FaultKind::SilentLeader
                | FaultKind::RollingRestart => continue,
            };
            let fault = Fault { kind, target };
            if faults.iter().any(|f| conflicts(f, &fault)) {
                continue;
            }
            faults.push(fault);
        }
        let frozen = faults.iter().any(|f| f.kind == FaultKind::FreezeProcess);
        let hold = if frozen {
            rng.between(session_timeout * 3 / 2, session_timeout * 3)
        } else {
            rng.between(session_timeout / 10, session_timeout * 5 / 2)
        };
        let settle = rng.between(Duration::from_millis(200), Duration::from_millis(800));
        out.push(Round {
            faults,
            hold,
            settle,
        });
    }
    out
}

/// The ensemble's and the contenders' settings of one trial, drawn from its seed
/// ([`setup`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Setup {
    /// The servers' `tickTime`.
    pub tick: Duration,
    /// The servers' `syncLimit`, in ticks: how long a follower cut off from its peers keeps
    /// answering its clients. In some trials `syncLimit x tickTime` is at least the session
    /// timeout, so that a cut-off follower still answers a client whose session the quorum
    /// has expired.
    pub sync_limit: u32,
    /// The error policy of `latch-2` (the latch whose session is never expired from outside).
    pub latch_policy: ErrorPolicy,
}

impl Setup {
    /// `syncLimit x tickTime`.
    pub fn sync_timeout(&self) -> Duration {
        self.tick * self.sync_limit
    }
}

impl fmt::Display for Setup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tick {} ms x syncLimit {} = {} ms, latch-2 {:?}",
            self.tick.as_millis(),
            self.sync_limit,
            self.sync_timeout().as_millis(),
            self.latch_policy
        )
    }
}

/// The settings of the trial of `seed`: a pure function of its arguments, drawn apart from
/// [`plan`] so that a seed's rounds stay what they were.
///
/// `syncLimit x tickTime` (tick 200 ms) is half the session timeout, the session timeout, or
/// one and a half times it, each one time in three; `latch-2` has the Standard or the
/// SessionExpired policy, one time in two.
pub fn setup(seed: u64, session_timeout: Duration) -> Setup {
    let mut rng = Rng::new(seed ^ 0x005E_7A9B);
    let tick = Duration::from_millis(200);
    let halves = [1u32, 2, 3][rng.below(3)];
    let sync = session_timeout * halves / 2;
    let sync_limit = u32::try_from(sync.as_millis().div_ceil(tick.as_millis()))
        .unwrap_or(u32::MAX)
        .max(2);
    let latch_policy = if rng.chance(50) {
        ErrorPolicy::SessionExpired
    } else {
        ErrorPolicy::Standard
    };
    Setup {
        tick,
        sync_limit,
        latch_policy,
    }
}

/// Whether two faults of one round get in each other's way.
fn conflicts(a: &Fault, b: &Fault) -> bool {
    if a.kind.is_server_fault() && b.kind.is_server_fault() {
        return true;
    }
    // What each touches: a link, a child process, a contender.
    let link = |f: &Fault| match f.kind {
        FaultKind::CutLink | FaultKind::BlackholeLink | FaultKind::LoseReplies => Some(f.target),
        FaultKind::ExpireSession | FaultKind::Suspend => Some(f.target),
        // The job replica on that session.
        FaultKind::SkewClock => Some(f.target % SESSIONS),
        FaultKind::FreezeProcess | FaultKind::KillProcess => Some(SESSIONS + f.target),
        FaultKind::RestartContender => CONTENDERS
            .get(f.target)
            .map(|c| c.session.unwrap_or(SESSIONS + c.child.unwrap_or(0))),
        _ => None,
    };
    match (link(a), link(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Contenders

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Latch,
    Selector,
    Mutex,
    Zkr,
}

struct ContenderDef {
    id: &'static str,
    kind: Kind,
    /// The in-process session it uses.
    session: Option<usize>,
    /// The `zkr` child it is.
    child: Option<usize>,
    /// Which connection states end its terms.
    policy: ErrorPolicy,
    /// Its policy is drawn per trial ([`Setup::latch_policy`]) instead of `policy`.
    seeded_policy: bool,
}

const CONTENDERS: [ContenderDef; 7] = [
    ContenderDef {
        id: "latch-0",
        kind: Kind::Latch,
        session: Some(0),
        child: None,
        policy: ErrorPolicy::Standard,
        seeded_policy: false,
    },
    ContenderDef {
        id: "latch-1",
        kind: Kind::Latch,
        session: Some(1),
        child: None,
        policy: ErrorPolicy::Standard,
        seeded_policy: false,
    },
    ContenderDef {
        id: "latch-2",
        kind: Kind::Latch,
        session: Some(2),
        child: None,
        // Keeps its term through a suspension, until its deadline: the deadline's own test
        // (in the trials whose setup gives it this policy).
        policy: ErrorPolicy::SessionExpired,
        seeded_policy: true,
    },
    ContenderDef {
        id: "selector-0",
        kind: Kind::Selector,
        session: Some(0),
        child: None,
        policy: ErrorPolicy::Standard,
        seeded_policy: false,
    },
    ContenderDef {
        id: "mutex-1",
        kind: Kind::Mutex,
        session: Some(1),
        child: None,
        policy: ErrorPolicy::Standard,
        seeded_policy: false,
    },
    ContenderDef {
        id: "zkr-0",
        kind: Kind::Zkr,
        session: None,
        child: Some(0),
        policy: ErrorPolicy::Standard,
        seeded_policy: false,
    },
    ContenderDef {
        id: "zkr-1",
        kind: Kind::Zkr,
        session: None,
        child: Some(1),
        policy: ErrorPolicy::Standard,
        seeded_policy: false,
    },
];

// ---------------------------------------------------------------------------------------------
// Configuration and report

/// How to run one trial.
#[derive(Debug, Clone)]
#[must_use]
pub struct TrialConfig {
    seed: u64,
    zkr: PathBuf,
    session_timeout: Duration,
    rounds: usize,
    histories: Option<PathBuf>,
    diff_sync: bool,
}

impl TrialConfig {
    /// A trial for `seed`, using the `zkr` binary at `zkr`, with a 2 s session timeout and
    /// three rounds.
    pub fn new(seed: u64, zkr: impl Into<PathBuf>) -> Self {
        TrialConfig {
            seed,
            zkr: zkr.into(),
            session_timeout: Duration::from_secs(2),
            rounds: 3,
            histories: None,
            diff_sync: false,
        }
    }

    /// Lets a server that rejoins the quorum catch up by a DIFF, as ZooKeeper does by default
    /// (default off: the trials' servers are always sent a snapshot). Debian's ZooKeeper 3.8.0
    /// can lose committed transactions in a DIFF sync after the restarts the trials make
    /// (ZOOKEEPER-4785, fixed in 3.8.4 and 3.9.2): the rejoined server then misses writes the
    /// quorum acknowledged, and a contender connected to it waits for ever behind a node the
    /// others deleted, or a job reads records that were overwritten. On, the trials show that
    /// server bug (`chaos --diff-sync`); off, they judge the recipes alone.
    pub fn diff_sync(mut self, allowed: bool) -> Self {
        self.diff_sync = allowed;
        self
    }

    /// Writes the trial's history for the model's `replay` (format 1,
    /// [`zookeeper_recipes_model::trace`]) to `DIR/trial-<seed>.json`. Without it, the
    /// directory named by `ZKR_HISTORIES`, if set; else the history is only replayed in memory.
    pub fn histories(mut self, dir: impl Into<PathBuf>) -> Self {
        self.histories = Some(dir.into());
        self
    }

    /// The session timeout of every contender's session (default 2 s).
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How many rounds of faults (default 3).
    pub fn rounds(mut self, rounds: usize) -> Self {
        self.rounds = rounds;
        self
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The bound on the time to a leader after a heal: session timeout + 2 s.
    pub fn leader_bound(&self) -> Duration {
        self.session_timeout + Duration::from_secs(2)
    }
}

/// What one trial did and found.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TrialReport {
    /// The seed.
    pub seed: u64,
    /// The schedule that was planned.
    pub plan: Vec<Round>,
    /// The ensemble's and the contenders' settings.
    pub setup: Setup,
    /// How many faults of each kind were done.
    pub faults: BTreeMap<FaultKind, usize>,
    /// What was done when, for failure messages.
    pub log: Vec<String>,
    /// Every term and fenced write.
    pub history: History,
    /// Every broken promise found in the history (including a leader too late after a heal).
    pub violations: Vec<Violation>,
    /// Nodes left on the election paths after every contender was closed (and the sessions of
    /// killed processes had time to expire).
    pub orphans: Vec<String>,
    /// The time to a leader after each heal, per election.
    pub time_to_leader: Vec<(String, Duration)>,
    /// Things the harness itself saw go wrong (a child that would not exit, a term never
    /// ended); a trial with any fails.
    pub problems: Vec<String>,
    /// How long the trial took.
    pub elapsed: Duration,
    /// The scheduled job's runs (as terms of [`JOB_ELECTION`], one per run) and the writes its
    /// resource received; checked like `history`, their violations are in `violations`.
    pub job_history: History,
    /// The scheduled job's figures.
    pub job: JobFigures,
    /// Broken promises of the scheduled job that the history checker does not see: a slot
    /// recorded succeeded by no run or by two, a record whose token no run had, a slot still
    /// open after the trial closed.
    pub job_violations: Vec<String>,
    /// The job's runs, in the order they started.
    pub job_runs: Vec<JobRun>,
    /// The job's slot records after the trial closed, newest first.
    pub job_records: Vec<SlotRecord>,
    /// Work (a job run, a selector's closure) that really went on after a successor's term
    /// began.
    pub late_work: Vec<String>,
    /// Runs of a slot begun before the slot's time by the ensemble's clock.
    pub early_slots: Vec<String>,
    /// In-process sessions replaced by a new ZooKeeper session.
    pub sessions_replaced: usize,
    /// Of those, the ones no fault of their round explains (see [`FaultKind::SilentLeader`]).
    pub unexplained_replacements: Vec<String>,
    /// For each term that a host's suspend outlived: from the resume to the term's end.
    pub resume_to_end: Vec<Duration>,
    /// The history as the model's trace validation reads it (format 2): claims, term ends
    /// (with why), fenced writes, sessions heard expired, faults, and the scheduled job's terms
    /// (those that started a run), runs and slot records ([`Trace`]).
    pub trace: Trace,
    /// The trace replayed against the model: events, events mapped to a model action, and
    /// every divergence (an event the model does not allow), which fails the trial.
    pub trace_replay: ReplayReport,
    /// Where the trace was written, if it was.
    pub trace_file: Option<PathBuf>,
}

/// One run of the scheduled job, as its closure saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRun {
    /// The replica that ran it.
    pub holder: &'static str,
    /// The slot key.
    pub slot: String,
    /// The attempt the job was given.
    pub attempt: u32,
    /// The term's token.
    pub token: FencingToken,
    /// When the closure began.
    pub start: BootTime,
    /// When it stopped being allowed to act: when it returned with its term valid, else when
    /// its term ended (or its deadline passed); `None` while it runs.
    pub end: Option<BootTime>,
    /// `Some(true)` when the closure returned `Ok` (it wrote for its whole hold, its term
    /// valid), `Some(false)` when it returned an error (its term ended first), `None` when it
    /// never returned (aborted).
    pub ok: Option<bool>,
    /// The ZooKeeper session of its term.
    pub session_id: i64,
    /// When its term began (a successor's work must not begin before this run stopped).
    pub term_start: BootTime,
    /// When the closure really stopped (returned or was aborted), valid or not; `None` while it
    /// runs.
    pub stopped: Option<BootTime>,
    /// The slot's nominal instant (ms since the epoch) for a slot of the schedule.
    pub nominal_ms: Option<i64>,
    /// The host's wall clock when the closure began (the servers' clock: they run here).
    pub started_wall_ms: i64,
}

impl fmt::Display for JobRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} by {} attempt {} token {} from {} to ",
            self.slot, self.holder, self.attempt, self.token, self.start
        )?;
        match self.end {
            Some(end) => write!(f, "{end}")?,
            None => f.write_str("(running)")?,
        }
        match self.ok {
            Some(true) => f.write_str(" ok"),
            Some(false) => f.write_str(" cut off"),
            None => f.write_str(" aborted"),
        }
    }
}

/// What the scheduled job did in one trial.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobFigures {
    /// Runs started (closures called).
    pub runs: usize,
    /// Runs of a slot started before (attempt > 1).
    pub retried: usize,
    /// Runs whose term ended before they were done (they returned an error, or were aborted).
    pub cut_off: usize,
    /// Slot records at the end.
    pub records: usize,
    /// Slots recorded succeeded.
    pub succeeded: usize,
    /// Slots recorded failed.
    pub failed: usize,
    /// Slots recorded skipped for overlap.
    pub skipped: usize,
    /// Slots recorded missed for catch-up or overlap (counting every slot of a folded range).
    pub missed: u64,
    /// Slots not run because the trial paused the job at its end (skipped or missed `paused`).
    pub paused: u64,
    /// Cut-off slots whose retry the pause at the end held back ([`owed_at_pause`]).
    pub owed: usize,
    /// Writes `job-row` accepted.
    pub writes_accepted: usize,
    /// Writes `job-row` rejected.
    pub writes_rejected: usize,
}

impl fmt::Display for JobFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} runs ({} retried, {} cut off); {} slot records: {} succeeded, {} failed, {} skipped, {} missed, {} not run while paused at the end, {} retries held by the pause; {} writes accepted, {} rejected",
            self.runs,
            self.retried,
            self.cut_off,
            self.records,
            self.succeeded,
            self.failed,
            self.skipped,
            self.missed,
            self.paused,
            self.owed,
            self.writes_accepted,
            self.writes_rejected
        )
    }
}

impl TrialReport {
    /// Whether every promise was kept: no violation, no orphan, no problem.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
            && self.orphans.is_empty()
            && self.problems.is_empty()
            && self.job_violations.is_empty()
            && self.late_work.is_empty()
            && self.early_slots.is_empty()
            && self.trace_replay.divergences.is_empty()
    }

    /// How many violations are overlapping terms.
    pub fn overlaps(&self) -> usize {
        self.count(|v| matches!(v, Violation::Overlap { .. }))
    }

    /// How many violations are stale writes accepted.
    pub fn stale_writes_accepted(&self) -> usize {
        self.count(|v| matches!(v, Violation::StaleWriteAccepted { .. }))
    }

    /// How many violations are tokens that did not rise.
    pub fn falling_tokens(&self) -> usize {
        self.count(|v| matches!(v, Violation::TokenNotRising { .. }))
    }

    /// How many violations are heals without a leader in time.
    pub fn late_leaders(&self) -> usize {
        self.count(|v| matches!(v, Violation::NoLeaderAfterHeal { .. }))
    }

    /// Writes the fences rejected (stale writes that were attempted and stopped).
    pub fn writes_rejected(&self) -> usize {
        self.history.writes.iter().filter(|w| !w.accepted).count()
    }

    /// Writes the fences accepted.
    pub fn writes_accepted(&self) -> usize {
        self.history.writes.iter().filter(|w| w.accepted).count()
    }

    /// The longest time to a leader after a heal.
    pub fn worst_time_to_leader(&self) -> Option<Duration> {
        self.time_to_leader.iter().map(|(_, d)| *d).max()
    }

    fn count(&self, f: impl Fn(&Violation) -> bool) -> usize {
        self.violations.iter().filter(|v| f(v)).count()
    }

    /// A multi-line account: the seed, the verdict, every violation, orphan and problem, and
    /// the log of what was done when.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let faults: Vec<String> = self
            .plan
            .iter()
            .map(|r| {
                let f: Vec<String> = r.faults.iter().map(ToString::to_string).collect();
                format!("{} for {} ms", f.join(" + "), r.hold.as_millis())
            })
            .collect();
        let _ = writeln!(
            s,
            "trial seed {} ({}): {}; {} terms, {} writes accepted, {} rejected, worst time to leader {} ms, {:.1} s; {}",
            self.seed,
            if self.passed() { "passed" } else { "FAILED" },
            self.setup,
            self.history.terms.len(),
            self.writes_accepted(),
            self.writes_rejected(),
            self.worst_time_to_leader().unwrap_or_default().as_millis(),
            self.elapsed.as_secs_f64(),
            faults.join("; ")
        );
        let _ = writeln!(s, "  job: {}", self.job);
        let _ = writeln!(
            s,
            "  trace: {} events, {} mapped to model actions, {} divergences; job: {} runs ({} ok, {} cut off, {} aborted), {} records checked, {} attempts with no run{}",
            self.trace_replay.events,
            self.trace_replay.mapped,
            self.trace_replay.divergences.len(),
            self.trace_replay.job.runs,
            self.trace_replay.job.ends_ok,
            self.trace_replay.job.ends_error,
            self.trace_replay.job.ends_aborted,
            self.trace_replay.job.records,
            self.trace_replay.job.attempts_without_run,
            self.trace_file
                .as_ref()
                .map_or_else(String::new, |f| format!(" (written to {})", f.display()))
        );
        if self.sessions_replaced > 0 || !self.resume_to_end.is_empty() {
            let _ = writeln!(
                s,
                "  sessions replaced: {} ({} unexplained); terms a suspend outlived: {}, ended {:?} ms after the resume",
                self.sessions_replaced,
                self.unexplained_replacements.len(),
                self.resume_to_end.len(),
                self.resume_to_end
                    .iter()
                    .map(Duration::as_millis)
                    .collect::<Vec<_>>()
            );
        }
        for v in &self.violations {
            let _ = writeln!(s, "  violation: {v}");
        }
        for v in &self.late_work {
            let _ = writeln!(s, "  late work: {v}");
        }
        for v in &self.early_slots {
            let _ = writeln!(s, "  early slot: {v}");
        }
        for v in &self.unexplained_replacements {
            let _ = writeln!(s, "  unexplained replacement: {v}");
        }
        for v in &self.job_violations {
            let _ = writeln!(s, "  job violation: {v}");
        }
        for d in &self.trace_replay.divergences {
            let text = d.to_string().replace('\n', "\n    ");
            let _ = writeln!(s, "  model divergence at {text}");
        }
        for o in &self.orphans {
            let _ = writeln!(s, "  orphan node: {o}");
        }
        for p in &self.problems {
            let _ = writeln!(s, "  problem: {p}");
        }
        if !self.passed() {
            s.push_str(&self.details());
            let _ = writeln!(s, "  replay with ZKR_SEED={}", self.seed);
        }
        s
    }

    /// The log of what was done and seen when, and every term in order.
    pub fn details(&self) -> String {
        let mut s = String::from("  log:\n");
        for line in &self.log {
            let _ = writeln!(s, "    {line}");
        }
        let _ = writeln!(s, "  terms:");
        let mut terms = self.history.terms.clone();
        terms.sort_by_key(|t| (t.election.clone(), t.start));
        for t in terms {
            let _ = writeln!(s, "    {t}");
        }
        let _ = writeln!(s, "  job runs:");
        for run in &self.job_runs {
            let _ = writeln!(s, "    {run}");
        }
        let _ = writeln!(s, "  job slot records:");
        for r in &self.job_records {
            let _ = writeln!(
                s,
                "    {} {} token {:?} attempt {} runner {:?}{}",
                r.slot,
                r.state.as_str(),
                r.token,
                r.attempt,
                r.runner,
                r.reason
                    .as_deref()
                    .map_or_else(String::new, |why| format!(" ({why})"))
            );
        }
        s
    }
}

// ---------------------------------------------------------------------------------------------
// Recording

/// The in-process sessions whose host is suspended now ([`FaultKind::Suspend`]), by ZooKeeper
/// session id: the work of a term on one of them is held at its next step until the host
/// resumes, as the threads of a stopped host are.
struct Gates {
    suspended: tokio::sync::watch::Sender<BTreeSet<i64>>,
}

impl Gates {
    fn new() -> Arc<Gates> {
        Arc::new(Gates {
            suspended: tokio::sync::watch::channel(BTreeSet::new()).0,
        })
    }

    fn suspend(&self, session: i64) {
        self.suspended.send_modify(|s| {
            s.insert(session);
        });
    }

    fn resume(&self, session: i64) {
        self.suspended.send_modify(|s| {
            s.remove(&session);
        });
    }

    /// Returns at once unless `session`'s host is suspended; else when it resumes.
    async fn wait_running(&self, session: i64) {
        let mut rx = self.suspended.subscribe();
        let _ = rx.wait_for(|s| !s.contains(&session)).await;
    }
}

/// A fenced resource standing for a database row: admits a write only if its token is at least
/// the highest seen, and records every write.
struct Resource {
    name: String,
    fence: Fence,
    writes: Mutex<Vec<Write>>,
    /// The trial's suspended hosts, whose work waits before it writes.
    gates: Arc<Gates>,
}

impl Resource {
    fn new(name: &str, gates: &Arc<Gates>) -> Arc<Resource> {
        Arc::new(Resource {
            name: name.to_owned(),
            fence: Fence::new(),
            writes: Mutex::new(Vec::new()),
            gates: Arc::clone(gates),
        })
    }

    /// One write by `writer` with `token`: admitted or not, recorded in arrival order.
    fn write(&self, writer: &str, token: FencingToken) -> bool {
        let mut writes = lock(&self.writes);
        let accepted = self.fence.admit(token).is_ok();
        writes.push(Write {
            resource: self.name.clone(),
            writer: writer.to_owned(),
            token,
            at: BootTime::now(),
            accepted,
        });
        accepted
    }
}

/// Serves `resource` on a loopback port: each line `ID TOKEN` is one write.
async fn serve_resource(listener: TcpListener, resource: Arc<Resource>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let resource = Arc::clone(&resource);
                conns.spawn(async move {
                    let mut lines = BufReader::new(stream).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        let mut parts = line.split_whitespace();
                        if let (Some(id), Some(Ok(token))) =
                            (parts.next(), parts.next().map(str::parse::<FencingToken>))
                        {
                            resource.write(id, token);
                        }
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// Everything observed live: in-process terms (as the library hands them out), `zkr` terms (as
/// its lines report them), and the log.
#[derive(Default)]
struct Book {
    local: Vec<(&'static str, String, Leadership)>,
    remote: Vec<Term>,
    log: Vec<String>,
    problems: Vec<String>,
    /// Every command process group a `zkr` child reported, to kill should the trial fail.
    groups: Vec<i32>,
    /// The scheduled job's runs, in the order they started.
    runs: Vec<JobRun>,
    /// The selector's closures, as they really ran.
    works: Vec<Work>,
    /// Hosts suspended and resumed ([`FaultKind::Suspend`]).
    suspensions: Vec<Suspension>,
    /// In-process sessions replaced by a new ZooKeeper session: (session index, when, old id,
    /// new id).
    replaced: Vec<(usize, BootTime, i64, i64)>,
    /// The lease deadline of each of `local`'s terms when it was recorded (same index).
    local_leases: Vec<BootTime>,
    /// Why each `zkr` term ended, as its `not_leader` line says: (id, token, reason).
    remote_reasons: Vec<(String, FencingToken, String)>,
    /// The job's terms that started a run (each once), with their lease deadline when first
    /// seen: the job's election in the trace.
    job_terms: Vec<(&'static str, Leadership, BootTime)>,
}

/// Work of a term as it really ran: from its start to when it really stopped (its closure
/// returned or was aborted), not to when its term stopped being valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Work {
    /// The election.
    pub election: &'static str,
    /// Who did it.
    pub holder: String,
    /// The ZooKeeper session of its term.
    pub session_id: i64,
    /// The term's token.
    pub token: FencingToken,
    /// When it began.
    pub start: BootTime,
    /// When it really stopped; `None` while it runs.
    pub end: Option<BootTime>,
}

/// An in-process session's host suspended from `from` to `to` (boot time, which counts it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Suspension {
    /// Which in-process session.
    pub session: usize,
    /// Its ZooKeeper session then.
    pub id: i64,
    /// When the host stopped.
    pub from: BootTime,
    /// When it resumed.
    pub to: BootTime,
}

impl Suspension {
    /// What a suspended host's work or term that ended at `end` is taken to have ended at: the
    /// suspend's start when it spanned it and ended within [`RESUME_BOUND`] of the resume (it
    /// did nothing while the host was stopped, and stopped at once on resume); else `end`.
    fn effective_end(&self, id: i64, start: BootTime, end: BootTime) -> BootTime {
        if id == self.id && start < self.from && end >= self.from && end <= self.to + RESUME_BOUND {
            self.from
        } else {
            end
        }
    }
}

/// Records the selector's closure from its start until dropped.
struct WorkEnds {
    book: Shared,
    index: usize,
}

impl WorkEnds {
    fn start(book: &Shared, election: &'static str, holder: &str, term: &Leadership) -> Self {
        let mut b = lock(book);
        b.works.push(Work {
            election,
            holder: holder.to_owned(),
            session_id: term.session_id(),
            token: term.token(),
            start: BootTime::now(),
            end: None,
        });
        WorkEnds {
            book: Arc::clone(book),
            index: b.works.len() - 1,
        }
    }
}

impl Drop for WorkEnds {
    fn drop(&mut self) {
        let now = BootTime::now();
        if let Some(w) = lock(&self.book).works.get_mut(self.index) {
            w.end = Some(now);
        }
    }
}

type Shared = Arc<Mutex<Book>>;

fn note(book: &Shared, line: String) {
    let at = BootTime::now();
    lock(book).log.push(format!("{at} {line}"));
}

fn problem(book: &Shared, line: String) {
    note(book, format!("PROBLEM: {line}"));
    lock(book).problems.push(line);
}

fn record_local(book: &Shared, election: &'static str, holder: &str, term: &Leadership) {
    let mut b = lock(book);
    if !b.local.iter().any(|(_, _, t)| t == term) {
        b.local.push((election, holder.to_owned(), term.clone()));
        // Never earlier than the lease at the claim: a lease only moves forward.
        b.local_leases.push(term.stop_by());
    }
}

fn to_term(election: &str, holder: &str, term: &Leadership) -> Term {
    Term {
        election: election.to_owned(),
        holder: holder.to_owned(),
        token: term.token(),
        start: term.started_at(),
        end: term.ended_at(),
    }
}

/// Whether `election` has a leader now, as far as this process can see.
fn has_leader(book: &Shared, election: &str) -> bool {
    let b = lock(book);
    b.local
        .iter()
        .any(|(e, _, t)| *e == election && t.is_valid())
        || b.remote
            .iter()
            .any(|t| t.election == election && t.end.is_none())
}

// ---------------------------------------------------------------------------------------------
// zkr children

struct ZkrChild {
    child: Child,
    pid: Pid,
    reader: tokio::task::JoinHandle<()>,
}

/// `zkr run --requeue` whose command writes `writes` times, 50 ms apart, then exits: zkr then
/// relinquishes and queues again, so the lock changes hands without any fault too.
fn zkr_command(
    config: &TrialConfig,
    tick: Duration,
    connect: &str,
    path: &str,
    id: &str,
    port: u16,
    writes: usize,
) -> Command {
    let mut c = Command::new(&config.zkr);
    let script = format!(
        "for i in $(seq {writes}); do echo \"$ZK_LEADER_ID $ZK_FENCING_TOKEN\" >/dev/tcp/127.0.0.1/{port} 2>/dev/null; sleep 0.05; done"
    );
    c.arg("--connect")
        .arg(connect)
        .arg("--session-timeout")
        .arg(format!("{}ms", config.session_timeout.as_millis()))
        .arg("--server-tick-time")
        .arg(format!("{}ms", tick.as_millis()))
        .arg("--session-timeout-floor")
        .arg(format!(
            "{}ms",
            session_timeout_floor(config.session_timeout).as_millis()
        ))
        // The default grace: half of what the lease leaves (a 1 s grace does not fit in a 2 s
        // session's lease).
        .args(["run", path, "--id", id, "--requeue", "--"])
        .args(["bash", "-c", &script])
        .env_remove("ZK_CONNECT")
        .env_remove("ZKR_LOG")
        .stdin(Stdio::null());
    // A diagnosis aid: `ZKR_TRIAL_CHILD_LOG=<filter>` gives the children that `ZKR_LOG`; their
    // log lines land in the trial's account (shown when it fails).
    if let Some(filter) = std::env::var_os("ZKR_TRIAL_CHILD_LOG") {
        c.env("ZKR_LOG", filter);
    }
    c.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    c
}

/// What a `zkr run` child's command writes: `count` lines to the resource's port.
struct Writes {
    port: u16,
    count: usize,
}

fn spawn_zkr(
    config: &TrialConfig,
    tick: Duration,
    book: &Shared,
    connect: &str,
    path: &str,
    id: &'static str,
    writes: Writes,
) -> Result<ZkrChild> {
    let mut child = zkr_command(config, tick, connect, path, id, writes.port, writes.count)
        .spawn()
        .map_err(io_error(format!(
            "starting {} (zkr {})",
            id,
            config.zkr.display()
        )))?;
    let pid = Pid::from_raw(child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0));
    let stderr = child.stderr.take();
    let lines_book = Arc::clone(book);
    let reader = tokio::spawn(async move {
        let Some(stderr) = stderr else { return };
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            zkr_line(&lines_book, id, &line);
        }
    });
    note(book, format!("{id}: started zkr pid {pid}"));
    Ok(ZkrChild { child, pid, reader })
}

/// Takes one line of a `zkr run` child's stderr into the book.
fn zkr_line(book: &Shared, id: &str, line: &str) {
    let Ok(json) = serde_json::from_str::<serde_json::Value>(line) else {
        // Not an event: bash complaining, a panic message. Worth seeing on failure.
        note(book, format!("{id} said: {line}"));
        return;
    };
    let event = json["event"].as_str().unwrap_or_default();
    let token = json["token"].as_i64().map(FencingToken::from_raw);
    let mono = |key: &str| json[key].as_u64().map(BootTime::from_nanos);
    let mut b = lock(book);
    match (event, token) {
        ("leader", Some(token)) => {
            let Some(start) = mono("started_boot_ns") else {
                drop(b);
                problem(
                    book,
                    format!("{id}: leader line without started_boot_ns: {line}"),
                );
                return;
            };
            b.remote.push(Term {
                election: LOCK_ELECTION.to_owned(),
                holder: id.to_owned(),
                token,
                start,
                end: None,
            });
        }
        ("not_leader", Some(token)) => {
            let end = mono("ended_boot_ns");
            let open = b
                .remote
                .iter_mut()
                .rev()
                .find(|t| t.holder == id && t.token == token && t.end.is_none());
            match (open, end) {
                (Some(term), Some(end)) => {
                    term.end = Some(end);
                    if let Some(reason) = json["reason"].as_str() {
                        b.remote_reasons
                            .push((id.to_owned(), token, reason.to_owned()));
                    }
                }
                _ => {
                    drop(b);
                    problem(
                        book,
                        format!("{id}: not_leader without an open term: {line}"),
                    );
                    return;
                }
            }
        }
        ("cmd_started", _) => {
            if let Some(pid) = json["pid"].as_i64().and_then(|p| i32::try_from(p).ok()) {
                b.groups.push(pid);
            }
        }
        _ => {}
    }
    let at = BootTime::now();
    b.log.push(format!("{at} {id}: {line}"));
}

/// Closes the open terms of `id` at `at` (its process is gone without saying so).
fn close_remote_terms(book: &Shared, id: &str, at: BootTime) {
    let mut b = lock(book);
    for term in b.remote.iter_mut() {
        if term.holder == id && term.end.is_none() {
            term.end = Some(at);
        }
    }
}

/// The process groups of `pid`'s children (a `zkr`'s command runs in a group of its own).
fn child_groups(pid: Pid) -> Vec<Pid> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut groups = Vec::new();
    for entry in dir.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // After the command name: state ppid pgrp ...
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let (Some(ppid), Some(pgrp)) = (fields.get(1), fields.get(2)) else {
            continue;
        };
        if ppid.parse::<i32>().ok() == Some(pid.as_raw())
            && let Ok(pgrp) = pgrp.parse::<i32>()
            && pgrp != pid.as_raw()
        {
            groups.push(Pid::from_raw(pgrp));
        }
    }
    groups.sort();
    groups.dedup();
    groups
}

// ---------------------------------------------------------------------------------------------
// In-process contenders

enum Running {
    Latch {
        latch: LeaderLatch,
        stop: CancellationToken,
        task: tokio::task::JoinHandle<()>,
    },
    Selector(LeaderSelector),
    Mutex {
        stop: CancellationToken,
        task: tokio::task::JoinHandle<()>,
    },
    Zkr(ZkrChild),
}

/// What a trial has running.
struct World {
    config: TrialConfig,
    setup: Setup,
    book: Shared,
    cluster: TestingCluster,
    proxies: Vec<FaultProxy>,
    sessions: Vec<Session>,
    paths: BTreeMap<&'static str, String>,
    resources: BTreeMap<&'static str, Arc<Resource>>,
    lock_port: u16,
    contenders: Vec<Option<Running>>,
    rng: Rng,
    /// The scheduled job's path, its replicas (`job-i` on session `i`), its resource, and how
    /// many times a replica was started (to seed each one's holds apart).
    job_path: String,
    jobs: Vec<Option<ScheduledJob>>,
    job_resource: Arc<Resource>,
    job_starts: u64,
    /// How many times a job replica was taken down (every other one drains).
    job_closes: u64,
    /// Each in-process session's clock (its host's boot and wall clocks, for a suspend).
    clocks: Vec<TestClock>,
    /// Each job replica's wall clock (`job-i`'s, for a skew).
    skews: Vec<Arc<SkewedClock>>,
    /// The suspended hosts, whose work waits.
    gates: Arc<Gates>,
    /// The servers' session-timeout limits at the start.
    limits: (Duration, Duration),
    /// The resource's server and the session loggers.
    _tasks: JoinSet<()>,
}

impl World {
    fn path(&self, election: &str) -> String {
        self.paths.get(election).cloned().unwrap_or_default()
    }

    fn resource(&self, election: &str) -> Arc<Resource> {
        match self.resources.get(election) {
            Some(r) => Arc::clone(r),
            None => Resource::new(election, &self.gates),
        }
    }

    async fn start_contender(&mut self, index: usize) -> Result<()> {
        let Some(def) = CONTENDERS.get(index) else {
            return Ok(());
        };
        let book = Arc::clone(&self.book);
        let running = match def.kind {
            Kind::Latch => {
                let session = &self.sessions[def.session.unwrap_or(0)];
                let policy = if def.seeded_policy {
                    self.setup.latch_policy
                } else {
                    def.policy
                };
                let latch = LeaderLatch::builder(session, self.path(LATCH_ELECTION))
                    .id(def.id)
                    .error_policy(policy)
                    .start()
                    .await
                    .map_err(contender_error(def.id))?;
                // Subscribed before the latch's task has run: no term is missed.
                let events = latch.events();
                let stop = CancellationToken::new();
                let task = tokio::spawn(latch_writer(
                    events,
                    def.id,
                    self.resource(LATCH_ELECTION),
                    book,
                    stop.clone(),
                ));
                Running::Latch { latch, stop, task }
            }
            Kind::Selector => {
                let session = &self.sessions[def.session.unwrap_or(0)];
                let resource = self.resource(LOCK_ELECTION);
                // Each term lasts a while, then the closure returns and the selector queues
                // again: the lock changes hands without any fault too.
                let rng = Arc::new(Mutex::new(Rng::new(self.rng.next_u64())));
                let session_timeout = self.config.session_timeout;
                let selector = LeaderSelector::builder(session, self.path(LOCK_ELECTION))
                    .id(def.id)
                    .auto_requeue(true)
                    .start(move |term: Leadership| {
                        let (book, resource) = (Arc::clone(&book), Arc::clone(&resource));
                        let hold = lock(&rng).between(session_timeout / 10, session_timeout);
                        async move {
                            record_local(&book, LOCK_ELECTION, def.id, &term);
                            resource.gates.wait_running(term.session_id()).await;
                            let _work = WorkEnds::start(&book, LOCK_ELECTION, def.id, &term);
                            let never = CancellationToken::new();
                            let until = tokio::time::Instant::now() + hold;
                            write_while_valid(&term, def.id, &resource, Some((until, &never)))
                                .await;
                            Ok::<(), std::io::Error>(())
                        }
                    })
                    .await
                    .map_err(contender_error(def.id))?;
                Running::Selector(selector)
            }
            Kind::Mutex => {
                let session = &self.sessions[def.session.unwrap_or(0)];
                let mutex = InterProcessMutex::builder(session, self.path(LOCK_ELECTION))
                    .id(def.id)
                    .build()
                    .map_err(contender_error(def.id))?;
                let stop = CancellationToken::new();
                let rng = Rng::new(self.rng.next_u64());
                let task = tokio::spawn(mutex_holder(
                    mutex,
                    def.id,
                    self.resource(LOCK_ELECTION),
                    book,
                    stop.clone(),
                    rng,
                    self.config.session_timeout,
                ));
                Running::Mutex { stop, task }
            }
            Kind::Zkr => {
                let link = SESSIONS + def.child.unwrap_or(0);
                let connect = self.proxies[link].connect_string();
                Running::Zkr(spawn_zkr(
                    &self.config,
                    self.setup.tick,
                    &self.book,
                    &connect,
                    &self.path(LOCK_ELECTION),
                    def.id,
                    Writes {
                        port: self.lock_port,
                        count: 10 + self.rng.below(30),
                    },
                )?)
            }
        };
        note(&self.book, format!("{}: started", def.id));
        self.contenders[index] = Some(running);
        Ok(())
    }

    /// Starts the job's replica on session `i`.
    async fn start_job(&mut self, i: usize) -> Result<()> {
        let Some(id) = JOB_IDS.get(i).copied() else {
            return Ok(());
        };
        // As latch-2: the replica on the session never expired from outside has the drawn policy.
        let policy = if i == SESSIONS - 1 {
            self.setup.latch_policy
        } else {
            ErrorPolicy::Standard
        };
        self.job_starts += 1;
        // Drawn from the seed apart from the trial's generator, so the faults' draws stay what
        // they were.
        let rng = Arc::new(Mutex::new(Rng::new(
            self.config.seed ^ 0x00B0_0000 ^ (self.job_starts << 40),
        )));
        let book = Arc::clone(&self.book);
        let resource = Arc::clone(&self.job_resource);
        let wall: Arc<dyn WallClock> = self
            .skews
            .get(i)
            .map_or_else(|| Arc::new(SkewedClock::new(0)), Arc::clone);
        let job = ScheduledJob::builder(&self.sessions[i], self.job_path.clone())
            .every(JOB_EVERY)
            .wall_clock(wall)
            .id(id)
            .catch_up(CatchUp::All)
            .history_limit(MAX_HISTORY)
            .error_policy(policy)
            .start(move |run: SlotRun| {
                let hold =
                    lock(&rng).between(Duration::from_millis(20), Duration::from_millis(200));
                job_run(run, id, Arc::clone(&resource), Arc::clone(&book), hold)
            })
            .await
            .map_err(contender_error(id))?;
        note(&self.book, format!("{id}: started"));
        self.jobs[i] = Some(job);
        Ok(())
    }

    /// Takes the job's replica on session `i` down: by turns with `close()` (a run going on is
    /// cut off) and with `drain()` (a run going on finishes first, within 1 s).
    async fn close_job(&mut self, i: usize) {
        let Some(job) = self.jobs.get_mut(i).and_then(Option::take) else {
            return;
        };
        self.job_closes += 1;
        // Which of the two comes first depends on the seed.
        if (self.config.seed + self.job_closes).is_multiple_of(2) {
            let _ = job.drain(Duration::from_secs(1)).await;
            note(&self.book, format!("{}: drained", JOB_IDS[i]));
        } else {
            let _ = job.close().await;
            note(&self.book, format!("{}: closed", JOB_IDS[i]));
        }
    }

    /// Closes contender `index` gracefully (a `zkr` child by `SIGTERM`).
    async fn close_contender(&mut self, index: usize) {
        let Some(running) = self.contenders.get_mut(index).and_then(Option::take) else {
            return;
        };
        let id = CONTENDERS[index].id;
        match running {
            Running::Latch { latch, stop, task } => {
                let _ = latch.close().await;
                stop.cancel();
                let _ = task.await;
            }
            Running::Selector(selector) => {
                let _ = selector.close().await;
            }
            Running::Mutex { stop, task } => {
                stop.cancel();
                let _ = task.await;
            }
            Running::Zkr(mut child) => {
                let _ = kill(child.pid, Signal::SIGTERM);
                match tokio::time::timeout(HARNESS_BOUND, child.child.wait()).await {
                    Ok(Ok(status)) if matches!(status.code(), Some(0 | 143)) => {}
                    Ok(Ok(status)) => problem(
                        &self.book,
                        format!("{id} exited with {status} after SIGTERM"),
                    ),
                    Ok(Err(e)) => problem(&self.book, format!("waiting for {id}: {e}")),
                    Err(_) => {
                        problem(
                            &self.book,
                            format!("{id} did not exit within {HARNESS_BOUND:?} of SIGTERM"),
                        );
                        let _ = child.child.kill().await;
                    }
                }
                let _ = tokio::time::timeout(HARNESS_BOUND, child.reader).await;
                close_remote_terms(&self.book, id, BootTime::now());
            }
        }
        note(&self.book, format!("{id}: closed"));
    }

    /// `SIGKILL`s `zkr` child `child` and waits until it is gone.
    async fn kill_child(&mut self, child: usize) {
        let Some(index) = CONTENDERS.iter().position(|c| c.child == Some(child)) else {
            return;
        };
        let id = CONTENDERS[index].id;
        let Some(Running::Zkr(mut zkr)) = self.contenders.get_mut(index).and_then(Option::take)
        else {
            return;
        };
        let _ = zkr.child.kill().await;
        // Its terms end here: the process is gone, and its command dies with it.
        close_remote_terms(&self.book, id, BootTime::now());
        let _ = tokio::time::timeout(HARNESS_BOUND, zkr.reader).await;
        note(&self.book, format!("{id}: SIGKILLed"));
    }

    fn child_pid(&self, child: usize) -> Option<Pid> {
        let index = CONTENDERS.iter().position(|c| c.child == Some(child))?;
        match self.contenders.get(index)? {
            Some(Running::Zkr(z)) => Some(z.pid),
            _ => None,
        }
    }
}

fn contender_error(id: &'static str) -> impl FnOnce(zookeeper_recipes::Error) -> HarnessError {
    move |e| HarnessError::Io {
        context: format!("starting contender {id}"),
        source: std::io::Error::other(e.to_string()),
    }
}

/// Writes to `resource` while `term` is valid (checked right before every write), until it
/// ends, `until` passes or `stop` fires. While the term's host is suspended it waits before
/// the check, as a stopped thread would.
async fn write_while_valid(
    term: &Leadership,
    id: &str,
    resource: &Resource,
    until: Option<(tokio::time::Instant, &CancellationToken)>,
) {
    loop {
        if let Some((deadline, stop)) = until
            && (tokio::time::Instant::now() >= deadline || stop.is_cancelled())
        {
            return;
        }
        resource.gates.wait_running(term.session_id()).await;
        if !term.is_valid() {
            return;
        }
        resource.write(id, term.token());
        tokio::select! {
            _ = term.ended() => return,
            _ = tokio::time::sleep(WRITE_EVERY) => {}
        }
    }
}

/// A latch's leader loop: every term it is handed is recorded and written under.
async fn latch_writer(
    events: impl futures::Stream<Item = LatchEvent> + Send + 'static,
    id: &'static str,
    resource: Arc<Resource>,
    book: Shared,
    stop: CancellationToken,
) {
    use futures::StreamExt;
    let mut events = std::pin::pin!(events);
    loop {
        let event = tokio::select! {
            _ = stop.cancelled() => return,
            e = events.next() => e,
        };
        match event {
            Some(LatchEvent::Leader(term)) => {
                record_local(&book, LATCH_ELECTION, id, &term);
                tokio::select! {
                    _ = stop.cancelled() => return,
                    () = write_while_valid(&term, id, &resource, None) => {}
                }
            }
            Some(_) => {}
            None => return,
        }
    }
}

/// A mutex holder: takes the lock, writes while it holds it for a while, releases, again.
async fn mutex_holder(
    mutex: InterProcessMutex,
    id: &'static str,
    resource: Arc<Resource>,
    book: Shared,
    stop: CancellationToken,
    mut rng: Rng,
    session_timeout: Duration,
) {
    while !stop.is_cancelled() {
        let acquired = tokio::select! {
            _ = stop.cancelled() => return,
            r = mutex.acquire() => r,
        };
        let guard = match acquired {
            Ok(guard) => guard,
            Err(e) => {
                note(&book, format!("{id}: acquire failed: {e}"));
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        let term = guard.leadership().clone();
        record_local(&book, LOCK_ELECTION, id, &term);
        let hold = rng.between(session_timeout / 10, session_timeout);
        write_while_valid(
            &term,
            id,
            &resource,
            Some((tokio::time::Instant::now() + hold, &stop)),
        )
        .await;
        let _ = guard.release().await;
        // Let the next in line have it before queueing again.
        let pause = rng.between(Duration::ZERO, session_timeout / 4);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The scheduled job

/// Ends run `index` of the book when dropped: when the closure returns, or when its task is
/// aborted after the grace period.
struct RunEnds {
    book: Shared,
    index: usize,
    term: Leadership,
    ok: Option<bool>,
}

impl Drop for RunEnds {
    fn drop(&mut self) {
        // On the term's clock, as its start (`SlotRun::started_at`) and the term's own instants
        // are: a suspended host's clock stands still from the suspend on, and work it did not do
        // while stopped must not be stamped in real time past the term's end (CI seed 2 under
        // load: a run's end 1 ms after its term's, the host suspended between the two).
        let now = self.term.clock().now();
        // A run may act while its term is valid: up to now if it still is, else up to when
        // the term ended or its deadline passed, whichever came first.
        let end = if self.term.is_valid() {
            now
        } else {
            let ended = self
                .term
                .ended_at()
                .unwrap_or_else(|| self.term.valid_until());
            ended.min(now)
        };
        let mut b = lock(&self.book);
        if let Some(run) = b.runs.get_mut(self.index) {
            run.end = Some(end);
            run.stopped = Some(now);
            run.ok = self.ok;
        }
    }
}

/// One run of the job: recorded in the book, writes to `job-row` with the run's token while
/// its term is valid, for `hold`. `Ok` when it wrote for its whole hold, an error when its term
/// ended first (the job was cut off: the slot is retried or recorded failed).
async fn job_run(
    run: SlotRun,
    id: &'static str,
    resource: Arc<Resource>,
    book: Shared,
    hold: Duration,
) -> std::result::Result<(), std::io::Error> {
    let term = run.leadership().clone();
    // A host suspended starts nothing until it resumes.
    resource.gates.wait_running(term.session_id()).await;
    let index = {
        let mut b = lock(&book);
        if !b.job_terms.iter().any(|(_, t, _)| *t == term) {
            // Never earlier than the lease at the claim: a lease only moves forward.
            let lease = term.stop_by();
            b.job_terms.push((id, term.clone(), lease));
        }
        b.runs.push(JobRun {
            holder: id,
            slot: run.slot().to_owned(),
            attempt: run.attempt(),
            token: run.token(),
            // The start as the library made it (its term valid then), not when this task got
            // the CPU: on a loaded machine that can be after the term's end, and the replay
            // must check the library, not the scheduler (issue 41).
            start: run.started_at(),
            end: None,
            ok: None,
            session_id: term.session_id(),
            term_start: term.started_at(),
            stopped: None,
            nominal_ms: Schedule::parse_key(run.slot()).map(|_| run.nominal_ms()),
            started_wall_ms: SystemClock.now_ms(),
        });
        b.runs.len() - 1
    };
    let mut ends = RunEnds {
        book,
        index,
        term: term.clone(),
        ok: None,
    };
    let never = CancellationToken::new();
    let until = tokio::time::Instant::now() + hold;
    write_while_valid(&term, id, &resource, Some((until, &never))).await;
    let done = term.is_valid();
    if !done {
        // The term is ending: its end's instant is recorded a moment after it stops being
        // valid (`Leadership::end`); the run's end is clamped to it once it is there.
        let _ = tokio::time::timeout(Duration::from_secs(5), term.ended()).await;
    }
    ends.ok = Some(done);
    drop(ends);
    if done {
        Ok(())
    } else {
        Err(std::io::Error::other(
            "the term ended before the run was done",
        ))
    }
}

/// Whether `record` is a slot owed a retry that the pause at the end holds back: recorded
/// `running` by one of the job's replicas and cut off, either by a run that stopped (every run
/// with its token has stopped), or before any run began: a claim that
/// landed while its term ended or its reply was lost (the spec's "a claim that did land is found
/// `running` and handled as cut off (its run never started)"; seed 10 ran into it when the
/// quorum leader was isolated during a claim and the pause came 2 s later). The spec has a
/// paused job keep such a slot queued until the resume ("Pause and trigger" in
/// `recipes/scheduled-job.md`), so its record still says `running`. A run that returned `Ok`
/// counts too: its term can end before the record of its end lands (the write is then refused,
/// `SlotAbandoned`), and the next leader handles the slot as cut off like any other (seed 10
/// under load: the quorum leader isolated 18 ms after the run's start, the run returned `Ok`
/// 170 ms later, its end's write never landed, and the pause came 1.6 s after).
fn owed_at_pause(record: &SlotRecord, runs: &[JobRun]) -> bool {
    let Some(token) = record.token else {
        return false;
    };
    let by_a_replica = record
        .runner
        .as_deref()
        .is_some_and(|runner| JOB_IDS.contains(&runner));
    record.state == SlotState::Running
        && by_a_replica
        && runs
            .iter()
            .filter(|r| r.slot == record.slot && r.token.get() == token)
            .all(|r| r.end.is_some())
}

/// The job's own promises, from its runs and its slot records after the trial closed: every
/// slot settled; a slot recorded succeeded by exactly one run that returned `Ok` with the
/// record's token and attempt (two would be a slot finished twice); every record's token one
/// that a run of its slot had; every run's slot recorded; per slot, in the order its runs
/// started, attempts rising and tokens never falling.
fn check_job(runs: &[JobRun], records: &[SlotRecord]) -> Vec<String> {
    let mut out = Vec::new();
    let mut by_slot: BTreeMap<&str, Vec<&JobRun>> = BTreeMap::new();
    for run in runs {
        by_slot.entry(run.slot.as_str()).or_default().push(run);
    }
    for runs in by_slot.values_mut() {
        runs.sort_by_key(|r| r.start);
    }
    let recorded: BTreeMap<&str, &SlotRecord> =
        records.iter().map(|r| (r.slot.as_str(), r)).collect();
    for r in records {
        let state = r.state.as_str();
        if !r.state.is_final() && !owed_at_pause(r, runs) {
            out.push(format!(
                "slot {} is still {state} after the trial closed",
                r.slot
            ));
        }
        let Some(token) = r.token else { continue };
        let runs_of = by_slot.get(r.slot.as_str()).map_or(&[][..], Vec::as_slice);
        let with_token: Vec<&&JobRun> = runs_of
            .iter()
            .filter(|run| run.token.get() == token)
            .collect();
        if with_token.is_empty() && !owed_at_pause(r, runs) {
            out.push(format!(
                "slot {} recorded {state} with token {token} (attempt {}), which none of its {} runs had",
                r.slot,
                r.attempt,
                runs_of.len()
            ));
        }
        if r.state == SlotState::Succeeded {
            let ok: Vec<&&&JobRun> = with_token
                .iter()
                .filter(|run| run.ok == Some(true))
                .collect();
            match ok[..] {
                [one] if one.attempt == r.attempt => {}
                [one] => out.push(format!(
                    "slot {} recorded succeeded at attempt {}, by the run [{one}]",
                    r.slot, r.attempt
                )),
                [] => out.push(format!(
                    "slot {} recorded succeeded with token {token}, but no run with that token returned Ok",
                    r.slot
                )),
                _ => out.push(format!(
                    "slot {} recorded succeeded with token {token}, which {} runs that returned Ok had: finished twice",
                    r.slot,
                    ok.len()
                )),
            }
        }
    }
    for (slot, runs) in &by_slot {
        if !recorded.contains_key(slot) {
            out.push(format!(
                "{} runs of slot {slot}, which has no record",
                runs.len()
            ));
        }
        for pair in runs.windows(2) {
            let [earlier, later] = pair else { continue };
            if later.attempt <= earlier.attempt || later.token < earlier.token {
                out.push(format!(
                    "slot {slot}: the run [{later}] follows [{earlier}]"
                ));
            }
        }
    }
    out
}

/// The job's figures from its runs, its records and its resource's writes.
fn job_figures(runs: &[JobRun], records: &[SlotRecord], writes: &[Write]) -> JobFigures {
    let paused = |r: &&SlotRecord| r.reason.as_deref() == Some("paused");
    let count = |state: SlotState| {
        records
            .iter()
            .filter(|r| r.state == state && !paused(r))
            .count()
    };
    let slots = |r: &SlotRecord| r.range.as_ref().map_or(1, |range| range.count);
    JobFigures {
        runs: runs.len(),
        retried: runs.iter().filter(|r| r.attempt > 1).count(),
        cut_off: runs.iter().filter(|r| r.ok != Some(true)).count(),
        records: records.len(),
        succeeded: count(SlotState::Succeeded),
        failed: count(SlotState::Failed),
        skipped: count(SlotState::Skipped),
        missed: records
            .iter()
            .filter(|r| r.state == SlotState::Missed && !paused(r))
            .map(slots)
            .sum(),
        paused: records.iter().filter(paused).map(slots).sum(),
        owed: records.iter().filter(|r| owed_at_pause(r, runs)).count(),
        writes_accepted: writes.iter().filter(|w| w.accepted).count(),
        writes_rejected: writes.iter().filter(|w| !w.accepted).count(),
    }
}

/// Pauses the job, waits (bounded) until no slot is open (but those owed a retry, which the
/// pause holds back: [`owed_at_pause`]) and no run goes on, closes every replica, and reads the
/// job's slot records.
async fn settle_job(world: &mut World) -> Vec<SlotRecord> {
    let book = Arc::clone(&world.book);
    let connect = Session::builder(world.cluster.connect_string())
        .server_tick_time(world.setup.tick)
        .session_timeout(world.config.session_timeout * 5)
        .connection_timeout(Duration::from_secs(5))
        .connect();
    let session = match tokio::time::timeout(HARNESS_BOUND, connect).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            problem(&book, format!("no session to read the job with: {e}"));
            for i in 0..SESSIONS {
                world.close_job(i).await;
            }
            return Vec::new();
        }
        Err(_) => {
            problem(&book, "no session to read the job with in time".to_owned());
            for i in 0..SESSIONS {
                world.close_job(i).await;
            }
            return Vec::new();
        }
    };
    let admin = match JobAdmin::new(&session, world.job_path.clone()) {
        Ok(a) => a,
        Err(e) => {
            problem(&book, format!("job admin: {e}"));
            return Vec::new();
        }
    };
    let deadline = tokio::time::Instant::now() + HARNESS_BOUND;
    // Paused, the leader finishes the run going on, records the slots that come due as skipped
    // and holds back the retry of a cut-off slot until a resume that never comes: the job comes
    // to rest with its replicas still up.
    loop {
        match admin.pause().await {
            Ok(()) => break,
            Err(e) if tokio::time::Instant::now() >= deadline => {
                problem(&book, format!("could not pause the job: {e}"));
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    note(&book, "job: paused".to_owned());
    // At rest: nothing open, no run going, and no run started for a while. A leader still
    // works through slots it had queued (a catch-up, a retry) after the pause, so a gap between
    // two of its runs is not rest; a second is more than three periods.
    let quiet = Duration::from_secs(1);
    let mut last_runs = (usize::MAX, tokio::time::Instant::now());
    loop {
        let runs_now = lock(&book).runs.clone();
        let open: Vec<String> = match admin.history(MAX_HISTORY).await {
            Ok(records) => records
                .iter()
                .filter(|r| !r.state.is_final() && !owed_at_pause(r, &runs_now))
                .map(|r| format!("{} {}", r.slot, r.state.as_str()))
                .collect(),
            Err(e) => vec![format!("(cannot read the records: {e})")],
        };
        let (runs, running) = {
            let b = lock(&book);
            (
                b.runs.len(),
                b.runs.iter().filter(|r| r.end.is_none()).count(),
            )
        };
        if runs != last_runs.0 {
            last_runs = (runs, tokio::time::Instant::now());
        }
        if open.is_empty() && running == 0 && last_runs.1.elapsed() >= quiet {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            problem(
                &book,
                format!(
                    "the job did not come to rest within {HARNESS_BOUND:?} of its pause: open {open:?}, {running} runs going"
                ),
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    note(&book, "job: at rest".to_owned());
    for i in 0..SESSIONS {
        world.close_job(i).await;
    }
    let records = match admin.history(MAX_HISTORY).await {
        Ok(records) => records,
        Err(e) => {
            problem(&book, format!("reading the job's history: {e}"));
            Vec::new()
        }
    };
    let _ = session.close().await;
    records
}

// ---------------------------------------------------------------------------------------------
// The trial

/// What a round left to heal.
#[derive(Default)]
struct Damage {
    killed_servers: Vec<usize>,
    paused_servers: Vec<usize>,
    links: Vec<usize>,
    frozen: Vec<(usize, Pid, Vec<Pid>)>,
    closed: Vec<usize>,
    /// Job replicas closed with the in-process contender on their session.
    closed_jobs: Vec<usize>,
    /// `zkr` children that other faults of the round act on: a freeze leaves them alone.
    busy_children: Vec<usize>,
    /// Links between servers are cut (an isolation, a split, a one-way cut).
    peers_cut: bool,
    /// Suspended hosts: (session index, its ZooKeeper session, when).
    suspended: Vec<(usize, i64, BootTime)>,
    /// Job replicas whose wall clock is off.
    skewed: Vec<usize>,
}

/// Runs one trial; see the [module docs](self).
///
/// # Errors
/// [`HarnessError`] when the harness itself cannot work (no ZooKeeper, a cluster that does not
/// start, a child that cannot be spawned). Broken promises are not errors: they are in the
/// report ([`TrialReport::passed`]).
///
/// # Cancel safety
/// Dropping the future kills every server and `zkr` child it started; a child's command dies
/// with it (its parent-death signal).
pub async fn run_trial(config: &TrialConfig) -> Result<TrialReport> {
    let began = Instant::now();
    let plan = plan(config.seed, config.rounds, config.session_timeout);
    let setup = setup(config.seed, config.session_timeout);
    let book: Shared = Arc::default();
    note(
        &book,
        format!("seed {}: setup {setup}; plan {plan:?}", config.seed),
    );

    let cluster = TestingCluster::builder()
        .servers(SERVERS)
        .tick_time(setup.tick)
        .sync_limit(setup.sync_limit)
        .snapshot_sync_only(!config.diff_sync)
        .start()
        .await?;
    let servers: Vec<String> = (0..SERVERS)
        .map(|i| cluster.server_connect_string(i).map(str::to_owned))
        .collect::<Result<_>>()?;
    let mut proxies = Vec::with_capacity(LINKS);
    for _ in 0..LINKS {
        proxies.push(FaultProxy::start(&servers).await?);
    }
    let limits = cluster.session_timeouts(0)?;
    let mut sessions = Vec::with_capacity(SESSIONS);
    let clocks: Vec<TestClock> = (0..SESSIONS).map(|_| TestClock::new()).collect();
    for (proxy, clock) in proxies.iter().zip(&clocks) {
        let session = Session::builder(proxy.connect_string())
            .clock(clock.clock())
            .server_tick_time(setup.tick)
            .session_timeout(config.session_timeout)
            .session_timeout_floor(session_timeout_floor(config.session_timeout))
            .connection_timeout(Duration::from_secs(5))
            .connect()
            .await
            .map_err(|e| HarnessError::Io {
                context: "connecting an in-process session".to_owned(),
                source: std::io::Error::other(e.to_string()),
            })?;
        sessions.push(session);
    }
    let root = unique_path("trial");
    let paths: BTreeMap<&'static str, String> = ELECTIONS
        .iter()
        .map(|e| (*e, format!("{root}/{e}")))
        .collect();
    let gates = Gates::new();
    let resources: BTreeMap<&'static str, Arc<Resource>> = ELECTIONS
        .iter()
        .map(|e| (*e, Resource::new(&format!("{e}-row"), &gates)))
        .collect();
    let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .await
        .map_err(io_error("binding the resource's port"))?;
    let lock_port = listener
        .local_addr()
        .map_err(io_error("reading the resource's port"))?
        .port();
    let mut tasks = JoinSet::new();
    if let Some(r) = resources.get(LOCK_ELECTION) {
        tasks.spawn(serve_resource(listener, Arc::clone(r)));
    }
    // The in-process sessions' state changes go into the log, as zkr's lines do, and every
    // ZooKeeper session replaced by another is counted.
    for (i, session) in sessions.iter().enumerate() {
        let changes = session.state_changes();
        let book = Arc::clone(&book);
        let mut last = session.session_id();
        tasks.spawn(async move {
            use futures::StreamExt;
            let mut changes = std::pin::pin!(changes);
            while let Some(status) = changes.next().await {
                let state = status.state.map_or("none", |s| s.as_str());
                let id = status
                    .session_id
                    .map_or_else(String::new, |id| format!(" {id:#x}"));
                note(
                    &book,
                    format!("session-{i}: {state}{id} (epoch {})", status.epoch),
                );
                if let Some(new) = status.session_id {
                    if let Some(old) = last.filter(|old| *old != new) {
                        lock(&book).replaced.push((i, BootTime::now(), old, new));
                    }
                    last = Some(new);
                }
            }
        });
    }

    let mut world = World {
        config: config.clone(),
        setup,
        book: Arc::clone(&book),
        cluster,
        proxies,
        sessions,
        paths,
        resources,
        lock_port,
        contenders: (0..CONTENDERS.len()).map(|_| None).collect(),
        rng: Rng::new(config.seed ^ 0x5EED),
        job_path: format!("{root}/{JOB_ELECTION}"),
        jobs: (0..SESSIONS).map(|_| None).collect(),
        job_resource: Resource::new(&format!("{JOB_ELECTION}-row"), &gates),
        job_starts: 0,
        job_closes: 0,
        clocks,
        skews: (0..SESSIONS)
            .map(|_| Arc::new(SkewedClock::new(0)))
            .collect(),
        gates,
        limits,
        _tasks: tasks,
    };
    let outcome = drive(&mut world, &plan).await;
    let groups = lock(&book).groups.clone();
    let result = match outcome {
        Ok(done) => Ok(finish(config, &world, plan, done, began).await),
        Err(e) => Err(e),
    };
    // Whatever happened: every command group a child reported is gone before we return.
    for pgid in groups {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
    result
}

/// What `drive` hands to `finish`.
struct Driven {
    faults: BTreeMap<FaultKind, usize>,
    heals: Vec<BootTime>,
    /// When each round began, and its faults.
    rounds: Vec<(BootTime, Vec<Fault>)>,
    orphans: Vec<String>,
    job_records: Vec<SlotRecord>,
    /// When the job's records were read (every replica closed, every run over).
    job_records_at: BootTime,
}

async fn drive(world: &mut World, plan: &[Round]) -> Result<Driven> {
    for index in 0..CONTENDERS.len() {
        world.start_contender(index).await?;
    }
    for i in 0..SESSIONS {
        world.start_job(i).await?;
    }
    let start = BootTime::now();
    wait_for_leaders(world, "the first election").await;
    note(
        &world.book,
        format!("first leaders after {:?}", BootTime::now() - start),
    );

    let mut faults: BTreeMap<FaultKind, usize> = BTreeMap::new();
    let mut heals = Vec::new();
    let mut rounds = Vec::new();
    for (n, round) in plan.iter().enumerate() {
        rounds.push((BootTime::now(), round.faults.clone()));
        note(
            &world.book,
            format!("round {n}: {round:?}; {}", load_average()),
        );
        let mut damage = Damage {
            busy_children: round.faults.iter().filter_map(child_of).collect(),
            ..Damage::default()
        };
        for fault in in_order(&round.faults) {
            if apply(world, fault, &mut damage).await? {
                *faults.entry(fault.kind).or_default() += 1;
            }
        }
        tokio::time::sleep(round.hold).await;
        heal(world, &mut damage).await?;
        let healed = BootTime::now();
        note(
            &world.book,
            format!("round {n}: healed; {}", load_average()),
        );
        heals.push(healed);
        wait_for_leaders(world, &format!("round {n}'s heal")).await;
        tokio::time::sleep(round.settle).await;
    }

    let job_records = settle_job(world).await;
    let job_records_at = BootTime::now();
    for index in 0..CONTENDERS.len() {
        world.close_contender(index).await;
    }
    note(&world.book, "every contender closed".to_owned());
    let orphans = wait_for_empty_paths(world).await;
    // Nothing writes the job's records any more: every server must hold the same ones.
    let records = format!("{}/slots", world.job_path);
    if !compare_servers(world, &records, false).await {
        problem(
            &world.book,
            format!(
                "the servers disagree on {records} at rest (listed above): a server lost committed transactions{}",
                if world.config.diff_sync {
                    " (ZooKeeper 3.8.0's DIFF sync, ZOOKEEPER-4785: see --diff-sync)"
                } else {
                    ""
                }
            ),
        );
    }
    for session in &world.sessions {
        let _ = session.close().await;
    }
    Ok(Driven {
        faults,
        heals,
        rounds,
        orphans,
        job_records,
        job_records_at,
    })
}

/// Waits (bounded, not judged: the history is) until both paths have a leader.
async fn wait_for_leaders(world: &World, what: &str) {
    let deadline = tokio::time::Instant::now() + HARNESS_BOUND;
    for election in ELECTIONS {
        while !has_leader(&world.book, election) {
            if tokio::time::Instant::now() >= deadline {
                problem(
                    &world.book,
                    format!("no {election} leader within {HARNESS_BOUND:?} of {what}"),
                );
                if !compare_servers(world, &world.path(election), true).await {
                    problem(
                        &world.book,
                        format!("the servers disagree on the {election} election (listed above)"),
                    );
                }
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Notes what each server, asked alone, holds under `path` (each child with the zxid of its last
/// change), with its last zxid: servers that disagree long after the heal hold different data
/// trees (a server that lost committed transactions, as ZooKeeper 3.8.0's DIFF sync can:
/// ZOOKEEPER-4785 and its relatives), and a contender connected to one waits behind a node the
/// others deleted. Returns whether every server answered and all agree; the views are noted
/// when they do not, or when `always` is set.
async fn compare_servers(world: &World, path: &str, always: bool) -> bool {
    let mut views = Vec::new();
    for index in 0..world.cluster.len() {
        let Ok(connect) = world.cluster.server_connect_string(index) else {
            continue;
        };
        let zxid = match world.cluster.four_letter_word(index, "srvr").await {
            Ok(out) => out
                .lines()
                .find_map(|l| l.strip_prefix("Zxid: "))
                .unwrap_or("?")
                .to_owned(),
            Err(e) => format!("? ({e})"),
        };
        let listing = async {
            let client = zookeeper_client::Client::connector()
                .with_session_timeout(world.config.session_timeout * 5)
                .connect(connect)
                .await?;
            // Everything committed before the `sync` is applied on this server before it
            // answers: a lagging server catches up, one that lost transactions does not.
            client.sync(path).await?;
            let children = client.list_children(path).await?;
            // Every stat is queued before the first is awaited: one round trip in all.
            let stats: Vec<_> = children
                .iter()
                .map(|child| client.check_stat(&format!("{path}/{child}")))
                .collect();
            let mut view = BTreeMap::new();
            for (child, stat) in children.into_iter().zip(stats) {
                if let Some(stat) = stat.await? {
                    view.insert(child, stat.mzxid);
                }
            }
            Ok::<_, zookeeper_client::Error>(view)
        };
        let view = match tokio::time::timeout(Duration::from_secs(5), listing).await {
            Ok(Ok(view)) => Ok(view),
            Ok(Err(e)) => Err(format!("(cannot list: {e})")),
            Err(_) => Err("(no answer in 5 s)".to_owned()),
        };
        views.push((index, zxid, view));
    }
    let agree = views.windows(2).all(|w| match (&w[0].2, &w[1].2) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    });
    if always || !agree {
        for (index, zxid, view) in &views {
            let seen = match view {
                Ok(view) => format!("{:?}", view.keys().collect::<Vec<_>>()),
                Err(e) => e.clone(),
            };
            note(
                &world.book,
                format!("server {index} (zxid {zxid}) holds under {path}: {seen}"),
            );
        }
    }
    agree
}

/// Does one fault; returns whether it was done (a fault with nothing to act on is skipped).
async fn apply(world: &mut World, fault: &Fault, damage: &mut Damage) -> Result<bool> {
    let book = Arc::clone(&world.book);
    match fault.kind {
        FaultKind::KillServer | FaultKind::KillLeader => {
            let index = if fault.kind == FaultKind::KillLeader {
                match world.cluster.leader_index().await? {
                    Some(i) => i,
                    None => {
                        note(
                            &book,
                            "kill-leader: no quorum leader now; skipped".to_owned(),
                        );
                        return Ok(false);
                    }
                }
            } else {
                fault.target
            };
            world.cluster.kill_server(index).await?;
            damage.killed_servers.push(index);
            note(&book, format!("{}: killed server {index}", fault.kind));
        }
        FaultKind::LoseQuorum => {
            for index in (0..SERVERS).filter(|i| *i != fault.target) {
                world.cluster.kill_server(index).await?;
                damage.killed_servers.push(index);
            }
            note(
                &book,
                format!("{fault}: killed {:?}", damage.killed_servers),
            );
        }
        FaultKind::PauseServer => {
            world.cluster.pause_server(fault.target)?;
            damage.paused_servers.push(fault.target);
            note(&book, format!("paused server {}", fault.target));
        }
        FaultKind::CutLink | FaultKind::BlackholeLink => {
            let Some(proxy) = world.proxies.get(fault.target) else {
                return Ok(false);
            };
            if fault.kind == FaultKind::CutLink {
                proxy.cut();
            } else {
                proxy.blackhole();
            }
            damage.links.push(fault.target);
            note(&book, format!("{fault}"));
        }
        FaultKind::LoseReplies => {
            let Some(proxy) = world.proxies.get(fault.target) else {
                return Ok(false);
            };
            // Requests pass, replies wait; the cut then drops the replies still waiting. The
            // window is drawn from the trial's generator, like everything else.
            let window = world
                .rng
                .between(Duration::from_millis(20), Duration::from_millis(400));
            proxy.delay_replies(Duration::from_millis(500));
            tokio::time::sleep(window).await;
            proxy.cut();
            damage.links.push(fault.target);
            note(
                &book,
                format!(
                    "{fault}: cut after {} ms of held replies",
                    window.as_millis()
                ),
            );
        }
        FaultKind::ExpireSession => {
            let Some(session) = world.sessions.get(fault.target) else {
                return Ok(false);
            };
            let Some(info) = session.client().ok().map(|c| c.session().clone()) else {
                note(&book, format!("{fault}: no session now; skipped"));
                return Ok(false);
            };
            let proxy = &world.proxies[fault.target];
            // Cut first: a connected client would take its session back at once.
            proxy.cut();
            let expired =
                expire_session(world.cluster.connect_string(), &info, HARNESS_BOUND).await;
            proxy.heal();
            match expired {
                Ok(()) => note(
                    &book,
                    format!("{fault}: session {:#x} expired", info.id().0),
                ),
                Err(e) => {
                    problem(&book, format!("{fault}: {e}"));
                    return Ok(false);
                }
            }
        }
        FaultKind::FreezeProcess => {
            // The child that leads, if one does (only a frozen leader has a stale write to
            // make), else the planned one.
            let leading = (0..CHILDREN).find(|c| {
                if damage.busy_children.contains(c) && *c != fault.target {
                    return false;
                }
                let id = CONTENDERS
                    .iter()
                    .find(|d| d.child == Some(*c))
                    .map_or("", |d| d.id);
                lock(&book)
                    .remote
                    .iter()
                    .any(|t| t.holder == id && t.end.is_none())
            });
            let child = leading.unwrap_or(fault.target);
            let Some(pid) = world.child_pid(child) else {
                return Ok(false);
            };
            let _ = kill(pid, Signal::SIGSTOP);
            // zkr is stopped: it starts no command now. Freeze the ones it has.
            let groups = child_groups(pid);
            for g in &groups {
                let _ = killpg(*g, Signal::SIGSTOP);
            }
            note(
                &book,
                format!(
                    "freeze zkr-{child} (leading: {}): froze pid {pid} and groups {groups:?}",
                    leading.is_some()
                ),
            );
            damage.frozen.push((child, pid, groups));
        }
        FaultKind::KillProcess => {
            if world.child_pid(fault.target).is_none() {
                return Ok(false);
            }
            world.kill_child(fault.target).await;
            if let Some(index) = CONTENDERS
                .iter()
                .position(|c| c.child == Some(fault.target))
            {
                damage.closed.push(index);
            }
        }
        FaultKind::RestartContender => {
            if world
                .contenders
                .get(fault.target)
                .is_none_or(Option::is_none)
            {
                return Ok(false);
            }
            world.close_contender(fault.target).await;
            damage.closed.push(fault.target);
            // The job's replica on that session goes down and up with it.
            if let Some(i) = CONTENDERS.get(fault.target).and_then(|c| c.session) {
                world.close_job(i).await;
                damage.closed_jobs.push(i);
            }
        }
        FaultKind::IsolateFollower
        | FaultKind::IsolateLeader
        | FaultKind::SplitMinority
        | FaultKind::OneWayCut => return cut_peers(world, fault, damage).await,
        FaultKind::Suspend => {
            let i = fault.target;
            let (Some(session), Some(proxy), Some(clock)) = (
                world.sessions.get(i),
                world.proxies.get(i),
                world.clocks.get(i),
            ) else {
                return Ok(false);
            };
            let Some(id) = session.session_id() else {
                note(&book, format!("{fault}: no session now; skipped"));
                return Ok(false);
            };
            // All at once, as a host stops: its work, its clocks, its link.
            world.gates.suspend(id);
            clock.freeze();
            proxy.blackhole();
            damage.links.push(i);
            damage.suspended.push((i, id, BootTime::now()));
            note(&book, format!("{fault}: session {id:#x}"));
        }
        FaultKind::SkewClock => {
            let replica = fault.target % SESSIONS;
            let (offset, restart) = SKEWS[(fault.target / SESSIONS) % SKEWS.len()];
            if world.jobs.get(replica).is_none_or(Option::is_none) {
                return Ok(false);
            }
            let Some(clock) = world.skews.get(replica).cloned() else {
                return Ok(false);
            };
            if restart {
                world.close_job(replica).await;
                clock.set_offset_ms(offset);
                world.start_job(replica).await?;
            } else {
                clock.set_offset_ms(offset);
            }
            damage.skewed.push(replica);
            note(&book, format!("{fault}"));
        }
        FaultKind::SilentLeader => {
            let Some(index) = world.cluster.leader_index().await? else {
                note(&book, format!("{fault}: no quorum leader now; skipped"));
                return Ok(false);
            };
            world.cluster.pause_server(index)?;
            damage.paused_servers.push(index);
            note(
                &book,
                format!(
                    "{fault}: paused server {index}, the quorum leader (sync limit {} ms)",
                    world.setup.sync_timeout().as_millis()
                ),
            );
        }
        FaultKind::RollingRestart => {
            let percent = ROLLING_MAX[fault.target % ROLLING_MAX.len()];
            let (min, max) = if percent == 0 {
                world.limits
            } else {
                let max = world.config.session_timeout * percent / 100;
                (world.limits.0.min(max), max)
            };
            for index in 0..SERVERS {
                world.cluster.set_session_timeouts(index, min, max)?;
                world.cluster.restart_server(index).await?;
                note(
                    &book,
                    format!(
                        "{fault}: server {index} restarted with sessions of {} to {} ms",
                        min.as_millis(),
                        max.as_millis()
                    ),
                );
            }
        }
    }
    Ok(true)
}

/// Does a fault between servers (isolation, split, one-way cut); the servers it names by
/// role (leader, follower) are found when it happens.
async fn cut_peers(world: &mut World, fault: &Fault, damage: &mut Damage) -> Result<bool> {
    let book = Arc::clone(&world.book);
    let cluster = &world.cluster;
    let done = if fault.kind == FaultKind::SplitMinority {
        let alone = fault.target;
        let rest: Vec<usize> = (0..SERVERS).filter(|i| *i != alone).collect();
        cluster.partition(&[alone], &rest)?;
        let role = match cluster.leader_index().await? {
            Some(l) if l == alone => "the quorum leader",
            _ => "a follower",
        };
        format!("split server {alone} ({role}) from {rest:?}")
    } else {
        let Some(leader) = cluster.leader_index().await? else {
            note(&book, format!("{fault}: no quorum leader now; skipped"));
            return Ok(false);
        };
        let followers: Vec<usize> = (0..SERVERS).filter(|i| *i != leader).collect();
        // A follower that serves a leader's session if there is one: that is where a cut-off
        // follower's answers can keep a deposed leader going.
        let serving = followers_serving_a_leader(world, &followers).await;
        let follower = if serving.is_empty() {
            followers[fault.target % followers.len()]
        } else {
            serving[fault.target % serving.len()]
        };
        let serves = if serving.contains(&follower) {
            "serving a leader's session"
        } else {
            "serving no in-process leader"
        };
        match fault.kind {
            FaultKind::IsolateFollower => {
                cluster.isolate(follower)?;
                format!("isolated server {follower} (a follower {serves}; leader {leader})")
            }
            FaultKind::IsolateLeader => {
                cluster.isolate(leader)?;
                format!("isolated server {leader} (the quorum leader)")
            }
            _ => {
                let (from, to) = if fault.target & 2 == 0 {
                    (follower, leader)
                } else {
                    (leader, follower)
                };
                cluster.cut_one_way(from, to)?;
                format!(
                    "held server {from}'s bytes to server {to} (leader {leader}; follower {follower} {serves})"
                )
            }
        }
    };
    damage.peers_cut = true;
    note(&book, format!("{fault}: {done}"));
    Ok(true)
}

/// The followers among `followers` that serve the session of an in-process leader now (by
/// their `cons`).
async fn followers_serving_a_leader(world: &World, followers: &[usize]) -> Vec<usize> {
    let sessions: Vec<i64> = lock(&world.book)
        .local
        .iter()
        .filter(|(_, _, t)| t.is_valid())
        .map(|(_, _, t)| t.session_id())
        .collect();
    let mut serving = Vec::new();
    for f in followers {
        if let Ok(cons) = world.cluster.four_letter_word(*f, "cons").await
            && sessions
                .iter()
                .any(|id| cons.contains(&format!("sid={id:#x}")))
        {
            serving.push(*f);
        }
    }
    serving
}

/// The machine's load (`/proc/loadavg`), for the log: a trial that fails on a starved machine
/// should say so.
fn load_average() -> String {
    match std::fs::read_to_string("/proc/loadavg") {
        Ok(l) => format!(
            "load {}",
            l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
        ),
        Err(_) => "load unknown".to_owned(),
    }
}

/// The faults of a round in the order they are done: an expiry first. Closing a session from
/// outside needs the quorum and an answer from every server that is up, so it goes before a
/// paused server or a lost quorum (seeds 3060 and 3070 waited out the harness's bound otherwise).
fn in_order(faults: &[Fault]) -> impl Iterator<Item = &Fault> {
    let expiries = faults.iter().filter(|f| f.kind == FaultKind::ExpireSession);
    let others = faults.iter().filter(|f| f.kind != FaultKind::ExpireSession);
    expiries.chain(others)
}

/// The `zkr` child a fault other than a freeze acts on, if any.
fn child_of(fault: &Fault) -> Option<usize> {
    match fault.kind {
        FaultKind::KillProcess => Some(fault.target),
        FaultKind::CutLink | FaultKind::BlackholeLink | FaultKind::LoseReplies => {
            fault.target.checked_sub(SESSIONS)
        }
        FaultKind::RestartContender => CONTENDERS.get(fault.target).and_then(|c| c.child),
        _ => None,
    }
}

/// Undoes a round's damage: the world whole again, the ensemble with one leader.
async fn heal(world: &mut World, damage: &mut Damage) -> Result<()> {
    let book = Arc::clone(&world.book);
    // A suspended host resumes first: its clocks jump (boot time has counted the suspend), its
    // work goes on; its link heals with the other links, after.
    for (i, id, from) in damage.suspended.drain(..) {
        if let Some(clock) = world.clocks.get(i) {
            clock.thaw();
        }
        let to = BootTime::now();
        world.gates.resume(id);
        lock(&book).suspensions.push(Suspension {
            session: i,
            id,
            from,
            to,
        });
        note(
            &book,
            format!(
                "session-{i}'s host resumed after {} ms",
                to.saturating_duration_since(from).as_millis()
            ),
        );
    }
    for replica in damage.skewed.drain(..) {
        if let Some(clock) = world.skews.get(replica) {
            clock.set_offset_ms(0);
        }
        note(
            &book,
            format!("{}'s wall clock stepped back", JOB_IDS[replica]),
        );
    }
    for index in damage.paused_servers.drain(..) {
        world.cluster.resume_server(index)?;
        note(&book, format!("resumed server {index}"));
    }
    // Together: one server alone cannot form a quorum to rejoin.
    let killed: Vec<usize> = damage.killed_servers.drain(..).collect();
    let cluster = &world.cluster;
    futures::future::try_join_all(killed.iter().map(|i| cluster.restart_server(*i))).await?;
    if !killed.is_empty() {
        note(&book, format!("restarted servers {killed:?}"));
    }
    if std::mem::take(&mut damage.peers_cut) {
        world.cluster.heal();
        note(&book, "healed every link between servers".to_owned());
    }
    for link in damage.links.drain(..) {
        if let Some(proxy) = world.proxies.get(link) {
            proxy.heal();
        }
        note(&book, format!("healed {}", link_name(link)));
    }
    for (child, pid, groups) in damage.frozen.drain(..) {
        // The command first, with a head start (as a scheduler may give it after a VM wakes):
        // it tries a stale write before zkr stops it, and the fence must reject it.
        for g in &groups {
            let _ = killpg(*g, Signal::SIGCONT);
        }
        let head_start = world
            .rng
            .between(Duration::ZERO, Duration::from_millis(150));
        if !groups.is_empty() {
            tokio::time::sleep(head_start).await;
        }
        let _ = kill(pid, Signal::SIGCONT);
        note(
            &book,
            format!(
                "woke zkr-{child} ({} ms after its command)",
                head_start.as_millis()
            ),
        );
    }
    for index in damage.closed.drain(..) {
        world.start_contender(index).await?;
    }
    for i in std::mem::take(&mut damage.closed_jobs) {
        world.start_job(i).await?;
    }
    // Whole means every server in the quorum again, one of them leading.
    let deadline = tokio::time::Instant::now() + HARNESS_BOUND;
    loop {
        let mut members = 0;
        let mut leaders = 0;
        for i in 0..SERVERS {
            match world.cluster.mode(i).await {
                Ok(ServerMode::Leader) => {
                    members += 1;
                    leaders += 1;
                }
                Ok(ServerMode::Follower) => members += 1,
                _ => {}
            }
        }
        if members == SERVERS && leaders == 1 {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            problem(
                &book,
                format!("the ensemble was not whole within {HARNESS_BOUND:?} of the heal"),
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until both election paths (and the job's election) are empty, at most the session timeout plus 3 s (a killed
/// process's node goes when its session expires); returns what is left. The looking client
/// connects straight to the servers, and again whenever its session ends (the ensemble may be
/// recovering from the last round).
async fn wait_for_empty_paths(world: &World) -> Vec<String> {
    let bound = world.config.session_timeout + Duration::from_secs(3);
    let deadline = tokio::time::Instant::now() + bound;
    let mut client: Option<zookeeper_client::Client> = None;
    let mut left = Vec::new();
    loop {
        if client.is_none() {
            let connect = zookeeper_client::Client::connector()
                .with_session_timeout(world.config.session_timeout * 5)
                .connect(world.cluster.connect_string());
            match tokio::time::timeout(HARNESS_BOUND, connect).await {
                Ok(Ok(c)) => client = Some(c),
                Ok(Err(e)) => left = vec![format!("(no client to look with: {e})")],
                Err(_) => left = vec!["(no client to look with in time)".to_owned()],
            }
        }
        if let Some(c) = client.clone() {
            left.clear();
            let paths = ELECTIONS
                .iter()
                .map(|e| world.path(e))
                .chain([format!("{}/leader", world.job_path)]);
            for path in paths {
                match c.list_children(&path).await {
                    Ok(children) => {
                        left.extend(children.into_iter().map(|n| format!("{path}/{n}")))
                    }
                    Err(zookeeper_client::Error::NoNode) => {}
                    Err(e) => {
                        left.push(format!("{path}: cannot list: {e}"));
                        if matches!(
                            e,
                            zookeeper_client::Error::SessionExpired
                                | zookeeper_client::Error::ClientClosed
                        ) {
                            client = None;
                        }
                    }
                }
            }
        }
        if left.is_empty() || tokio::time::Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn finish(
    config: &TrialConfig,
    world: &World,
    plan: Vec<Round>,
    driven: Driven,
    began: Instant,
) -> TrialReport {
    let mut history = History::default();
    let mut problems;
    let log;
    let suspensions;
    let replaced;
    let mut works;
    let mut resumed = Vec::new();
    // What the trace needs of each of `history.terms` (same index).
    let mut meta = Vec::new();
    {
        let b = lock(&world.book);
        suspensions = b.suspensions.clone();
        replaced = b.replaced.clone();
        works = b.works.clone();
        for (i, (election, holder, term)) in b.local.iter().enumerate() {
            meta.push(TermMeta {
                session: Some(term.session_id()),
                lease: b.local_leases.get(i).copied(),
                reason: term.end_reason().map(|r| r.as_str().to_owned()),
            });
            let mut t = to_term(election, holder, term);
            // A term that a suspend outlived did nothing while its host was stopped: it ends,
            // for the checker, when the host stopped, provided that it ended at once on resume.
            if let Some(end) = t.end {
                for s in &suspensions {
                    let effective = s.effective_end(term.session_id(), t.start, end);
                    if effective != end {
                        resumed.push(end.saturating_duration_since(s.to));
                        t.end = Some(effective);
                    } else if term.session_id() == s.id && t.start < s.from && end > s.to {
                        // Ended later than the bound after the resume: a problem below.
                        resumed.push(end.saturating_duration_since(s.to));
                    }
                }
            }
            history.terms.push(t);
        }
        history.terms.extend(b.remote.iter().cloned());
        for t in &b.remote {
            let reason = b
                .remote_reasons
                .iter()
                .find(|(id, token, _)| *id == t.holder && *token == t.token)
                .map(|(_, _, reason)| reason.clone());
            meta.push(TermMeta {
                session: None,
                lease: None,
                reason,
            });
        }
        problems = b.problems.clone();
        log = b.log.clone();
    }
    // Terms that ran on after their host resumed (beyond the bound) are problems.
    problems.extend(
        resumed
            .iter()
            .filter(|d| **d > RESUME_BOUND)
            .map(|d| format!("a term ran on {} ms after its host resumed", d.as_millis())),
    );
    for term in history.terms.iter().filter(|t| t.end.is_none()) {
        problems.push(format!(
            "term never ended after every contender closed: {term}"
        ));
    }
    for resource in world.resources.values() {
        history
            .writes
            .extend(lock(&resource.writes).iter().cloned());
    }
    let mut violations = history.check();
    let mut runs = lock(&world.book).runs.clone();
    for run in &mut runs {
        for s in &suspensions {
            if let Some(end) = run.end {
                run.end = Some(s.effective_end(run.session_id, run.start, end));
            }
            if let Some(stopped) = run.stopped {
                run.stopped = Some(s.effective_end(run.session_id, run.start, stopped));
            }
        }
    }
    for w in &mut works {
        for s in &suspensions {
            if let Some(end) = w.end {
                w.end = Some(s.effective_end(w.session_id, w.start, end));
            }
        }
    }
    let job_history = History {
        terms: runs
            .iter()
            .map(|r| Term {
                election: JOB_ELECTION.to_owned(),
                holder: r.holder.to_owned(),
                token: r.token,
                start: r.start,
                end: r.end,
            })
            .collect(),
        writes: lock(&world.job_resource.writes).clone(),
    };
    for run in runs.iter().filter(|r| r.end.is_none()) {
        problems.push(format!(
            "job run never ended after every replica closed: {run}"
        ));
    }
    violations.extend(job_history.check());
    let job_violations = check_job(&runs, &driven.job_records);
    let job = job_figures(&runs, &driven.job_records, &job_history.writes);
    // Work as it really ran, against the terms that followed it.
    works.extend(runs.iter().map(|r| Work {
        election: JOB_ELECTION,
        holder: r.holder.to_owned(),
        session_id: r.session_id,
        token: r.token,
        start: r.start,
        end: r.stopped,
    }));
    let mut successors: Vec<Term> = history.terms.clone();
    successors.extend(runs.iter().map(|r| Term {
        election: JOB_ELECTION.to_owned(),
        holder: r.holder.to_owned(),
        token: r.token,
        start: r.term_start,
        end: r.end,
    }));
    let late_work = check_late_work(&works, &successors);
    let early_slots = check_early_slots(&runs);
    let (sessions_replaced, unexplained_replacements) =
        explain_replacements(&replaced, &driven.rounds, &world.config);
    // The job's terms (those that started a run), their ends adjusted for a suspend as the
    // other in-process terms' are.
    let (job_terms, job_meta): (Vec<Term>, Vec<TermMeta>) = lock(&world.book)
        .job_terms
        .iter()
        .map(|(holder, term, lease)| {
            let mut t = to_term(JOB_ELECTION, holder, term);
            if let Some(end) = t.end {
                for s in &suspensions {
                    let effective = s.effective_end(term.session_id(), t.start, end);
                    if effective != end {
                        t.end = Some(effective);
                    }
                }
            }
            let meta = TermMeta {
                session: Some(term.session_id()),
                lease: Some(*lease),
                reason: term.end_reason().map(|r| r.as_str().to_owned()),
            };
            (t, meta)
        })
        .unzip();
    // Trace validation: the history replayed against the model, written out if asked for.
    let job_trace = JobTrace {
        terms: &job_terms,
        meta: &job_meta,
        runs: &runs,
        writes: &job_history.writes,
        records: &driven.job_records,
        records_at: driven.job_records_at,
    };
    let trace = build_trace(config, &history, &meta, &replaced, &driven, &job_trace);
    let trace_replay = model_trace::replay(&trace);
    let mut trace_file = None;
    if let Some(dir) = config
        .histories
        .clone()
        .or_else(|| std::env::var_os("ZKR_HISTORIES").map(PathBuf::from))
    {
        let file = dir.join(format!("trial-{}.json", config.seed));
        match std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&file, trace.to_json())) {
            Ok(()) => trace_file = Some(file),
            Err(e) => problems.push(format!("writing the history to {}: {e}", file.display())),
        }
    }
    let mut time_to_leader = Vec::new();
    for healed in &driven.heals {
        for election in ELECTIONS {
            match history.check_leader_after(election, *healed, config.leader_bound()) {
                Ok(took) => time_to_leader.push((election.to_owned(), took)),
                Err(v) => {
                    if let Violation::NoLeaderAfterHeal { took: Some(t), .. } = &v {
                        time_to_leader.push((election.to_owned(), *t));
                    }
                    violations.push(v);
                }
            }
        }
    }
    TrialReport {
        seed: config.seed,
        plan,
        setup: world.setup,
        faults: driven.faults,
        log,
        history,
        violations,
        orphans: driven.orphans,
        time_to_leader,
        problems,
        elapsed: began.elapsed(),
        job_history,
        job,
        job_violations,
        job_runs: runs,
        job_records: driven.job_records,
        late_work,
        early_slots,
        sessions_replaced,
        unexplained_replacements,
        resume_to_end: resumed,
        trace,
        trace_replay,
        trace_file,
    }
}

/// What the trace records of a term beyond [`Term`].
struct TermMeta {
    /// Its ZooKeeper session (in-process terms).
    session: Option<i64>,
    /// Its lease deadline when recorded (in-process terms).
    lease: Option<BootTime>,
    /// Why it ended.
    reason: Option<String>,
}

/// What the trace records of the scheduled job.
struct JobTrace<'a> {
    /// The job's terms that started a run, as terms of [`JOB_ELECTION`].
    terms: &'a [Term],
    /// What the trace records of each of `terms` beyond [`Term`] (same index).
    meta: &'a [TermMeta],
    /// Its runs.
    runs: &'a [JobRun],
    /// The writes `job-row` received.
    writes: &'a [Write],
    /// The slot records at the close, and when they were read.
    records: &'a [SlotRecord],
    records_at: BootTime,
}

/// The trial's history as the model's trace ([`model_trace::Event`]s in time order): each
/// term's claim at its start and its end (never placed before its claim: the replay reports an
/// end before the start), the job's terms that started a run as terms of [`JOB_ELECTION`],
/// each fenced write in arrival order (`job-row`'s too), each session heard expired (when its
/// replacement was in place), each job run's start and its end (when it stopped being allowed
/// to act, never placed before its start), the job's slot records when the trial read them,
/// each round's faults and each heal. At one instant: runs' ends, then terms' ends, then
/// expiries, then claims, then runs' starts, then writes, then slot records, then faults.
fn build_trace(
    config: &TrialConfig,
    history: &History,
    meta: &[TermMeta],
    replaced: &[(usize, BootTime, i64, i64)],
    driven: &Driven,
    job: &JobTrace<'_>,
) -> Trace {
    use model_trace::Event;
    // Ranks at one instant.
    const RUN_END: u8 = 0;
    const TERM_END: u8 = 1;
    const EXPIRY: u8 = 2;
    const CLAIM: u8 = 3;
    const RUN_START: u8 = 4;
    const WRITE: u8 = 5;
    const RECORD: u8 = 6;
    const FAULT: u8 = 7;
    // (ordering instant, rank at one instant, recorded order, event)
    let mut events: Vec<(u64, u8, usize, Event)> = Vec::new();
    let terms = (history
        .terms
        .iter()
        .enumerate()
        .map(|(i, t)| (t, meta.get(i))))
    .chain(
        job.terms
            .iter()
            .enumerate()
            .map(|(i, t)| (t, job.meta.get(i))),
    );
    for (t, m) in terms {
        let start = t.start.as_nanos();
        events.push((
            start,
            CLAIM,
            events.len(),
            Event::Claim {
                at_ns: start,
                election: t.election.clone(),
                holder: t.holder.clone(),
                token: t.token.get(),
                session: m.and_then(|m| m.session),
                lease_ns: m.and_then(|m| m.lease).map(BootTime::as_nanos),
            },
        ));
        if let Some(end) = t.end {
            let end = end.as_nanos();
            events.push((
                end.max(start),
                TERM_END,
                events.len(),
                Event::TermEnd {
                    at_ns: end,
                    election: t.election.clone(),
                    holder: t.holder.clone(),
                    token: t.token.get(),
                    reason: m.and_then(|m| m.reason.clone()),
                },
            ));
        }
    }
    for w in history.writes.iter().chain(job.writes) {
        let at = w.at.as_nanos();
        events.push((
            at,
            WRITE,
            events.len(),
            Event::Write {
                at_ns: at,
                resource: w.resource.clone(),
                writer: w.writer.clone(),
                token: w.token.get(),
                accepted: w.accepted,
            },
        ));
    }
    for (session, when, old, new) in replaced {
        let at = when.as_nanos();
        events.push((
            at,
            EXPIRY,
            events.len(),
            Event::SessionExpired {
                at_ns: at,
                participant: format!("session-{session}"),
                session: *old,
                new_session: Some(*new),
            },
        ));
    }
    for (at, faults) in &driven.rounds {
        for f in faults {
            let at = at.as_nanos();
            let what = f.to_string();
            events.push((at, FAULT, events.len(), Event::Fault { at_ns: at, what }));
        }
    }
    for healed in &driven.heals {
        let at = healed.as_nanos();
        let what = "every fault healed".to_owned();
        events.push((at, FAULT, events.len(), Event::Fault { at_ns: at, what }));
    }
    for r in job.runs {
        let start = r.start.as_nanos();
        events.push((
            start,
            RUN_START,
            events.len(),
            Event::RunStart {
                at_ns: start,
                job: JOB_ELECTION.to_owned(),
                slot: r.slot.clone(),
                holder: r.holder.to_owned(),
                attempt: r.attempt,
                token: r.token.get(),
                session: Some(r.session_id),
            },
        ));
        if let Some(end) = r.end {
            let end = end.as_nanos();
            events.push((
                end.max(start),
                RUN_END,
                events.len(),
                Event::RunEnd {
                    at_ns: end,
                    job: JOB_ELECTION.to_owned(),
                    slot: r.slot.clone(),
                    holder: r.holder.to_owned(),
                    attempt: r.attempt,
                    token: r.token.get(),
                    ok: r.ok,
                },
            ));
        }
    }
    let read = job.records_at.as_nanos();
    for r in job.records {
        events.push((
            read,
            RECORD,
            events.len(),
            Event::SlotRecord {
                at_ns: read,
                job: JOB_ELECTION.to_owned(),
                slot: r.slot.clone(),
                state: r.state.as_str().to_owned(),
                token: r.token,
                attempt: r.attempt,
                runner: r.runner.clone(),
            },
        ));
    }
    events.sort_by_key(|(at, rank, order, _)| (*at, *rank, *order));
    let mut trace = Trace::new(
        "fault trial",
        events.into_iter().map(|(_, _, _, e)| e).collect(),
    );
    trace.seed = Some(config.seed);
    trace.session_timeout_ms = u64::try_from(config.session_timeout.as_millis()).ok();
    trace
}

/// Work that went on after a successor's term began: for each piece of work, the earliest term
/// of its election with a higher token that began after the work did; the work must have
/// stopped by then (the promise of a grace inside the lease: the work is stopped by the lease's
/// deadline whatever its grace, and the successor starts after it).
fn check_late_work(works: &[Work], terms: &[Term]) -> Vec<String> {
    let mut out = Vec::new();
    for w in works {
        let Some(end) = w.end else { continue };
        let next = terms
            .iter()
            .filter(|t| t.election == w.election && t.token > w.token && t.start > w.start)
            .min_by_key(|t| t.start);
        if let Some(next) = next
            && end > next.start
        {
            out.push(format!(
                "{}: {}'s work with token {} went on {} ms after {}'s term with token {} began",
                w.election,
                w.holder,
                w.token,
                end.saturating_duration_since(next.start).as_millis(),
                next.holder,
                next.token
            ));
        }
    }
    out
}

/// Runs of a schedule's slot that began before the slot's nominal instant by the host's wall
/// clock (the servers'), beyond [`EARLY_SLACK_MS`].
fn check_early_slots(runs: &[JobRun]) -> Vec<String> {
    runs.iter()
        .filter_map(|r| {
            let early = r.nominal_ms? - r.started_wall_ms;
            (early > EARLY_SLACK_MS).then(|| format!("{r}: {early} ms before its slot's time"))
        })
        .collect()
}

/// How many in-process sessions were replaced, and which replacements no fault of their rounds
/// explains: an expiry, a suspend, or a cut of the session's own link, or a fault to the servers
/// other than a silent leader or a rolling restart (which must keep every session). The rounds
/// are those under way within a session timeout before the replacement: a fault's replacement
/// comes once the fault is healed and the session has asked twice whether it expired, often
/// early in the next round.
fn explain_replacements(
    replaced: &[(usize, BootTime, i64, i64)],
    rounds: &[(BootTime, Vec<Fault>)],
    config: &TrialConfig,
) -> (usize, Vec<String>) {
    let mut unexplained = Vec::new();
    for (i, at, old, new) in replaced {
        let round = rounds.iter().rev().find(|(began, _)| began <= at);
        let since = *at - config.session_timeout;
        // Round k is under way from its start to the next round's.
        let recent = rounds.iter().enumerate().filter(|(k, (began, _))| {
            began <= at && rounds.get(k + 1).is_none_or(|(next, _)| *next > since)
        });
        let explained = recent.into_iter().any(|(_, (_, faults))| {
            faults.iter().any(|f| match f.kind {
                FaultKind::ExpireSession | FaultKind::Suspend => f.target == *i,
                FaultKind::CutLink | FaultKind::BlackholeLink | FaultKind::LoseReplies => {
                    f.target == *i
                }
                FaultKind::SilentLeader | FaultKind::RollingRestart => false,
                kind => kind.is_server_fault(),
            })
        });
        if !explained {
            let faults = round.map_or_else(String::new, |(_, faults)| {
                faults
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" + ")
            });
            unexplained.push(format!(
                "session-{i} {old:#x} replaced by {new:#x} at {at} (round: {faults}; timeout {:?})",
                config.session_timeout
            ));
        }
    }
    (replaced.len(), unexplained)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session whose replacement its round's fault caused is replaced only once the fault is
    /// healed and the session has asked twice whether it expired: often in the next round. The
    /// faults of every round under way within a session timeout before the replacement explain
    /// it; a round's faults long before it do not.
    #[test]
    fn a_replacement_just_after_its_faults_round_is_explained_by_that_round() {
        let config = TrialConfig::new(1, "zkr");
        let t0 = BootTime::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let rounds = vec![
            (
                ms(0),
                vec![Fault {
                    kind: FaultKind::LoseReplies,
                    target: 1,
                }],
            ),
            (
                ms(6_900),
                vec![Fault {
                    kind: FaultKind::RestartContender,
                    target: 1,
                }],
            ),
        ];
        // 0.75 s into the next round, 1 s after the lose-replies round was healed.
        let (n, unexplained) = explain_replacements(&[(1, ms(7_650), 1, 2)], &rounds, &config);
        assert_eq!((n, unexplained.len()), (1, 0), "{unexplained:?}");
        // Another session, or long after the lose-replies round: unexplained.
        let (_, unexplained) = explain_replacements(&[(0, ms(7_650), 1, 2)], &rounds, &config);
        assert_eq!(unexplained.len(), 1, "{unexplained:?}");
        let (_, unexplained) = explain_replacements(&[(1, ms(9_500), 1, 2)], &rounds, &config);
        assert_eq!(unexplained.len(), 1, "{unexplained:?}");
    }

    #[test]
    fn the_same_seed_gives_the_same_plan_and_others_differ() {
        let t = Duration::from_secs(2);
        assert_eq!(plan(7, 5, t), plan(7, 5, t));
        assert_ne!(plan(7, 5, t), plan(8, 5, t));
    }

    #[test]
    fn plans_keep_the_quorum_and_hold_frozen_processes_past_their_session() {
        let t = Duration::from_secs(2);
        for seed in 0..500 {
            for round in plan(seed, 4, t) {
                // Two drawn first at most, and one of time or operations on top.
                assert!(!round.faults.is_empty() && round.faults.len() <= 3);
                let on_servers = round
                    .faults
                    .iter()
                    .filter(|f| f.kind.is_server_fault())
                    .count();
                assert!(on_servers <= 1, "seed {seed}: {round:?}");
                if round
                    .faults
                    .iter()
                    .any(|f| f.kind == FaultKind::FreezeProcess)
                {
                    assert!(round.hold >= t * 3 / 2, "seed {seed}: {round:?}");
                }
                assert!(round.hold <= t * 3);
                for (n, a) in round.faults.iter().enumerate() {
                    for b in &round.faults[n + 1..] {
                        assert!(!conflicts(a, b), "seed {seed}: {round:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_session_of_the_session_expired_policy_is_never_expired_from_outside() {
        let session = CONTENDERS
            .iter()
            .find(|c| c.policy == ErrorPolicy::SessionExpired)
            .and_then(|c| c.session);
        assert_eq!(session, Some(EXPIRABLE_SESSIONS));
        let seeded: Vec<&str> = CONTENDERS
            .iter()
            .filter(|c| c.seeded_policy)
            .map(|c| c.id)
            .collect();
        assert_eq!(
            seeded,
            ["latch-2"],
            "only the unexpired session's latch has a drawn policy"
        );
        for seed in 0..500 {
            for round in plan(seed, 4, Duration::from_secs(2)) {
                for f in round.faults {
                    if f.kind == FaultKind::ExpireSession {
                        assert!(f.target < EXPIRABLE_SESSIONS, "seed {seed}: {f}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_fault_kind_is_planned_across_seeds() {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..200 {
            for round in plan(seed, 3, Duration::from_secs(2)) {
                seen.extend(round.faults.iter().map(|f| f.kind));
            }
        }
        assert_eq!(seen.len(), FaultKind::ALL.len(), "{seen:?}");
    }

    #[test]
    fn time_faults_come_on_top_of_the_rounds_drawn_before_them() {
        let t = Duration::from_secs(2);
        let mut added = 0;
        for seed in 0..300 {
            let classic = classic_plan(seed, 4, t);
            let all = plan(seed, 4, t);
            let sync = setup(seed, t).sync_timeout();
            for (before, after) in classic.iter().zip(&all) {
                assert_eq!(after.faults[..before.faults.len()], before.faults[..]);
                for f in &after.faults[before.faults.len()..] {
                    added += 1;
                    assert!(FaultKind::TIME.contains(&f.kind), "seed {seed}: {f}");
                    match f.kind {
                        FaultKind::Suspend => assert!(after.hold >= t * 3 / 2),
                        FaultKind::SilentLeader => assert!(after.hold > sync),
                        _ => {}
                    }
                }
            }
        }
        assert!(added > 200, "{added} time faults in 1200 rounds");
    }

    #[test]
    fn a_suspended_term_ends_at_the_suspend_only_if_it_ended_at_once_on_resume() {
        let at = |ms: u64| BootTime::from_nanos(ms * 1_000_000);
        let s = Suspension {
            session: 0,
            id: 7,
            from: at(1_000),
            to: at(5_000),
        };
        assert_eq!(s.effective_end(7, at(500), at(5_010)), at(1_000));
        assert_eq!(s.effective_end(7, at(500), at(1_000)), at(1_000));
        assert_eq!(
            s.effective_end(8, at(500), at(5_010)),
            at(5_010),
            "another session"
        );
        assert_eq!(
            s.effective_end(7, at(500), at(900)),
            at(900),
            "ended before"
        );
        let late = at(5_000) + RESUME_BOUND + Duration::from_millis(1);
        assert_eq!(
            s.effective_end(7, at(500), late),
            late,
            "ran on after the resume"
        );
    }

    #[test]
    fn work_that_outlives_its_successors_start_is_found() {
        let at = |ms: u64| BootTime::from_nanos(ms * 1_000_000);
        let work = |end: u64| Work {
            election: JOB_ELECTION,
            holder: "job-0".to_owned(),
            session_id: 1,
            token: FencingToken::from_raw(10),
            start: at(100),
            end: Some(at(end)),
        };
        let next = Term {
            election: JOB_ELECTION.to_owned(),
            holder: "job-1".to_owned(),
            token: FencingToken::from_raw(12),
            start: at(1_000),
            end: None,
        };
        assert!(check_late_work(&[work(999)], std::slice::from_ref(&next)).is_empty());
        let late = check_late_work(&[work(1_250)], &[next]);
        assert!(
            late[0].contains("went on 250 ms after job-1's term"),
            "{late:?}"
        );
    }

    #[test]
    fn a_run_before_its_slots_time_is_early() {
        let mut r = run("job-0", "2026-12-05T02:00:00Z", 1, 10, true);
        let nominal = Schedule::parse_key(&r.slot).unwrap();
        r.nominal_ms = Some(nominal);
        r.started_wall_ms = nominal - 50;
        assert_eq!(check_early_slots(std::slice::from_ref(&r)).len(), 1);
        r.started_wall_ms = nominal + 3;
        assert!(check_early_slots(&[r]).is_empty());
    }

    #[test]
    fn an_expiry_is_done_before_the_server_fault_of_its_round() {
        let round = [
            Fault {
                kind: FaultKind::PauseServer,
                target: 2,
            },
            Fault {
                kind: FaultKind::ExpireSession,
                target: 1,
            },
        ];
        let kinds: Vec<FaultKind> = in_order(&round).map(|f| f.kind).collect();
        assert_eq!(kinds, [FaultKind::ExpireSession, FaultKind::PauseServer]);
    }

    #[test]
    fn setups_reach_a_sync_timeout_beyond_the_session_and_both_policies() {
        let t = Duration::from_secs(2);
        assert_eq!(setup(7, t), setup(7, t));
        let setups: Vec<Setup> = (0..60).map(|seed| setup(seed, t)).collect();
        assert!(setups.iter().any(|s| s.sync_timeout() > t));
        assert!(setups.iter().any(|s| s.sync_timeout() == t));
        assert!(setups.iter().any(|s| s.sync_timeout() < t));
        for policy in [ErrorPolicy::Standard, ErrorPolicy::SessionExpired] {
            assert!(setups.iter().any(|s| s.latch_policy == policy));
        }
        assert!(setups.iter().all(|s| s.sync_limit >= 2));
    }

    #[test]
    fn rng_is_deterministic_and_spreads() {
        let mut a = Rng::new(0);
        let mut b = Rng::new(0);
        assert_eq!(a.next_u64(), b.next_u64());
        let mut hits = [0usize; 4];
        for _ in 0..4000 {
            hits[a.below(4)] += 1;
        }
        assert!(hits.iter().all(|h| *h > 800), "{hits:?}");
        let d = a.between(Duration::from_millis(10), Duration::from_millis(20));
        assert!(d >= Duration::from_millis(10) && d <= Duration::from_millis(20));
    }

    fn run(holder: &'static str, slot: &str, attempt: u32, token: i64, ok: bool) -> JobRun {
        JobRun {
            holder,
            slot: slot.to_owned(),
            attempt,
            token: FencingToken::from_raw(token),
            start: BootTime::from_nanos(u64::try_from(token).unwrap() * 1_000),
            end: Some(BootTime::from_nanos(
                u64::try_from(token).unwrap() * 1_000 + 500,
            )),
            ok: Some(ok),
            session_id: 1,
            term_start: BootTime::from_nanos(u64::try_from(token).unwrap() * 1_000),
            stopped: Some(BootTime::from_nanos(
                u64::try_from(token).unwrap() * 1_000 + 500,
            )),
            nominal_ms: None,
            started_wall_ms: 0,
        }
    }

    fn record(slot: &str, state: &str, token: Option<i64>, attempt: u32) -> SlotRecord {
        serde_json::from_value(serde_json::json!({
            "slot": slot, "nominal_ms": 0, "state": state, "token": token, "attempt": attempt,
            "runner": "job-0", "started_ms": 0, "ended_ms": 1, "exit_code": null,
        }))
        .unwrap()
    }

    #[test]
    fn the_job_check_passes_a_retried_slot_and_catches_a_slot_finished_twice() {
        // Slot a cut off with token 10, retried with 12 and recorded succeeded by that run.
        let runs = [
            run("job-0", "a", 1, 10, false),
            run("job-1", "a", 2, 12, true),
            run("job-1", "b", 1, 12, true),
        ];
        let records = [
            record("a", "succeeded", Some(12), 2),
            record("b", "succeeded", Some(12), 1),
        ];
        assert_eq!(check_job(&runs, &records), Vec::<String>::new());
        let figures = job_figures(&runs, &records, &[]);
        assert_eq!(
            (
                figures.runs,
                figures.retried,
                figures.cut_off,
                figures.succeeded
            ),
            (3, 1, 1, 2)
        );

        // Run again with the same token after it returned Ok: finished twice.
        let twice = [
            run("job-1", "b", 1, 12, true),
            run("job-1", "b", 2, 12, true),
        ];
        let v = check_job(&twice, &[record("b", "succeeded", Some(12), 2)]);
        assert!(v.iter().any(|v| v.contains("finished twice")), "{v:?}");
    }

    #[test]
    fn the_job_check_catches_open_slots_unknown_tokens_and_falling_attempts() {
        let runs = [
            run("job-0", "a", 2, 10, true),
            run("job-1", "a", 1, 12, false),
        ];
        // Slot a recorded running by no replica of the job, with a token none of its runs had.
        let mut stranger = record("a", "running", Some(14), 3);
        stranger.runner = Some("someone".to_owned());
        let records = [stranger, record("c", "succeeded", Some(9), 1)];
        let v = check_job(&runs, &records);
        assert!(v.iter().any(|v| v.contains("still running")), "{v:?}");
        assert!(
            v.iter().any(|v| v.contains("none of its 2 runs had")),
            "{v:?}"
        );
        assert!(
            v.iter().any(|v| v.contains("no run with that token")),
            "{v:?}"
        );
        assert!(v.iter().any(|v| v.contains("follows")), "{v:?}");
        // A cut-off slot whose retry the final pause holds back is owed, not open.
        let cut = [run("job-0", "d", 1, 20, false)];
        assert!(check_job(&cut, &[record("d", "running", Some(20), 1)]).is_empty());
        // So is a slot whose claim landed but whose run never began (seed 10: the claim's
        // term ended with the quorum leader isolated, and the pause came before a retry).
        assert_eq!(
            check_job(&[], &[record("e", "running", Some(30), 1)]),
            Vec::<String>::new()
        );
        // Still running with a run that returned Ok: its end's record was refused (the term
        // ended first), and the next leader handles the slot as cut off, which the pause holds.
        let done = [run("job-0", "d", 1, 20, true)];
        assert!(check_job(&done, &[record("d", "running", Some(20), 1)]).is_empty());
        // But a run still going at the close leaves its slot open.
        let mut going = run("job-0", "f", 1, 21, true);
        going.end = None;
        let v = check_job(&[going], &[record("f", "running", Some(21), 1)]);
        assert!(v.iter().any(|v| v.contains("still running")), "{v:?}");
        let orphan_run = check_job(&[run("job-0", "z", 1, 5, true)], &[]);
        assert!(orphan_run[0].contains("no record"), "{orphan_run:?}");
    }

    #[test]
    fn contenders_cover_every_kind_on_two_paths() {
        let zkr = CONTENDERS.iter().filter(|c| c.kind == Kind::Zkr).count();
        assert_eq!(zkr, CHILDREN);
        assert!(CONTENDERS.len() >= 5);
        for c in &CONTENDERS {
            assert!(c.session.is_some() != c.child.is_some(), "{}", c.id);
        }
    }
}
