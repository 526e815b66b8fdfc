//! ScheduledJob against real ZooKeeper: each slot finishes at most once across failovers, the
//! catch-up, overlap and on-crash policies, schedule changes, the ensemble's clock against a
//! replica's skewed or stepped one, bad input.
//!
//! Faults covered here: a replica closed mid-run (its term ends, the slot is cut off), a
//! replica's link to the server cut (its term ends on SUSPENDED; its late record of the run is
//! refused; its session expires and the next leader takes over), the whole job down for several
//! periods, a replica's wall clock skewed (30 days or an hour ahead, an hour behind) or stepped
//! (within and beyond the tolerance), a cursor left in the future, a host suspend (through a
//! `TestClock`), a leader's link blackholed while its run ignores its cancellation. Killed (-9)
//! and frozen (SIGSTOP) replicas are in zkr/tests/zkr_cli/cron_cli.rs, seeded ensemble faults in
//! rigs/tests/fault_trials.rs.

use zookeeper_recipes_rigs::fixtures as common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{BOUND, eventually, proxy_to, session, shared_server, within, zookeeper};
use zookeeper_recipes::job::{
    AttemptOutcome, CatchUp, JobAdmin, JobEvent, OnCrash, Overlap, Resolution, Schedule,
    ScheduledJob, SkewedClock, SlotRecord, SlotRun, SlotState, TriggerFor,
};
use zookeeper_recipes::{BootTime, TestClock};
use zookeeper_recipes::{Error, ErrorPolicy, FencingToken, Session};
use zookeeper_recipes_testing as testing;

/// One run of the job as its closure saw it.
#[derive(Debug, Clone)]
struct Run {
    who: String,
    slot: String,
    token: FencingToken,
    attempt: u32,
    recovering: bool,
    start: Instant,
    end: Instant,
}

#[derive(Clone, Default)]
struct Runs(Arc<Mutex<Vec<Run>>>);

impl Runs {
    fn all(&self) -> Vec<Run> {
        let mut runs = self.0.lock().unwrap().clone();
        runs.sort_by_key(|r| r.start);
        runs
    }

    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// No two runs at once, and tokens never fall from one start to the next.
    fn assert_serial(&self) {
        let runs = self.all();
        for w in runs.windows(2) {
            assert!(
                w[0].end <= w[1].start,
                "runs overlap: {:?} and {:?}",
                w[0],
                w[1]
            );
            assert!(
                w[1].token >= w[0].token,
                "token fell: {:?} then {:?}",
                w[0],
                w[1]
            );
        }
    }
}

/// A job that records each run; it holds the run for `hold`, or until the term ends, or (with
/// `hang`) until the term ends only.
fn recorder(
    who: &str,
    runs: &Runs,
    hold: Duration,
) -> impl Fn(SlotRun) -> futures::future::BoxFuture<'static, Result<(), std::io::Error>>
+ Send
+ Sync
+ 'static {
    let who = who.to_owned();
    let runs = runs.clone();
    move |run: SlotRun| {
        let who = who.clone();
        let runs = runs.clone();
        Box::pin(async move {
            let start = Instant::now();
            tokio::select! {
                _ = tokio::time::sleep(hold) => {}
                _ = run.leadership().cancelled() => {}
            }
            runs.0.lock().unwrap().push(Run {
                who,
                slot: run.slot().to_owned(),
                token: run.token(),
                attempt: run.attempt(),
                recovering: run.is_recovering(),
                start,
                end: Instant::now(),
            });
            Ok(())
        })
    }
}

/// As `recorder(who, runs, ZERO)`, but every run first waits for a permit of `gate`.
fn gated(
    who: &str,
    runs: &Runs,
    gate: &Arc<tokio::sync::Notify>,
) -> impl Fn(SlotRun) -> futures::future::BoxFuture<'static, Result<(), std::io::Error>>
+ Send
+ Sync
+ 'static {
    let record = recorder(who, runs, Duration::ZERO);
    let gate = Arc::clone(gate);
    move |run: SlotRun| {
        let gate = Arc::clone(&gate);
        let run = record(run);
        Box::pin(async move {
            gate.notified().await;
            run.await
        })
    }
}

/// The key of the next slot the job reports started, within [`BOUND`].
async fn next_started(
    events: &mut tokio::sync::broadcast::Receiver<JobEvent>,
    what: &str,
) -> String {
    within(BOUND, what, async {
        loop {
            if let Ok(JobEvent::SlotStarted { slot, .. }) = events.recv().await {
                break slot;
            }
        }
    })
    .await
}

async fn history(session: &Session, path: &str) -> Vec<SlotRecord> {
    JobAdmin::new(session, path)
        .unwrap()
        .history(10_000)
        .await
        .unwrap()
}

/// The history oldest first, by slot key.
async fn by_slot(session: &Session, path: &str) -> BTreeMap<String, SlotRecord> {
    history(session, path)
        .await
        .into_iter()
        .map(|r| (r.slot.clone(), r))
        .collect()
}

/// Waits until `n` more slots succeeded than `from`.
async fn succeeded(session: &Session, path: &str, at_least: usize) -> Vec<SlotRecord> {
    let what = format!("{at_least} succeeded slots under {path}");
    eventually(BOUND, &what, || async {
        let h = history(session, path).await;
        let ok: Vec<SlotRecord> = h
            .into_iter()
            .filter(|r| r.state == SlotState::Succeeded)
            .collect();
        (ok.len() >= at_least).then_some(ok)
    })
    .await
}

/// Every scheduled slot between the first and the last recorded one, of an interval schedule.
fn expected_slots(schedule: &Schedule, first: i64, last: i64) -> Vec<String> {
    let (slots, more) = schedule.slots_between(first - 1, last, 100_000);
    assert!(!more);
    slots.into_iter().map(Schedule::key).collect()
}

fn scheduled(records: &BTreeMap<String, SlotRecord>) -> Vec<&SlotRecord> {
    records
        .values()
        .filter(|r| !r.slot.starts_with("trigger-"))
        .collect()
}

async fn leader_index(jobs: &[ScheduledJob]) -> usize {
    eventually(BOUND, "a leader among the replicas", || async {
        jobs.iter().position(ScheduledJob::has_leadership)
    })
    .await
}

#[tokio::test]
async fn three_replicas_run_every_slot_exactly_once_with_catch_up_all() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let path = testing::unique_path("cron-three");
    let period = Duration::from_secs(1);
    let runs = Runs::default();
    let mut sessions = Vec::new();
    let mut jobs = Vec::new();
    for i in 0..3 {
        let s = session(server.connect_string(), Duration::from_secs(10)).await;
        jobs.push(Some(
            ScheduledJob::builder(&s, &path)
                .every(period)
                .id(format!("r{i}"))
                .catch_up(CatchUp::All)
                // A loaded machine can make a short run end past the next slot's tolerance.
                .overlap(Overlap::BufferOne)
                .start(recorder(&format!("r{i}"), &runs, Duration::from_millis(50)))
                .await
                .unwrap(),
        ));
        sessions.push(s);
    }
    // Two handovers: the leader leaves, twice, while the schedule goes on.
    for round in 1..=3 {
        succeeded(&sessions[0], &path, round * 3).await;
        if round < 3 {
            let live: Vec<ScheduledJob> = jobs.iter_mut().filter_map(Option::take).collect();
            let leader = leader_index(&live).await;
            let mut live: Vec<Option<ScheduledJob>> = live.into_iter().map(Some).collect();
            let gone = live[leader].take().unwrap();
            gone.close().await.unwrap();
            jobs = live;
        }
    }
    for job in jobs.into_iter().flatten() {
        job.close().await.unwrap();
    }
    let records = by_slot(&sessions[0], &path).await;
    let slots = scheduled(&records);
    let first = slots.iter().map(|r| r.nominal_ms).min().unwrap();
    let last = slots.iter().map(|r| r.nominal_ms).max().unwrap();
    let schedule = Schedule::every(period).unwrap();
    for key in expected_slots(&schedule, first, last) {
        let r = records
            .get(&key)
            .unwrap_or_else(|| panic!("slot {key} has no record: {records:#?}"));
        // The last slot may have been cut off by the final close.
        if r.nominal_ms != last {
            assert_eq!(r.state, SlotState::Succeeded, "{r:?}");
        }
    }
    runs.assert_serial();
    let runners: std::collections::BTreeSet<String> =
        runs.all().iter().map(|r| r.who.clone()).collect();
    assert!(runners.len() >= 3, "three leaders ran slots: {runners:?}");
}

/// Runs a job on `every(period)` until it has run twice, takes it down for `outage`, starts it
/// again with `catch_up`, and returns the history and the wall-clock instant of the restart.
async fn outage(
    name: &str,
    catch_up: CatchUp,
    period: Duration,
    outage: Duration,
) -> (BTreeMap<String, SlotRecord>, i64, i64, Runs) {
    let server = shared_server().await;
    let path = testing::unique_path(name);
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let runs = Runs::default();
    let first = ScheduledJob::builder(&s, &path)
        .every(period)
        .id("before")
        .catch_up(catch_up)
        .start(recorder("before", &runs, Duration::ZERO))
        .await
        .unwrap();
    let before = succeeded(&s, &path, 2).await;
    first.close().await.unwrap();
    let down_at = before.iter().map(|r| r.nominal_ms).max().unwrap();
    // The outage itself: the job is down for this long (the test's input, not a wait for an
    // event).
    tokio::time::sleep(outage).await;
    let restart_ms = chrono_now_ms();
    let again = ScheduledJob::builder(&s, &path)
        .every(period)
        .id("after")
        .catch_up(catch_up)
        .start(recorder("after", &runs, Duration::ZERO))
        .await
        .unwrap();
    eventually(BOUND, "a run after the restart", || async {
        runs.all().iter().any(|r| r.who == "after").then_some(())
    })
    .await;
    // And one on time after that.
    let n = runs.count();
    eventually(BOUND, "one more run", || async {
        (runs.count() > n).then_some(())
    })
    .await;
    again.close().await.unwrap();
    (by_slot(&s, &path).await, down_at, restart_ms, runs)
}

fn chrono_now_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

#[tokio::test]
async fn catch_up_latest_runs_only_the_newest_missed_slot() {
    if !zookeeper() {
        return;
    }
    let period = Duration::from_millis(200);
    let (records, down_at, restart, runs) = outage(
        "cron-latest",
        CatchUp::Latest,
        period,
        Duration::from_millis(1500),
    )
    .await;
    let schedule = Schedule::every(period).unwrap();
    let newest_missed = schedule.latest_at_or_before(restart).unwrap();
    let after: Vec<Run> = runs
        .all()
        .into_iter()
        .filter(|r| r.who == "after")
        .collect();
    // The first run after the restart is the newest slot that had come due by then (or a later
    // one, if the restart's own reads took past the next slot).
    let first_after = Schedule::parse_key(&after[0].slot).unwrap();
    assert!(first_after >= newest_missed, "{after:?} vs {newest_missed}");
    // The outage's records only: a loaded machine may stall the loop before the outage or
    // after the restart and fold a few late slots into records of their own.
    let missed: Vec<&SlotRecord> = records
        .values()
        .filter(|r| {
            r.state == SlotState::Missed && r.nominal_ms > down_at && r.nominal_ms <= restart
        })
        .collect();
    assert_eq!(missed.len(), 1, "one folded missed record: {records:#?}");
    let range = missed[0].range.as_ref().expect("a missed range");
    assert!(
        range.count >= 5,
        "a 1.5 s outage of a 200 ms job misses >= 5: {range:?}"
    );
    assert_eq!(missed[0].reason.as_deref(), Some("catch_up"));
    assert_eq!(
        Schedule::parse_key(&range.from).unwrap(),
        down_at + 200,
        "the range starts right after the last run before the outage"
    );
    // Nothing between the last run before and the first after ran.
    for r in &runs.all() {
        let at = Schedule::parse_key(&r.slot).unwrap();
        assert!(
            at <= down_at || at >= first_after,
            "{r:?} ran inside the missed range"
        );
    }
}

#[tokio::test]
async fn catch_up_all_runs_every_missed_slot_in_order() {
    if !zookeeper() {
        return;
    }
    let period = Duration::from_millis(200);
    let (records, _, _, runs) = outage(
        "cron-all",
        CatchUp::All,
        period,
        Duration::from_millis(1500),
    )
    .await;
    let slots = scheduled(&records);
    let first = slots.iter().map(|r| r.nominal_ms).min().unwrap();
    let last = slots.iter().map(|r| r.nominal_ms).max().unwrap();
    for key in expected_slots(&Schedule::every(period).unwrap(), first, last) {
        let r = records
            .get(&key)
            .unwrap_or_else(|| panic!("no record of {key}"));
        // The last slot may have been cut off by the final close.
        if r.nominal_ms != last {
            assert_eq!(r.state, SlotState::Succeeded, "{r:?}");
        }
    }
    // In slot order, each once.
    let order: Vec<i64> = runs
        .all()
        .into_iter()
        .map(|r| Schedule::parse_key(&r.slot).unwrap())
        .collect();
    let mut sorted = order.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(order, sorted, "runs in slot order, each once");
    runs.assert_serial();
}

