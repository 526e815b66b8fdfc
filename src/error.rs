//! The crate's error type.

use std::time::Duration;

/// Errors returned by sessions and recipes.
///
/// Variants are named for what the caller can do about them: retry on [`Error::ConnectionLoss`],
/// stop acting as leader on [`Error::NotLeader`], fix the call on [`Error::InvalidPath`] and
/// [`Error::InvalidArgument`].
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A znode path given to a recipe or a session is not usable.
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// Why it was rejected.
        reason: &'static str,
    },

    /// The connect string could not be parsed.
    #[error("invalid connect string {connect:?}: {reason}")]
    InvalidConnectString {
        /// The connect string as given.
        connect: String,
        /// Why it was rejected.
        reason: String,
    },

    /// An argument other than a path or connect string was rejected (an empty id, a zero timeout).
    #[error("invalid {what}: {reason}")]
    InvalidArgument {
        /// The argument that was rejected.
        what: &'static str,
        /// Why it was rejected.
        reason: String,
    },

    /// A scheduled job's schedule was refused: a cron expression croner cannot parse or that
    /// never comes due, a time zone that is not in the IANA database, a zero interval.
    #[error("invalid {what}: {reason}")]
    InvalidSchedule {
        /// `cron expression`, `time zone`, `interval`, or `schedule` (none was given).
        what: &'static str,
        /// What was wrong, with the value as given.
        reason: String,
    },

    /// The connection to ZooKeeper is down (or was lost mid-request); the session may still be
    /// alive and the operation may be retried once it is back.
    #[error("connection to ZooKeeper lost")]
    ConnectionLoss,

    /// The ZooKeeper session ended (expired on the server, or this process could no longer prove it
    /// alive). Ephemeral nodes of that session are gone or about to go. The managed session starts
    /// a new one by itself.
    #[error("ZooKeeper session expired or lost")]
    SessionExpired,

    /// The caller is not (or no longer) the leader or lock holder this operation required.
    #[error("not the leader: {reason}")]
    NotLeader {
        /// What showed that the term is over.
        reason: &'static str,
    },

    /// The session or recipe was closed.
    #[error("closed")]
    Closed,

    /// A bounded wait ran out.
    #[error("timed out after {0:?}")]
    Timeout(Duration),

    /// No ZooKeeper server could be reached to establish a session: every host of the connect
    /// string refused the connection (nothing listens there), did not answer, or accepted it
    /// but established no session. The managed session keeps retrying with a bounded backoff
    /// (at most a second between rounds of the hosts); this is what
    /// [`SessionBuilder::connect`](crate::SessionBuilder::connect) reports when no session came
    /// within the connection timeout.
    #[error("no ZooKeeper server reachable: {reason}")]
    Unreachable {
        /// What each host did, for example `127.0.0.1:2181: connection refused`.
        reason: String,
    },

    /// ZooKeeper refused the credentials.
    #[error("ZooKeeper authentication failed")]
    AuthFailed,

    /// The chroot does not exist, and the session was told not to create it
    /// ([`SessionBuilder::chroot_must_exist`](crate::SessionBuilder::chroot_must_exist)): an
    /// operator must provision it (with the ACL they mean) first. What
    /// [`SessionBuilder::connect`](crate::SessionBuilder::connect) reports when that is why no
    /// session came within the connection timeout.
    #[error(
        "the chroot {chroot:?} does not exist, and the session must not create it (chroot_must_exist): provision it first"
    )]
    NoChroot {
        /// The chroot, as configured.
        chroot: String,
    },

    /// The TLS settings cannot be used, found when the session is built, before anything
    /// connects: a missing or unreadable file, text that is not PEM or holds no certificate or
    /// key, a private key that does not match its certificate, a key file that group or others
    /// may read. Fix the file named in `what`.
    #[error("invalid TLS {what}: {reason}")]
    InvalidTls {
        /// What was refused, with its file: `client key /etc/svc/key.pem`.
        what: String,
        /// Why.
        reason: String,
    },

    /// A server took the TCP connection but the TLS handshake failed: its certificate is not
    /// signed by the configured CA, has expired, or does not name the host dialled, or it
    /// requires a client certificate and got none (or refused the one given). What
    /// [`SessionBuilder::connect`](crate::SessionBuilder::connect) reports when that is why no
    /// session came within the connection timeout.
    #[error("TLS handshake failed: {reason}")]
    TlsHandshake {
        /// Each failing server and rustls's reason, for example `127.0.0.1:2281: the server's
        /// certificate is not signed by a CA of the configured CA bundle (invalid peer
        /// certificate: UnknownIssuer)`.
        reason: String,
    },

    /// No tokio runtime is running on this thread; sessions and recipes spawn background tasks.
    #[error("no tokio runtime: sessions and recipes must be started inside a tokio runtime")]
    NoRuntime,

    /// ZooKeeper refused a recipe's request for a reason that waiting does not change: the
    /// session lacks the permission (`source` is `NoAuth`: the path's ACL, or credentials missing
    /// from the session), the election path is an ephemeral node, which cannot have children
    /// (`NoChildrenForEphemerals`), or the server rejects the node ACL (`InvalidAcl`: for example
    /// a creator ACL on a session without credentials). The recipe has stopped and deleted its
    /// node, if it had one; fix the cause, then start a new one.
    #[error("ZooKeeper refused to {operation} {path:?}: {source}")]
    Refused {
        /// What the recipe asked for.
        operation: &'static str,
        /// The path it asked about.
        path: String,
        /// The server's answer.
        #[source]
        source: zookeeper_client::Error,
    },

    /// The grace given to a term's work (a selector's closure, a scheduled job's run, `zkr`'s
    /// command) does not fit in the lease the session timeout leaves. A term whose lease is not
    /// renewed is asked to stop `grace` before its deadline, and its work is stopped by the
    /// deadline whatever the grace, so a longer grace would end terms on a healthy session.
    /// Lower the grace, or raise the session timeout (or its server tick, if that is what is
    /// assumed).
    #[error(
        "a grace of {grace:?} does not fit in the lease of a {timeout:?} session: at most {limit:?} (the timeout minus the lease margin, the relay allowance of a tick and a half, and three heartbeat intervals); lower the grace or raise the session timeout"
    )]
    GraceTooLong {
        /// The grace asked for.
        grace: Duration,
        /// The longest grace the session's timeout allows.
        limit: Duration,
        /// The session timeout it was measured against (the negotiated one once connected,
        /// else the requested one).
        timeout: Duration,
    },

    /// A request would exceed the largest packet the server accepts (its `jute.maxbuffer`, see
    /// [`SessionBuilder::jute_max_buffer`](crate::SessionBuilder::jute_max_buffer)). It was not
    /// sent: the server would have closed the connection, suspending the session and every term
    /// on it. Split the write.
    #[error("request of {size} bytes exceeds the server's limit of {limit} bytes (jute.maxbuffer)")]
    RequestTooLarge {
        /// The request's size as it would be sent, in bytes.
        size: usize,
        /// The limit, in bytes.
        limit: usize,
    },

    /// A [`LeaderPool`](crate::LeaderPool) with these jobs could need an assignment node larger
    /// than the share of the server's request limit it may take (half of `jute.maxbuffer`, see
    /// [`assignment_budget`](crate::LeaderPool::assignment_budget)): the coordinator could
    /// not write it once the members' ids are long enough. The pool was not started. Use fewer
    /// jobs or shorter job names, or split the jobs over several pools.
    #[error(
        "a pool of {jobs} jobs could need an assignment of {size} bytes, more than the {limit} bytes it may take (half of jute.maxbuffer); use fewer jobs or shorter job names, or split them over several pools"
    )]
    AssignmentTooLarge {
        /// How many jobs the pool was given.
        jobs: usize,
        /// The assignment's size, in bytes of JSON, when every job is owned by a member with an
        /// id of the longest length a pool accepts.
        size: usize,
        /// The most it may take, in bytes.
        limit: usize,
    },

    /// The election path's sequence counter has passed 2^31 - 1: ZooKeeper names new sequential
    /// nodes under it with a negative number, which orders before every other node (for Curator
    /// too). The recipe has stopped and deleted its node rather than join an election that can no
    /// longer be ordered. Delete the path once nothing uses it (or let the server remove the
    /// empty container), then start again: a new path counts from zero.
    #[error("the sequence counter of {path:?} is exhausted (past 2^31 - 1); re-create the path")]
    SequenceExhausted {
        /// The election (or lock) path.
        path: String,
    },

    /// The path has more children than a recipe processes in one listing
    /// ([`MAX_CHILDREN`](crate::path::MAX_CHILDREN)): something (a runaway client, a script, an
    /// attacker with create rights) filled it. The listing was read once and dropped; nothing
    /// was read per child. A contender that meets it stops for good and deletes its node,
    /// rather than read the whole listing again on every step. Remove the extra children (or
    /// use another path), then start again.
    #[error(
        "{path:?} has {count} children, more than the {max} a recipe processes in one listing; remove the extra children or use another path"
    )]
    TooManyChildren {
        /// The path that was listed.
        path: String,
        /// How many children it had.
        count: usize,
        /// [`MAX_CHILDREN`](crate::path::MAX_CHILDREN).
        max: usize,
    },

    /// Any other error reported by ZooKeeper or the client.
    #[error("ZooKeeper error: {0}")]
    Zookeeper(#[source] zookeeper_client::Error),
}

