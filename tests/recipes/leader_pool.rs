//! LeaderPool against real ZooKeeper: twelve jobs spread evenly over three and four replicas,
//! rebalanced after a join, a graceful leave, a `kill -9` and a freeze past the session, with one
//! handover per moved job, every job led again within the stated bound, and no job ever led by
//! two terms at once (a history check of every term).
//!
//! The truth about who leads a job comes from ZooKeeper itself: one `LeaderObserver` per job
//! path. Replicas run in this process (each on its own session) or as `zkr pool` children, which
//! can be killed and frozen.

use zookeeper_recipes_rigs::fixtures as common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::zkr::{EventsOn, Line, Zkr, zkr};
use common::{BOUND, Recording, ms, own_server, session, shared_server, within, zookeeper};
use nix::sys::signal::Signal;
use zookeeper_recipes::{LeaderObserver, LeaderPool, ObserverEvent, PoolEvent, Session};
use zookeeper_recipes_testing as testing;

/// The session timeout of the replicas in these tests.
const SESSION_TIMEOUT: Duration = Duration::from_secs(2);
/// The settle time the pool's spec allows after a membership change is visible (a loaded
/// machine included): see recipes/leader-pool.md.
const SETTLE: Duration = Duration::from_secs(2);
/// The shared server's tick: sessions expire on tick boundaries.
const TICK: Duration = Duration::from_millis(200);

fn job_names() -> Vec<String> {
    (1..=12).map(|i| format!("job-{i:02}")).collect()
}

// ---------------------------------------------------------------------------------------------
// The truth: one observer per job

/// Who leads each job, from one `LeaderObserver` per job path, with every change recorded.
struct Jobs {
    observers: Vec<LeaderObserver>,
    recordings: Vec<Recording<ObserverEvent>>,
}

impl Jobs {
    async fn observe(session: &Session, root: &str) -> Jobs {
        let mut observers = Vec::new();
        let mut recordings = Vec::new();
        for job in job_names() {
            let observer = LeaderObserver::builder(session, format!("{root}/jobs/{job}"))
                .start()
                .await
                .unwrap();
            recordings.push(Recording::of(observer.events()));
            observers.push(observer);
        }
        Jobs {
            observers,
            recordings,
        }
    }

    /// Each job's current leader token.
    fn tokens(&self) -> Vec<Option<i64>> {
        self.observers
            .iter()
            .map(|o| o.leader().map(|l| l.token.get()))
            .collect()
    }

    /// Each job's current leader id.
    fn leaders(&self) -> BTreeMap<String, Option<String>> {
        self.observers
            .iter()
            .map(|o| {
                let job = o.path().rsplit('/').next().unwrap().to_owned();
                (job, o.leader().map(|l| l.id))
            })
            .collect()
    }

    /// Leadership changes from one replica to another, over all jobs so far (a job that goes
    /// leaderless and comes back to the same replica is no handover).
    fn handovers(&self) -> usize {
        self.recordings
            .iter()
            .map(|r| {
                let led: Vec<String> = r
                    .items()
                    .into_iter()
                    .filter_map(|e| match e {
                        ObserverEvent::Leader(l) => Some(l.id),
                        _ => None,
                    })
                    .collect();
                led.windows(2).filter(|w| w[0] != w[1]).count()
            })
            .sum()
    }

