//! `zkr cron ...`: `cron run` stands for a scheduled job (a ScheduledJob) and runs CMD once per
//! due slot while it leads; `history`, `status`, `trigger`, `pause`, `resume` and `resolve`
//! read and steer the job (a JobAdmin) without a stake in its election.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use zookeeper_recipes::job::{
    CatchUp, JobAdmin, JobEvent, JobStatus, OnCrash, Overlap, Resolution, Schedule, ScheduledJob,
    SlotRun, SlotState, TriggerFor,
};
use zookeeper_recipes::{
    LeaderObserver, Leadership, ObserverEvent, Participant, Session, SessionStatus, participants_on,
};

use crate::Fail;
use crate::args::{CatchUpArg, CronCommand, CronNextArgs, CronRunArgs, OnCrashArg, OverlapArg};
use crate::conn::{Conn, close_session, connect, connect_patiently};
use crate::output::{self, Event, Out, now_ms, print_job_event};
use crate::signals::Signals;
use crate::supervise::{self as process, Outcome, ProcessError, StopReason, SupervisedCommand};
use crate::term::{TermReport, check_command, command_spec, exit_code, term_end_reason};

/// The slot key `cron run` gives CMD.
const ENV_SLOT: &str = "ZK_SLOT";
/// The attempt (1 for a slot's first run) `cron run` gives CMD.
const ENV_ATTEMPT: &str = "ZK_ATTEMPT";
/// `1` when the slot was cut off before (or an operator released it) and is run again, else `0`.
const ENV_RECOVERING: &str = "ZK_RECOVERING";
/// The run's nominal instant as a slot key (for a trigger `--slot KEY`, that slot's).
const ENV_NOMINAL: &str = "ZK_NOMINAL";
/// For a trigger `--slot KEY`: KEY.
const ENV_FOR_SLOT: &str = "ZK_FOR_SLOT";
/// For a trigger `--date DATE`: DATE.
const ENV_BUSINESS_DATE: &str = "ZK_BUSINESS_DATE";

/// `cron status --check`: the latest slot failed, or a slot is parked.
const CHECK_FAILED: u8 = 11;
/// `cron status --check`: no success within `--max-age`.
const CHECK_STALE: u8 = 10;
/// `cron status --check`: no replica leads the job.
const CHECK_NO_LEADER: u8 = 12;

/// A slot the job hands to zkr's main task, and where the main task answers how CMD ended.
type SlotRequest = (SlotRun, SlotAnswer);

/// Where the main task answers how a slot's CMD ended (`Err`: the slot failed, and why).
type SlotAnswer = oneshot::Sender<Result<(), String>>;

/// What `cron run` answers for a slot whose CMD never ran because zkr is going away.
const SHUTTING_DOWN: &str = "zkr is shutting down: CMD was not started";

fn same_term(a: &Leadership, b: &Leadership) -> bool {
    a.token() == b.token() && a.path() == b.path()
}

/// The job's terms as `cron run` reports them: a `leader` line when one begins and one
/// `not_leader` line when it ends (written by whoever notices first: the supervisor of a
/// running CMD, the term's end, or the job's watch of its leadership).
struct Terms<'a> {
    session: &'a Session,
    id: &'a str,
    /// The term of the last `leader` line, and whether its `not_leader` line was written.
    current: Option<(Leadership, bool)>,
}

impl<'a> Terms<'a> {
    fn report<'t>(&self, term: &'t Leadership, not_leader_sent: bool) -> TermReport<'t>
    where
        'a: 't,
    {
        TermReport {
            out: Out::Stderr,
            session: self.session,
            id: self.id,
            term,
            not_leader_sent: Cell::new(not_leader_sent),
        }
    }

    /// Follows the job's term to `next`: `not_leader` for the term that is over (unless it was
    /// written already), `leader` for a new one.
    fn follow(&mut self, next: Option<&Leadership>) {
        if let (Some((current, _)), Some(next)) = (&self.current, next)
            && same_term(current, next)
        {
            return;
        }
        self.end_current();
        self.current = None;
        if let Some(next) = next {
            self.report(next, false).leader();
            self.current = Some((next.clone(), false));
        }
    }

    /// `not_leader` for the current term, unless it was written already.
    fn end_current(&mut self) {
        if let Some((term, sent)) = &self.current
            && !*sent
        {
            let report = self.report(term, false);
            report.not_leader(term_end_reason(self.session, term, StopReason::TermEnded));
        }
        if let Some((_, sent)) = &mut self.current {
            *sent = true;
        }
    }

    /// The current term while its `not_leader` line is still to be written.
    fn live(&self) -> Option<&Leadership> {
        self.current
            .as_ref()
            .filter(|(_, sent)| !*sent)
            .map(|(t, _)| t)
    }

    fn path(&self) -> Option<&str> {
        self.current.as_ref().map(|(t, _)| t.path())
    }
}

