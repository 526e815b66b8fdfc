//! When a scheduled job's slots come due: a cron expression in an explicit time zone, or an
//! interval anchored to the Unix epoch. Pure computation, no network; the job's loop asks it
//! which slots lie between two wall-clock instants.
//!
//! # Daylight saving time
//! Cron instants follow croner's rule (the Open Cron Pattern Specification, as Vixie cron): a
//! job at a fixed local time (every field a number) that falls into a spring-forward gap runs
//! once, at the first instant after the gap; one that falls into a fall-back hour runs once, at
//! its first occurrence. A job with a wildcard or a step in its hour field runs at the instants
//! that exist, so the gap has none and the repeated hour has them twice. The unit tests below
//! show each case on Europe/Oslo's 2026 transitions.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;

use crate::error::{Error, Result};

/// How many slots one query walks at most (a cron job's missed range is counted up to this).
pub(crate) const MAX_WALK: u64 = 10_000;

/// When a job's slots come due.
///
/// A slot is a nominal instant of the schedule; every replica derives the same slots, and the
/// same [`slot keys`](Schedule::key), from the schedule alone, whatever its own clock says.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use zookeeper_recipes::job::Schedule;
///
/// let nightly = Schedule::cron("0 2 * * *", "Europe/Oslo")?;
/// // 2026-12-03T00:00:00Z; the next slot is 02:00 in Oslo, 01:00 UTC.
/// let next = nightly.next_after(1_796_256_000_000).unwrap();
/// assert_eq!(Schedule::key(next), "2026-12-03T01:00:00Z");
///
/// let every_minute = Schedule::every(Duration::from_secs(60))?;
/// assert_eq!(every_minute.latest_at_or_before(90_500), Some(60_000));
/// # Ok::<(), zookeeper_recipes::Error>(())
/// ```
#[derive(Clone)]
pub struct Schedule {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    Cron {
        expression: String,
        zone: Tz,
        cron: Box<Cron>,
    },
    Every {
        period_ms: i64,
        offset_ms: i64,
    },
}

impl std::fmt::Debug for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.spec())
    }
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.spec() == other.spec()
    }
}

impl Eq for Schedule {}

/// The fields of a cron expression, as the errors name them.
const LAYOUT: &str =
    "five fields: minute hour day-of-month month day-of-week, or six with second first";

/// The fields of a five-field expression: name and allowed numbers.
const FIELDS: [(&str, u32, u32); 5] = [
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
];

/// Why `expression` (not a `@nickname`) has the wrong number of fields, if it does: five or
/// six, as documented (croner would also take a seventh, a year, which the docs do not offer).
fn wrong_field_count(expression: &str) -> Option<String> {
    if expression.starts_with('@') {
        return None;
    }
    let n = expression.split_whitespace().count();
    (n != 5 && n != 6).then(|| format!("{n} fields: give {LAYOUT}"))
}

/// The first field of `expression` that holds a number outside its range, named with its
/// range: `minute (field 1 of 5) must be within 0-59, not 61`.
fn field_out_of_range(expression: &str) -> Option<String> {
    let fields: Vec<&str> = expression.split_whitespace().collect();
    let layout: Vec<(&str, u32, u32)> = match fields.len() {
        5 => FIELDS.to_vec(),
        6 => std::iter::once(("second", 0, 59)).chain(FIELDS).collect(),
        _ => return None,
    };
    for (i, (field, (name, lo, hi))) in fields.iter().zip(&layout).enumerate() {
        for item in field.split(',') {
            let (range, step) = match item.split_once('/') {
                Some((range, step)) => (range, Some(step)),
                None => (item, None),
            };
            let bad = |value: &str| {
                format!(
                    "{name} (field {} of {}) must be within {lo}-{hi}, not {value}",
                    i + 1,
                    fields.len()
                )
            };
            for end in range.split('-') {
                if !end.is_empty()
                    && end.bytes().all(|b| b.is_ascii_digit())
                    && end.parse::<u32>().map_or(true, |v| v < *lo || v > *hi)
                {
                    return Some(bad(end));
                }
            }
            if let Some(step) = step
                && step.bytes().all(|b| b.is_ascii_digit())
                && step.parse::<u32>().map_or(true, |v| v == 0 || v > *hi)
            {
                return Some(format!(
                    "{name} (field {} of {}): the step /{step} must be within 1-{hi}",
                    i + 1,
                    fields.len()
                ));
            }
        }
    }
    // Not a number out of range: find the field croner refuses on its own, each put in turn
    // into an expression that is valid otherwise.
    let base: Vec<&str> = match fields.len() {
        5 => vec!["0", "0", "1", "1", "*"],
        _ => vec!["0", "0", "0", "1", "1", "*"],
    };
    for (i, (field, (name, lo, hi))) in fields.iter().zip(&layout).enumerate() {
        let mut probe = base.clone();
        probe[i] = field;
        if let Err(e) = Cron::from_str(&probe.join(" ")) {
            let names = match *name {
                "month" => " or JAN-DEC",
                "day-of-week" => " or SUN-SAT",
                _ => "",
            };
            return Some(format!(
                "{name} (field {} of {}) {field:?} is refused, allowed {lo}-{hi}{names} (croner: {e})",
                i + 1,
                fields.len()
            ));
        }
    }
    None
}