/// A replica closed in the middle of a slot, the job down for several periods, then a new
/// replica with catch-up `all`: it retries the cut-off slot and then runs every slot that came
/// due while the job was down. Those slots came due before its retry started, so they did not
/// overlap it and are not skipped for overlap (found by the fault trials: a failover mid-slot
/// folded the slots of the failover into one `missed (overlap)` record).
#[tokio::test]
async fn catch_up_all_runs_the_slots_of_an_outage_after_retrying_the_cut_off_one() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let path = testing::unique_path("cron-all-cut-off");
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let period = Duration::from_millis(200);
    let runs = Runs::default();
    let first = ScheduledJob::builder(&s, &path)
        .every(period)
        .id("before")
        .catch_up(CatchUp::All)
        // Holds its run until its term ends.
        .start(recorder("before", &runs, Duration::from_secs(60)))
        .await
        .unwrap();
    let mut events = first.events();
    let cut = next_started(&mut events, "the first slot started").await;
    first.close().await.unwrap();
    assert_eq!(by_slot(&s, &path).await[&cut].state, SlotState::Running);
    // The outage itself: the job is down for this long (the test's input).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let again = ScheduledJob::builder(&s, &path)
        .every(period)
        .id("after")
        .catch_up(CatchUp::All)
        .start(recorder("after", &runs, Duration::ZERO))
        .await
        .unwrap();
    // The retry, the outage's slots, and a few on time after them.
    let after_restart = chrono_now_ms() + 600;
    eventually(BOUND, "a run of a slot due after the restart", || async {
        runs.all()
            .iter()
            .any(|r| Schedule::parse_key(&r.slot).unwrap() > after_restart)
            .then_some(())
    })
    .await;
    again.close().await.unwrap();
    let records = by_slot(&s, &path).await;
    let retried = &records[&cut];
    assert_eq!(
        (retried.state, retried.attempt),
        (SlotState::Succeeded, 2),
        "{retried:?}"
    );
    // The close may cut off the slot it finds running: up to the newest settled one.
    let last = scheduled(&records)
        .iter()
        .filter(|r| r.state.is_final())
        .map(|r| r.nominal_ms)
        .max()
        .unwrap();
    let from = Schedule::parse_key(&cut).unwrap();
    for key in expected_slots(&Schedule::every(period).unwrap(), from, last) {
        let r = records
            .get(&key)
            .unwrap_or_else(|| panic!("no record of {key}: {records:#?}"));
        assert_eq!(r.state, SlotState::Succeeded, "{r:?}");
    }
    runs.assert_serial();
}

#[tokio::test]
async fn catch_up_none_records_the_outage_as_missed() {
    if !zookeeper() {
        return;
    }
    let period = Duration::from_millis(200);
    let (records, down_at, restart, runs) = outage(
        "cron-none",
        CatchUp::None,
        period,
        Duration::from_millis(1500),
    )
    .await;
    // The outage is one missed range. A loaded machine may stall the loop before the outage
    // (the first start, a slot late beyond the catch-up's lateness) or after it and miss more,
    // each recorded on its own: only the records between the last run before the outage and
    // the restart are the outage's.
    let missed: Vec<&SlotRecord> = records
        .values()
        .filter(|r| {
            r.state == SlotState::Missed && r.nominal_ms > down_at && r.nominal_ms <= restart
        })
        .collect();
    assert_eq!(missed.len(), 1, "{records:#?}");
    let range = missed[0].range.as_ref().unwrap();
    assert_eq!(Schedule::parse_key(&range.from).unwrap(), down_at + 200);
    // It covers the outage up to the restart (and what came due while the restart read the
    // job's state).
    assert!(
        Schedule::parse_key(&range.to).unwrap() >= restart - 200,
        "{range:?}"
    );
    // Every run after the restart is of a slot that came due after it started (give the
    // restart's own reads the slot that was due as it came up).
    for r in runs.all().iter().filter(|r| r.who == "after") {
        let at = Schedule::parse_key(&r.slot).unwrap();
        assert!(at > Schedule::parse_key(&range.to).unwrap(), "{r:?}");
    }
}

#[tokio::test]
async fn overlap_skip_records_the_slot_that_came_due_while_running() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let path = testing::unique_path("cron-skip");
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let runs = Runs::default();
    let job = ScheduledJob::builder(&s, &path)
        .every(Duration::from_millis(300))
        .start(recorder("a", &runs, Duration::from_millis(700)))
        .await
        .unwrap();
    let mut events = job.events();
    within(BOUND, "a slot skipped for overlap", async {
        loop {
            if let Ok(JobEvent::SlotSkipped { reason, .. }) = events.recv().await
                && reason == "overlap"
            {
                break;
            }
        }
    })
    .await;
    succeeded(&s, &path, 2).await;
    job.close().await.unwrap();
    runs.assert_serial();
    let records = by_slot(&s, &path).await;
    assert!(
        records
            .values()
            .any(|r| r.state == SlotState::Skipped && r.reason.as_deref() == Some("overlap")),
        "{records:#?}"
    );
    // Skipped slots never ran.
    for r in runs.all() {
        assert_ne!(records[&r.slot].state, SlotState::Skipped, "{r:?}");
    }
}

#[tokio::test]
async fn overlap_buffer_one_runs_one_late_slot_after_the_running_one() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let path = testing::unique_path("cron-buffer");
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let runs = Runs::default();
    let period = Duration::from_millis(300);
    let job = ScheduledJob::builder(&s, &path)
        .every(period)
        .overlap(Overlap::BufferOne)
        .start(recorder("a", &runs, Duration::from_millis(700)))
        .await
        .unwrap();
    succeeded(&s, &path, 3).await;
    job.close().await.unwrap();
    runs.assert_serial();
    let all = runs.all();
    // The slot right after each run's slot was buffered and ran next; the one after it skipped.
    let records = by_slot(&s, &path).await;
    let consecutive = all.windows(2).any(|w| {
        Schedule::parse_key(&w[1].slot).unwrap() - Schedule::parse_key(&w[0].slot).unwrap() == 300
    });
    assert!(
        consecutive,
        "a buffered slot ran right after its predecessor: {all:?}"
    );
    assert!(
        records
            .values()
            .any(|r| r.state == SlotState::Skipped && r.reason.as_deref() == Some("overlap")),
        "{records:#?}"
    );
}

#[tokio::test]
async fn a_cut_off_slot_is_retried_with_a_higher_token_and_the_late_write_is_refused() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let path = testing::unique_path("cron-cutoff");
    let proxy = proxy_to(server).await;
    let timeout = Duration::from_secs(2);
    let a_session = session(&proxy.connect_string(), timeout).await;
    let b_session = session(server.connect_string(), timeout).await;
    let runs = Runs::default();
    // No scheduled slot in this test's time: the run is an operator's trigger.
    let a = ScheduledJob::builder(&a_session, &path)
        .every(Duration::from_secs(3600))
        .id("a")
        .start(recorder("a", &runs, Duration::from_secs(3600)))
        .await
        .unwrap();
    let mut a_events = a.events();
    within(BOUND, "a leads", async {
        let mut term = a.leadership();
        term.wait_for(Option::is_some).await.unwrap();
    })
    .await;
    a.admin().trigger().await.unwrap();
    let started = within(BOUND, "a starts trigger-1", async {
        loop {
            if let Ok(JobEvent::SlotStarted { slot, token, .. }) = a_events.recv().await {
                break (slot, token);
            }
        }
    })
    .await;
    assert_eq!(started.0, "trigger-1");
    let b = ScheduledJob::builder(&b_session, &path)
        .every(Duration::from_secs(3600))
        .id("b")
        .start(recorder("b", &runs, Duration::from_millis(50)))
        .await
        .unwrap();
    // a's link goes: its term ends at SUSPENDED, its run is cancelled, and its record of the
    // run's end is refused; its session expires on the server and b takes over.
    let cut_at = Instant::now();
    proxy.cut();
    let refused = within(BOUND, "a's late write refused", async {
        loop {
            if let Ok(JobEvent::SlotAbandoned {
                slot,
                token,
                reason,
            }) = a_events.recv().await
            {
                break (slot, token, reason);
            }
        }
    })
    .await;
    assert_eq!(refused.0, "trigger-1");
    assert_eq!(refused.1, started.1);
    let retried = eventually(BOUND, "b re-runs trigger-1", || async {
        runs.all()
            .into_iter()
            .find(|r| r.who == "b" && r.slot == "trigger-1")
    })
    .await;
    eprintln!(
        "cut-off slot resumed {} ms after the link was cut (session timeout {timeout:?})",
        retried.start.duration_since(cut_at).as_millis()
    );
    assert_eq!(retried.attempt, 2);
    assert!(retried.recovering);
    assert!(retried.token > started.1, "{retried:?} vs {started:?}");
    let records = by_slot(&b_session, &path).await;
    let r = &records["trigger-1"];
    assert_eq!(r.state, SlotState::Succeeded, "{r:?}");
    assert_eq!(r.attempt, 2);
    assert_eq!(r.runner.as_deref(), Some("b"));
    assert_eq!(r.token, Some(retried.token.get()));
    proxy.heal();
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// Leaves a `running` record of `slot` from an earlier term, as a crashed runner does.
async fn leave_cut_off(session: &Session, path: &str, slot: &str, attempt: u32) {
    let client = session.client().unwrap();
    let record = serde_json::json!({
        "slot": slot, "nominal_ms": Schedule::parse_key(slot).unwrap_or(0), "state": "running",
        "token": 1, "attempt": attempt, "runner": "crashed", "started_ms": 1,
        "ended_ms": null, "exit_code": null,
    });
    let mode =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    client.mkdir(&format!("{path}/slots"), &mode).await.unwrap();
    client
        .create(
            &format!("{path}/slots/{slot}"),
            record.to_string().as_bytes(),
            &mode,
        )
        .await
        .unwrap();
}

async fn one_replica(
    s: &Session,
    path: &str,
    runs: &Runs,
    configure: impl FnOnce(
        zookeeper_recipes::job::ScheduledJobBuilder,
    ) -> zookeeper_recipes::job::ScheduledJobBuilder,
) -> ScheduledJob {
    configure(
        ScheduledJob::builder(s, path)
            .every(Duration::from_secs(3600))
            .id("next"),
    )
    .start(recorder("next", runs, Duration::ZERO))
    .await
    .unwrap()
}

/// The key of a slot `hours_ago` hours before now, on the hour (recent enough to stay in the
/// history, old enough that no `every(1 h)` slot of the test is due before it).
fn hours_ago(hours: i64) -> String {
    let now = chrono_now_ms();
    Schedule::key(now - now.rem_euclid(3_600_000) - hours * 3_600_000)
}

#[tokio::test]
async fn a_cut_off_slot_is_retried_up_to_max_attempts() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let (one, two) = (hours_ago(3), hours_ago(2));
    let path = testing::unique_path("cron-attempts");
    leave_cut_off(&s, &path, &one, 1).await;
    leave_cut_off(&s, &path, &two, 2).await;
    let runs = Runs::default();
    let job = one_replica(&s, &path, &runs, |b| b.max_attempts(2)).await;
    let records = eventually(BOUND, "both cut-off slots settled", || async {
        let r = by_slot(&s, &path).await;
        r.values().all(|r| r.state.is_final()).then_some(r)
    })
    .await;
    job.close().await.unwrap();
    let retried = &records[&one];
    assert_eq!((retried.state, retried.attempt), (SlotState::Succeeded, 2));
    let exhausted = &records[&two];
    assert_eq!(exhausted.state, SlotState::Failed);
    assert_eq!(exhausted.reason.as_deref(), Some("max_attempts"));
    let ran: Vec<String> = runs.all().into_iter().map(|r| r.slot).collect();
    assert_eq!(ran, std::slice::from_ref(&one));
    assert!(runs.all()[0].recovering);
}

#[tokio::test]
async fn on_crash_fail_records_a_cut_off_slot_failed() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let one = hours_ago(3);
    let path = testing::unique_path("cron-fail");
    leave_cut_off(&s, &path, &one, 1).await;
    let runs = Runs::default();
    let job = one_replica(&s, &path, &runs, |b| b.on_crash(OnCrash::Fail)).await;
    let record = eventually(BOUND, "the cut-off slot failed", || async {
        let r = by_slot(&s, &path).await;
        r.get(&one)
            .filter(|r| r.state == SlotState::Failed)
            .cloned()
    })
    .await;
    job.close().await.unwrap();
    assert_eq!(record.reason.as_deref(), Some("cut_off"));
    assert_eq!(runs.count(), 0, "at most once: not run again");
}

#[tokio::test]
async fn park_and_resolve() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let (one, two) = (hours_ago(3), hours_ago(2));
    let path = testing::unique_path("cron-park");
    leave_cut_off(&s, &path, &one, 1).await;
    leave_cut_off(&s, &path, &two, 1).await;
    let runs = Runs::default();
    let job = one_replica(&s, &path, &runs, |b| b.on_crash(OnCrash::Park)).await;
    let admin = job.admin();
    eventually(BOUND, "both slots parked", || async {
        let r = by_slot(&s, &path).await;
        r.values()
            .all(|r| r.state == SlotState::Parked)
            .then_some(())
    })
    .await;
    assert_eq!(runs.count(), 0);
    admin.resolve(&one, Resolution::Rerun).await.unwrap();
    admin.resolve(&two, Resolution::Done).await.unwrap();
    let rerun = eventually(BOUND, "the released slot re-run", || async {
        runs.all().into_iter().next()
    })
    .await;
    assert_eq!((rerun.slot.as_str(), rerun.attempt), (one.as_str(), 2));
    assert!(rerun.recovering);
    let records = eventually(BOUND, "both resolved", || async {
        let r = by_slot(&s, &path).await;
        r.values()
            .all(|r| r.state == SlotState::Succeeded)
            .then_some(r)
    })
    .await;
    assert_eq!(records[&two].reason.as_deref(), Some("resolved"));
    // Only parked slots can be resolved.
    assert!(matches!(
        admin.resolve(&two, Resolution::Rerun).await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        admin
            .resolve("1999-01-01T00:00:00Z", Resolution::Done)
            .await,
        Err(Error::InvalidArgument { .. })
    ));
    job.close().await.unwrap();
    assert_eq!(runs.count(), 1);
}

