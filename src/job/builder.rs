//! Building a scheduled job: [`ScheduledJobBuilder`] checks every setting, [`PreparedJob`]
//! stands for the job in its election.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tracing::{Instrument, info_span};

use super::plan::NotRunReason;
use super::policy::Policies;
use super::term::TermRun;
use super::{
    AbortOnDrop, Activity, CatchUp, DEFAULT_CLOCK_TOLERANCE, Inner, MAX_HISTORY, OnCrash, Overlap,
    Schedule, ScheduledJob, SkewHold, SlotJob, SlotState, SystemClock, WallClock,
    requeue_between_terms,
};
use crate::acl::NodeAcl;
use crate::checks;
use crate::error::{Error, Result};
use crate::fencing::Leadership;
use crate::leader::LeaderSelector;
use crate::path;
use crate::session::Session;
use crate::state::ErrorPolicy;

/// Builds a [`ScheduledJob`]; [`build`](Self::build) checks every setting.
#[must_use]
pub struct ScheduledJobBuilder {
    session: Session,
    path: String,
    id: Option<String>,
    schedule: Option<Result<Schedule>>,
    policies: Policies,
    grace: Option<Duration>,
    stop_ahead: Option<Duration>,
    error_policy: ErrorPolicy,
    acl: Option<NodeAcl>,
    clock: Arc<dyn WallClock>,
    clock_tolerance: Duration,
}

impl std::fmt::Debug for ScheduledJobBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScheduledJobBuilder")
            .field("path", &self.path)
            .field("id", &self.id)
            .field("policies", &self.policies)
            .finish_non_exhaustive()
    }
}

impl ScheduledJobBuilder {
    /// The defaults, for the job at `path` ([`ScheduledJob::builder`]).
    pub(super) fn new(session: &Session, path: String) -> Self {
        ScheduledJobBuilder {
            session: session.clone(),
            path,
            id: None,
            schedule: None,
            policies: Policies::default(),
            grace: None,
            stop_ahead: None,
            error_policy: ErrorPolicy::default(),
            acl: None,
            clock: Arc::new(SystemClock),
            clock_tolerance: DEFAULT_CLOCK_TOLERANCE,
        }
    }

    /// Slots at the instants of a cron expression in an IANA time zone
    /// ([`Schedule::cron`]).
    pub fn cron(mut self, expression: &str, zone: &str) -> Self {
        self.schedule = Some(Schedule::cron(expression, zone));
        self
    }

    /// Slots every `period`, on the epoch's grid ([`Schedule::every`]).
    pub fn every(mut self, period: Duration) -> Self {
        self.schedule = Some(Schedule::every(period));
        self
    }

    /// Any schedule.
    pub fn schedule(mut self, schedule: Schedule) -> Self {
        self.schedule = Some(Ok(schedule));
        self
    }

    /// The participant id in the job's election, recorded as each slot's runner. Default:
    /// `<hostname>-<pid>-<8 hex>`.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Catch-up after an outage (default [`CatchUp::Latest`]).
    pub fn catch_up(mut self, catch_up: CatchUp) -> Self {
        self.policies.catch_up = catch_up;
        self
    }

    /// How late the newest missed slot may be and still run under [`CatchUp::Latest`]
    /// (default: one period of the schedule, at most 24 h).
    pub fn catch_up_window(mut self, window: Duration) -> Self {
        self.policies.window = Some(window);
        self
    }