/// The job's events, printed as they come; `None` once the job is gone.
async fn next_job_event(events: &mut broadcast::Receiver<JobEvent>) -> Option<JobEvent> {
    loop {
        match events.recv().await {
            Ok(event) => return Some(event),
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(missed = n, "zkr fell behind the job's events");
            }
            Err(broadcast::error::RecvError::Closed) => return None,
        }
    }
}

/// Prints the job's events that have arrived by now (before a slot's CMD starts, so that its
/// `slot_started` comes first).
fn print_arrived(events: &mut broadcast::Receiver<JobEvent>) {
    loop {
        match events.try_recv() {
            Ok(event) => print_job_event(&event),
            Err(broadcast::error::TryRecvError::Lagged(_)) => {}
            Err(_) => return,
        }
    }
}

/// Why the job stopped standing for good, if it did.
fn job_stopped(job: &ScheduledJob) -> Option<Fail> {
    job.is_stopped().then(|| match job.failure() {
        Some(e) => crate::auth::fail("the scheduled job stopped", &e),
        None => Fail::new("the scheduled job stopped unexpectedly"),
    })
}

/// The looks `cron run` takes at its job's election: once its node is in, it says that it stands
/// by (a `standby` line, unless it leads) and warns once when another participant has its id.
/// Taken again after each of its terms ends.
struct Introduce {
    /// When to look next; `None` once done.
    at: Option<tokio::time::Instant>,
    /// Looks left before giving up on seeing this replica's node.
    left: u32,
    /// Whether the duplicate-id warning was written (once per process).
    warned: bool,
}

/// Between two looks for this replica's node in its election.
const INTRODUCE_EVERY: Duration = Duration::from_millis(100);
/// How long one look may take; one that takes longer is given up and taken again later.
const LOOK_BOUND: Duration = Duration::from_secs(1);

impl Introduce {
    fn new() -> Introduce {
        let mut i = Introduce {
            at: None,
            left: 0,
            warned: false,
        };
        i.again();
        i
    }

    fn again(&mut self) {
        self.at = Some(tokio::time::Instant::now() + INTRODUCE_EVERY);
        self.left = 100;
    }

    /// After a look that took too long: another one a second later, while looks are left.
    fn later(&mut self) {
        self.left = self.left.saturating_sub(10);
        self.at = (self.left > 0).then(|| tokio::time::Instant::now() + LOOK_BOUND);
    }

    async fn due(&self) {
        match self.at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }

    async fn look(&mut self, session: &Session, path: &str, id: &str, leading: bool) {
        self.at = None;
        let participants = match job_participants(session, path).await {
            Ok(list) => list,
            Err(e) => {
                tracing::debug!(error = %e.message, "cannot read the job's participants");
                Vec::new()
            }
        };
        let Some(mine) = participants.iter().position(|p| p.id == id) else {
            if self.left > 0 {
                self.left -= 1;
                self.at = Some(tokio::time::Instant::now() + INTRODUCE_EVERY);
            }
            return;
        };
        if !self.warned && participants.iter().filter(|p| p.id == id).count() > 1 {
            self.warned = true;
            let others = duplicate_nodes(session, path, id).await;
            Out::Stderr.warning(
                "duplicate_id",
                &format!(
                    "another participant of {path}/leader has the id {id:?} ({others}): history's runner cannot tell them apart; give each replica its own --id"
                ),
            );
        }
        if leading {
            return;
        }
        let leader = participants
            .iter()
            .find(|p| p.is_leader)
            .map(|p| p.id.as_str());
        if leader == Some(id) && participants.iter().filter(|p| p.id == id).count() == 1 {
            return; // it leads: its `leader` line comes from the job
        }
        // The leader's id is read from ZooKeeper: logged escaped.
        tracing::info!(path, id, leader = ?leader, position = mine, "standing by");
        Out::Stderr.emit_best_effort(&Event::Standby {
            id,
            leader,
            position: mine,
            participants: participants.len(),
            ts_ms: now_ms(),
        });
    }
}