fn invalid(what: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidSchedule {
        what,
        reason: reason.into(),
    }
}

impl Schedule {
    /// The instants of a cron expression (five fields, or six with seconds first; croner's
    /// syntax, with `L`, `#` and `W`) in the IANA time zone `zone` (`"Europe/Oslo"`, `"UTC"`).
    ///
    /// # Errors
    /// [`Error::InvalidSchedule`] for an expression croner refuses or one that never comes due,
    /// and for a zone that is not in the IANA database.
    pub fn cron(expression: &str, zone: &str) -> Result<Schedule> {
        let expression = expression.trim();
        if let Some(wrong) = wrong_field_count(expression) {
            return Err(invalid(
                "cron expression",
                format!("{expression:?}: {wrong}"),
            ));
        }
        let cron = Cron::from_str(expression).map_err(|e| {
            let why = field_out_of_range(expression).unwrap_or_else(|| format!("{e} ({LAYOUT})"));
            invalid("cron expression", format!("{expression:?}: {why}"))
        })?;
        let zone = Tz::from_str(zone.trim())
            .map_err(|_| invalid("time zone", format!("{zone:?} is not an IANA time zone")))?;
        let schedule = Schedule {
            kind: Kind::Cron {
                expression: expression.to_owned(),
                zone,
                cron: Box::new(cron),
            },
        };
        // An expression such as `0 0 30 2 *` parses but has no instant at all.
        if schedule.next_after(0).is_none() && schedule.next_after(now_ms()).is_none() {
            return Err(invalid(
                "cron expression",
                format!("{expression:?} never comes due"),
            ));
        }
        Ok(schedule)
    }

    /// Every `period`, at the instants `n × period` after the Unix epoch (so a minute's slots
    /// are on the minute, an hour's on the hour, in UTC). At least a millisecond, in whole
    /// milliseconds.
    ///
    /// # Errors
    /// [`Error::InvalidSchedule`] for a zero, sub-millisecond or fractional-millisecond period.
    pub fn every(period: Duration) -> Result<Schedule> {
        Schedule::every_with_offset(period, Duration::ZERO)
    }

    /// Every `period`, shifted by `offset` from the epoch's grid (`every(1 day, offset 2 h)`: each
    /// day at 02:00 UTC). The offset is taken modulo the period.
    ///
    /// # Errors
    /// As [`every`](Self::every); also for an offset in fractional milliseconds.
    pub fn every_with_offset(period: Duration, offset: Duration) -> Result<Schedule> {
        if period.is_zero() {
            return Err(invalid("interval", "the period is zero"));
        }
        if !period.subsec_nanos().is_multiple_of(1_000_000)
            || !offset.subsec_nanos().is_multiple_of(1_000_000)
        {
            return Err(invalid(
                "interval",
                "the period and the offset must be whole milliseconds",
            ));
        }
        let period_ms = i64::try_from(period.as_millis())
            .map_err(|_| invalid("interval", "the period is too long"))?;
        let offset_ms = i64::try_from(offset.as_millis())
            .map_err(|_| invalid("interval", "the offset is too long"))?
            % period_ms;
        Ok(Schedule {
            kind: Kind::Every {
                period_ms,
                offset_ms,
            },
        })
    }

