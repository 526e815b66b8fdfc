//! A checker for recorded histories of leadership terms and fenced writes: the promise of the
//! recipes, as a pure function.
//!
//! A test records what happened ([`History`]): every term (which election, who held it, its
//! token, when it started and when it stopped being valid) and every write a fenced resource
//! received (which resource, who wrote, with which token, when, and whether it was accepted).
//! [`History::check`] then lists every [`Violation`] of:
//!
//! 1. **No two terms of one election overlap in time.** A term counts from its start until it
//!    stopped being allowed to act: the earlier of when it was ended and its deadline at that
//!    moment ([`Leadership::ended_at`](zookeeper_recipes::Leadership::ended_at)); a process frozen past its
//!    deadline ended its term at the deadline, not when it woke. Intervals are half-open
//!    (`[start, end)`): one term may start at the very instant the previous one ended.
//! 2. **Tokens rise from term to term.** In the order of their starts, each term of an
//!    election has a higher token than the term before it. The one exception is a term
//!    *regained*: the same holder leading again with the same node after a suspension of its
//!    connection (same session, node intact), which keeps its token. So a token may repeat only
//!    from one term to the next of the same holder; a token equal to that of a term of another
//!    holder, or lower than the previous term's, is a violation.
//! 3. **No stale write is accepted.** For each resource, in the order the writes arrived, no
//!    write is accepted with a token lower than one already accepted.
//!
//! The liveness side ("a leader soon after a fault heals") is a measurement rather than a
//! yes/no property of a history: [`History::time_to_leader`] gives the time from an instant to
//! the first moment some term of an election is valid, and [`History::check_leader_after`]
//! turns a bound on it into a [`Violation`].
//!
//! Times are [`BootTime`]s: the machine's `CLOCK_BOOTTIME`, comparable across processes,
//! so terms held in child processes (such as `zkr run`) and in the test process itself are
//! checked against each other.
//!
//! # Examples
//! ```
//! use std::time::Duration;
//! use zookeeper_recipes::FencingToken;
//! use zookeeper_recipes::BootTime;
//! use zookeeper_recipes_testing::history::{History, Term, Violation};
//!
//! let t = |ms: u64| BootTime::from_nanos(ms * 1_000_000);
//! let term = |holder: &str, token, start, end| Term {
//!     election: "/jobs".into(),
//!     holder: holder.into(),
//!     token: FencingToken::from_raw(token),
//!     start: t(start),
//!     end: Some(t(end)),
//! };
//! let mut history = History::default();
//! history.terms.push(term("a", 7, 0, 100));
//! history.terms.push(term("b", 9, 150, 300));
//! assert!(history.check().is_empty());
//!
//! history.terms.push(term("c", 11, 250, 400)); // starts while b still leads
//! assert!(matches!(history.check()[..], [Violation::Overlap { .. }]));
//! assert_eq!(history.time_to_leader("/jobs", t(120)), Some(Duration::from_millis(30)));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use zookeeper_recipes::BootTime;
use zookeeper_recipes::FencingToken;

/// One leadership term (or lock hold), as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    /// The election (or lock) it belongs to: its path, or any name shared by its terms.
    pub election: String,
    /// Who held it: the participant id.
    pub holder: String,
    /// Its fencing token.
    pub token: FencingToken,
    /// When it began.
    pub start: BootTime,
    /// When it stopped being valid (see the [module docs](self)); `None` while still running.
    pub end: Option<BootTime>,
}

impl Term {
    /// The end used by the checks: `end`, never before `start` (a term whose deadline had
    /// already passed when it began was never valid: an empty interval), and for a running term
    /// the end of time.
    fn effective_end(&self) -> Option<BootTime> {
        self.end.map(|end| end.max(self.start))
    }

