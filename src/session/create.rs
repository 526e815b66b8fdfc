//! Curator's protected create (`withProtection()`), shared by all recipes: an
//! ephemeral-sequential node whose name carries a uuid, so that a create whose reply was lost
//! finds its node again, and that never leaves an orphan node behind (CURATOR-18, CURATOR-498).

use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};
use zookeeper_client::CreateMode;

use super::{Live, Session, hex};
use crate::acl::NodeAcl;
use crate::error::is_transient;
use crate::error::{Error, Result};
use crate::path;
use crate::state::ConnectionState;

impl Session {
    /// Creates an ephemeral-sequential node `<parent>/_c_<uuid>-<lock_name><seq>` with `data`,
    /// Curator's protected create, creating missing parents as containers; the node and the
    /// parents get `acl`.
    ///
    /// When `list` is set, the parent's children are listed in the same round trip (the request is
    /// queued right behind the create), so the listing already contains the new node.
    ///
    /// After a connection loss it looks for its node by the uuid among the parent's children and
    /// adopts it only if the node belongs to the current session (CURATOR-498); a node of an
    /// earlier session is deleted and the create repeated. It gives up when `cancel` fires, and
    /// then deletes whatever it may have created; if the future is dropped mid-way, a background
    /// task does that deletion (CURATOR-18).
    ///
    /// # Errors
    /// [`Error::Closed`] when cancelled or the session closes; ZooKeeper errors other than
    /// connection loss and expiry (which are retried).
    ///
    /// # Cancel safety
    /// Dropping the future leaves no node behind once the background cleanup has run: the cleanup
    /// lists the parent on the same client, behind the in-flight create, so it sees the node if
    /// the create succeeded.
    pub(crate) async fn create_protected(
        &self,
        parent: &str,
        lock_name: &str,
        data: &[u8],
        acl: &NodeAcl,
        list: bool,
        cancel: &CancellationToken,
    ) -> Result<CreatedNode> {
        let uuid = uuid::Uuid::new_v4();
        let prefix = path::protected_prefix(&uuid);
        let mut guard = OrphanGuard {
            session: Some(self.clone()),
            parent: parent.to_owned(),
            prefix: prefix.clone(),
        };
        let result = tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(Error::Closed),
            r = self.create_protected_attempts(parent, lock_name, &prefix, data, acl, list) => r,
        };
        match result {
            Ok(node) => {
                guard.session = None;
                Ok(node)
            }
            Err(err) => {
                // Inline cleanup, so `close().await` returns with the node gone; the guard stays
                // armed in case this future is dropped meanwhile.
                self.delete_protected(parent, &prefix).await;
                guard.session = None;
                Err(err)
            }
        }
    }

    async fn create_protected_attempts(
        &self,
        parent: &str,
        lock_name: &str,
        prefix: &str,
        data: &[u8],
        acl: &NodeAcl,
        list: bool,
    ) -> Result<CreatedNode> {
        let node_prefix = path::join(parent, &format!("{prefix}{lock_name}"));
        let ephemeral = CreateMode::EphemeralSequential.with_acls(acl.as_acls());
        // Whether an earlier attempt may have created a node whose reply we never saw.
        let mut maybe_created = false;
        loop {
            if maybe_created {
                // Let the supervisor publish what broke before looking again (a retired client
                // fails at once, without any I/O to yield on).
                tokio::task::yield_now().await;
            }
            let live = self.wait_live(self.connection_timeout()).await?;
            if maybe_created {
                let found = match self.find_protected(&live, parent, prefix).await {
                    Ok(found) => found,
                    Err(e) if is_transient(&e) => continue,
                    Err(e) => return Err(e.into()),
                };
                // Ours: made on this session. Keep the first, delete every other node with our
                // prefix (a second create that also succeeded, or a node of an earlier session,
                // CURATOR-498) so that none stays in line behind our back.
                let adopt = found
                    .iter()
                    .position(|(_, stat)| stat.ephemeral_owner == live.session_id);
                let mut interrupted = false;
                for (i, (name, stat)) in found.iter().enumerate() {
                    if Some(i) == adopt {
                        continue;
                    }
                    warn!(parent, node = %name, owner = %hex(stat.ephemeral_owner),
                        "deleting a second node of our protected create (an earlier attempt's, or an earlier session's: CURATOR-498)");
                    match live.client.delete(&path::join(parent, name), None).await {
                        Ok(()) | Err(zookeeper_client::Error::NoNode) => {}
                        Err(e) if is_transient(&e) => {
                            interrupted = true;
                            break;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                if interrupted {
                    continue;
                }
                if let Some((name, stat)) = adopt.and_then(|i| found.into_iter().nth(i)) {
                    debug!(parent, node = %name, "adopted protected node after a lost create reply");
                    let children = if list {
                        live.client.list_children(parent).await.ok()
                    } else {
                        None
                    };
                    let sequence = path::sequence_of(&name, lock_name).unwrap_or_default();
                    return Ok(CreatedNode {
                        path: path::join(parent, &name),
                        name,
                        czxid: stat.czxid,
                        sequence,
                        epoch: live.epoch,
                        session_id: live.session_id,
                        children,
                    });
                }
            }
            let create = live.client.create(&node_prefix, data, &ephemeral);
            let listing = list.then(|| live.client.list_children(parent));
            match create.await {
                Ok((stat, sequence)) => {
                    let name = format!("{prefix}{lock_name}{sequence}");
                    let children = match listing {
                        Some(l) => l.await.ok(),
                        None => None,
                    };
                    return Ok(CreatedNode {
                        path: path::join(parent, &name),
                        name,
                        czxid: stat.czxid,
                        sequence: u64::try_from(sequence.into_i64()).unwrap_or_default(),
                        epoch: live.epoch,
                        session_id: live.session_id,
                        children,
                    });
                }
                Err(zookeeper_client::Error::NoNode) => {
                    self.create_parents(&live, parent, acl).await?;
                }
                Err(e) if is_transient(&e) => {
                    debug!(parent, error = %e, "protected create interrupted; will look for our node");
                    maybe_created = true;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Creates `path` and its missing ancestors as container nodes with `acl` (Curator's
    /// `creatingParentContainersIfNeeded`, which gives parents the ACL provider's ACL too).
    async fn create_parents(&self, live: &Live, path: &str, acl: &NodeAcl) -> Result<()> {
        let container = CreateMode::Container.with_acls(acl.as_acls());
        match live.client.mkdir(path, &container).await {
            Ok(()) | Err(zookeeper_client::Error::NodeExists) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The children of `parent` that carry `prefix`, in sequence order, with their stats. A
    /// `sync` goes first, in the same round trip: a server that lags behind the leader could
    /// otherwise hide a node that an earlier attempt made.
    async fn find_protected(
        &self,
        live: &Live,
        parent: &str,
        prefix: &str,
    ) -> std::result::Result<Vec<(String, zookeeper_client::Stat)>, zookeeper_client::Error> {
        let sync = live.client.sync(parent);
        let listing = live.client.list_children(parent);
        let children = match sync.await.and(listing.await) {
            Ok(c) => c,
            Err(zookeeper_client::Error::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut ours: Vec<String> = children
            .into_iter()
            .filter(|c| c.starts_with(prefix))
            .collect();
        ours.sort();
        let stats: Vec<_> = ours
            .iter()
            .map(|name| live.client.check_stat(&path::join(parent, name)))
            .collect();
        let mut found = Vec::with_capacity(ours.len());
        for (name, stat) in ours.into_iter().zip(stats) {
            if let Some(stat) = stat.await? {
                found.push((name, stat));
            }
        }
        Ok(found)
    }

    /// The ZooKeeper session current now, lapsed lease or not; between two clients, the next
    /// one's. `None` once lost or closed.
    async fn current_session_id(&self) -> Option<i64> {
        let mut status = self.watch_status();
        loop {
            if self.shared.stop.is_cancelled() || status.borrow_and_update().closed {
                return None;
            }
            if let Some(live) = self.shared.current.read().ok()?.as_ref() {
                return (!live.lease.is_lost()).then_some(live.session_id);
            }
            if status.borrow().state == Some(ConnectionState::Lost) {
                return None;
            }
            if status.changed().await.is_err() {
                return None;
            }
        }
    }

    /// Deletes every child of `parent` that carries `prefix`: the nodes of an abandoned create.
    /// Such a node belongs to the session current when the create was sent; it is deleted once a
    /// client of that session is connected, however long that takes (a node left in line would
    /// hold the election for as long as its session lives), and dies with that session otherwise.
    async fn delete_protected(&self, parent: &str, prefix: &str) {
        let Some(owner) = self.current_session_id().await else {
            return;
        };
        loop {
            let Some(live) = self.connected_client_of(owner).await else {
                return;
            };
            match self.delete_protected_once(&live, parent, prefix).await {
                Ok(()) => return,
                // Let the supervisor publish what broke before looking again (a retired client
                // fails at once, without any I/O to yield on).
                Err(e) if is_transient(&e) => tokio::task::yield_now().await,
                Err(e) => {
                    warn!(parent, prefix, error = %e, "could not delete the nodes of an abandoned create");
                    return;
                }
            }
        }
    }

    async fn delete_protected_once(
        &self,
        live: &Live,
        parent: &str,
        prefix: &str,
    ) -> std::result::Result<(), zookeeper_client::Error> {
        // After a `sync`, in the same round trip: a lagging server could hide the node.
        let sync = live.client.sync(parent);
        let listing = live.client.list_children(parent);
        let children = match sync.await.and(listing.await) {
            Ok(children) => children,
            Err(zookeeper_client::Error::NoNode) => return Ok(()),
            Err(e) => return Err(e),
        };
        for name in children.into_iter().filter(|c| c.starts_with(prefix)) {
            let target = path::join(parent, &name);
            match live.client.delete(&target, None).await {
                Ok(()) | Err(zookeeper_client::Error::NoNode) => {
                    debug!(node = %target, "deleted node of an abandoned create")
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The node made by [`Session::create_protected`].
#[derive(Debug, Clone)]
pub(crate) struct CreatedNode {
    pub(crate) path: String,
    pub(crate) name: String,
    pub(crate) czxid: i64,
    pub(crate) sequence: u64,
    pub(crate) epoch: u64,
    pub(crate) session_id: i64,
    pub(crate) children: Option<Vec<String>>,
}

/// Deletes the nodes of an abandoned protected create in the background.
struct OrphanGuard {
    session: Option<Session>,
    parent: String,
    prefix: String,
}

impl Drop for OrphanGuard {
    fn drop(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        let parent = std::mem::take(&mut self.parent);
        let prefix = std::mem::take(&mut self.prefix);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move { session.delete_protected(&parent, &prefix).await });
            }
            Err(_) => warn!(
                parent,
                prefix,
                "no runtime to clean up an abandoned create; the node ends with its session"
            ),
        }
    }
}
