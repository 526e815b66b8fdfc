//! The operators' handle on a job ([`JobAdmin`]: history, status, trigger, pause, resume,
//! resolve), and the reads of the job's nodes it shares with the leader.

use tracing::{debug, warn};
use zookeeper_client::CreateMode;

use super::plan::{PendingReason, Records, SettleReason};
use super::record::{Control, JobState, TRIGGER_ARGS_KEPT, TriggerFor, UNPLACED};
use super::{Resolution, Schedule, SlotRecord, SlotState, schedule};
use crate::acl::NodeAcl;
use crate::contender::{self, Participant};
use crate::error::{Error, Result};
use crate::path;
use crate::session::Session;

/// The node under the job's path that [`JobAdmin::ensemble_now`] writes to read the ensemble's
/// clock: no participant reads or watches it, and nobody guards its version.
const CLOCK_NODE: &str = "clock";

/// The job's state as [`JobAdmin::status`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobStatus {
    /// The job's path.
    pub path: String,
    /// The schedule recorded by the last leader ([`Schedule::spec`]), if any leader ran yet.
    pub schedule: Option<String>,
    /// Whether the job is paused.
    pub paused: bool,
    /// The participant id of the leader, if one leads.
    pub leader: Option<String>,
    /// The newest slot the leader has taken up (run, skipped or missed).
    pub cursor: Option<String>,
    /// Triggers asked for and not yet taken up.
    pub triggers_pending: u64,
    /// Slots recorded `running`, `pending` or `parked`.
    pub open: Vec<SlotRecord>,
    /// The newest settled slot.
    pub last: Option<SlotRecord>,
    /// The slots among [`open`](Self::open) recorded `running` whose runner's term is gone:
    /// no node in the job's election has the record's token as its `czxid` (the runner crashed,
    /// froze past its session, or lost its term, and no leader has taken the slot up yet; the
    /// next one will, by its on-crash policy).
    pub orphaned: Vec<String>,
    /// The newest slot recorded `succeeded` that the history still holds (by its end, the
    /// ensemble's time in `ended_ms`).
    pub last_success: Option<SlotRecord>,
    /// The newest slot recorded `failed` when no slot after it (by nominal instant, the order
    /// of [`history`](JobAdmin::history)) is recorded `succeeded`: a failure not made good yet.
    /// Slots skipped, missed or still open after it do not make it good (`zkr cron status
    /// --check` reports it as `failed`); a later success, a `resolve --done` of a later parked
    /// slot, or a `resolve --rerun` of the failed slot itself (which reopens it) do.
    pub unrecovered_failure: Option<SlotRecord>,
}

/// An operator's handle on a job: read its history and status, trigger, pause, resume, resolve
/// parked slots. Needs no stake in the election; `zkr cron history|status|trigger|pause|resume|
/// resolve` use it.
#[derive(Debug, Clone)]
pub struct JobAdmin {
    session: Session,
    path: String,
    acl: NodeAcl,
}

impl JobAdmin {
    /// The handle [`ScheduledJob::admin`](super::ScheduledJob::admin) gives: the job's own
    /// session, path and ACL.
    pub(super) fn for_job(session: &Session, path: &str, acl: &NodeAcl) -> JobAdmin {
        JobAdmin {
            session: session.clone(),
            path: path.to_owned(),
            acl: acl.clone(),
        }
    }

    /// A handle on the job at `path` (absolute).
    ///
    /// # Errors
    /// [`Error::InvalidPath`].
    pub fn new(session: &Session, path: impl Into<String>) -> Result<JobAdmin> {
        let path = path.into();
        path::validate_path(&path)?;
        Ok(JobAdmin {
            session: session.clone(),
            path,
            acl: session.default_acl(),
        })
    }

