//! The ensemble's time, as a scheduled job's leader learns it from its own fenced writes. Pure
//! computation, no I/O: the loop feeds it samples and asks it for "now".
//!
//! Every write's `Stat.mtime` is the quorum leader's wall clock when it prepared the
//! transaction: one clock for every replica, whatever each replica's own clock says. A write
//! sent at boot time `sent` and answered at `answered` was stamped somewhere in between, so at a
//! later boot time `t` the ensemble's clock reads between `mtime + (t - answered)` and
//! `mtime + (t - sent)`. The job uses the **lower** bound: a slot found due by it is due by the
//! ensemble's clock too, so a slot is never run before its nominal instant, at the price of
//! running up to a round trip late. Boot time counts a host suspend, so the estimate moves on
//! through one as the ensemble's clock does.
//!
//! The estimate extrapolates one sample on this host's boot clock, whose rate may differ from
//! the quorum leader's wall clock by the drift of two oscillators (NTP disciplines both; an
//! undisciplined one drifts up to some 100 ppm, 0.36 s an hour): the loop takes a fresh sample
//! before it takes up work when its sample is older than a minute, and the claim of every slot
//! is itself a sample.
//!
//! **Steps.** Every sample is checked against the one before it, projected on the boot clock,
//! before anything acts on it ([`EnsembleClock::sample`]): the quorum leader that stamps the
//! `mtime` may change (an election), and a server whose wall clock is 40 days ahead would
//! otherwise make everything "40 days old" at once (the history pruned by age, issue 43). A
//! sample outside the projection's bounds by more than the tolerance (plus a drift of
//! 1000 ppm of the time between the samples) is a [`Sampled::Step`]: it is not adopted, and the
//! caller stops. A sample is **confirmed** when it agreed with the one before it; deleting by
//! age needs a confirmed one ([`EnsembleClock::confirmed`]).

use std::time::Duration;

use crate::clock::BootTime;

/// Milliseconds of a duration, saturating.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// One write's answer: the ensemble stamped it `mtime_ms` between `sent` and `answered`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    mtime_ms: i64,
    sent: BootTime,
    answered: BootTime,
}

/// How far a wall-clock reading is from the ensemble's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Offset {
    /// The reading minus the ensemble's time (positive: the reading is ahead), measured against
    /// the middle of the sample's round trip.
    pub(crate) offset_ms: i64,
    /// How far off that can be either way: half the sample's round trip.
    pub(crate) error_ms: i64,
}

impl Offset {
    /// Whether the reading is surely further than `tolerance` from the ensemble's clock, either
    /// way (the measurement's error counts in the reading's favour).
    pub(crate) fn beyond(&self, tolerance: Duration) -> bool {
        self.offset_ms
            .saturating_abs()
            .saturating_sub(self.error_ms)
            > millis(tolerance)
    }
}

/// What a new sample said about the ensemble's clock ([`EnsembleClock::sample`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sampled {
    /// The first sample: adopted, not confirmed.
    First,
    /// It agrees with the one before, projected on the boot clock: adopted and confirmed.
    Steady,
    /// Answered before the sample kept: dropped.
    Late,
    /// It is off the projection of the one before by more than the tolerance: the ensemble's
    /// clock stepped by `step_ms` (positive: forward). Not adopted; the estimate stays on the
    /// sample before, unconfirmed.
    Step {
        /// The new sample minus the nearest bound of the projection, in milliseconds.
        step_ms: i64,
    },
}

/// The drift allowed between two samples, in parts per million of the boot time between them:
/// ten times what an undisciplined oscillator drifts.
const DRIFT_PPM: i64 = 1000;

/// The ensemble's clock, estimated from the newest sample.
#[derive(Debug, Clone, Default)]
pub(crate) struct EnsembleClock {
    latest: Option<Sample>,
    /// Whether `latest` agreed with the sample before it.
    confirmed: bool,
}

