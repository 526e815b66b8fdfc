//! A long run of seeded fault trials, with a table at the end.
//!
//! ```text
//! cargo run --release --example chaos -- --trials 200 [--seed N] [--rounds R] [--session-timeout 2s] [--histories DIR] [--load N] [--repeat K] [--diff-sync]
//! ```
//!
//! Runs trials for seeds `N, N+1, ...` one after another (each starts three ZooKeeper JVMs; see
//! `rigs/src/trial.rs`), prints one line per trial (and the whole account of a
//! failed one, with its seed), then a table: trials, faults of each kind, terms, overlaps,
//! stale writes accepted and rejected, orphans, work that went on after its successor began,
//! slots finished twice or run early, sessions replaced, how soon a term a host's suspend
//! outlived ended after the resume, the time to a new leader after a heal (median, p99,
//! worst), each error policy's share, and the seed range. Without `--seed`, the first seed is the current Unix time in seconds
//! (printed), so that repeated runs explore new schedules; `ZKR_SEED=<n> cargo test --test
//! fault_trials` replays any one of them. Exits 1 when a trial failed.
//!
//! Every trial's history is replayed against the protocol's model (trace validation,
//! `model/README.md`); a divergence fails the trial, and the table counts events, events
//! mapped and divergences. `--histories DIR` also writes each history to `DIR/trial-<seed>.json`,
//! for `cargo run -p zookeeper-recipes-model --release -- replay FILE`.
//!
//! `--containers` runs each trial's three servers as Docker containers (the harness's docker
//! backend, image `ZKR_ZOOKEEPER_IMAGE`, default `zookeeper:3.9`): the same schedule of faults
//! is then done to containers, a frozen server is a `docker pause`d one, a killed one is
//! `docker kill`ed and restarted, and the partitions (a follower cut off from its peers while
//! clients still reach it, the quorum leader cut off, a minority/majority split, one-way cuts)
//! are iptables rules in the containers' network namespaces (root on the host). The history
//! checker and the properties are the same. It is the same as `ZKR_TEST_BACKEND=docker`.
//!
//! `--load N` keeps N threads busy (plain spinning, at normal priority) beside the trials for the
//! whole run, as a CI machine that runs other jobs is: the trials must be as strict there as on
//! an idle machine. `--repeat K` runs each seed K times in a row (a seed's schedule of faults is
//! the same each time; what the scheduler does is not), to measure how often one seed fails.
//!
//! The trials' servers send a rejoining server a whole snapshot (`zookeeper.forceSnapshotSync`):
//! Debian's ZooKeeper 3.8.0 can lose committed transactions in the DIFF sync it would otherwise
//! use after the restarts the trials make (ZOOKEEPER-4785; fixed in 3.8.4 and 3.9.2), and the
//! rejoined server then serves a data tree that misses acknowledged writes. `--diff-sync` lets
//! it happen (seed 42008 shows it about one run in three under `--load 2`: an election with no
//! leader for 40 s, slot records missing, lost compare-and-set races); a trial whose election
//! waits too long lists each server's view of it, so that such a divergence is seen as such.
//!
//! The trials need the `zkr` binary: this example runs `$CARGO build -p zkr` in its own profile
//! first and takes `target/<profile>/zkr` (or `$ZKR_BIN`).

use std::collections::BTreeMap;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use zookeeper_recipes_model::trace::JobCounts;
use zookeeper_recipes_rigs::trial::{FaultKind, TrialConfig, TrialReport, run_trial};

struct Args {
    containers: bool,
    trials: u64,
    seed: Option<u64>,
    rounds: usize,
    session_timeout: Duration,
    histories: Option<std::path::PathBuf>,
    load: usize,
    repeat: u64,
    diff_sync: bool,
}

