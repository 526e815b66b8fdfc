//! The ACL of the nodes a recipe creates ([`NodeAcl`] has the rules), and the default each
//! recipe, job, pool and chroot falls back to ([`NodeAcl::default_for`]).

use std::sync::Arc;

use zookeeper_client::{Acl, Acls};

use crate::error::{Error, Result};

/// The ACL of the nodes a recipe creates: its contender nodes, the election path and its missing
/// ancestors (created as containers), and the nodes a fenced write creates
/// ([`FencedOp::create`](crate::FencedOp::create)).
///
/// ZooKeeper checks a delete against the ACL of the *parent*: who may delete the leader's node is
/// decided by the election path's ACL, not by the node's own. So the option protects an election
/// only where the recipe creates the election path itself; an election path that already exists
/// keeps its ACL, and an operator must set it (`setAcl`, see the recipe specs).
///
/// # Examples
/// ```no_run
/// # async fn demo() -> zookeeper_recipes::Result<()> {
/// use zookeeper_recipes::{LeaderLatch, NodeAcl, Session};
///
/// // Every replica authenticates as the same digest user: only they can delete or write the
/// // election's nodes, or take part at all.
/// let session = Session::builder("127.0.0.1:2181")
///     .digest_auth("statement-job", "s3cret")
///     .connect()
///     .await?;
/// let latch = LeaderLatch::builder(&session, "/election/statement-job")
///     .acl(NodeAcl::creator_all())
///     .start()
///     .await?;
/// # Ok(()) }
/// ```
///
/// # The default: least privilege once the session has an identity
/// A recipe, job or pool given no ACL, and a chroot the session creates
/// ([`SessionBuilder::chroot_acl`](crate::SessionBuilder::chroot_acl)), get
/// [`Session::default_acl`](crate::Session::default_acl), decided when the recipe starts (the
/// job and the mutex: when they are built):
///
/// - the session has an identity (digest credentials, a SASL login, or a TLS client
///   certificate): [`creator_all_anyone_read`](Self::creator_all_anyone_read), so that only
///   that identity may join, write or delete, and monitoring may still read;
/// - it has none: [`anyone_all`](Self::anyone_all), as ZooKeeper and Curator (nothing else could
///   work: a creator ACL needs an identity).
///
/// A client certificate counts as an identity although it is one only where the servers run
/// ZooKeeper's x509 auth provider (`authProvider.x509`): on servers without it the creator ACL
/// names nobody, and the server refuses the create (`InvalidAcl`, [`Error::Refused`]). Set
/// `.acl(NodeAcl::anyone_all())` there, or on any recipe that replicas with *different*
/// identities must share. An explicit `.acl(..)` always wins.
///
/// # Curator
/// Curator sets ACLs on the framework (`CuratorFrameworkFactory.builder().aclProvider(..)`) and
/// applies the provider's ACL to parents it creates as well. Here the ACL is a recipe option; the
/// presets are `ZooDefs.Ids.OPEN_ACL_UNSAFE` ([`NodeAcl::anyone_all`], Curator's default and ours
/// without an identity) and `CREATOR_ALL_ACL` ([`NodeAcl::creator_all`]). Curator stays open
/// with credentials unless told otherwise; here a session with an identity closes what it
/// creates by default.
///
/// The ACL a recipe gives the nodes it creates. Cheap to clone.
///
/// Every participant must be able to read the others' nodes: a contender watches its
/// predecessor with `getData`, and [`participants`](crate::LeaderLatch::participants) reads every
/// node. With [`creator_all`](Self::creator_all) that means every participant authenticates as
/// the same identity; [`creator_all_anyone_read`](Self::creator_all_anyone_read) lets anyone read
/// (monitoring, `zkr participants` without credentials) while only the creator's identity may
/// join, delete or write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAcl {
    acls: Arc<[Acl]>,
}

impl NodeAcl {
    /// Anyone may do anything (`world:anyone`, all permissions): ZooKeeper's and Curator's
    /// default, and the default here for a session without an identity
    /// ([`default_for`](Self::default_for)).
    pub fn anyone_all() -> Self {
        Self::from_acls(Acls::anyone_all())
    }

    /// All permissions for the identities the creating session authenticated with (`auth`
    /// scheme), nothing for anyone else. The server expands it into one entry per identity of
    /// the session: `digest:<user>:<hash>`
    /// ([`SessionBuilder::digest_auth`](crate::SessionBuilder::digest_auth)), `sasl:<user>`
    /// (`SessionBuilder::sasl_digest`, feature `sasl-digest-md5`), and `x509:<subject DN>` for a
    /// TLS client certificate (`TlsConfig::identity_files`, feature `tls`) where the servers run
    /// ZooKeeper's x509 auth provider (`authProvider.x509`). The session needs one of them; a
    /// recipe built with this ACL on a session without any is rejected at construction. A
    /// client certificate on servers without the x509 provider gives no identity: the server
    /// then refuses the create (`InvalidAcl`, [`Error::Refused`]).
    pub fn creator_all() -> Self {
        Self::from_acls(Acls::creator_all())
    }

