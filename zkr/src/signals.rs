//! SIGINT and SIGTERM, which end every command that runs until stopped.

use tokio::signal::unix::{Signal as UnixSignal, SignalKind, signal};

use crate::Fail;

/// SIGINT and SIGTERM, as one stream.
pub(crate) struct Signals {
    int: UnixSignal,
    term: UnixSignal,
}

impl Signals {
    pub(crate) fn new() -> Result<Signals, Fail> {
        let int = signal(SignalKind::interrupt())
            .map_err(|e| Fail::new(format!("cannot handle SIGINT: {e}")))?;
        let term = signal(SignalKind::terminate())
            .map_err(|e| Fail::new(format!("cannot handle SIGTERM: {e}")))?;
        Ok(Signals { int, term })
    }

    /// Waits for the next SIGINT or SIGTERM; returns the shell's exit code for it (128 + signal).
    pub(crate) async fn recv(&mut self) -> u8 {
        tokio::select! {
            _ = self.int.recv() => 128 + 2,
            _ = self.term.recv() => 128 + 15,
        }
    }
}