    /// Whether the term was valid at `t`.
    pub fn valid_at(&self, t: BootTime) -> bool {
        self.start <= t && self.effective_end().is_none_or(|end| t < end)
    }
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} held by {:?} with token {} from {} to ",
            self.election, self.holder, self.token, self.start
        )?;
        match self.end {
            Some(end) => write!(f, "{end}"),
            None => f.write_str("(running)"),
        }
    }
}

/// One write that a fenced resource received, accepted or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// The resource written.
    pub resource: String,
    /// Who wrote: the participant id.
    pub writer: String,
    /// The token the write carried.
    pub token: FencingToken,
    /// When the resource received it.
    pub at: BootTime,
    /// Whether the resource accepted it.
    pub accepted: bool,
}

impl fmt::Display for Write {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "write to {} by {:?} with token {} at {} ({})",
            self.resource,
            self.writer,
            self.token,
            self.at,
            if self.accepted {
                "accepted"
            } else {
                "rejected"
            }
        )
    }
}

/// A broken promise found in a [`History`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// Two terms of one election were valid at the same time.
    Overlap {
        /// The term that started first.
        first: Term,
        /// The term that started while `first` was still valid.
        second: Term,
        /// How long both were valid.
        overlap: Duration,
    },
    /// A term's token is not above that of the term before it (and it is not the same holder
    /// regaining its term with the same token).
    TokenNotRising {
        /// The term before.
        earlier: Term,
        /// The term after it.
        later: Term,
    },
    /// A resource accepted a write whose token is lower than one it had already accepted.
    StaleWriteAccepted {
        /// The write.
        write: Write,
        /// The highest token the resource had accepted before it.
        highest: FencingToken,
    },
    /// No term of an election was valid within the bound after a fault healed.
    NoLeaderAfterHeal {
        /// The election.
        election: String,
        /// When the fault healed.
        healed: BootTime,
        /// The bound.
        bound: Duration,
        /// How long it took instead, if a leader came at all.
        took: Option<Duration>,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Overlap {
                first,
                second,
                overlap,
            } => write!(
                f,
                "two leaders for {overlap:?}: [{first}] and [{second}] overlap"
            ),
            Violation::TokenNotRising { earlier, later } => {
                write!(f, "token did not rise: [{later}] follows [{earlier}]")
            }
            Violation::StaleWriteAccepted { write, highest } => write!(
                f,
                "stale write accepted: {write}, after token {highest} was accepted"
            ),
            Violation::NoLeaderAfterHeal {
                election,
                healed,
                bound,
                took,
            } => match took {
                Some(took) => write!(
                    f,
                    "{election}: the first leader after the heal at {healed} came {took:?} later, beyond {bound:?}"
                ),
                None => write!(
                    f,
                    "{election}: no leader at all after the heal at {healed} (bound {bound:?})"
                ),
            },
        }
    }
}

/// A recorded history: terms and fenced writes, in any order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// Every term of every election.
    pub terms: Vec<Term>,
    /// Every write every fenced resource received, in the order each resource received them
    /// (writes to one resource with equal times keep this order).
    pub writes: Vec<Write>,
}

impl History {
    /// The terms of each election, ordered by start (then token).
    fn elections(&self) -> BTreeMap<&str, Vec<&Term>> {
        let mut by_election: BTreeMap<&str, Vec<&Term>> = BTreeMap::new();
        for term in &self.terms {
            by_election.entry(&term.election).or_default().push(term);
        }
        for terms in by_election.values_mut() {
            terms.sort_by_key(|t| (t.start, t.token));
        }
        by_election
    }

    /// Every violation of the safety rules (the [module docs](self) state them): overlapping
    /// terms, tokens that do not rise, stale writes accepted. Empty when the history keeps
    /// every promise.
    pub fn check(&self) -> Vec<Violation> {
        let mut violations = Vec::new();
        for terms in self.elections().values() {
            overlaps(terms, &mut violations);
            tokens(terms, &mut violations);
        }
        stale_writes(&self.writes, &mut violations);
        violations
    }

