//! Connection states as Curator reports them ([`ConnectionState`] has the table), and the policy that says which of them end a term.

use std::fmt;

/// Connection states as Curator reports them, and the policy that says which of them end a term.
///
/// ZooKeeper's own client reports `Disconnected`, `SyncConnected`, `Expired`. Curator folds those
/// into five states that recipes can act on; this module does the same, as pure functions so that
/// the rules can be tested without a server. The managed [`Session`](crate::Session) feeds them.
///
/// | ZooKeeper / local observation                         | ConnectionState |
/// |--------------------------------------------------------|-----------------|
/// | first session established                              | `Connected`     |
/// | connection dropped, session may be alive               | `Suspended`     |
/// | connected, but the lease lapsed while a term (or the next in line) needed it: nothing proves the quorum heard of the session within its timeout | `Suspended` |
/// | connection back (and the lease proven), same session   | `Reconnected`   |
/// | new session established after `Lost`                    | `Reconnected`   |
/// | server said expired, or the client gave up on the session | `Lost`        |
/// | connected to a read-only server                         | `ReadOnly`      |
/// | closed on purpose ([`Session::close`](crate::Session::close), last clone dropped) | `Closed` |
///
/// `Closed` is not a loss: a service that alerts on `Lost` (as on Curator's `LOST`) does not
/// alert on its own clean shutdown.
///
/// The state of the connection to ZooKeeper, as Curator's `ConnectionState`.
///
/// # Curator
/// `org.apache.curator.framework.state.ConnectionState`: the same five values. Where Curator
/// simulates a session expiration after a suspension as long as the session timeout, a session
/// here ends every term at its lease deadline (which comes earlier) and reports `Suspended`,
/// but keeps its ZooKeeper session: `Lost` is reported when the servers say the session
/// expired, or when the client gives up on it (about 7/5 of the timeout without a connection).
/// A Curator client that is suspended and then reconnects keeps its session too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnectionState {
    /// The first ZooKeeper session of this [`Session`](crate::Session) was established.
    Connected,
    /// The connection was lost, or the session can no longer prove that the quorum heard of it
    /// within its timeout (its lease lapsed); the session may still be alive on the server.
    /// Every term on it has ended; the session keeps proving itself.
    Suspended,
    /// The connection is back: either the same session (its ephemeral nodes survived) or, after
    /// [`Lost`](Self::Lost), a new session (they did not).
    Reconnected,
    /// The session is gone: the servers said it expired, or the client gave up on it. No
    /// recipe may still act as leader.
    Lost,
    /// Connected to a server in read-only mode: reads work, writes (and so elections) do not.
    ReadOnly,
    /// The session was closed on purpose ([`Session::close`](crate::Session::close), or its
    /// last clone dropped): the server was asked to end it, which deletes its ephemeral nodes.
    /// The last state a session reports; nothing follows. A deliberate end, not a loss: terms
    /// and lock holds end with it, but it is not [`Lost`](Self::Lost).
    Closed,
}

impl ConnectionState {
    /// Whether requests can currently reach a server.
    pub fn is_connected(self) -> bool {
        matches!(self, Self::Connected | Self::Reconnected | Self::ReadOnly)
    }

    /// The lowercase name used in logs and in `zkr`'s JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connected => "connected",
            Self::Suspended => "suspended",
            Self::Reconnected => "reconnected",
            Self::Lost => "lost",
            Self::ReadOnly => "read_only",
            Self::Closed => "closed",
        }
    }
}

impl fmt::Display for ConnectionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which connection states end a leadership term or a lock hold.
///
/// # Curator
/// `ConnectionStateErrorPolicy`: [`Standard`](Self::Standard) is Curator's
/// `StandardConnectionStateErrorPolicy` (the default), [`SessionExpired`](Self::SessionExpired)
/// is `SessionConnectionStateErrorPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ErrorPolicy {
    /// `Suspended` already counts as loss: a leader stops the moment its connection drops, even
    /// though the session may survive. The safe default.
    #[default]
    Standard,
    /// Only `Lost` counts: a leader keeps acting while suspended, until the session is gone or
    /// can no longer be proven alive (the term's deadline still applies).
    SessionExpired,
}

impl ErrorPolicy {
    /// Whether `state` ends a term under this policy. [`ConnectionState::Closed`] ends every
    /// term under both policies (the session is gone), although it is not a loss.
    pub fn is_error_state(self, state: ConnectionState) -> bool {
        match self {
            Self::Standard => matches!(
                state,
                ConnectionState::Suspended | ConnectionState::Lost | ConnectionState::Closed
            ),
            Self::SessionExpired => {
                matches!(state, ConnectionState::Lost | ConnectionState::Closed)
            }
        }
    }
}

/// What the underlying client told us, reduced to what the state machine needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientSignal {
    /// `SyncConnected`.
    Connected,
    /// `ConnectedReadOnly`.
    ConnectedReadOnly,
    /// `Disconnected`, or the lease lapsed (the session cannot prove that the quorum heard of
    /// it within its timeout): either way nothing may act on the session's terms.
    Disconnected,
    /// `Expired`, `Closed` or `AuthFailed`: this client is finished.
    Terminated,
}

