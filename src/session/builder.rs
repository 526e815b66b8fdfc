//! Building a session: [`SessionBuilder`] holds the settings and their defaults, `validate`
//! checks them into the [`Config`] the session runs with, and `start` spawns its supervisor.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use super::lease::{self, assumed_tick, grace_limit};
use super::supervise::supervise;
use super::{Session, SessionStatus, Shared, StopOnDrop};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::path::{self, ConnectString, Transport};

/// [`Session::DEFAULT_SESSION_TIMEOUT`].
pub(crate) const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(60);
/// [`Session::DEFAULT_CONNECTION_TIMEOUT`].
pub(crate) const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(15);
/// [`Session::DEFAULT_JUTE_MAX_BUFFER`].
pub(crate) const DEFAULT_JUTE_MAX_BUFFER: usize = 0xfffff;

/// Builds a [`Session`].
///
/// # Examples
/// ```no_run
/// # async fn demo() -> zookeeper_recipes::Result<()> {
/// use std::time::Duration;
/// use zookeeper_recipes::Session;
///
/// let session = Session::builder("127.0.0.1:2181/services")
///     .session_timeout(Duration::from_secs(10))
///     .connection_timeout(Duration::from_secs(5))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `start` or `connect` is called"]
pub struct SessionBuilder {
    connect: String,
    chroot: Option<String>,
    chroot_acl: Option<crate::NodeAcl>,
    chroot_must_exist: bool,
    session_timeout: Duration,
    connection_timeout: Duration,
    digest: Option<Digest>,
    sasl: Option<Digest>,
    #[cfg(feature = "tls")]
    tls: Option<super::tls::TlsConfig>,
    read_only: bool,
    lease_margin: Option<Duration>,
    server_tick_time: Option<Duration>,
    session_timeout_floor: Option<Duration>,
    jute_max_buffer: usize,
    clock: Clock,
}

impl SessionBuilder {
    /// A builder with every setting at its default.
    pub(super) fn new(connect: String) -> Self {
        SessionBuilder {
            connect,
            chroot: None,
            chroot_acl: None,
            chroot_must_exist: false,
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            connection_timeout: DEFAULT_CONNECTION_TIMEOUT,
            digest: None,
            sasl: None,
            #[cfg(feature = "tls")]
            tls: None,
            read_only: false,
            lease_margin: None,
            server_tick_time: None,
            session_timeout_floor: None,
            jute_max_buffer: DEFAULT_JUTE_MAX_BUFFER,
            clock: Clock::system(),
        }
    }

    /// The session timeout to ask the server for (default 60 s, Curator's). The server clamps it
    /// to its `[minSessionTimeout, maxSessionTimeout]`; the negotiated value is what counts.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long [`connect`](Self::connect) waits for the first session (default 15 s).
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// A chroot (Curator's namespace) for every path; it is created (with its missing ancestors)
    /// if missing, with the [`chroot_acl`](Self::chroot_acl), unless the chroot
    /// [must exist](Self::chroot_must_exist). One that cannot be created (no permission, an
    /// ephemeral node in its way) means no session: [`connect`](Self::connect) returns
    /// [`Error::Refused`]. The connect string may carry one instead (`host:2181/app`), not both.
    pub fn chroot(mut self, chroot: impl Into<String>) -> Self {
        self.chroot = Some(chroot.into());
        self
    }

    /// The ACL of the chroot, and of each of its missing ancestors, when the session creates
    /// them (a chroot that exists keeps its ACL). Default: as every recipe's
    /// ([`Session::default_acl`]): the creator's identity and read for anyone when the session
    /// has an identity ([`digest_auth`](Self::digest_auth), `sasl_digest`, or a TLS client
    /// certificate), else open to anyone ([`NodeAcl::anyone_all`](crate::NodeAcl::anyone_all)),
    /// as Curator. Give `NodeAcl::anyone_all()` for a chroot that services with other
    /// identities must share: they need CREATE on it.
    ///
    /// A creator ACL without an identity is [`Error::InvalidArgument`] when the session is
    /// built (the server would refuse it).
    ///
    /// # Curator
    /// Curator creates its namespace with the framework's `aclProvider`'s ACL for that path
    /// (open by default).
    pub fn chroot_acl(mut self, acl: impl Into<crate::NodeAcl>) -> Self {
        self.chroot_acl = Some(acl.into());
        self
    }

