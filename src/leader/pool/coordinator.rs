//! What the coordinating member runs: while this replica leads the membership latch, it keeps
//! the assignment balanced over the live members, one round per change of the membership or of
//! the stored assignment, each write fenced by its term.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;
use tracing::{debug, info, warn};
use zookeeper_client::OneshotWatcher;

use super::assignment::{moves, rebalance};
use super::{ASSIGNMENT, Assignment, MEMBERS, Shared, job_path};
use crate::contender;
use crate::error::{Backoff, Error, Result};
use crate::fencing::{FencedOp, Leadership};
use crate::leader::latch::LeaderLatch;
use crate::path::{self, LATCH_LOCK_NAME};
use crate::session::hex;

/// The coordinator: while this replica leads the membership latch, keeps the assignment
/// balanced over the live members.
pub(super) async fn coordinate(shared: Arc<Shared>, members: Arc<LeaderLatch>) {
    let mut assignment_rx = shared.assignment_tx.subscribe();
    loop {
        let term = tokio::select! {
            _ = shared.stop.cancelled() => break,
            term = members.await_leadership() => match term {
                Ok(term) => term,
                Err(_) => {
                    if let Some(err) = members.failure() {
                        shared.fail(err);
                    }
                    break;
                }
            },
        };
        shared.coordinator_tx.send_replace(true);
        info!(token = %term.token(), "coordinating the pool");
        debug!(token = %term.token(), session_id = %hex(term.session_id()), "coordinating on this session");
        let mut backoff = Backoff::new(shared.session.connection_timeout());
        while !term.has_ended() {
            // Marked seen before the round reads the server: a change published while it runs
            // (the assignment deleted just after it was read) still wakes the next wait.
            assignment_rx.borrow_and_update();
            match coordinate_once(&shared, &term).await {
                Ok((watcher, target)) => {
                    backoff.succeed();
                    tokio::select! {
                        _ = shared.stop.cancelled() => break,
                        _ = term.ended() => break,
                        event = watcher.changed() => debug!(event = ?event.event_type, "membership changed"),
                        changed = assignment_changed(&mut assignment_rx, &target) => {
                            if changed.is_err() {
                                break;
                            }
                            debug!("the assignment changed");
                        }
                    }
                }
                Err(Error::Zookeeper(e)) if crate::error::is_refusal(&e) => {
                    shared.fail(Error::Refused {
                        operation: "coordinate",
                        path: shared.root.clone(),
                        source: e,
                    });
                    break;
                }
                Err(e) => {
                    match e {
                        Error::ConnectionLoss
                        | Error::SessionExpired
                        | Error::NotLeader { .. }
                        | Error::Timeout(_)
                        | Error::Closed => {
                            debug!(error = %e, "coordinating was interrupted; trying again")
                        }
                        _ => warn!(error = %e, "coordinating failed; trying again"),
                    }
                    let pause = backoff.fail();
                    tokio::select! {
                        _ = shared.stop.cancelled() => break,
                        _ = term.ended() => break,
                        _ = tokio::time::sleep(pause) => {}
                    }
                }
            }
        }
        shared.coordinator_tx.send_replace(false);
        info!(token = %term.token(), "no longer coordinating the pool");
        if shared.stop.is_cancelled() {
            break;
        }
    }
    // However the pool stopped (closed, dropped, or refused by the server), it is no member any
    // more: a member that stands for nothing would be assigned jobs that nobody leads, and as
    // coordinator it would keep everyone else from coordinating.
    let _ = members.close().await;
}

/// Waits until the assignment the replica publishes (what it read from the server) differs from
/// `target`, the one the last round left stored. Only publications after the last mark count; the
/// replica reading back what the round wrote is no reason for another round.
async fn assignment_changed(
    rx: &mut watch::Receiver<Option<Assignment>>,
    target: &Assignment,
) -> std::result::Result<(), watch::error::RecvError> {
    loop {
        rx.changed().await?;
        if rx.borrow_and_update().as_ref() != Some(target) {
            return Ok(());
        }
    }
}

/// One round: watch the membership, compute the assignment, write it (fenced by the
/// coordinator's term) if it differs from the stored one. Returns the membership watch and the
/// assignment now stored.
async fn coordinate_once(
    shared: &Shared,
    term: &Leadership,
) -> Result<(OneshotWatcher, Assignment)> {
    use zookeeper_client::Error as Zk;
    let live = shared.session.live()?;
    if live.session_id != term.session_id() {
        return Err(Error::NotLeader {
            reason: "the coordinator's session is gone",
        });
    }
    let members_path = path::join(&shared.root, MEMBERS);
    let (children, watcher) = live.client.list_and_watch_children(&members_path).await?;
    // The assignment and the members' nodes are read in one round trip: every read is queued
    // before the first is awaited.
    let node = path::join(&shared.root, ASSIGNMENT);
    let stored_read = live.client.get_data(&node);
    let mut members: Vec<String> = Vec::new();
    for p in contender::read_participants(&live, &members_path, &children, LATCH_LOCK_NAME).await? {
        if !members.contains(&p.id) {
            members.push(p.id);
        }
    }
    let stored = match stored_read.await {
        Ok((data, _)) => Some(serde_json::from_slice::<Assignment>(&data).ok()),
        Err(Zk::NoNode) => None,
        Err(e) => return Err(e.into()),
    };
    let current = stored.clone().flatten();
    let previous = match &current {
        Some(a) => a.jobs.clone(),
        // No usable assignment: start from whoever leads each job now, so that a coordinator
        // restarted after the node was lost moves nothing.
        None => current_leaders(shared).await?,
    };
    let target = Assignment {
        jobs: rebalance(&shared.jobs, &members, &previous),
        members,
    };
    if current.as_ref() == Some(&target) {
        return Ok((watcher, target));
    }
    let data = serde_json::to_vec(&target).map_err(|e| Error::InvalidArgument {
        what: "assignment",
        reason: e.to_string(),
    })?;
    let op = match stored {
        Some(_) => FencedOp::set_data(&node, data),
        None => FencedOp::create(&node, data),
    };
    term.fenced([op]).await?;
    info!(moves = moves(&previous, &target.jobs), members = ?target.members, token = %term.token(),
        "wrote a new assignment");
    Ok((watcher, target))
}

/// Who leads each job now, read from the job paths.
async fn current_leaders(shared: &Shared) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for job in &shared.jobs {
        let leader = contender::leader_of(
            contender::participants(
                &shared.session,
                &job_path(&shared.root, job),
                LATCH_LOCK_NAME,
            )
            .await?,
        );
        if leader.is_leader {
            out.insert(job.clone(), leader.id);
        }
    }
    Ok(out)
}
