//! Seeded fault trials on a three-server ensemble, checked by the history checker: the
//! promise (never two leaders acting at once, never a stale write accepted, never an orphaned
//! node, a leader soon after every heal) as a measured figure. See
//! `rigs/src/trial.rs` for what one trial does.
//!
//! CI runs a short set: seeds 1..=10 (`ZKR_TRIALS=<n>` runs seeds 1..=n), one trial after
//! another (three JVMs each). `ZKR_SEED=<n>` replays the trial of one seed and prints its whole
//! account (with `--nocapture`). Long runs:
//! `cargo run --release --example chaos -- --trials 200`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use zookeeper_recipes_rigs::fixtures as common;
// The trial runner is the project's test rig, not public API (`rigs/src/trial.rs`).
use zookeeper_recipes_rigs::trial;

use std::time::Instant;

use common::zookeeper;
use trial::{TrialConfig, run_trial};

/// The seeds of this run: `ZKR_SEED` alone, else `1..=ZKR_TRIALS` (default 10).
fn seeds() -> Vec<u64> {
    if let Ok(seed) = std::env::var("ZKR_SEED") {
        return vec![seed.trim().parse().expect("ZKR_SEED must be an integer")];
    }
    let trials: u64 = std::env::var("ZKR_TRIALS")
        .ok()
        .map(|t| t.trim().parse().expect("ZKR_TRIALS must be an integer"))
        .unwrap_or(10);
    (1..=trials).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_fault_trials_keep_every_promise() {
    if !zookeeper() {
        return;
    }
    let began = Instant::now();
    let mut failed = Vec::new();
    let mut worst = std::time::Duration::ZERO;
    // Replaying one seed shows its whole account, passed or not.
    let replay = std::env::var_os("ZKR_SEED").is_some();
    for seed in seeds() {
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
        "fault trials: {:.1} s in all, worst time to a leader after a heal {:?}",
        began.elapsed().as_secs_f64(),
        worst
    );
    assert!(
        failed.is_empty(),
        "trials failed for seeds {failed:?} (details above); replay one with ZKR_SEED=<seed>"
    );
}