    /// The canonical text of the schedule, stored with the job so that a change is seen:
    /// `cron <expression> <zone>` or `every <ms>ms+<offset>ms`.
    pub fn spec(&self) -> String {
        match &self.kind {
            Kind::Cron {
                expression, zone, ..
            } => format!("cron {expression} {}", zone.name()),
            Kind::Every {
                period_ms,
                offset_ms,
            } => format!("every {period_ms}ms+{offset_ms}ms"),
        }
    }

    /// The IANA tzdata release that decides a cron schedule's instants (chrono-tz's
    /// `IANA_TZDB_VERSION`, such as `2025b`); `None` for an interval schedule, which is on the
    /// UTC grid. Not part of the [`spec`](Self::spec): two builds with different tzdata run
    /// the same schedule, and a release that changes nothing about the zone must not count as
    /// a schedule change (which would move the cursor and could skip a slot). The job records
    /// it and warns when the last leader's differs.
    pub fn tzdb_version(&self) -> Option<&'static str> {
        match &self.kind {
            Kind::Cron { .. } => Some(chrono_tz::IANA_TZDB_VERSION),
            Kind::Every { .. } => None,
        }
    }

    /// A stable 64-bit hash of [`spec`](Self::spec) (FNV-1a), in hex.
    pub fn spec_hash(&self) -> String {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in self.spec().bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("{hash:016x}")
    }

    /// The first slot strictly after `after_ms` (milliseconds since the Unix epoch), or `None`
    /// when there is none (a cron expression whose last instant has passed, or beyond year 9999).
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        match &self.kind {
            Kind::Every {
                period_ms,
                offset_ms,
            } => {
                let n = (after_ms - offset_ms).div_euclid(*period_ms) + 1;
                n.checked_mul(*period_ms)?.checked_add(*offset_ms)
            }
            Kind::Cron { zone, cron, .. } => {
                let start = zone.timestamp_millis_opt(after_ms).single()?;
                let next = cron.find_next_occurrence(&start, false).ok()?;
                let ms = next.timestamp_millis();
                (ms > after_ms && ms <= MAX_INSTANT_MS).then_some(ms)
            }
        }
    }

    /// The newest slot at or before `at_ms`, if any.
    pub fn latest_at_or_before(&self, at_ms: i64) -> Option<i64> {
        match &self.kind {
            Kind::Every {
                period_ms,
                offset_ms,
            } => {
                let n = (at_ms - offset_ms).div_euclid(*period_ms);
                n.checked_mul(*period_ms)?.checked_add(*offset_ms)
            }
            Kind::Cron { zone, cron, .. } => {
                let at = zone.timestamp_millis_opt(at_ms).single()?;
                let found = cron.find_previous_occurrence(&at, true).ok()?;
                // Backward search and forward search agree on the instants they find, except
                // around a daylight-saving change, where only the forward search follows the
                // rule above: confirm the candidate by searching forward from just before it,
                // and step back once more when the forward rule puts it elsewhere.
                let mut candidate = found.timestamp_millis();
                for _ in 0..3 {
                    match self.next_after(candidate - 1) {
                        Some(next) if next == candidate => return Some(candidate),
                        Some(next) if next <= at_ms => return Some(next),
                        _ => {
                            let earlier = zone.timestamp_millis_opt(candidate - 1).single()?;
                            candidate = cron
                                .find_previous_occurrence(&earlier, true)
                                .ok()?
                                .timestamp_millis();
                        }
                    }
                }
                None
            }
        }
    }

    /// The slots in `(after_ms, up_to_ms]`, oldest first, at most `limit` of them, and whether
    /// there were more.
    pub fn slots_between(&self, after_ms: i64, up_to_ms: i64, limit: u64) -> (Vec<i64>, bool) {
        let mut slots = Vec::new();
        let mut cursor = after_ms;
        while let Some(next) = self.next_after(cursor) {
            if next > up_to_ms {
                return (slots, false);
            }
            if slots.len() as u64 >= limit {
                return (slots, true);
            }
            slots.push(next);
            cursor = next;
        }
        (slots, false)
    }

    /// How many slots lie in `(after_ms, up_to_ms]`: exact for an interval, counted up to
    /// 10,000 (`MAX_WALK`) for a cron expression (`(count, true)` when there were more).
    pub fn count_between(&self, after_ms: i64, up_to_ms: i64) -> (u64, bool) {
        if up_to_ms <= after_ms {
            return (0, false);
        }
        match &self.kind {
            Kind::Every {
                period_ms,
                offset_ms,
            } => {
                let last = (up_to_ms - offset_ms).div_euclid(*period_ms);
                let before = (after_ms - offset_ms).div_euclid(*period_ms);
                (u64::try_from(last - before).unwrap_or(0), false)
            }
            Kind::Cron { .. } => {
                let (slots, more) = self.slots_between(after_ms, up_to_ms, MAX_WALK);
                (slots.len() as u64, more)
            }
        }
    }

    /// The default catch-up window after slot `slot_ms`: the time to the next slot (one period),
    /// at most 24 h.
    pub(crate) fn period_after(&self, slot_ms: i64) -> Duration {
        const DAY_MS: i64 = 24 * 3_600_000;
        let gap = self
            .next_after(slot_ms)
            .map_or(DAY_MS, |next| (next - slot_ms).min(DAY_MS));
        Duration::from_millis(u64::try_from(gap).unwrap_or(0))
    }

    /// The key of the slot at `slot_ms`: its instant in UTC, RFC 3339, to the second
    /// (`2026-12-03T02:00:00Z`), with milliseconds only when it has any
    /// (`2026-12-03T02:00:00.500Z`). Every replica derives the same key for the same slot.
    pub fn key(slot_ms: i64) -> String {
        match Utc.timestamp_millis_opt(slot_ms).single() {
            Some(at) if slot_ms.rem_euclid(1000) == 0 => {
                at.to_rfc3339_opts(SecondsFormat::Secs, true)
            }
            Some(at) => at.to_rfc3339_opts(SecondsFormat::Millis, true),
            None => format!("{slot_ms}ms"),
        }
    }

    /// The instant of a slot key written by [`key`](Self::key), if it is one.
    pub fn parse_key(key: &str) -> Option<i64> {
        DateTime::parse_from_rfc3339(key)
            .ok()
            .map(|at| at.timestamp_millis())
    }
}

