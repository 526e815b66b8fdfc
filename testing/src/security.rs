//! How a harness server is secured: TLS on a `secureClientPort` only, the x509 authentication
//! provider, SASL DIGEST-MD5 (a JAAS `Server` section written by the harness), and whether
//! clients must authenticate. [`Security`] is the request; [`Secured`] what it made in a
//! server's directory: `zoo.cfg` lines, JVM flags, and the certificates.
//!
//! What ZooKeeper 3.8 needs, read in its 3.8.0 jar (`NettyServerCnxnFactory$CertificateVerifier`,
//! `AuthenticationHelper`, `ProviderRegistry`) and checked by this crate's `tests/security.rs`:
//! - TLS needs `serverCnxnFactory=...NettyServerCnxnFactory` and `secureClientPort`; the
//!   harness then writes no `clientPort` and no `clientPortAddress` (3.8 refuses a
//!   `clientPortAddress` without a `clientPort`) but `secureClientPortAddress=127.0.0.1`.
//! - Keys of `zoo.cfg` that ZooKeeper does not know become Java system properties with a
//!   `zookeeper.` prefix: that is how `ssl.*`, `authProvider.*` and `enforce.auth.*` reach the
//!   code that reads them.
//! - With `ssl.clientAuth` `want` or `need`, every handshake that carries a certificate is
//!   passed to the provider named by `ssl.authProvider` (default `x509`); without
//!   `authProvider.x509` the server logs "X509 Auth provider not found" and closes the
//!   connection. So [`Security::x509_auth`] is on whenever client certificates are asked for.
//! - SASL needs `-Djava.security.auth.login.config=<jaas file>` with a `Server` section
//!   (`DigestLoginModule`, one `user_<name>="<password>"` per user) and
//!   `authProvider.sasl=...SASLAuthenticationProvider` (without it a `sasl:` ACL matches no
//!   one). Clients are still let in without SASL unless `enforce.auth.enabled=true` with
//!   `enforce.auth.schemes=sasl` (3.8's form of the older `sessionRequireClientSASLAuth`).

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use super::tls::{ClientAuth, ServerCertificate, ServerTls};
use super::{HarnessError, Result};

/// The factory TLS needs (the default NIO one has no TLS).
const NETTY_FACTORY: &str = "org.apache.zookeeper.server.NettyServerCnxnFactory";
const X509_PROVIDER: &str = "org.apache.zookeeper.server.auth.X509AuthenticationProvider";
const SASL_PROVIDER: &str = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider";
const DIGEST_LOGIN_MODULE: &str = "org.apache.zookeeper.server.auth.DigestLoginModule";

/// The TLS part of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TlsRequest {
    pub(crate) client_auth: ClientAuth,
    pub(crate) server_certificate: ServerCertificate,
}

/// How a server is to be secured (all off by default: a plaintext server, as before).
#[derive(Clone, Default)]
pub(crate) struct Security {
    pub(crate) tls: Option<TlsRequest>,
    pub(crate) x509_auth: bool,
    /// SASL DIGEST-MD5 users and passwords (the JAAS `Server` section); empty for no SASL.
    pub(crate) sasl_users: Vec<(String, String)>,
    pub(crate) sasl_required: bool,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let users: Vec<&str> = self.sasl_users.iter().map(|(u, _)| u.as_str()).collect();
        f.debug_struct("Security")
            .field("tls", &self.tls)
            .field("x509_auth", &self.x509_auth)
            .field("sasl_users", &users)
            .field("sasl_required", &self.sasl_required)
            .finish()
    }
}

/// What [`Security::apply`] made for one server.
pub(crate) struct Secured {
    /// `zoo.cfg` lines beyond the common ones, including the client port line.
    pub(crate) config: String,
    /// Java flags (`-D...`).
    pub(crate) jvm_flags: Vec<String>,
    pub(crate) tls: Option<Arc<ServerTls>>,
    /// The TLS client of the harness's own four-letter words, for a TLS-only server.
    pub(crate) probe: Option<Arc<rustls::ClientConfig>>,
}

/// What [`Security::prepare`] wrote, before a client port is chosen.
#[derive(Clone)]
pub(crate) struct Prepared {
    /// `zoo.cfg` lines beyond the common ones, without the client port's.
    pub(crate) config: String,
    pub(crate) jvm_flags: Vec<String>,
    pub(crate) tls: Option<Arc<ServerTls>>,
    pub(crate) probe: Option<Arc<rustls::ClientConfig>>,
}