/// The election nodes whose data is `id` and that are not this session's, with their sessions:
/// `node NAME (session 0x...)`.
async fn duplicate_nodes(session: &Session, path: &str, id: &str) -> String {
    let election = format!("{path}/leader");
    let Ok(client) = session.client() else {
        return "unknown node".to_owned();
    };
    let ours = client.session_id().0;
    let Ok(children) = client.list_children(&election).await else {
        return "unknown node".to_owned();
    };
    let mut others = Vec::new();
    for child in children {
        let node = format!("{election}/{child}");
        if let Ok((data, stat)) = client.get_data(&node).await
            && data == id.as_bytes()
            && stat.ephemeral_owner != ours
        {
            others.push(format!("node {node}, session {:#x}", stat.ephemeral_owner));
        }
    }
    if others.is_empty() {
        "another node".to_owned()
    } else {
        others.join("; ")
    }
}

/// A drain begun on SIGINT/SIGTERM (`--drain`): the job's drain, which leaves once the slot's
/// end is recorded.
type Draining<'a> = Pin<Box<dyn Future<Output = zookeeper_recipes::Result<()>> + Send + 'a>>;

/// Supervises one slot's CMD as `supervise` does for `run` (the supervisor polled first, so
/// CMD is signalled before anything else is written after a freeze), and prints the job's
/// events meanwhile (slots skipped because this one still runs).
///
/// SIGINT/SIGTERM stop CMD at once (`shutdown`), or with `--drain` begin the job's drain into
/// `draining` and stop CMD only once the drain's time is up.
#[allow(clippy::too_many_arguments)]
async fn supervise_slot<'j, S>(
    report: &TermReport<'_>,
    supervisor: &SupervisedCommand,
    shutdown: &CancellationToken,
    signals: &mut Signals,
    states: &mut S,
    events: &mut broadcast::Receiver<JobEvent>,
    job: &'j ScheduledJob,
    drain: Option<Duration>,
    draining: &mut Option<Draining<'j>>,
    slot: &str,
) -> Result<Outcome, ProcessError>
where
    S: Stream<Item = SessionStatus> + Unpin,
{
    let run = supervisor.run(report.term, |event| report.process_event(event));
    tokio::pin!(run);
    let mut events_open = true;
    let drain_over = tokio::time::sleep(Duration::MAX);
    tokio::pin!(drain_over);
    loop {
        tokio::select! {
            biased;
            outcome = &mut run => return outcome,
            _ = signals.recv(), if !shutdown.is_cancelled() => match drain {
                Some(timeout) if draining.is_none() => {
                    tracing::info!(timeout = ?timeout, slot, "draining: CMD may finish its slot; no slot starts after it");
                    report.out.emit_best_effort(&Event::DrainStarted {
                        slot: Some(slot),
                        timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                        ts_ms: now_ms(),
                    });
                    *draining = Some(Box::pin(job.drain(timeout)));
                    drain_over.as_mut().reset(tokio::time::Instant::now() + timeout);
                }
                // No drain, or a second signal during one: stop CMD now.
                _ => shutdown.cancel(),
            },
            _ = &mut drain_over, if draining.is_some() && !shutdown.is_cancelled() => {
                tracing::warn!(slot, "the drain's time is up: stopping CMD");
                report.out.emit_best_effort(&Event::DrainEnded {
                    outcome: "ran_out",
                    ts_ms: now_ms(),
                });
                shutdown.cancel();
            }
            Some(status) = states.next() => {
                report.out.state(&status, report.id, Some(report.term.path()));
            }
            event = next_job_event(events), if events_open => match event {
                Some(event) => print_job_event(&event),
                None => events_open = false,
            },
        }
    }
}