    /// The ACL of the nodes this handle creates when no replica has yet (the job's path, its
    /// missing ancestors, and its `control`): give it the job's own
    /// ([`ScheduledJobBuilder::acl`](super::ScheduledJobBuilder::acl)), so that a pause or trigger
    /// sent before the first leader does not leave `control` open to anyone. Default: the
    /// session's [`default_acl`](Session::default_acl) (the creator and read for anyone when
    /// the session has an identity, else open, as ZooKeeper's and Curator's), the same default
    /// as the job's. [`ScheduledJob::admin`](super::ScheduledJob::admin) uses the job's.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a creator ACL on a session without credentials.
    pub fn with_acl(mut self, acl: impl Into<NodeAcl>) -> Result<JobAdmin> {
        let acl = acl.into();
        acl.check_usable(self.session.has_credentials())?;
        self.acl = acl;
        Ok(self)
    }

    /// The recorded slots, newest first (by nominal instant), at most `limit`.
    ///
    /// # Errors
    /// Connection and ZooKeeper errors; [`Error::InvalidArgument`] when a record under the
    /// job's `slots` node was not written by this crate.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn history(&self, limit: usize) -> Result<Vec<SlotRecord>> {
        let client = self.session.client()?;
        let mut records: Vec<SlotRecord> = read_records(&client, &self.path)
            .await?
            .into_values()
            .map(|(r, _)| r)
            .collect();
        records.sort_by(|a, b| (b.nominal_ms, &b.slot).cmp(&(a.nominal_ms, &a.slot)));
        records.truncate(limit);
        Ok(records)
    }

    /// The job's schedule, pause state, leader, cursor and open slots.
    ///
    /// # Errors
    /// As [`history`](Self::history).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn status(&self) -> Result<JobStatus> {
        let client = self.session.client()?;
        let state_path = path::join(&self.path, "state");
        let state = match client.get_data(&state_path).await {
            Ok((data, _)) => Some(JobState::from_bytes(&state_path, &data)?),
            Err(zookeeper_client::Error::NoNode) => None,
            Err(e) => return Err(e.into()),
        };
        let control = read_control(&client, &self.path).await?.0;
        let leader = match contender::participants_on(
            &self.session,
            &path::join(&self.path, "leader"),
        )
        .await
        {
            Ok(participants) => Some(contender::leader_of(participants)),
            Err(Error::Zookeeper(zookeeper_client::Error::NoNode)) => None,
            Err(e) => return Err(e),
        }
        .filter(|p: &Participant| p.is_leader)
        .map(|p| p.id);
        let mut records: Vec<SlotRecord> = read_records(&client, &self.path)
            .await?
            .into_values()
            .map(|(r, _)| r)
            .collect();
        records.sort_by(|a, b| (b.nominal_ms, &b.slot).cmp(&(a.nominal_ms, &a.slot)));
        let last = records.iter().find(|r| r.state.is_final()).cloned();
        let unrecovered_failure = records
            .iter()
            .find(|r| matches!(r.state, SlotState::Succeeded | SlotState::Failed))
            .filter(|r| r.state == SlotState::Failed)
            .cloned();
        let last_success = records
            .iter()
            .filter(|r| r.state == SlotState::Succeeded)
            .max_by_key(|r| (r.ended_ms.unwrap_or(r.nominal_ms), r.nominal_ms))
            .cloned();
        let terms = live_terms(&client, &path::join(&self.path, "leader")).await?;
        let orphaned = records
            .iter()
            .filter(|r| r.state == SlotState::Running)
            .filter(|r| r.token.is_none_or(|t| !terms.contains(&t)))
            .map(|r| r.slot.clone())
            .collect();
        let open = records
            .into_iter()
            .filter(|r| !r.state.is_final())
            .collect();
        Ok(JobStatus {
            path: self.path.clone(),
            schedule: state.as_ref().map(|s| s.spec.clone()),
            paused: control.paused,
            leader,
            cursor: state
                .as_ref()
                .filter(|s| s.cursor_ms != UNPLACED)
                .map(|s| Schedule::key(s.cursor_ms)),
            triggers_pending: control
                .triggers
                .saturating_sub(state.as_ref().map_or(0, |s| s.triggers_done)),
            open,
            last,
            orphaned,
            last_success,
            unrecovered_failure,
        })
    }

    /// The ensemble's time now, in milliseconds since the Unix epoch: the `mtime` of a write to
    /// the job's `clock` node (`<job>/clock`, empty data, created with this handle's ACL
    /// ([`with_acl`](Self::with_acl)) on the first probe). The quorum leader's wall clock
    /// stamped the write somewhere between the request and its answer, whatever this host's
    /// own clock says: measure ages of the records' times (`started_ms`, `ended_ms`, the
    /// ensemble's) against it, not against this host's clock, which may be skewed or stepped.
    ///
    /// The probe writes nothing a participant reads: the leader neither watches `clock` nor
    /// guards its version, and `state` and `control` are left alone, so a probe wakes no leader
    /// and loses no compare-and-set of theirs. It is not fenced (it decides nothing), and it
    /// never creates the job's own node.
    ///
    /// Only a write can read the ensemble's clock: an identity that may read the job but not
    /// write under it (create `clock`, or set it) gets [`Error::Zookeeper`] with `NoAuth`, and
    /// should fall back to its own clock and say so (`zkr cron status` does).
    ///
    /// # Errors
    /// Connection and ZooKeeper errors: `NoNode` when the job's node does not exist, `NoAuth`
    /// when the job's ACL (or the `clock` node's) refuses the write.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped before the answer, the write may or may not have landed (a `clock`
    /// node created with no reply is simply set by the next probe); it changes nothing but the
    /// `clock` node's data version and `mtime`.
    pub async fn ensemble_now(&self) -> Result<i64> {
        let client = self.session.client()?;
        let clock = path::join(&self.path, CLOCK_NODE);
        // Set first: the node exists after the first probe. A probe racing to create it finds
        // it created and sets it (twice at most).
        for _ in 0..2 {
            match client.set_data(&clock, &[], None).await {
                Ok(stat) => {
                    debug!(path = %self.path, mtime_ms = stat.mtime, "read the ensemble's clock");
                    return Ok(stat.mtime);
                }
                Err(zookeeper_client::Error::NoNode) => {}
                Err(e) => return Err(e.into()),
            }
            let mode = CreateMode::Persistent.with_acls(self.acl.as_acls());
            match client.create(&clock, &[], &mode).await {
                Ok((stat, _)) => {
                    debug!(path = %self.path, mtime_ms = stat.mtime, "created the job's clock node");
                    return Ok(stat.mtime);
                }
                Err(zookeeper_client::Error::NodeExists) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // Created and deleted by others twice in a row: not a job this handle can probe.
        Err(Error::Zookeeper(zookeeper_client::Error::NoNode))
    }

    /// Asks the leader to run the job now, as an extra slot `trigger-N` (also while paused: an
    /// operator asked). Returns N.
    ///
    /// # Errors
    /// Connection and ZooKeeper errors.
    ///
    /// # Cancel safety
    /// The request is sent when the future is first polled; dropped after that, the trigger may
    /// or may not have been recorded.
    pub async fn trigger(&self) -> Result<u64> {
        self.trigger_for(TriggerFor::default()).await
    }

    /// As [`trigger`](Self::trigger), for a slot of the schedule or a business date
    /// ([`TriggerFor`]): the run is still recorded as `trigger-N`, and its
    /// [`SlotRun`](super::SlotRun) (and `zkr cron run`'s command, `ZK_FOR_SLOT`,
    /// `ZK_BUSINESS_DATE`) carries what it is for. Returns N.
    ///
    /// A replica of an earlier version leads the trigger as a plain one (it does not read
    /// what it is for), and an operator's tool of an earlier version that writes the controls
    /// (pause, resume, trigger) drops what is recorded for triggers not yet taken up.
    ///
    /// # Errors
    /// Connection and ZooKeeper errors.
    ///
    /// # Cancel safety
    /// As [`trigger`](Self::trigger).
    pub async fn trigger_for(&self, asked: TriggerFor) -> Result<u64> {
        let mut n = 0;
        self.update_control(|c| {
            c.triggers += 1;
            n = c.triggers;
            if !asked.is_plain() {
                c.trigger_for.insert(n, asked.clone());
            }
        })
        .await?;
        Ok(n)
    }

    /// Pauses the job: until [`resume`](Self::resume), the leader starts no slot but
    /// triggers. It records due slots as skipped (`paused`), also those it had taken up but not
    /// started; slots that have a record already (a cut-off slot to retry, a buffered slot, a
    /// re-run) wait for the resume. A slot already running goes on.
    ///
    /// # Errors
    /// Connection and ZooKeeper errors.
    ///
    /// # Cancel safety
    /// As [`trigger`](Self::trigger).
    pub async fn pause(&self) -> Result<()> {
        self.update_control(|c| c.paused = true).await
    }

    /// Resumes a paused job. Slots that came due while paused stay skipped; the ones that waited
    /// run.
    ///
    /// # Errors
    /// Connection and ZooKeeper errors.
    ///
    /// # Cancel safety
    /// As [`trigger`](Self::trigger).
    pub async fn resume(&self) -> Result<()> {
        self.update_control(|c| c.paused = false).await
    }

    /// Resolves a parked slot: [`Resolution::Done`] records it succeeded (`resolved`, ended at
    /// the ensemble's time, read as [`ensemble_now`](Self::ensemble_now) does),
    /// [`Resolution::Rerun`] hands it back to the leader, which runs it with `attempt + 1`.
    /// A `failed` slot may be re-run too (not marked done: its failure is a fact): it becomes
    /// `pending` (`rerun`) and runs again, recovering. Its retries on failure are not renewed:
    /// the re-run is retried only while the slot's failures stay within the job's retries.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the slot has no record, or is neither parked nor (for a
    /// re-run) failed; connection and ZooKeeper errors.
    ///
    /// # Cancel safety
    /// As [`trigger`](Self::trigger).
    pub async fn resolve(&self, slot: &str, resolution: Resolution) -> Result<()> {
        let client = self.session.client()?;
        let slot_path = path::join(&path::join(&self.path, "slots"), slot);
        let (data, stat) = match client.get_data(&slot_path).await {
            Ok(found) => found,
            Err(zookeeper_client::Error::NoNode) => {
                return Err(Error::InvalidArgument {
                    what: "slot",
                    reason: format!("{slot:?} has no record under {}", self.path),
                });
            }
            Err(e) => return Err(e.into()),
        };
        let mut record = SlotRecord::from_bytes(&slot_path, &data)?;
        let allowed = match resolution {
            Resolution::Done => record.state == SlotState::Parked,
            Resolution::Rerun => matches!(record.state, SlotState::Parked | SlotState::Failed),
        };
        if !allowed {
            let what = match resolution {
                Resolution::Done => "parked",
                Resolution::Rerun => "parked or failed",
            };
            return Err(Error::InvalidArgument {
                what: "slot",
                reason: format!("{slot:?} is {}, not {what}", record.state.as_str()),
            });
        }
        match resolution {
            Resolution::Done => {
                record.state = SlotState::Succeeded;
                record.reason = Some(SettleReason::Resolved.as_str().to_owned());
                // The ensemble's time, as every other time in a record: the operator's host may
                // be skewed or stepped. An identity that may resolve the slot but not write the
                // `clock` node falls back to its own clock.
                let now = match self.ensemble_now().await {
                    Ok(now) => now,
                    Err(Error::Zookeeper(zookeeper_client::Error::NoAuth)) => {
                        warn!(path = %self.path, slot, "cannot read the ensemble's clock (no write access to the clock node): the resolved slot's end is this host's clock");
                        schedule::now_ms()
                    }
                    Err(e) => return Err(e),
                };
                record.ended_ms = Some(now);
            }
            Resolution::Rerun => {
                record.state = SlotState::Pending;
                record.reason = Some(PendingReason::Rerun.as_str().to_owned());
            }
        }
        // Compare-and-set: a leader that changed the record meanwhile wins.
        client
            .set_data(&slot_path, &record.to_bytes(), Some(stat.version))
            .await?;
        // Wake the leader, which reads pending slots when the controls change.
        self.update_control(|_| {}).await
    }

    /// Reads, changes and writes the control node (compare-and-set, retried on a race).
    async fn update_control(&self, mut change: impl FnMut(&mut Control)) -> Result<()> {
        let client = self.session.client()?;
        let control_path = path::join(&self.path, "control");
        for _ in 0..100 {
            let (mut control, version) = read_control(&client, &self.path).await?;
            change(&mut control);
            // What triggers were for is kept for the newest ones only.
            let oldest = control.triggers.saturating_sub(TRIGGER_ARGS_KEPT);
            control.trigger_for.retain(|n, _| *n > oldest);
            let result = match version {
                Some(v) => client
                    .set_data(&control_path, &control.to_bytes(), Some(v))
                    .await
                    .map(|_| ()),
                None => {
                    let mode = CreateMode::Persistent.with_acls(self.acl.as_acls());
                    match client.mkdir(&self.path, &mode).await {
                        Ok(()) | Err(zookeeper_client::Error::NodeExists) => {}
                        Err(e) => return Err(e.into()),
                    }
                    client
                        .create(&control_path, &control.to_bytes(), &mode)
                        .await
                        .map(|_| ())
                }
            };
            match result {
                Ok(()) => return Ok(()),
                Err(zookeeper_client::Error::BadVersion | zookeeper_client::Error::NodeExists) => {
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::InvalidArgument {
            what: "control",
            reason: "lost 100 compare-and-set races in a row".into(),
        })
    }
}

/// The tokens of the terms that may still run: the `czxid` of every node in the job's
/// election (a term's token is its leader node's `czxid`).
async fn live_terms(client: &zookeeper_client::Client, election: &str) -> Result<Vec<i64>> {
    let children = match client.list_children(election).await {
        Ok(c) => c,
        Err(zookeeper_client::Error::NoNode) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut terms = Vec::with_capacity(children.len());
    for child in children {
        match client.check_stat(&path::join(election, &child)).await {
            Ok(Some(stat)) => terms.push(stat.czxid),
            Ok(None) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(terms)
}

/// The control node and its version (`None`: it does not exist yet).
async fn read_control(
    client: &zookeeper_client::Client,
    job: &str,
) -> Result<(Control, Option<i32>)> {
    let control_path = path::join(job, "control");
    match client.get_data(&control_path).await {
        Ok((data, stat)) => Ok((
            Control::from_bytes(&control_path, &data)?,
            Some(stat.version),
        )),
        Err(zookeeper_client::Error::NoNode) => Ok((Control::default(), None)),
        Err(e) => Err(e.into()),
    }
}

/// Every slot record with its version, by key. Records that are not this crate's are skipped
/// with a warning.
pub(super) async fn read_records(client: &zookeeper_client::Client, job: &str) -> Result<Records> {
    let slots = path::join(job, "slots");
    let children = match client.list_children(&slots).await {
        Ok(c) => c,
        Err(zookeeper_client::Error::NoNode) => return Ok(Records::new()),
        Err(e) => return Err(e.into()),
    };
    let reads: Vec<_> = children
        .iter()
        .map(|name| client.get_data(&path::join(&slots, name)))
        .collect();
    let mut records = Records::new();
    for (name, read) in children
        .into_iter()
        .zip(futures::future::join_all(reads).await)
    {
        let node = path::join(&slots, &name);
        match read {
            Ok((data, stat)) => match SlotRecord::from_bytes(&node, &data) {
                Ok(record) => {
                    records.insert(name, (record, stat.version));
                }
                Err(e) => warn!(node = %node, error = %e, "ignoring a slot record"),
            },
            Err(zookeeper_client::Error::NoNode) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(records)
}