impl Prepared {
    /// Whether clients reach the server over TLS only.
    pub(crate) fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The client port's `zoo.cfg` lines: `clientPort` and `clientPortAddress`, or for TLS
    /// only `secureClientPort` and `secureClientPortAddress`.
    pub(crate) fn port_lines(&self, port: u16) -> String {
        if self.is_tls() {
            format!("secureClientPort={port}\nsecureClientPortAddress=127.0.0.1\n")
        } else {
            format!("clientPort={port}\nclientPortAddress=127.0.0.1\n")
        }
    }

    /// Everything for a server on `port`.
    pub(crate) fn for_port(self, port: u16) -> Secured {
        Secured {
            config: format!("{}{}", self.port_lines(port), self.config),
            jvm_flags: self.jvm_flags,
            tls: self.tls,
            probe: self.probe,
        }
    }
}

impl Security {
    /// TLS only, with `client_auth`, keeping a server certificate chosen before.
    pub(crate) fn set_tls(&mut self, client_auth: ClientAuth) {
        let server_certificate = self
            .tls
            .map_or(ServerCertificate::Valid, |t| t.server_certificate);
        self.tls = Some(TlsRequest {
            client_auth,
            server_certificate,
        });
    }

    /// The certificate a TLS server presents; TLS with [`ClientAuth::Need`] unless chosen.
    pub(crate) fn set_server_certificate(&mut self, server_certificate: ServerCertificate) {
        let client_auth = self.tls.map_or(ClientAuth::Need, |t| t.client_auth);
        self.tls = Some(TlsRequest {
            client_auth,
            server_certificate,
        });
    }

