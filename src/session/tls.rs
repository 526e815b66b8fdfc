//! TLS to the servers: [`TlsConfig`] (the CA bundle and an optional client certificate), checked
//! when the session is built, and the diagnosis of a failed handshake.
//!
//! zookeeper-client reports every failed handshake as "no hosts" and gives the cause only in a
//! debug log; when no session comes, the session makes one handshake of its own with the same
//! settings to each server and reports what rustls said ([`Error::TlsHandshake`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{AlertDescription, CertificateError, ClientConfig, RootCertStore};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::error::{Error, Result};

/// TLS to the servers: the CA bundle that signs their certificates and, for mutual TLS, a client
/// certificate and its private key, each from a PEM file or from PEM text held in memory (a
/// secret store).
///
/// Given to [`SessionBuilder::tls`](crate::SessionBuilder::tls). The servers' certificates must
/// name the host the connect string dials (a DNS or IP subject alternative name): hostname
/// verification is always on, and this crate offers no way to turn it off.
///
/// Everything is read and checked when the session is built, before anything connects; each
/// failure is [`Error::InvalidTls`] naming the file and the cause: a missing or unreadable file,
/// text that is not PEM or holds no certificate or key, a key that does not match its
/// certificate, a key *file* that group or others may read or write (as ssh refuses a private
/// key; `chmod 600` it).
///
/// # Crypto provider
/// zookeeper-client builds its rustls configuration with the process's default
/// [`CryptoProvider`], and rustls panics when it cannot pick one (when both aws-lc-rs and ring are
/// compiled in, and nobody installed either). So the first session built with TLS installs
/// aws-lc-rs's provider, rustls's default, as the process default *if none is installed*. A
/// process that wants another one (ring, a FIPS build) installs it before building a session:
/// `rustls::crypto::ring::default_provider().install_default()`.
///
/// # Examples
/// ```no_run
/// # async fn demo() -> zookeeper_recipes::Result<()> {
/// use zookeeper_recipes::{Session, TlsConfig};
///
/// let tls = TlsConfig::ca_file("/etc/zookeeper/ca.pem")
///     .identity_files("/etc/svc/client.pem", "/etc/svc/client.key");
/// let session = Session::builder("tcp+tls://zk1:2281,tcp+tls://zk2:2281")
///     .tls(tls)
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
///
/// # Curator
/// The ZooKeeper Java client's `zookeeper.client.secure=true` and `zookeeper.ssl.trustStore.*` /
/// `zookeeper.ssl.keyStore.*` properties with PEM stores. Java lets
/// `zookeeper.ssl.hostnameVerification=false` turn the host check off; this crate does not.
#[derive(Clone)]
pub struct TlsConfig {
    ca: Pem,
    identity: Option<(Pem, Pem)>,
}

/// PEM text, or the file that holds it.
#[derive(Clone)]
enum Pem {
    File(PathBuf),
    Memory(String),
}

impl TlsConfig {
    /// Trusts the CA certificates in the PEM file at `path` (one or more `CERTIFICATE` blocks).
    pub fn ca_file(path: impl Into<PathBuf>) -> Self {
        TlsConfig {
            ca: Pem::File(path.into()),
            identity: None,
        }
    }

    /// Trusts the CA certificates in `pem` (one or more `CERTIFICATE` blocks).
    pub fn ca_pem(pem: impl Into<String>) -> Self {
        TlsConfig {
            ca: Pem::Memory(pem.into()),
            identity: None,
        }
    }

    /// Presents the client certificate (chain) in the PEM file `cert` with the private key in
    /// the PEM file `key` (PKCS#8, PKCS#1 or SEC1), for servers with `ssl.clientAuth` `need` or
    /// `want`. With the servers' x509 auth provider, the certificate's subject is the session's
    /// identity (`x509:CN=...`), which [`NodeAcl::creator_all`](crate::NodeAcl::creator_all)
    /// names. The key file must not be readable by group or others.
    #[must_use]
    pub fn identity_files(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.identity = Some((Pem::File(cert.into()), Pem::File(key.into())));
        self
    }

