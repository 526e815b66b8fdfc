//! The other recipes and what crosses them, against real ZooKeeper: the observer, the pool, the
//! scheduled job, handovers, hostile input, the examples' code, interop with real Curator, the
//! faults of a three-server ensemble and of time, the one test that says what to install, and the
//! check that every test a spec cites exists.
//!
//! One binary with one module per suite, as `tests/backends` (see there why); a module's tests
//! run alone with `cargo test --test recipes -- leader_pool::`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod ensemble_faults;
mod examples;
mod handover;
mod hostile_input;
mod interop_curator;
mod leader_observer;
mod leader_pool;
mod requirements;
mod scheduled_job;
mod security;
mod spec_citations;
mod time;
mod tls_matrix;