    /// Waits until every job is led by one of `members`, each leading its fair share (at most
    /// `ceil(12 / members)`); returns when that first held, and the leaders then.
    async fn settled(
        &self,
        members: &[&str],
        bound: Duration,
        what: &str,
    ) -> (Instant, BTreeMap<String, usize>) {
        let ceiling = 12_usize.div_ceil(members.len());
        let deadline = Instant::now() + bound;
        loop {
            let leaders = self.leaders();
            let mut counts: BTreeMap<String, usize> = BTreeMap::new();
            let mut ok = true;
            for id in leaders.values() {
                match id {
                    Some(id) if members.contains(&id.as_str()) => {
                        *counts.entry(id.clone()).or_default() += 1
                    }
                    _ => ok = false,
                }
            }
            if ok && counts.values().all(|c| *c <= ceiling) {
                return (Instant::now(), counts);
            }
            if Instant::now() >= deadline {
                panic!(
                    "{what}: the jobs did not settle over {members:?} within {bound:?}; leaders: {leaders:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The history check (local: no shared history checker exists on main yet)

/// One term of one job, with its validity interval in one clock (microseconds since the test's
/// start, or wall-clock milliseconds for terms reported by `zkr pool`).
#[derive(Debug, Clone)]
struct Term {
    job: String,
    holder: String,
    token: i64,
    since: u64,
    until: Option<u64>,
}

/// No job ever had two terms at once: per job, by token, each term ended before the next began,
/// and tokens rise (or stay, for a term regained on the same node by the same holder). Only the
/// last term of a job may still be open.
fn assert_no_overlap(terms: &[Term]) {
    let mut by_job: BTreeMap<&str, Vec<&Term>> = BTreeMap::new();
    for t in terms {
        by_job.entry(&t.job).or_default().push(t);
    }
    for (job, mut terms) in by_job {
        terms.sort_by_key(|t| (t.token, t.since));
        for pair in terms.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            // A term regained on the same node after a suspension keeps its token: only its
            // holder can have led in between.
            assert!(
                a.token < b.token || a.holder == b.holder,
                "{job}: {} and {} both had token {}",
                a.holder,
                b.holder,
                a.token
            );
            let until = a.until.unwrap_or_else(|| {
                panic!("{job}: term {a:?} never ended but a later one began: {b:?}")
            });
            assert!(
                until <= b.since,
                "{job}: two leaders at once: {} was valid until {until}, {} began at {} ({a:?}, {b:?})",
                a.holder,
                b.holder,
                b.since
            );
        }
    }
}

/// Records the terms of in-process pools.
#[derive(Clone, Default)]
struct PoolTerms(Arc<Mutex<Vec<Recording<PoolEvent>>>>);

impl PoolTerms {
    fn record(&self, pool: &LeaderPool) {
        self.0.lock().unwrap().push(Recording::of(pool.events()));
    }

    fn terms(&self, epoch: Instant) -> Vec<Term> {
        let epoch = zookeeper_recipes::BootTime::now() - epoch.elapsed();
        let micros = |at: zookeeper_recipes::BootTime| {
            at.saturating_duration_since(epoch).as_micros() as u64
        };
        let recordings = self.0.lock().unwrap().clone();
        recordings
            .iter()
            .flat_map(Recording::items)
            .filter_map(|e| match e {
                PoolEvent::Leader { job, term } => Some((job, term)),
                _ => None,
            })
            .map(|(job, t)| Term {
                job: job.clone(),
                holder: t.participant_id().to_owned(),
                token: t.token().get(),
                since: micros(t.started_at()),
                until: t.ended_at().map(micros),
            })
            .collect()
    }
}

async fn pool(session: &Session, root: &str, id: &str, terms: &PoolTerms) -> LeaderPool {
    let p = LeaderPool::builder(session, root)
        .id(id)
        .jobs(job_names())
        .start()
        .await
        .unwrap();
    terms.record(&p);
    p
}

// ---------------------------------------------------------------------------------------------
// In-process replicas: start-up, join, graceful leave

#[tokio::test]
async fn jobs_balance_at_start_up_after_a_join_and_after_a_graceful_leave() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let root = testing::unique_path("pool-inproc");
    let epoch = Instant::now();
    let watcher = session(connect, Duration::from_secs(10)).await;
    let jobs = Jobs::observe(&watcher, &root).await;
    let terms = PoolTerms::default();
    let sessions: Vec<Session> =
        futures::future::join_all((0..4).map(|_| session(connect, SESSION_TIMEOUT))).await;

    // Start-up: 12 jobs over 3 replicas, 4 each.
    let started = Instant::now();
    let mut pools = Vec::new();
    for (i, s) in sessions.iter().take(3).enumerate() {
        pools.push(pool(s, &root, &format!("r{i}"), &terms).await);
    }
    let (at, counts) = jobs.settled(&["r0", "r1", "r2"], BOUND, "start-up").await;
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), [4, 4, 4]);
    let startup_handovers = jobs.handovers();
    eprintln!(
        "start-up, 12 jobs over 3: settled in {} ms, {startup_handovers} handovers",
        ms(at - started)
    );
    // The assignment follows the membership as it grows: a replica that joins after the
    // coordinator's first assignment takes its share from the others. Joining one after the
    // other, 12 jobs over 3 cost at most 6 + 4 handovers.
    assert!(
        startup_handovers <= 10,
        "{startup_handovers} handovers at start-up"
    );
    for p in &pools {
        assert_eq!(p.leading().len(), 4, "{} leads {:?}", p.id(), p.leading());
    }
    assert_eq!(pools.iter().filter(|p| p.is_coordinator()).count(), 1);

    // A fourth replica joins: it takes 3 jobs, one from each, with one handover each.
    let before = jobs.handovers();
    let joined = Instant::now();
    pools.push(pool(&sessions[3], &root, "r3", &terms).await);
    // The stated bound for a join: the settle time.
    let (at, counts) = jobs
        .settled(&["r0", "r1", "r2", "r3"], SETTLE, "join")
        .await;
    let join_handovers = jobs.handovers() - before;
    eprintln!(
        "join, 12 jobs over 3 -> 4: settled in {} ms, {join_handovers} handovers",
        ms(at - joined)
    );
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), [3, 3, 3, 3]);
    assert_eq!(join_handovers, 3, "one handover per moved job, no flapping");

    // A replica leaves gracefully: its 3 jobs go one to each of the others, without waiting
    // for any session to expire.
    let before = jobs.handovers();
    let leaving = pools.remove(1);
    let left = Instant::now();
    within(BOUND, "the leaving replica to close", leaving.close())
        .await
        .unwrap();
    let (at, counts) = jobs
        .settled(&["r0", "r2", "r3"], SETTLE, "graceful leave")
        .await;
    let leave_handovers = jobs.handovers() - before;
    eprintln!(
        "graceful leave, 12 jobs over 4 -> 3: settled in {} ms, {leave_handovers} handovers",
        ms(at - left)
    );
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), [4, 4, 4]);
    assert_eq!(leave_handovers, 3);
    assert!(leaving.leading().is_empty());

    for p in &pools {
        p.close().await.unwrap();
    }
    let recorded = terms.terms(epoch);
    assert_no_overlap(&recorded);
    eprintln!("history: {} terms, none overlapping", recorded.len());
}