impl From<zookeeper_client::Error> for Error {
    fn from(err: zookeeper_client::Error) -> Self {
        use zookeeper_client::Error as Zk;
        match err {
            // zookeeper-client fails requests that were in flight when the connection broke with
            // the I/O error itself: to the caller that is a connection loss.
            Zk::ConnectionLoss | Zk::Custom(_) => Error::ConnectionLoss,
            Zk::SessionExpired => Error::SessionExpired,
            Zk::AuthFailed => Error::AuthFailed,
            other => Error::Zookeeper(other),
        }
    }
}

/// Whether `e` says the request's fate is unknown or the session went away, rather than that the
/// server refused it: connection loss (zookeeper-client fails requests that were in flight when
/// the connection broke with the I/O error itself, a `Custom` error), expiry, a retired client.
pub(crate) fn is_transient(e: &zookeeper_client::Error) -> bool {
    use zookeeper_client::Error as Zk;
    matches!(
        e,
        Zk::ConnectionLoss
            | Zk::SessionExpired
            | Zk::SessionMoved
            | Zk::Timeout
            | Zk::ClientClosed
            | Zk::Custom(_)
    )
}

/// Whether the server refused a request for a reason that retrying does not change (see
/// [`Error::Refused`]). Quota, throttling and read-only refusals are left out: they pass.
pub(crate) fn is_refusal(e: &zookeeper_client::Error) -> bool {
    use zookeeper_client::Error as Zk;
    matches!(
        e,
        Zk::NoAuth
            | Zk::NoChildrenForEphemerals
            | Zk::InvalidAcl
            | Zk::BadArguments(_)
            | Zk::Unimplemented
            | Zk::MarshallingError
    )
}

