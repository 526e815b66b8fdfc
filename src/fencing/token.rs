//! The fencing token and the fence a protected resource keeps: pure, no session.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};

#[cfg(doc)]
use super::Leadership;

/// Fencing tokens, leadership terms, and writes that only a current leader can make.
///
/// Electing one leader is not enough to make work run on one replica only: a leader that was
/// paused (GC, VM freeze, partition) past its session wakes up still believing it leads, while a
/// successor already acts. Two defences work together here:
///
/// - **A deadline.** Every [`Leadership`] term is valid only until the session can no longer be
///   proven alive ([`Leadership::valid_until`], on boot time: it counts a host's suspend, see
///   [`crate::Clock`]). Check [`Leadership::is_valid`] right before acting: it needs no network,
///   so a process that has just woken from a freeze or a suspend sees that its term is over
///   before it sends anything.
/// - **A fencing token.** Each term carries a [`FencingToken`]: the zxid at which the leader's
///   node was created (its `czxid`). A leader is always the lowest live sequence under the
///   election path and sequences are handed out in commit order, so a later term always has a
///   higher token. A resource that remembers the highest token it has seen and rejects lower ones
///   ([`Fence`]) cannot be written by a deposed leader, however long it slept. ZooKeeper state
///   itself can be written through [`Leadership::fenced`], a multi-op that first checks that the
///   leader's node still exists.
///
/// # Curator
/// Curator has no token (CURATOR-537 asks for one; `getLastPathIsLeader` is the nearest), and its
/// guarded writes are still an open issue (CURATOR-689).
///
/// The token of a leadership term or lock hold: the creation zxid of the holder's node.
///
/// Tokens are totally ordered; a later term has a strictly higher token than any earlier term
/// on the same path. A term regained after a suspension with its node intact keeps its token, as
/// nobody else can have led in between.
///
/// # Examples
/// ```
/// use zookeeper_recipes::FencingToken;
///
/// let old = FencingToken::from_raw(0x1_0000_0007);
/// let new = FencingToken::from_raw(0x1_0000_0012);
/// assert!(new > old);
/// assert_eq!(new.to_string(), "4294967314");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(i64);

impl FencingToken {
    /// A token from its raw value (a zxid), as read back from a resource or an environment
    /// variable.
    pub const fn from_raw(zxid: i64) -> Self {
        FencingToken(zxid)
    }

    /// The raw value: the zxid at which the holder's node was created.
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for FencingToken {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        s.trim().parse().map(FencingToken)
    }
}

/// The resource side of fencing: remembers the highest token admitted and rejects older ones.
///
/// **A `Fence` is in-process memory.** It protects a resource only when every writer goes
/// through the same `Fence` value, in one process (a resource server that admits writes from
/// many leaders, or a test). Replicas in separate processes each have their own `Fence`, which
/// protects nothing between them: the check must live where the data lives. In a database that
/// is one conditional write, the token stored beside the data and compared in the same
/// statement:
///
/// ```sql
/// UPDATE statement_runs
///    SET batches_done = :batch, updated_by = :writer, fencing_token = :token
///  WHERE id = :id AND fencing_token <= :token   -- 0 rows changed: a newer leader wrote; stop
/// ```
///
/// (the repository's `statement_job` and `service` examples do this in SQLite). For ZooKeeper
/// state itself, [`Leadership::fenced`] does the check on the server.
///
/// Equal tokens are admitted, so one term can write many times.
///
/// # Examples
/// ```
/// use zookeeper_recipes::{Fence, FencingToken};
///
/// let fence = Fence::new();
/// fence.admit(FencingToken::from_raw(20)).unwrap();
/// fence.admit(FencingToken::from_raw(20)).unwrap();
/// assert!(fence.admit(FencingToken::from_raw(7)).is_err());
/// ```
#[derive(Debug, Default)]
pub struct Fence {
    highest: AtomicI64,
}

/// A write carried a token older than one the resource has already admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stale fencing token {offered}: the resource has already admitted {highest}")]
pub struct StaleToken {
    /// The token that was offered.
    pub offered: FencingToken,
    /// The highest token admitted so far.
    pub highest: FencingToken,
}

impl Fence {
    /// A fence that has admitted nothing yet.
    pub fn new() -> Self {
        Fence {
            highest: AtomicI64::new(i64::MIN),
        }
    }

    /// Admits `token` if it is not older than any token admitted before.
    ///
    /// # Errors
    /// [`StaleToken`] when a newer token was already admitted.
    pub fn admit(&self, token: FencingToken) -> std::result::Result<(), StaleToken> {
        let previous = self.highest.fetch_max(token.0, Ordering::AcqRel);
        if token.0 < previous {
            return Err(StaleToken {
                offered: token,
                highest: FencingToken(previous),
            });
        }
        Ok(())
    }

    /// The highest token admitted, if any.
    pub fn highest(&self) -> Option<FencingToken> {
        let h = self.highest.load(Ordering::Acquire);
        (h != i64::MIN).then_some(FencingToken(h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_order_by_zxid_and_round_trip_as_text() {
        let a = FencingToken::from_raw(5);
        let b = FencingToken::from_raw(0x1_0000_0001);
        assert!(a < b);
        assert_eq!(b.to_string().parse::<FencingToken>().unwrap(), b);
        assert!("x".parse::<FencingToken>().is_err());
    }

    #[test]
    fn fence_admits_equal_and_newer_and_rejects_older() {
        let fence = Fence::new();
        assert_eq!(fence.highest(), None);
        fence.admit(FencingToken::from_raw(10)).unwrap();
        fence.admit(FencingToken::from_raw(10)).unwrap();
        fence.admit(FencingToken::from_raw(11)).unwrap();
        let err = fence.admit(FencingToken::from_raw(10)).unwrap_err();
        assert_eq!(err.highest, FencingToken::from_raw(11));
        assert_eq!(fence.highest(), Some(FencingToken::from_raw(11)));
    }
}