pub(crate) async fn cron_run(
    conn: &Conn,
    session_timeout: Duration,
    grace: Duration,
    args: CronRunArgs,
) -> Result<ExitCode, Fail> {
    // Before anything connects: a bad expression, zone or interval is the caller's to fix.
    let schedule = args.schedule()?;
    let spec = schedule.spec();
    // A CMD that cannot start is found now, not at the first slot (02:00 for a nightly job).
    check_command(&args.supervised.command)?;
    let mut signals = Signals::new()?;
    let cmd = command_spec(args.supervised.command)?;
    if let Err(e) = process::become_child_subreaper() {
        tracing::warn!(error = %e, "cannot become a child subreaper; CMD's orphans go to init");
    }
    // ZooKeeper down at start is waited out, as an outage later is.
    let Some(session) = connect_patiently(conn, session_timeout, &mut signals).await? else {
        return Ok(ExitCode::SUCCESS);
    };
    // Before this replica can lead and record its own schedule: a different one is a mistake
    // until proven otherwise (the leader's schedule wins, and a failover changes it).
    match JobAdmin::new(&session, &args.path) {
        Ok(admin) => match tokio::time::timeout(session_timeout, admin.status())
            .await
            .unwrap_or(Err(zookeeper_recipes::Error::ConnectionLoss))
        {
            Ok(status) => {
                if let Some(recorded) = status.schedule.filter(|r| *r != spec) {
                    Out::Stderr.warning(
                        "schedule_mismatch",
                        &format!(
                            "this replica's schedule {spec:?} differs from the one recorded with {} ({recorded:?}): when it leads, it replaces the job's schedule (schedule_changed); give every replica the same schedule",
                            args.path
                        ),
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the job's recorded schedule"),
        },
        Err(e) => tracing::warn!(error = %e, "cannot read the job's recorded schedule"),
    }

    // The job's closure hands each slot to this task and waits for CMD's outcome: everything
    // that prints or signals runs here, in the order it happens.
    let (slot_tx, mut slot_rx) = mpsc::channel::<SlotRequest>(1);
    let mut builder = ScheduledJob::builder(&session, &args.path)
        .schedule(schedule)
        .catch_up(match args.catch_up {
            CatchUpArg::Latest => CatchUp::Latest,
            CatchUpArg::All => CatchUp::All,
            CatchUpArg::None => CatchUp::None,
        })
        .overlap(match args.overlap {
            OverlapArg::Skip => Overlap::Skip,
            OverlapArg::BufferOne => Overlap::BufferOne,
        })
        .on_crash(match args.on_crash {
            OnCrashArg::Retry => OnCrash::Retry,
            OnCrashArg::Fail => OnCrash::Fail,
            OnCrashArg::Park => OnCrash::Park,
        })
        .max_attempts(args.max_attempts)
        .retries(args.retries, args.retry_backoff)
        // zkr stops CMD itself (SIGTERM, --grace, SIGKILL, never past the lease); a term whose
        // lease is not renewed ends CMD's grace before the lease's deadline, and the job waits
        // beyond that, so it never aborts a run whose CMD may still be alive.
        .stop_ahead(grace)
        .grace(grace * 2 + Duration::from_secs(5))
        .error_policy(args.supervised.policy.policy())
        .acl(conn.node_acl());
    if let Some(id) = args.supervised.id {
        builder = builder.id(id);
    }
    if let Some(tolerance) = args.clock_tolerance {
        builder = builder.clock_tolerance(tolerance);
    }
    let started = match builder.build() {
        Ok(prepared) => {
            prepared
                .start(move |run: SlotRun| {
                    let slot_tx = slot_tx.clone();
                    async move {
                        let (done_tx, done_rx) = oneshot::channel();
                        if slot_tx.send((run, done_tx)).await.is_err() {
                            return Err(SHUTTING_DOWN.to_owned());
                        }
                        done_rx
                            .await
                            .unwrap_or_else(|_| Err("zkr stopped before CMD ended".to_owned()))
                    }
                })
                .await
        }
        Err(e) => Err(e),
    };
    let job = match started {
        Ok(job) => job,
        Err(e) => {
            close_session(&session).await;
            return Err(crate::auth::fail(
                format_args!("cannot start the job {}", args.path),
                &e,
            ));
        }
    };
    // Subscribed before the job's tasks first run (nothing awaited since `start`).
    let mut events = job.events();
    let mut leadership = job.leadership();
    let id = job.id().to_owned();
    let out = Out::Stderr;
    let states = session.state_changes();
    tokio::pin!(states);
    let shutdown = CancellationToken::new();
    let mut terms = Terms {
        session: &session,
        id: &id,
        current: None,
    };
    let mut code = ExitCode::SUCCESS;
    let mut failure: Option<Fail> = None;
    // A slot whose CMD zkr stopped on SIGINT/SIGTERM: answered only once the term is over, so
    // that its end is refused and the slot stays `running` for the next leader (a cut-off slot,
    // as `ScheduledJob::close` has it), rather than recorded failed by CMD's exit code.
    let mut interrupted: Option<(Leadership, SlotAnswer, Result<(), String>)> = None;
    // `--drain`: begun by a signal while CMD ran a slot.
    let mut draining: Option<Draining<'_>> = None;
    let mut events_open = true;
    let mut check = tokio::time::interval(Duration::from_secs(1));
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // When to look at the election next (to say that this replica stands by, and to find a
    // duplicate id), and how many more looks before giving up on seeing our node.
    let mut introduce = Introduce::new();
    // Who leads, so that a replica that stands by says so again when the leader changes.
    let observer = match LeaderObserver::builder(&session, format!("{}/leader", args.path))
        .start()
        .await
    {
        Ok(observer) => Some(observer),
        Err(e) => {
            tracing::warn!(error = %e, "cannot follow the job's leader; standby lines only at start");
            None
        }
    };
    let mut observed: Pin<Box<dyn Stream<Item = ObserverEvent> + Send>> = match &observer {
        Some(o) => Box::pin(o.events()),
        None => Box::pin(futures::stream::pending()),
    };

    loop {
        let term_end = terms.live().map(Leadership::cancelled);
        tokio::select! {
            biased;
            _ = signals.recv() => break,
            request = slot_rx.recv() => {
                let Some((run, done)) = request else {
                    failure = Some(job_stopped(&job).unwrap_or_else(|| {
                        Fail::new("the scheduled job stopped unexpectedly")
                    }));
                    break;
                };
                let term = run.leadership().clone();
                terms.follow(Some(&term));
                print_arrived(&mut events);
                let mut spec = cmd
                    .clone()
                    .env(ENV_SLOT, run.slot())
                    .env(ENV_ATTEMPT, run.attempt().to_string())
                    .env(ENV_RECOVERING, if run.is_recovering() { "1" } else { "0" })
                    .env(ENV_NOMINAL, Schedule::key(run.nominal_ms()));
                if let Some(slot) = run.for_slot() {
                    spec = spec.env(ENV_FOR_SLOT, slot);
                }
                if let Some(date) = run.business_date() {
                    spec = spec.env(ENV_BUSINESS_DATE, date);
                }
                let supervisor = SupervisedCommand::new(spec)
                    .grace(grace)
                    .shutdown(shutdown.clone());
                let sent = terms.current.as_ref().is_some_and(|(_, sent)| *sent);
                let report = terms.report(&term, sent);
                let result = supervise_slot(
                    &report,
                    &supervisor,
                    &shutdown,
                    &mut signals,
                    &mut states,
                    &mut events,
                    &job,
                    args.drain,
                    &mut draining,
                    run.slot(),
                )
                .await;
                let sent = report.not_leader_sent.get();
                if let Some((_, s)) = &mut terms.current {
                    *s = sent;
                }
                let answer = match &result {
                    Ok(outcome) => {
                        let c = outcome.exit.code();
                        run.set_exit_code(c);
                        if c == 0 {
                            Ok(())
                        } else {
                            Err(format!("CMD exited with code {c}"))
                        }
                    }
                    Err(ProcessError::NotLeader) => {
                        Err("the term was over before CMD could start".to_owned())
                    }
                    Err(e) => Err(format!("CMD did not run: {e}")),
                };
                if shutdown.is_cancelled() {
                    // CMD was running when the signal came: exit with its code.
                    if let Ok(outcome) = &result {
                        code = exit_code(outcome.exit.code());
                    }
                    if matches!(&result, Ok(o) if o.stopped == Some(StopReason::Shutdown)) {
                        interrupted = Some((term, done, answer));
                    } else {
                        let _ = done.send(answer);
                    }
                    break;
                }
                if draining.is_some() {
                    // CMD finished its slot within the drain: its end is recorded as usual,
                    // and the drain leaves once it is.
                    tracing::info!(slot = run.slot(), "drained: CMD finished its slot in time");
                    out.emit_best_effort(&Event::DrainEnded {
                        outcome: "finished",
                        ts_ms: now_ms(),
                    });
                    if let Ok(outcome) = &result {
                        code = exit_code(outcome.exit.code());
                    }
                    let _ = done.send(answer);
                    break;
                }
                let _ = done.send(answer);
            }
            changed = leadership.changed() => {
                if changed.is_err() {
                    failure = job_stopped(&job);
                    break;
                }
                let next = leadership.borrow_and_update().clone();
                if next.is_none() && terms.live().is_some() {
                    introduce.again();
                }
                terms.follow(next.as_ref());
                if let Some(f) = job_stopped(&job) {
                    failure = Some(f);
                    break;
                }
            }
            _ = async {
                match term_end {
                    Some(ended) => ended.await,
                    None => std::future::pending().await,
                }
            } => {
                terms.end_current();
                introduce.again();
            }
            event = next_job_event(&mut events), if events_open => match event {
                Some(event) => print_job_event(&event),
                None => events_open = false,
            },
            Some(status) = states.next() => out.state(&status, &id, terms.path()),
            Some(event) = observed.next() => {
                if !matches!(event, ObserverEvent::State(_)) {
                    introduce.again();
                }
            }
            () = introduce.due() => {
                // Bounded: the loop also handles signals and slots, and a read while the
                // connection is down would wait for it.
                let leading = leadership.borrow().is_some();
                let look = introduce.look(&session, &args.path, &id, leading);
                if tokio::time::timeout(LOOK_BOUND, look).await.is_err() {
                    introduce.later();
                }
            }
            _ = check.tick() => {
                if let Some(f) = job_stopped(&job) {
                    failure = Some(f);
                    break;
                }
            }
        }
    }

    // Leave the election: the term ends (a slot still running is cut off and stays `running`
    // for the next leader) and our node is deleted at once. A drain whose CMD finished leaves
    // once the slot's end is recorded; one whose CMD was stopped closes as without a drain.
    let mut close: Draining<'_> = match draining.take() {
        Some(drained) if !shutdown.is_cancelled() => drained,
        _ => Box::pin(job.close()),
    };
    let bound = tokio::time::sleep(session_timeout + grace * 2 + Duration::from_secs(15));
    tokio::pin!(bound);
    let mut closed: Option<zookeeper_recipes::Result<()>> = None;
    let mut requests_open = true;
    while closed.is_none() {
        let held = interrupted.as_ref().map(|(term, ..)| term.cancelled());
        tokio::select! {
            biased;
            r = &mut close => closed = Some(r),
            _ = async {
                match held {
                    Some(ended) => ended.await,
                    None => std::future::pending().await,
                }
            } => {
                if let Some((_, done, answer)) = interrupted.take() {
                    let _ = done.send(answer);
                }
            }
            request = slot_rx.recv(), if requests_open => match request {
                Some((_, done)) => {
                    let _ = done.send(Err(SHUTTING_DOWN.to_owned()));
                }
                None => requests_open = false,
            },
            event = next_job_event(&mut events), if events_open => match event {
                Some(event) => print_job_event(&event),
                None => events_open = false,
            },
            _ = &mut bound => {
                tracing::warn!("the job did not finish closing in time");
                break;
            }
        }
    }
    print_arrived(&mut events);
    terms.follow(None);
    if let Some(observer) = &observer {
        let _ = tokio::time::timeout(LOOK_BOUND, observer.close()).await;
    }
    close_session(&session).await;
    if let Some(Err(e)) = closed {
        failure.get_or_insert(Fail::new(format!("closing the job failed: {e}")));
    }
    match failure {
        Some(f) => Err(f),
        None => Ok(code),
    }
}

/// `zkr cron next`: the schedule's next slots after now (or `--after`), by this host's clock,
/// without ZooKeeper: one slot key per line (what CMD gets as `ZK_SLOT`), or JSON objects.
pub(crate) fn cron_next(args: &CronNextArgs) -> Result<ExitCode, Fail> {
    let schedule = args.schedule()?;
    let mut after = args
        .after
        .unwrap_or_else(|| i64::try_from(output::now_ms()).unwrap_or(i64::MAX));
    let mut lines = Vec::new();
    for _ in 0..args.count {
        let Some(slot) = schedule.next_after(after) else {
            break;
        };
        let key = Schedule::key(slot);
        lines.push(if args.json {
            serde_json::json!({ "slot": key, "nominal_ms": slot }).to_string()
        } else {
            key
        });
        after = slot;
    }
    if lines.is_empty() {
        return Err(Fail::new(format!(
            "{} has no slot after that instant",
            schedule.spec()
        )));
    }
    println!("{}", lines.join("\n"));
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn cron_admin(
    conn: &Conn,
    session_timeout: Duration,
    command: CronCommand,
) -> Result<ExitCode, Fail> {
    let session = connect(conn, session_timeout).await?;
    let result = cron_admin_on(&session, conn, command).await;
    close_session(&session).await;
    let said = result?;
    if let Some(text) = said.stdout {
        println!("{text}");
    }
    if let Some(note) = said.stderr {
        eprintln!("zkr: {note}");
    }
    Ok(ExitCode::from(said.code))
}

/// What an admin command says: its result on stdout, a note or warning on stderr, and its exit
/// code (0 but for `status --check`).
#[derive(Debug, Default)]
struct Said {
    stdout: Option<String>,
    stderr: Option<String>,
    code: u8,
}

impl Said {
    fn out(text: String) -> Said {
        Said {
            stdout: Some(text),
            ..Said::default()
        }
    }

    /// Exits with `code`.
    fn exit(mut self, code: u8) -> Said {
        self.code = code;
        self
    }

    /// `warning` on stderr as well, if there is one.
    fn warn(mut self, warning: Option<String>) -> Said {
        self.stderr = warning;
        self
    }
}

/// The error for a job path with no node: a mistyped name must not look like a healthy job.
fn unknown_job(path: &str) -> Fail {
    Fail::with_code(
        crate::codes::UNKNOWN_JOB,
        format!(
            "no job at {path} (the node does not exist): check the name; a job's node is created by its first `zkr cron run`"
        ),
    )
}

/// Fails with [`unknown_job`] unless the job's node exists.
async fn require_job(session: &Session, path: &str) -> Result<(), Fail> {
    let client = session.client()?;
    match client.check_stat(path).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(unknown_job(path)),
        Err(e) => Err(Fail::new(format!("cannot read {path}: {e}"))),
    }
}

/// The participants of the job's election (`PATH/leader`) in election order, the leader first;
/// none when the election node does not exist yet.
///
/// # Cancel safety
/// Cancel safe: it only reads.
pub(crate) async fn job_participants(
    session: &Session,
    path: &str,
) -> Result<Vec<Participant>, Fail> {
    let election = format!("{path}/leader");
    match participants_on(session, &election).await {
        Ok(list) => Ok(list),
        Err(zookeeper_recipes::Error::Zookeeper(zookeeper_client::Error::NoNode)) => Ok(Vec::new()),
        Err(e) => Err(crate::auth::fail(
            format_args!("cannot read the participants of {path}"),
            &e,
        )),
    }
}

/// A warning when no replica stands for the job, so that nothing would act on a request now.
async fn nobody_stands(session: &Session, path: &str, what: &str) -> Option<String> {
    match job_participants(session, path).await {
        Ok(list) if list.is_empty() => Some(format!(
            "warning: no replica stands for {path} (its election has no participants): {what} when one starts"
        )),
        Ok(_) => None,
        Err(e) => Some(format!("warning: {}", e.message)),
    }
}

/// `cron status --check`: the problems found, most pressing first, and the exit code of the
/// first (0 when there is none).
fn check_status(
    status: &JobStatus,
    max_age: Option<Duration>,
    now_ms: i64,
) -> (Vec<&'static str>, u8) {
    let mut problems = Vec::new();
    if status.leader.is_none() {
        problems.push(("no_leader", CHECK_NO_LEADER));
    }
    // A failed slot with no later success, even if slots were skipped or missed after it.
    let failed = status.unrecovered_failure.is_some();
    let parked = status.open.iter().any(|r| r.state == SlotState::Parked);
    if failed {
        problems.push(("failed", CHECK_FAILED));
    }
    if parked {
        problems.push(("parked", CHECK_FAILED));
    }
    if let Some(max_age) = max_age {
        let max_ms = i64::try_from(max_age.as_millis()).unwrap_or(i64::MAX);
        let fresh = status
            .last_success
            .as_ref()
            .and_then(|r| r.ended_ms)
            .is_some_and(|ended| now_ms.saturating_sub(ended) <= max_ms);
        if !fresh {
            problems.push(("stale", CHECK_STALE));
        }
    }
    let code = problems.first().map_or(0, |(_, code)| *code);
    (problems.into_iter().map(|(p, _)| p).collect(), code)
}

/// One admin command: what to print, and how to exit.
async fn cron_admin_on(session: &Session, conn: &Conn, command: CronCommand) -> Result<Said, Fail> {
    // The ACL of the nodes an admin command may create (the job's `control`) is `--acl`'s.
    let admin = |path: &str| {
        JobAdmin::new(session, path)
            .and_then(|admin| admin.with_acl(conn.node_acl()))
            .map_err(Fail::from)
    };
    if let Some(path) = command.path() {
        require_job(session, path).await?;
    }
    match command {
        CronCommand::History { path, limit } => {
            let history = admin(&path)?.history(limit).await.map_err(|e| {
                crate::auth::fail(format_args!("cannot read the history of {path}"), &e)
            })?;
            Ok(Said::out(output::to_json(&history)?))
        }
        CronCommand::Status {
            path,
            check,
            max_age,
        } => {
            let admin = admin(&path)?;
            let status = admin.status().await.map_err(|e| {
                crate::auth::fail(format_args!("cannot read the status of {path}"), &e)
            })?;
            let participants = job_participants(session, &path).await?;
            // Ages are measured on the ensemble's clock (the records' times are the
            // ensemble's), read after the records so that an age is never understated.
            let (now_ms, clock, warning) = match admin.ensemble_now().await {
                Ok(now_ms) => (now_ms, output::Clock::Ensemble, None),
                Err(e) => {
                    tracing::warn!(path = %path, error = %e, "cannot read the ensemble's clock; ages are by this host's clock");
                    let local = i64::try_from(output::now_ms()).unwrap_or(i64::MAX);
                    let warning = format!(
                        "warning: cannot read the ensemble's clock (writing {path}/clock: {e}): ages are measured on this host's clock (\"clock\":\"local\"), which may be skewed; give this identity write access to the job"
                    );
                    (local, output::Clock::Local, Some(warning))
                }
            };
            let mut status_line = output::StatusLine::new(&status, now_ms, clock);
            // Without --check, status exits 0 whatever it finds, as before.
            let mut code = 0;
            if check {
                let (problems, first) = check_status(&status, max_age, now_ms);
                status_line = status_line.with_check(problems, max_age);
                code = first;
            }
            let mut line = serde_json::to_value(status_line)?;
            if let serde_json::Value::Object(fields) = &mut line {
                let list: Vec<output::ParticipantLine<'_>> =
                    participants.iter().map(Into::into).collect();
                fields.insert("participants".to_owned(), serde_json::to_value(&list)?);
            }
            Ok(Said::out(output::to_json(&line)?).exit(code).warn(warning))
        }
        CronCommand::Participants { path } => {
            let participants = job_participants(session, &path).await?;
            let list: Vec<output::ParticipantLine<'_>> =
                participants.iter().map(Into::into).collect();
            Ok(Said::out(output::to_json(&list)?))
        }
        CronCommand::Trigger { path, slot, date } => {
            let asked = match (slot, date) {
                (Some(slot), _) => TriggerFor::slot(&slot)?,
                (None, Some(date)) => TriggerFor::date(&date)?,
                (None, None) => TriggerFor::default(),
            };
            let n = admin(&path)?
                .trigger_for(asked)
                .await
                .map_err(|e| crate::auth::fail(format_args!("cannot trigger {path}"), &e))?;
            tracing::info!(path = %path, slot = %format!("trigger-{n}"), "triggered");
            let note = nobody_stands(session, &path, &format!("trigger-{n} runs"))
                .await
                .unwrap_or_else(|| {
                    format!("triggered {path}: the leader runs it as slot trigger-{n}")
                });
            Ok(Said::out(n.to_string()).warn(Some(note)))
        }
        CronCommand::Pause { path } => {
            admin(&path)?
                .pause()
                .await
                .map_err(|e| crate::auth::fail(format_args!("cannot pause {path}"), &e))?;
            tracing::info!(path = %path, "paused");
            let warning = nobody_stands(session, &path, "the pause takes effect").await;
            Ok(Said::out(format!(
                "paused {path}: due slots are recorded skipped (paused) until `zkr cron resume`; a slot already running goes on"
            ))
            .warn(warning))
        }
        CronCommand::Resume { path } => {
            admin(&path)?
                .resume()
                .await
                .map_err(|e| crate::auth::fail(format_args!("cannot resume {path}"), &e))?;
            tracing::info!(path = %path, "resumed");
            let warning = nobody_stands(session, &path, "slots run").await;
            Ok(Said::out(format!(
                "resumed {path}: due slots run again (those skipped while paused stay skipped)"
            ))
            .warn(warning))
        }
        CronCommand::Resolve {
            path,
            slot,
            resolution,
        } => {
            let how = if resolution.done {
                Resolution::Done
            } else {
                Resolution::Rerun
            };
            admin(&path)?.resolve(&slot, how).await.map_err(|e| {
                crate::auth::fail(format_args!("cannot resolve {slot} of {path}"), &e)
            })?;
            tracing::info!(path = %path, slot = %slot, done = resolution.done, "resolved");
            if resolution.done {
                Ok(Said::out(format!(
                    "resolved {slot} of {path}: recorded succeeded (resolved)"
                )))
            } else {
                let warning = nobody_stands(session, &path, "the rerun starts").await;
                Ok(Said::out(format!(
                    "resolved {slot} of {path}: handed back to the leader, which runs it again (attempt + 1)"
                ))
                .warn(warning))
            }
        }
        CronCommand::Run(_) | CronCommand::Next(_) => Err(Fail::new("not an admin command")),
    }
}
