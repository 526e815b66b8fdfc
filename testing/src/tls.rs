//! The harness's own certificate authority ([`TestCa`]), the TLS side of a secured server
//! ([`ServerTls`], [`ClientAuth`], [`ServerCertificate`]), and the TLS client of the harness's
//! own four-letter words on a TLS-only port.
//!
//! Keys are ECDSA P-256 (what `rcgen` makes with `ring`), written as PKCS#8 PEM, which Debian's
//! ZooKeeper 3.8 reads as a `PEM` key store; every certificate is version 3.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::{HarnessError, Result};

/// The names a valid server certificate of the harness is for (its subject alternative names):
/// the address the harness's servers listen on, and the name most clients would dial instead.
pub const SERVER_NAMES: [&str; 2] = ["127.0.0.1", "localhost"];

/// The one name a [`ServerCertificate::WrongHost`] certificate is for.
pub const WRONG_HOST: &str = "wrong-host.invalid";

/// The common name of the client certificate the harness's own probes present.
const HARNESS_CLIENT_CN: &str = "zkr-harness";

/// ZooKeeper's `ssl.clientAuth`: whether a TLS server asks its clients for a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ClientAuth {
    /// `none`: no client certificate is asked for (server-authenticated TLS only).
    None,
    /// `want`: a client certificate is asked for; a client without one is let in.
    Want,
    /// `need` (ZooKeeper's default): a client without a certificate from the server's CA fails
    /// the handshake.
    #[default]
    Need,
}

impl ClientAuth {
    /// The value of `ssl.clientAuth` in `zoo.cfg`.
    pub fn as_config(self) -> &'static str {
        match self {
            ClientAuth::None => "none",
            ClientAuth::Want => "want",
            ClientAuth::Need => "need",
        }
    }
}

/// Which certificate a TLS server of the harness presents: a valid one, or one that a client
/// must refuse (for tests that a client fails fast and says why).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ServerCertificate {
    /// Signed by the server's CA, for [`SERVER_NAMES`], valid now.
    #[default]
    Valid,
    /// Signed by the server's CA, valid now, but for [`WRONG_HOST`] only: hostname verification
    /// must refuse it.
    WrongHost,
    /// Signed by the server's CA, for [`SERVER_NAMES`], but expired a day ago.
    Expired,
    /// For [`SERVER_NAMES`] and valid now, but signed by [`ServerTls::other_ca`], which the
    /// client is not given.
    UnknownCa,
}

/// A certificate and its private key, as PEM files (and the same PEM in memory).
///
/// `cert_path` holds the certificate only, `key_path` the PKCS#8 key only, and
/// `combined_path` the key followed by the certificate: the shape of ZooKeeper's `PEM` key
/// store (`ssl.keyStore.location`, `zookeeper.ssl.keyStore.location` of a Java client).
#[derive(Clone)]
pub struct CertifiedKey {
    cert_pem: String,
    key_pem: String,
    cert_path: PathBuf,
    key_path: PathBuf,
    combined_path: PathBuf,
}

impl fmt::Debug for CertifiedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertifiedKey")
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
            .finish_non_exhaustive()
    }
}

impl CertifiedKey {
    /// The certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The private key, PKCS#8 PEM.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// The file holding the certificate only.
    pub fn cert_path(&self) -> &Path {
        &self.cert_path
    }

    /// The file holding the private key only (mode 0600).
    pub fn key_path(&self) -> &Path {
        &self.key_path
    }

    /// The file holding the key and then the certificate (mode 0600): a `PEM` key store.
    pub fn combined_path(&self) -> &Path {
        &self.combined_path
    }
}

/// A certificate authority made by the harness, writing what it issues as PEM files into one
/// directory.
///
/// Each [`TestingServer`](super::TestingServer) with TLS has its own ([`ServerTls::ca`]), and
/// a second one it does not trust ([`ServerTls::other_ca`]); a test may also make one of its
/// own.
///
/// # Examples
///
/// ```
/// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let ca = zookeeper_recipes_testing::TestCa::new(dir.path(), "example")?;
/// let client = ca.client_cert("svc-client")?; // subject `CN=svc-client`
/// assert!(client.cert_path().exists() && ca.ca_path().exists());
/// # Ok(())
/// # }
/// ```
pub struct TestCa {
    name: String,
    dir: PathBuf,
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    cert_path: PathBuf,
}