impl Error {
    /// Whether the request's outcome is unknown (a connection loss, a timeout): the session
    /// lives on and a loop retries, with a [`Backoff`], while its term or task is still on. Not
    /// the same as [`is_transient`] on a zookeeper-client error, which also counts the session
    /// going away: this crate reports that as its own variants (`SessionExpired`, `Closed`).
    pub(crate) fn outcome_unknown(&self) -> bool {
        matches!(self, Error::ConnectionLoss | Error::Timeout(_))
    }
}

/// The pauses of one retry loop: 100 ms after the first failure in a row, doubling up to a cap;
/// a success starts over. Every retry loop of the crate counts its failures with one, so they
/// all back off alike.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    failures: u32,
    cap: Duration,
}

impl Backoff {
    /// The first pause after a failure.
    const FIRST: Duration = Duration::from_millis(100);

    /// No failure yet; pauses grow to at most `cap`.
    pub(crate) fn new(cap: Duration) -> Backoff {
        Backoff { failures: 0, cap }
    }

    /// Counts a failure; returns the pause before the next attempt.
    pub(crate) fn fail(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.pause()
    }

    /// A success: the next failure pauses the shortest time again.
    pub(crate) fn succeed(&mut self) {
        self.failures = 0;
    }

    /// Failures in a row so far.
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }

    /// The pause after the failures counted so far (zero before the first).
    pub(crate) fn pause(&self) -> Duration {
        if self.failures == 0 {
            return Duration::ZERO;
        }
        let doublings = (self.failures - 1).min(16);
        Self::FIRST.saturating_mul(1u32 << doublings).min(self.cap)
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The error of the user's own code that a recipe runs (a [`LeaderSelector`](crate::LeaderSelector)'s
/// closure, a scheduled job's run): the recipe logs it and ends the term or the run; it is never
/// one of this crate's [`Error`]s.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_loss_and_expiry_map_to_actionable_variants() {
        assert!(matches!(
            Error::from(zookeeper_client::Error::ConnectionLoss),
            Error::ConnectionLoss
        ));
        assert!(matches!(
            Error::from(zookeeper_client::Error::SessionExpired),
            Error::SessionExpired
        ));
        assert!(matches!(
            Error::from(zookeeper_client::Error::NoNode),
            Error::Zookeeper(zookeeper_client::Error::NoNode)
        ));
    }

    #[test]
    fn refusals_are_told_apart_from_what_passes() {
        use zookeeper_client::Error as Zk;
        for refused in [Zk::NoAuth, Zk::NoChildrenForEphemerals, Zk::InvalidAcl] {
            assert!(is_refusal(&refused), "{refused}");
        }
        for passes in [
            Zk::ConnectionLoss,
            Zk::SessionExpired,
            Zk::NoNode,
            Zk::NodeExists,
            Zk::QuotaExceeded,
            Zk::Throttled,
            Zk::NotReadOnly,
        ] {
            assert!(!is_refusal(&passes), "{passes}");
        }
    }

    #[test]
    fn error_is_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Error>();
    }

    #[test]
    fn a_backoff_doubles_from_100_ms_up_to_its_cap_and_starts_over_after_a_success() {
        let cap = Duration::from_secs(1);
        let mut backoff = Backoff::new(cap);
        assert_eq!(backoff.pause(), Duration::ZERO);
        assert_eq!(backoff.fail(), Duration::from_millis(100));
        assert_eq!(backoff.fail(), Duration::from_millis(200));
        assert_eq!(backoff.fail(), Duration::from_millis(400));
        assert_eq!(backoff.fail(), Duration::from_millis(800));
        assert_eq!(backoff.fail(), cap);
        assert_eq!(backoff.failures(), 5);
        for _ in 0..100 {
            backoff.fail();
        }
        assert_eq!(backoff.pause(), cap);
        backoff.succeed();
        assert_eq!(backoff.fail(), Duration::from_millis(100));
        let mut saturated = Backoff {
            failures: u32::MAX,
            cap,
        };
        assert_eq!(saturated.fail(), cap);
    }

    #[test]
    fn only_a_connection_loss_or_a_timeout_leaves_the_outcome_unknown() {
        assert!(Error::ConnectionLoss.outcome_unknown());
        assert!(Error::Timeout(Duration::from_secs(1)).outcome_unknown());
        assert!(!Error::SessionExpired.outcome_unknown());
        assert!(!Error::Closed.outcome_unknown());
    }
}