impl EnsembleClock {
    /// A write sent at `sent` and answered at `answered` (boot time) reported `mtime_ms`. The
    /// newest answer is kept; a sample answered before the one kept is dropped. A sample is
    /// checked against the one before it first: stamped between `sent` and `answered`, a
    /// steady clock's `mtime` lies between the earlier sample's `mtime` plus
    /// `sent - earlier.answered` and plus `answered - earlier.sent`; beyond those bounds by more
    /// than `tolerance` (and the drift allowance) it is a [`Sampled::Step`], not adopted.
    pub(crate) fn sample(
        &mut self,
        mtime_ms: i64,
        sent: BootTime,
        answered: BootTime,
        tolerance: Duration,
    ) -> Sampled {
        let sent = sent.min(answered);
        let next = Sample {
            mtime_ms,
            sent,
            answered,
        };
        let Some(prev) = self.latest else {
            self.latest = Some(next);
            self.confirmed = false;
            return Sampled::First;
        };
        if answered < prev.answered {
            return Sampled::Late;
        }
        let boot = |t: BootTime| millis(t.since_boot());
        let lower = prev
            .mtime_ms
            .saturating_add(boot(sent).saturating_sub(boot(prev.answered)));
        let upper = prev
            .mtime_ms
            .saturating_add(boot(answered).saturating_sub(boot(prev.sent)));
        let drift = boot(answered).saturating_sub(boot(prev.answered)) / (1_000_000 / DRIFT_PPM);
        let allowance = millis(tolerance).saturating_add(drift);
        let step_ms = if mtime_ms < lower {
            mtime_ms.saturating_sub(lower)
        } else if mtime_ms > upper {
            mtime_ms.saturating_sub(upper)
        } else {
            0
        };
        if step_ms.saturating_abs() > allowance {
            self.confirmed = false;
            return Sampled::Step { step_ms };
        }
        self.latest = Some(next);
        self.confirmed = true;
        Sampled::Steady
    }

    /// Whether the sample the estimate stands on agreed with the one before it: what deleting
    /// anything by age needs.
    pub(crate) fn confirmed(&self) -> bool {
        self.latest.is_some() && self.confirmed
    }

    /// The ensemble's time at boot time `at` (milliseconds since the Unix epoch), by the lower
    /// bound: never ahead of the ensemble's clock, behind it by at most the sample's round trip
    /// (plus drift). `None` before the first sample.
    pub(crate) fn now_ms(&self, at: BootTime) -> Option<i64> {
        self.latest
            .map(|s| s.mtime_ms.saturating_add(millis(at - s.answered)))
    }

    /// How far `wall_ms`, a wall-clock reading taken at boot time `at`, is from the ensemble's
    /// clock. `None` before the first sample.
    pub(crate) fn offset(&self, wall_ms: i64, at: BootTime) -> Option<Offset> {
        let s = self.latest?;
        let half_trip = millis(s.answered - s.sent) / 2;
        let middle = self.now_ms(at)?.saturating_add(half_trip);
        Some(Offset {
            offset_ms: wall_ms.saturating_sub(middle),
            error_ms: half_trip.saturating_add(1),
        })
    }

