//! Curator's node naming: a contender's node is `_c_<uuid>-<lockName><sequence>`. The protection
//! prefix `_c_` + a 36-character UUID + `-` lets a client find its own node again after a lost
//! create reply; the lock name is `latch-` for `LeaderLatch` and `lock-` for `LeaderSelector` and
//! `InterProcessMutex`; the server appends a sequence of 10 zero-padded digits. Contenders are
//! ordered by that sequence, read after the *last* occurrence of the lock name.

use crate::error::{Error, Result};

/// Curator's protection prefix marker.
pub(crate) const PROTECTED_MARKER: &str = "_c_";

/// Length of `_c_` + 36-character UUID + `-`.
#[cfg(test)]
pub(crate) const PROTECTED_PREFIX_LEN: usize = 40;

/// The lock name of a `LeaderLatch` node (`_c_<uuid>-latch-<seq>`).
pub const LATCH_LOCK_NAME: &str = "latch-";

/// The lock name of a `LeaderSelector` or `InterProcessMutex` node (`_c_<uuid>-lock-<seq>`).
pub const MUTEX_LOCK_NAME: &str = "lock-";

/// `_c_<uuid>-`: the prefix that marks one create-attempt series as ours.
pub(crate) fn protected_prefix(uuid: &uuid::Uuid) -> String {
    format!("{PROTECTED_MARKER}{}-", uuid.hyphenated())
}

/// How many digits the server appends to a sequential node's name (`%010d`).
pub(crate) const SEQUENCE_DIGITS: usize = 10;

/// The sequence suffix of a contender node: the 10 digits after the last occurrence of
/// `lock_name`. `None` for names that are not contenders of this kind (foreign children).
///
/// Exactly 10 digits, as the server writes them: on such names ordering by the number is
/// ordering by the text, which is Curator's rule, so Rust and Java contenders agree on the
/// order of every child that either counts.
pub(crate) fn sequence_of(name: &str, lock_name: &str) -> Option<u64> {
    if lock_name.is_empty() {
        return None;
    }
    let at = name.rfind(lock_name)?;
    let digits = &name[at + lock_name.len()..];
    if digits.len() != SEQUENCE_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A contender's node, as found in a children listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Contender {
    /// The child name.
    pub(crate) name: String,
    /// Its sequence number.
    pub(crate) sequence: u64,
}

/// Children that are contenders of this kind, in election order (lowest sequence first).
/// Foreign children (other recipes, other clients' naming) are left out.
pub(crate) fn sort_contenders(children: &[String], lock_name: &str) -> Vec<Contender> {
    let mut out: Vec<Contender> = children
        .iter()
        .filter_map(|name| {
            sequence_of(name, lock_name).map(|sequence| Contender {
                name: name.clone(),
                sequence,
            })
        })
        .collect();
    out.sort_by(|a, b| {
        a.sequence
            .cmp(&b.sequence)
            .then_with(|| a.name.cmp(&b.name))
    });
    out
}

/// Leaves out of `sorted` the nodes known to be foreign: named like contenders but persistent
/// (`ephemeralOwner == 0`, made by hand or by another tool), so that they never leave by
/// themselves. They take no place in line: the first node left is the leader, and each
/// contender watches the one left just ahead of it.
pub(crate) fn skip_foreign(
    mut sorted: Vec<Contender>,
    foreign: &std::collections::HashSet<String>,
) -> Vec<Contender> {
    if !foreign.is_empty() {
        sorted.retain(|c| !foreign.contains(&c.name));
    }
    sorted
}

/// The lock name a path's contenders use, when nobody says: `latch-` if any child is a latch
/// node, otherwise `lock-` (selectors and mutexes). Curator never mixes both under one path.
pub(crate) fn lock_name_for(children: &[String]) -> &'static str {
    if children
        .iter()
        .any(|c| sequence_of(c, LATCH_LOCK_NAME).is_some())
    {
        LATCH_LOCK_NAME
    } else {
        MUTEX_LOCK_NAME
    }
}