    /// The chroot must have been provisioned by an operator (with the ACL they chose): the
    /// session never creates it, and [`connect`](Self::connect) fails with
    /// [`Error::NoChroot`] naming it while it does not exist (it keeps looking, within the
    /// connection timeout, so a chroot being provisioned meanwhile is found). Without a chroot
    /// this does nothing.
    pub fn chroot_must_exist(mut self) -> Self {
        self.chroot_must_exist = true;
        self
    }

    /// Authenticates with ZooKeeper's `digest` scheme as `user:password`.
    ///
    /// Checked when the session is built (before anything connects): an empty user, a user
    /// holding `:`, or an empty password is [`Error::InvalidArgument`] (`digest user`, `digest
    /// password`; the message never holds the password). ZooKeeper itself would accept an
    /// empty password, and every client configured without one would share one identity.
    pub fn digest_auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.digest = Some(Digest {
            user: user.into(),
            password: password.into(),
        });
        self
    }

    /// Connects to the servers over TLS, trusting the CA bundle of `config` and presenting its
    /// client certificate, if it has one (crate feature `tls`).
    ///
    /// Hosts written without a scheme (`zk1:2281`) are then dialled over TLS, as the Java
    /// client's `zookeeper.client.secure=true` does; `tcp+tls://zk1:2281` says so per host. A
    /// connect string that mixes `tcp+tls://` hosts with plaintext ones (`tcp://`, or none) is
    /// refused ([`Error::InvalidConnectString`]): the session and its credentials would cross
    /// the network in clear text whenever it landed on a plaintext server. So is an explicit
    /// `tcp://` host with this setting, and a `tcp+tls://` host without it.
    ///
    /// The files are read and checked when the session is built ([`Error::InvalidTls`]; see
    /// [`TlsConfig`](crate::TlsConfig)). A session with TLS connects its client straight to the
    /// servers.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls(mut self, config: crate::TlsConfig) -> Self {
        self.tls = Some(config);
        self
    }

    /// Logs in with SASL DIGEST-MD5 as `user` (crate feature `sasl-digest-md5`): the servers
    /// check the password against their JAAS `Server` section, and the session's identity is
    /// `sasl:<user>`, which [`NodeAcl::creator_all`](crate::NodeAcl::creator_all) names. Unlike
    /// [`digest_auth`](Self::digest_auth), the password never crosses the network.
    ///
    /// Checked when the session is built: an empty user or password is
    /// [`Error::InvalidArgument`] (`SASL user`, `SASL password`; the message never holds the
    /// password). A password the servers refuse is [`Error::AuthFailed`] from
    /// [`connect`](Self::connect). A session with SASL connects its client straight to the
    /// servers.
    #[cfg(feature = "sasl-digest-md5")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sasl-digest-md5")))]
    pub fn sasl_digest(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.sasl = Some(Digest {
            user: user.into(),
            password: password.into(),
        });
        self
    }

    /// Accept read-only servers (Curator's `canBeReadOnly`); default `false`.
    ///
    /// A client that starts on a read-only server opens a brand-new ZooKeeper session when it
    /// reaches a writable one; the session reports that as `Lost` then a new session. Note that
    /// zookeeper-client 0.11 could not establish a session on a ZooKeeper 3.8 read-only server
    /// in our tests (it cannot parse the server's answer), so with those parts this setting
    /// only keeps connection attempts to such a server failing.
    pub fn can_be_read_only(mut self, allowed: bool) -> Self {
        self.read_only = allowed;
        self
    }

    /// How much earlier than the server could expire the session this process stops trusting it
    /// (default 1/20 of the negotiated timeout, at least 10 ms).
    pub fn lease_margin(mut self, margin: Duration) -> Self {
        self.lease_margin = Some(margin);
        self
    }

    /// The servers' `tickTime` (default: ZooKeeper's default of 2 s, but at most a third of the
    /// negotiated session timeout; a `warn!` at connect says when it is assumed).
    ///
    /// In an ensemble only the quorum leader expires sessions, and a follower passes the sessions
    /// it has heard from to the leader only in its replies to the leader's pings, every half
    /// tick. So the session can prove a heartbeat reached the quorum only about a tick and a
    /// half after sending it, and its deadline ([`Session::safe_until`]) trails the timeout by
    /// that much (see the deadline section of `recipes/leader-latch.md`). Set this when the
    /// servers run a tick larger than the default assumes; a larger value is always safe, a
    /// smaller one than the servers' is not. A session timeout shorter than about four ticks
    /// leaves too little room, and the session is lost at every hiccup (a warning says so).
    pub fn server_tick_time(mut self, tick: Duration) -> Self {
        self.server_tick_time = Some(tick);
        self
    }

    /// The lowest session timeout any server of the ensemble may give this session while the
    /// process runs: the lowest `maxSessionTimeout` among them, including one a rolling change
    /// is about to set (default: none declared).
    ///
    /// Every reconnect renegotiates the timeout with the server it reaches, which clamps the
    /// request to its own `[minSessionTimeout, maxSessionTimeout]`, and from then on the quorum
    /// leader may expire the session one *new* timeout after its last touch. zookeeper-client
    /// 0.11 does not report what its own reconnects negotiate, so the lease
    /// ([`Session::safe_until`]) counts with the lowest of this floor, the timeout the session
    /// was created with, and what each new client of the session negotiated. Without a floor, a
    /// reconnect to a server whose `maxSessionTimeout` is below the negotiated timeout leaves
    /// the lease longer than the quorum keeps the session: declare one whenever the servers'
    /// limits differ or may change. A lower floor is always safe, and shortens the lease, the
    /// heartbeat interval and the [`grace_limit`](Self::grace_limit) accordingly. See
    /// `docs/decisions/0001-no-relay.md`.
    ///
    /// # Curator
    /// No equivalent: Curator reads the negotiated timeout off ZooKeeper's Java client, and its
    /// simulated expiration uses that value.
    pub fn session_timeout_floor(mut self, floor: Duration) -> Self {
        self.session_timeout_floor = Some(floor);
        self
    }

    /// The largest request the servers accept, in bytes: their `jute.maxbuffer` (default
    /// [`Session::DEFAULT_JUTE_MAX_BUFFER`], 1 MiB - 1). A server closes the *connection* of a client that
    /// sends a bigger packet, which suspends the session and, under the Standard policy, ends
    /// every term on it; so a fenced write ([`Leadership::fenced`](crate::Leadership::fenced))
    /// bigger than this is refused before it is sent ([`Error::RequestTooLarge`]). Set it to the
    /// servers' value if they run with a larger one.
    pub fn jute_max_buffer(mut self, bytes: usize) -> Self {
        self.jute_max_buffer = bytes;
        self
    }

    /// The clock the session's lease, and every term won on it, read (default
    /// [`Clock::system`]). Tests pass a [`TestClock`](crate::clock::TestClock)'s to suspend,
    /// freeze or step it.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// [`Session::default_grace`] for a session built this way, with the requested timeout.
    pub fn default_grace(&self) -> Duration {
        lease::default_grace(self.grace_limit())
    }

    /// [`Session::grace_limit`] for a session built this way, with the requested timeout, or
    /// the [`session_timeout_floor`](Self::session_timeout_floor) when lower (the servers may
    /// negotiate a shorter one).
    pub fn grace_limit(&self) -> Duration {
        let timeout = self
            .session_timeout_floor
            .map_or(self.session_timeout, |f| f.min(self.session_timeout));
        let margin = self
            .lease_margin
            .unwrap_or_else(|| lease::default_margin(timeout));
        grace_limit(
            timeout,
            assumed_tick(self.server_tick_time, timeout),
            margin,
        )
    }

    fn validate(self) -> Result<Config> {
        let parsed = ConnectString::parse(&self.connect)?;
        #[cfg(feature = "tls")]
        let tls_configured = self.tls.is_some();
        #[cfg(not(feature = "tls"))]
        let tls_configured = false;
        let refuse = |reason: &str| {
            Err(Error::InvalidConnectString {
                connect: self.connect.clone(),
                reason: reason.to_owned(),
            })
        };
        match (parsed.transport, tls_configured) {
            (Transport::Tls, false) if cfg!(feature = "tls") => {
                return refuse(
                    "tcp+tls:// servers need a TLS configuration (SessionBuilder::tls: the CA that signs their certificates)",
                );
            }
            (Transport::Tls, false) => {
                return refuse("tcp+tls:// servers need the crate feature `tls`");
            }
            (Transport::Plain, true) => {
                return refuse(
                    "a tcp:// server with a TLS configuration: the session would go to it in clear text (leave the scheme out, or write tcp+tls://)",
                );
            }
            _ => {}
        }
        #[cfg(feature = "tls")]
        let tls = match &self.tls {
            Some(config) => {
                for host in &parsed.hosts {
                    super::tls::check_host(host).map_err(|reason| Error::InvalidConnectString {
                        connect: self.connect.clone(),
                        reason,
                    })?;
                }
                Some(Arc::new(config.load()?))
            }
            None => None,
        };
        let chroot = match (parsed.chroot.clone(), self.chroot) {
            (Some(_), Some(_)) => {
                return Err(Error::InvalidConnectString {
                    connect: self.connect,
                    reason: "a chroot is given both in the connect string and by `chroot()`".into(),
                });
            }
            (Some(c), None) => Some(c),
            (None, Some(c)) => {
                path::validate_chroot(&c)?;
                (c != "/").then_some(c)
            }
            (None, None) => None,
        };
        if self.session_timeout.is_zero() {
            return Err(Error::InvalidArgument {
                what: "session timeout",
                reason: "must be greater than zero".into(),
            });
        }
        if self.connection_timeout.is_zero() {
            return Err(Error::InvalidArgument {
                what: "connection timeout",
                reason: "must be greater than zero".into(),
            });
        }
        if let Some(Digest { user, .. }) = &self.digest
            && (user.is_empty() || user.contains(':'))
        {
            return Err(Error::InvalidArgument {
                what: "digest user",
                reason: "must be non-empty and must not contain ':'".into(),
            });
        }
        if self.digest.as_ref().is_some_and(|d| d.password.is_empty()) {
            return Err(Error::InvalidArgument {
                what: "digest password",
                reason: "must be non-empty".into(),
            });
        }
        if let Some(Digest { user, password }) = &self.sasl {
            if user.is_empty() {
                return Err(Error::InvalidArgument {
                    what: "SASL user",
                    reason: "must be non-empty".into(),
                });
            }
            if password.is_empty() {
                return Err(Error::InvalidArgument {
                    what: "SASL password",
                    reason: "must be non-empty".into(),
                });
            }
        }
        if self.server_tick_time.is_some_and(|t| t.is_zero()) {
            return Err(Error::InvalidArgument {
                what: "server tick time",
                reason: "must be greater than zero".into(),
            });
        }
        if self.session_timeout_floor.is_some_and(|t| t.is_zero()) {
            return Err(Error::InvalidArgument {
                what: "session timeout floor",
                reason: "must be greater than zero".into(),
            });
        }
        if self.jute_max_buffer == 0 {
            return Err(Error::InvalidArgument {
                what: "jute.maxbuffer",
                reason: "must be greater than zero".into(),
            });
        }
        let mut config = Config {
            hosts: parsed.hosts_joined(),
            chroot,
            chroot_acl: crate::NodeAcl::anyone_all(),
            chroot_must_exist: self.chroot_must_exist,
            session_timeout: self.session_timeout,
            connection_timeout: self.connection_timeout,
            digest: self.digest,
            sasl: self.sasl,
            #[cfg(feature = "tls")]
            tls,
            read_only: self.read_only,
            lease_margin: self.lease_margin,
            server_tick_time: self.server_tick_time,
            session_timeout_floor: self.session_timeout_floor,
            jute_max_buffer: self.jute_max_buffer,
            clock: self.clock,
        };
        let has_identity = config.has_identity();
        config.chroot_acl = match self.chroot_acl {
            Some(acl) if acl.needs_credentials() && !has_identity => {
                return Err(Error::InvalidArgument {
                    what: "chroot ACL",
                    reason: "a creator ACL (scheme `auth`) needs a session with an identity \
                             (digest_auth, sasl_digest, or a TLS client certificate)"
                        .into(),
                });
            }
            Some(acl) => acl,
            None => crate::NodeAcl::default_for(has_identity),
        };
        Ok(config)
    }

    /// Validates the settings and starts the session in the background; returns at once.
    ///
    /// The first state change is `Connected` once a server answers.
    ///
    /// # Errors
    /// [`Error::InvalidConnectString`], [`Error::InvalidPath`] (relative chroot),
    /// [`Error::InvalidArgument`] (zero timeout, bad digest user, a creator
    /// [`chroot_acl`](Self::chroot_acl) without an identity), [`Error::InvalidTls`] (a TLS
    /// file that is missing, not PEM, or a key that does not match or is open to others),
    /// [`Error::NoRuntime`] outside a tokio runtime.
    pub fn start(self) -> Result<Session> {
        let config = self.validate()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let (status_tx, _) = watch::channel(SessionStatus::initial());
        let (events_tx, _) = broadcast::channel(64);
        let shared = Arc::new(Shared {
            config,
            status_tx,
            events_tx,
            current: RwLock::new(None),
            stop: CancellationToken::new(),
            supervisor: Mutex::new(None),
            refusal: Mutex::new(None),
            tick_warned: AtomicBool::new(false),
            demand: Default::default(),
        });
        let task = runtime.spawn(supervise(Arc::clone(&shared)));
        if let Ok(mut slot) = shared.supervisor.lock() {
            *slot = Some(task);
        }
        let closer = Arc::new(StopOnDrop(shared.stop.clone()));
        Ok(Session {
            shared,
            _closer: closer,
        })
    }

    /// Starts the session and waits until the first ZooKeeper session is established, at most
    /// the connection timeout.
    ///
    /// # Errors
    /// As [`start`](Self::start), and when no session was established within the connection
    /// timeout (the session is then closed), why: [`Error::Unreachable`] when no host could be
    /// reached (its message says `connection refused` when nothing listens),
    /// [`Error::TlsHandshake`] when a server took the connection but the TLS handshake failed
    /// (its message says why: unknown CA, expired or wrong-host certificate, a client
    /// certificate required), [`Error::Refused`]
    /// (the chroot does not exist and cannot be created: no permission, or an ephemeral node in
    /// its way), [`Error::NoChroot`] (the chroot does not exist and
    /// [must](Self::chroot_must_exist)) or [`Error::AuthFailed`] when the servers answered but refused what a session
    /// needs, else [`Error::Timeout`]. Within the connection timeout it retries with a bounded
    /// backoff (at most a second between rounds of the hosts), logging each failed attempt at
    /// `warn` at once, so a server that is still starting is waited for.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops the session, which stops connecting.
    pub async fn connect(self) -> Result<Session> {
        let timeout = self.connection_timeout;
        let session = self.start()?;
        match session.wait_connected(timeout).await {
            Ok(()) => Ok(session),
            Err(Error::Timeout(t)) => {
                let refusal = session.shared.refusal.lock().ok().and_then(|r| r.clone());
                Err(refusal.unwrap_or(Error::Timeout(t)))
            }
            Err(e) => Err(e),
        }
    }
}