#[tokio::test]
async fn a_changed_schedule_does_not_replay_old_slots() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    for replay in [false, true] {
        let path = testing::unique_path("cron-change");
        let runs = Runs::default();
        let old = ScheduledJob::builder(&s, &path)
            .every(Duration::from_millis(200))
            .catch_up(CatchUp::All)
            .start(recorder("old", &runs, Duration::ZERO))
            .await
            .unwrap();
        succeeded(&s, &path, 2).await;
        old.close().await.unwrap();
        let last_old = runs.all().last().map(|r| r.slot.clone()).unwrap();
        tokio::time::sleep(Duration::from_millis(1000)).await; // the job is down this long
        let restart = chrono_now_ms();
        let new = ScheduledJob::builder(&s, &path)
            .every(Duration::from_millis(250))
            .catch_up(CatchUp::All)
            .replay_on_schedule_change(replay)
            .start(recorder("new", &runs, Duration::ZERO))
            .await
            .unwrap();
        let mut events = new.events();
        let change = within(BOUND, "the schedule change seen", async {
            loop {
                if let Ok(JobEvent::ScheduleChanged { from, to }) = events.recv().await {
                    break (from, to);
                }
            }
        })
        .await;
        assert_eq!(change, ("every 200ms+0ms".into(), "every 250ms+0ms".into()));
        eventually(BOUND, "two runs of the new schedule", || async {
            (runs.all().iter().filter(|r| r.who == "new").count() >= 2).then_some(())
        })
        .await;
        new.close().await.unwrap();
        // The first slot of the new schedule's own: a retry of the old schedule's last slot,
        // cut off by the close (the close can land between a claim and its run's end on a
        // loaded machine), is owed whatever the schedule, and is not a replay of the outage.
        let first_new = runs
            .all()
            .into_iter()
            .find(|r| r.who == "new" && !r.recovering)
            .unwrap();
        let at = Schedule::parse_key(&first_new.slot).unwrap();
        let last_old = Schedule::parse_key(&last_old).unwrap();
        if replay {
            assert!(at < restart - 250, "replayed the outage: {first_new:?}");
            assert!(at > last_old);
        } else {
            assert!(
                at > restart - 250,
                "did not replay: {first_new:?} restart {restart}"
            );
        }
        let status = JobAdmin::new(&s, &path).unwrap().status().await.unwrap();
        assert_eq!(status.schedule.as_deref(), Some("every 250ms+0ms"));
    }
}

const DAY_MS: i64 = 24 * 3_600_000;
const HOUR_MS: i64 = 3_600_000;

/// The ensemble's time now: the `mtime` of a write of the test's own (a probe node created and
/// deleted), the clock the job goes by.
async fn ensemble_ms(s: &Session) -> i64 {
    let zk = s.client().unwrap();
    let mode = zookeeper_client::CreateMode::EphemeralSequential
        .with_acls(zookeeper_client::Acls::anyone_all());
    let (stat, seq) = zk.create("/clock-probe-", b"", &mode).await.unwrap();
    zk.delete(&format!("/clock-probe-{seq}"), None)
        .await
        .unwrap();
    stat.mtime
}

/// A slot record with the ensemble's time of its claim: the record node's `ctime`, the `mtime`
/// of the multi that created it (the claim of a slot that had no record).
#[derive(Debug)]
struct Claim {
    record: SlotRecord,
    ctime: i64,
}

async fn claims(s: &Session, path: &str) -> Vec<Claim> {
    let zk = s.client().unwrap();
    let mut out = Vec::new();
    for name in zk.list_children(&format!("{path}/slots")).await.unwrap() {
        let (data, stat) = zk.get_data(&format!("{path}/slots/{name}")).await.unwrap();
        let record: SlotRecord = serde_json::from_slice(&data).unwrap();
        out.push(Claim {
            record,
            ctime: stat.ctime,
        });
    }
    out.sort_by_key(|c| c.record.nominal_ms);
    out
}

/// The slots `who` claimed fresh (attempt 1, scheduled) and that succeeded, with how long after
/// its nominal instant each claim landed by the ensemble's clock (negative: early).
async fn claim_lateness(s: &Session, path: &str, who: &str) -> Vec<(String, i64)> {
    claims(s, path)
        .await
        .into_iter()
        .filter(|c| {
            c.record.runner.as_deref() == Some(who)
                && c.record.attempt == 1
                && c.record.state == SlotState::Succeeded
                && !c.record.slot.starts_with("trigger-")
        })
        .map(|c| (c.record.slot.clone(), c.ctime - c.record.nominal_ms))
        .collect()
}

/// Waits for the next `ClockSkew` a replica reports; fails if it starts a slot first.
async fn next_skew(
    events: &mut tokio::sync::broadcast::Receiver<JobEvent>,
    what: &str,
) -> (i64, u64, Instant) {
    within(BOUND, what, async {
        loop {
            match events.recv().await {
                Ok(JobEvent::ClockSkew {
                    offset_ms,
                    tolerance_ms,
                }) => break (offset_ms, tolerance_ms, Instant::now()),
                Ok(JobEvent::SlotStarted { slot, .. }) => {
                    panic!("a skewed replica started {slot}")
                }
                _ => {}
            }
        }
    })
    .await
}

/// A replica whose clock is 30 days ahead (a VM from a template, a bad time source) leads a new
/// job: it measures its clock against the ensemble's on its first write, takes up no slot,
/// reports `ClockSkew` and gives its term up; alone, it stays out of the election for its
/// hold-back (5 s) before it measures again, instead of leading and giving up in a loop. An
/// honest replica then leads and runs the next slot within a period, and nothing (record or
/// cursor) lies in the future by the ensemble's clock. Before the job went by the ensemble's
/// clock, the skewed leader ran the slots of 30 days ahead and moved the cursor there, and the
/// honest replica ran nothing after it left.
#[tokio::test]
async fn a_leader_thirty_days_ahead_takes_up_no_slot_and_an_honest_replica_runs_the_next_one() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let path = testing::unique_path("cron-skew-30d");
    let sa = session(server.connect_string(), Duration::from_secs(10)).await;
    let sb = session(server.connect_string(), Duration::from_secs(10)).await;
    let period = Duration::from_secs(1);
    let runs = Runs::default();
    let a = ScheduledJob::builder(&sa, &path)
        .every(period)
        .id("a")
        .wall_clock(Arc::new(SkewedClock::new(30 * DAY_MS)))
        .start(recorder("a", &runs, Duration::ZERO))
        .await
        .unwrap();
    let mut a_events = a.events();
    let first = next_skew(&mut a_events, "a reports its clock 30 days ahead").await;
    let second = next_skew(&mut a_events, "a measures again after its hold-back").await;
    let gap = second.2 - first.2;
    eprintln!(
        "a, 30 days ahead: offset {} ms (tolerance {} ms); alone, it measured again {} ms later",
        first.0,
        first.1,
        gap.as_millis()
    );
    assert!((first.0 - 30 * DAY_MS).abs() < 5_000, "{first:?}");
    assert_eq!(first.1, 10_000, "the default tolerance");
    assert!(
        gap >= Duration::from_millis(4_500),
        "a skewed replica alone stood again after {gap:?}, not after its 5 s hold-back"
    );

    let b = ScheduledJob::builder(&sb, &path)
        .every(period)
        .id("b")
        .start(recorder("b", &runs, Duration::ZERO))
        .await
        .unwrap();
    let b_leads = within(BOUND, "b leads while a holds back", async {
        b.leadership().wait_for(Option::is_some).await.unwrap();
        Instant::now()
    })
    .await;
    let b_first = eventually(BOUND, "b runs a slot", || async {
        runs.all().into_iter().find(|r| r.who == "b")
    })
    .await;
    let now = ensemble_ms(&sb).await;
    let status = JobAdmin::new(&sb, &path).unwrap().status().await.unwrap();
    let cursor = Schedule::parse_key(status.cursor.as_deref().unwrap()).unwrap();
    let records = claims(&sb, &path).await;
    eprintln!(
        "b ran its first slot {} ms after it led; cursor {} ms from the ensemble's now; {} records, none ahead",
        b_first.start.duration_since(b_leads).as_millis(),
        cursor - now,
        records.len()
    );
    assert!(
        b_first.start.duration_since(b_leads) <= period * 2,
        "b waited {:?} for its first slot",
        b_first.start.duration_since(b_leads)
    );
    assert!(
        cursor <= now,
        "the cursor {cursor} is ahead of the ensemble's {now}"
    );
    for c in &records {
        assert!(c.record.nominal_ms <= now, "a record in the future: {c:?}");
    }
    assert!(
        runs.all().iter().all(|r| r.who == "b"),
        "a, skewed, ran a slot: {:?}",
        runs.all()
    );
    b.close().await.unwrap();
    a.close().await.unwrap();
}

/// A cursor found beyond the ensemble's time plus the tolerance (left by a leader of an
/// earlier version whose clock ran 30 days ahead, with a record of a slot it ran then) is
/// brought back to the newest slot at or before the ensemble's now, with `CursorRewound`: the
/// next slot runs within a period, and the slot recorded in the future is not run again.
#[tokio::test]
async fn a_cursor_left_in_the_future_is_brought_back_and_the_next_slot_runs_within_a_period() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("cron-rewind");
    let period = Duration::from_secs(1);
    let schedule = Schedule::every(period).unwrap();
    let future = schedule
        .latest_at_or_before(ensemble_ms(&s).await + 30 * DAY_MS)
        .unwrap();
    let future_key = Schedule::key(future);
    let zk = s.client().unwrap();
    let mode =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    zk.mkdir(&format!("{path}/slots"), &mode).await.unwrap();
    let state = serde_json::json!({
        "spec": schedule.spec(), "spec_hash": schedule.spec_hash(), "cursor_ms": future,
        "triggers_done": 0,
    });
    zk.create(
        &format!("{path}/state"),
        state.to_string().as_bytes(),
        &mode,
    )
    .await
    .unwrap();
    let ran_early = serde_json::json!({
        "slot": future_key, "nominal_ms": future, "state": "succeeded", "token": 1,
        "attempt": 1, "runner": "skewed", "started_ms": future, "ended_ms": future,
        "exit_code": null,
    });
    zk.create(
        &format!("{path}/slots/{future_key}"),
        ran_early.to_string().as_bytes(),
        &mode,
    )
    .await
    .unwrap();
    let runs = Runs::default();
    let job = ScheduledJob::builder(&s, &path)
        .every(period)
        .id("honest")
        .start(recorder("honest", &runs, Duration::ZERO))
        .await
        .unwrap();
    let mut events = job.events();
    let (from, to) = within(BOUND, "the cursor brought back", async {
        loop {
            if let Ok(JobEvent::CursorRewound { from, to }) = events.recv().await {
                break (from, to);
            }
        }
    })
    .await;
    let rewound_at = Instant::now();
    let first = eventually(BOUND, "the next slot runs", || async {
        runs.all().into_iter().next()
    })
    .await;
    let now = ensemble_ms(&s).await;
    eprintln!(
        "cursor {from} brought back to {to}; the next slot ran {} ms later",
        first.start.duration_since(rewound_at).as_millis()
    );
    assert_eq!(from, future_key);
    assert!(Schedule::parse_key(&to).unwrap() <= now);
    assert!(first.start.duration_since(rewound_at) <= period * 2);
    job.close().await.unwrap();
    let records = by_slot(&s, &path).await;
    assert_eq!(records[&future_key].state, SlotState::Succeeded);
    assert!(
        runs.all().iter().all(|r| r.slot != future_key),
        "the slot recorded in the future ran again"
    );
    let status = JobAdmin::new(&s, &path).unwrap().status().await.unwrap();
    let cursor = Schedule::parse_key(status.cursor.as_deref().unwrap()).unwrap();
    assert!(
        cursor <= ensemble_ms(&s).await,
        "cursor {cursor} ahead again"
    );
}

/// A replica one hour ahead, with the tolerance raised above an hour so that it keeps leading,
/// never claims a slot before its nominal instant by the ensemble's clock (the `ctime` of the
/// record its claim created), nor records a start time the ensemble had not reached. Before
/// the job went by the ensemble's clock, each slot was claimed 3,599,993 to 3,599,997 ms early.
#[tokio::test]
async fn a_replica_an_hour_ahead_never_runs_a_slot_before_its_nominal_time_by_the_ensembles_clock()
{
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("cron-ahead");
    let runs = Runs::default();
    let job = ScheduledJob::builder(&s, &path)
        .every(Duration::from_secs(1))
        .id("ahead")
        .wall_clock(Arc::new(SkewedClock::new(HOUR_MS)))
        .clock_tolerance(Duration::from_secs(7200))
        .start(recorder("ahead", &runs, Duration::ZERO))
        .await
        .unwrap();
    succeeded(&s, &path, 3).await;
    job.close().await.unwrap();
    let lateness = claim_lateness(&s, &path, "ahead").await;
    eprintln!(
        "an hour ahead: each claim landed this many ms after its slot's instant: {lateness:?}"
    );
    assert!(lateness.len() >= 3, "{lateness:?}");
    for (slot, late) in &lateness {
        assert!(*late >= 0, "{slot} claimed {} ms early", -late);
        assert!(*late < 1_000, "{slot} claimed {late} ms late");
    }
    for c in claims(&s, &path).await {
        let started = c.record.started_ms.unwrap();
        assert!(
            started <= c.ctime,
            "a start time ahead of the ensemble: {c:?}"
        );
    }
}