/// 9999-12-31T23:59:59.999Z: slot keys stay four-digit years.
const MAX_INSTANT_MS: i64 = 253_402_300_799_999;

/// Wall-clock milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

/// A replica's own wall clock: [`SystemClock`] in production; tests inject a [`SkewedClock`].
/// A scheduled job reads it only to measure how far it is from the ensemble's clock, which is
/// what decides when slots are due.
pub trait WallClock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn now_ms(&self) -> i64 {
        now_ms()
    }
}

/// A wall clock shifted from the system's by an offset that can be changed at any time: a
/// clock that steps forward or back (NTP, a VM restored from a snapshot), for tests.
#[derive(Debug, Default)]
pub struct SkewedClock {
    offset_ms: std::sync::atomic::AtomicI64,
}

impl SkewedClock {
    /// A clock `offset_ms` ahead of the system's (behind when negative).
    pub fn new(offset_ms: i64) -> Self {
        SkewedClock {
            offset_ms: std::sync::atomic::AtomicI64::new(offset_ms),
        }
    }

    /// Steps the clock: from now on it reads `offset_ms` ahead of the system's.
    pub fn set_offset_ms(&self, offset_ms: i64) {
        self.offset_ms
            .store(offset_ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl WallClock for SkewedClock {
    fn now_ms(&self) -> i64 {
        now_ms() + self.offset_ms.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rfc3339: &str) -> i64 {
        Schedule::parse_key(rfc3339).unwrap()
    }

    fn keys(slots: &[i64]) -> Vec<String> {
        slots.iter().map(|&s| Schedule::key(s)).collect()
    }

    #[test]
    fn interval_slots_sit_on_the_epochs_grid() {
        let s = Schedule::every(Duration::from_secs(60)).unwrap();
        assert_eq!(s.latest_at_or_before(119_999), Some(60_000));
        assert_eq!(s.latest_at_or_before(120_000), Some(120_000));
        assert_eq!(s.next_after(120_000), Some(180_000));
        assert_eq!(s.latest_at_or_before(-1), Some(-60_000));
        let shifted =
            Schedule::every_with_offset(Duration::from_secs(86_400), Duration::from_secs(7_200))
                .unwrap();
        assert_eq!(
            Schedule::key(shifted.next_after(at("2026-12-03T05:00:00Z")).unwrap()),
            "2026-12-04T02:00:00Z"
        );
        assert_eq!(s.count_between(0, 600_000), (10, false));
        assert_eq!(s.count_between(600_000, 0), (0, false));
    }

    #[test]
    fn keys_are_utc_rfc3339_and_parse_back() {
        assert_eq!(
            Schedule::key(at("2026-12-03T02:00:00Z")),
            "2026-12-03T02:00:00Z"
        );
        let half = at("2026-12-03T02:00:00Z") + 500;
        assert_eq!(Schedule::key(half), "2026-12-03T02:00:00.500Z");
        assert_eq!(Schedule::parse_key(&Schedule::key(half)), Some(half));
        assert_eq!(Schedule::parse_key("trigger-1"), None);
    }

    #[test]
    fn cron_errors_name_the_field_and_its_range_and_the_count_is_five_or_six() {
        for (expr, says) in [
            (
                "61 * * * *",
                "minute (field 1 of 5) must be within 0-59, not 61",
            ),
            (
                "0 24 * * *",
                "hour (field 2 of 5) must be within 0-23, not 24",
            ),
            (
                "0 2 0 * *",
                "day-of-month (field 3 of 5) must be within 1-31, not 0",
            ),
            (
                "0 2 * 1-13 *",
                "month (field 4 of 5) must be within 1-12, not 13",
            ),
            (
                "0 2 * * 8",
                "day-of-week (field 5 of 5) must be within 0-7, not 8",
            ),
            (
                "60 0 2 * * *",
                "second (field 1 of 6) must be within 0-59, not 60",
            ),
            (
                "*/0 * * * *",
                "minute (field 1 of 5): the step /0 must be within 1-59",
            ),
            ("0 2 * *", "4 fields: give five fields"),
            ("0 0 2 * * * 2027", "7 fields: give five fields"),
            (
                "0 2 * * MON-FRX",
                "day-of-week (field 5 of 5) \"MON-FRX\" is refused, allowed 0-7 or SUN-SAT",
            ),
            (
                "0 2 * JANUAR *",
                "month (field 4 of 5) \"JANUAR\" is refused",
            ),
            (
                "0 x * * *",
                "hour (field 2 of 5) \"x\" is refused, allowed 0-23",
            ),
        ] {
            match Schedule::cron(expr, "UTC") {
                Err(e @ Error::InvalidSchedule { .. }) => {
                    assert!(e.to_string().contains(says), "{expr:?}: {e}");
                }
                other => panic!("{expr:?}: {other:?}"),
            }
        }
        for ok in [
            "0 2 * * 7",
            "@daily",
            "0 0 2 * * MON-FRI",
            "*/15 9-17 * * 1-5",
        ] {
            assert!(Schedule::cron(ok, "UTC").is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn bad_schedules_are_refused_with_what_was_wrong() {
        for (expr, zone, what) in [
            ("0 2 * *", "UTC", "cron expression"),
            ("61 * * * *", "UTC", "cron expression"),
            ("", "UTC", "cron expression"),
            ("0 0 30 2 *", "UTC", "cron expression"),
            ("0 2 * * *", "Europe/Atlantis", "time zone"),
            ("0 2 * * *", "", "time zone"),
        ] {
            match Schedule::cron(expr, zone) {
                Err(Error::InvalidSchedule { what: w, .. }) => assert_eq!(w, what, "{expr} {zone}"),
                other => panic!("{expr:?} {zone:?}: {other:?}"),
            }
        }
        assert!(matches!(
            Schedule::every(Duration::ZERO),
            Err(Error::InvalidSchedule {
                what: "interval",
                ..
            })
        ));
        assert!(matches!(
            Schedule::every(Duration::from_micros(1500)),
            Err(Error::InvalidSchedule {
                what: "interval",
                ..
            })
        ));
    }

    #[test]
    fn a_fixed_time_in_the_spring_forward_gap_runs_once_just_after_it() {
        // Europe/Oslo, 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00Z); 02:30 does not exist.
        let s = Schedule::cron("30 2 * * *", "Europe/Oslo").unwrap();
        let (slots, _) =
            s.slots_between(at("2026-03-27T12:00:00Z"), at("2026-03-31T12:00:00Z"), 10);
        assert_eq!(
            keys(&slots),
            [
                "2026-03-28T01:30:00Z", // 02:30 CET
                "2026-03-29T01:00:00Z", // 03:00 CEST, the first instant after the gap
                "2026-03-30T00:30:00Z", // 02:30 CEST
                "2026-03-31T00:30:00Z",
            ]
        );
        for &slot in &slots {
            assert_eq!(
                s.latest_at_or_before(slot),
                Some(slot),
                "{}",
                Schedule::key(slot)
            );
            assert_eq!(s.latest_at_or_before(slot + 1000), Some(slot));
        }
    }

    #[test]
    fn a_fixed_time_in_the_fall_back_hour_runs_once() {
        // Europe/Oslo, 2026-10-25: 03:00 CEST becomes 02:00 CET (01:00Z); 02:30 happens twice.
        let s = Schedule::cron("30 2 * * *", "Europe/Oslo").unwrap();
        let (slots, _) =
            s.slots_between(at("2026-10-24T12:00:00Z"), at("2026-10-26T12:00:00Z"), 10);
        assert_eq!(
            keys(&slots),
            ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
        );
        // Asked from inside the repeated hour, the newest slot is still the one that ran.
        assert_eq!(
            s.latest_at_or_before(at("2026-10-25T01:45:00Z")),
            Some(at("2026-10-25T00:30:00Z"))
        );
    }

    #[test]
    fn an_hourly_wildcard_job_runs_at_the_instants_that_exist() {
        let s = Schedule::cron("30 * * * *", "Europe/Oslo").unwrap();
        // Spring forward: local 02:30 does not exist; 01:30 CET and 03:30 CEST are an hour apart.
        let (spring, _) =
            s.slots_between(at("2026-03-29T00:00:00Z"), at("2026-03-29T02:00:00Z"), 10);
        assert_eq!(
            keys(&spring),
            ["2026-03-29T00:30:00Z", "2026-03-29T01:30:00Z"]
        );
        // Fall back: 02:30 CEST and 02:30 CET both exist, an hour apart in UTC.
        let (fall, _) = s.slots_between(at("2026-10-24T23:45:00Z"), at("2026-10-25T01:45:00Z"), 10);
        assert_eq!(
            keys(&fall),
            ["2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"]
        );
    }

    #[test]
    fn latest_and_next_agree_on_a_plain_schedule() {
        let s = Schedule::cron("*/15 9-17 * * 1-5", "America/New_York").unwrap();
        let mut t = at("2026-12-03T00:00:00Z");
        for _ in 0..200 {
            let next = s.next_after(t).unwrap();
            assert_eq!(s.latest_at_or_before(next), Some(next));
            assert!(s.latest_at_or_before(next - 1).unwrap_or(i64::MIN) < next);
            t = next;
        }
    }

    #[test]
    fn spec_and_hash_change_with_expression_and_zone() {
        let a = Schedule::cron("0 2 * * *", "Europe/Oslo").unwrap();
        let b = Schedule::cron("0 2 * * *", "UTC").unwrap();
        let c = Schedule::cron(" 0 2 * * * ", "Europe/Oslo").unwrap();
        assert_eq!(a.spec(), "cron 0 2 * * * Europe/Oslo");
        assert_ne!(a.spec_hash(), b.spec_hash());
        assert_eq!(a.spec_hash(), c.spec_hash());
        assert_eq!(a, c);
        let e = Schedule::every(Duration::from_secs(1)).unwrap();
        assert_eq!(e.spec(), "every 1000ms+0ms");
        assert_eq!(e.period_after(0), Duration::from_secs(1));
        assert_eq!(
            a.period_after(at("2026-12-03T01:00:00Z")),
            Duration::from_secs(86_400)
        );
    }

    #[test]
    fn the_tzdata_release_is_known_for_cron_only_and_is_not_part_of_the_spec() {
        let cron = Schedule::cron("0 2 * * *", "Europe/Oslo").unwrap();
        let release = cron.tzdb_version().unwrap();
        assert_eq!(release, chrono_tz::IANA_TZDB_VERSION);
        assert!(
            !cron.spec().contains(release),
            "a tzdata-only difference must not read as a schedule change: {}",
            cron.spec()
        );
        let every = Schedule::every(Duration::from_secs(60)).unwrap();
        assert_eq!(every.tzdb_version(), None);
    }

    #[test]
    fn counting_a_long_cron_range_stops_at_the_walk_limit() {
        let s = Schedule::cron("* * * * *", "UTC").unwrap();
        let (n, more) = s.count_between(0, 60_000 * 20_000);
        assert_eq!((n, more), (MAX_WALK, true));
    }
}
