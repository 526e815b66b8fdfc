//! The assignment kernel, pure: what the coordinator writes ([`Assignment`]), the balancing rule
//! ([`rebalance`]) and the bound on the assignment's size that [`LeaderPoolBuilder::start`]
//! checks. No I/O: every function here is a function of its arguments, tested below.
//!
//! [`LeaderPoolBuilder::start`]: super::LeaderPoolBuilder::start

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{Error, Result};

/// Which replica leads which job, as the pool's coordinator wrote it.
///
/// Stored as JSON in `<root>/assignment`:
/// `{"members":["replica-1","replica-2"],"jobs":{"billing":"replica-1","mail":"replica-2"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Assignment {
    /// The live members the coordinator saw, in the order they joined.
    pub members: Vec<String>,
    /// Job name → the member id that stands for it.
    pub jobs: BTreeMap<String, String>,
}

impl Assignment {
    /// The jobs assigned to `member`, in name order.
    pub fn jobs_of(&self, member: &str) -> Vec<&str> {
        self.jobs
            .iter()
            .filter(|(_, owner)| *owner == member)
            .map(|(job, _)| job.as_str())
            .collect()
    }
}

/// The longest id a pool member may have: [`LeaderPool::MAX_MEMBER_ID_LEN`].
///
/// [`LeaderPool::MAX_MEMBER_ID_LEN`]: super::LeaderPool::MAX_MEMBER_ID_LEN
pub(super) const MAX_MEMBER_ID_LEN: usize = 128;

/// [`LeaderPool::assignment_budget`].
///
/// [`LeaderPool::assignment_budget`]: super::LeaderPool::assignment_budget
pub(super) fn assignment_budget(jute_max_buffer: usize) -> usize {
    jute_max_buffer / 2
}

/// [`LeaderPool::assignment_worst_case`].
///
/// [`LeaderPool::assignment_worst_case`]: super::LeaderPool::assignment_worst_case
pub(super) fn assignment_worst_case(jobs: &[String]) -> usize {
    // `{"members":["<id>"],"jobs":{` ... `}}`
    let framing = r#"{"members":[""],"jobs":{}}"#.len() + MAX_MEMBER_ID_LEN;
    // `"<job>":"<id>",` per job; the last has no comma.
    let entries: usize = jobs
        .iter()
        .map(|job| json_len(job) + 1 + MAX_MEMBER_ID_LEN + 2 + 1)
        .sum();
    framing + entries.saturating_sub(1)
}

/// The length of `s` as a JSON string, quotes included, as `serde_json` writes it.
fn json_len(s: &str) -> usize {
    serde_json::to_string(s).map_or(6 * s.len() + 2, |j| j.len())
}

/// Checks that the worst-case assignment of `jobs` fits [`assignment_budget`] of `limit`, and
/// that `id` is short enough for that bound to hold.
pub(super) fn check_assignment_size(
    jobs: &[String],
    id: &str,
    jute_max_buffer: usize,
) -> Result<()> {
    let id_len = json_len(id) - 2;
    if id_len > MAX_MEMBER_ID_LEN {
        return Err(Error::InvalidArgument {
            what: "participant id",
            reason: format!(
                "takes {id_len} bytes in the pool's assignment; a pool member's id may take at most {MAX_MEMBER_ID_LEN}"
            ),
        });
    }
    let size = assignment_worst_case(jobs);
    let limit = assignment_budget(jute_max_buffer);
    if size > limit {
        return Err(Error::AssignmentTooLarge {
            jobs: jobs.len(),
            size,
            limit,
        });
    }
    Ok(())
}