    /// [`creator_all`](Self::creator_all), plus read for anyone: others may list the election and
    /// read ids, but not join, delete or write. The default for a session with an identity
    /// ([`default_for`](Self::default_for)).
    pub fn creator_all_anyone_read() -> Self {
        let mut acls: Vec<Acl> = Acls::creator_all().to_vec();
        acls.extend(Acls::anyone_read().iter().cloned());
        NodeAcl { acls: acls.into() }
    }

    /// The ACL a recipe, job, pool or chroot gets when none is set: [`creator_all_anyone_read`]
    /// when the session has an identity (`has_identity`), [`anyone_all`] otherwise. See "The
    /// default" above; [`Session::default_acl`](crate::Session::default_acl) applies it to a
    /// session.
    ///
    /// [`creator_all_anyone_read`]: Self::creator_all_anyone_read
    /// [`anyone_all`]: Self::anyone_all
    pub fn default_for(has_identity: bool) -> Self {
        if has_identity {
            Self::creator_all_anyone_read()
        } else {
            Self::anyone_all()
        }
    }

    /// An ACL of your own, e.g. `digest:<user>:<base64 sha1>` entries for several identities.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `acls` is empty (the server would reject it).
    pub fn new(acls: impl IntoIterator<Item = Acl>) -> Result<Self> {
        let acls: Arc<[Acl]> = acls.into_iter().collect();
        if acls.is_empty() {
            return Err(Error::InvalidArgument {
                what: "node ACL",
                reason: "must have at least one entry".into(),
            });
        }
        Ok(NodeAcl { acls })
    }

    fn from_acls(acls: Acls<'_>) -> Self {
        NodeAcl {
            acls: acls.iter().cloned().collect(),
        }
    }

    /// The entries.
    pub fn entries(&self) -> &[Acl] {
        &self.acls
    }

    /// Whether an entry names the creator (`auth` scheme), which only a session with
    /// credentials can use.
    pub fn needs_credentials(&self) -> bool {
        self.acls.iter().any(|acl| acl.scheme() == "auth")
    }

    /// The entries as zookeeper-client takes them.
    pub(crate) fn as_acls(&self) -> Acls<'_> {
        Acls::new(&self.acls)
    }

    /// Checks that a session with (`has_credentials`) or without credentials can create nodes
    /// with this ACL.
    pub(crate) fn check_usable(&self, has_credentials: bool) -> Result<()> {
        if self.needs_credentials() && !has_credentials {
            return Err(Error::InvalidArgument {
                what: "node ACL",
                reason: "a creator ACL (scheme `auth`) needs a session with an identity \
                         (SessionBuilder::digest_auth, sasl_digest, or a TLS client \
                         certificate); the server would refuse every node"
                    .into(),
            });
        }
        Ok(())
    }
}

impl From<Acls<'_>> for NodeAcl {
    fn from(acls: Acls<'_>) -> Self {
        Self::from_acls(acls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zookeeper_client::{AuthId, Permission};

    #[test]
    fn presets_are_zookeepers_well_known_acls() {
        let open = NodeAcl::anyone_all();
        assert_eq!(open.entries().len(), 1);
        assert_eq!(open.entries()[0].scheme(), "world");
        assert_eq!(open.entries()[0].permission(), Permission::ALL);
        let creator = NodeAcl::creator_all();
        assert_eq!(creator.entries()[0].scheme(), "auth");
        assert!(creator.needs_credentials());
        let read = NodeAcl::creator_all_anyone_read();
        assert_eq!(read.entries().len(), 2);
        assert!(
            read.entries()
                .iter()
                .any(|a| a.scheme() == "world" && a.permission() == Permission::READ)
        );
        assert_eq!(NodeAcl::from(Acls::creator_all()), creator);
    }

    #[test]
    fn the_default_is_the_creator_and_read_for_anyone_only_with_an_identity() {
        assert_eq!(NodeAcl::default_for(false), NodeAcl::anyone_all());
        let closed = NodeAcl::default_for(true);
        assert_eq!(closed, NodeAcl::creator_all_anyone_read());
        assert!(closed.needs_credentials());
        assert!(closed.check_usable(true).is_ok());
        // Nobody but the creator may write, create or delete: others only read.
        for entry in closed.entries().iter().filter(|a| a.scheme() == "world") {
            assert_eq!(entry.permission(), Permission::READ);
        }
    }

    #[test]
    fn an_empty_acl_and_a_creator_acl_without_credentials_are_rejected() {
        assert!(matches!(
            NodeAcl::new([]),
            Err(Error::InvalidArgument {
                what: "node ACL",
                ..
            })
        ));
        assert!(NodeAcl::creator_all().check_usable(false).is_err());
        assert!(NodeAcl::creator_all().check_usable(true).is_ok());
        assert!(NodeAcl::anyone_all().check_usable(false).is_ok());
        let digest = NodeAcl::new([Acl::new(
            Permission::ALL,
            AuthId::new("digest", "job:x2kbSvSnI9/TeoZlIJ9sy1X+tFA="),
        )])
        .unwrap();
        assert!(!digest.needs_credentials());
    }

    #[test]
    fn node_acl_is_send_sync() {
        fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
        assert_send_sync::<NodeAcl>();
    }
}
