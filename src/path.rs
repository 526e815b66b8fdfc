//! Paths, connect strings, and Curator's node naming: pure functions, tested without a server.
//!
//! Curator names a contender's node `_c_<uuid>-<lockName><sequence>`: the protection prefix
//! `_c_` + a 36-character UUID + `-` lets a client find its own node again after a lost create
//! reply, the lock name is `latch-` for `LeaderLatch` and `lock-` for `LeaderSelector` and
//! `InterProcessMutex`, and the server appends a sequence of 10 zero-padded digits. Contenders
//! are ordered by that sequence, read after the *last* occurrence of the lock name.

use crate::error::{Error, Result};

/// The root under which elections live when only a name is given (`zkr latch jobs` joins
/// `/election/jobs`).
pub const DEFAULT_ELECTION_ROOT: &str = "/election";

/// Curator's protection prefix marker.
pub(crate) const PROTECTED_MARKER: &str = "_c_";

/// Length of `_c_` + 36-character UUID + `-`.
#[cfg(test)]
pub(crate) const PROTECTED_PREFIX_LEN: usize = 40;

/// The lock name of a `LeaderLatch` node (`_c_<uuid>-latch-<seq>`).
pub const LATCH_LOCK_NAME: &str = "latch-";

/// The lock name of a `LeaderSelector` or `InterProcessMutex` node (`_c_<uuid>-lock-<seq>`).
pub const MUTEX_LOCK_NAME: &str = "lock-";

/// Checks that `path` is an absolute ZooKeeper path that can hold a recipe.
///
/// # Errors
/// [`Error::InvalidPath`] when the path is relative, is the root, ends with `/`, has an empty,
/// `.` or `..` segment, contains a character ZooKeeper refuses, or lies under the reserved
/// `/zookeeper` tree.
pub fn validate_path(path: &str) -> Result<()> {
    let invalid = |reason| {
        Err(Error::InvalidPath {
            path: path.to_owned(),
            reason,
        })
    };
    if path.is_empty() {
        return invalid("path is empty");
    }
    if !path.starts_with('/') {
        return invalid("path must be absolute (start with '/')");
    }
    if path == "/" {
        return invalid("the root cannot hold a recipe's nodes");
    }
    if path.ends_with('/') {
        return invalid("path must not end with '/'");
    }
    for segment in path[1..].split('/') {
        match segment {
            "" => return invalid("path has an empty segment ('//')"),
            "." | ".." => return invalid("path segments '.' and '..' are not allowed"),
            _ => {}
        }
    }
    if path.chars().any(is_forbidden_char) {
        return invalid("path contains a character ZooKeeper does not accept");
    }
    if path == "/zookeeper" || path.starts_with("/zookeeper/") {
        return invalid("/zookeeper is reserved by the server");
    }
    Ok(())
}

/// Characters that ZooKeeper's `PathUtils.validatePath` rejects.
fn is_forbidden_char(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}')
}

/// The election path for a bare name: `/election/<name>`; an absolute path is returned as is.
///
/// # Errors
/// [`Error::InvalidPath`] when the result is not a valid recipe path.
pub fn election_path(name_or_path: &str) -> Result<String> {
    let path = if name_or_path.starts_with('/') {
        name_or_path.to_owned()
    } else {
        format!("{DEFAULT_ELECTION_ROOT}/{name_or_path}")
    };
    validate_path(&path)?;
    Ok(path)
}

/// Joins a recipe path and a child name.
pub(crate) fn join(parent: &str, child: &str) -> String {
    format!("{parent}/{child}")
}

/// Checks a participant id: Curator stores it as the node's data, and an empty id could not be
/// told apart from "no id".
///
/// # Errors
/// [`Error::InvalidArgument`] when `id` is empty or longer than 1 MiB minus room for the name.
pub fn validate_id(id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(Error::InvalidArgument {
            what: "participant id",
            reason: "must not be empty".into(),
        });
    }
    if id.len() > 1_000_000 {
        return Err(Error::InvalidArgument {
            what: "participant id",
            reason: "longer than a znode's data may be".into(),
        });
    }
    Ok(())
}

/// `_c_<uuid>-`: the prefix that marks one create-attempt series as ours.
pub(crate) fn protected_prefix(uuid: &uuid::Uuid) -> String {
    format!("{PROTECTED_MARKER}{}-", uuid.hyphenated())
}

/// The sequence suffix of a contender node: the digits after the last occurrence of
/// `lock_name`. `None` for names that are not contenders of this kind (foreign children).
pub(crate) fn sequence_of(name: &str, lock_name: &str) -> Option<u64> {
    let at = name.rfind(lock_name)?;
    let digits = &name[at + lock_name.len()..];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
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

/// A parsed and validated connect string: `host:port[,host:port...][/chroot]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnectString {
    /// `host:port` entries (with `tcp://` kept where given).
    pub(crate) hosts: Vec<String>,
    /// The chroot, absolute, or `None`.
    pub(crate) chroot: Option<String>,
}

