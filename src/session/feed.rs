//! Every status change of a session, in order, for a recipe's task ([`StatusFeed`]), and what
//! the watching recipes (observer, pool) share on top of it: a backoff that wakes on connection
//! changes, classifying a change for a watch, event streams.

use std::time::Duration;

use futures::Stream;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{Live, Session, SessionStatus};
use crate::error::is_transient;
use crate::state::ConnectionState;

/// Every status change of a session, in order, for a recipe's task: the contender core, the
/// observer and the pool each read one.
pub(crate) struct StatusFeed {
    rx: broadcast::Receiver<SessionStatus>,
    session: Session,
}

impl StatusFeed {
    pub(crate) fn new(session: &Session) -> Self {
        StatusFeed {
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

    /// A change that is already queued, if any (the latest status when the feed fell behind).
    pub(crate) fn try_next(&mut self) -> Option<SessionStatus> {
        match self.rx.try_recv() {
            Ok(status) => Some(status),
            Err(broadcast::error::TryRecvError::Lagged(_)) => Some(self.session.status()),
            Err(_) => None,
        }
    }

    /// Waits until the session is `Connected` or `Reconnected` (not `ReadOnly`: a read-only
    /// server may lag arbitrarily) and returns its client; `None` when `stop` fires or the session
    /// closes. `seen` is called with every change that passes meanwhile.
    pub(crate) async fn wait_quorum(
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

    /// After a failed read: logs `e` (a transient error at `debug`), then waits `pause` (the
    /// caller's [`Backoff`](crate::error::Backoff)), or less if the connection changes meanwhile.
    /// `false` when `stop` fires or the session closes.
    pub(crate) async fn pause_after(
        &mut self,
        what: &str,
        e: &zookeeper_client::Error,
        pause: Duration,
        stop: &CancellationToken,
        mut seen: impl FnMut(&SessionStatus),
    ) -> bool {
        if is_transient(e) {
            debug!(error = %e, "{what}: interrupted; waiting for the connection");
        } else {
            warn!(error = %e, "{what} failed");
        }
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

/// A recipe's events from a broadcast channel, until `done` completes; what was queued by then
/// is still delivered. A listener that falls behind skips what it missed.
pub(crate) fn until_done<T: Clone + Send + 'static>(
    mut rx: broadcast::Receiver<T>,
    done: impl Future<Output = ()> + Send + 'static,
) -> impl Stream<Item = T> + Send + 'static {
    async_stream::stream! {
        let mut done = std::pin::pin!(done);
        loop {
            tokio::select! {
                r = rx.recv() => match r {
                    Ok(event) => yield event,
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                _ = &mut done => {
                    loop {
                        match rx.try_recv() {
                            Ok(event) => yield event,
                            Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
                            Err(_) => break,
                        }
                    }
                    break;
                }
            }
        }
    }
}

/// Completes when `done` turns true (or its sender is gone).
pub(crate) async fn flag_set(mut done: watch::Receiver<bool>) {
    let _ = done.wait_for(|d| *d).await;
}

/// Logs a connection change for a recipe whose view it makes unconfirmed or stale, and passes
/// the state on.
pub(crate) fn log_state(status: &SessionStatus, mut emit: impl FnMut(ConnectionState)) {
    if let Some(state) = status.state {
        match state {
            ConnectionState::Suspended | ConnectionState::Lost | ConnectionState::ReadOnly => {
                warn!(state = %state, "connection state changed")
            }
            ConnectionState::Closed => info!(state = %state, "session closed"),
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
