//! What every member runs: the follower reads the assignment (watching it) and stands, with one
//! [`LeaderLatch`] per job, for the jobs it gives this replica, forwarding each job's terms to
//! the handle's watches and event stream.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::StreamExt;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};
use zookeeper_client::{CreateMode, OneshotWatcher};

use super::{
    ASSIGNMENT, Assignment, Change, JOBS, PoolEvent, Shared, classify, job_path, log_state,
};
use crate::error::{Backoff, Error};
use crate::fencing::Leadership;
use crate::leader::latch::{CloseMode, LatchEvent, LeaderLatch};
use crate::path;
use crate::session::{Live, SessionStatus, StatusFeed, hex};

/// Publishes a job's term (or its end) to its watch and the event stream. `last` is the term
/// this latch reported last.
fn forward(shared: &Shared, job: &str, event: LatchEvent, last: &mut Option<Leadership>) {
    let Some(tx) = shared.terms.get(job) else {
        return;
    };
    match event {
        LatchEvent::Leader(term) => {
            if last.as_ref() == Some(&term) {
                return; // seen already, through the latch's state
            }
            info!(job, token = %term.token(), node = %term.path(), "leading job");
            debug!(job, token = %term.token(), session_id = %hex(term.session_id()), "leading the job on this session");
            tx.send_replace(Some(term.clone()));
            *last = Some(term.clone());
            let _ = shared.events_tx.send(PoolEvent::Leader {
                job: job.to_owned(),
                term,
            });
        }
        LatchEvent::NotLeader { token, reason } => {
            info!(job, %token, %reason, "no longer leading job");
            let Some(term) = last.take().filter(|t| t.token() == token) else {
                return;
            };
            // A newer latch of the same job may already have reported its term.
            tx.send_if_modified(|t| {
                let ours = t.as_ref().is_some_and(|t| t.token() == token);
                if ours {
                    *t = None;
                }
                ours
            });
            let _ = shared.events_tx.send(PoolEvent::NotLeader {
                job: job.to_owned(),
                term,
                reason,
            });
        }
        LatchEvent::Failed(err) => shared.fail(err),
        _ => {}
    }
}

fn report_state(shared: &Shared, status: &SessionStatus) {
    log_state(status, |state| {
        let _ = shared.events_tx.send(PoolEvent::State(state));
    });
}

/// The job latches this replica holds, and the releases still deleting their nodes.
struct Stands {
    latches: BTreeMap<String, LeaderLatch>,
    releasing: JoinSet<()>,
    forwarders: JoinSet<()>,
}

impl Stands {
    /// Stands for the jobs `assignment` gives this replica and releases the others.
    async fn apply(&mut self, shared: &Arc<Shared>, assignment: &Assignment) {
        let mine: BTreeSet<&str> = shared
            .jobs
            .iter()
            .map(String::as_str)
            .filter(|job| assignment.jobs.get(*job) == Some(&shared.id))
            .collect();
        for (job, owner) in &assignment.jobs {
            if *owner == shared.id && !shared.jobs.contains(job) {
                warn!(
                    job,
                    "the assignment gives this replica a job it was not configured with; nobody leads it (replicas must share one job list)"
                );
            }
        }
        let release: Vec<String> = self
            .latches
            .keys()
            .filter(|job| !mine.contains(job.as_str()))
            .cloned()
            .collect();
        for job in release {
            if let Some(latch) = self.latches.remove(&job) {
                let to = assignment.jobs.get(&job).map_or("nobody", String::as_str);
                info!(job, to = ?to, "releasing job to its new assignee");
                self.releasing.spawn(async move {
                    let _ = latch.close().await;
                });
            }
        }
        let new: Vec<&str> = mine
            .iter()
            .copied()
            .filter(|job| !self.latches.contains_key(*job))
            .collect();
        if !new.is_empty() && !shared.stop.is_cancelled() {
            prepare_paths(shared, &new).await;
        }
        for job in mine {
            if self.latches.contains_key(job) || shared.stop.is_cancelled() {
                continue;
            }
            let started = LeaderLatch::builder(&shared.session, job_path(&shared.root, job))
                .id(shared.id.clone())
                .close_mode(CloseMode::NotifyLeader)
                .error_policy(shared.policy)
                .acl(shared.acl.clone())
                .start()
                .await;
            match started {
                Ok(latch) => {
                    info!(job, "standing for job");
                    let events = latch.events();
                    // A term won before the subscription has no event in the stream.
                    let won = latch.current_leadership();
                    let shared = Arc::clone(shared);
                    let job_name = job.to_owned();
                    self.forwarders.spawn(async move {
                        let mut events = Box::pin(events);
                        let mut last = None;
                        if let Some(term) = won {
                            forward(&shared, &job_name, LatchEvent::Leader(term), &mut last);
                        }
                        while let Some(event) = events.next().await {
                            forward(&shared, &job_name, event, &mut last);
                        }
                    });
                    self.latches.insert(job.to_owned(), latch);
                }
                Err(e) => warn!(job, error = %e, "could not stand for job"),
            }
        }
    }