    /// The time from `after` to the first instant at which some term of `election` is valid:
    /// zero when one is valid at `after`, `None` when none is at or after it.
    pub fn time_to_leader(&self, election: &str, after: BootTime) -> Option<Duration> {
        let terms = self.terms.iter().filter(|t| t.election == election);
        let mut first: Option<BootTime> = None;
        for term in terms {
            if term.valid_at(after) {
                return Some(Duration::ZERO);
            }
            // A term that starts later (and is not empty) is a candidate.
            if term.start > after && term.valid_at(term.start) {
                first = Some(first.map_or(term.start, |f| f.min(term.start)));
            }
        }
        first.map(|f| f - after)
    }

    /// [`time_to_leader`](Self::time_to_leader) after a heal at `healed`, held to `bound`:
    /// the time it took, or [`Violation::NoLeaderAfterHeal`].
    ///
    /// # Errors
    /// The violation when no term of `election` was valid within `bound` after `healed`.
    // A violation is a report made once per heal, not an error on a hot path: boxing it would
    // only make every caller unbox it.
    #[allow(clippy::result_large_err)]
    pub fn check_leader_after(
        &self,
        election: &str,
        healed: BootTime,
        bound: Duration,
    ) -> Result<Duration, Violation> {
        match self.time_to_leader(election, healed) {
            Some(took) if took <= bound => Ok(took),
            took => Err(Violation::NoLeaderAfterHeal {
                election: election.to_owned(),
                healed,
                bound,
                took,
            }),
        }
    }
}

