//! Stamps zkr with the commit it was built from, for `zkr --version`: `$ZKR_COMMIT` when set
//! (a package build outside git), else `git describe --always` of the checkout's HEAD, else
//! `unknown` (a source tarball). Uncommitted changes are not marked: the build script runs
//! again when HEAD moves, not when a file is edited.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=ZKR_COMMIT");
    // Rebuild when HEAD moves: HEAD itself (a checkout, or a worktree's own HEAD), the branch's
    // ref, and packed refs.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!(
            "cargo:rerun-if-changed={}",
            PathBuf::from(&dir).join("HEAD").display()
        );
    }
    // Only files that exist: cargo runs a build script whose watched file is missing at every
    // build (a fresh clone has no packed-refs), and zkr would be compiled again each time.
    if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
        let common = PathBuf::from(common);
        let branch = git(&["symbolic-ref", "-q", "HEAD"]).map(|b| common.join(b));
        for watched in std::iter::once(common.join("packed-refs")).chain(branch) {
            if watched.exists() {
                println!("cargo:rerun-if-changed={}", watched.display());
            }
        }
    }
    let commit = std::env::var("ZKR_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["describe", "--always", "--abbrev=12"]))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=ZKR_COMMIT={commit}");
}
