//! Connect strings: `host:port[,host:port...][/chroot]`, each host optionally `tcp://` or
//! `tcp+tls://`, checked before a session starts.

use super::validate_path;
use crate::error::{Error, Result};

/// A parsed and validated connect string: `host:port[,host:port...][/chroot]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnectString {
    /// `host:port` entries, without their scheme.
    pub(crate) hosts: Vec<String>,
    /// The chroot, absolute, or `None`.
    pub(crate) chroot: Option<String>,
    /// What the schemes of the hosts say.
    pub(crate) transport: Transport,
}

/// What the schemes of a connect string's hosts say. A string that mixes `tcp+tls://` hosts
/// with others is refused: a session would cross the network in clear text whenever it landed
/// on a plaintext server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// No host has a scheme: plaintext, or TLS when the session has a TLS configuration (as the
    /// Java client's `zookeeper.client.secure`).
    Unspecified,
    /// Some hosts say `tcp://`, none `tcp+tls://`.
    Plain,
    /// Every host says `tcp+tls://`.
    Tls,
}

impl ConnectString {
    /// Parses and validates `s`.
    pub(crate) fn parse(s: &str) -> Result<Self> {
        let invalid = |reason: &str| {
            Err(Error::InvalidConnectString {
                connect: s.to_owned(),
                reason: reason.to_owned(),
            })
        };
        let s_trim = s.trim();
        if s_trim.is_empty() {
            return invalid("connect string is empty");
        }
        let (hosts_part, chroot) = match s_trim.find('/') {
            // `tcp://host` has its first '/' inside the scheme; skip over schemes.
            Some(_) => split_chroot(s_trim),
            None => (s_trim, None),
        };
        let mut hosts = Vec::new();
        let (mut tls, mut tcp, mut bare_hosts) = (0, 0, 0);
        for entry in hosts_part.split(',') {
            let entry = entry.trim();
            let bare = if let Some(rest) = entry.strip_prefix("tcp+tls://") {
                tls += 1;
                rest
            } else if let Some(rest) = entry.strip_prefix("tcp://") {
                tcp += 1;
                rest
            } else {
                bare_hosts += 1;
                entry
            };
            if bare.is_empty() {
                return invalid("empty host entry (stray ',')");
            }
            if bare.contains("://") {
                return invalid("only tcp:// and tcp+tls:// servers are supported");
            }
            let (host, port) = match bare.rsplit_once(':') {
                Some((h, p)) if !h.contains(':') || h.starts_with('[') => (h, Some(p)),
                Some(_) => return invalid("IPv6 addresses must be written as [addr]:port"),
                None => (bare, None),
            };
            if host.is_empty() {
                return invalid("host is empty");
            }
            if host.chars().any(|c| c.is_whitespace() || c == '/') {
                return invalid("host contains whitespace or '/'");
            }
            if let Some(port) = port {
                match port.parse::<u16>() {
                    Ok(0) | Err(_) => return invalid("port must be a number in 1..=65535"),
                    Ok(_) => {}
                }
            }
            hosts.push(bare.to_owned());
        }
        if let Some(chroot) = &chroot
            && chroot != "/"
            && validate_path(chroot).is_err()
        {
            return invalid("chroot is not a valid absolute path");
        }
        let chroot = chroot.filter(|c| c != "/");
        let transport = match (tls, tcp + bare_hosts) {
            (0, _) if tcp == 0 => Transport::Unspecified,
            (0, _) => Transport::Plain,
            (_, 0) => Transport::Tls,
            _ => {
                return invalid(
                    "mixes tcp+tls:// servers with plaintext ones: the session would cross the network in clear text whenever it landed on a plaintext server; write tcp+tls:// on every host",
                );
            }
        };
        Ok(ConnectString {
            hosts,
            chroot,
            transport,
        })
    }

    /// The hosts part, as zookeeper-client accepts it.
    pub(crate) fn hosts_joined(&self) -> String {
        self.hosts.join(",")
    }
}

/// Splits `host:port,.../chroot` at the first '/' that is not part of a `tcp://` or
/// `tcp+tls://` scheme.
fn split_chroot(s: &str) -> (&str, Option<String>) {
    let mut offset = 0;
    let bytes = s.as_bytes();
    while offset < s.len() {
        if let Some(scheme) = ["tcp://", "tcp+tls://"]
            .into_iter()
            .find(|scheme| s[offset..].starts_with(scheme))
        {
            offset += scheme.len();
            continue;
        }
        if bytes[offset] == b'/' {
            return (&s[..offset], Some(s[offset..].to_owned()));
        }
        offset += s[offset..].chars().next().map_or(1, char::len_utf8);
    }
    (s, None)
}