/// A replica one hour behind (tolerance raised above an hour) takes over from an honest one and
/// runs the slots on time by the ensemble's clock. Before the job went by the ensemble's clock,
/// it waited for its own clock to reach the cursor: no slot in the 10 s the test watched.
#[tokio::test]
async fn a_replica_an_hour_behind_runs_the_slots_on_time() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("cron-behind");
    let period = Duration::from_secs(1);
    let runs = Runs::default();
    let honest = ScheduledJob::builder(&s, &path)
        .every(period)
        .id("honest")
        .start(recorder("honest", &runs, Duration::ZERO))
        .await
        .unwrap();
    succeeded(&s, &path, 2).await;
    let behind = ScheduledJob::builder(&s, &path)
        .every(period)
        .id("behind")
        .wall_clock(Arc::new(SkewedClock::new(-HOUR_MS)))
        .clock_tolerance(Duration::from_secs(7200))
        .start(recorder("behind", &runs, Duration::ZERO))
        .await
        .unwrap();
    honest.close().await.unwrap();
    let leads = within(BOUND, "the replica an hour behind leads", async {
        behind.leadership().wait_for(Option::is_some).await.unwrap();
        Instant::now()
    })
    .await;
    eventually(
        BOUND,
        "three slots run by the replica an hour behind",
        || async { (runs.all().iter().filter(|r| r.who == "behind").count() >= 3).then_some(()) },
    )
    .await;
    behind.close().await.unwrap();
    let first = runs.all().into_iter().find(|r| r.who == "behind").unwrap();
    let lateness = claim_lateness(&s, &path, "behind").await;
    eprintln!(
        "an hour behind: first slot {} ms after it led; claims this many ms after their instants: {lateness:?}",
        first.start.duration_since(leads).as_millis()
    );
    assert!(first.start.duration_since(leads) <= period * 2);
    assert!(lateness.len() >= 2, "{lateness:?}");
    for (slot, late) in &lateness {
        assert!(
            (0..1_000).contains(late),
            "{slot} claimed {late} ms after its instant"
        );
    }
    assert_runs_twice_only_as_retries(&runs.all());
}

/// A replica's wall clock stepped forward and back by 5 s (within the 10 s tolerance) changes
/// nothing: the ensemble's clock decides, every slot runs once and on time. Stepped an hour
/// ahead (beyond it), the replica takes up no slot from then on: it reports `ClockSkew`, gives
/// its term up, and the honest replica waiting in line runs the next slot. Nothing runs twice.
/// (Before the job went by the ensemble's clock, a forward step ran the jumped slots at once,
/// early, and a backward one stalled the job for the step's length.)
#[tokio::test]
async fn a_clock_step_within_the_tolerance_changes_nothing_and_one_beyond_it_hands_the_job_over() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let path = testing::unique_path("cron-clock");
    let a_session = session(server.connect_string(), Duration::from_secs(10)).await;
    let b_session = session(server.connect_string(), Duration::from_secs(10)).await;
    let period = Duration::from_millis(250);
    let runs = Runs::default();
    let clock = Arc::new(SkewedClock::new(0));
    let a = ScheduledJob::builder(&a_session, &path)
        .every(period)
        .id("a")
        .wall_clock(clock.clone())
        .start(recorder("a", &runs, Duration::ZERO))
        .await
        .unwrap();
    succeeded(&a_session, &path, 2).await;
    let b = ScheduledJob::builder(&b_session, &path)
        .every(period)
        .id("b")
        .start(recorder("b", &runs, Duration::ZERO))
        .await
        .unwrap();
    for step in [5_000, -5_000] {
        clock.set_offset_ms(step);
        let n = runs.count();
        eventually(
            BOUND,
            "four more slots after a step within the tolerance",
            || async { (runs.count() >= n + 4).then_some(()) },
        )
        .await;
    }
    let within_tolerance = runs.all();
    assert!(within_tolerance.iter().all(|r| r.who == "a"));
    assert_contiguous_and_once(&a_session, &path, period, &within_tolerance).await;
    let lateness = claim_lateness(&a_session, &path, "a").await;
    eprintln!("steps of +5 s and -5 s: claims this many ms after their instants: {lateness:?}");
    for (slot, late) in &lateness {
        assert!(
            (0..250).contains(late),
            "{slot} claimed {late} ms after its instant"
        );
    }

    let mut a_events = a.events();
    clock.set_offset_ms(HOUR_MS);
    let (offset, _, skewed_at) =
        next_skew(&mut a_events, "a reports its clock an hour ahead").await;
    let b_first = eventually(BOUND, "b runs a slot after a gave up", || async {
        runs.all().into_iter().find(|r| r.who == "b")
    })
    .await;
    eprintln!(
        "a stepped an hour ahead: offset {offset} ms; b ran its first slot {} ms after a's ClockSkew",
        b_first.start.duration_since(skewed_at).as_millis()
    );
    assert!((offset - HOUR_MS).abs() < 5_000);
    assert!(b_first.start.duration_since(skewed_at) <= period * 4 + Duration::from_secs(1));
    eventually(BOUND, "b runs two more slots", || async {
        (runs.all().iter().filter(|r| r.who == "b").count() >= 3).then_some(())
    })
    .await;
    b.close().await.unwrap();
    a.close().await.unwrap();
    let all = runs.all();
    assert!(
        all.iter()
            .filter(|r| r.who == "a")
            .all(|r| r.start < skewed_at),
        "a took up a slot with its clock an hour ahead: {all:?}"
    );
    assert_runs_twice_only_as_retries(&all);
}

/// A host suspend while the job waits (boot time and the wall clock jump 3 s, the monotonic
/// clock and tokio's timers do not; through a `TestClock` under the job's session): the slots
/// that came due during it are late, and go through the catch-up policy (`Latest`: the newest
/// runs, the others are recorded missed), as after any stall. Before the stall was measured on
/// the boot clock, all six ran at once as if on time, with no missed record.
#[tokio::test]
async fn slots_missed_while_the_host_was_suspended_go_through_the_catch_up_policy() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let test = TestClock::new();
    let s = Session::builder(server.connect_string())
        .session_timeout(Duration::from_secs(20))
        .server_tick_time(Duration::from_millis(200))
        .clock(test.clock())
        .connect()
        .await
        .unwrap();
    let path = testing::unique_path("cron-suspend");
    let period = Duration::from_millis(500);
    let runs = Runs::default();
    let wall = Arc::new(SkewedClock::new(0));
    let job = ScheduledJob::builder(&s, &path)
        .every(period)
        .id("a")
        .catch_up(CatchUp::Latest)
        .wall_clock(wall.clone())
        .start(recorder("a", &runs, Duration::ZERO))
        .await
        .unwrap();
    let mut events = job.events();
    succeeded(&s, &path, 2).await;
    let before = runs.count();
    test.suspend(Duration::from_secs(3));
    wall.set_offset_ms(3_000);
    let (count, reason) = within(BOUND, "the slots of the suspend recorded missed", async {
        loop {
            if let Ok(JobEvent::SlotMissed { count, reason, .. }) = events.recv().await {
                break (count, reason);
            }
        }
    })
    .await;
    let n = runs.count();
    eventually(BOUND, "a slot after the suspend", || async {
        (runs.count() > n).then_some(())
    })
    .await;
    job.close().await.unwrap();
    eprintln!(
        "a 3 s suspend (period 500 ms): {count} slots recorded missed ({reason}); {} runs since",
        runs.count() - before
    );
    assert_eq!(reason, "catch_up");
    assert!(count >= 4, "{count} slots missed of the six in the suspend");
    let all = runs.all();
    let slots: std::collections::BTreeSet<&str> = all.iter().map(|r| r.slot.as_str()).collect();
    assert_eq!(slots.len(), all.len(), "a slot ran twice: {all:?}");
}

/// The leader keeps one watch task on the job's `control` node: a term's task goes with the
/// term. Before, every term (and every reload after a failure) left its task waiting for the
/// next change of `control`: ten terms left ten tasks.
#[tokio::test(flavor = "current_thread")]
async fn the_control_watch_does_not_pile_up_tasks_across_terms() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("cron-watch-tasks");
    let metrics = tokio::runtime::Handle::current().metrics();
    let runs = Runs::default();
    let mut alive = Vec::new();
    for i in 0..10 {
        let job = ScheduledJob::builder(&s, &path)
            .every(Duration::from_millis(200))
            .id(format!("t{i}"))
            .start(recorder("t", &runs, Duration::ZERO))
            .await
            .unwrap();
        let mut events = job.events();
        within(BOUND, "a slot finished in this term", async {
            loop {
                if let Ok(JobEvent::SlotFinished { .. }) = events.recv().await {
                    break;
                }
            }
        })
        .await;
        job.close().await.unwrap();
        drop(job);
        tokio::task::yield_now().await;
        alive.push(metrics.num_alive_tasks());
    }
    eprintln!("tasks alive after each of ten terms: {alive:?}");
    assert!(
        alive[9] <= alive[0] + 1,
        "tasks pile up across terms: {alive:?}"
    );
}

/// A leader built with another IANA tzdata release than the last one (recorded in `state`)
/// warns and records its own, but does not take it for a schedule change: a schedule change
/// moves the cursor to now by default, which would skip the slots that came due in the
/// failover's gap. Here the last leader left the cursor 3 s back: every slot of the gap runs.
#[tokio::test]
async fn a_tzdata_only_difference_is_recorded_and_skips_no_slot() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("cron-tzdata");
    let schedule = Schedule::cron("* * * * * *", "Europe/Oslo").unwrap();
    let gap_from = schedule
        .latest_at_or_before(ensemble_ms(&s).await - 3_000)
        .unwrap();
    let zk = s.client().unwrap();
    let mode =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    zk.mkdir(&path, &mode).await.unwrap();
    let state = serde_json::json!({
        "spec": schedule.spec(), "spec_hash": schedule.spec_hash(), "cursor_ms": gap_from,
        "triggers_done": 0, "tzdb": "1999z",
    });
    zk.create(
        &format!("{path}/state"),
        state.to_string().as_bytes(),
        &mode,
    )
    .await
    .unwrap();
    let runs = Runs::default();
    let job = ScheduledJob::builder(&s, &path)
        .schedule(schedule.clone())
        .id("new-tzdata")
        .catch_up(CatchUp::All)
        .start(recorder("new-tzdata", &runs, Duration::ZERO))
        .await
        .unwrap();
    let mut events = job.events();
    eventually(BOUND, "the gap's slots and one more run", || async {
        (runs.count() >= 4).then_some(())
    })
    .await;
    job.close().await.unwrap();
    while let Ok(event) = events.try_recv() {
        assert!(
            !matches!(event, JobEvent::ScheduleChanged { .. }),
            "a tzdata-only difference read as a schedule change: {event:?}"
        );
    }
    let ran: Vec<i64> = runs
        .all()
        .iter()
        .map(|r| Schedule::parse_key(&r.slot).unwrap())
        .collect();
    let (gap, _) = schedule.slots_between(gap_from, gap_from + 3_000, 10);
    for slot in &gap {
        assert!(
            ran.contains(slot),
            "{} of the failover's gap did not run: {ran:?}",
            Schedule::key(*slot)
        );
    }
    let (data, _) = zk.get_data(&format!("{path}/state")).await.unwrap();
    let state: serde_json::Value = serde_json::from_slice(&data).unwrap();
    assert_eq!(state["tzdb"], schedule.tzdb_version().unwrap());
    assert_eq!(state["spec_hash"], schedule.spec_hash());
}

/// A slot that ran more than once was cut off (here: by a close while it ran) and re-run by a
/// later term: with a higher token, a higher attempt, and `recovering`.
fn assert_runs_twice_only_as_retries(runs: &[Run]) {
    let mut by_slot: BTreeMap<&str, Vec<&Run>> = BTreeMap::new();
    for r in runs {
        by_slot.entry(r.slot.as_str()).or_default().push(r);
    }
    for (slot, runs) in by_slot {
        for w in runs.windows(2) {
            assert!(
                w[1].token > w[0].token && w[1].attempt > w[0].attempt && w[1].recovering,
                "{slot} ran again but not as a retry of a cut-off run: {w:?}"
            );
        }
    }
}

/// Every slot of `runs` ran once, and every scheduled slot from the first to the last of them
/// has a succeeded record.
async fn assert_contiguous_and_once(s: &Session, path: &str, period: Duration, runs: &[Run]) {
    let mut slots: Vec<i64> = runs
        .iter()
        .map(|r| Schedule::parse_key(&r.slot).unwrap())
        .collect();
    let total = slots.len();
    slots.sort();
    slots.dedup();
    assert_eq!(slots.len(), total, "a slot ran twice: {runs:?}");
    let records = by_slot(s, path).await;
    let (first, last) = (slots[0], slots[slots.len() - 1]);
    for key in expected_slots(&Schedule::every(period).unwrap(), first, last) {
        let r = records
            .get(&key)
            .unwrap_or_else(|| panic!("{key} lost: {records:#?}"));
        assert_eq!(r.state, SlotState::Succeeded, "{r:?}");
    }
}