// ---------------------------------------------------------------------------------------------
// `zkr pool` replicas: kill -9 and freeze

/// A `zkr pool` child.
fn zkr_pool(connect: &str, root: &str, id: &str) -> Zkr {
    let mut c = zkr(connect);
    c.args(["--session-timeout", "2s", "pool", root, "--jobs"])
        .arg(job_names().join(","))
        .args(["--id", id]);
    Zkr::spawn(id, c, EventsOn::Stdout)
}

/// The terms a `zkr pool` child reported (wall-clock milliseconds); `dead_at` closes the terms
/// of a child that was killed (it cannot act after its death).
fn child_terms(lines: &[Line], dead_at: Option<u64>) -> Vec<Term> {
    let mut open: BTreeMap<(String, i64), Term> = BTreeMap::new();
    let mut out = Vec::new();
    for l in lines {
        match l.event() {
            "leader" => {
                let t = Term {
                    job: l.str("job").to_owned(),
                    holder: l.str("id").to_owned(),
                    token: l.int("token"),
                    since: l.int("since_ms") as u64,
                    until: None,
                };
                open.insert((t.job.clone(), t.token), t);
            }
            "not_leader" => {
                if let Some(mut t) = open.remove(&(l.str("job").to_owned(), l.int("token"))) {
                    t.until = Some(l.int("until_ms") as u64);
                    out.push(t);
                }
            }
            _ => {}
        }
    }
    out.extend(open.into_values().map(|mut t| {
        t.until = dead_at;
        t
    }));
    out
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Starts `ids` as `zkr pool` children one after the other (the first is the coordinator: it
/// joined the membership first) and waits until they share the jobs.
async fn start_children(connect: &str, root: &str, jobs: &Jobs, ids: &[&str]) -> Vec<Zkr> {
    let mut children = Vec::new();
    for id in ids {
        let mut child = zkr_pool(connect, root, id);
        child
            .wait_for("assignment", BOUND, "zkr pool never read an assignment")
            .await;
        children.push(child);
    }
    jobs.settled(ids, BOUND, "children start-up").await;
    children
}

#[tokio::test]
async fn killed_replicas_jobs_move_within_the_session_timeout_one_handover_each() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let root = testing::unique_path("pool-kill");
    let watcher = session(connect, Duration::from_secs(10)).await;
    let jobs = Jobs::observe(&watcher, &root).await;
    let ids = ["k0", "k1", "k2", "k3"];
    let mut children = start_children(connect, &root, &jobs, &ids).await;

    // Kill the coordinator (k0 joined first): its successor in the membership latch takes over
    // the coordination, and its 3 jobs go one to each survivor.
    let before = jobs.handovers();
    let killed = Instant::now();
    let killed_ms = now_ms();
    children[0].signal(Signal::SIGKILL);
    let bound = SESSION_TIMEOUT + TICK + SETTLE;
    let (at, counts) = jobs.settled(&ids[1..], bound, "after kill -9").await;
    let handovers = jobs.handovers() - before;
    eprintln!(
        "kill -9 of the coordinator, 12 jobs over 4 -> 3: settled in {} ms (bound {} ms: session timeout + tick + settle), {handovers} handovers",
        ms(at - killed),
        ms(bound)
    );
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), [4, 4, 4]);
    assert_eq!(handovers, 3, "one handover per job of the killed replica");

    // Kill another (12 jobs over 3 -> 2): its 4 jobs go 2 and 2.
    let before = jobs.handovers();
    let killed_again = Instant::now();
    let killed_again_ms = now_ms();
    children[2].signal(Signal::SIGKILL);
    let (at, counts) = jobs
        .settled(&["k1", "k3"], bound, "after the second kill -9")
        .await;
    let handovers = jobs.handovers() - before;
    eprintln!(
        "kill -9, 12 jobs over 3 -> 2: settled in {} ms (bound {} ms), {handovers} handovers",
        ms(at - killed_again),
        ms(bound)
    );
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), [6, 6]);
    assert_eq!(handovers, 4, "one handover per job of the killed replica");

    // Stop the others; check the history of every term any of them had.
    let mut terms = Vec::new();
    let mut second = children.remove(2);
    second.exit(BOUND, "the second killed zkr").await;
    terms.extend(child_terms(
        &second.all_lines(BOUND).await,
        Some(killed_again_ms),
    ));
    let mut dead = children.remove(0);
    dead.exit(BOUND, "the killed zkr").await;
    terms.extend(child_terms(&dead.all_lines(BOUND).await, Some(killed_ms)));
    for mut child in children {
        child.signal(Signal::SIGTERM);
        let status = child.exit(BOUND, "zkr pool after SIGTERM").await;
        assert_eq!(status.code(), Some(0), "{}", child.context());
        terms.extend(child_terms(&child.all_lines(BOUND).await, None));
    }
    assert_no_overlap(&terms);
    eprintln!("history: {} terms, none overlapping", terms.len());
}

