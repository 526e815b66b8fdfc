//! The project's own test rigs, not published: what only this repository's tests, examples and
//! benchmark need.
//!
//! - [`fixtures`]: the integration tests' shared helpers (the one server per test binary,
//!   sessions, bounded waits, recorders), the Curator peer ([`fixtures::curator`], a real
//!   Curator JVM driven over a line protocol) and the `zkr` driver ([`fixtures::zkr`]).
//! - [`trial`]: the seeded fault trials (`rigs/tests/fault_trials.rs`, `rigs/examples/chaos.rs`).
//! - [`prologue`]: what every example starts with (an embedded ZooKeeper or `$ZK_CONNECT`).
//!
//! The harness itself (servers, clusters, proxies, the history checker) is the published
//! `zookeeper-recipes-testing`; this crate turns on its `provision` feature, so that the
//! README's two commands install Debian's packages when nothing else provides ZooKeeper.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// The rigs are read as source; their docs may point at private items.
#![allow(rustdoc::private_intra_doc_links)]

pub mod fixtures;
pub mod prologue;
pub mod trial;

use std::path::PathBuf;

/// The `zkr` binary of this build: `$ZKR_BIN` when set, else `target/<profile>/zkr` beside the
/// running test binary (`target/<profile>/deps/`) or example (`target/<profile>/examples/`).
///
/// With `build`, it first runs `$CARGO build -p zkr` in the same profile, so that the binary is
/// never older than its sources. Tests pass `false`: `cargo test` holds the build directory's
/// lock while its test binaries run, and a plain `cargo test` at the root has built `zkr` (it is
/// a member of the workspace); a single `cargo test --test X` does not rebuild it.
///
/// # Errors
/// A message that says how to build it when it is missing or the build failed.
pub fn zkr_binary(build: bool) -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("ZKR_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let profile_dir = exe
        .parent()
        .and_then(|dir| dir.parent())
        .ok_or("this program is not in target/<profile>/{deps,examples}")?;
    let zkr = profile_dir.join("zkr");
    let release = profile_dir.file_name().is_some_and(|n| n == "release");
    let hint = format!(
        "run `cargo build -p zkr{}` (a plain `cargo test` at the workspace root builds it), or set ZKR_BIN",
        if release { " --release" } else { "" }
    );
    if build {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = std::process::Command::new(&cargo);
        command
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["build", "--quiet", "-p", "zkr", "--bin", "zkr"]);
        if release {
            command.arg("--release");
        }
        match command.status() {
            Ok(status) if status.success() => {}
            Ok(status) => return Err(format!("building zkr failed ({status}): {hint}")),
            Err(e) => return Err(format!("cannot run {cargo:?}: {e}; {hint}")),
        }
    }
    if zkr.is_file() {
        Ok(zkr)
    } else {
        Err(format!("zkr is not at {}: {hint}", zkr.display()))
    }
}
