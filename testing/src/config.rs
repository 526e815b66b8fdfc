//! What a harness server is asked to be ([`Settings`]) and what it says it is ([`ServerMode`]).
//!
//! The bottom of the harness: `process` (JVMs), `docker` (containers), `server` and `cluster`
//! all use it, and it uses none of them.

use std::time::Duration;

use super::security::Security;
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
    /// TLS, x509 and SASL (all off by default).
    pub(crate) security: Security,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tick_time: Duration::from_millis(200),
            min_session_timeout: Duration::from_millis(400),
            max_session_timeout: Duration::from_secs(60),
            start_timeout: START_TIMEOUT,
            security: Security::default(),
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
        self.security.validate()?;
        self.common_config().map(drop)
    }

    pub(crate) fn tick_ms(&self) -> Result<i32> {
        millis("tick time", self.tick_time)
    }

    /// The cluster-wide (or the standalone server's) session-timeout limits.
    pub(crate) fn session_limits(&self) -> Result<SessionLimits> {
        SessionLimits::new(self.min_session_timeout, self.max_session_timeout)
    }

    /// `zoo.cfg` lines every harness server has. The client port's lines are not among them:
    /// a plaintext server has `clientPort` and `clientPortAddress`, a TLS-only one
    /// `secureClientPort` and `secureClientPortAddress` (ZooKeeper 3.8 refuses a
    /// `clientPortAddress` without a `clientPort`).
    pub(crate) fn common_config(&self) -> Result<String> {
        let tick = self.tick_ms()?;
        let limits = self.session_limits()?;
        Ok(format!(
            "tickTime={tick}\n\
             {}\n\
             {}\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=*\n\
             maxClientCnxns=0\n",
            limits.min_line(),
            limits.max_line()
        ))
    }
}

/// A server's `minSessionTimeout` and `maxSessionTimeout`, in the milliseconds `zoo.cfg` takes:
/// the server raises a shorter requested session timeout to `min` and lowers a longer one to
/// `max`, at every connect (so a session that reconnects to another server is held to that
/// server's limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionLimits {
    min_ms: i32,
    max_ms: i32,
}

impl SessionLimits {
    /// Validates a pair of limits: each between 1 ms and `i32::MAX` ms (ZooKeeper reads them as
    /// `int`; sub-millisecond parts are dropped), and `min <= max` (ZooKeeper refuses to start
    /// otherwise).
    pub(crate) fn new(min: Duration, max: Duration) -> Result<SessionLimits> {
        let min_ms = millis("min session timeout", min)?;
        let max_ms = millis("max session timeout", max)?;
        if min_ms > max_ms {
            return Err(HarnessError::InvalidArgument {
                what: "session timeouts",
                reason: format!("min {min:?} is above max {max:?}"),
            });
        }
        Ok(SessionLimits { min_ms, max_ms })
    }

    /// The limits as the server has them (whole milliseconds).
    pub(crate) fn durations(self) -> (Duration, Duration) {
        let ms = |v: i32| Duration::from_millis(u64::from(v.unsigned_abs()));
        (ms(self.min_ms), ms(self.max_ms))
    }

    pub(crate) fn min_line(self) -> String {
        format!("minSessionTimeout={}", self.min_ms)
    }

    pub(crate) fn max_line(self) -> String {
        format!("maxSessionTimeout={}", self.max_ms)
    }

    /// `config` (a `zoo.cfg`) with its `minSessionTimeout=` and `maxSessionTimeout=` lines set
    /// to these limits, in place, and every other line kept as it is (ZooKeeper may have
    /// rewritten the file since the harness wrote it). A missing line is appended; a repeated
    /// one is written once, where it first was.
    pub(crate) fn apply_to(self, config: &str) -> String {
        let (mut min_done, mut max_done) = (false, false);
        let mut out = String::with_capacity(config.len() + 64);
        for line in config.lines() {
            let key = line.split_once('=').map(|(k, _)| k.trim());
            let replaced = match key {
                Some("minSessionTimeout") if !min_done => {
                    min_done = true;
                    Some(self.min_line())
                }
                Some("maxSessionTimeout") if !max_done => {
                    max_done = true;
                    Some(self.max_line())
                }
                Some("minSessionTimeout" | "maxSessionTimeout") => continue,
                _ => None,
            };
            out.push_str(replaced.as_deref().unwrap_or(line));
            out.push('\n');
        }
        for (done, line) in [(min_done, self.min_line()), (max_done, self.max_line())] {
            if !done {
                out.push_str(&line);
                out.push('\n');
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(min_ms: u64, max_ms: u64) -> SessionLimits {
        SessionLimits::new(Duration::from_millis(min_ms), Duration::from_millis(max_ms))
            .expect("valid limits")
    }

    #[test]
    fn session_limits_replace_their_lines_and_keep_every_other() {
        let config = "tickTime=200\nminSessionTimeout=400\nmaxSessionTimeout=60000\n\
                      # a comment\nserver.1=127.0.0.1:1:2\ndynamicConfigFile=/x/zoo.cfg.dynamic\n";
        assert_eq!(
            limits(400, 2000).apply_to(config),
            "tickTime=200\nminSessionTimeout=400\nmaxSessionTimeout=2000\n\
             # a comment\nserver.1=127.0.0.1:1:2\ndynamicConfigFile=/x/zoo.cfg.dynamic\n"
        );
    }

    #[test]
    fn missing_session_limit_lines_are_appended_and_repeated_ones_written_once() {
        assert_eq!(
            limits(500, 4000).apply_to("tickTime=200"),
            "tickTime=200\nminSessionTimeout=500\nmaxSessionTimeout=4000\n"
        );
        assert_eq!(
            limits(500, 4000).apply_to(
                "maxSessionTimeout=1\ntickTime=200\nmaxSessionTimeout = 2\nminSessionTimeout=3\n"
            ),
            "maxSessionTimeout=4000\ntickTime=200\nminSessionTimeout=500\n"
        );
    }

    #[test]
    fn session_limits_reject_zero_and_min_above_max() {
        let err = |min, max| SessionLimits::new(min, max).expect_err("rejected");
        let s = Duration::from_secs;
        assert!(matches!(
            err(Duration::ZERO, s(1)),
            HarnessError::InvalidArgument {
                what: "min session timeout",
                ..
            }
        ));
        assert!(matches!(
            err(s(1), Duration::ZERO),
            HarnessError::InvalidArgument {
                what: "max session timeout",
                ..
            }
        ));
        assert!(matches!(
            err(s(5), s(4)),
            HarnessError::InvalidArgument {
                what: "session timeouts",
                ..
            }
        ));
        assert_eq!(
            limits(400, 4000).durations(),
            (Duration::from_millis(400), s(4))
        );
        assert_eq!(
            SessionLimits::new(Duration::from_micros(1500), s(2))
                .expect("valid")
                .durations(),
            (Duration::from_millis(1), s(2))
        );
    }
}