    /// Releases every job and waits until all nodes are deleted and all events forwarded.
    async fn release_all(mut self) {
        for (_, latch) in std::mem::take(&mut self.latches) {
            self.releasing.spawn(async move {
                let _ = latch.close().await;
            });
        }
        while self.releasing.join_next().await.is_some() {}
        while self.forwarders.join_next().await.is_some() {}
    }
}

/// How many job paths one `multi` creates at most (a create of a container under a short root
/// is about 100 bytes: far inside `jute.maxbuffer`).
const PATHS_PER_MULTI: usize = 200;

/// Creates the paths of `jobs` that do not exist yet: one listing of the jobs' parent and one
/// `multi` per 200 missing paths, instead of a latch's failed create and `mkdir` for each job (two
/// requests per job at a pool's first start). Best effort: a path another replica creates
/// meanwhile fails the `multi`, and each latch then creates its own path as it always can.
async fn prepare_paths(shared: &Shared, jobs: &[&str]) {
    let Ok(live) = shared.session.live() else {
        return;
    };
    let parent = path::join(&shared.root, JOBS);
    let container = CreateMode::Container.with_acls(shared.acl.as_acls());
    let existing: BTreeSet<String> = match live.client.list_children(&parent).await {
        Ok(children) => children.into_iter().collect(),
        Err(zookeeper_client::Error::NoNode) => {
            if let Err(e) = live.client.mkdir(&parent, &container).await
                && e != zookeeper_client::Error::NodeExists
            {
                debug!(parent, error = %e, "could not create the jobs' parent; each latch creates its own path");
                return;
            }
            BTreeSet::new()
        }
        Err(e) => {
            debug!(parent, error = %e, "could not list the jobs' paths; each latch creates its own");
            return;
        }
    };
    let missing: Vec<&str> = jobs
        .iter()
        .copied()
        .filter(|job| !existing.contains(*job))
        .collect();
    for chunk in missing.chunks(PATHS_PER_MULTI) {
        let mut multi = live.client.new_multi_writer();
        for job in chunk {
            if multi
                .add_create(&job_path(&shared.root, job), &[], &container)
                .is_err()
            {
                return;
            }
        }
        if let Err(e) = multi.commit().await {
            debug!(parent, error = ?e, "could not create the jobs' paths in one write; each latch creates its own");
        }
    }
}