#[tokio::test]
async fn a_replica_frozen_past_its_session_loses_its_jobs_and_takes_its_share_back() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let root = testing::unique_path("pool-freeze");
    let watcher = session(connect, Duration::from_secs(10)).await;
    let jobs = Jobs::observe(&watcher, &root).await;
    let ids = ["f0", "f1", "f2", "f3"];
    let children = start_children(connect, &root, &jobs, &ids).await;

    // Freeze f2 past its session: its jobs move to the three others.
    let before = jobs.handovers();
    let frozen = Instant::now();
    children[2].signal(Signal::SIGSTOP);
    let bound = SESSION_TIMEOUT + TICK + SETTLE;
    let survivors = ["f0", "f1", "f3"];
    let (at, counts) = jobs.settled(&survivors, bound, "after the freeze").await;
    let away = jobs.handovers() - before;
    eprintln!(
        "freeze past the session, 12 jobs over 4 -> 3: settled in {} ms (bound {} ms), {away} handovers",
        ms(at - frozen),
        ms(bound)
    );
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), [4, 4, 4]);
    assert_eq!(away, 3);

    // It wakes: its terms ended at its deadline; it rejoins and takes its share back.
    let before = jobs.handovers();
    let woke = Instant::now();
    children[2].signal(Signal::SIGCONT);
    let (at, counts) = jobs.settled(&ids, BOUND, "after the wake").await;
    let back = jobs.handovers() - before;
    eprintln!(
        "wake and rejoin, 12 jobs over 3 -> 4: settled in {} ms, {back} handovers",
        ms(at - woke)
    );
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), [3, 3, 3, 3]);
    assert_eq!(back, 3);

    let mut terms = Vec::new();
    for mut child in children {
        child.signal(Signal::SIGTERM);
        let status = child.exit(BOUND, "zkr pool after SIGTERM").await;
        assert_eq!(status.code(), Some(0), "{}", child.context());
        let lines = child.all_lines(BOUND).await;
        if child.name == "f2" {
            // Its old terms ended when it woke, but were valid only until their deadline, which
            // passed before anyone else could lead its jobs: until_ms is before the line's ts.
            let lost: Vec<&Line> = lines
                .iter()
                .filter(|l| l.event() == "not_leader" && l.str("reason") != "closed")
                .collect();
            assert_eq!(lost.len(), 3, "{}", child.context());
            for l in lost {
                assert!(l.int("until_ms") < l.int("ts_ms"), "{}", l.json);
            }
        }
        terms.extend(child_terms(&lines, None));
    }
    assert_no_overlap(&terms);
    eprintln!("history: {} terms, none overlapping", terms.len());
}