impl fmt::Debug for TestCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestCa")
            .field("name", &self.name)
            .field("cert_path", &self.cert_path)
            .finish_non_exhaustive()
    }
}

fn tls_error(what: impl Into<String>) -> impl FnOnce(rcgen::Error) -> HarnessError {
    let what = what.into();
    move |e| HarnessError::Tls {
        what,
        reason: e.to_string(),
    }
}

/// A name fit for a file name: ASCII letters, digits, `-`, `_` and `.`, the rest as `_`.
fn file_stem(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes `text` to `path`, readable by its owner only when `secret`.
fn write_file(path: &Path, text: &str, secret: bool) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    if secret {
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .map_err(HarnessError::io(format!("creating {}", path.display())))?;
    file.write_all(text.as_bytes())
        .map_err(HarnessError::io(format!("writing {}", path.display())))
}

fn common_name(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn
}

impl TestCa {
    /// Makes a CA (subject `CN=<name> test CA`) and writes its certificate to
    /// `<dir>/<name>-ca.pem`. `dir` must exist.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Tls`] if a key or certificate cannot be made; [`HarnessError::Io`] if
    /// the file cannot be written.
    pub fn new(dir: &Path, name: &str) -> Result<TestCa> {
        let key = KeyPair::generate().map_err(tls_error("generating a CA key"))?;
        let mut params = CertificateParams::default();
        params.distinguished_name = common_name(&format!("{name} test CA"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::days(30);
        params.not_after = now + time::Duration::days(365);
        let cert = params
            .self_signed(&key)
            .map_err(tls_error("self-signing a CA certificate"))?;
        let cert_pem = cert.pem();
        let cert_path = dir.join(format!("{}-ca.pem", file_stem(name)));
        write_file(&cert_path, &cert_pem, false)?;
        Ok(TestCa {
            name: name.to_owned(),
            dir: dir.to_path_buf(),
            issuer: Issuer::new(params, key),
            cert_pem,
            cert_path,
        })
    }

    /// The CA certificate, PEM: what a client trusts (zookeeper-client's
    /// `TlsOptions::with_pem_ca`), and what the server's trust store holds.
    pub fn ca_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The file holding the CA certificate.
    pub fn ca_path(&self) -> &Path {
        &self.cert_path
    }

    /// Issues a client certificate with the subject `CN=<cn>` (and nothing else, so that
    /// ZooKeeper's x509 provider names it `x509:CN=<cn>`), valid now, for client
    /// authentication; written as `client-<cn>.pem`, `client-<cn>-key.pem` and
    /// `client-<cn>-keystore.pem`.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn client_cert(&self, cn: &str) -> Result<CertifiedKey> {
        let mut params = CertificateParams::default();
        params.distinguished_name = common_name(cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params, &format!("client-{}", file_stem(cn)), false)
    }

    /// Issues a server certificate for `hosts` (IP addresses become `IP:` names, the rest
    /// `DNS:` names), valid now, or expired a day ago when `expired`; written as
    /// `<stem>.pem`, `<stem>-key.pem` and `<stem>-keystore.pem`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Tls`] for a host that is neither an address nor a DNS name; else as
    /// [`new`](Self::new).
    pub fn server_cert(&self, stem: &str, hosts: &[&str], expired: bool) -> Result<CertifiedKey> {
        let mut params = CertificateParams::default();
        params.distinguished_name = common_name(hosts.first().copied().unwrap_or("server"));
        params.subject_alt_names = hosts
            .iter()
            .map(|h| match h.parse() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => (*h).to_owned().try_into().map(SanType::DnsName),
            })
            .collect::<std::result::Result<_, _>>()
            .map_err(tls_error(format!("a server certificate for {hosts:?}")))?;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params, &file_stem(stem), expired)
    }

    fn issue(
        &self,
        mut params: CertificateParams,
        stem: &str,
        expired: bool,
    ) -> Result<CertifiedKey> {
        let now = time::OffsetDateTime::now_utc();
        if expired {
            params.not_before = now - time::Duration::days(30);
            params.not_after = now - time::Duration::days(1);
        } else {
            params.not_before = now - time::Duration::days(1);
            params.not_after = now + time::Duration::days(90);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().map_err(tls_error(format!("generating a key for {stem}")))?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(tls_error(format!("signing {stem} with {}", self.name)))?;
        let cert_pem = cert.pem();
        let key_pem = key.serialize_pem();
        let cert_path = self.dir.join(format!("{stem}.pem"));
        let key_path = self.dir.join(format!("{stem}-key.pem"));
        let combined_path = self.dir.join(format!("{stem}-keystore.pem"));
        write_file(&cert_path, &cert_pem, false)?;
        write_file(&key_path, &key_pem, true)?;
        write_file(&combined_path, &format!("{key_pem}{cert_pem}"), true)?;
        Ok(CertifiedKey {
            cert_pem,
            key_pem,
            cert_path,
            key_path,
            combined_path,
        })
    }
}

/// The TLS side of a [`TestingServer`](super::TestingServer) started with
/// [`tls`](super::TestingServerBuilder::tls): its CA, what it asks of clients, and the
/// certificates a test hands to a client.
///
/// Every file is in the server's directory (`tls/`), removed with it.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use zookeeper_recipes_testing::{ClientAuth, TestingServer};
///
/// let server = TestingServer::builder().tls(ClientAuth::Need).x509_auth(true).start().await?;
/// let tls = server.tls().expect("a TLS server");
/// let me = tls.client_cert("svc-client")?;
/// // With zookeeper-client's `tls` feature:
/// // TlsOptions::new().with_pem_ca(tls.ca_pem())?.with_pem_identity(me.cert_pem(), me.key_pem())?
/// // and `server.connect_string()` (`tcp+tls://127.0.0.1:PORT`).
/// # drop(me);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct ServerTls {
    client_auth: ClientAuth,
    presented: ServerCertificate,
    ca: TestCa,
    other_ca: TestCa,
    server: CertifiedKey,
}

