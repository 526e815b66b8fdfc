//! One clock for every process of a machine: `CLOCK_MONOTONIC`, read as the time since boot.
//!
//! [`Instant`] is opaque: two processes cannot compare their `Instant`s. On Linux, `Instant` is
//! read from `CLOCK_MONOTONIC`, which every process of the machine shares, so a
//! [`MonotonicTime`] (that clock's reading as a [`Duration`] since boot) taken in one process
//! compares with one taken in another. This is how a test compares the terms of leaders living
//! in different processes (`zkr` prints its terms' start and end this way), and how a term's
//! deadline can be handed to another process.
//!
//! [`MonotonicTime::from_instant`] converts an `Instant` of this process: the offset between the
//! two readings is measured once per process (to within a few microseconds at worst, usually
//! tens of nanoseconds, as both are the same kernel clock).

use std::fmt;
use std::ops::{Add, Sub};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::time::{ClockId, clock_gettime};

/// A reading of the machine's `CLOCK_MONOTONIC`: the time since boot (excluding suspend).
///
/// Comparable across the processes of one machine, unlike [`Instant`].
///
/// # Examples
/// ```
/// use std::time::{Duration, Instant};
/// use zookeeper_recipes::clock::MonotonicTime;
///
/// let now = Instant::now();
/// let later = MonotonicTime::from_instant(now + Duration::from_millis(5));
/// assert_eq!(later - MonotonicTime::from_instant(now), Duration::from_millis(5));
/// assert_eq!(MonotonicTime::from_nanos(later.as_nanos()), later);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MonotonicTime(Duration);

/// This process's `Instant` and the clock read at the same moment.
struct Anchor {
    instant: Instant,
    since_boot: Duration,
}

fn read_clock() -> Option<Duration> {
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .ok()
        .map(Duration::from)
}

fn anchor() -> &'static Anchor {
    static ANCHOR: OnceLock<Anchor> = OnceLock::new();
    ANCHOR.get_or_init(|| {
        // The clock read on both sides of `Instant::now()`; the midpoint is the reading that
        // goes with the instant. Should the clock be unreadable (it cannot be on Linux), times
        // are counted from this process's first use instead, and only compare within it.
        let before = read_clock();
        let instant = Instant::now();
        let after = read_clock();
        let since_boot = match (before, after) {
            (Some(b), Some(a)) => b + (a.saturating_sub(b)) / 2,
            (Some(t), None) | (None, Some(t)) => t,
            (None, None) => Duration::ZERO,
        };
        Anchor {
            instant,
            since_boot,
        }
    })
}

impl MonotonicTime {
    /// The clock now.
    pub fn now() -> Self {
        Self::from_instant(Instant::now())
    }

    /// The clock reading at `instant`, an [`Instant`] of this process.
    pub fn from_instant(instant: Instant) -> Self {
        let anchor = anchor();
        if instant >= anchor.instant {
            MonotonicTime(anchor.since_boot + (instant - anchor.instant))
        } else {
            MonotonicTime(anchor.since_boot.saturating_sub(anchor.instant - instant))
        }
    }

    /// The [`Instant`] of this process at this reading (`None` if this process's `Instant`
    /// cannot represent it).
    pub fn to_instant(self) -> Option<Instant> {
        let anchor = anchor();
        if self.0 >= anchor.since_boot {
            anchor.instant.checked_add(self.0 - anchor.since_boot)
        } else {
            anchor.instant.checked_sub(anchor.since_boot - self.0)
        }
    }

    /// A reading from its nanoseconds since boot (as [`as_nanos`](Self::as_nanos) gives them).
    pub const fn from_nanos(nanos: u64) -> Self {
        MonotonicTime(Duration::from_nanos(nanos))
    }

    /// Nanoseconds since boot (saturating at `u64::MAX`, some 584 years of uptime).
    pub fn as_nanos(self) -> u64 {
        u64::try_from(self.0.as_nanos()).unwrap_or(u64::MAX)
    }

    /// The time since boot.
    pub const fn since_boot(self) -> Duration {
        self.0
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: MonotonicTime) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<Duration> for MonotonicTime {
    type Output = MonotonicTime;

    fn add(self, rhs: Duration) -> MonotonicTime {
        MonotonicTime(self.0.saturating_add(rhs))
    }
}

impl Sub<Duration> for MonotonicTime {
    type Output = MonotonicTime;

    fn sub(self, rhs: Duration) -> MonotonicTime {
        MonotonicTime(self.0.saturating_sub(rhs))
    }
}

impl Sub for MonotonicTime {
    type Output = Duration;

    /// The time from `rhs` to `self`, zero when `rhs` is later.
    fn sub(self, rhs: MonotonicTime) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl fmt::Display for MonotonicTime {
    /// Seconds since boot with millisecond precision, like `12345.678s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}s", self.0.as_secs(), self.0.subsec_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_convert_both_ways_and_keep_their_distance() {
        let a = Instant::now();
        let b = a + Duration::from_millis(1500);
        let (ma, mb) = (
            MonotonicTime::from_instant(a),
            MonotonicTime::from_instant(b),
        );
        assert_eq!(mb - ma, Duration::from_millis(1500));
        assert_eq!(ma - mb, Duration::ZERO);
        assert_eq!(ma.to_instant(), Some(a));
        let earlier = a - Duration::from_millis(3);
        assert_eq!(
            MonotonicTime::from_instant(earlier),
            ma - Duration::from_millis(3)
        );
    }

    #[test]
    fn readings_match_the_kernel_clock() {
        let before = read_clock().unwrap();
        let now = MonotonicTime::now().since_boot();
        let after = read_clock().unwrap();
        // The anchor is taken within microseconds; allow a generous millisecond for a loaded
        // machine that preempted the test between the reads.
        assert!(
            now + Duration::from_millis(1) >= before,
            "{now:?} < {before:?}"
        );
        assert!(
            now <= after + Duration::from_millis(1),
            "{now:?} > {after:?}"
        );
    }

    #[test]
    fn nanos_round_trip_and_display_is_seconds() {
        let t = MonotonicTime::from_nanos(12_345_678_901);
        assert_eq!(t.as_nanos(), 12_345_678_901);
        assert_eq!(t.to_string(), "12.345s");
        assert_eq!(t + Duration::from_millis(1) - t, Duration::from_millis(1));
    }
}
