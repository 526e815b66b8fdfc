//! What a harness server is asked to be ([`Settings`]) and what it says it is ([`ServerMode`]).
//!
//! The bottom of the harness: `process` (JVMs), `docker` (containers), `server` and `cluster`
//! all use it, and it uses none of them.

use std::time::Duration;

use super::{HarnessError, Result};

/// How long a server may take to serve after its JVM starts.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// What a server's `srvr` four-letter word says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerMode {
    /// A standalone server, serving.
    Standalone,
    /// The ensemble's leader, serving.
    Leader,
    /// A follower, serving.
    Follower,
    /// An observer, serving.
    Observer,
    /// A read-only server (partitioned from its quorum, with read-only mode on).
    ReadOnly,
    /// Up, but not serving requests (starting, or an ensemble member without quorum). ZooKeeper
    /// answers `ruok` with `imok` in this state already, which is why the harness uses `srvr`.
    NotServing,
}

impl ServerMode {
    pub(crate) fn parse(mode: &str) -> ServerMode {
        match mode {
            "standalone" => ServerMode::Standalone,
            "leader" => ServerMode::Leader,
            "follower" => ServerMode::Follower,
            "observer" => ServerMode::Observer,
            "read-only" => ServerMode::ReadOnly,
            _ => ServerMode::NotServing,
        }
    }

    /// Whether the server serves client requests in this mode.
    pub fn is_serving(self) -> bool {
        self != ServerMode::NotServing
    }
}

/// Server settings shared by [`super::TestingServer`] and [`super::TestingCluster`].
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) tick_time: Duration,
    pub(crate) min_session_timeout: Duration,
    pub(crate) max_session_timeout: Duration,
    pub(crate) start_timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tick_time: Duration::from_millis(200),
            min_session_timeout: Duration::from_millis(400),
            max_session_timeout: Duration::from_secs(60),
            start_timeout: START_TIMEOUT,
        }
    }
}

fn millis(what: &'static str, d: Duration) -> Result<i32> {
    match i32::try_from(d.as_millis()) {
        Ok(ms) if ms > 0 => Ok(ms),
        _ => Err(HarnessError::InvalidArgument {
            what,
            reason: format!("{d:?} is not between 1 ms and i32::MAX ms"),
        }),
    }
}

impl Settings {
    pub(crate) fn validate(&self) -> Result<()> {
        self.common_config().map(drop)
    }

    pub(crate) fn tick_ms(&self) -> Result<i32> {
        millis("tick time", self.tick_time)
    }

    pub(crate) fn session_ms(&self) -> Result<(i32, i32)> {
        let min = millis("min session timeout", self.min_session_timeout)?;
        let max = millis("max session timeout", self.max_session_timeout)?;
        if min > max {
            return Err(HarnessError::InvalidArgument {
                what: "session timeouts",
                reason: format!(
                    "min {:?} is above max {:?}",
                    self.min_session_timeout, self.max_session_timeout
                ),
            });
        }
        Ok((min, max))
    }

    /// `zoo.cfg` lines every harness server has.
    pub(crate) fn common_config(&self) -> Result<String> {
        let tick = self.tick_ms()?;
        let (min, max) = self.session_ms()?;
        Ok(format!(
            "tickTime={tick}\n\
             minSessionTimeout={min}\n\
             maxSessionTimeout={max}\n\
             clientPortAddress=127.0.0.1\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=*\n\
             maxClientCnxns=0\n"
        ))
    }
}
