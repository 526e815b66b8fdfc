//! Authentication and ACLs: the digest credentials of `--auth-file` or `$ZK_AUTH`, and the
//! `--acl` of the nodes zkr creates. The password never comes from the command line (it would
//! show in `ps`), and no message or event line carries it.

use std::path::Path;

use clap::ValueEnum;
use zookeeper_recipes::NodeAcl;

use crate::Fail;
use crate::codes;

/// The environment variable that may hold the credentials (`digest:USER:PASSWORD`).
pub(crate) const AUTH_ENV: &str = "ZK_AUTH";

/// Digest credentials. `Debug` leaves the password out.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Digest {
    pub(crate) user: String,
    pub(crate) password: String,
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Digest")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// `--acl`: the ACL of the nodes zkr creates ([`NodeAcl`]'s presets). Without `--acl`:
/// [`AclArg::default_for`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum AclArg {
    /// Anyone may do anything (`world:anyone`, all: ZooKeeper's and Curator's default; zkr's
    /// without an identity)
    Open,
    /// All permissions for the authenticated identity only (`auth`, all: CREATOR_ALL_ACL);
    /// needs --auth-file or $ZK_AUTH
    Creator,
    /// As creator, plus read for anyone (status and participants without credentials); needs
    /// --auth-file or $ZK_AUTH. zkr's default with an identity
    CreatorRead,
}

impl AclArg {
    /// The ACL without `--acl`: the library's default ([`NodeAcl::default_for`]), creator-read
    /// with an identity (digest credentials, a SASL login or a client certificate), open
    /// without.
    pub(crate) fn default_for(has_identity: bool) -> AclArg {
        if has_identity {
            AclArg::CreatorRead
        } else {
            AclArg::Open
        }
    }

    /// The library's ACL.
    pub(crate) fn node_acl(self) -> NodeAcl {
        match self {
            AclArg::Open => NodeAcl::anyone_all(),
            AclArg::Creator => NodeAcl::creator_all(),
            AclArg::CreatorRead => NodeAcl::creator_all_anyone_read(),
        }
    }

    /// The value as given on the command line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            AclArg::Open => "open",
            AclArg::Creator => "creator",
            AclArg::CreatorRead => "creator-read",
        }
    }
}

