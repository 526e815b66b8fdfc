//! The operations of a fenced write and their results, and the request's size as the server
//! measures it.

use zookeeper_client::{Acl, MultiWriteResult};

#[cfg(doc)]
use super::Leadership;

/// The size in bytes of the multi request [`Leadership::fenced`] sends, as the server measures it
/// against `jute.maxbuffer` (everything after the 4-byte length prefix), in jute's encoding:
/// the request header, the check of the leader's node, each operation behind a multi header,
/// and the closing multi header. Every path goes out with the chroot in front.
pub(super) fn fenced_request_size(
    chroot: usize,
    leader_node: &str,
    ops: &[FencedOp],
    acl: &[Acl],
) -> usize {
    const INT: usize = 4;
    const REQUEST_HEADER: usize = INT + INT; // xid, op code
    const MULTI_HEADER: usize = INT + 1 + INT; // op code, done, error
    let path = |p: &str| INT + chroot + p.len();
    let buffer = |b: &[u8]| INT + b.len();
    let acl_size: usize = INT
        + acl
            .iter()
            .map(|a| INT + INT + a.scheme().len() + INT + a.id().len())
            .sum::<usize>();
    let op_size = |op: &FencedOp| match op {
        // path, data, ACL vector, flags
        FencedOp::Create { path: p, data } => path(p) + buffer(data) + acl_size + INT,
        // path, data, version
        FencedOp::SetData { path: p, data, .. } => path(p) + buffer(data) + INT,
        // path, version
        FencedOp::Delete { path: p, .. } | FencedOp::Check { path: p, .. } => path(p) + INT,
    };
    REQUEST_HEADER
        + MULTI_HEADER
        + path(leader_node)
        + INT
        + ops
            .iter()
            .map(|op| MULTI_HEADER + op_size(op))
            .sum::<usize>()
        + MULTI_HEADER
}

/// One operation of a fenced write ([`Leadership::fenced`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FencedOp {
    /// Create a persistent node.
    Create {
        /// Absolute path.
        path: String,
        /// Node data.
        data: Vec<u8>,
    },
    /// Set a node's data.
    SetData {
        /// Absolute path.
        path: String,
        /// New data.
        data: Vec<u8>,
        /// Expected version, or `None` for any.
        version: Option<i32>,
    },
    /// Delete a node.
    Delete {
        /// Absolute path.
        path: String,
        /// Expected version, or `None` for any.
        version: Option<i32>,
    },
    /// Check a node's version (`-1`: only that it exists).
    Check {
        /// Absolute path.
        path: String,
        /// Expected version.
        version: i32,
    },
}

impl FencedOp {
    /// Create a persistent node.
    pub fn create(path: impl Into<String>, data: impl Into<Vec<u8>>) -> Self {
        FencedOp::Create {
            path: path.into(),
            data: data.into(),
        }
    }

    /// Set a node's data, whatever its version.
    pub fn set_data(path: impl Into<String>, data: impl AsRef<[u8]>) -> Self {
        FencedOp::SetData {
            path: path.into(),
            data: data.as_ref().to_vec(),
            version: None,
        }
    }

    /// Delete a node, whatever its version.
    pub fn delete(path: impl Into<String>) -> Self {
        FencedOp::Delete {
            path: path.into(),
            version: None,
        }
    }

    /// Check that a node exists.
    pub fn exists(path: impl Into<String>) -> Self {
        FencedOp::Check {
            path: path.into(),
            version: -1,
        }
    }
}

/// The result of one [`FencedOp`].
///
/// A write's `mtime_ms` is the quorum leader's wall clock when it prepared the transaction: the
/// ensemble's view of time, the same for every replica (the scheduled job decides what is due by
/// it, not by its own clock).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FencedResult {
    /// A node was created at `path`.
    #[non_exhaustive]
    Created {
        /// Its path.
        path: String,
        /// Its `mtime` (milliseconds since the Unix epoch), when the server reported a valid
        /// `Stat` (ZooKeeper before 3.7 does not, in a multi: ZOOKEEPER-4026).
        mtime_ms: Option<i64>,
    },
    /// A node's data was set; it now has `version`.
    #[non_exhaustive]
    DataSet {
        /// The new data version.
        version: i32,
        /// Its new `mtime` (milliseconds since the Unix epoch).
        mtime_ms: i64,
    },
    /// A node was deleted.
    Deleted,
    /// A check passed.
    Checked,
}

impl FencedResult {
    /// The ensemble's time of the write, for a create or a set that reported one.
    pub fn mtime_ms(&self) -> Option<i64> {
        match self {
            FencedResult::Created { mtime_ms, .. } => *mtime_ms,
            FencedResult::DataSet { mtime_ms, .. } => Some(*mtime_ms),
            _ => None,
        }
    }
}

impl From<MultiWriteResult> for FencedResult {
    fn from(r: MultiWriteResult) -> Self {
        match r {
            MultiWriteResult::Create { path, stat } => FencedResult::Created {
                path,
                mtime_ms: (stat.mzxid > 0 && stat.mtime > 0).then_some(stat.mtime),
            },
            MultiWriteResult::SetData { stat } => FencedResult::DataSet {
                version: stat.version,
                mtime_ms: stat.mtime,
            },
            MultiWriteResult::Delete => FencedResult::Deleted,
            _ => FencedResult::Checked,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::NodeAcl;

    #[test]
    fn fenced_request_size_counts_jutes_encoding() {
        let acl = NodeAcl::anyone_all();
        // header 8 + check (9 + 4 + 2 + 4) + closing header 9
        assert_eq!(fenced_request_size(0, "/l", &[], acl.entries()), 36);
        // + set data: 9 + (4 + 2) + (4 + 3) + 4
        let set = [FencedOp::set_data("/d", b"abc")];
        assert_eq!(fenced_request_size(0, "/l", &set, acl.entries()), 36 + 26);
        // A chroot goes in front of both paths.
        assert_eq!(
            fenced_request_size(4, "/l", &set, acl.entries()),
            36 + 26 + 8
        );
        // + create: 9 + (4 + 2) + (4 + 1) + ACL (4 + 4 + 4 + "world" + 4 + "anyone") + flags 4
        let create = [FencedOp::create("/c", b"x".to_vec())];
        assert_eq!(
            fenced_request_size(0, "/l", &create, acl.entries()),
            36 + 9 + 6 + 5 + (4 + 4 + 9 + 10) + 4
        );
        // delete and check: 9 + (4 + 2) + 4 each
        let small = [FencedOp::delete("/x"), FencedOp::exists("/y")];
        assert_eq!(fenced_request_size(0, "/l", &small, acl.entries()), 36 + 38);
    }
}