/// Checks a chroot given on its own (not in a connect string).
pub(crate) fn validate_chroot(chroot: &str) -> Result<()> {
    if !chroot.starts_with('/') {
        return Err(Error::InvalidPath {
            path: chroot.to_owned(),
            reason: "chroot must be absolute (start with '/')",
        });
    }
    if chroot == "/" {
        return Ok(());
    }
    validate_path(chroot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_strings_parse_with_optional_chroot() {
        let cs = ConnectString::parse("127.0.0.1:2181").unwrap();
        assert_eq!(cs.hosts, ["127.0.0.1:2181"]);
        assert_eq!(cs.chroot, None);
        let cs = ConnectString::parse("a:1,b:2,c/app/zk").unwrap();
        assert_eq!(cs.hosts, ["a:1", "b:2", "c"]);
        assert_eq!(cs.chroot.as_deref(), Some("/app/zk"));
        let cs = ConnectString::parse("tcp://a:1,tcp://b:2/app").unwrap();
        assert_eq!(cs.hosts, ["a:1", "b:2"]);
        assert_eq!(cs.chroot.as_deref(), Some("/app"));
        assert_eq!(
            ConnectString::parse("[::1]:2181").unwrap().hosts,
            ["[::1]:2181"]
        );
        assert_eq!(ConnectString::parse("a:1/").unwrap().chroot, None);
        assert_eq!(
            ConnectString::parse("a:1").unwrap().transport,
            Transport::Unspecified
        );
        assert_eq!(
            ConnectString::parse("tcp://a:1,b:2").unwrap().transport,
            Transport::Plain
        );
    }

    #[test]
    fn tls_hosts_parse_per_host_with_a_chroot() {
        let cs = ConnectString::parse("tcp+tls://a:1,tcp+tls://[::1]:2/app").unwrap();
        assert_eq!(cs.hosts, ["a:1", "[::1]:2"]);
        assert_eq!(cs.chroot.as_deref(), Some("/app"));
        assert_eq!(cs.transport, Transport::Tls);
    }

    #[test]
    fn mixing_tls_and_plaintext_hosts_is_refused() {
        for mixed in [
            "tcp+tls://a:1,b:2",
            "tcp+tls://a:1,tcp://b:2",
            "a:1,tcp+tls://b:2/x",
        ] {
            match ConnectString::parse(mixed) {
                Err(Error::InvalidConnectString { reason, .. }) => {
                    assert!(reason.contains("mixes"), "{mixed}: {reason}")
                }
                other => panic!("{mixed}: {other:?}"),
            }
        }
    }

    #[test]
    fn malformed_connect_strings_are_typed_errors() {
        for bad in [
            "",
            "   ",
            ",",
            "a:1,",
            ":2181",
            "a:0",
            "a:99999",
            "a:port",
            "a:1/b/",
            "a:1//b",
            "udp://a:1",
            "tcp+tls://",
            "a b:1",
        ] {
            assert!(
                matches!(
                    ConnectString::parse(bad),
                    Err(Error::InvalidConnectString { .. })
                ),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn chroot_must_be_absolute() {
        assert!(validate_chroot("app").is_err());
        assert!(validate_chroot("/app").is_ok());
        assert!(validate_chroot("/").is_ok());
    }

    /// Property tests: connect strings parse back to what was written.
    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn connect_strings_round_trip(
                hosts in proptest::collection::vec(
                    ("[a-z][a-z0-9.-]{0,15}", proptest::option::of(1u16..=65535)), 1..5),
                chroot in proptest::option::of(
                    proptest::collection::vec("[a-y0-9_]{1,8}", 1..4)),
            ) {
                let entries: Vec<String> = hosts
                    .iter()
                    .map(|(h, p)| p.map_or_else(|| h.clone(), |p| format!("{h}:{p}")))
                    .collect();
                let chroot = chroot.map(|segs| format!("/{}", segs.join("/")));
                let text = format!("{}{}", entries.join(","), chroot.as_deref().unwrap_or(""));
                let parsed = ConnectString::parse(&text);
                prop_assert!(parsed.is_ok(), "{text:?}: {parsed:?}");
                let parsed = parsed.unwrap();
                prop_assert_eq!(&parsed.hosts, &entries);
                prop_assert_eq!(parsed.hosts_joined(), entries.join(","));
                prop_assert_eq!(parsed.chroot, chroot);
            }
        }
    }
}