/// Checks a lock name given by a caller: non-empty, and usable inside a node name.
///
/// # Errors
/// [`Error::InvalidArgument`] when it is empty or contains `/`.
pub(crate) fn validate_lock_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains('/') {
        return Err(Error::InvalidArgument {
            what: "lock name",
            reason: "must be non-empty and must not contain '/'".into(),
        });
    }
    Ok(())
}

/// Where a node stands in the election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Standing {
    /// First in line: leader (once ownership is checked).
    First,
    /// Behind `predecessor`, the node to watch.
    Behind {
        /// The node just before ours.
        predecessor: String,
        /// How many nodes are ahead of ours.
        position: usize,
    },
    /// Our node is not in the listing: it was deleted (or never made it).
    Missing,
}

/// Our standing among the sorted contenders.
pub(crate) fn standing(sorted: &[Contender], own_name: &str) -> Standing {
    match sorted.iter().position(|c| c.name == own_name) {
        None => Standing::Missing,
        Some(0) => Standing::First,
        Some(i) => Standing::Behind {
            predecessor: sorted[i - 1].name.clone(),
            position: i,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_prefix_has_curators_shape() {
        let uuid = uuid::Uuid::new_v4();
        let prefix = protected_prefix(&uuid);
        assert_eq!(prefix.len(), PROTECTED_PREFIX_LEN);
        assert!(prefix.starts_with("_c_"));
        assert!(prefix.ends_with('-'));
    }

    #[test]
    fn sequence_is_read_after_the_last_lock_name() {
        assert_eq!(
            sequence_of(
                "_c_0f6b0b5e-6b3a-4c3e-9f0a-1d2c3b4a5e6f-latch-0000000007",
                "latch-"
            ),
            Some(7)
        );
        // A participant id or uuid that itself contains the lock name does not confuse it.
        assert_eq!(sequence_of("latch-x-latch-0000000012", "latch-"), Some(12));
        // Curator's plain (unprotected) names also parse.
        assert_eq!(sequence_of("latch-0000000003", "latch-"), Some(3));
        assert_eq!(sequence_of("_c_abc-lock-0000000042", "lock-"), Some(42));
    }

    #[test]
    fn foreign_children_do_not_parse() {
        for foreign in [
            "zzz",
            "lock-",
            "latch-12a",
            "_c_abc-lock-0000000001",
            "3f2a__lock__0000000001",
            // Not the server's 10 digits: too few, too many, a wrapped (negative) counter.
            "latch-7",
            "latch-00000000001",
            "latch--2147483648",
            "latch-0000000001 ",
        ] {
            assert_eq!(sequence_of(foreign, "latch-"), None, "{foreign}");
        }
        // Kazoo's lock naming is foreign to Curator's `lock-` too (no digits right after), and
        // so are zookeeper-client's shared (`n-<seq>`) and custom (`x-<session>-<seq>`) prefixes.
        for foreign in [
            "3f2a__lock__0000000001",
            "n-0000000001",
            "x-72057594037927936-0000000001",
        ] {
            assert_eq!(sequence_of(foreign, "lock-"), None, "{foreign}");
        }
        assert_eq!(sequence_of("lock-0000000001", ""), None);
    }

    #[test]
    fn contenders_sort_by_sequence_and_foreign_names_are_ignored() {
        let children: Vec<String> = [
            "_c_b-latch-0000000010",
            "garbage",
            "_c_a-latch-0000000002",
            "_c_c-lock-0000000001",
            "latch-0000000005",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let sorted = sort_contenders(&children, "latch-");
        let names: Vec<_> = sorted.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "_c_a-latch-0000000002",
                "latch-0000000005",
                "_c_b-latch-0000000010"
            ]
        );
    }

    #[test]
    fn lock_name_is_latch_if_any_child_is_a_latch_node() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            lock_name_for(&names(&["x", "_c_a-latch-0000000001"])),
            LATCH_LOCK_NAME
        );
        assert_eq!(
            lock_name_for(&names(&["_c_a-lock-0000000001"])),
            MUTEX_LOCK_NAME
        );
        assert_eq!(lock_name_for(&[]), MUTEX_LOCK_NAME);
        assert!(validate_lock_name("").is_err());
        assert!(validate_lock_name("a/b").is_err());
        assert!(validate_lock_name("latch-").is_ok());
    }

    #[test]
    fn a_sequence_past_two_to_the_31_does_not_parse() {
        // ZooKeeper formats the parent's counter with "%010d"; past 2^31 - 1 it is negative.
        assert_eq!(
            sequence_of("_c_x-latch-2147483647", "latch-"),
            Some(2_147_483_647)
        );
        assert_eq!(sequence_of("_c_x-latch--2147483648", "latch-"), None);
        assert_eq!(sequence_of("_c_x-latch--000000001", "latch-"), None);
    }

    #[test]
    fn standing_names_the_immediate_predecessor_only() {
        let children: Vec<String> = (1..=4)
            .map(|i| format!("_c_x{i}-latch-000000000{i}"))
            .collect();
        let sorted = sort_contenders(&children, "latch-");
        assert_eq!(standing(&sorted, "_c_x1-latch-0000000001"), Standing::First);
        assert_eq!(
            standing(&sorted, "_c_x4-latch-0000000004"),
            Standing::Behind {
                predecessor: "_c_x3-latch-0000000003".into(),
                position: 3
            }
        );
        assert_eq!(
            standing(&sorted, "_c_gone-latch-0000000009"),
            Standing::Missing
        );
    }

    #[test]
    fn a_known_foreign_node_takes_no_place_in_line() {
        let children: Vec<String> = [
            "x-latch-0000000000",
            "_c_a-latch-0000000001",
            "_c_p-latch-0000000002",
            "_c_b-latch-0000000003",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let foreign: std::collections::HashSet<String> = [
            "x-latch-0000000000".to_owned(),
            "_c_p-latch-0000000002".to_owned(),
        ]
        .into();
        let sorted = skip_foreign(sort_contenders(&children, "latch-"), &foreign);
        assert_eq!(standing(&sorted, "_c_a-latch-0000000001"), Standing::First);
        assert_eq!(
            standing(&sorted, "_c_b-latch-0000000003"),
            Standing::Behind {
                predecessor: "_c_a-latch-0000000001".into(),
                position: 1
            }
        );
        assert_eq!(standing(&sorted, "x-latch-0000000000"), Standing::Missing);
    }

    /// Property tests: the election order is Curator's on every name either side counts.
    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Curator's rule (`StandardLockInternalsDriver.fixForSorting` and
        /// `LockInternals.getSortedChildren`): sort *all* children, stably, by the text after the
        /// last occurrence of the lock name (the whole name when it has none), compared as
        /// strings.
        fn curator_order(children: &[String], lock_name: &str) -> Vec<String> {
            fn key<'a>(name: &'a str, lock_name: &str) -> &'a str {
                match name.rfind(lock_name) {
                    Some(at) => &name[at + lock_name.len()..],
                    None => name,
                }
            }
            let mut sorted = children.to_vec();
            sorted.sort_by(|a, b| key(a, lock_name).cmp(key(b, lock_name)));
            sorted
        }

        fn lock_name() -> impl Strategy<Value = &'static str> {
            prop_oneof![Just(LATCH_LOCK_NAME), Just(MUTEX_LOCK_NAME)]
        }

        /// A child as some client could name it: ours or Curator's (protected or not), or a
        /// foreign one (Kazoo, zookeeper-client's shared and custom prefixes, a short or long
        /// suffix, garbage, names that mention the lock name in odd places).
        fn child(sequence: u64) -> impl Strategy<Value = String> {
            let seq = format!("{sequence:010}");
            let uuid = any::<u128>().prop_map(|u| protected_prefix(&uuid::Uuid::from_u128(u)));
            prop_oneof![
                4 => (uuid, lock_name()).prop_map({
                    let seq = seq.clone();
                    move |(p, l)| format!("{p}{l}{seq}")
                }),
                2 => lock_name().prop_map({
                    let seq = seq.clone();
                    move |l| format!("{l}{seq}")
                }),
                1 => (".{0,12}", lock_name(), ".{0,12}").prop_map({
                    let seq = seq.clone();
                    move |(a, l, b)| format!("{a}{l}{b}{l}{seq}")
                }),
                1 => Just(format!("{}__lock__{seq}", &seq[..4])),
                1 => Just(format!("n-{seq}")),
                1 => Just(format!("x-72057594037927936-{seq}")),
                1 => (lock_name(), 0..10usize).prop_map({
                    let seq = seq.clone();
                    move |(l, n)| format!("{l}{}", &seq[10 - n..])
                }),
                1 => lock_name().prop_map(move |l| format!("{l}{seq}0")),
                1 => ".{0,30}",
            ]
        }

        /// Children with distinct sequences (as the server hands them out), in listing order.
        fn children() -> impl Strategy<Value = Vec<String>> {
            proptest::collection::btree_set(0u64..10_000_000_000, 0..24)
                .prop_flat_map(|seqs| seqs.into_iter().map(child).collect::<Vec<_>>())
                .prop_shuffle()
        }

        proptest! {
            #[test]
            fn a_server_made_name_parses_back_to_its_sequence(
                prefix in any::<String>(), lock in lock_name(), seq in 0u64..10_000_000_000,
            ) {
                let name = format!("{prefix}{lock}{seq:010}");
                prop_assert_eq!(sequence_of(&name, lock), Some(seq));
            }

            #[test]
            fn election_order_is_curators_on_every_name_we_count(
                children in children(), lock in lock_name(),
            ) {
                let ours: Vec<String> =
                    sort_contenders(&children, lock).into_iter().map(|c| c.name).collect();
                // Curator sorts everything; we leave foreign names out (our one deliberate
                // difference) and agree on the order of the rest.
                let curators: Vec<String> = curator_order(&children, lock)
                    .into_iter()
                    .filter(|n| sequence_of(n, lock).is_some())
                    .collect();
                prop_assert_eq!(ours, curators);
            }

            #[test]
            fn standing_names_the_contender_just_ahead(
                children in children(), lock in lock_name(), pick in any::<prop::sample::Index>(),
            ) {
                let sorted = sort_contenders(&children, lock);
                prop_assert!(sorted.windows(2).all(|w| w[0].sequence < w[1].sequence));
                if sorted.is_empty() {
                    prop_assert_eq!(standing(&sorted, "anything"), Standing::Missing);
                } else {
                    let i = pick.index(sorted.len());
                    match standing(&sorted, &sorted[i].name) {
                        Standing::First => prop_assert_eq!(i, 0),
                        Standing::Behind { predecessor, position } => {
                            prop_assert_eq!(position, i);
                            prop_assert_eq!(&predecessor, &sorted[i - 1].name);
                        }
                        Standing::Missing => prop_assert!(false, "a listed node is missing"),
                    }
                }
                // A foreign name is never anybody's standing.
                for name in children.iter().filter(|n| sequence_of(n, lock).is_none()) {
                    prop_assert_eq!(standing(&sorted, name), Standing::Missing);
                }
            }

            #[test]
            fn protected_prefixes_have_curators_shape_and_never_claim_each_others_nodes(
                a in any::<u128>(), b in any::<u128>(), lock in lock_name(),
                seq in 0u64..10_000_000_000,
            ) {
                let pa = protected_prefix(&uuid::Uuid::from_u128(a));
                prop_assert_eq!(pa.len(), PROTECTED_PREFIX_LEN);
                prop_assert!(pa.starts_with(PROTECTED_MARKER) && pa.ends_with('-'));
                let name = format!("{pa}{lock}{seq:010}");
                prop_assert_eq!(sequence_of(&name, lock), Some(seq));
                if a != b {
                    // Adoption after a lost create reply looks for children starting with the
                    // prefix: another series' node must never match.
                    prop_assert!(!name.starts_with(&protected_prefix(&uuid::Uuid::from_u128(b))));
                }
            }
        }
    }
}