/// The next state after `signal`, or `None` when nothing changes.
///
/// `current` is `None` before the first session exists. `new_session` says whether the
/// `Connected` signal comes from a client that was just built (a new ZooKeeper session) rather
/// than one that reconnected within its session.
pub(crate) fn next_state(
    current: Option<ConnectionState>,
    signal: ClientSignal,
    new_session: bool,
) -> Option<ConnectionState> {
    use ClientSignal as S;
    use ConnectionState as C;
    let next = match (current, signal) {
        (None, S::Connected) => C::Connected,
        (None, S::ConnectedReadOnly) => C::ReadOnly,
        // Before the first session there is nothing to suspend or lose.
        (None, _) => return None,
        (Some(C::Lost), S::Connected) if new_session => C::Reconnected,
        (Some(C::Lost), S::ConnectedReadOnly) if new_session => C::ReadOnly,
        // A retired client may still report; once lost, only a new session counts.
        (Some(C::Lost), _) => return None,
        // Closed is the end: the client signals only published by the close itself follow.
        (Some(C::Closed), _) => return None,
        (Some(C::Suspended), S::Connected) => C::Reconnected,
        (Some(C::Connected | C::Reconnected), S::Connected) => return None,
        (Some(C::ReadOnly), S::Connected) => C::Reconnected,
        (Some(_), S::ConnectedReadOnly) => C::ReadOnly,
        (Some(C::Suspended), S::Disconnected) => return None,
        (Some(_), S::Disconnected) => C::Suspended,
        (Some(_), S::Terminated) => C::Lost,
    };
    (Some(next) != current).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ClientSignal as S;
    use ConnectionState as C;

    #[test]
    fn closed_is_final_and_not_a_loss() {
        for signal in [
            S::Connected,
            S::ConnectedReadOnly,
            S::Disconnected,
            S::Terminated,
        ] {
            assert_eq!(next_state(Some(C::Closed), signal, true), None);
        }
        assert!(!C::Closed.is_connected());
        assert_eq!(C::Closed.as_str(), "closed");
        assert!(ErrorPolicy::Standard.is_error_state(C::Closed));
        assert!(ErrorPolicy::SessionExpired.is_error_state(C::Closed));
    }

    #[test]
    fn first_connection_is_connected_not_reconnected() {
        assert_eq!(next_state(None, S::Connected, true), Some(C::Connected));
        assert_eq!(
            next_state(None, S::ConnectedReadOnly, true),
            Some(C::ReadOnly)
        );
    }

    #[test]
    fn nothing_is_suspended_or_lost_before_the_first_session() {
        assert_eq!(next_state(None, S::Disconnected, false), None);
        assert_eq!(next_state(None, S::Terminated, false), None);
    }

    #[test]
    fn disconnect_then_reconnect_within_the_session() {
        assert_eq!(
            next_state(Some(C::Connected), S::Disconnected, false),
            Some(C::Suspended)
        );
        assert_eq!(next_state(Some(C::Suspended), S::Disconnected, false), None);
        assert_eq!(
            next_state(Some(C::Suspended), S::Connected, false),
            Some(C::Reconnected)
        );
        assert_eq!(
            next_state(Some(C::Reconnected), S::Disconnected, false),
            Some(C::Suspended)
        );
    }

    #[test]
    fn expiry_is_lost_from_any_live_state_and_a_lapse_only_suspends() {
        for from in [C::Connected, C::Suspended, C::Reconnected, C::ReadOnly] {
            assert_eq!(next_state(Some(from), S::Terminated, false), Some(C::Lost));
        }
        // A lapsed lease is reported as a disconnect: suspended, and back once proven.
        assert_eq!(
            next_state(Some(C::Connected), S::Disconnected, false),
            Some(C::Suspended)
        );
        assert_eq!(
            next_state(Some(C::Suspended), S::Connected, false),
            Some(C::Reconnected)
        );
    }

    #[test]
    fn after_lost_only_a_new_session_reconnects() {
        assert_eq!(next_state(Some(C::Lost), S::Connected, false), None);
        assert_eq!(next_state(Some(C::Lost), S::Disconnected, false), None);
        assert_eq!(next_state(Some(C::Lost), S::Terminated, false), None);
        assert_eq!(
            next_state(Some(C::Lost), S::Connected, true),
            Some(C::Reconnected)
        );
    }

    #[test]
    fn standard_policy_counts_suspended_as_loss_session_policy_does_not() {
        assert!(ErrorPolicy::Standard.is_error_state(C::Suspended));
        assert!(ErrorPolicy::Standard.is_error_state(C::Lost));
        assert!(!ErrorPolicy::SessionExpired.is_error_state(C::Suspended));
        assert!(ErrorPolicy::SessionExpired.is_error_state(C::Lost));
        for policy in [ErrorPolicy::Standard, ErrorPolicy::SessionExpired] {
            assert!(!policy.is_error_state(C::Connected));
            assert!(!policy.is_error_state(C::Reconnected));
        }
        assert_eq!(ErrorPolicy::default(), ErrorPolicy::Standard);
    }

    #[test]
    fn connected_states_are_the_ones_that_reach_a_server() {
        assert!(C::Connected.is_connected());
        assert!(C::Reconnected.is_connected());
        assert!(C::ReadOnly.is_connected());
        assert!(!C::Suspended.is_connected());
        assert!(!C::Lost.is_connected());
    }
}
