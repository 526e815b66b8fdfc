//! The connection-state feed that the watching recipes (observer, pool) share: every status
//! change in order, and the wait for a session that can serve reads of the quorum's state.

use futures::Stream;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::session::{Live, Session, SessionStatus, is_transient, retry_backoff};
use crate::state::ConnectionState;

/// Every status change of a session, in order.
pub(crate) struct Feed {
    rx: broadcast::Receiver<SessionStatus>,
    session: Session,
}

impl Feed {
    pub(crate) fn new(session: &Session) -> Self {
        Feed {
            rx: session.subscribe_changes(),
            session: session.clone(),
        }
    }

    /// The next status change (the latest status when the feed fell behind; `closed` once the
    /// session is gone).
    pub(crate) async fn next(&mut self) -> SessionStatus {
        match self.rx.recv().await {
            Ok(status) => status,
            Err(broadcast::error::RecvError::Lagged(_)) => self.session.status(),
            Err(broadcast::error::RecvError::Closed) => {
                let mut status = self.session.status();
                status.closed = true;
                status
            }
        }
    }

    /// Waits until the session is `Connected` or `Reconnected` (not `ReadOnly`: a read-only
    /// server may lag arbitrarily) and returns its client; `None` when `stop` fires or the session
    /// closes. `seen` is called with every change that passes meanwhile.
    pub(crate) async fn wait_readable(
        &mut self,
        stop: &CancellationToken,
        mut seen: impl FnMut(&SessionStatus),
    ) -> Option<Live> {
        loop {
            if stop.is_cancelled() {
                return None;
            }
            let status = self.session.status();
            if status.closed {
                return None;
            }
            if matches!(
                status.state,
                Some(ConnectionState::Connected | ConnectionState::Reconnected)
            ) && let Ok(live) = self.session.live()
            {
                return Some(live);
            }
            tokio::select! {
                _ = stop.cancelled() => return None,
                status = self.next() => {
                    seen(&status);
                    if status.closed {
                        return None;
                    }
                }
            }
        }
    }
}

impl Feed {
    /// After the `failures`th failed read in a row: logs `e` (a transient error at `debug`),
    /// then waits the backoff for `failures`, or less if the connection changes meanwhile.
    /// `false` when `stop` fires or the session closes.
    pub(crate) async fn pause_after(
        &mut self,
        what: &str,
        e: &zookeeper_client::Error,
        failures: u32,
        stop: &CancellationToken,
        mut seen: impl FnMut(&SessionStatus),
    ) -> bool {
        if is_transient(e) {
            debug!(error = %e, "{what}: interrupted; waiting for the connection");
        } else {
            warn!(error = %e, "{what} failed");
        }
        let pause = retry_backoff(failures, self.session.connection_timeout());
        tokio::select! {
            _ = stop.cancelled() => false,
            _ = tokio::time::sleep(pause) => true,
            status = self.next() => {
                seen(&status);
                !status.closed
            }
        }
    }
}

/// A recipe's events from a broadcast channel, until `done` turns true; what was queued by then
/// is still delivered. A listener that falls behind skips what it missed.
pub(crate) fn until_done<T: Clone + Send + 'static>(
    mut rx: broadcast::Receiver<T>,
    mut done: watch::Receiver<bool>,
) -> impl Stream<Item = T> + Send + 'static {
    async_stream::stream! {
        loop {
            tokio::select! {
                r = rx.recv() => match r {
                    Ok(event) => yield event,
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                _ = async { let _ = done.wait_for(|d| *d).await; } => {
                    while let Ok(event) = rx.try_recv() {
                        yield event;
                    }
                    break;
                }
            }
        }
    }
}

/// Logs a connection change for a recipe whose view it makes unconfirmed or stale, and passes
/// the state on.
pub(crate) fn log_state(status: &SessionStatus, mut emit: impl FnMut(ConnectionState)) {
    if let Some(state) = status.state {
        match state {
            ConnectionState::Suspended | ConnectionState::Lost | ConnectionState::ReadOnly => {
                warn!(state = %state, "connection state changed")
            }
            _ => debug!(state = %state, "connection state changed"),
        }
        emit(state);
    }
}

/// What a change means to a recipe that holds a watch on session `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Back on the same session: the watch survived; read again to catch up.
    Reconnected,
    /// Disconnected (or read-only) within the same session: the watch survives; wait.
    Interrupted,
    /// A new session, a loss, or a close: the watch is gone; start over.
    SessionGone,
}

/// Classifies `status` for a watch held on session `epoch`.
pub(crate) fn classify(status: &SessionStatus, epoch: u64) -> Change {
    if status.closed || status.epoch != epoch {
        return Change::SessionGone;
    }
    match status.state {
        Some(ConnectionState::Reconnected | ConnectionState::Connected) => Change::Reconnected,
        Some(ConnectionState::Suspended | ConnectionState::ReadOnly) => Change::Interrupted,
        _ => Change::SessionGone,
    }
}