/// The balancing rule: a balanced assignment of `jobs` over `members` (in join order) that
/// moves as few jobs as possible away from `previous`.
///
/// 1. Every job keeps its previous owner if that owner is still a member.
/// 2. With `n` members and `j` jobs, every member's quota is `j / n`; the `j % n` members that
///    keep the most jobs (ties: the earliest to join) get one more.
/// 3. A member keeping more than its quota gives up the excess (its jobs last in name order).
/// 4. Jobs without an owner (new, owner gone, given up) go, in name order, to the members under
///    their quota, in join order.
///
/// Every member ends with its quota, so nobody leads more than `ceil(j / n)`, and a job moves
/// only if its owner left or was over its new quota: a join moves exactly the new member's
/// share, a departure exactly the departed member's jobs.
pub(super) fn rebalance(
    jobs: &[String],
    members: &[String],
    previous: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if members.is_empty() {
        return out;
    }
    let jobs: BTreeSet<&String> = jobs.iter().collect();
    let mut kept: BTreeMap<&str, Vec<&String>> =
        members.iter().map(|m| (m.as_str(), Vec::new())).collect();
    let mut orphans: Vec<&String> = Vec::new();
    for job in &jobs {
        match previous
            .get(*job)
            .and_then(|owner| kept.get_mut(owner.as_str()))
        {
            Some(list) => list.push(job),
            None => orphans.push(job),
        }
    }
    let base = jobs.len() / members.len();
    let extra = jobs.len() % members.len();
    // Who gets the `extra` bigger quotas: those keeping the most, then the earliest joined.
    let mut ranked: Vec<(usize, &str)> = members.iter().map(|m| m.as_str()).enumerate().collect();
    ranked.sort_by_key(|&(joined, m)| (std::cmp::Reverse(kept.get(m).map_or(0, Vec::len)), joined));
    let quota: BTreeMap<&str, usize> = ranked
        .iter()
        .enumerate()
        .map(|(rank, &(_, m))| (m, base + usize::from(rank < extra)))
        .collect();
    for member in members {
        let member = member.as_str();
        let q = quota.get(member).copied().unwrap_or(base);
        if let Some(list) = kept.get_mut(member)
            && list.len() > q
        {
            orphans.extend(list.drain(q..));
        }
    }
    orphans.sort();
    let mut orphans = orphans.into_iter();
    for member in members {
        let member = member.as_str();
        let q = quota.get(member).copied().unwrap_or(base);
        let list = kept.entry(member).or_default();
        while list.len() < q {
            match orphans.next() {
                Some(job) => list.push(job),
                None => break,
            }
        }
    }
    for (member, list) in kept {
        for job in list {
            out.insert(job.clone(), member.to_owned());
        }
    }
    out
}