const USAGE: &str = "usage: chaos [--containers] [--trials N] [--seed FIRST] [--rounds R] [--session-timeout 2s] [--histories DIR] [--load N] [--repeat K] [--diff-sync]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        containers: false,
        trials: 200,
        seed: None,
        rounds: 4,
        session_timeout: Duration::from_secs(2),
        histories: None,
        load: 0,
        repeat: 1,
        diff_sync: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--containers" => args.containers = true,
            "--diff-sync" => args.diff_sync = true,
            "--trials" => args.trials = value()?.parse().map_err(|e| format!("--trials: {e}"))?,
            "--seed" => args.seed = Some(value()?.parse().map_err(|e| format!("--seed: {e}"))?),
            "--rounds" => args.rounds = value()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--session-timeout" => {
                args.session_timeout = humantime::parse_duration(&value()?)
                    .map_err(|e| format!("--session-timeout: {e}"))?
            }
            "--histories" => args.histories = Some(value()?.into()),
            "--load" => args.load = value()?.parse().map_err(|e| format!("--load: {e}"))?,
            "--repeat" => {
                args.repeat = value()?.parse().map_err(|e| format!("--repeat: {e}"))?;
                if args.repeat == 0 {
                    return Err(format!("--repeat: at least 1\n{USAGE}"));
                }
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(args)
}

