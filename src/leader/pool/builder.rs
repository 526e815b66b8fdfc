//! Building a pool: [`LeaderPoolBuilder`] checks every setting, joins the membership and starts
//! the pool's two tasks, the member's and the coordinator's.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span};

use super::assignment::check_assignment_size;
use super::coordinator::coordinate;
use super::member::follow;
use super::{LeaderPool, MEMBERS, Shared, job_path};
use crate::acl::NodeAcl;
use crate::checks;
use crate::error::{Error, Result};
use crate::leader::latch::LeaderLatch;
use crate::path;
use crate::session::Session;
use crate::state::ErrorPolicy;

/// Builds and starts a [`LeaderPool`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct LeaderPoolBuilder {
    session: Session,
    root: String,
    id: Option<String>,
    jobs: Vec<String>,
    policy: ErrorPolicy,
    acl: Option<NodeAcl>,
}

impl LeaderPoolBuilder {
    /// [`LeaderPool::builder`].
    pub(super) fn new(session: &Session, root: String) -> Self {
        Self {
            session: session.clone(),
            root,
            id: None,
            jobs: Vec::new(),
            policy: ErrorPolicy::default(),
            acl: None,
        }
    }

    /// This replica's id: its membership and every job node carry it. Ids must be unique in the
    /// pool: a replica restarted under the same id is the same member (it stands for the same
    /// jobs at once). Default: `<hostname>-<pid>-<8 hex digits>`.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The jobs (one election path each, `<root>/jobs/<job>`). Every replica of a pool must be
    /// given the same set; the coordinator's set is the one assigned.
    pub fn jobs<I, S>(mut self, jobs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.jobs = jobs.into_iter().map(Into::into).collect();
        self
    }

    /// Which connection states end a job's term (default [`ErrorPolicy::Standard`]).
    pub fn error_policy(mut self, policy: ErrorPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The ACL of every node the pool creates: the root and its missing ancestors, the
    /// membership latch's nodes under `members`, the `assignment`, `jobs` and each job's
    /// election path and nodes. Default: the session's [`default_acl`](Session::default_acl),
    /// decided at [`start`](Self::start): the creator's identity and read for anyone when the
    /// session has an identity, else [`NodeAcl::anyone_all`]. Every replica of a pool must be
    /// able to create under the others' paths: with a creator ACL, all of them authenticate as
    /// one identity. Paths that exist keep their ACL (see the latch spec's "Node ACL").
    ///
    /// # Curator
    /// Curator has no pool; its recipes take the framework's `aclProvider`.
    pub fn acl(mut self, acl: impl Into<NodeAcl>) -> Self {
        self.acl = Some(acl.into());
        self
    }

    /// Validates the settings, joins the pool's membership and follows the assignment in the
    /// background; returns at once.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for an unusable root or a job name that is not a single path
    /// segment, [`Error::InvalidArgument`] for an empty id, a creator ACL on a session without
    /// credentials, an id longer than
    /// [`LeaderPool::MAX_MEMBER_ID_LEN`], no jobs or a job given twice,
    /// [`Error::AssignmentTooLarge`] when the jobs' assignment could outgrow its share of the
    /// server's request limit ([`LeaderPool::assignment_worst_case`] over
    /// [`LeaderPool::assignment_budget`] of the session's
    /// [`jute_max_buffer`](crate::SessionBuilder::jute_max_buffer)), [`Error::Closed`] when the
    /// session is closed, [`Error::NoRuntime`].
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is sent before the returned pool exists.
    pub async fn start(self) -> Result<LeaderPool> {
        let (id, acl) = checks::identity(&self.session, &self.root, self.id, self.acl)?;
        if self.jobs.is_empty() {
            return Err(Error::InvalidArgument {
                what: "jobs",
                reason: "a pool needs at least one job".into(),
            });
        }
        let mut seen = BTreeSet::new();
        for job in &self.jobs {
            validate_job(&self.root, job)?;
            if !seen.insert(job) {
                return Err(Error::InvalidArgument {
                    what: "jobs",
                    reason: format!("job {job:?} is given twice"),
                });
            }
        }
        let (jute_max_buffer, _) = self.session.request_limits();
        check_assignment_size(&self.jobs, &id, jute_max_buffer)?;
        let runtime = checks::startable(&self.session)?;
        let members = LeaderLatch::builder(&self.session, path::join(&self.root, MEMBERS))
            .id(id.clone())
            .error_policy(self.policy)
            .acl(acl.clone())
            .start()
            .await?;
        let (assignment_tx, _) = watch::channel(None);
        let (coordinator_tx, _) = watch::channel(false);
        let (events_tx, _) = broadcast::channel(1024);
        let (done_tx, _) = watch::channel(false);
        let terms = self
            .jobs
            .iter()
            .map(|job| (job.clone(), watch::channel(None).0))
            .collect();
        let shared = Arc::new(Shared {
            session: self.session,
            root: self.root,
            id,
            jobs: self.jobs,
            policy: self.policy,
            acl,
            stop: CancellationToken::new(),
            terms,
            assignment_tx,
            coordinator_tx,
            events_tx,
            done_tx,
            failure: std::sync::OnceLock::new(),
        });
        let members = Arc::new(members);
        let span = info_span!(parent: None, "pool", root = %shared.root, id = %shared.id);
        let follower = runtime.spawn(follow(Arc::clone(&shared)).instrument(span.clone()));
        let coordinator =
            runtime.spawn(coordinate(Arc::clone(&shared), Arc::clone(&members)).instrument(span));
        Ok(LeaderPool {
            shared,
            members,
            tasks: Mutex::new(vec![follower, coordinator]),
        })
    }
}

/// Checks a job name: one path segment under `<root>/jobs`.
fn validate_job(root: &str, job: &str) -> Result<()> {
    if job.contains('/') {
        return Err(Error::InvalidPath {
            path: job.to_owned(),
            reason: "a job name is one path segment (no '/')",
        });
    }
    path::validate_path(&job_path(root, job))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_names_are_single_path_segments() {
        assert!(validate_job("/pools/p", "billing").is_ok());
        for bad in ["", "a/b", ".", ".."] {
            assert!(validate_job("/pools/p", bad).is_err(), "{bad:?}");
        }
    }
}