    /// As [`identity_files`](Self::identity_files), from PEM text held in memory.
    #[must_use]
    pub fn identity_pem(mut self, cert: impl Into<String>, key: impl Into<String>) -> Self {
        self.identity = Some((Pem::Memory(cert.into()), Pem::Memory(key.into())));
        self
    }

    /// Whether a client certificate is configured.
    pub fn has_identity(&self) -> bool {
        self.identity.is_some()
    }

    /// Reads and checks the files and PEM text now, as building a session does: for a tool
    /// that reports a bad file as a usage error before it connects. Installs the process's
    /// default crypto provider if none is (see the type's docs).
    ///
    /// # Errors
    /// [`Error::InvalidTls`], naming the file (or the in-memory PEM) and the cause.
    pub fn check(&self) -> Result<()> {
        self.load().map(drop)
    }

    /// Reads and checks everything; the material a session connects with.
    pub(super) fn load(&self) -> Result<TlsMaterial> {
        let provider = crypto_provider();
        let ca_text = read_pem(&self.ca, "CA bundle", false)?;
        let ca_certs = certificates(&ca_text, &describe(&self.ca, "CA bundle"))?;
        let mut roots = RootCertStore::empty();
        for (i, cert) in ca_certs.into_iter().enumerate() {
            roots.add(cert).map_err(|e| Error::InvalidTls {
                what: describe(&self.ca, "CA bundle"),
                reason: format!("certificate #{} is not a usable CA certificate: {e}", i + 1),
            })?;
        }
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::InvalidTls {
                what: "crypto provider".into(),
                reason: e.to_string(),
            })?
            .with_root_certificates(roots);
        let (config, identity) = match &self.identity {
            None => (builder.with_no_client_auth(), None),
            Some((cert, key)) => {
                let cert_text = read_pem(cert, "client certificate", false)?;
                let chain = certificates(&cert_text, &describe(cert, "client certificate"))?;
                let key_text = read_pem(key, "client key", true)?;
                let key_what = describe(key, "client key");
                let der = PrivateKeyDer::from_pem_slice(key_text.as_bytes()).map_err(|e| {
                    Error::InvalidTls {
                        what: key_what.clone(),
                        reason: match e {
                            rustls::pki_types::pem::Error::NoItemsFound => {
                                "holds no PRIVATE KEY block (is it PEM?)".to_owned()
                            }
                            e => format!("not a PEM private key: {e}"),
                        },
                    }
                })?;
                let config =
                    builder
                        .with_client_auth_cert(chain, der)
                        .map_err(|e| Error::InvalidTls {
                            what: key_what,
                            reason: match e {
                                rustls::Error::InconsistentKeys(_) => format!(
                                    "the private key does not match the client certificate ({})",
                                    describe(cert, "client certificate")
                                ),
                                e => format!("not a usable private key: {e}"),
                            },
                        })?;
                (config, Some((cert_text, key_text)))
            }
        };
        Ok(TlsMaterial {
            ca_pem: ca_text,
            identity,
            config: Arc::new(config),
        })
    }
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("ca", &describe(&self.ca, "CA bundle"))
            .field(
                "identity",
                &self
                    .identity
                    .as_ref()
                    .map(|(cert, _)| describe(cert, "client certificate")),
            )
            .finish()
    }
}

/// What `pem` is, for a message: `client key /etc/svc/key.pem` or `client key (in-memory PEM)`.
fn describe(pem: &Pem, what: &str) -> String {
    match pem {
        Pem::File(path) => format!("{what} {}", path.display()),
        Pem::Memory(_) => format!("{what} (in-memory PEM)"),
    }
}