/// Parses `digest:USER:PASSWORD` (the password may hold colons; a trailing newline is dropped).
/// The error names what is wrong, never the text itself: it may be a password.
pub(crate) fn parse_digest(text: &str) -> Result<Digest, String> {
    let text = text.strip_suffix('\n').unwrap_or(text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    if text.contains('\n') {
        return Err("must be one line `digest:USER:PASSWORD`, found several lines".to_owned());
    }
    let Some(rest) = text.strip_prefix("digest:") else {
        return Err(
            "must be `digest:USER:PASSWORD` (the only scheme zkr supports is digest)".to_owned(),
        );
    };
    let Some((user, password)) = rest.split_once(':') else {
        return Err("must be `digest:USER:PASSWORD`: no `:` between user and password".to_owned());
    };
    if user.is_empty() {
        return Err("must be `digest:USER:PASSWORD`: the user is empty".to_owned());
    }
    if password.is_empty() {
        return Err("must be `digest:USER:PASSWORD`: the password is empty".to_owned());
    }
    Ok(Digest {
        user: user.to_owned(),
        password: password.to_owned(),
    })
}

/// The credentials: `--auth-file` if given (`$ZK_AUTH` is then ignored), else `$ZK_AUTH` if set
/// and not empty, else none. A file that group or others may read or write is refused, as ssh
/// refuses a private key: the password would not be secret. Every failure is a usage error
/// (exit 2), found before connecting.
pub(crate) fn load(auth_file: Option<&Path>) -> Result<Option<Digest>, Fail> {
    if let Some(file) = auth_file {
        return read_file(file).map(Some);
    }
    match std::env::var(AUTH_ENV) {
        Ok(text) if !text.is_empty() => parse_digest(&text)
            .map(Some)
            .map_err(|why| Fail::with_code(codes::USAGE, format!("${AUTH_ENV} {why}"))),
        _ => Ok(None),
    }
}

fn read_file(file: &Path) -> Result<Digest, Fail> {
    let text = read_secret(file, "--auth-file")?;
    parse_digest(&text).map_err(|why| {
        Fail::with_code(
            codes::USAGE,
            format!("--auth-file {}: {why}", file.display()),
        )
    })
}

/// The text of a file that holds a secret, given as `flag`: refused (exit 2) when it is
/// missing, not a regular file, or open to group or others (as ssh refuses a private key).
fn read_secret(file: &Path, flag: &str) -> Result<String, Fail> {
    use std::os::unix::fs::PermissionsExt;
    let usage =
        |why: String| Fail::with_code(codes::USAGE, format!("{flag} {}: {why}", file.display()));
    let meta = std::fs::metadata(file).map_err(|e| usage(format!("cannot read it: {e}")))?;
    if !meta.is_file() {
        return Err(usage("not a regular file".to_owned()));
    }
    let mode = meta.permissions().mode() & 0o777;
    let credential = std::env::var_os("CREDENTIALS_DIRECTORY")
        .is_some_and(|dir| is_systemd_credential(Path::new(&dir), file, mode));
    if mode & 0o077 != 0 && !credential {
        return Err(usage(format!(
            "group or others may access it (mode {mode:03o}); it holds a password: chmod 600 {}",
            file.display()
        )));
    }
    std::fs::read_to_string(file).map_err(|e| usage(format!("cannot read it: {e}")))
}

/// Whether `file` (with `mode`) is one of systemd's credentials (`LoadCredential=`, the
/// packaged units' way to pass `--auth-file`): a file in `$CREDENTIALS_DIRECTORY` (`dir`) that
/// others may not access. systemd gives the unit's user read access to it with an ACL entry,
/// whose mask shows in the group bits (mode 440), while the directory lets nobody else in: the
/// group bits say nothing there.
fn is_systemd_credential(dir: &Path, file: &Path, mode: u32) -> bool {
    if mode & 0o007 != 0 {
        return false;
    }
    match (dir.canonicalize(), file.canonicalize()) {
        (Ok(dir), Ok(file)) => file.parent() == Some(dir.as_path()),
        _ => false,
    }
}

/// The environment variables that may name the TLS files.
pub(crate) const TLS_CA_ENV: &str = "ZK_TLS_CA";
/// See [`TLS_CA_ENV`].
pub(crate) const TLS_CERT_ENV: &str = "ZK_TLS_CERT";
/// See [`TLS_CA_ENV`].
pub(crate) const TLS_KEY_ENV: &str = "ZK_TLS_KEY";

/// The TLS settings of `--tls-ca`, `--tls-cert`, `--tls-key` (each flag wins over its
/// environment variable), read and checked now: every failure is a usage error (exit 2), found
/// before connecting. A certificate needs its key and the CA; `None` without a CA.
pub(crate) fn load_tls(
    ca: Option<&Path>,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<Option<zookeeper_recipes::TlsConfig>, Fail> {
    let from_env = |flag: Option<&Path>, env: &str| {
        flag.map(Path::to_path_buf).or_else(|| {
            std::env::var_os(env)
                .filter(|v| !v.is_empty())
                .map(std::path::PathBuf::from)
        })
    };
    let ca = from_env(ca, TLS_CA_ENV);
    let cert = from_env(cert, TLS_CERT_ENV);
    let key = from_env(key, TLS_KEY_ENV);
    let usage = |message: String| Fail::with_code(codes::USAGE, message);
    let config = match (ca, cert, key) {
        (None, None, None) => return Ok(None),
        (None, _, _) => {
            return Err(usage(format!(
                "--tls-cert and --tls-key need --tls-ca FILE (or ${TLS_CA_ENV}): the CA that signs the servers' certificates"
            )));
        }
        (Some(ca), None, None) => zookeeper_recipes::TlsConfig::ca_file(ca),
        (Some(ca), Some(cert), Some(key)) => {
            zookeeper_recipes::TlsConfig::ca_file(ca).identity_files(cert, key)
        }
        (Some(_), Some(_), None) => {
            return Err(usage(format!(
                "--tls-cert needs --tls-key FILE (or ${TLS_KEY_ENV})"
            )));
        }
        (Some(_), None, Some(_)) => {
            return Err(usage(format!(
                "--tls-key needs --tls-cert FILE (or ${TLS_CERT_ENV})"
            )));
        }
    };
    config.check().map_err(|e| usage(e.to_string()))?;
    Ok(Some(config))
}

/// The SASL DIGEST-MD5 credentials of `--sasl-digest-file`: one line `USER:PASSWORD` (the
/// password may hold colons), with the file rules of `--auth-file`.
pub(crate) fn load_sasl(file: Option<&Path>) -> Result<Option<Digest>, Fail> {
    let Some(file) = file else {
        return Ok(None);
    };
    let text = read_secret(file, "--sasl-digest-file")?;
    let usage = |why: &str| {
        Fail::with_code(
            codes::USAGE,
            format!("--sasl-digest-file {}: {why}", file.display()),
        )
    };
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    if text.contains('\n') {
        return Err(usage(
            "must be one line `USER:PASSWORD`, found several lines",
        ));
    }
    match text.split_once(':') {
        Some((user, password)) if !user.is_empty() && !password.is_empty() => Ok(Some(Digest {
            user: user.to_owned(),
            password: password.to_owned(),
        })),
        _ => Err(usage(
            "must be one line `USER:PASSWORD` with a non-empty user and password",
        )),
    }
}

/// Checks `--acl` against the identities: a creator ACL without any (digest credentials, a
/// SASL login, a client certificate) is a usage error.
pub(crate) fn check_acl(acl: AclArg, has_identity: bool) -> Result<(), Fail> {
    if acl != AclArg::Open && !has_identity {
        return Err(Fail::with_code(
            codes::USAGE,
            format!(
                "--acl {} needs an identity: give --auth-file FILE or ${AUTH_ENV} (digest:USER:PASSWORD), --sasl-digest-file FILE, or --tls-cert and --tls-key (with servers that run the x509 auth provider)",
                acl.name()
            ),
        ));
    }
    Ok(())
}

/// Whether a library error is the server denying access: the node's ACL refuses this session's
/// identity (`NoAuth`), or the server refused the credentials (`AuthFailed`).
pub(crate) fn is_denied(e: &zookeeper_recipes::Error) -> bool {
    use zookeeper_client::Error as Zk;
    use zookeeper_recipes::Error as E;
    match e {
        E::AuthFailed => true,
        E::Refused { source, .. } => matches!(source, Zk::NoAuth | Zk::AuthFailed),
        E::Zookeeper(source) => matches!(source, Zk::NoAuth | Zk::AuthFailed),
        _ => false,
    }
}

/// The failure for `what` (e.g. "cannot read the status of /cron/x") failing with `e`: exit 77
/// with a hint when the server denied access, else exit 1.
pub(crate) fn fail(what: impl std::fmt::Display, e: &zookeeper_recipes::Error) -> Fail {
    if is_denied(e) {
        Fail::with_code(
            codes::DENIED,
            format!(
                "{what}: {e}: access denied by the node's ACL; authenticate as the identity that created it (--auth-file FILE or ${AUTH_ENV})"
            ),
        )
    } else {
        Fail::new(format!("{what}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_digest_and_keeps_colons_in_the_password() {
        let d = parse_digest("digest:job:s3:cret\n").unwrap();
        assert_eq!(d.user, "job");
        assert_eq!(d.password, "s3:cret");
        assert!(!format!("{d:?}").contains("s3:cret"));
    }

    #[test]
    fn refuses_bad_formats_without_echoing_them() {
        for bad in [
            "",
            "sekrit",
            "ip:1.2.3.4",
            "digest:",
            "digest:user",
            "digest::pw",
            "ip:sekrit",
            "digest:user:",
            "digest:a:b\ndigest:c:d",
        ] {
            let why = parse_digest(bad).unwrap_err();
            assert!(
                !why.contains("sekrit") && !why.contains("pw") && !why.contains("a:b"),
                "{why:?} echoes {bad:?}"
            );
        }
    }

    #[test]
    fn without_acl_an_identity_gives_creator_read_and_none_open_as_the_library() {
        assert_eq!(AclArg::default_for(true), AclArg::CreatorRead);
        assert_eq!(AclArg::default_for(false), AclArg::Open);
        for identity in [true, false] {
            assert_eq!(
                AclArg::default_for(identity).node_acl(),
                NodeAcl::default_for(identity)
            );
            assert!(check_acl(AclArg::default_for(identity), identity).is_ok());
        }
    }

    #[test]
    fn a_systemd_credential_may_show_group_bits_but_nothing_for_others() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("zk-auth");
        std::fs::write(&file, "digest:u:p").unwrap();
        assert!(is_systemd_credential(dir.path(), &file, 0o440));
        assert!(
            !is_systemd_credential(dir.path(), &file, 0o444),
            "others may read it"
        );
        let elsewhere = tempfile::tempdir().unwrap();
        assert!(!is_systemd_credential(elsewhere.path(), &file, 0o440));
        assert!(!is_systemd_credential(
            dir.path(),
            &dir.path().join("missing"),
            0o400
        ));
    }
}