/// The follower: reads the assignment (watching it) and stands for this replica's jobs.
pub(super) async fn follow(shared: Arc<Shared>) {
    let mut feed = StatusFeed::new(&shared.session);
    let mut stands = Stands {
        latches: BTreeMap::new(),
        releasing: JoinSet::new(),
        forwarders: JoinSet::new(),
    };
    let mut backoff = Backoff::new(shared.session.connection_timeout());
    'session: loop {
        let seen = |status: &SessionStatus| report_state(&shared, status);
        let Some(live) = feed.wait_quorum(&shared.stop, seen).await else {
            break;
        };
        loop {
            // Reap finished releases and forwarders as we go.
            while stands.releasing.try_join_next().is_some() {}
            while stands.forwarders.try_join_next().is_some() {}
            let read = tokio::select! {
                biased;
                _ = shared.stop.cancelled() => break 'session,
                read = read_assignment(&live, &shared.root) => read,
            };
            let (assignment, watcher) = match read {
                Ok(read) => {
                    backoff.succeed();
                    read
                }
                Err(e) if crate::error::is_refusal(&e) => {
                    shared.fail(Error::Refused {
                        operation: "read",
                        path: path::join(&shared.root, ASSIGNMENT),
                        source: e,
                    });
                    break 'session;
                }
                Err(e) => {
                    let seen = |status: &SessionStatus| report_state(&shared, status);
                    if !feed
                        .pause_after(
                            "reading the assignment",
                            &e,
                            backoff.fail(),
                            &shared.stop,
                            seen,
                        )
                        .await
                    {
                        break 'session;
                    }
                    continue 'session;
                }
            };
            // No assignment (yet, or deleted, or garbled): keep what we stand for until the
            // coordinator writes one; releasing everything would only make jobs leaderless
            // meanwhile. Publishing its absence wakes the coordinator (this replica's, if it is
            // the one), which writes it again from the current leaders: nothing moves.
            //
            // Always published, also when the last read found none either: the coordinator
            // waits for a publication that differs from what it wrote, and a follower that never
            // saw its write (the node rewritten again, garbled, before this read) would
            // otherwise leave it waiting with a garbled node in place.
            if assignment.is_none() {
                shared.assignment_tx.send_modify(|a| *a = None);
            }
            if let Some(assignment) = assignment {
                let changed = shared.assignment_tx.send_if_modified(|a| {
                    let changed = a.as_ref() != Some(&assignment);
                    if changed {
                        *a = Some(assignment.clone());
                    }
                    changed
                });
                if changed {
                    info!(mine = ?assignment.jobs_of(&shared.id), members = assignment.members.len(),
                        "read a new assignment");
                    let _ = shared
                        .events_tx
                        .send(PoolEvent::Assignment(assignment.clone()));
                }
                stands.apply(&shared, &assignment).await;
            }
            let mut watch = Box::pin(watcher.changed());
            loop {
                tokio::select! {
                    biased;
                    _ = shared.stop.cancelled() => break 'session,
                    event = &mut watch => {
                        debug!(event = ?event.event_type, "assignment watch fired");
                        break;
                    }
                    status = feed.next() => {
                        report_state(&shared, &status);
                        match classify(&status, live.epoch) {
                            Change::Reconnected => break,
                            Change::Interrupted => {}
                            Change::SessionGone => continue 'session,
                        }
                    }
                }
            }
        }
    }
    stands.release_all().await;
    shared.done_tx.send_replace(true);
    debug!("pool stopped");
}

/// Reads the assignment and watches it (its data, or its creation while it does not exist).
async fn read_assignment(
    live: &Live,
    root: &str,
) -> std::result::Result<(Option<Assignment>, OneshotWatcher), zookeeper_client::Error> {
    use zookeeper_client::Error as Zk;
    let node = path::join(root, ASSIGNMENT);
    loop {
        match live.client.get_and_watch_data(&node).await {
            Ok((data, _, watcher)) => {
                let parsed = match serde_json::from_slice::<Assignment>(&data) {
                    Ok(a) => Some(a),
                    Err(e) => {
                        warn!(node, error = %e, "the assignment is not valid JSON; waiting for the coordinator to rewrite it");
                        None
                    }
                };
                return Ok((parsed, watcher));
            }
            Err(Zk::NoNode) => match live.client.check_and_watch_stat(&node).await {
                Ok((None, watcher)) => return Ok((None, watcher)),
                Ok((Some(_), _)) => continue,
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e),
        }
    }
}