#[tokio::test]
async fn bad_input_is_refused_at_build() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let b = || ScheduledJob::builder(&s, "/cron/bad");
    let schedule_err = |r: Result<_, Error>, what: &str| match r {
        Err(Error::InvalidSchedule { what: w, .. }) => assert_eq!(w, what),
        other => panic!("{what}: {other:?}"),
    };
    schedule_err(
        b().cron("61 * * * *", "UTC").build().map(|_| ()),
        "cron expression",
    );
    schedule_err(
        b().cron("0 2 * * *", "Mars/Base").build().map(|_| ()),
        "time zone",
    );
    schedule_err(b().every(Duration::ZERO).build().map(|_| ()), "interval");
    schedule_err(b().build().map(|_| ()), "schedule");
    let arg_err = |r: Result<_, Error>, what: &str| match r {
        Err(Error::InvalidArgument { what: w, .. }) => assert_eq!(w, what),
        other => panic!("{what}: {other:?}"),
    };
    let ok = |b: zookeeper_recipes::job::ScheduledJobBuilder| b.every(Duration::from_secs(1));
    arg_err(
        ok(b()).history_limit(0).build().map(|_| ()),
        "history limit",
    );
    arg_err(
        ok(b()).history_limit(10_001).build().map(|_| ()),
        "history limit",
    );
    arg_err(ok(b()).max_attempts(0).build().map(|_| ()), "max attempts");
    arg_err(
        ok(b()).clock_tolerance(Duration::ZERO).build().map(|_| ()),
        "clock tolerance",
    );
    assert!(matches!(
        ok(ScheduledJob::builder(&s, "cron/relative")).build(),
        Err(Error::InvalidPath { .. })
    ));
    assert!(matches!(
        ok(b()).id("").build(),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(ok(b()).build().is_ok());
}

#[tokio::test]
async fn pause_skips_and_trigger_runs() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("cron-pause");
    let runs = Runs::default();
    let job = ScheduledJob::builder(&s, &path)
        .every(Duration::from_millis(200))
        .start(recorder("a", &runs, Duration::ZERO))
        .await
        .unwrap();
    succeeded(&s, &path, 1).await;
    job.admin().pause().await.unwrap();
    eventually(BOUND, "a slot skipped while paused", || async {
        let r = by_slot(&s, &path).await;
        r.values()
            .any(|r| r.state == SlotState::Skipped && r.reason.as_deref() == Some("paused"))
            .then_some(())
    })
    .await;
    let scheduled_runs = runs.count();
    // A trigger runs even while paused: an operator asked.
    assert_eq!(job.admin().trigger().await.unwrap(), 1);
    eventually(BOUND, "trigger-1 ran", || async {
        runs.all()
            .iter()
            .any(|r| r.slot == "trigger-1")
            .then_some(())
    })
    .await;
    let status = job.admin().status().await.unwrap();
    assert!(status.paused);
    assert_eq!(status.triggers_pending, 0);
    // No scheduled slot ran while paused.
    assert_eq!(
        runs.all()
            .iter()
            .filter(|r| !r.slot.starts_with("trigger-"))
            .count(),
        scheduled_runs
    );
    job.admin().resume().await.unwrap();
    eventually(BOUND, "a scheduled slot runs after resume", || async {
        (runs
            .all()
            .iter()
            .filter(|r| !r.slot.starts_with("trigger-"))
            .count()
            > scheduled_runs)
            .then_some(())
    })
    .await;
    job.close().await.unwrap();
    let records = by_slot(&s, &path).await;
    assert_eq!(records["trigger-1"].state, SlotState::Succeeded);
}

/// A pause seen while a catch-up (`all`) is under way: the slots taken up but not started are
/// recorded `paused` instead of running after the one that runs. A cut-off slot to retry is
/// owed: it waits through the pause (a trigger overtakes it) and runs after the resume.
#[tokio::test]
async fn pause_skips_queued_slots_and_holds_owed_ones_until_resume() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;

    // Queued, not started: a catch-up of an outage, paused during its first run.
    let path = testing::unique_path("cron-pause-queued");
    let period = Duration::from_millis(200);
    let runs = Runs::default();
    let first = ScheduledJob::builder(&s, &path)
        .every(period)
        .id("before")
        .start(recorder("before", &runs, Duration::ZERO))
        .await
        .unwrap();
    succeeded(&s, &path, 1).await;
    first.close().await.unwrap();
    // The outage itself (the test's input): several slots come due while nobody runs the job.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let gate = Arc::new(tokio::sync::Notify::new());
    let after_runs = Runs::default();
    let job = ScheduledJob::builder(&s, &path)
        .every(period)
        .id("after")
        .catch_up(CatchUp::All)
        .start(gated("after", &after_runs, &gate))
        .await
        .unwrap();
    let mut events = job.events();
    let held = next_started(&mut events, "the catch-up's first slot started").await;
    job.admin().pause().await.unwrap();
    within(BOUND, "the leader saw the pause", async {
        while events.recv().await != Ok(JobEvent::PauseChanged { paused: true }) {}
    })
    .await;
    gate.notify_one();
    let (from, count) = within(BOUND, "the queued slots recorded paused", async {
        loop {
            match events.recv().await {
                Ok(JobEvent::SlotMissed {
                    from,
                    count,
                    reason,
                    ..
                }) if reason == "paused" => break (from, count),
                Ok(JobEvent::SlotSkipped { slot, reason }) if reason == "paused" => {
                    break (slot, 1);
                }
                Ok(JobEvent::SlotStarted { slot, .. }) => {
                    panic!("{slot} started while the job was paused")
                }
                _ => {}
            }
        }
    })
    .await;
    assert!(
        Schedule::parse_key(&from).unwrap() > Schedule::parse_key(&held).unwrap(),
        "the paused range {from} starts after the slot that ran ({held})"
    );
    assert!(
        count >= 3,
        "a 1.5 s outage of a 200 ms job left {count} slots queued"
    );
    assert_eq!(
        after_runs
            .all()
            .iter()
            .map(|r| r.slot.clone())
            .collect::<Vec<_>>(),
        vec![held.clone()],
        "only the slot that had started ran"
    );
    assert_eq!(by_slot(&s, &path).await[&held].state, SlotState::Succeeded);
    job.close().await.unwrap();

    // Owed: a cut-off slot waits through the pause.
    let path = testing::unique_path("cron-pause-owed");
    let cut = hours_ago(2);
    leave_cut_off(&s, &path, &cut, 1).await;
    let admin = JobAdmin::new(&s, &path).unwrap();
    admin.pause().await.unwrap();
    let runs = Runs::default();
    let job = one_replica(&s, &path, &runs, |b| b).await;
    // The trigger is queued behind the retry and overtakes it: once it ran, the leader has
    // passed the retry by.
    assert_eq!(admin.trigger().await.unwrap(), 1);
    eventually(BOUND, "trigger-1 ran while paused", || async {
        runs.all()
            .iter()
            .any(|r| r.slot == "trigger-1")
            .then_some(())
    })
    .await;
    let records = by_slot(&s, &path).await;
    assert_eq!(
        (records[&cut].state, records[&cut].attempt),
        (SlotState::Running, 1),
        "the retry waits while paused: {:?}",
        records[&cut]
    );
    assert!(runs.all().iter().all(|r| r.slot != cut));
    admin.resume().await.unwrap();
    eventually(BOUND, "the retry ran after the resume", || async {
        let r = by_slot(&s, &path).await.remove(&cut)?;
        (r.state == SlotState::Succeeded).then_some(())
    })
    .await;
    let retried = runs
        .all()
        .into_iter()
        .find(|r| r.slot == cut)
        .expect("a run of the retried slot");
    assert_eq!((retried.attempt, retried.recovering), (2, true));
    job.close().await.unwrap();
}

/// `drain`: the running slot finishes and its end is recorded (no retry by the next leader), no
/// slot starts after the drain began, and the next replica takes over at once. A drain that
/// runs out cuts the slot off, as `close` does.
#[tokio::test]
async fn drain_lets_the_running_slot_finish_and_a_drain_that_runs_out_cuts_it_off() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("cron-drain");
    let period = Duration::from_millis(200);
    let runs = Runs::default();
    let gate = Arc::new(tokio::sync::Notify::new());
    let a = ScheduledJob::builder(&s, &path)
        .every(period)
        .id("a")
        .start(gated("a", &runs, &gate))
        .await
        .unwrap();
    let mut events = a.events();
    let held = next_started(&mut events, "a's first slot started").await;
    // b holds its runs until its term ends: its slot is the one b's drain cuts off.
    let b = ScheduledJob::builder(&s, &path)
        .every(period)
        .id("b")
        .start(recorder("b", &runs, Duration::from_secs(60)))
        .await
        .unwrap();
    let mut b_events = b.events();
    let drained = a.drain(BOUND);
    // The test's input: the held run goes on past a few slots' instants (the drain has begun,
    // so none of them may start on a), then ends.
    tokio::time::sleep(period * 3).await;
    gate.notify_one();
    within(BOUND, "a's drain", drained).await.unwrap();
    assert!(a.is_stopped(), "a left the election after its drain");
    let records = by_slot(&s, &path).await;
    assert_eq!(
        (records[&held].state, records[&held].attempt),
        (SlotState::Succeeded, 1),
        "the drained slot's end was recorded: {:?}",
        records[&held]
    );
    let b_slot = within(BOUND, "b started a slot", async {
        loop {
            if let Ok(JobEvent::SlotStarted { slot, attempt, .. }) = b_events.recv().await {
                break (slot, attempt);
            }
        }
    })
    .await;
    assert_ne!(b_slot.0, held, "b ran a's drained slot again");
    assert_eq!(b_slot.1, 1);
    let a_runs: Vec<String> = runs
        .all()
        .into_iter()
        .filter(|r| r.who == "a")
        .map(|r| r.slot)
        .collect();
    assert_eq!(
        a_runs,
        vec![held.clone()],
        "a started nothing after its drain began"
    );

    // b's run outlasts its drain: cut off, left `running` for the next leader.
    within(BOUND, "b's drain", b.drain(Duration::from_millis(300)))
        .await
        .unwrap();
    let records = by_slot(&s, &path).await;
    assert_eq!(
        records[&b_slot.0].state,
        SlotState::Running,
        "{:?}",
        records[&b_slot.0]
    );
    runs.assert_serial();
}

/// The Prometheus recorder of this test binary (one per process), installed by the first test
/// that wants it.
fn prometheus() -> &'static metrics_exporter_prometheus::PrometheusHandle {
    static PROMETHEUS: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> =
        std::sync::OnceLock::new();
    PROMETHEUS.get_or_init(|| {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .expect("the only recorder of this test binary")
    })
}