impl ServerTls {
    /// Makes the CAs and the server's certificate in `dir` (which must exist).
    pub(crate) fn create(
        dir: &Path,
        client_auth: ClientAuth,
        presented: ServerCertificate,
    ) -> Result<ServerTls> {
        let ca = TestCa::new(dir, "server")?;
        let other_ca = TestCa::new(dir, "other")?;
        let server = match presented {
            ServerCertificate::Valid => ca.server_cert("server", &SERVER_NAMES, false)?,
            ServerCertificate::WrongHost => ca.server_cert("server", &[WRONG_HOST], false)?,
            ServerCertificate::Expired => ca.server_cert("server", &SERVER_NAMES, true)?,
            ServerCertificate::UnknownCa => other_ca.server_cert("server", &SERVER_NAMES, false)?,
        };
        Ok(ServerTls {
            client_auth,
            presented,
            ca,
            other_ca,
            server,
        })
    }

    /// The `zoo.cfg` lines of the server's TLS stores and client authentication.
    pub(crate) fn config_lines(&self) -> String {
        format!(
            "ssl.keyStore.location={}\n\
             ssl.keyStore.type=PEM\n\
             ssl.trustStore.location={}\n\
             ssl.trustStore.type=PEM\n\
             ssl.clientAuth={}\n",
            self.server.combined_path().display(),
            self.ca.ca_path().display(),
            self.client_auth.as_config(),
        )
    }

    /// The TLS client of the harness's own four-letter words: it presents a certificate of
    /// the server's CA (`CN=zkr-harness`) and accepts whatever certificate the server has
    /// (the harness checks it reached its own server by the data directory `conf` reports,
    /// and must reach servers that present a wrong certificate on purpose).
    pub(crate) fn probe_client(&self) -> Result<Arc<rustls::ClientConfig>> {
        let me = self.ca.client_cert(HARNESS_CLIENT_CN)?;
        probe_client_config(&me)
    }

    /// What the server asks of clients (`ssl.clientAuth`).
    pub fn client_auth(&self) -> ClientAuth {
        self.client_auth
    }

    /// Which certificate the server presents.
    pub fn server_certificate(&self) -> ServerCertificate {
        self.presented
    }

    /// The CA the server trusts (its trust store) and that signed its certificate (unless
    /// [`ServerCertificate::UnknownCa`]).
    pub fn ca(&self) -> &TestCa {
        &self.ca
    }