// ---------------------------------------------------------------------------------------------
// Faults to the job paths and the server

#[tokio::test]
async fn a_deleted_job_path_is_led_again_by_its_assignee() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let root = testing::unique_path("pool-deleted-job");
    let watcher = session(connect, Duration::from_secs(10)).await;
    let jobs = Jobs::observe(&watcher, &root).await;
    let terms = PoolTerms::default();
    let sessions: Vec<Session> =
        futures::future::join_all((0..2).map(|_| session(connect, SESSION_TIMEOUT))).await;
    let a = pool(&sessions[0], &root, "a", &terms).await;
    let b = pool(&sessions[1], &root, "b", &terms).await;
    let (_, before) = jobs.settled(&["a", "b"], BOUND, "start-up").await;
    let leaders = jobs.leaders();
    let owner = leaders["job-01"].clone().unwrap();
    let handovers = jobs.handovers();

    // Delete the job's path, the leader's node with it, in one multi: the leader watches its
    // node and would otherwise put a new one in before the path goes.
    let raw = watcher.client().unwrap();
    let job_path = format!("{root}/jobs/job-01");
    let mut all = raw.new_multi_writer();
    for child in raw.list_children(&job_path).await.unwrap() {
        all.add_delete(&format!("{job_path}/{child}"), None)
            .unwrap();
    }
    all.add_delete(&job_path, None).unwrap();
    all.commit().await.unwrap();
    let p = if owner == "a" { &a } else { &b };
    within(BOUND, "the assignee to lead the job again", async {
        let mut w = p.watch_job("job-01").unwrap();
        w.wait_for(|t| {
            t.as_ref()
                .is_some_and(|t| t.is_valid() && t.path().starts_with(&job_path))
        })
        .await
        .unwrap();
    })
    .await;
    let (_, after) = jobs.settled(&["a", "b"], BOUND, "after the deletion").await;
    assert_eq!(before, after);
    assert_eq!(jobs.leaders()["job-01"].as_deref(), Some(owner.as_str()));
    assert_eq!(jobs.handovers(), handovers, "the job did not change hands");
    a.close().await.unwrap();
    b.close().await.unwrap();
    assert_no_overlap(&terms.terms(Instant::now() - Duration::from_secs(3600)));
}