/// The text of `pem`; a file holding a private key (`secret`) must not be open to group or
/// others.
fn read_pem(pem: &Pem, what: &str, secret: bool) -> Result<String> {
    let path = match pem {
        Pem::Memory(text) => return Ok(text.clone()),
        Pem::File(path) => path,
    };
    let invalid = |reason: String| Error::InvalidTls {
        what: format!("{what} {}", path.display()),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| invalid(format!("cannot read it: {e}")))?;
    if !meta.is_file() {
        return Err(invalid("not a regular file".into()));
    }
    if secret {
        check_private(path, &meta).map_err(invalid)?;
    }
    let bytes = std::fs::read(path).map_err(|e| invalid(format!("cannot read it: {e}")))?;
    String::from_utf8(bytes).map_err(|_| invalid("not PEM: the file is not text".into()))
}

/// A private key's file must be the owner's alone, as ssh requires of its keys.
fn check_private(path: &Path, meta: &std::fs::Metadata) -> std::result::Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "group or others may access it (mode {mode:03o}); it holds a private key: chmod 600 {}",
            path.display()
        ));
    }
    Ok(())
}

/// The certificates of a PEM text; at least one.
fn certificates(text: &str, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let invalid = |reason: String| Error::InvalidTls {
        what: what.to_owned(),
        reason,
    };
    let certs = CertificateDer::pem_slice_iter(text.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(invalid("holds no CERTIFICATE block (is it PEM?)".into()));
    }
    Ok(certs)
}

/// Checks that TLS can verify the name of `host` (`name[:port]`) in the server's certificate;
/// zookeeper-client would panic on a name rustls cannot take.
pub(crate) fn check_host(host: &str) -> std::result::Result<(), String> {
    let name = server_name(host);
    ServerName::try_from(name.to_owned())
        .map(drop)
        .map_err(|e| format!("{name:?} is not a host name TLS can verify: {e}"))
}

/// The name in `host:port` (`[::1]:2181` -> `::1`).
fn server_name(host: &str) -> &str {
    let name = match host.rsplit_once(':') {
        Some((name, port)) if !port.contains(']') => name,
        _ => host,
    };
    name.trim_start_matches('[').trim_end_matches(']')
}

/// The process's default rustls [`CryptoProvider`]; aws-lc-rs's is installed as the default
/// when none is (zookeeper-client would panic without one when several are compiled in).
pub(crate) fn crypto_provider() -> Arc<CryptoProvider> {
    if let Some(provider) = CryptoProvider::get_default() {
        return Arc::clone(provider);
    }
    // Losing a race with another installer is fine: whichever is installed is used.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    CryptoProvider::get_default()
        .map(Arc::clone)
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
}