/// A replica exports its job's counters at 0 as soon as it starts, before any slot: one per
/// outcome and per reason a slot is not run for. Alert rules take `increase(...) > 0`, and a
/// counter that first appeared at 1 would have no increase: the first failure would not alert
/// (docs/prometheus/zkr-cron.rules.yml).
#[tokio::test]
async fn metrics_export_every_job_counter_at_zero_from_the_start() {
    if !zookeeper() {
        return;
    }
    let prometheus = prometheus();
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("cron-metrics-zero");
    // No slot falls due while the test looks: nothing but the start is counted.
    let job = ScheduledJob::builder(&s, &path)
        .every(Duration::from_secs(3600))
        .id("z")
        .start(|_run: SlotRun| async { Ok::<(), std::io::Error>(()) })
        .await
        .unwrap();
    let text = prometheus.render();
    job.close().await.unwrap();
    let at = |name: &str, label: Option<(&str, &str)>| {
        let want_path = format!("path=\"{path}\"");
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(&want_path))
            .filter(|l| label.is_none_or(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
            .map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
            .collect::<Vec<_>>()
    };
    let context: Vec<&str> = text.lines().filter(|l| l.contains(&path)).collect();
    let context = context.join("\n");
    for outcome in ["succeeded", "failed", "parked", "abandoned"] {
        assert_eq!(
            at(
                "zookeeper_recipes_job_slots_ended_total",
                Some(("outcome", outcome))
            ),
            [Some(0.0)],
            "slots ended {outcome}:\n{context}"
        );
    }
    for reason in ["overlap", "paused", "catch_up"] {
        assert_eq!(
            at(
                "zookeeper_recipes_job_slots_not_run_total",
                Some(("reason", reason))
            ),
            [Some(0.0)],
            "slots not run for {reason}:\n{context}"
        );
    }
    for name in [
        "zookeeper_recipes_job_slots_started_total",
        "zookeeper_recipes_job_slot_retries_total",
        "zookeeper_recipes_job_clock_skew_terms_total",
    ] {
        assert_eq!(at(name, None), [Some(0.0)], "{name}:\n{context}");
    }
}

/// The job's metrics (feature `metrics`), through a real Prometheus recorder: slots started,
/// ends by outcome, slots not run by reason, retries on failure, run durations, the running
/// gauge, the time of the last success.
#[tokio::test]
async fn metrics_count_slots_by_outcome_and_reason() {
    if !zookeeper() {
        return;
    }
    let prometheus = prometheus();
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("cron-metrics");
    let before_ms = chrono_now_ms();
    // Scheduled slots succeed, triggers fail (and are retried once).
    let job = ScheduledJob::builder(&s, &path)
        .every(Duration::from_millis(200))
        .id("m")
        .retries(1, Duration::from_millis(50))
        .start(|run: SlotRun| async move {
            if run.is_triggered() {
                Err(std::io::Error::other("triggers fail here"))
            } else {
                Ok(())
            }
        })
        .await
        .unwrap();
    let mut events = job.events();
    succeeded(&s, &path, 2).await;
    job.admin().pause().await.unwrap();
    within(BOUND, "a slot skipped while paused", async {
        loop {
            match events.recv().await {
                Ok(JobEvent::SlotSkipped { reason, .. } | JobEvent::SlotMissed { reason, .. })
                    if reason == "paused" =>
                {
                    break;
                }
                _ => {}
            }
        }
    })
    .await;
    job.admin().trigger().await.unwrap();
    within(BOUND, "the trigger failed", async {
        loop {
            if let Ok(JobEvent::SlotFinished { slot, outcome, .. }) = events.recv().await
                && slot == "trigger-1"
            {
                assert_eq!(outcome, SlotState::Failed);
                break;
            }
        }
    })
    .await;
    job.close().await.unwrap();

    let text = prometheus.render();
    let value = |name: &str, labels: &[(&str, &str)]| -> Option<f64> {
        let want_path = format!("path=\"{path}\"");
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(&want_path))
            .find(|l| {
                labels
                    .iter()
                    .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let ok = value(
        "zookeeper_recipes_job_slots_ended_total",
        &[("outcome", "succeeded")],
    )
    .unwrap_or(0.0);
    let failed = value(
        "zookeeper_recipes_job_slots_ended_total",
        &[("outcome", "failed")],
    )
    .unwrap_or(0.0);
    let started = value("zookeeper_recipes_job_slots_started_total", &[]).unwrap_or(0.0);
    let paused = value(
        "zookeeper_recipes_job_slots_not_run_total",
        &[("reason", "paused")],
    )
    .unwrap_or(0.0);
    let timed = value(
        "zookeeper_recipes_job_run_duration_seconds_count",
        &[("outcome", "succeeded")],
    )
    .unwrap_or(0.0);
    let retries = value("zookeeper_recipes_job_slot_retries_total", &[]).unwrap_or(0.0);
    let running = value("zookeeper_recipes_job_running", &[]);
    let offset = value("zookeeper_recipes_job_clock_offset_seconds", &[]);
    let last_success =
        value("zookeeper_recipes_job_last_success_timestamp_seconds", &[]).unwrap_or(0.0);
    let job_lines: Vec<&str> = text.lines().filter(|l| l.contains(&path)).collect();
    let context = job_lines.join("\n");
    assert!(ok >= 2.0 && failed == 1.0, "ends by outcome:\n{context}");
    assert!(started >= ok + failed, "starts:\n{context}");
    assert!(paused >= 1.0, "slots not run while paused:\n{context}");
    assert_eq!(
        retries, 1.0,
        "the trigger's one retry on failure:\n{context}"
    );
    assert!(timed >= 2.0, "run durations:\n{context}");
    assert_eq!(running, Some(0.0), "nothing runs after close:\n{context}");
    assert!(
        offset.is_some_and(|o| o.abs() < 1.0),
        "this host's clock agrees with the ensemble's (same host):\n{context}"
    );
    #[allow(clippy::cast_precision_loss)]
    let window = (before_ms as f64 / 1000.0)..=(chrono_now_ms() as f64 / 1000.0);
    assert!(
        window.contains(&last_success),
        "last success {last_success} within the test {window:?}:\n{context}"
    );
}

/// A claim that landed but whose reply was lost: after a reload the leader finds a slot
/// `running` with its own term's token, which does not run here. Running it again would repeat
/// the token; the term gives itself up instead, and the next term (a new node, a higher token)
/// takes the slot up as cut off, attempt 2. The lost reply is staged: the test writes the
/// record the claim would have written, and moves `state` on so that the leader's next write
/// fails its compare-and-set and it reloads, as it does after a `ConnectionLoss`.
#[tokio::test]
async fn a_slot_found_running_with_the_terms_own_token_is_retried_by_the_next_term() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("cron-lost-reply");
    let runs = Runs::default();
    let job = one_replica(&s, &path, &runs, |b| b).await;
    let mut leadership = job.leadership();
    let term = within(BOUND, "the replica leads", async {
        loop {
            if let Some(term) = leadership.borrow_and_update().clone() {
                break term;
            }
            leadership.changed().await.unwrap();
        }
    })
    .await;
    let zk = s.client().unwrap();
    let state = format!("{path}/state");
    let (data, _) = eventually(BOUND, "the leader wrote the job's state", || async {
        zk.get_data(&state).await.ok()
    })
    .await;
    // The records' parent comes after `state` (and a sample of the ensemble's clock): on a
    // loaded machine the test gets here between the two.
    let slots = format!("{path}/slots");
    eventually(BOUND, "the leader made the records' parent", || async {
        zk.check_stat(&slots).await.ok().flatten()
    })
    .await;
    let slot = hours_ago(1);
    let record = serde_json::json!({
        "slot": slot, "nominal_ms": Schedule::parse_key(&slot).unwrap(), "state": "running",
        "token": term.token().get(), "attempt": 1, "runner": "next", "started_ms": chrono_now_ms(),
        "ended_ms": null, "exit_code": null,
    });
    let mode =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    zk.create(
        &format!("{path}/slots/{slot}"),
        record.to_string().as_bytes(),
        &mode,
    )
    .await
    .unwrap();
    zk.set_data(&state, &data, None).await.unwrap();
    // The trigger makes the leader read the records again and write (its claim fails).
    JobAdmin::new(&s, &path).unwrap().trigger().await.unwrap();

    within(BOUND, "the term to give itself up", term.cancelled()).await;
    let retried = eventually(BOUND, "the slot retried by the next term", || async {
        let r = by_slot(&s, &path).await.remove(&slot)?;
        (r.state == SlotState::Succeeded).then_some(r)
    })
    .await;
    assert_eq!(retried.attempt, 2, "{retried:?}");
    assert!(
        retried.token.unwrap() > term.token().get(),
        "the retry's token {:?} is above the term that gave up ({})",
        retried.token,
        term.token()
    );
    eventually(BOUND, "the trigger ran in the next term", || async {
        let r = by_slot(&s, &path).await.remove("trigger-1")?;
        (r.state == SlotState::Succeeded).then_some(())
    })
    .await;
    let of_slot: Vec<Run> = runs.all().into_iter().filter(|r| r.slot == slot).collect();
    assert_eq!(of_slot.len(), 1, "the slot ran once: {of_slot:?}");
    assert!(of_slot[0].recovering && of_slot[0].token > term.token());
    job.close().await.unwrap();
}

#[tokio::test]
async fn history_is_bounded() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("cron-bounded");
    let runs = Runs::default();
    let job = ScheduledJob::builder(&s, &path)
        .every(Duration::from_millis(100))
        .history_limit(5)
        .start(recorder("a", &runs, Duration::ZERO))
        .await
        .unwrap();
    eventually(BOUND, "twelve runs", || async {
        (runs.count() >= 12).then_some(())
    })
    .await;
    job.close().await.unwrap();
    let h = history(&s, &path).await;
    assert!(h.len() <= 5, "{} records kept: {h:#?}", h.len());
    // The newest are the ones kept.
    let newest = runs.all().last().unwrap().slot.clone();
    assert!(h.iter().any(|r| r.slot == newest), "{newest} not in {h:#?}");
}

/// The run's stop comes inside the lease (faults: the leader's client link blackholed while its
/// run ignores its cancellation; both error policies). Leader a's session goes through a proxy
/// (timeout 2 s, the harness's 200 ms tick); its run of `trigger-1` loops and never returns. b
/// waits on a direct session. When a's link is blackholed, a's term ends (Standard: at
/// `Suspended`; SessionExpired: `stop_ahead` before its lease's deadline), its run is aborted at
/// the end of its grace or at the lease, whichever comes first, and only then can the quorum
/// expire a's session and b lead. b's retry of the slot (attempt 2) must start after a's run
/// last ran, both read on the boot clock.
#[tokio::test]
async fn a_run_that_ignores_its_cancellation_stops_before_the_successor_retries_its_slot() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    for policy in [ErrorPolicy::Standard, ErrorPolicy::SessionExpired] {
        let proxy = proxy_to(server).await;
        let sa = Session::builder(proxy.connect_string())
            .session_timeout(Duration::from_secs(2))
            .server_tick_time(Duration::from_millis(200))
            .connect()
            .await
            .unwrap();
        let sb = session(server.connect_string(), Duration::from_secs(10)).await;
        let path = testing::unique_path("cron-stubborn");
        let a_alive = Arc::new(Mutex::new(None::<BootTime>));
        let alive = Arc::clone(&a_alive);
        let a = ScheduledJob::builder(&sa, &path)
            .every(Duration::from_secs(3600))
            .id("a")
            .error_policy(policy)
            .start(move |_run: SlotRun| {
                let alive = Arc::clone(&alive);
                async move {
                    // Ignores its cancellation: only the abort stops it.
                    loop {
                        *alive.lock().unwrap() = Some(BootTime::now());
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    #[allow(unreachable_code)]
                    Ok::<(), std::io::Error>(())
                }
            })
            .await
            .unwrap();
        let mut a_events = a.events();
        within(BOUND, "a leads", async {
            a.leadership().wait_for(Option::is_some).await.unwrap();
        })
        .await;
        a.admin().trigger().await.unwrap();
        let started = next_started(&mut a_events, "a starts trigger-1").await;
        assert_eq!(started, "trigger-1");
        let b_retry = Arc::new(Mutex::new(None::<(BootTime, u32)>));
        let retry = Arc::clone(&b_retry);
        let b = ScheduledJob::builder(&sb, &path)
            .every(Duration::from_secs(3600))
            .id("b")
            .start(move |run: SlotRun| {
                let retry = Arc::clone(&retry);
                async move {
                    if run.slot() == "trigger-1" {
                        retry
                            .lock()
                            .unwrap()
                            .get_or_insert((BootTime::now(), run.attempt()));
                    }
                    Ok::<(), std::io::Error>(())
                }
            })
            .await
            .unwrap();
        let holed = BootTime::now();
        proxy.blackhole();
        let (b_at, attempt) = eventually(BOUND, "b retries trigger-1", || async {
            *b_retry.lock().unwrap()
        })
        .await;
        let a_last = a_alive.lock().unwrap().unwrap();
        eprintln!(
            "{policy:?}: a's run last ran {} ms after the blackhole, b's retry started {} ms after it: {}",
            (a_last - holed).as_millis(),
            (b_at - holed).as_millis(),
            if a_last < b_at {
                format!("{} ms apart", (b_at - a_last).as_millis())
            } else {
                format!("OVERLAP of {} ms", (a_last - b_at).as_millis())
            }
        );
        assert_eq!(attempt, 2, "{policy:?}: b's run of trigger-1 is the retry");
        assert!(
            a_last < b_at,
            "{policy:?}: a's run ran {} ms after b's retry started",
            (a_last - b_at).as_millis()
        );
        proxy.heal();
        b.close().await.unwrap();
        a.close().await.unwrap();
    }
}

/// A run starts only in its holder's valid term (issue 41: trial seeds 7 and 10 under load).
/// Faults: the leader's requests blackholed (its link one way) between its claim landing and
/// its run's start, the claim's reply still delivered; both error policies. Between the claim's
/// reply and the job's start the term prunes the history (a fenced round trip: here it must
/// delete `trigger-1`, the history being limited to one record), and that request never reaches
/// the server, so the term ends while it waits. The run must then not start: the term reports
/// the slot abandoned (left `running`, not run), and the next holder retries it with its own
/// token (attempt 2). The link is blackholed once the claim is seen on the server (by a watch
/// of another session) while its reply is held back by the proxy, so the window is certain.
#[tokio::test]
async fn a_run_whose_term_ends_between_its_claim_and_its_start_is_not_started() {
    if !zookeeper() {
        return;
    }
    common::init_tracing();
    let server = shared_server().await;
    for policy in [ErrorPolicy::Standard, ErrorPolicy::SessionExpired] {
        let proxy = proxy_to(server).await;
        let sa = Session::builder(proxy.connect_string())
            .session_timeout(Duration::from_secs(4))
            .server_tick_time(Duration::from_millis(200))
            .connect()
            .await
            .unwrap();
        let sb = session(server.connect_string(), Duration::from_secs(10)).await;
        let path = testing::unique_path("cron-late-start");
        // (who, slot, attempt, token, whether the term had ended when the run began)
        type Started = Arc<Mutex<Vec<(&'static str, String, u32, FencingToken, bool)>>>;
        let started: Started = Arc::default();
        let job = |who: &'static str| {
            let started = Arc::clone(&started);
            move |run: SlotRun| {
                let started = Arc::clone(&started);
                async move {
                    let ended = !run.leadership().is_valid();
                    started.lock().unwrap().push((
                        who,
                        run.slot().to_owned(),
                        run.attempt(),
                        run.token(),
                        ended,
                    ));
                    Ok::<(), std::io::Error>(())
                }
            }
        };
        let a = ScheduledJob::builder(&sa, &path)
            .every(Duration::from_secs(3600))
            .id("a")
            .history_limit(1)
            .error_policy(policy)
            .start(job("a"))
            .await
            .unwrap();
        let mut a_events = a.events();
        within(BOUND, "a leads", async {
            a.leadership().wait_for(Option::is_some).await.unwrap();
        })
        .await;
        let admin = JobAdmin::new(&sb, &path).unwrap();
        admin.trigger().await.unwrap();
        succeeded(&sb, &path, 1).await;

        let zk = sb.client().unwrap();
        let (stat, created) = zk
            .check_and_watch_stat(&format!("{path}/slots/trigger-2"))
            .await
            .unwrap();
        assert!(stat.is_none(), "trigger-2 is not claimed yet");
        // Long enough for the watch below to be heard first, short enough for the lease to stay
        // proven through it.
        proxy.delay_replies(Duration::from_millis(150));
        admin.trigger().await.unwrap();
        within(
            BOUND,
            "a's claim of trigger-2 on the server",
            created.changed(),
        )
        .await;
        proxy.blackhole_requests();
        let claim_token = {
            let zk = sb.client().unwrap();
            let (data, _) = zk
                .get_data(&format!("{path}/slots/trigger-2"))
                .await
                .unwrap();
            let record: serde_json::Value = serde_json::from_slice(&data).unwrap();
            assert_eq!(record["runner"], "a", "{record}");
            FencingToken::from_raw(record["token"].as_i64().unwrap())
        };
        let b = ScheduledJob::builder(&sb, &path)
            .every(Duration::from_secs(3600))
            .id("b")
            .start(job("b"))
            .await
            .unwrap();
        // a either starts its run of trigger-2 (late) or leaves the slot to the next holder.
        let what = within(BOUND, "a to start or give up trigger-2", async {
            loop {
                match a_events.recv().await {
                    Ok(JobEvent::SlotStarted { slot, .. }) if slot == "trigger-2" => {
                        break "started".to_owned();
                    }
                    Ok(JobEvent::SlotAbandoned { slot, reason, .. }) if slot == "trigger-2" => {
                        break reason;
                    }
                    _ => {}
                }
            }
        })
        .await;
        let retry = eventually(BOUND, "b retries trigger-2", || async {
            let runs = started.lock().unwrap().clone();
            runs.into_iter()
                .find(|(who, slot, ..)| *who == "b" && slot == "trigger-2")
        })
        .await;
        proxy.heal();
        a.close().await.unwrap();
        b.close().await.unwrap();
        let runs = started.lock().unwrap().clone();
        eprintln!("{policy:?}: a on trigger-2: {what}; runs: {runs:?}");
        assert_ne!(
            what, "started",
            "{policy:?}: a started trigger-2 after its term ended: {runs:?}"
        );
        assert!(
            runs.iter().all(|(.., ended)| !ended),
            "{policy:?}: a run began in a term that had ended: {runs:?}"
        );
        assert!(
            !runs
                .iter()
                .any(|(who, slot, ..)| *who == "a" && slot == "trigger-2"),
            "{policy:?}: a ran trigger-2: {runs:?}"
        );
        assert_eq!(
            retry.2, 2,
            "{policy:?}: b's run is the slot's second attempt"
        );
        assert!(
            retry.3 > claim_token,
            "{policy:?}: {retry:?} after {claim_token}"
        );
    }
}

/// A job that fails (with "failure N") on the slots in `failing` until it has failed there
/// `times` times, and records every run.
fn failing(
    runs: &Runs,
    times: u32,
    failing: &'static [&'static str],
) -> impl Fn(SlotRun) -> futures::future::BoxFuture<'static, Result<(), std::io::Error>>
+ Send
+ Sync
+ 'static {
    let runs = runs.clone();
    let failed = Arc::new(Mutex::new(BTreeMap::<String, u32>::new()));
    move |run: SlotRun| {
        let runs = runs.clone();
        let failed = Arc::clone(&failed);
        Box::pin(async move {
            let start = Instant::now();
            runs.0.lock().unwrap().push(Run {
                who: "r".into(),
                slot: run.slot().to_owned(),
                token: run.token(),
                attempt: run.attempt(),
                recovering: run.is_recovering(),
                start,
                end: Instant::now(),
            });
            let mut failed = failed.lock().unwrap();
            let n = failed.entry(run.slot().to_owned()).or_insert(0);
            if failing.contains(&run.slot()) && *n < times {
                *n += 1;
                return Err(std::io::Error::other(format!("failure {n}")));
            }
            Ok(())
        })
    }
}