#[tokio::test]
async fn a_server_restart_within_the_session_timeout_moves_no_job() {
    if !zookeeper() {
        return;
    }
    let server = own_server().await;
    let connect = server.connect_string();
    let root = testing::unique_path("pool-restart");
    let epoch = Instant::now();
    let watcher = session(connect, Duration::from_secs(20)).await;
    let jobs = Jobs::observe(&watcher, &root).await;
    let terms = PoolTerms::default();
    let sessions: Vec<Session> =
        futures::future::join_all((0..3).map(|_| session(connect, Duration::from_secs(20)))).await;
    let mut pools = Vec::new();
    for (i, s) in sessions.iter().enumerate() {
        pools.push(pool(s, &root, &format!("s{i}"), &terms).await);
    }
    jobs.settled(&["s0", "s1", "s2"], BOUND, "start-up").await;
    let before = jobs.leaders();
    let tokens = jobs.tokens();
    let handovers = jobs.handovers();

    let restart = Instant::now();
    server.restart().await.unwrap();
    // Terms end while the connection is down (Standard policy) and resume on the same node.
    within(BOUND, "every job to be led again", async {
        loop {
            let leading: usize = pools.iter().map(|p| p.leading().len()).sum();
            if leading == 12 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    eprintln!(
        "server restart: every job led again {} ms after the restart began",
        ms(restart.elapsed())
    );
    assert_eq!(jobs.leaders(), before, "no job moved");
    assert_eq!(
        jobs.tokens(),
        tokens,
        "every job is led from the same node again"
    );
    assert_eq!(jobs.handovers(), handovers);
    for p in &pools {
        p.close().await.unwrap();
    }
    assert_no_overlap(&terms.terms(epoch));
}

#[tokio::test]
async fn a_job_path_the_replica_may_not_use_stops_the_pool_with_the_refusal() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let root = testing::unique_path("pool-refused");
    // Another user owns job-03's path, readable and writable by nobody else.
    let owner = zookeeper_recipes::Session::builder(connect)
        .digest_auth("owner", "owner-password")
        .connect()
        .await
        .unwrap();
    let raw = owner.client().unwrap();
    let open =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    raw.mkdir(&format!("{root}/jobs"), &open).await.unwrap();
    let closed =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::creator_all());
    raw.create(&format!("{root}/jobs/job-03"), b"", &closed)
        .await
        .unwrap();

    let s = session(connect, SESSION_TIMEOUT).await;
    let terms = PoolTerms::default();
    let p = pool(&s, &root, "alone", &terms).await;
    within(BOUND, "the pool's events to end after the refusal", async {
        let mut events = Box::pin(p.events());
        while futures::StreamExt::next(&mut events).await.is_some() {}
    })
    .await;
    match p.failure() {
        Some(zookeeper_recipes::Error::Refused { source, path, .. }) => {
            assert_eq!(source, zookeeper_client::Error::NoAuth);
            // Whoever meets the refusal first: the coordinator (which reads every job path
            // while there is no assignment yet), or the job's latch.
            assert!(path == root || path.ends_with("/jobs/job-03"), "{path}");
        }
        other => panic!("expected a NoAuth refusal, got {other:?}"),
    }
    assert!(p.leading().is_empty(), "a stopped pool leads nothing");
    p.close().await.unwrap();
    assert_no_overlap(&terms.terms(Instant::now() - Duration::from_secs(3600)));
}

#[tokio::test]
async fn a_deleted_or_garbled_assignment_is_written_again_and_no_job_moves() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let root = testing::unique_path("pool-assignment-gone");
    let watcher = session(connect, Duration::from_secs(10)).await;
    let jobs = Jobs::observe(&watcher, &root).await;
    let terms = PoolTerms::default();
    let sessions: Vec<Session> =
        futures::future::join_all((0..2).map(|_| session(connect, SESSION_TIMEOUT))).await;
    let a = pool(&sessions[0], &root, "a", &terms).await;
    let b = pool(&sessions[1], &root, "b", &terms).await;
    jobs.settled(&["a", "b"], BOUND, "start-up").await;
    let before = jobs.leaders();
    let handovers = jobs.handovers();
    let raw = watcher.client().unwrap();
    let node = format!("{root}/assignment");
    let written_again = || async {
        match raw.get_data(&node).await {
            Ok((data, _)) => serde_json::from_slice::<serde_json::Value>(&data)
                .ok()
                .map(drop),
            Err(_) => None,
        }
    };

    raw.delete(&node, None).await.unwrap();
    common::eventually(
        BOUND,
        "the deleted assignment to be written again",
        written_again,
    )
    .await;
    raw.set_data(&node, b"{ not json", None).await.unwrap();
    common::eventually(
        BOUND,
        "the garbled assignment to be written again",
        written_again,
    )
    .await;

    jobs.settled(&["a", "b"], BOUND, "after the rewrites").await;
    assert_eq!(jobs.leaders(), before, "no job moved");
    assert_eq!(jobs.handovers(), handovers, "no job changed hands");
    a.close().await.unwrap();
    b.close().await.unwrap();
    assert_no_overlap(&terms.terms(Instant::now() - Duration::from_secs(3600)));
}

