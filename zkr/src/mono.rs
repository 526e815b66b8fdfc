//! The machine's `CLOCK_MONOTONIC`, for the output lines that promised it (`*_mono_ns`).
//!
//! The library's deadlines run on boot time ([`BootTime`]), which counts a host's suspend;
//! `zkr` also prints monotonic readings so that a log can be lined up with tools that use
//! `CLOCK_MONOTONIC` (journald's monotonic timestamps, `perf`).

use std::time::Duration;

use nix::time::{ClockId, clock_gettime};
use zookeeper_recipes::BootTime;

/// A reading of `CLOCK_MONOTONIC` (suspend excluded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct MonotonicTime(Duration);

fn read(clock: ClockId) -> Option<Duration> {
    clock_gettime(clock).ok().map(Duration::from)
}

impl MonotonicTime {
    /// The clock now.
    pub(crate) fn now() -> Self {
        MonotonicTime(read(ClockId::CLOCK_MONOTONIC).unwrap_or_default())
    }

    /// The monotonic reading that goes with boot time `at`: `at` minus the time the host has
    /// spent suspended so far (exact unless the host suspended between `at` and now).
    pub(crate) fn from_boot(at: BootTime) -> Self {
        let boot = Duration::from_nanos(BootTime::now().as_nanos());
        let mono = read(ClockId::CLOCK_MONOTONIC).unwrap_or(boot);
        let at = Duration::from_nanos(at.as_nanos());
        MonotonicTime(at.saturating_sub(boot.saturating_sub(mono)))
    }

    /// Nanoseconds since boot, suspend excluded (saturating at `u64::MAX`).
    pub(crate) fn as_nanos(self) -> u64 {
        u64::try_from(self.0.as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_boot_reading_maps_to_the_monotonic_clock() {
        assert!(MonotonicTime::now().as_nanos() <= BootTime::now().as_nanos());
        let at = BootTime::now();
        let mono = MonotonicTime::from_boot(at).as_nanos();
        let direct = MonotonicTime::now().as_nanos();
        assert!(direct.abs_diff(mono) < 50_000_000, "{mono} vs {direct}");
    }
}