/// A checked [`TlsConfig`]: the PEM texts zookeeper-client takes, and a rustls configuration
/// with the same trust and identity for the session's own diagnostic handshakes.
#[derive(Clone)]
pub(crate) struct TlsMaterial {
    ca_pem: String,
    identity: Option<(String, String)>,
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("identity", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

impl TlsMaterial {
    /// Whether a client certificate is presented.
    pub(crate) fn has_identity(&self) -> bool {
        self.identity.is_some()
    }

    /// zookeeper-client's options (hostname verification on, its default).
    pub(crate) fn options(&self) -> Result<zookeeper_client::TlsOptions> {
        let options = zookeeper_client::TlsOptions::new().with_pem_ca(&self.ca_pem)?;
        match &self.identity {
            Some((cert, key)) => Ok(options.with_pem_identity(cert, key)?),
            None => Ok(options),
        }
    }

    /// Handshakes with each of `hosts` (`host:port`), each bounded by `bound`, and says why no
    /// session could be established: `Some(Error::TlsHandshake)` when a handshake failed,
    /// `None` when every handshake succeeded or no server took the TCP connection (then the
    /// plain probe says more).
    pub(crate) async fn diagnose(&self, hosts: &[String], bound: Duration) -> Option<Error> {
        let mut failures = Vec::new();
        for host in hosts {
            if let Err(why) = self.handshake(host, bound).await {
                failures.push(format!("{host}: {why}"));
            }
        }
        (!failures.is_empty()).then(|| Error::TlsHandshake {
            reason: failures.join("; "),
        })
    }

    /// One handshake with `host`; `Err` with rustls's reason when it fails. A host that takes
    /// no TCP connection is not a TLS failure (`Ok`).
    async fn handshake(&self, host: &str, bound: Duration) -> std::result::Result<(), String> {
        let name = server_name(host);
        let Ok(server_name) = ServerName::try_from(name.to_owned()) else {
            return Err(format!("{name:?} is not a host name TLS can verify"));
        };
        let tcp = match tokio::time::timeout(bound, TcpStream::connect(host)).await {
            Ok(Ok(tcp)) => tcp,
            Ok(Err(_)) | Err(_) => return Ok(()),
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(&self.config));
        let mut stream =
            match tokio::time::timeout(bound, connector.connect(server_name, tcp)).await {
                Err(_) => return Err(format!("no TLS handshake within {bound:?}")),
                Ok(Err(e)) => return Err(explain(&e, name)),
                Ok(Ok(stream)) => stream,
            };
        // Under TLS 1.3 the server checks the client's certificate after the client considers
        // the handshake done: its verdict comes as an alert, or a close, on the first read. A
        // server that accepted us waits for the session request instead.
        let mut byte = [0u8; 1];
        match tokio::time::timeout(bound.min(VERDICT_BOUND), stream.read(&mut byte)).await {
            Err(_) | Ok(Ok(1..)) => Ok(()),
            Ok(Ok(0)) => Err(
                "the server closed the connection right after the handshake: it requires a client certificate (ssl.clientAuth=need), or refused this one"
                    .to_owned(),
            ),
            Ok(Err(e)) => Err(explain(&e, name)),
        }
    }
}

/// How long a diagnostic handshake waits for the server's verdict on the client certificate.
const VERDICT_BOUND: Duration = Duration::from_millis(500);

/// A handshake's failure in words: what it means, then rustls's own message.
fn explain(e: &std::io::Error, host: &str) -> String {
    let Some(tls) = e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) else {
        return e.to_string();
    };
    let meaning = match tls {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => {
                "the server's certificate is not signed by a CA of the configured CA bundle"
                    .to_owned()
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "the server's certificate has expired".to_owned()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "the server's certificate is not valid yet".to_owned()
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                format!("the server's certificate is not valid for {host} (hostname verification)")
            }
            _ => "the server's certificate was refused".to_owned(),
        },
        rustls::Error::AlertReceived(
            AlertDescription::CertificateRequired
            | AlertDescription::HandshakeFailure
            | AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::AccessDenied,
        ) => "the server requires a client certificate, or refused this one".to_owned(),
        _ => return tls.to_string(),
    };
    format!("{meaning} ({tls})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_config_is_send_sync_and_its_debug_shows_no_key() {
        fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
        assert_send_sync::<TlsConfig>();
        let config =
            TlsConfig::ca_pem("ca").identity_pem("cert", "-----BEGIN PRIVATE KEY-----s3cret");
        let printed = format!("{config:?}");
        assert!(!printed.contains("s3cret"), "{printed}");
        assert!(config.has_identity());
    }

    #[test]
    fn text_that_is_not_pem_is_refused_naming_the_input() {
        match TlsConfig::ca_pem("hello").load() {
            Err(Error::InvalidTls { what, reason }) => {
                assert_eq!(what, "CA bundle (in-memory PEM)");
                assert!(reason.contains("no CERTIFICATE"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_missing_file_is_refused_naming_it() {
        match TlsConfig::ca_file("/nonexistent/ca.pem").load() {
            Err(Error::InvalidTls { what, reason }) => {
                assert_eq!(what, "CA bundle /nonexistent/ca.pem");
                assert!(reason.contains("cannot read it"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
}