    /// A second CA, which the server does not trust: for client certificates it must refuse.
    pub fn other_ca(&self) -> &TestCa {
        &self.other_ca
    }

    /// The server's CA certificate, PEM: what a client trusts.
    pub fn ca_pem(&self) -> &str {
        self.ca.ca_pem()
    }

    /// The file holding the server's CA certificate.
    pub fn ca_path(&self) -> &Path {
        self.ca.ca_path()
    }

    /// The certificate the server presents, with its key.
    pub fn server_cert(&self) -> &CertifiedKey {
        &self.server
    }

    /// A client certificate `CN=<cn>` from the server's CA: accepted by the server, and named
    /// `x509:CN=<cn>` by its x509 provider.
    ///
    /// # Errors
    ///
    /// As [`TestCa::client_cert`].
    pub fn client_cert(&self, cn: &str) -> Result<CertifiedKey> {
        self.ca.client_cert(cn)
    }

    /// A client certificate `CN=<cn>` from [`other_ca`](Self::other_ca): refused by the server
    /// when it asks for one.
    ///
    /// # Errors
    ///
    /// As [`TestCa::client_cert`].
    pub fn foreign_client_cert(&self, cn: &str) -> Result<CertifiedKey> {
        self.other_ca.client_cert(cn)
    }
}

fn probe_client_config(me: &CertifiedKey) -> Result<Arc<rustls::ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let bad = |what: &str| {
        let what = what.to_owned();
        move |e: rustls::Error| HarnessError::Tls {
            what,
            reason: e.to_string(),
        }
    };
    let certs = rustls_pemfile::certs(&mut me.cert_pem().as_bytes())
        .collect::<std::result::Result<Vec<CertificateDer<'static>>, _>>()
        .map_err(HarnessError::io("reading the harness's client certificate"))?;
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut me.key_pem().as_bytes())
        .map_err(HarnessError::io("reading the harness's client key"))?
        .ok_or_else(|| HarnessError::Tls {
            what: "the harness's client key".to_owned(),
            reason: "no key in its PEM".to_owned(),
        })?;
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(bad("the harness's TLS client protocol versions"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer {
            algorithms: provider.signature_verification_algorithms,
        }))
        .with_client_auth_cert(certs, key)
        .map_err(bad("the harness's TLS client identity"))?;
    Ok(Arc::new(config))
}

/// Accepts any server certificate, but checks the handshake's signatures with it: the harness
/// probes its own servers, some of which present a wrong certificate on purpose.
#[derive(Debug)]
struct AnyServer {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_issues_pem_files_a_client_and_server_can_load() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = TestCa::new(dir.path(), "unit").expect("ca");
        let client = ca.client_cert("svc client/1").expect("client cert");
        assert!(client.cert_path().ends_with("client-svc_client_1.pem"));
        let combined = std::fs::read_to_string(client.combined_path()).expect("keystore");
        assert!(
            combined.starts_with("-----BEGIN PRIVATE KEY-----"),
            "{combined}"
        );
        assert!(combined.contains("-----BEGIN CERTIFICATE-----"));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(client.key_path())
                .expect("key file")
                .permissions(),
        );
        assert_eq!(mode & 0o077, 0, "the key is the owner's only");
        let server = ca
            .server_cert("s", &SERVER_NAMES, false)
            .expect("server cert");
        assert!(probe_client_config(&server).is_ok());
        assert!(ca.server_cert("bad", &["h\u{f1}st"], false).is_err());
    }

    /// A server is shared through a `static` by every test of a binary, and a TLS server
    /// holds its CA: all of it must stay `Send + Sync`.
    #[test]
    fn the_tls_types_and_the_servers_holding_them_are_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<TestCa>();
        send_sync::<ServerTls>();
        send_sync::<CertifiedKey>();
        send_sync::<ClientAuth>();
        send_sync::<ServerCertificate>();
        send_sync::<crate::TestingServer>();
        send_sync::<crate::TestingCluster>();
    }

    #[test]
    fn client_auth_names_match_zookeeper() {
        assert_eq!(ClientAuth::None.as_config(), "none");
        assert_eq!(ClientAuth::Want.as_config(), "want");
        assert_eq!(ClientAuth::Need.as_config(), "need");
    }
}
