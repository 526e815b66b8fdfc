//! Recipe paths and participant ids, and the lock names of Curator's node naming: pure
//! functions, tested without a server.

mod connect;
mod naming;

pub(crate) use connect::{ConnectString, Transport, validate_chroot};
pub use naming::{LATCH_LOCK_NAME, MUTEX_LOCK_NAME};
pub(crate) use naming::{
    Standing, lock_name_for, protected_prefix, sequence_of, skip_foreign, sort_contenders,
    standing, validate_lock_name,
};

use crate::error::{Error, Result};

/// The root under which elections live when only a name is given (`zkr latch jobs` joins
/// `/election/jobs`).
pub const DEFAULT_ELECTION_ROOT: &str = "/election";

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

/// The longest participant id accepted, in bytes of UTF-8.
///
/// An id is the node's data, printed in every `zkr` event line and carried by every tracing
/// event of a recipe; [`participants`](crate::LeaderLatch::participants) reads one per
/// participant. 256 bytes holds any DNS host name (253) or Kubernetes pod name (253) with room
/// to spare, while a `zkr` JSON line stays well under `PIPE_BUF` (4 KiB, the size up to which
/// a write to a pipe is atomic, so lines of concurrent writers never interleave) even when every
/// byte of the id needs escaping, and a thousand participants cost a quarter of a MiB to list.
pub const MAX_ID_LEN: usize = 256;

/// The most children of one path a recipe processes in one listing.
///
/// Every contender step, participant listing and observer look reads the election path's
/// children (zookeeper-client reads a listing whole); [`participants`](crate::LeaderLatch::participants)
/// then reads each one's data. A path with more children than this gives
/// [`Error::TooManyChildren`] at once instead: a contender stops for good rather than read the
/// listing again on every step, and nobody reads the children's data. 10 000 contender names
/// (57 bytes each with Curator's protected prefix) make a reply of about 600 KB, within the
/// 1 MB that a Java client (Curator's peers) reads by default (`jute.maxbuffer`): a path with
/// more is broken for them anyway.
pub const MAX_CHILDREN: usize = 10_000;

/// [`Error::TooManyChildren`] when `children` (the listing of `path`) is longer than
/// [`MAX_CHILDREN`].
pub(crate) fn check_children(path: &str, children: &[String]) -> Result<()> {
    if children.len() > MAX_CHILDREN {
        return Err(Error::TooManyChildren {
            path: path.to_owned(),
            count: children.len(),
            max: MAX_CHILDREN,
        });
    }
    Ok(())
}

/// Checks a participant id: Curator stores it as the node's data, and an empty id could not be
/// told apart from "no id".
///
/// Rules: not empty, at most [`MAX_ID_LEN`] bytes of UTF-8, and no control characters (C0,
/// DEL, C1: a newline or an escape sequence in an id would forge log lines or drive the
/// terminal of whoever reads them).
///
/// # Errors
/// [`Error::InvalidArgument`] when `id` breaks one of the rules.
pub fn validate_id(id: &str) -> Result<()> {
    let invalid = |reason: String| {
        Err(Error::InvalidArgument {
            what: "participant id",
            reason,
        })
    };
    if id.is_empty() {
        return invalid("must not be empty".into());
    }
    if id.len() > MAX_ID_LEN {
        return invalid(format!(
            "is {} bytes long; at most {MAX_ID_LEN} are allowed",
            id.len()
        ));
    }
    if let Some(c) = id.chars().find(|c| c.is_control()) {
        return invalid(format!(
            "must not contain control characters (found {:?})",
            c
        ));
    }
    Ok(())
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
    fn empty_over_long_and_control_character_ids_are_rejected() {
        for bad in [
            String::new(),
            "x".repeat(MAX_ID_LEN + 1),
            // 86 three-byte characters: 258 bytes, though only 86 characters.
            "\u{20ac}".repeat(86),
            "replica-1\nINFO forged log line".into(),
            "tab\there".into(),
            "bell\u{7}".into(),
            "escape\u{1b}[31m".into(),
            "del\u{7f}".into(),
            "c1\u{85}".into(),
            "nul\u{0}".into(),
        ] {
            assert!(
                matches!(
                    validate_id(&bad),
                    Err(Error::InvalidArgument {
                        what: "participant id",
                        ..
                    })
                ),
                "{bad:?} should be rejected"
            );
        }
        for good in [
            "replica-1".to_owned(),
            "x".repeat(MAX_ID_LEN),
            "10.0.0.12".into(),
            "pod-7f9c/statement job \u{e9}\u{20ac}".into(),
        ] {
            assert!(validate_id(&good).is_ok(), "{good:?} should be accepted");
        }
    }

    #[test]
    fn a_listing_longer_than_max_children_is_a_typed_error() {
        let at_max: Vec<String> = (0..MAX_CHILDREN)
            .map(|i| format!("latch-{i:010}"))
            .collect();
        assert!(check_children("/e", &at_max).is_ok());
        let mut over = at_max;
        over.push("one-more".into());
        match check_children("/e", &over) {
            Err(Error::TooManyChildren { path, count, max }) => {
                assert_eq!(
                    (path.as_str(), count, max),
                    ("/e", MAX_CHILDREN + 1, MAX_CHILDREN)
                );
            }
            other => panic!("expected TooManyChildren, got {other:?}"),
        }
    }

    #[test]
    fn join_makes_a_child_path() {
        assert_eq!(join("/election/jobs", "n"), "/election/jobs/n");
    }

    /// Property tests: arbitrary input never panics; paths and ids follow the rules.
    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn arbitrary_names_never_panic(name in any::<String>(), lock in any::<String>(),
                                           own in any::<String>()) {
                let _ = sequence_of(&name, &lock);
                let children = vec![name.clone(), own.clone()];
                let sorted = sort_contenders(&children, &lock);
                let _ = standing(&sorted, &own);
                let _ = validate_path(&name);
                let _ = election_path(&name);
                let _ = validate_id(&name);
                let _ = validate_chroot(&name);
                let _ = ConnectString::parse(&name);
            }

            #[test]
            fn valid_paths_are_accepted_and_broken_ones_rejected(
                segments in proptest::collection::vec("[a-zA-Z0-9_.-]{1,12}", 1..6),
                cut in any::<prop::sample::Index>(),
            ) {
                prop_assume!(segments.iter().all(|s| s != "." && s != ".."));
                prop_assume!(segments[0] != "zookeeper");
                let path = format!("/{}", segments.join("/"));
                prop_assert!(validate_path(&path).is_ok(), "{path:?}");
                prop_assert_eq!(election_path(&path).ok(), Some(path.clone()));
                let trailing = format!("{path}/");
                prop_assert!(validate_path(&trailing).is_err());
                prop_assert!(validate_path(&path[1..]).is_err());
                let at = 1 + cut.index(path.len() - 1);
                if path.as_bytes()[at] == b'/' || path.as_bytes()[at - 1] == b'/' {
                    let mut doubled = path.clone();
                    doubled.insert(at, '/');
                    prop_assert!(validate_path(&doubled).is_err(), "{doubled:?}");
                }
                let reserved = format!("/zookeeper{path}");
                prop_assert!(validate_path(&reserved).is_err());
            }

            #[test]
            fn ids_follow_the_rules(id in any::<String>()) {
                let ok = !id.is_empty() && id.len() <= MAX_ID_LEN && !id.chars().any(char::is_control);
                prop_assert_eq!(validate_id(&id).is_ok(), ok, "{:?}", id);
            }
        }
    }
}
