//! `zkr` against real ZooKeeper: the leadership, lock and observer commands (`cli`) and the
//! scheduled job (`cron_cli`), as child processes of this test.
//!
//! One binary with a module per suite (each binary links the whole workspace); a module's tests
//! run alone with `cargo test -p zkr --test zkr_cli -- cron_cli::`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod auth;
mod cli;
mod cron_check;
mod cron_cli;
mod cron_ops;
mod metrics;
mod security;
mod tls_matrix;

/// Tests that kill or freeze processes, or stop servers, run one at a time across both suites,
/// so that their timing is not skewed by each other's processes and JVMs on a small machine.
static FAULTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