#[tokio::test]
async fn a_retried_cut_off_slot_keeps_every_attempt_in_its_record() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let one = hours_ago(3);
    let path = testing::unique_path("cron-audit");
    leave_cut_off(&s, &path, &one, 1).await;
    let runs = Runs::default();
    let job = one_replica(&s, &path, &runs, |b| b).await;
    let record = eventually(BOUND, "the cut-off slot retried", || async {
        let r = by_slot(&s, &path).await;
        r.get(&one)
            .filter(|r| r.state == SlotState::Succeeded)
            .cloned()
    })
    .await;
    job.close().await.unwrap();
    eprintln!("{}", serde_json::to_string_pretty(&record).unwrap());
    assert_eq!(record.attempt, 2);
    assert_eq!(record.attempts.len(), 2, "{record:#?}");
    let (first, second) = (&record.attempts[0], &record.attempts[1]);
    // The first attempt's facts survive its retry: its runner, token and start.
    assert_eq!(first.attempt, 1);
    assert_eq!(first.runner.as_deref(), Some("crashed"));
    assert_eq!(first.token, Some(1));
    assert_eq!(first.started_ms, Some(1));
    assert_eq!(first.outcome, AttemptOutcome::CutOff);
    assert_eq!(first.found_by.as_deref(), Some("next"));
    assert_eq!(first.found_token, record.token);
    assert!(first.ended_ms.is_some());
    assert_eq!(second.attempt, 2);
    assert_eq!(second.runner.as_deref(), Some("next"));
    assert_eq!(second.token, record.token);
    assert_eq!(second.outcome, AttemptOutcome::Succeeded);
    assert!(second.started_ms <= second.ended_ms);
}

#[tokio::test]
async fn status_flags_a_running_slot_whose_runner_is_gone() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let one = hours_ago(3);
    let path = testing::unique_path("cron-orphan");
    // A runner that crashed, and no replica since.
    leave_cut_off(&s, &path, &one, 1).await;
    let admin = JobAdmin::new(&s, &path).unwrap();
    let status = admin.status().await.unwrap();
    assert_eq!(status.leader, None);
    assert_eq!(status.orphaned, vec![one.clone()], "{status:#?}");
    // A live run is not flagged.
    let runs = Runs::default();
    let job = ScheduledJob::builder(&s, &path)
        .every(Duration::from_secs(3600))
        .id("live")
        .on_crash(OnCrash::Park)
        .start(recorder("live", &runs, Duration::from_secs(3600)))
        .await
        .unwrap();
    let mut events = job.events();
    job.admin().trigger().await.unwrap();
    let started = next_started(&mut events, "the trigger started").await;
    assert_eq!(started, "trigger-1");
    let status = admin.status().await.unwrap();
    assert_eq!(status.leader.as_deref(), Some("live"));
    assert!(
        status
            .open
            .iter()
            .any(|r| r.slot == "trigger-1" && r.state == SlotState::Running),
        "{status:#?}"
    );
    assert!(status.orphaned.is_empty(), "{status:#?}");
    job.close().await.unwrap();
    // Closed mid-run: its term is gone, the slot stays running, and is flagged.
    let status = admin.status().await.unwrap();
    assert!(
        status.orphaned.contains(&"trigger-1".to_owned()),
        "{status:#?}"
    );
}

#[tokio::test]
async fn a_failed_run_is_retried_within_its_slot_and_a_failed_slot_can_be_rerun() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("cron-retries");
    let runs = Runs::default();
    // trigger-1 fails twice, then succeeds; trigger-2 fails three times: more than two retries.
    let job = ScheduledJob::builder(&s, &path)
        .every(Duration::from_secs(3600))
        .id("r")
        .retries(2, Duration::from_millis(200))
        .start(failing(&runs, 3, &["trigger-2"]))
        .await
        .unwrap();
    let mut events = job.events();
    let admin = job.admin();
    admin.trigger().await.unwrap();
    let retrying = within(BOUND, "trigger-1 finished", async {
        let mut retrying = 0;
        loop {
            match events.recv().await {
                Ok(JobEvent::SlotRetrying { .. }) => retrying += 1,
                Ok(JobEvent::SlotFinished { slot, outcome, .. }) if slot == "trigger-1" => {
                    break (retrying, outcome);
                }
                _ => {}
            }
        }
    })
    .await;
    // trigger-1 is not failing: it succeeds at once.
    assert_eq!(retrying, (0, SlotState::Succeeded));
    admin.trigger().await.unwrap();
    let (retrying, outcome, started) = within(BOUND, "trigger-2 finished", async {
        let (mut retrying, mut started) = (Vec::new(), 0);
        loop {
            match events.recv().await {
                Ok(JobEvent::SlotRetrying {
                    slot,
                    attempt,
                    failures,
                    backoff,
                    error,
                }) if slot == "trigger-2" => {
                    assert_eq!(backoff, Duration::from_millis(200));
                    retrying.push((attempt, failures, error));
                }
                Ok(JobEvent::SlotStarted { slot, .. }) if slot == "trigger-2" => started += 1,
                Ok(JobEvent::SlotFinished { slot, outcome, .. }) if slot == "trigger-2" => {
                    break (retrying, outcome, started);
                }
                _ => {}
            }
        }
    })
    .await;
    assert_eq!(outcome, SlotState::Failed);
    assert_eq!(started, 3, "a first run and two retries");
    assert_eq!(
        retrying,
        vec![
            (1, 1, "failure 1".to_owned()),
            (2, 2, "failure 2".to_owned())
        ]
    );
    let r = &by_slot(&s, &path).await["trigger-2"];
    assert_eq!((r.state, r.attempt, r.failures), (SlotState::Failed, 3, 3));
    assert_eq!(r.error.as_deref(), Some("failure 3"));
    let outcomes: Vec<(u32, AttemptOutcome, Option<&str>)> = r
        .attempts
        .iter()
        .map(|a| (a.attempt, a.outcome, a.error.as_deref()))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (1, AttemptOutcome::Failed, Some("failure 1")),
            (2, AttemptOutcome::Failed, Some("failure 2")),
            (3, AttemptOutcome::Failed, Some("failure 3")),
        ]
    );
    // Every attempt of the slot ran in this term, with its token, one after the other.
    let tries: Vec<Run> = runs
        .all()
        .into_iter()
        .filter(|run| run.slot == "trigger-2")
        .collect();
    assert!(tries.iter().all(|t| Some(t.token.get()) == r.token));
    assert_eq!(
        tries.iter().map(|t| t.recovering).collect::<Vec<_>>(),
        vec![false, true, true]
    );
    for w in tries.windows(2) {
        assert!(w[1].start.duration_since(w[0].end) >= Duration::from_millis(190));
    }

    // An operator re-runs the failed slot: it runs once more (its retries are spent) and
    // succeeds now.
    admin.resolve("trigger-2", Resolution::Rerun).await.unwrap();
    let r = eventually(BOUND, "the failed slot re-run", || async {
        by_slot(&s, &path)
            .await
            .remove("trigger-2")
            .filter(|r| r.state == SlotState::Succeeded)
    })
    .await;
    assert_eq!((r.attempt, r.failures), (4, 3));
    assert_eq!(
        r.attempts.last().map(|a| a.outcome),
        Some(AttemptOutcome::Succeeded)
    );
    assert!(runs.all().last().unwrap().recovering);
    // A succeeded slot is not re-run.
    assert!(matches!(
        admin.resolve("trigger-2", Resolution::Rerun).await,
        Err(Error::InvalidArgument { .. })
    ));
    job.close().await.unwrap();
}

#[tokio::test]
async fn a_trigger_carries_the_slot_or_business_date_it_was_asked_for() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("cron-trigger-for");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let job = {
        let seen = Arc::clone(&seen);
        ScheduledJob::builder(&s, &path)
            .every(Duration::from_secs(3600))
            .id("t")
            .start(move |run: SlotRun| {
                let seen = Arc::clone(&seen);
                async move {
                    seen.lock().unwrap().push((
                        run.slot().to_owned(),
                        run.nominal_ms(),
                        run.for_slot().map(str::to_owned),
                        run.business_date().map(str::to_owned),
                    ));
                    Ok::<(), std::io::Error>(())
                }
            })
            .await
            .unwrap()
    };
    let admin = job.admin();
    let slot = hours_ago(30);
    assert_eq!(
        admin
            .trigger_for(TriggerFor::slot(&slot).unwrap())
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        admin
            .trigger_for(TriggerFor::date("2026-12-03").unwrap())
            .await
            .unwrap(),
        2
    );
    assert_eq!(admin.trigger().await.unwrap(), 3);
    let records = eventually(BOUND, "three triggers succeeded", || async {
        let r = by_slot(&s, &path).await;
        (r.values()
            .filter(|r| r.state == SlotState::Succeeded)
            .count()
            == 3)
            .then_some(r)
    })
    .await;
    let status = admin.status().await.unwrap();
    job.close().await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(
        (
            seen[0].0.as_str(),
            seen[0].1,
            seen[0].2.as_deref(),
            seen[0].3.as_deref()
        ),
        (
            "trigger-1",
            Schedule::parse_key(&slot).unwrap(),
            Some(slot.as_str()),
            None
        )
    );
    assert_eq!(
        (
            seen[1].0.as_str(),
            seen[1].2.as_deref(),
            seen[1].3.as_deref()
        ),
        ("trigger-2", None, Some("2026-12-03"))
    );
    assert_eq!((seen[2].2.as_deref(), seen[2].3.as_deref()), (None, None));
    assert_eq!(
        records["trigger-1"].for_slot.as_deref(),
        Some(slot.as_str())
    );
    assert_eq!(
        records["trigger-2"].business_date.as_deref(),
        Some("2026-12-03")
    );
    // Bad input is refused before anything is sent.
    assert!(TriggerFor::slot("yesterday").is_err());
    assert!(TriggerFor::date("2026-13-01").is_err());
    assert!(TriggerFor::date("2026-1-1").is_err());
    // The status says when the last success was.
    let last = status.last_success.expect("a last success");
    assert_eq!(last.slot, "trigger-3");
    let age = chrono_now_ms() - last.ended_ms.unwrap();
    assert!((-10_000..BOUND.as_millis() as i64).contains(&age), "{age}");
}

#[tokio::test]
async fn a_failover_mid_slot_costs_no_slot_under_the_defaults() {
    if !zookeeper() {
        return;
    }
    // The operator's case scaled down: a run of half the period, its leader gone mid-run, the
    // retry started most of a period later by the next replica; before, the slot that came due
    // during the retry overlapped it and was skipped.
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("cron-failover-slot");
    let period = Duration::from_secs(4);
    let run = Duration::from_secs(2);
    let runs = Runs::default();
    let a = ScheduledJob::builder(&s, &path)
        .every(period)
        .id("a")
        .start(recorder("a", &runs, run))
        .await
        .unwrap();
    let mut events = a.events();
    let first = next_started(&mut events, "a started a slot").await;
    let s0 = Schedule::parse_key(&first).unwrap();
    // a goes mid-run (its slot is cut off); the next replica starts 3.2 s into the slot (the
    // failover's time: the test's input).
    tokio::time::sleep(Duration::from_millis(400)).await;
    a.close().await.unwrap();
    let wait = (s0 + 3_200 - chrono_now_ms()).max(0);
    tokio::time::sleep(Duration::from_millis(u64::try_from(wait).unwrap())).await;
    let b = ScheduledJob::builder(&s, &path)
        .every(period)
        .id("b")
        .start(recorder("b", &runs, run))
        .await
        .unwrap();
    let p = i64::try_from(period.as_millis()).unwrap();
    let s3 = Schedule::key(s0 + 3 * p);
    eventually(
        BOUND,
        "the third slot after the cut-off one settled",
        || async {
            let r = by_slot(&s, &path).await;
            r.get(&s3).filter(|r| r.state.is_final()).map(|_| ())
        },
    )
    .await;
    b.close().await.unwrap();
    let records = by_slot(&s, &path).await;
    for r in records.values() {
        eprintln!(
            "{} {:?} attempt {} reason {:?}",
            r.slot, r.state, r.attempt, r.reason
        );
    }
    for i in 0..=3 {
        let key = Schedule::key(s0 + i * p);
        let r = records
            .get(&key)
            .unwrap_or_else(|| panic!("no record of {key}: {records:#?}"));
        assert_eq!(
            r.state,
            SlotState::Succeeded,
            "{key} lost to the failover: {r:?}"
        );
    }
    assert_eq!(records[&first].attempt, 2);
    runs.assert_serial();
}