/// How many jobs change owner between two assignments (jobs only in `after` count as moves).
pub(super) fn moves(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> usize {
    after
        .iter()
        .filter(|(job, owner)| before.get(*job) != Some(*owner))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i:02}")).collect()
    }

    fn counts(a: &BTreeMap<String, String>, members: &[String]) -> Vec<usize> {
        members
            .iter()
            .map(|m| a.values().filter(|o| *o == m).count())
            .collect()
    }

    #[test]
    fn twelve_jobs_spread_four_each_over_three_members() {
        let jobs = names("job", 12);
        let members = names("r", 3);
        let a = rebalance(&jobs, &members, &BTreeMap::new());
        assert_eq!(a.len(), 12);
        assert_eq!(counts(&a, &members), [4, 4, 4]);
        // Deterministic.
        assert_eq!(a, rebalance(&jobs, &members, &BTreeMap::new()));
    }

    #[test]
    fn a_join_moves_exactly_the_new_members_share_and_nothing_else() {
        let jobs = names("job", 12);
        let three = names("r", 3);
        let before = rebalance(&jobs, &three, &BTreeMap::new());
        let four = names("r", 4);
        let after = rebalance(&jobs, &four, &before);
        assert_eq!(counts(&after, &four), [3, 3, 3, 3]);
        assert_eq!(moves(&before, &after), 3);
        for (job, owner) in &after {
            if before[job] != *owner {
                assert_eq!(owner, "r03", "only the new member gains jobs");
            }
        }
    }

    #[test]
    fn a_departure_moves_exactly_the_departed_members_jobs() {
        let jobs = names("job", 12);
        let four = names("r", 4);
        let before = rebalance(&jobs, &four, &BTreeMap::new());
        let three: Vec<String> = four.iter().filter(|m| *m != "r01").cloned().collect();
        let after = rebalance(&jobs, &three, &before);
        assert_eq!(counts(&after, &three), [4, 4, 4]);
        assert_eq!(moves(&before, &after), 3);
        for (job, owner) in &before {
            if owner != "r01" {
                assert_eq!(after[job], *owner, "{job} moved although its owner stayed");
            }
        }
    }

    #[test]
    fn uneven_shares_never_exceed_the_ceiling_and_moves_stay_minimal() {
        // A deterministic walk of joins and departures; after every step each member holds its
        // floor or ceiling, and the moves are exactly the jobs whose owner left plus each
        // member's excess over its new quota.
        let jobs = names("job", 12);
        let mut members: Vec<String> = names("r", 2);
        let mut current = rebalance(&jobs, &members, &BTreeMap::new());
        let mut next_id = 2;
        let mut seed = 0x9e37_79b9_u64;
        for _ in 0..200 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            if members.len() > 1 && (members.len() >= 7 || seed.is_multiple_of(2)) {
                let gone = (seed as usize / 2) % members.len();
                members.remove(gone);
            } else {
                members.push(format!("r{next_id:02}"));
                next_id += 1;
            }
            let after = rebalance(&jobs, &members, &current);
            let n = members.len();
            let (lo, hi) = (12 / n, 12_usize.div_ceil(n));
            for c in counts(&after, &members) {
                assert!((lo..=hi).contains(&c), "{c} jobs for one of {n} members");
            }
            assert_eq!(after.len(), 12, "every job is assigned");
            // Lower bound on moves: orphaned jobs, plus what members keep above the ceiling.
            let orphaned = current.values().filter(|o| !members.contains(o)).count();
            let over: usize = counts(&current, &members)
                .iter()
                .map(|c| c.saturating_sub(hi))
                .sum();
            let m = moves(&current, &after);
            assert!(m >= orphaned + over);
            assert!(
                m <= orphaned + over + n,
                "{m} moves for {orphaned} orphaned and {over} over the ceiling among {n}"
            );
            current = after;
        }
    }

    #[test]
    fn unknown_jobs_and_members_in_the_previous_assignment_are_ignored() {
        let jobs = names("job", 4);
        let members = names("r", 2);
        let mut previous = BTreeMap::new();
        previous.insert("gone-job".to_owned(), "r00".to_owned());
        previous.insert("job00".to_owned(), "gone-member".to_owned());
        let a = rebalance(&jobs, &members, &previous);
        assert_eq!(a.len(), 4);
        assert!(!a.contains_key("gone-job"));
        assert_eq!(counts(&a, &members), [2, 2]);
        assert!(rebalance(&jobs, &[], &previous).is_empty());
    }

    #[test]
    fn assignment_round_trips_as_the_documented_json() {
        let mut a = Assignment {
            members: vec!["r1".into(), "r2".into()],
            jobs: BTreeMap::new(),
        };
        a.jobs.insert("billing".into(), "r1".into());
        a.jobs.insert("mail".into(), "r2".into());
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(
            json,
            r#"{"members":["r1","r2"],"jobs":{"billing":"r1","mail":"r2"}}"#
        );
        assert_eq!(serde_json::from_str::<Assignment>(&json).unwrap(), a);
        assert_eq!(a.jobs_of("r2"), ["mail"]);
    }

    #[test]
    fn the_worst_case_is_the_json_of_every_job_owned_by_the_longest_id() {
        let longest = "x".repeat(MAX_MEMBER_ID_LEN);
        for jobs in [
            names("job", 1),
            names("job", 7),
            vec!["a\"b\\c".into(), "é".into()],
        ] {
            let a = Assignment {
                members: vec![longest.clone()],
                jobs: jobs.iter().map(|j| (j.clone(), longest.clone())).collect(),
            };
            let json = serde_json::to_vec(&a).unwrap();
            assert_eq!(assignment_worst_case(&jobs), json.len(), "{jobs:?}");
        }
        // The closed form for plain names of n bytes: 153 + J (n + 134).
        let four: Vec<String> = (0..1000).map(|i| format!("j{i:03}")).collect();
        assert_eq!(assignment_worst_case(&four), 153 + 1000 * (4 + 134));
    }

    #[test]
    fn the_largest_pool_of_plain_names_fits_and_one_more_job_does_not() {
        let limit = crate::session::DEFAULT_JUTE_MAX_BUFFER;
        assert_eq!(assignment_budget(limit), 524_287);
        for (name_len, most) in [(8, 3691), (32, 3157), (64, 2647)] {
            let jobs =
                |n: usize| -> Vec<String> { (0..n).map(|i| format!("{i:0name_len$}")).collect() };
            assert!(check_assignment_size(&jobs(most), "r1", limit).is_ok());
            match check_assignment_size(&jobs(most + 1), "r1", limit) {
                Err(Error::AssignmentTooLarge { jobs, size, limit }) => {
                    assert_eq!(jobs, most + 1);
                    assert!(size > limit && limit == 524_287, "{size} {limit}");
                }
                other => panic!("{} jobs of {name_len} bytes: {other:?}", most + 1),
            }
        }
        // The budget follows the servers' jute.maxbuffer.
        assert!(check_assignment_size(&names("job", 10_000), "r1", 4 * limit).is_ok());
        assert!(check_assignment_size(&names("job", 100), "r1", 16 * 1024).is_err());
    }

    #[test]
    fn a_member_id_longer_than_the_bound_is_refused_as_the_json_counts_it() {
        let jobs = names("job", 3);
        let limit = crate::session::DEFAULT_JUTE_MAX_BUFFER;
        assert!(check_assignment_size(&jobs, &"x".repeat(MAX_MEMBER_ID_LEN), limit).is_ok());
        for too_long in [
            "x".repeat(MAX_MEMBER_ID_LEN + 1),
            // 65 quotes are 130 bytes of JSON.
            "\"".repeat(MAX_MEMBER_ID_LEN / 2 + 1),
        ] {
            match check_assignment_size(&jobs, &too_long, limit) {
                Err(Error::InvalidArgument { what, reason }) => {
                    assert_eq!(what, "participant id");
                    assert!(reason.contains("at most 128"), "{reason}");
                }
                other => panic!("{too_long:?}: {other:?}"),
            }
        }
    }
}