    pub(crate) fn validate(&self) -> Result<()> {
        for (user, password) in &self.sasl_users {
            let bad = |reason: &str| HarnessError::InvalidArgument {
                what: "SASL user",
                reason: format!("{user:?}: {reason}"),
            };
            if user.is_empty()
                || !user
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(bad(
                    "a user name is ASCII letters, digits, `-`, `_` and `.`",
                ));
            }
            if password
                .chars()
                .any(|c| c == '"' || c == '\\' || c.is_control())
            {
                return Err(bad(
                    "a password may not hold `\"`, `\\` or control characters",
                ));
            }
        }
        if self.sasl_required && self.sasl_users.is_empty() {
            return Err(HarnessError::InvalidArgument {
                what: "SASL",
                reason: "sasl_required needs at least one sasl_user".to_owned(),
            });
        }
        Ok(())
    }

    /// Whether nothing is asked for: a plaintext server without authentication providers.
    #[cfg(feature = "docker")]
    pub(crate) fn is_plain(&self) -> bool {
        self.tls.is_none() && !self.x509_auth && self.sasl_users.is_empty()
    }

    /// Writes the certificates and the JAAS file into `dir` (the server's directory) and
    /// returns the `zoo.cfg` lines, the client port's among them, and the JVM flags.
    pub(crate) fn apply(&self, dir: &Path, port: u16) -> Result<Secured> {
        Ok(self.prepare(dir)?.for_port(port))
    }

    /// Writes the certificates and the JAAS file into `dir` once, for one server or for every
    /// server of a cluster (one CA, one server certificate for `127.0.0.1`).
    pub(crate) fn prepare(&self, dir: &Path) -> Result<Prepared> {
        self.validate()?;
        let mut config = String::new();
        let mut jvm_flags = Vec::new();
        let (mut tls, mut probe) = (None, None);
        if let Some(request) = self.tls {
            let tls_dir = dir.join("tls");
            std::fs::create_dir_all(&tls_dir)
                .map_err(HarnessError::io("creating the server's tls directory"))?;
            let made =
                ServerTls::create(&tls_dir, request.client_auth, request.server_certificate)?;
            let _ = write!(
                config,
                "serverCnxnFactory={NETTY_FACTORY}\n{}",
                made.config_lines()
            );
            probe = Some(made.probe_client()?);
            tls = Some(Arc::new(made));
        }
        let client_certs = self.tls.is_some_and(|t| t.client_auth != ClientAuth::None);
        if self.x509_auth || client_certs {
            let _ = writeln!(config, "authProvider.x509={X509_PROVIDER}");
        }
        if !self.sasl_users.is_empty() {
            let jaas = dir.join("jaas.conf");
            std::fs::write(&jaas, self.jaas())
                .map_err(HarnessError::io(format!("writing {}", jaas.display())))?;
            jvm_flags.push(format!(
                "-Djava.security.auth.login.config={}",
                jaas.display()
            ));
            let _ = writeln!(config, "authProvider.sasl={SASL_PROVIDER}");
            if self.sasl_required {
                config.push_str("enforce.auth.enabled=true\nenforce.auth.schemes=sasl\n");
            }
        }
        Ok(Prepared {
            config,
            jvm_flags,
            tls,
            probe,
        })
    }

    /// The JAAS file: a `Server` section with one `user_<name>="<password>"` per user.
    fn jaas(&self) -> String {
        let mut text = format!("Server {{\n    {DIGEST_LOGIN_MODULE} required");
        for (user, password) in &self.sasl_users {
            let _ = write!(text, "\n    user_{user}=\"{password}\"");
        }
        text.push_str(";\n};\n");
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<&str> {
        s.lines().collect()
    }

    #[test]
    fn a_plaintext_server_keeps_its_client_port_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let made = Security::default()
            .apply(dir.path(), 4000)
            .expect("applied");
        assert_eq!(
            lines(&made.config),
            ["clientPort=4000", "clientPortAddress=127.0.0.1"]
        );
        assert!(made.jvm_flags.is_empty() && made.tls.is_none() && made.probe.is_none());
    }

    #[test]
    fn a_tls_server_has_a_secure_port_only_and_x509_when_it_asks_for_certificates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let security = Security {
            tls: Some(TlsRequest {
                client_auth: ClientAuth::Want,
                server_certificate: ServerCertificate::Valid,
            }),
            ..Security::default()
        };
        let made = security.apply(dir.path(), 4001).expect("applied");
        let cfg = lines(&made.config);
        for line in [
            "secureClientPort=4001",
            "secureClientPortAddress=127.0.0.1",
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            "ssl.keyStore.type=PEM",
            "ssl.trustStore.type=PEM",
            "ssl.clientAuth=want",
            "authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider",
        ] {
            assert!(cfg.contains(&line), "{line} missing from {cfg:?}");
        }
        assert!(!made.config.contains("clientPort="), "{cfg:?}");
        assert!(!made.config.contains("clientPortAddress="), "{cfg:?}");
        assert!(made.probe.is_some());
        assert!(dir.path().join("tls/server-keystore.pem").is_file());
    }

    #[test]
    fn sasl_users_go_to_a_jaas_server_section_and_can_be_required() {
        let dir = tempfile::tempdir().expect("tempdir");
        let security = Security {
            sasl_users: vec![
                ("alice".into(), "a-secret".into()),
                ("bob".into(), "b".into()),
            ],
            sasl_required: true,
            ..Security::default()
        };
        let made = security.apply(dir.path(), 4002).expect("applied");
        let jaas = std::fs::read_to_string(dir.path().join("jaas.conf")).expect("jaas");
        assert_eq!(
            jaas,
            "Server {\n    org.apache.zookeeper.server.auth.DigestLoginModule required\n    \
             user_alice=\"a-secret\"\n    user_bob=\"b\";\n};\n"
        );
        assert_eq!(
            made.jvm_flags,
            [format!(
                "-Djava.security.auth.login.config={}",
                dir.path().join("jaas.conf").display()
            )]
        );
        for line in [
            "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider",
            "enforce.auth.enabled=true",
            "enforce.auth.schemes=sasl",
        ] {
            assert!(made.config.lines().any(|l| l == line), "{line} missing");
        }
        assert!(
            !format!("{security:?}").contains("a-secret"),
            "no password in Debug"
        );
    }

    #[test]
    fn bad_sasl_users_are_refused() {
        let with = |user: &str, password: &str| Security {
            sasl_users: vec![(user.into(), password.into())],
            ..Security::default()
        };
        assert!(with("al ice", "x").validate().is_err());
        assert!(with("", "x").validate().is_err());
        assert!(with("alice", "a\"b").validate().is_err());
        assert!(with("alice", "ok").validate().is_ok());
        let required = Security {
            sasl_required: true,
            ..Security::default()
        };
        assert!(required.validate().is_err());
    }
}