/// `n` threads that spin until dropped: the load a busy CI machine puts beside the trials.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(n: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut x: u64 = 1;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..10_000 {
                            x = std::hint::black_box(
                                x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1),
                            );
                        }
                    }
                })
            })
            .collect();
        Load { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Runs this program again with `ZKR_TEST_BACKEND=docker` and the same arguments.
fn containers_run() -> ExitCode {
    let status = std::env::current_exe().and_then(|exe| {
        std::process::Command::new(exe)
            .args(std::env::args().skip(1))
            .env("ZKR_TEST_BACKEND", "docker")
            .status()
    });
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => ExitCode::from(u8::try_from(s.code().unwrap_or(1)).unwrap_or(1)),
        Err(e) => {
            eprintln!("chaos: cannot run itself again with ZKR_TEST_BACKEND=docker: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Default)]
struct PolicyTotals {
    trials: usize,
    overlaps: usize,
    stale_accepted: usize,
    late_work: usize,
    slots_twice_or_early: usize,
}

#[derive(Default)]
struct Totals {
    trials: u64,
    failed: Vec<u64>,
    faults: BTreeMap<FaultKind, usize>,
    terms: usize,
    writes_accepted: usize,
    writes_rejected: usize,
    overlaps: usize,
    falling_tokens: usize,
    stale_accepted: usize,
    orphans: usize,
    late_leaders: usize,
    problems: usize,
    heals: usize,
    worst: Option<(Duration, u64)>,
    times: Vec<Duration>,
    /// Per error policy of the trial's latch-2: trials, overlapping terms, stale writes
    /// accepted, late work, slots run twice or early.
    by_policy: BTreeMap<String, PolicyTotals>,
    /// Work that went on after a successor's term began.
    late_work: usize,
    /// Slots begun before their time.
    early_slots: usize,
    /// Slots finished twice (a job violation of that kind).
    slots_twice: usize,
    /// Sessions replaced, and those no fault of their round explains.
    sessions_replaced: usize,
    unexplained_replacements: usize,
    /// From a host's resume to the end of a term its suspend outlived.
    resume_to_end: Vec<Duration>,
    /// Trials whose `syncLimit x tickTime` reaches the session timeout.
    long_sync: usize,
    session_timeout: Duration,
    /// Trace validation: events recorded, mapped to a model action, divergences.
    trace_events: usize,
    trace_mapped: usize,
    trace_divergences: usize,
    /// The job's events in the traces (runs, their ends, records checked).
    trace_job: JobCounts,
}

impl Totals {
    fn add(&mut self, r: &TrialReport) {
        self.trials += 1;
        if !r.passed() {
            self.failed.push(r.seed);
        }
        for (kind, n) in &r.faults {
            *self.faults.entry(*kind).or_default() += n;
        }
        self.terms += r.history.terms.len();
        self.trace_events += r.trace_replay.events;
        self.trace_mapped += r.trace_replay.mapped;
        self.trace_divergences += r.trace_replay.divergences.len();
        let job = &r.trace_replay.job;
        self.trace_job.runs += job.runs;
        self.trace_job.ends_ok += job.ends_ok;
        self.trace_job.ends_error += job.ends_error;
        self.trace_job.ends_aborted += job.ends_aborted;
        self.trace_job.records += job.records;
        self.trace_job.attempts_without_run += job.attempts_without_run;
        self.writes_accepted += r.writes_accepted();
        self.writes_rejected += r.writes_rejected();
        self.overlaps += r.overlaps();
        let twice = r
            .job_violations
            .iter()
            .filter(|v| v.contains("finished twice"))
            .count();
        let policy = self
            .by_policy
            .entry(format!("{:?}", r.setup.latch_policy))
            .or_default();
        policy.trials += 1;
        policy.overlaps += r.overlaps();
        policy.stale_accepted += r.stale_writes_accepted();
        policy.late_work += r.late_work.len();
        policy.slots_twice_or_early += twice + r.early_slots.len();
        self.late_work += r.late_work.len();
        self.early_slots += r.early_slots.len();
        self.slots_twice += twice;
        self.sessions_replaced += r.sessions_replaced;
        self.unexplained_replacements += r.unexplained_replacements.len();
        self.resume_to_end.extend(r.resume_to_end.iter().copied());
        if r.setup.sync_timeout() >= self.session_timeout {
            self.long_sync += 1;
        }
        self.falling_tokens += r.falling_tokens();
        self.stale_accepted += r.stale_writes_accepted();
        self.orphans += r.orphans.len();
        self.late_leaders += r.late_leaders();
        self.problems += r.problems.len();
        self.heals += r.time_to_leader.len();
        self.times.extend(r.time_to_leader.iter().map(|(_, d)| *d));
        if let Some(w) = r.worst_time_to_leader()
            && self.worst.is_none_or(|(d, _)| w > d)
        {
            self.worst = Some((w, r.seed));
        }
    }

    fn table(&self, first: u64, last: u64, wall: Duration, bound: Duration) -> String {
        let mut rows: Vec<(String, String)> = vec![
            ("trials".into(), self.trials.to_string()),
            ("seeds".into(), format!("{first}..={last}")),
            (
                "failed".into(),
                if self.failed.is_empty() {
                    "0".into()
                } else {
                    format!("{} (seeds {:?})", self.failed.len(), self.failed)
                },
            ),
        ];
        for (policy, t) in &self.by_policy {
            rows.push((
                format!(
                    "  {policy} (latch-2, job-2): trials, overlaps, stale accepted, late work, slots twice or early"
                ),
                format!(
                    "{}, {}, {}, {}, {}",
                    t.trials, t.overlaps, t.stale_accepted, t.late_work, t.slots_twice_or_early
                ),
            ));
        }
        rows.push((
            "  syncLimit x tick >= session timeout".into(),
            format!("{} trials", self.long_sync),
        ));
        let total: usize = self.faults.values().sum();
        rows.push(("faults".into(), total.to_string()));
        for kind in FaultKind::ALL {
            rows.push((
                format!("  {kind}"),
                self.faults.get(&kind).copied().unwrap_or(0).to_string(),
            ));
        }
        let mut times = self.times.clone();
        times.sort();
        let pct = |p: usize| {
            times
                .get((times.len().saturating_sub(1)) * p / 100)
                .map_or("-".to_owned(), |d| format!("{} ms", d.as_millis()))
        };
        rows.extend([
            ("terms".into(), self.terms.to_string()),
            ("writes accepted".into(), self.writes_accepted.to_string()),
            (
                "stale writes rejected".into(),
                self.writes_rejected.to_string(),
            ),
            ("overlapping terms".into(), self.overlaps.to_string()),
            ("tokens not rising".into(), self.falling_tokens.to_string()),
            (
                "stale writes accepted".into(),
                self.stale_accepted.to_string(),
            ),
            ("orphan nodes".into(), self.orphans.to_string()),
            (
                "work on after its successor began".into(),
                self.late_work.to_string(),
            ),
            ("slots finished twice".into(), self.slots_twice.to_string()),
            ("slots run early".into(), self.early_slots.to_string()),
            (
                "sessions replaced (unexplained by their round)".into(),
                format!(
                    "{} ({})",
                    self.sessions_replaced, self.unexplained_replacements
                ),
            ),
            (
                "terms a suspend outlived: ended after the resume, worst".into(),
                format!(
                    "{}: {}",
                    self.resume_to_end.len(),
                    self.resume_to_end
                        .iter()
                        .max()
                        .map_or("-".to_owned(), |d| format!("{} ms", d.as_millis()))
                ),
            ),
            (
                format!("heals without a leader in {} ms", bound.as_millis()),
                format!("{} of {}", self.late_leaders, self.heals),
            ),
            ("harness problems".into(), self.problems.to_string()),
            (
                "trace validation: events, mapped, divergences".into(),
                format!(
                    "{}, {}, {}",
                    self.trace_events, self.trace_mapped, self.trace_divergences
                ),
            ),
            (
                "trace validation, job: runs (ended ok / cut off / aborted), records checked, attempts with no run".into(),
                format!(
                    "{} ({} / {} / {}), {}, {}",
                    self.trace_job.runs,
                    self.trace_job.ends_ok,
                    self.trace_job.ends_error,
                    self.trace_job.ends_aborted,
                    self.trace_job.records,
                    self.trace_job.attempts_without_run
                ),
            ),
            ("time to leader after heal, median".into(), pct(50)),
            ("time to leader after heal, p99".into(), pct(99)),
            (
                "worst time to leader after heal".into(),
                self.worst.map_or("-".into(), |(d, seed)| {
                    format!("{} ms (seed {seed})", d.as_millis())
                }),
            ),
            (
                "wall time".into(),
                format!("{:.1} min", wall.as_secs_f64() / 60.0),
            ),
        ]);
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        rows.iter()
            .map(|(k, v)| format!("| {k:<width$} | {v} |\n"))
            .collect()
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    // `RUST_LOG` logs the trials' own participants to stderr (a diagnosis aid).
    zookeeper_recipes_rigs::prologue::init_tracing();
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if args.containers && std::env::var("ZKR_TEST_BACKEND").as_deref() != Ok("docker") {
        // The harness reads its backend from the environment: run this program again with it.
        return containers_run();
    }
    if let Err(e) = zookeeper_recipes_testing::zookeeper_available() {
        eprintln!("chaos: {e}");
        return ExitCode::FAILURE;
    }
    let zkr = match zookeeper_recipes_rigs::zkr_binary(true) {
        Ok(z) => z,
        Err(e) => {
            eprintln!("chaos: {e}");
            return ExitCode::FAILURE;
        }
    };
    let first = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    let seeds = first..first.saturating_add(args.trials);
    let last = seeds.end.saturating_sub(1).max(first);
    let servers = match zookeeper_recipes_testing::backend() {
        Ok(zookeeper_recipes_testing::Backend::Docker) => format!(
            "servers: Docker containers of {}",
            std::env::var("ZKR_ZOOKEEPER_IMAGE").unwrap_or_else(|_| "zookeeper:3.9".to_owned())
        ),
        _ => "servers: local JVMs".to_owned(),
    };
    println!(
        "chaos: {} trials, seeds {first}..={last}{}, {} rounds each, session timeout {:?}, zkr {}, {servers}, {} busy threads beside",
        args.trials.saturating_mul(args.repeat),
        if args.repeat > 1 {
            format!(" ({} times each)", args.repeat)
        } else {
            String::new()
        },
        args.rounds,
        args.session_timeout,
        zkr.display(),
        args.load
    );
    let _load = Load::start(args.load);
    let began = Instant::now();
    let mut totals = Totals {
        session_timeout: args.session_timeout,
        ..Totals::default()
    };
    let bound = TrialConfig::new(first, &zkr)
        .session_timeout(args.session_timeout)
        .leader_bound();
    for seed in
        seeds.flat_map(|seed| std::iter::repeat_n(seed, usize::try_from(args.repeat).unwrap_or(1)))
    {
        let mut config = TrialConfig::new(seed, &zkr)
            .rounds(args.rounds)
            .session_timeout(args.session_timeout)
            .diff_sync(args.diff_sync);
        if let Some(dir) = &args.histories {
            config = config.histories(dir);
        }
        match run_trial(&config).await {
            Ok(report) => {
                print!("{}", report.summary());
                totals.add(&report);
            }
            Err(e) => {
                println!("trial seed {seed} could not run: {e}");
                totals.trials += 1;
                totals.failed.push(seed);
                totals.problems += 1;
            }
        }
    }
    println!();
    print!("{}", totals.table(first, last, began.elapsed(), bound));
    if totals.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
