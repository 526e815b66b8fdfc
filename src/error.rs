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

    /// ZooKeeper refused the credentials.
    #[error("ZooKeeper authentication failed")]
    AuthFailed,

    /// No tokio runtime is running on this thread; sessions and recipes spawn background tasks.
    #[error("no tokio runtime: sessions and recipes must be started inside a tokio runtime")]
    NoRuntime,

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

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

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
    fn error_is_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Error>();
    }
}