    /// A slot that comes due while the previous one runs (default [`Overlap::Skip`]).
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.policies.overlap = overlap;
        self
    }

    /// A slot cut off by a crash or a lost term (default [`OnCrash::Retry`]).
    pub fn on_crash(mut self, on_crash: OnCrash) -> Self {
        self.policies.on_crash = on_crash;
        self
    }

    /// How many times a slot is started at most under [`OnCrash::Retry`] (default 3; at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.policies.max_attempts = attempts;
        self
    }

    /// Retries on failure: a run that returns an error (`zkr cron run`: a non-zero exit) is run
    /// again within its slot, up to `retries` times, `backoff` after each failure (default: 0,
    /// no retry). Each retry is claimed with the current term's token, as `attempt + 1` with
    /// [`SlotRun::is_recovering`](super::SlotRun::is_recovering) true, and recorded in the
    /// slot's [`attempts`](super::SlotRecord::attempts); while it waits, the record is
    /// `pending` (`reason: retry`), so that a failover during the backoff hands the retry to the
    /// next leader. Distinct from [`max_attempts`](Self::max_attempts), which bounds the runs
    /// cut off by a crash or a lost term: failures count against `retries`, cut-off starts
    /// against `max_attempts`.
    pub fn retries(mut self, retries: u32, backoff: Duration) -> Self {
        self.policies.retries = retries;
        self.policies.retry_backoff = backoff;
        self
    }

    /// How many slot records are kept (default 100, at most [`MAX_HISTORY`]); older settled
    /// ones are deleted.
    pub fn history_limit(mut self, records: usize) -> Self {
        self.policies.history_limit = records;
        self
    }

    /// How old a settled slot record may get before it is deleted (default 30 days).
    pub fn history_max_age(mut self, age: Duration) -> Self {
        self.policies.history_max_age = age;
        self
    }

    /// How many operator triggers may wait to be run at once (default
    /// [`DEFAULT_MAX_PENDING_TRIGGERS`](crate::job::DEFAULT_MAX_PENDING_TRIGGERS), 10; at least
    /// 1). `control` is the operators' node and anyone who may write it can set its trigger
    /// count: a count more than this ahead of the triggers taken up (one write of
    /// `{"triggers": 1000000}`) is refused whole. None of its triggers runs, the leader records
    /// them as taken up (`triggers_done` in `state`, fenced) so that the next trigger runs as
    /// usual, and reports [`JobEvent::ControlRefused`](crate::job::JobEvent::ControlRefused).
    /// `zkr cron trigger` and [`JobAdmin::trigger`](crate::job::JobAdmin::trigger) add one
    /// with a compare-and-set, so operators never reach it by accident unless they queue more
    /// than this many triggers before the leader takes the first up.
    pub fn max_pending_triggers(mut self, triggers: u64) -> Self {
        self.policies.max_pending_triggers = triggers;
        self
    }

    /// Whether a leader that finds another schedule recorded replays the slots of its own
    /// schedule since the job's cursor (by the catch-up policy). Default `false`: the new
    /// schedule starts from now.
    pub fn replay_on_schedule_change(mut self, replay: bool) -> Self {
        self.policies.replay_on_change = replay;
        self
    }

    /// How long a run may go on after its term ended before its task is aborted (default 5 s,
    /// or less when the session's timeout leaves less).
    ///
    /// As for a [`LeaderSelector`]'s grace: the run is aborted at the
    /// end of the grace or at its term's lease ([`Leadership::stop_by`]), whichever comes
    /// first, and a term whose lease is not renewed ends the grace before the lease's deadline,
    /// so that a run that stops when asked gets its grace. The grace must fit in the lease the
    /// session timeout leaves ([`Error::GraceTooLong`] at [`build`](Self::build)).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// How long before its lease deadline a term whose lease is not renewed ends (default: the
    /// [`grace`](Self::grace)); it must fit in the lease the session timeout leaves. As
    /// [`LeaderSelectorBuilder::stop_ahead`](crate::LeaderSelectorBuilder::stop_ahead): for a
    /// run that waits for work it stops itself (`zkr cron run` waits for its command), ask for
    /// the work's grace here and give the run a longer grace.
    pub fn stop_ahead(mut self, ahead: Duration) -> Self {
        self.stop_ahead = Some(ahead);
        self
    }

    /// Which connection states end a term (default [`ErrorPolicy::Standard`]).
    pub fn error_policy(mut self, policy: ErrorPolicy) -> Self {
        self.error_policy = policy;
        self
    }

    /// The ACL of every node the job creates: its path and missing ancestors, the election
    /// under `leader`, `state`, `control`, `slots` and each slot's record, and the nodes of its
    /// [`admin`](super::ScheduledJob::admin). Default: the session's
    /// [`default_acl`](Session::default_acl), decided at [`build`](Self::build): the creator's
    /// identity and read for anyone when the session has an identity, so that an operator with
    /// other credentials, or none, may read the job's status and history but not steer it;
    /// else [`NodeAcl::anyone_all`].
    pub fn acl(mut self, acl: impl Into<NodeAcl>) -> Self {
        self.acl = Some(acl.into());
        self
    }

    /// This replica's own wall clock (default [`SystemClock`]); tests step it. It decides
    /// nothing about the schedule: the ensemble's clock does (the `mtime` of the job's own
    /// writes). It is read only to measure how far it is from the ensemble's, against the
    /// [`clock_tolerance`](Self::clock_tolerance).
    pub fn wall_clock(mut self, clock: Arc<dyn WallClock>) -> Self {
        self.clock = clock;
        self
    }

    /// How far this replica's wall clock may be from the ensemble's before it takes up no slot
    /// (default [`DEFAULT_CLOCK_TOLERANCE`], 10 s; not zero).
    ///
    /// The ensemble's clock decides when slots are due whatever this replica's clock says, but the
    /// job itself reads this host's clock (a business date taken from "now", timestamps it writes,
    /// certificates it checks, a `zkr cron` command's `date`): a replica whose clock is off by more
    /// than this gives up its term ([`JobEvent::ClockSkew`](super::JobEvent::ClockSkew), an
    /// `error!`, the metrics `zookeeper_recipes_job_clock_offset_seconds` and
    /// `zookeeper_recipes_job_clock_skew_terms_total`) so that an honest replica leads, and stays
    /// out of the election for 5 s, doubling with each further skewed term in a row up to 5 min,
    /// before it measures again. The default, 10 s, is far above what an NTP-disciplined host is
    /// off by (milliseconds) and than a measurement's error (half a round trip), so an honest
    /// replica is never refused, and well below the offsets that break jobs (a VM restored from a
    /// template or snapshot, a bad time source: minutes to days).
    pub fn clock_tolerance(mut self, tolerance: Duration) -> Self {
        self.clock_tolerance = tolerance;
        self
    }

    /// Checks every setting and returns the job ready to start.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a relative or malformed path; [`Error::InvalidSchedule`] for
    /// a missing or bad schedule (expression, zone, interval); [`Error::InvalidArgument`] for
    /// an id that breaks [`validate_id`](crate::path::validate_id)'s rules, zero max attempts,
    /// a history limit of 0 or above [`MAX_HISTORY`], or a zero clock tolerance;
    /// [`Error::GraceTooLong`] for a grace that does not fit in the session's lease.
    pub fn build(self) -> Result<PreparedJob> {
        let (id, acl) = checks::identity(&self.session, &self.path, self.id, self.acl)?;
        let schedule = match self.schedule {
            Some(s) => s?,
            None => {
                return Err(Error::InvalidSchedule {
                    what: "schedule",
                    reason: "none given: call .cron(expression, zone) or .every(period)".into(),
                });
            }
        };
        if self.policies.max_pending_triggers == 0 {
            return Err(Error::InvalidArgument {
                what: "max pending triggers",
                reason: "must be at least 1".into(),
            });
        }
        if self.policies.max_attempts == 0 {
            return Err(Error::InvalidArgument {
                what: "max attempts",
                reason: "must be at least 1".into(),
            });
        }
        if self.policies.history_limit == 0 || self.policies.history_limit > MAX_HISTORY {
            return Err(Error::InvalidArgument {
                what: "history limit",
                reason: format!(
                    "{} is outside 1..={MAX_HISTORY}",
                    self.policies.history_limit
                ),
            });
        }
        if self.clock_tolerance.is_zero() {
            return Err(Error::InvalidArgument {
                what: "clock tolerance",
                reason: "must be more than zero: no two clocks agree to the nanosecond".into(),
            });
        }
        let (grace, stop_ahead) = checks::grace(&self.session, self.grace, self.stop_ahead)?;
        Ok(PreparedJob {
            inner: Inner {
                session: self.session,
                path: self.path,
                id,
                schedule,
                policies: self.policies,
                clock: self.clock,
                clock_tolerance: self.clock_tolerance,
                skew: Mutex::new(SkewHold::default()),
                events: broadcast::channel(1024).0,
                acl,
                grace,
                stop_ahead,
                activity: watch::channel(Activity::default()).0,
            },
            error_policy: self.error_policy,
        })
    }

    /// [`build`](Self::build), then [`PreparedJob::start`].
    ///
    /// # Errors
    /// Those of both.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is sent before the returned job exists.
    pub async fn start<J: SlotJob>(self, job: J) -> Result<ScheduledJob> {
        self.build()?.start(job).await
    }
}

