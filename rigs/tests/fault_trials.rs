//! Seeded fault trials on a three-server ensemble, checked by the history checker: the
//! promise (never two leaders acting at once, never a stale write accepted, never an orphaned
//! node, a leader soon after every heal) as a measured figure. See
//! `rigs/src/trial.rs` for what one trial does.
//!
//! CI runs a short set: seeds 1..=10 (`ZKR_TRIALS=<n>` runs seeds 1..=n) in two lanes, odd and
//! even seeds, each lane a test of its own, so that the test harness runs the lanes side by side
//! (two ensembles, six JVMs, at once; a trial spends most of its time waiting on session
//! timeouts and faults, not on the cores). `ZKR_SEED=<n>` replays the trial of one seed in the
//! first lane and prints its whole account (with `--nocapture`). Long runs:
//! `cargo run --release --example chaos -- --trials 200`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use zookeeper_recipes_rigs::fixtures as common;
// The trial runner is the project's test rig, not public API (`rigs/src/trial.rs`).
use zookeeper_recipes_rigs::trial;

use std::time::Instant;

use common::zookeeper;
use trial::{TrialConfig, run_trial};

/// The lanes the seeds are dealt to: each is a test, and the harness runs them side by side.
const LANES: u64 = 2;

/// The seeds of this run's `lane`: `ZKR_SEED` alone (in lane 0), else those of
/// `1..=ZKR_TRIALS` (default 10) that fall to the lane.
fn seeds(lane: u64) -> Vec<u64> {
    if let Ok(seed) = std::env::var("ZKR_SEED") {
        let seed = seed.trim().parse().expect("ZKR_SEED must be an integer");
        return if lane == 0 { vec![seed] } else { Vec::new() };
    }
    let trials: u64 = std::env::var("ZKR_TRIALS")
        .ok()
        .map(|t| t.trim().parse().expect("ZKR_TRIALS must be an integer"))
        .unwrap_or(10);
    (1..=trials)
        .filter(|seed| (seed - 1) % LANES == lane)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_fault_trials_keep_every_promise_odd_seeds() {
    run_lane(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_fault_trials_keep_every_promise_even_seeds() {
    run_lane(1).await;
}

/// Runs the lane's trials one after another, and fails naming every seed that broke a promise.
async fn run_lane(lane: u64) {
    if !zookeeper() {
        return;
    }
    let seeds = seeds(lane);
    if seeds.is_empty() {
        return;
    }
    let began = Instant::now();
    let mut failed = Vec::new();
    let mut worst = std::time::Duration::ZERO;
    // Replaying one seed shows its whole account, passed or not.
    let replay = std::env::var_os("ZKR_SEED").is_some();
    for seed in seeds {
        let config = TrialConfig::new(seed, common::zkr::exe());
        let report = run_trial(&config).await.unwrap_or_else(|e| {
            panic!("trial seed {seed} could not run: {e}\nreplay with ZKR_SEED={seed}")
        });
        eprint!("{}", report.summary());
        if replay && report.passed() {
            eprint!("{}", report.details());
        }
        worst = worst.max(report.worst_time_to_leader().unwrap_or_default());
        if !report.passed() {
            failed.push(seed);
        }
    }
    eprintln!(
        "fault trials, lane {lane}: {:.1} s in all, worst time to a leader after a heal {:?}",
        began.elapsed().as_secs_f64(),
        worst
    );
    assert!(
        failed.is_empty(),
        "trials failed for seeds {failed:?} (details above); replay one with ZKR_SEED=<seed>"
    );
}