impl ConnectString {
    /// Parses and validates `s`.
    pub(crate) fn parse(s: &str) -> Result<Self> {
        let invalid = |reason: &str| {
            Err(Error::InvalidConnectString {
                connect: s.to_owned(),
                reason: reason.to_owned(),
            })
        };
        let s_trim = s.trim();
        if s_trim.is_empty() {
            return invalid("connect string is empty");
        }
        let (hosts_part, chroot) = match s_trim.find('/') {
            // `tcp://host` has its first '/' inside the scheme; skip over schemes.
            Some(_) => split_chroot(s_trim),
            None => (s_trim, None),
        };
        let mut hosts = Vec::new();
        for entry in hosts_part.split(',') {
            let entry = entry.trim();
            let bare = entry.strip_prefix("tcp://").unwrap_or(entry);
            if bare.is_empty() {
                return invalid("empty host entry (stray ',')");
            }
            if bare.contains("://") {
                return invalid("only plain tcp:// servers are supported");
            }
            let (host, port) = match bare.rsplit_once(':') {
                Some((h, p)) if !h.contains(':') || h.starts_with('[') => (h, Some(p)),
                Some(_) => return invalid("IPv6 addresses must be written as [addr]:port"),
                None => (bare, None),
            };
            if host.is_empty() {
                return invalid("host is empty");
            }
            if host.chars().any(|c| c.is_whitespace() || c == '/') {
                return invalid("host contains whitespace or '/'");
            }
            if let Some(port) = port {
                match port.parse::<u16>() {
                    Ok(0) | Err(_) => return invalid("port must be a number in 1..=65535"),
                    Ok(_) => {}
                }
            }
            hosts.push(bare.to_owned());
        }
        if let Some(chroot) = &chroot
            && chroot != "/"
            && validate_path(chroot).is_err()
        {
            return invalid("chroot is not a valid absolute path");
        }
        let chroot = chroot.filter(|c| c != "/");
        Ok(ConnectString { hosts, chroot })
    }

    /// The hosts part, as zookeeper-client accepts it.
    pub(crate) fn hosts_joined(&self) -> String {
        self.hosts.join(",")
    }
}

/// Splits `host:port,.../chroot` at the first '/' that is not part of a `tcp://` scheme.
fn split_chroot(s: &str) -> (&str, Option<String>) {
    let mut offset = 0;
    let bytes = s.as_bytes();
    while offset < s.len() {
        if s[offset..].starts_with("tcp://") {
            offset += "tcp://".len();
            continue;
        }
        if bytes[offset] == b'/' {
            return (&s[..offset], Some(s[offset..].to_owned()));
        }
        offset += s[offset..].chars().next().map_or(1, char::len_utf8);
    }
    (s, None)
}

/// Checks a chroot given on its own (not in a connect string).
pub(crate) fn validate_chroot(chroot: &str) -> Result<()> {
    if !chroot.starts_with('/') {
        return Err(Error::InvalidPath {
            path: chroot.to_owned(),
            reason: "chroot must be absolute (start with '/')",
        });
    }
    if chroot == "/" {
        return Ok(());
    }
    validate_path(chroot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_root_trailing_and_dotted_paths_are_rejected() {
        for bad in [
            "",
            "election",
            "/",
            "/a/",
            "/a//b",
            "/a/./b",
            "/a/../b",
            "/zookeeper/x",
            "/a\u{0}b",
        ] {
            assert!(
                matches!(validate_path(bad), Err(Error::InvalidPath { .. })),
                "{bad:?} should be rejected"
            );
        }
        for good in ["/election", "/election/jobs", "/a-b_c.d/e", "/zookeeperish"] {
            assert!(validate_path(good).is_ok(), "{good:?} should be accepted");
        }
    }

    #[test]
    fn bare_names_go_under_the_default_election_root() {
        assert_eq!(election_path("jobs").unwrap(), "/election/jobs");
        assert_eq!(election_path("/custom/jobs").unwrap(), "/custom/jobs");
        assert!(election_path("jobs/").is_err());
        assert!(election_path("").is_err());
    }

    #[test]
    fn empty_id_is_rejected() {
        assert!(validate_id("").is_err());
        assert!(validate_id("replica-1").is_ok());
    }

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
        ] {
            assert_eq!(sequence_of(foreign, "latch-"), None, "{foreign}");
        }
        // Kazoo's lock naming is foreign to Curator's `lock-` too (no digits right after).
        assert_eq!(sequence_of("3f2a__lock__0000000001", "lock-"), None);
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
    fn connect_strings_parse_with_optional_chroot() {
        let cs = ConnectString::parse("127.0.0.1:2181").unwrap();
        assert_eq!(cs.hosts, ["127.0.0.1:2181"]);
        assert_eq!(cs.chroot, None);
        let cs = ConnectString::parse("a:1,b:2,c/app/zk").unwrap();
        assert_eq!(cs.hosts, ["a:1", "b:2", "c"]);
        assert_eq!(cs.chroot.as_deref(), Some("/app/zk"));
        let cs = ConnectString::parse("tcp://a:1,tcp://b:2/app").unwrap();
        assert_eq!(cs.hosts, ["a:1", "b:2"]);
        assert_eq!(cs.chroot.as_deref(), Some("/app"));
        assert_eq!(
            ConnectString::parse("[::1]:2181").unwrap().hosts,
            ["[::1]:2181"]
        );
        assert_eq!(ConnectString::parse("a:1/").unwrap().chroot, None);
    }

    #[test]
    fn malformed_connect_strings_are_typed_errors() {
        for bad in [
            "",
            "   ",
            ",",
            "a:1,",
            ":2181",
            "a:0",
            "a:99999",
            "a:port",
            "a:1/b/",
            "a:1//b",
            "tcp+tls://a:1",
            "a b:1",
        ] {
            assert!(
                matches!(
                    ConnectString::parse(bad),
                    Err(Error::InvalidConnectString { .. })
                ),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn chroot_must_be_absolute() {
        assert!(validate_chroot("app").is_err());
        assert!(validate_chroot("/app").is_ok());
        assert!(validate_chroot("/").is_ok());
    }

    #[test]
    fn join_makes_a_child_path() {
        assert_eq!(join("/election/jobs", "n"), "/election/jobs/n");
    }
}