/// A scheduled job whose settings were checked ([`ScheduledJobBuilder::build`]).
#[derive(Debug)]
pub struct PreparedJob {
    inner: Inner,
    error_policy: ErrorPolicy,
}

impl PreparedJob {
    /// Stands for the job in the background (its election under `<path>/leader`); returns at once.
    ///
    /// # Errors
    /// [`Error::Closed`] when the session is closed, [`Error::NoRuntime`].
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is sent before the returned job exists.
    pub async fn start<J: SlotJob>(self, job: J) -> Result<ScheduledJob> {
        let inner = Arc::new(self.inner);
        // Every outcome a slot's end is counted by (`abandoned`: the end refused), and every
        // reason slots are not run for, at 0 from now on.
        crate::metrics::job_started(
            &inner.path,
            &inner.id,
            &[
                SlotState::Succeeded.as_str(),
                SlotState::Failed.as_str(),
                SlotState::Parked.as_str(),
                "abandoned",
            ],
            &[
                NotRunReason::Overlap.as_str(),
                NotRunReason::Paused.as_str(),
                NotRunReason::CatchUp.as_str(),
            ],
        );
        let job = Arc::new(job);
        let for_terms = Arc::clone(&inner);
        let selector = LeaderSelector::builder(&inner.session, path::join(&inner.path, "leader"))
            .id(inner.id.clone())
            // Requeued by `requeue_between_terms`: at once, or after a hold-back when the term
            // found this replica's clock off the ensemble's.
            .auto_requeue(false)
            // The job's own grace decides when a run is aborted, and how early a term whose
            // lease is not renewed ends; the selector waits beyond it for the loop to record
            // the end (the lease still bounds it).
            .stop_ahead(inner.stop_ahead)
            .grace(inner.grace + Duration::from_secs(5))
            // The loop stops the run by the lease itself, then records what became of it.
            .closure_stops_its_work()
            .error_policy(self.error_policy)
            .acl(inner.acl.clone())
            .start(move |term: Leadership| {
                let inner = Arc::clone(&for_terms);
                let job = Arc::clone(&job);
                let span = info_span!("scheduled_job", path = %inner.path, token = %term.token());
                async move { TermRun::new(&inner, &term).run(&job).await }.instrument(span)
            })
            .await?;
        let selector = Arc::new(selector);
        let requeue = AbortOnDrop(tokio::spawn(
            requeue_between_terms(
                Arc::clone(&inner),
                Arc::downgrade(&selector),
                selector.watch_state(),
            )
            .instrument(info_span!("scheduled_job", path = %inner.path)),
        ));
        Ok(ScheduledJob {
            inner,
            selector,
            _requeue: requeue,
        })
    }
}