/// Rule 1 over one election's terms, sorted by start.
fn overlaps(terms: &[&Term], out: &mut Vec<Violation>) {
    for (i, first) in terms.iter().enumerate() {
        let end = first.effective_end();
        for second in &terms[i + 1..] {
            // Sorted by start: once one later term starts after `first` ended, all do.
            if end.is_some_and(|end| second.start >= end) {
                break;
            }
            // An empty term (never valid) overlaps nothing.
            if second.effective_end().is_some_and(|e| e <= second.start) {
                continue;
            }
            let both_until = match (end, second.effective_end()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            out.push(Violation::Overlap {
                first: (*first).clone(),
                second: (*second).clone(),
                overlap: both_until.map_or(Duration::MAX, |until| until - second.start),
            });
        }
    }
}

/// Rule 2 over one election's terms, sorted by start.
fn tokens(terms: &[&Term], out: &mut Vec<Violation>) {
    for pair in terms.windows(2) {
        let [earlier, later] = pair else { continue };
        let rises = later.token > earlier.token;
        let regained = later.token == earlier.token && later.holder == earlier.holder;
        if !rises && !regained {
            out.push(Violation::TokenNotRising {
                earlier: (*earlier).clone(),
                later: (*later).clone(),
            });
        }
    }
}

/// Rule 3: per resource, in arrival order (by time, ties in recorded order).
fn stale_writes(writes: &[Write], out: &mut Vec<Violation>) {
    let mut by_resource: BTreeMap<&str, Vec<&Write>> = BTreeMap::new();
    for write in writes {
        by_resource.entry(&write.resource).or_default().push(write);
    }
    for writes in by_resource.values_mut() {
        // Stable: equal times keep the recorded order.
        writes.sort_by_key(|w| w.at);
        let mut highest: Option<FencingToken> = None;
        for write in writes.iter().filter(|w| w.accepted) {
            match highest {
                Some(h) if write.token < h => out.push(Violation::StaleWriteAccepted {
                    write: (*write).clone(),
                    highest: h,
                }),
                _ => highest = Some(highest.map_or(write.token, |h| h.max(write.token))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> BootTime {
        BootTime::from_nanos(ms * 1_000_000)
    }

    fn term(election: &str, holder: &str, token: i64, start: u64, end: Option<u64>) -> Term {
        Term {
            election: election.into(),
            holder: holder.into(),
            token: FencingToken::from_raw(token),
            start: t(start),
            end: end.map(t),
        }
    }

    fn write(resource: &str, writer: &str, token: i64, at: u64, accepted: bool) -> Write {
        Write {
            resource: resource.into(),
            writer: writer.into(),
            token: FencingToken::from_raw(token),
            at: t(at),
            accepted,
        }
    }

    fn history(terms: Vec<Term>, writes: Vec<Write>) -> History {
        History { terms, writes }
    }

    #[test]
    fn a_clean_history_has_no_violation() {
        let h = history(
            vec![
                term("/a", "x", 10, 0, Some(100)),
                term("/a", "y", 12, 100, Some(250)), // starts the instant x ended
                term("/a", "y", 12, 300, Some(400)), // y regained its term: same token
                term("/a", "x", 20, 400, None),      // still running
                term("/b", "x", 5, 50, Some(500)),   // another election overlaps freely
            ],
            vec![
                write("r", "x", 10, 10, true),
                write("r", "x", 10, 20, true),
                write("r", "y", 12, 120, true),
                write("r", "x", 10, 130, false), // a stale write, rejected
                write("r", "x", 20, 410, true),
                write("s", "x", 5, 0, true), // another resource has its own order
            ],
        );
        assert_eq!(h.check(), vec![]);
    }

    #[test]
    fn overlapping_terms_are_reported_with_the_overlap() {
        let h = history(
            vec![
                term("/a", "y", 12, 90, Some(200)),
                term("/a", "x", 10, 0, Some(100)),
            ],
            vec![],
        );
        match &h.check()[..] {
            [
                Violation::Overlap {
                    first,
                    second,
                    overlap,
                },
            ] => {
                assert_eq!((first.holder.as_str(), second.holder.as_str()), ("x", "y"));
                assert_eq!(*overlap, Duration::from_millis(10));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_running_term_overlaps_every_later_one() {
        let h = history(
            vec![
                term("/a", "x", 10, 0, None),
                term("/a", "y", 12, 500, Some(600)),
                term("/a", "z", 14, 700, None),
            ],
            vec![],
        );
        let v = h.check();
        assert_eq!(
            v.iter()
                .filter(|v| matches!(v, Violation::Overlap { .. }))
                .count(),
            2,
            "x overlaps y and z; y ended before z began: {v:?}"
        );
        assert!(
            v.iter().any(
                |v| matches!(v, Violation::Overlap { overlap, .. } if *overlap == Duration::MAX)
            )
        );
    }

    #[test]
    fn a_term_frozen_past_its_deadline_ends_there_not_when_it_woke() {
        // x's deadline was 100; it woke at 900 and ended its term then, but the recorder gives
        // the deadline as its end, so y starting at 150 does not overlap.
        let h = history(
            vec![
                term("/a", "x", 10, 0, Some(100)),
                term("/a", "y", 12, 150, Some(1000)),
            ],
            vec![],
        );
        assert_eq!(h.check(), vec![]);
    }

    #[test]
    fn a_term_that_ended_before_it_started_is_empty_and_overlaps_nothing() {
        let h = history(
            vec![
                term("/a", "x", 10, 0, Some(100)),
                term("/a", "y", 12, 50, Some(40)), // its deadline had passed at its start
                term("/a", "z", 14, 100, Some(200)),
            ],
            vec![],
        );
        assert_eq!(h.check(), vec![]);
        assert_eq!(h.time_to_leader("/a", t(100)), Some(Duration::ZERO));
        assert_eq!(h.time_to_leader("/a", t(40)), Some(Duration::ZERO));
    }

    #[test]
    fn a_falling_token_is_reported() {
        let h = history(
            vec![
                term("/a", "x", 12, 0, Some(100)),
                term("/a", "y", 10, 100, Some(200)),
            ],
            vec![],
        );
        assert!(matches!(
            &h.check()[..],
            [Violation::TokenNotRising { earlier, later }] if earlier.holder == "x" && later.holder == "y"
        ));
    }

    #[test]
    fn an_equal_token_is_only_a_regained_term_of_the_same_holder() {
        let same = history(
            vec![
                term("/a", "x", 10, 0, Some(100)),
                term("/a", "x", 10, 200, Some(300)),
            ],
            vec![],
        );
        assert_eq!(same.check(), vec![]);
        let other = history(
            vec![
                term("/a", "x", 10, 0, Some(100)),
                term("/a", "y", 10, 200, Some(300)),
            ],
            vec![],
        );
        assert!(matches!(
            &other.check()[..],
            [Violation::TokenNotRising { .. }]
        ));
        // x regains token 10 after y led with 12: the token fell.
        let back = history(
            vec![
                term("/a", "x", 10, 0, Some(100)),
                term("/a", "y", 12, 100, Some(200)),
                term("/a", "x", 10, 200, Some(300)),
            ],
            vec![],
        );
        assert!(matches!(
            &back.check()[..],
            [Violation::TokenNotRising { later, .. }] if later.start == t(200)
        ));
    }

    #[test]
    fn a_stale_write_accepted_is_reported_in_arrival_order() {
        let h = history(
            vec![],
            vec![
                // Recorded out of order; arrival order is by time.
                write("r", "x", 10, 300, true),
                write("r", "y", 12, 200, true),
                write("r", "y", 12, 100, true),
                write("r", "x", 10, 250, false),
            ],
        );
        match &h.check()[..] {
            [Violation::StaleWriteAccepted { write, highest }] => {
                assert_eq!(write.at, t(300));
                assert_eq!(*highest, FencingToken::from_raw(12));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn writes_at_the_same_instant_keep_their_recorded_order() {
        let ok = history(
            vec![],
            vec![write("r", "x", 10, 5, true), write("r", "y", 12, 5, true)],
        );
        assert_eq!(ok.check(), vec![]);
        let bad = history(
            vec![],
            vec![write("r", "y", 12, 5, true), write("r", "x", 10, 5, true)],
        );
        assert_eq!(bad.check().len(), 1);
    }

    #[test]
    fn time_to_leader_counts_from_the_heal_to_the_first_valid_term() {
        let h = history(
            vec![
                term("/a", "x", 10, 0, Some(100)),
                term("/a", "y", 12, 400, Some(500)),
                term("/a", "z", 14, 300, Some(300)), // empty: never valid
            ],
            vec![],
        );
        assert_eq!(h.time_to_leader("/a", t(50)), Some(Duration::ZERO));
        assert_eq!(
            h.time_to_leader("/a", t(100)),
            Some(Duration::from_millis(300))
        );
        assert_eq!(h.time_to_leader("/a", t(500)), None);
        assert_eq!(h.time_to_leader("/b", t(0)), None);
        assert_eq!(
            h.check_leader_after("/a", t(100), Duration::from_millis(300)),
            Ok(Duration::from_millis(300))
        );
        assert!(matches!(
            h.check_leader_after("/a", t(100), Duration::from_millis(299)),
            Err(Violation::NoLeaderAfterHeal { took: Some(d), .. }) if d == Duration::from_millis(300)
        ));
        assert!(matches!(
            h.check_leader_after("/a", t(600), Duration::from_secs(1)),
            Err(Violation::NoLeaderAfterHeal { took: None, .. })
        ));
    }

    #[test]
    fn violations_read_as_sentences() {
        let v = Violation::TokenNotRising {
            earlier: term("/a", "x", 12, 0, Some(100)),
            later: term("/a", "y", 10, 100, None),
        };
        let text = v.to_string();
        assert!(text.contains("token did not rise"), "{text}");
        assert!(text.contains("(running)"), "{text}");
    }
}