/// Credentials of ZooKeeper's `digest` scheme. `Debug` shows the user, never the password: a
/// builder or a session's settings printed in a log must not carry it.
#[derive(Clone)]
pub(super) struct Digest {
    pub(super) user: String,
    pub(super) password: String,
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Digest")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

#[derive(Debug)]
pub(super) struct Config {
    pub(super) hosts: String,
    pub(super) chroot: Option<String>,
    /// The ACL of the chroot and its missing ancestors when the session creates them.
    pub(super) chroot_acl: crate::NodeAcl,
    /// Never create the chroot: no session while it is missing.
    pub(super) chroot_must_exist: bool,
    pub(super) session_timeout: Duration,
    pub(super) connection_timeout: Duration,
    pub(super) digest: Option<Digest>,
    /// SASL DIGEST-MD5 credentials (set only with the `sasl-digest-md5` feature).
    pub(super) sasl: Option<Digest>,
    /// The checked TLS material; `Some` means every host is dialled over TLS.
    #[cfg(feature = "tls")]
    pub(super) tls: Option<Arc<super::tls::TlsMaterial>>,
    pub(super) read_only: bool,
    pub(super) lease_margin: Option<Duration>,
    pub(super) server_tick_time: Option<Duration>,
    pub(super) session_timeout_floor: Option<Duration>,
    pub(super) jute_max_buffer: usize,
    pub(super) clock: Clock,
}

impl Config {
    /// Whether the session has an identity a creator ACL can name: digest credentials, a SASL
    /// login, or a client certificate.
    pub(super) fn has_identity(&self) -> bool {
        #[cfg(feature = "tls")]
        let certificate = self.tls.as_ref().is_some_and(|t| t.has_identity());
        #[cfg(not(feature = "tls"))]
        let certificate = false;
        self.digest.is_some() || self.sasl.is_some() || certificate
    }