#[tokio::test]
async fn a_drain_during_the_backoff_leaves_the_retry_to_the_next_leader() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("cron-retry-drain");
    let runs = Runs::default();
    // trigger-1 fails once; the retry waits a minute.
    let a = ScheduledJob::builder(&s, &path)
        .every(Duration::from_secs(3600))
        .id("a")
        .retries(1, Duration::from_secs(60))
        .start(failing(&runs, 1, &["trigger-1"]))
        .await
        .unwrap();
    let mut events = a.events();
    a.admin().trigger().await.unwrap();
    within(BOUND, "trigger-1 failed and waits for its retry", async {
        loop {
            if let Ok(JobEvent::SlotRetrying { slot, .. }) = events.recv().await {
                break assert_eq!(slot, "trigger-1");
            }
        }
    })
    .await;
    let r = &by_slot(&s, &path).await["trigger-1"];
    assert_eq!(
        (r.state, r.reason.as_deref(), r.failures),
        (SlotState::Pending, Some("retry"), 1)
    );
    // The drain does not wait out the minute.
    let drained_at = Instant::now();
    within(
        Duration::from_secs(20),
        "the drain during the backoff",
        a.drain(Duration::from_secs(30)),
    )
    .await
    .unwrap();
    let drained = drained_at.elapsed();
    assert!(drained < Duration::from_secs(20), "{drained:?}");
    assert_eq!(runs.count(), 1, "a started no retry");
    // The next leader runs the retry at once, recovering, as attempt 2 (the cause is gone:
    // it succeeds).
    let b = ScheduledJob::builder(&s, &path)
        .every(Duration::from_secs(3600))
        .id("b")
        .retries(1, Duration::from_secs(60))
        .start(failing(&runs, 0, &[]))
        .await
        .unwrap();
    let r = eventually(BOUND, "b ran the retry", || async {
        by_slot(&s, &path)
            .await
            .remove("trigger-1")
            .filter(|r| r.state.is_final())
    })
    .await;
    b.close().await.unwrap();
    assert_eq!(
        (r.state, r.attempt, r.runner.as_deref()),
        (SlotState::Succeeded, 2, Some("b"))
    );
    let tries = runs.all();
    assert_eq!(tries.len(), 2);
    assert!(tries[1].recovering);
    assert!(tries[1].token > tries[0].token);
    let outcomes: Vec<AttemptOutcome> = r.attempts.iter().map(|a| a.outcome).collect();
    assert_eq!(
        outcomes,
        [AttemptOutcome::Failed, AttemptOutcome::Succeeded]
    );
    eprintln!(
        "the drain took {:.0} ms during a 60 s backoff",
        drained.as_secs_f64() * 1e3
    );
}

#[tokio::test]
async fn ensemble_now_writes_only_the_clock_node_and_leaves_state_and_control_alone() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let zk = s.client().unwrap();
    let path = testing::unique_path("cron-ensemble-now");
    // No job node: the probe fails with NoNode and creates nothing.
    let missing = JobAdmin::new(&s, &path).unwrap();
    assert!(
        matches!(
            missing.ensemble_now().await,
            Err(Error::Zookeeper(zookeeper_client::Error::NoNode))
        ),
        "a probe of a job that does not exist"
    );
    assert_eq!(
        zk.check_stat(&path).await.unwrap(),
        None,
        "the probe created the job"
    );

    let runs = Runs::default();
    let job = ScheduledJob::builder(&s, &path)
        .every(Duration::from_secs(3600))
        .id("r")
        .start(recorder("r", &runs, Duration::ZERO))
        .await
        .unwrap();
    let mut events = job.events();
    let admin = job.admin();
    admin.trigger().await.unwrap();
    within(BOUND, "trigger-1 did not finish", async {
        loop {
            if let Ok(JobEvent::SlotFinished { slot, .. }) = events.recv().await
                && slot == "trigger-1"
            {
                return;
            }
        }
    })
    .await;
    let version = |node: &'static str| {
        let zk = zk.clone();
        let node = format!("{path}/{node}");
        async move {
            zk.check_stat(&node)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{node} does not exist"))
                .version
        }
    };
    let (state, control) = (version("state").await, version("control").await);
    let mut last = i64::MIN;
    for probe in 0..5 {
        let before = chrono_now_ms();
        let now = admin.ensemble_now().await.unwrap();
        let after = chrono_now_ms();
        // The server runs on this host: its clock is the test's.
        assert!(
            before - 1_000 <= now && now <= after + 1_000,
            "probe {probe}: the ensemble's time {now} is not within [{before}, {after}]"
        );
        assert!(now >= last, "probe {probe}: the ensemble's time went back");
        last = now;
    }
    assert_eq!(version("state").await, state, "a probe wrote state");
    assert_eq!(version("control").await, control, "a probe wrote control");
    assert_eq!(
        version("clock").await,
        4,
        "five probes: a create and four sets"
    );
    assert_eq!(runs.count(), 1, "the probes made the leader run something");
    job.close().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Inputs not taken on trust (issue 43): a raw client writes what a hostile or broken writer of
// an open ensemble could.

/// The next event `pick` selects, within `BOUND`.
async fn next_event<T>(
    events: &mut tokio::sync::broadcast::Receiver<JobEvent>,
    what: &str,
    mut pick: impl FnMut(&JobEvent) -> Option<T>,
) -> T {
    within(BOUND, what, async {
        loop {
            if let Ok(e) = events.recv().await
                && let Some(t) = pick(&e)
            {
                break t;
            }
        }
    })
    .await
}

/// One write of `{"triggers": 1000000}` to `control` used to run the job back to back for
/// ever (also while paused). A jump beyond `max_pending_triggers` is refused whole
/// (`ControlRefused`, naming the node), recorded taken up, and none of it runs; a trigger
/// whose business date is not a date is refused alone; the next trigger an operator adds (a
/// compare-and-set of one) runs as usual.
#[tokio::test]
async fn a_trigger_jump_beyond_the_cap_is_refused_and_the_next_trigger_runs() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("cron-trigger-jump");
    let runs = Runs::default();
    let job = ScheduledJob::builder(&s, &path)
        .every(Duration::from_secs(3600))
        .max_pending_triggers(3)
        .start(recorder("a", &runs, Duration::ZERO))
        .await
        .unwrap();
    let mut events = job.events();
    // The leader is up once it created `control`; then the hostile write.
    let zk = s.client().unwrap();
    let control = format!("{path}/control");
    eventually(BOUND, "the leader created control", || async {
        zk.get_data(&control).await.ok().map(|_| ())
    })
    .await;
    zk.set_data(&control, br#"{"paused":true,"triggers":1000000}"#, None)
        .await
        .unwrap();
    let reason = next_event(&mut events, "the trigger jump refused", |e| match e {
        JobEvent::ControlRefused { reason } => Some(reason.clone()),
        JobEvent::SlotStarted { slot, .. } => panic!("{slot} ran from the jump"),
        _ => None,
    })
    .await;
    assert!(reason.contains(&control), "{reason}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        runs.count(),
        0,
        "a trigger of the jump ran: {:?}",
        runs.all()
    );
    assert_eq!(job.admin().status().await.unwrap().triggers_pending, 0);
    // A trigger for a "date" no operator's tool writes: refused alone.
    zk.set_data(
        &control,
        br#"{"triggers":1000001,"trigger_for":{"1000001":{"date":"2026-13-45"}}}"#,
        None,
    )
    .await
    .unwrap();
    let reason = next_event(&mut events, "the bad trigger refused", |e| match e {
        JobEvent::ControlRefused { reason } => Some(reason.clone()),
        JobEvent::SlotStarted { slot, .. } => panic!("{slot} ran"),
        _ => None,
    })
    .await;
    assert!(reason.contains("trigger 1000001"), "{reason}");
    // The operators' trigger (compare-and-set, plus one) runs.
    assert_eq!(job.admin().trigger().await.unwrap(), 1_000_002);
    eventually(BOUND, "the operator's trigger ran", || async {
        runs.all()
            .iter()
            .any(|r| r.slot == "trigger-1000002")
            .then_some(())
    })
    .await;
    assert_eq!(runs.count(), 1, "{:?}", runs.all());
    job.close().await.unwrap();
}

/// `state` rewound behind the history (under `CatchUp::All` every slot since would run again)
/// or garbage (every replica's term used to fail the same way, one after another): the leader
/// refuses it (`StateRefused`, naming the node), keeps its term, takes up no slot, erases
/// nothing, and the standby replica does not take over; deleting the node (the runbook's fix)
/// lets the job go on.
#[tokio::test]
async fn a_rewound_or_garbage_state_holds_the_leader_without_churn_until_an_operator_fixes_it() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("cron-state-rewound");
    let runs = Runs::default();
    let start = |who: &'static str| {
        ScheduledJob::builder(&s, &path)
            .id(who)
            .every(Duration::from_millis(300))
            .catch_up(CatchUp::All)
            .start(recorder(who, &runs, Duration::ZERO))
    };
    let a = start("a").await.unwrap();
    let b = start("b").await.unwrap();
    let (mut a_events, mut b_events) = (a.events(), b.events());
    succeeded(&s, &path, 3).await;
    let zk = s.client().unwrap();
    let state_path = format!("{path}/state");
    let (data, _) = zk.get_data(&state_path).await.unwrap();
    let mut rewound: serde_json::Value = serde_json::from_slice(&data).unwrap();
    rewound["cursor_ms"] = serde_json::json!(0);
    zk.set_data(&state_path, &serde_json::to_vec(&rewound).unwrap(), None)
        .await
        .unwrap();
    let refused = tokio::select! {
        r = next_event(&mut a_events, "a refuses the state", |e| match e {
            JobEvent::StateRefused { reason } => Some(reason.clone()),
            _ => None,
        }) => r,
        r = next_event(&mut b_events, "b refuses the state", |e| match e {
            JobEvent::StateRefused { reason } => Some(reason.clone()),
            _ => None,
        }) => r,
    };
    assert!(refused.contains(&state_path), "{refused}");
    let held_at = runs.count();
    let records = history(&s, &path).await.len();
    // Garbage next: refused as well, still no churn.
    zk.set_data(&state_path, b"{not json", None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The run in flight at the rewrite may have ended; nothing started since.
    assert!(
        runs.count() <= held_at + 1,
        "slots ran on a refused state: {:?}",
        &runs.all()[held_at..]
    );
    let mut refusals = 0;
    for events in [&mut a_events, &mut b_events] {
        while let Ok(e) = events.try_recv() {
            match e {
                JobEvent::StateRefused { .. } => refusals += 1,
                JobEvent::SlotStarted { slot, .. } => panic!("{slot} started on a refused state"),
                _ => {}
            }
        }
    }
    assert!(
        (1..=2).contains(&refusals),
        "the replicas churned over the refused state: {refusals} refusals"
    );
    assert!(history(&s, &path).await.len() >= records, "records erased");
    assert_eq!(zk.get_data(&state_path).await.unwrap().0, b"{not json");
    // The operator's fix: delete the node. The job goes on from the ensemble's now.
    zk.delete(&state_path, None).await.unwrap();
    let before = runs.count();
    eventually(BOUND, "a slot ran after the state was deleted", || async {
        (runs.count() > before).then_some(())
    })
    .await;
    a.close().await.unwrap();
    b.close().await.unwrap();
    runs.assert_serial();
}

/// A record forged `succeeded` at a slot still to come, and at the next trigger's key, used to
/// skip that slot and swallow that trigger (and spin the leader on it). The job writes a record
/// only with the cursor (or trigger count) that covers it, so these suppress nothing: each is
/// refused (`RecordRefused`) and the slot, and the trigger, run over them.
#[tokio::test]
async fn a_succeeded_record_forged_ahead_of_the_cursor_suppresses_nothing() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("cron-forged-record");
    let runs = Runs::default();
    let period = Duration::from_secs(1);
    let schedule = Schedule::every(period).unwrap();
    let job = ScheduledJob::builder(&s, &path)
        .every(period)
        .start(recorder("a", &runs, Duration::ZERO))
        .await
        .unwrap();
    let mut events = job.events();
    succeeded(&s, &path, 1).await;
    let zk = s.client().unwrap();
    let target = schedule.next_after(chrono_now_ms() + 2_000).unwrap();
    let key = Schedule::key(target);
    let forged = |slot: &str, nominal: i64| {
        serde_json::to_vec(&serde_json::json!({
            "slot": slot, "nominal_ms": nominal, "state": "succeeded", "token": 1,
            "attempt": 1, "runner": "mallory", "started_ms": nominal, "ended_ms": nominal,
            "exit_code": 0
        }))
        .unwrap()
    };
    let mode =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    zk.create(&format!("{path}/slots/{key}"), &forged(&key, target), &mode)
        .await
        .unwrap();
    zk.create(
        &format!("{path}/slots/trigger-1"),
        &forged("trigger-1", target),
        &mode,
    )
    .await
    .unwrap();
    let refused = next_event(&mut events, "the forged slot refused", |e| match e {
        JobEvent::RecordRefused { slot, .. } if *slot == key => Some(()),
        _ => None,
    });
    refused.await;
    eventually(BOUND, "the forged slot ran", || async {
        runs.all().iter().any(|r| r.slot == key).then_some(())
    })
    .await;
    assert_eq!(job.admin().trigger().await.unwrap(), 1);
    eventually(BOUND, "the trigger ran over its forged record", || async {
        runs.all()
            .iter()
            .any(|r| r.slot == "trigger-1")
            .then_some(())
    })
    .await;
    job.close().await.unwrap();
    let records = by_slot(&s, &path).await;
    for k in [key.as_str(), "trigger-1"] {
        assert_eq!(records[k].state, SlotState::Succeeded, "{k}");
        assert_ne!(records[k].runner.as_deref(), Some("mallory"), "{k}");
        assert!(records[k].token.unwrap() > 1, "{k}: {:?}", records[k]);
    }
}
