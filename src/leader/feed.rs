//! What the watching recipes (observer, pool) share on top of the session's [`StatusFeed`]: a
//! backoff that wakes on connection changes, classifying a change for a watch, event streams.

use futures::Stream;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::session::{SessionStatus, StatusFeed, is_transient, retry_backoff};
use crate::state::ConnectionState;

impl StatusFeed {
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
        let pause = retry_backoff(failures, self.session().connection_timeout());
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