    /// How old the sample is at boot time `at`; `None` before the first one.
    pub(crate) fn age(&self, at: BootTime) -> Option<Duration> {
        self.latest.map(|s| at - s.answered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const TOL: Duration = Duration::from_secs(10);
    const DAY_MS: i64 = 24 * 3600 * 1000;

    /// An ensemble whose clock reads `base + (t - boot 0)` at boot time t.
    fn ensemble_at(base: i64, t: BootTime) -> i64 {
        base + millis(t.since_boot())
    }

    fn boot_ms(ms: u64) -> BootTime {
        BootTime::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn no_sample_no_time() {
        let clock = EnsembleClock::default();
        assert_eq!(clock.now_ms(boot_ms(5)), None);
        assert_eq!(clock.offset(0, boot_ms(5)), None);
        assert_eq!(clock.age(boot_ms(5)), None);
    }

    #[test]
    fn the_estimate_is_never_ahead_of_the_ensemble_and_behind_by_at_most_the_round_trip() {
        let base = 1_796_256_000_000;
        // A write sent at 1000 ms, stamped at any instant of its 40 ms round trip.
        for stamped_at in [1000, 1013, 1040] {
            let mut clock = EnsembleClock::default();
            let mtime = ensemble_at(base, boot_ms(stamped_at));
            clock.sample(mtime, boot_ms(1000), boot_ms(1040), TOL);
            for later in [1040, 1041, 5000, 3_600_000] {
                let at = boot_ms(later);
                let estimate = clock.now_ms(at).unwrap();
                let truth = ensemble_at(base, at);
                assert!(estimate <= truth, "ahead: {estimate} > {truth}");
                assert!(truth - estimate <= 40, "behind by {} ms", truth - estimate);
            }
        }
    }

    #[test]
    fn a_suspend_moves_the_estimate_on_as_the_ensembles_clock_moves() {
        let mut clock = EnsembleClock::default();
        clock.sample(10_000, boot_ms(100), boot_ms(100), TOL);
        // Ten minutes of boot time later (a suspend included), ten minutes of ensemble time.
        assert_eq!(clock.now_ms(boot_ms(100 + 600_000)), Some(610_000));
    }

    #[test]
    fn the_offset_of_a_wall_reading_is_measured_against_the_middle_of_the_round_trip() {
        let mut clock = EnsembleClock::default();
        clock.sample(50_000, boot_ms(1000), boot_ms(1020), TOL);
        let at = boot_ms(2020);
        // The ensemble reads 51_000..=51_020 now; the middle is 51_010.
        let honest = clock.offset(51_010, at).unwrap();
        assert_eq!(honest.offset_ms, 0);
        assert_eq!(honest.error_ms, 11);
        assert!(!honest.beyond(Duration::from_secs(10)));
        let hour = 3_600_000;
        let ahead = clock.offset(51_010 + hour, at).unwrap();
        assert_eq!(ahead.offset_ms, hour);
        assert!(ahead.beyond(Duration::from_secs(10)));
        assert!(!ahead.beyond(Duration::from_secs(7200)));
        let behind = clock.offset(51_010 - hour, at).unwrap();
        assert_eq!(behind.offset_ms, -hour);
        assert!(behind.beyond(Duration::from_secs(10)));
        // Just past the tolerance, but not by more than the measurement's error: not beyond.
        let edge = clock.offset(51_010 + 10_005, at).unwrap();
        assert!(!edge.beyond(Duration::from_secs(10)));
        assert!(
            clock
                .offset(51_010 + 10_012, at)
                .unwrap()
                .beyond(10_000 * MS)
        );
    }

    #[test]
    fn the_newest_answer_is_kept_and_an_older_one_arriving_late_is_dropped() {
        let mut clock = EnsembleClock::default();
        assert_eq!(
            clock.sample(1_000, boot_ms(0), boot_ms(10), TOL),
            Sampled::First
        );
        assert_eq!(
            clock.sample(9_000, boot_ms(100), boot_ms(110), TOL),
            Sampled::Steady
        );
        assert_eq!(clock.now_ms(boot_ms(110)), Some(9_000));
        assert_eq!(
            clock.sample(2_000, boot_ms(50), boot_ms(60), TOL),
            Sampled::Late
        );
        assert_eq!(clock.now_ms(boot_ms(110)), Some(9_000));
        assert_eq!(clock.age(boot_ms(1_110)), Some(Duration::from_secs(1)));
    }

    #[test]
    fn a_step_of_the_ensembles_clock_beyond_the_tolerance_is_not_adopted_and_unconfirms_it() {
        let base = 1_796_256_000_000;
        let mut clock = EnsembleClock::default();
        assert_eq!(
            clock.sample(base, boot_ms(1000), boot_ms(1010), TOL),
            Sampled::First
        );
        assert!(!clock.confirmed(), "a first sample is not confirmed");
        // A minute later, steady (a quorum leader whose clock is 3 s off the last one's: within).
        let later = base + 60_000 + 3_000;
        assert_eq!(
            clock.sample(later, boot_ms(61_000), boot_ms(61_010), TOL),
            Sampled::Steady
        );
        assert!(clock.confirmed());
        // A quorum leader 40 days ahead stamps the next write.
        let ahead = later + 40 * DAY_MS + 1_000;
        let Sampled::Step { step_ms } = clock.sample(ahead, boot_ms(62_000), boot_ms(62_020), TOL)
        else {
            panic!("a 40-day step was adopted");
        };
        assert!((step_ms - 40 * DAY_MS).abs() < 1_000, "step {step_ms}");
        assert!(!clock.confirmed(), "a step unconfirms the estimate");
        // The estimate stays on the sample before.
        assert_eq!(clock.now_ms(boot_ms(62_010)), Some(later + 1_000));
        // A step back (a clock set back by a day) is one too.
        let mut back = EnsembleClock::default();
        back.sample(base, boot_ms(0), boot_ms(10), TOL);
        assert!(matches!(
            back.sample(base - DAY_MS, boot_ms(20), boot_ms(30), TOL),
            Sampled::Step { step_ms } if step_ms < -DAY_MS + 100
        ));
    }

    #[test]
    fn a_long_wait_between_samples_allows_for_drift_and_a_suspend_is_no_step() {
        let base = 1_796_256_000_000;
        let mut clock = EnsembleClock::default();
        clock.sample(base, boot_ms(0), boot_ms(10), TOL);
        // A week later by the boot clock (a suspend included), the ensemble 30 s further on
        // than the projection: 50 ppm of drift, within the allowance (10 s + 1000 ppm).
        let week = 7 * DAY_MS;
        let week_boot = u64::try_from(week).unwrap();
        assert_eq!(
            clock.sample(
                base + week + 30_000,
                boot_ms(week_boot),
                boot_ms(week_boot + 10),
                TOL
            ),
            Sampled::Steady
        );
    }
}