#[tokio::test]
async fn a_replica_stopped_by_a_refusal_leaves_the_membership_and_the_others_take_its_jobs() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let root = testing::unique_path("pool-refused-member");
    // The assignment node belongs to "owner": only sessions authenticated as owner may read it,
    // and every member reads it.
    let owner = Session::builder(connect)
        .digest_auth("owner", "owner-password")
        .connect()
        .await
        .unwrap();
    let raw = owner.client().unwrap();
    let open =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    raw.mkdir(&root, &open).await.unwrap();
    let closed =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::creator_all());
    raw.create(&format!("{root}/assignment"), b"", &closed)
        .await
        .unwrap();

    let watcher = session(connect, Duration::from_secs(10)).await;
    let terms = PoolTerms::default();
    // "refused" joins first, so it is the coordinator when the server refuses it.
    let refused_session = session(connect, SESSION_TIMEOUT).await;
    let refused = pool(&refused_session, &root, "refused", &terms).await;
    let allowed_session = Session::builder(connect)
        .session_timeout(SESSION_TIMEOUT)
        .digest_auth("owner", "owner-password")
        .connect()
        .await
        .unwrap();
    let allowed = pool(&allowed_session, &root, "allowed", &terms).await;
    within(BOUND, "the refused replica to stop", async {
        let mut events = Box::pin(refused.events());
        while futures::StreamExt::next(&mut events).await.is_some() {}
    })
    .await;
    assert!(
        matches!(
            refused.failure(),
            Some(zookeeper_recipes::Error::Refused { .. })
        ),
        "{:?}",
        refused.failure()
    );
    // Still holding its `LeaderPool`, the refused replica must not hold its membership node:
    // the other replica coordinates and leads every job.
    within(BOUND, "the allowed replica to lead all 12 jobs", async {
        while allowed.leading().len() < 12 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let members = common::children(&watcher, &format!("{root}/members")).await;
    assert_eq!(
        members.len(),
        1,
        "only the allowed replica is a member: {members:?}"
    );
    assert!(allowed.is_coordinator());
    allowed.close().await.unwrap();
    refused.close().await.unwrap();
    assert_no_overlap(&terms.terms(Instant::now() - Duration::from_secs(3600)));
}

// ---------------------------------------------------------------------------------------------
// The assignment node's size limit

/// `jobs` job names of `len` bytes each, distinct in their first digits.
fn long_job_names(jobs: usize, len: usize) -> Vec<String> {
    (0..jobs)
        .map(|i| format!("{i:04}-{}", "x".repeat(len - 5)))
        .collect()
}

/// Whether the `pools` agree on one assignment that names them all, gives each its quota of
/// `jobs`, and each leads exactly its own jobs. Cheap checks first, and no copy of the (large)
/// assignment: this runs after every event, on the runtime that also drives the sessions.
fn pools_settled(pools: &[LeaderPool], jobs: usize) -> bool {
    let n = pools.len();
    let (lo, hi) = (jobs / n, jobs.div_ceil(n));
    let mut total = 0;
    for p in pools {
        let leading = p.leading();
        if !(lo..=hi).contains(&leading.len()) {
            return false;
        }
        let assignment = p.assignment();
        let a = assignment.borrow();
        let Some(a) = a.as_ref() else {
            return false;
        };
        if a.members.len() != n || a.jobs_of(p.id()) != leading {
            return false;
        }
        total += leading.len();
    }
    let first = pools[0].assignment();
    let first = first.borrow();
    total == jobs
        && pools[1..]
            .iter()
            .all(|p| *p.assignment().borrow() == *first)
}

/// Waits, on the pools' own events, until they have settled on `jobs` jobs.
async fn wait_pools_settled(pools: &[LeaderPool], jobs: usize, what: &str) {
    use futures::StreamExt as _;
    let mut events = futures::stream::select_all(pools.iter().map(|p| Box::pin(p.events())));
    within(BOUND, what, async {
        while !pools_settled(pools, jobs) {
            events
                .next()
                .await
                .expect("the pools' events ended before they settled");
        }
    })
    .await;
}

/// The largest pool the size check lets through, as a test can afford it: 200 jobs whose names
/// are long enough (2,486 bytes) that the worst-case assignment is within a job name of the
/// budget (half of the default `jute.maxbuffer`). The node written is then about 500 KB, which
/// is what the limit is about; the job count is kept to what starts in a second or two on a
/// loaded 2-core machine (each job is a latch with its node). 1,000 jobs of realistic names
/// are measured by the bench (`pool 1000 10`).
#[tokio::test]
async fn a_pool_at_the_assignment_size_limit_settles_and_one_more_job_is_refused_at_start() {
    use zookeeper_recipes::{Error, LeaderPool, Session};
    const MAX_MEMBER_ID_LEN: usize = LeaderPool::MAX_MEMBER_ID_LEN;
    const DEFAULT_JUTE_MAX_BUFFER: usize = Session::DEFAULT_JUTE_MAX_BUFFER;
    let assignment_budget = LeaderPool::assignment_budget;
    let assignment_worst_case = LeaderPool::assignment_worst_case;

    if !zookeeper() {
        return;
    }
    const JOBS: usize = 200;
    let budget = assignment_budget(DEFAULT_JUTE_MAX_BUFFER);
    // The longest names that still fit: 153 + J (n + 134) <= budget.
    let name_len = (budget - 26 - MAX_MEMBER_ID_LEN + 1) / JOBS - MAX_MEMBER_ID_LEN - 6;
    let jobs = long_job_names(JOBS, name_len);
    let worst = assignment_worst_case(&jobs);
    assert!(
        worst <= budget && budget - worst < JOBS,
        "{worst} of {budget}"
    );

    let server = shared_server().await;
    let connect = server.connect_string();
    // Not a test of expiry: a session timeout that a loaded machine does not reach.
    let sessions: Vec<Session> =
        futures::future::join_all((0..3).map(|_| session(connect, Duration::from_secs(10)))).await;

    // One more job, or a longer name, and no replica may start: nothing is created.
    let refused_root = testing::unique_path("pool-too-large");
    let mut one_more = jobs.clone();
    one_more.extend(long_job_names(JOBS + 1, name_len).pop());
    for (what, too_many) in [
        ("one more job", one_more),
        ("a longer name", long_job_names(JOBS, name_len + 1)),
    ] {
        match LeaderPool::builder(&sessions[0], &refused_root)
            .id("big-0")
            .jobs(too_many)
            .start()
            .await
        {
            Err(Error::AssignmentTooLarge { size, limit, .. }) => {
                assert!(size > limit && limit == budget, "{what}: {size} of {limit}")
            }
            other => panic!("{what}: a pool over the limit started: {other:?}"),
        }
    }
    let client = sessions[0].client().unwrap();
    assert_eq!(client.check_stat(&refused_root).await.unwrap(), None);

    // At the limit: two replicas share the jobs, then a third joins (a second write of the
    // large node, read back by all three).
    let root = testing::unique_path("pool-at-limit");
    let start = |s: &Session, id: &str| {
        LeaderPool::builder(s, &root)
            .id(id)
            .jobs(jobs.clone())
            .start()
    };
    let started = Instant::now();
    let mut pools = vec![
        start(&sessions[0], "big-0").await.unwrap(),
        start(&sessions[1], "big-1").await.unwrap(),
    ];
    wait_pools_settled(&pools, JOBS, "200 jobs to settle over two replicas").await;
    eprintln!(
        "at the limit, 200 jobs over 2: settled in {} ms",
        ms(started.elapsed())
    );
    let joined = Instant::now();
    pools.push(start(&sessions[2], "big-2").await.unwrap());
    wait_pools_settled(&pools, JOBS, "200 jobs to settle over three replicas").await;
    eprintln!(
        "at the limit, join 2 -> 3: settled in {} ms",
        ms(joined.elapsed())
    );

    let (data, stat) = client
        .get_data(&format!("{root}/assignment"))
        .await
        .unwrap();
    let stored: zookeeper_recipes::Assignment = serde_json::from_slice(&data).unwrap();
    assert_eq!(stored.jobs.len(), JOBS);
    assert_eq!(Some(&stored), pools[0].assignment().borrow().as_ref());
    // Short ids: the node is the worst case less the ids' shortfall, still 95% of the budget.
    assert!(
        data.len() * 100 >= budget * 95,
        "the assignment is {} bytes, the budget {budget}",
        data.len()
    );
    eprintln!(
        "assignment: {} bytes ({} writes), worst case {worst}, budget {budget}",
        data.len(),
        stat.version + 1
    );
    for p in &pools {
        within(BOUND, "a pool at the limit to close", p.close())
            .await
            .unwrap();
    }
}
