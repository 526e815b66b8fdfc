//! The suites that CI runs on both backends (local ZooKeeper processes, and containers with
//! `ZKR_TEST_BACKEND=docker`): the harness itself, the managed session, and the contender core's
//! three recipes on it (latch, selector, mutex).
//!
//! Integration tests are a few binaries with one module per suite, not one binary per file: each
//! binary links the whole workspace, and the tests of one binary share its ZooKeeper server
//! (`fixtures::shared_server`) and run side by side. A module's tests run alone with
//! `cargo test --test backends -- session::`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod harness;
mod leader_latch;
mod leader_selector;
mod mutex;
mod session;
