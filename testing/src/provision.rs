//! Installing what the tests need from Debian's packages, when nothing else provides it.
//!
//! The README's two commands (`cargo run --example demo`, `cargo test`) are meant to work on a
//! fresh Debian or Ubuntu machine. When the harness finds no local ZooKeeper and no Docker
//! engine with a ZooKeeper image, it installs Debian's packages itself, provided that
//!
//! - the machine is Debian-like (`/etc/debian_version` and `apt-get`),
//! - it runs as root, or `sudo -n` works (password-less sudo), and
//! - `ZKR_NO_INSTALL` is not set to `1` (or `true`).
//!
//! It prints exactly what it runs and why to stderr, once: the installation holds an exclusive
//! lock on `/tmp/zookeeper-recipes-install.lock`, so test binaries running at the same time wait
//! for the first one, then find the packages there and install nothing. Anywhere else it does
//! nothing and the caller reports the error that names the commands.
//!
//! The same goes for libfaketime ([`libfaketime`], Debian's `faketime` package), which the
//! tests of a replica whose wall clock is off preload into that replica's process.

use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::fcntl::{Flock, FlockArg};

use super::{HarnessError, Result};

const LOCK_PATH: &str = "/tmp/zookeeper-recipes-install.lock";

/// apt's option to wait up to ten minutes for dpkg's lock instead of failing at once: another
/// install may hold it (a fresh machine's unattended upgrades; CI building its Docker image).
const APT_LOCK_WAIT: &str = "DPkg::Lock::Timeout=600";

/// Whether installing is allowed here, and with which prefix (`sudo -n` or nothing).
fn installer() -> Option<Vec<&'static str>> {
    if std::env::var("ZKR_NO_INSTALL").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true")) {
        return None;
    }
    if !Path::new("/etc/debian_version").exists() || !on_path("apt-get") {
        return None;
    }
    if is_root() {
        return Some(Vec::new());
    }
    let sudo_ok = on_path("sudo")
        && Command::new("sudo")
            .args(["-n", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    sudo_ok.then(|| vec!["sudo", "-n"])
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// The effective uid from `/proc/self/status` (`Uid: real effective ...`).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

/// Installs Debian `packages` when `missing()` says what is missing (`Some(what)`) and
/// installing is allowed here (see the module doc), and says so on stderr with `why`.
///
/// Returns `Ok(true)` when nothing is missing afterwards (installed now, or by a concurrent
/// test binary while this one waited for the lock), `Ok(false)` when installing is not allowed
/// here (the caller then reports its own error).
///
/// # Errors
///
/// [`HarnessError::Io`] when the lock cannot be taken, `apt-get` fails (its output is on
/// stderr), or something is still missing after the installation (the error says what).
pub fn install_debian_packages(
    packages: &[&str],
    why: &str,
    missing: impl Fn() -> Option<String>,
) -> Result<bool> {
    if missing().is_none() {
        return Ok(true);
    }
    let Some(prefix) = installer() else {
        return Ok(false);
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_PATH)
        .map_err(HarnessError::io(format!("opening {LOCK_PATH}")))?;
    let _lock = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| HarnessError::Io {
        context: format!("locking {LOCK_PATH}"),
        source: e.into(),
    })?;
    // Another test binary may have installed them while this one waited.
    if missing().is_none() {
        return Ok(true);
    }
    let update: Vec<&str> = prefix
        .iter()
        .copied()
        .chain(["apt-get", "-o", APT_LOCK_WAIT, "update"])
        .collect();
    let install: Vec<&str> = prefix
        .iter()
        .copied()
        .chain([
            "env",
            "DEBIAN_FRONTEND=noninteractive",
            "apt-get",
            "-o",
            APT_LOCK_WAIT,
            "install",
            "-y",
            "--no-install-recommends",
        ])
        .chain(packages.iter().copied())
        .collect();
    say(format_args!(
        "zookeeper-recipes test harness: {why}.\n  Installing Debian's packages {} (set ZKR_NO_INSTALL=1 to turn this off); running:\n    {}\n    {}",
        packages.join(" "),
        update.join(" "),
        install.join(" ")
    ));
    for command in [&update, &install] {
        let Some((program, args)) = command.split_first() else {
            continue;
        };
        let started = std::time::Instant::now();
        let status = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            // Its output goes to stderr, which cargo test shows for a failing test only.
            .stdout(Stdio::from(
                std::io::stderr()
                    .as_fd()
                    .try_clone_to_owned()
                    .map_err(HarnessError::io("duplicating stderr"))?,
            ))
            .status()
            .map_err(HarnessError::io(format!("running {}", command.join(" "))))?;
        if !status.success() {
            return Err(HarnessError::Io {
                context: format!("running {}", command.join(" ")),
                source: std::io::Error::other(status.to_string()),
            });
        }
        say(format_args!(
            "  done in {:.1} s: {}",
            started.elapsed().as_secs_f64(),
            command.join(" ")
        ));
    }
    match missing() {
        None => Ok(true),
        Some(what) => Err(HarnessError::Io {
            context: format!("after installing {}", packages.join(" ")),
            source: std::io::Error::other(format!("still missing: {what}")),
        }),
    }
}

/// Debian's package that brings libfaketime (its `libfaketime` dependency holds the library).
const FAKETIME_PACKAGE: &str = "faketime";

/// Where Debian puts libfaketime's preload library: under the machine's multiarch directory
/// (`/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1` on amd64), found here by looking
/// through `/usr/lib/*/faketime/` so that any architecture's path is found.
fn find_libfaketime() -> Option<PathBuf> {
    let direct = Path::new("/usr/lib/faketime/libfaketime.so.1");
    if direct.is_file() {
        return Some(direct.to_owned());
    }
    std::fs::read_dir("/usr/lib")
        .ok()?
        .filter_map(|entry| Some(entry.ok()?.path().join("faketime/libfaketime.so.1")))
        .find(|lib| lib.is_file())
}

/// libfaketime's preload library, for tests that shift one process's wall clock
/// (`LD_PRELOAD=<it> FAKETIME=+1h FAKETIME_DONT_FAKE_MONOTONIC=1`, the last so that its
/// monotonic and boot clocks stay the machine's). Found where Debian's `faketime` package puts
/// it, or installed with that package when it is missing and the harness may install (see
/// the module doc), as the harness installs ZooKeeper.
///
/// # Errors
///
/// [`HarnessError::Io`] when it is missing and cannot be installed here (the error says how to
/// install it), or installing failed.
pub fn libfaketime() -> Result<PathBuf> {
    let installed = install_debian_packages(
        &[FAKETIME_PACKAGE],
        "a test shifts one process's wall clock with libfaketime, which is missing",
        || {
            find_libfaketime()
                .is_none()
                .then(|| "/usr/lib/*/faketime/libfaketime.so.1".to_owned())
        },
    )?;
    match find_libfaketime() {
        Some(lib) => Ok(lib),
        None => Err(HarnessError::Io {
            context: "looking for libfaketime (/usr/lib/*/faketime/libfaketime.so.1)".to_owned(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                if installed {
                    "not found after installing Debian's faketime package".to_owned()
                } else {
                    "not installed, and the harness may not install it here: on Debian/Ubuntu run \
                     `sudo apt-get install -y faketime`"
                        .to_owned()
                },
            ),
        }),
    }
}

/// Writes a line to the process's stderr itself: `eprintln!` inside a test is captured by the
/// test runner and shown only when the test fails, and an installation must be seen when it
/// happens.
pub(crate) fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