    /// The hosts as the client dials them when it connects straight to the servers: each
    /// `tcp+tls://` with TLS.
    pub(super) fn servers(&self) -> String {
        #[cfg(feature = "tls")]
        if self.tls.is_some() {
            return self
                .hosts
                .split(',')
                .map(|h| format!("tcp+tls://{h}"))
                .collect::<Vec<_>>()
                .join(",");
        }
        self.hosts.clone()
    }

    /// The requested timeout, or the declared floor when lower: what the lease counts with
    /// before a session is negotiated.
    pub(super) fn lowest_timeout(&self) -> Duration {
        self.session_timeout_floor
            .map_or(self.session_timeout, |f| f.min(self.session_timeout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_builder_printed_for_a_log_shows_the_digest_user_but_never_the_password() {
        let builder = Session::builder("a:1").digest_auth("app", "s3cret-pw");
        let printed = format!("{builder:?}");
        assert!(printed.contains("app"), "{printed}");
        assert!(!printed.contains("s3cret-pw"), "{printed}");
    }

    #[test]
    fn bad_settings_are_rejected_before_connecting() {
        let bad = |b: SessionBuilder| b.validate().err();
        assert!(matches!(
            bad(Session::builder("")),
            Some(Error::InvalidConnectString { .. })
        ));
        assert!(matches!(
            bad(Session::builder("a:1,,b:2")),
            Some(Error::InvalidConnectString { .. })
        ));
        assert!(matches!(
            bad(Session::builder("a:1").session_timeout(Duration::ZERO)),
            Some(Error::InvalidArgument {
                what: "session timeout",
                ..
            })
        ));
        assert!(matches!(
            bad(Session::builder("a:1").connection_timeout(Duration::ZERO)),
            Some(Error::InvalidArgument {
                what: "connection timeout",
                ..
            })
        ));
        assert!(matches!(
            bad(Session::builder("a:1").chroot("app")),
            Some(Error::InvalidPath { .. })
        ));
        assert!(matches!(
            bad(Session::builder("a:1/x").chroot("/y")),
            Some(Error::InvalidConnectString { .. })
        ));
        assert!(matches!(
            bad(Session::builder("a:1").digest_auth("", "p")),
            Some(Error::InvalidArgument {
                what: "digest user",
                ..
            })
        ));
        assert!(matches!(
            bad(Session::builder("a:1").server_tick_time(Duration::ZERO)),
            Some(Error::InvalidArgument {
                what: "server tick time",
                ..
            })
        ));
        assert!(matches!(
            bad(Session::builder("a:1").session_timeout_floor(Duration::ZERO)),
            Some(Error::InvalidArgument {
                what: "session timeout floor",
                ..
            })
        ));
        let ok = Session::builder("a:1").chroot("/app").validate().unwrap();
        assert_eq!(ok.chroot.as_deref(), Some("/app"));
    }

    #[test]
    fn a_digest_with_an_empty_user_or_password_is_refused_at_build() {
        let refused = |user: &str, password: &str| match Session::builder("a:1")
            .digest_auth(user, password)
            .validate()
        {
            Err(Error::InvalidArgument { what, reason }) => {
                assert!(!reason.contains("s3cret"), "{reason} echoes the password");
                Some(what)
            }
            Err(e) => panic!("digest {user:?}: {e}"),
            Ok(_) => None,
        };
        assert_eq!(refused("", "s3cret"), Some("digest user"));
        assert_eq!(refused("app", ""), Some("digest password"));
        assert_eq!(refused("", ""), Some("digest user"));
        assert_eq!(refused("app", "s3cret"), None);
    }

    #[test]
    fn a_sasl_login_is_checked_at_build_and_never_printed() {
        let builder = Session::builder("a:1").sasl_digest("alice", "s3cret-pw");
        let printed = format!("{builder:?}");
        assert!(printed.contains("alice"), "{printed}");
        assert!(!printed.contains("s3cret-pw"), "{printed}");
        let config = builder.validate().unwrap();
        assert!(config.has_identity());
        assert_eq!(config.servers(), "a:1");
        for (user, password, what) in [("", "pw", "SASL user"), ("alice", "", "SASL password")] {
            match Session::builder("a:1")
                .sasl_digest(user, password)
                .validate()
            {
                Err(Error::InvalidArgument { what: w, reason }) => {
                    assert_eq!(w, what);
                    assert!(!reason.contains("pw"), "{reason}");
                }
                other => panic!("{user:?}/{password:?}: {other:?}"),
            }
        }
        let plain = Session::builder("a:1").validate().unwrap();
        assert!(!plain.has_identity());
    }

    #[test]
    fn a_tls_host_name_that_tls_cannot_verify_is_refused_before_connecting() {
        let pem = "-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n";
        match Session::builder("tcp+tls://bad_name!:1")
            .tls(crate::TlsConfig::ca_pem(pem))
            .validate()
        {
            Err(Error::InvalidConnectString { reason, .. }) => {
                assert!(
                    reason.contains("not a host name TLS can verify"),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_chroot_acl_follows_the_identity_unless_given_and_a_creator_one_needs_an_identity() {
        let open = Session::builder("a:1/app").validate().unwrap();
        assert_eq!(open.chroot_acl, crate::NodeAcl::anyone_all());
        assert!(!open.chroot_must_exist);
        let closed = Session::builder("a:1/app")
            .digest_auth("app", "s3cret")
            .validate()
            .unwrap();
        assert_eq!(closed.chroot_acl, crate::NodeAcl::creator_all_anyone_read());
        let told = Session::builder("a:1/app")
            .digest_auth("app", "s3cret")
            .chroot_acl(crate::NodeAcl::anyone_all())
            .chroot_must_exist()
            .validate()
            .unwrap();
        assert_eq!(told.chroot_acl, crate::NodeAcl::anyone_all());
        assert!(told.chroot_must_exist);
        assert!(matches!(
            Session::builder("a:1/app")
                .chroot_acl(crate::NodeAcl::creator_all())
                .validate(),
            Err(Error::InvalidArgument {
                what: "chroot ACL",
                ..
            })
        ));
    }

    #[test]
    fn start_outside_a_runtime_is_a_typed_error() {
        assert!(matches!(
            Session::builder("127.0.0.1:1").start(),
            Err(Error::NoRuntime)
        ));
    }
}
