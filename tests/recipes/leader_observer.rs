//! LeaderObserver against real ZooKeeper: it reports every leader once and in order across
//! release, crash, session expiry and server restart, never a node the server said is gone, and
//! costs one watch whatever the path holds.

use zookeeper_recipes_rigs::fixtures as common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::zkr::Zkr;
use common::{
    BOUND, Recording, children, eventually, expire_behind, latch, ms, own_server, proxy_to,
    session, shared_server, within, zookeeper,
};
use nix::sys::signal::Signal;
use zookeeper_client::{Acls, CreateMode};
use zookeeper_recipes::{
    ConnectionState, LeaderInfo, LeaderLatch, LeaderObserver, LeaderSelector, Leadership,
    ObserverEvent, Session,
};
use zookeeper_recipes_testing::{self as testing, TestingServer};

/// An observer's events as they arrived.
#[derive(Clone)]
struct Recorder(Recording<ObserverEvent>);

impl Recorder {
    fn record(observer: &LeaderObserver) -> Self {
        Recorder(Recording::of(observer.events()))
    }

    /// The leader reports only (`Some` for a leader, `None` for no leader), in order.
    fn reports(&self) -> Vec<Option<LeaderInfo>> {
        self.0
            .items()
            .into_iter()
            .filter_map(|e| match e {
                ObserverEvent::Leader(l) => Some(Some(l)),
                ObserverEvent::NoLeader => Some(None),
                _ => None,
            })
            .collect()
    }

    fn states(&self) -> Vec<ConnectionState> {
        self.0
            .items()
            .into_iter()
            .filter_map(|e| match e {
                ObserverEvent::State(s) => Some(s),
                _ => None,
            })
            .collect()
    }

    fn describe(&self) -> String {
        format!("{:?}", self.0.items())
    }

    /// Waits for a report of the leader `id`; returns it and when it arrived.
    async fn leader(&self, id: &str) -> (LeaderInfo, Instant) {
        let what = format!("the observer to report {id} as leader");
        self.0
            .wait_for(BOUND, &what, |e| match e {
                ObserverEvent::Leader(l) if l.id == id => Some(l.clone()),
                _ => None,
            })
            .await
    }

    /// Waits until there are at least `n` reports.
    async fn reports_at_least(&self, n: usize, what: &str) -> Vec<Option<LeaderInfo>> {
        eventually(BOUND, what, || {
            let reports = self.reports();
            async move { (reports.len() >= n).then_some(reports) }
        })
        .await
    }

    async fn state(&self, state: ConnectionState) {
        let what = format!("the observer to report the state {state}");
        self.0
            .wait_for(BOUND, &what, |e| {
                (*e == ObserverEvent::State(state)).then_some(())
            })
            .await;
    }
}

async fn term_of(latch: &LeaderLatch) -> Leadership {
    within(BOUND, "the latch to lead", latch.await_leadership())
        .await
        .unwrap()
}

fn assert_is(report: &Option<LeaderInfo>, term: &Leadership, id: &str) {
    let l = report
        .as_ref()
        .unwrap_or_else(|| panic!("expected {id} as leader, got no leader"));
    assert_eq!(l.id, id);
    assert_eq!(l.node, term.path(), "{id}'s node");
    assert_eq!(l.token, term.token(), "{id}'s token is its term's");
}

fn assert_rising_tokens(reports: &[Option<LeaderInfo>]) {
    let tokens: Vec<_> = reports.iter().flatten().map(|l| l.token).collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens do not rise: {tokens:?}"
    );
}

#[tokio::test]
async fn observer_reports_every_leader_in_order_across_release_crash_and_expiry() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("observe-order");
    let watcher_session = session(connect, Duration::from_secs(10)).await;
    let observer = LeaderObserver::builder(&watcher_session, &path)
        .start()
        .await
        .unwrap();
    let rec = Recorder::record(&observer);
    rec.reports_at_least(1, "the first report").await;

    // Queue: a (in process), b (a `zkr latch` child, to be killed), c (behind a proxy, to be
    // expired), d.
    let sa = session(connect, Duration::from_secs(10)).await;
    let a = latch(&sa, &path, "a").await;
    let term_a = term_of(&a).await;
    let mut b = Zkr::latch(connect, &path, "b", Some("2s"));
    eventually(BOUND, "zkr latch b to join", || async {
        (children(&watcher_session, &path).await.len() == 2).then_some(())
    })
    .await;
    let server_c = proxy_to(server).await;
    let sc = session(&server_c.connect_string(), Duration::from_secs(2)).await;
    let c = latch(&sc, &path, "c").await;
    let sd = session(connect, Duration::from_secs(10)).await;
    let d = latch(&sd, &path, "d").await;

    // Graceful release: b next.
    let released = Instant::now();
    a.close().await.unwrap();
    let (_, seen_b) = rec.leader("b").await;
    let b_led = b
        .wait_for("leader", BOUND, "zkr latch b never printed leader")
        .await;
    eprintln!(
        "release: observer reported b {} ms after a's close started",
        ms(seen_b - released)
    );

    // Crash: b is killed; c leads once b's session has expired.
    let killed = Instant::now();
    b.signal(Signal::SIGKILL);
    let term_c = term_of(&c).await;
    let (_, seen_c) = rec.leader("c").await;
    eprintln!(
        "crash: observer reported c {} ms after kill -9 of b (session timeout 2 s)",
        ms(seen_c - killed)
    );

    // Session expiry of the leader: d leads, c rejoins behind it.
    let expired = Instant::now();
    expire_behind(server, &server_c, &sc).await;
    let term_d = term_of(&d).await;
    let (_, seen_d) = rec.leader("d").await;
    eprintln!(
        "expiry: observer reported d {} ms after the expiry started",
        ms(seen_d - expired)
    );

    let reports = rec.reports();
    assert_eq!(reports.len(), 5, "reports: {}", rec.describe());
    assert_eq!(reports[0], None, "the first report is that nobody leads");
    assert_is(&reports[1], &term_a, "a");
    let rb = reports[2].as_ref().unwrap();
    assert_eq!(rb.id, "b");
    assert_eq!(rb.node, b_led.str("path"));
    assert_eq!(rb.token.get(), b_led.int("token"));
    assert_is(&reports[3], &term_c, "c");
    assert_is(&reports[4], &term_d, "d");
    assert_rising_tokens(&reports);
    assert!(
        rec.states().is_empty(),
        "the observer's own session never wavered: {}",
        rec.describe()
    );
    assert!(observer.is_confirmed());

    observer.close().await.unwrap();
    for l in [&c, &d] {
        l.close().await.unwrap();
    }
}

#[tokio::test]
async fn observer_follows_the_leader_across_a_server_restart() {
    if !zookeeper() {
        return;
    }
    let server = own_server().await;
    let path = testing::unique_path("observe-restart");
    // a reaches the server through a proxy that stays cut after the restart, so its session
    // expires on the restarted server; b and the observer reconnect within their sessions.
    let proxy = proxy_to(&server).await;
    let sa = session(&proxy.connect_string(), Duration::from_secs(2)).await;
    let a = latch(&sa, &path, "a").await;
    let term_a = term_of(&a).await;
    let sb = session(server.connect_string(), Duration::from_secs(20)).await;
    let b = latch(&sb, &path, "b").await;
    let watcher_session = session(server.connect_string(), Duration::from_secs(20)).await;
    let observer_session_id = watcher_session.session_id();
    let observer = LeaderObserver::builder(&watcher_session, &path)
        .start()
        .await
        .unwrap();
    let rec = Recorder::record(&observer);
    rec.leader("a").await;

    let restart = Instant::now();
    server.stop().await.unwrap();
    rec.state(ConnectionState::Suspended).await;
    assert_eq!(
        observer.leader().map(|l| l.id),
        Some("a".to_owned()),
        "while suspended the last leader stands"
    );
    assert!(!observer.is_confirmed(), "but it is unconfirmed");
    proxy.cut();
    server.restart().await.unwrap();
    rec.state(ConnectionState::Reconnected).await;
    let (_, seen_b) = rec.leader("b").await;
    let term_b = term_of(&b).await;
    eprintln!(
        "restart: b reported {} ms after the server was stopped",
        ms(seen_b - restart)
    );
    assert_eq!(
        watcher_session.session_id(),
        observer_session_id,
        "the observer kept its session"
    );
    let reports = rec.reports();
    assert_eq!(reports.len(), 2, "reports: {}", rec.describe());
    assert_is(&reports[0], &term_a, "a");
    assert_is(&reports[1], &term_b, "b");
    let states = rec.states();
    assert!(
        !states.contains(&ConnectionState::Lost),
        "the observer's session survived: {states:?}"
    );
    eventually(BOUND, "the observer to confirm b", || {
        let ok = observer.is_confirmed();
        async move { ok.then_some(()) }
    })
    .await;

    observer.close().await.unwrap();
    b.close().await.unwrap();
    proxy.heal();
    a.close().await.unwrap();
}

#[tokio::test]
async fn observer_keeps_the_last_leader_unconfirmed_while_its_own_session_is_lost() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("observe-own-loss");
    let sa = session(connect, Duration::from_secs(10)).await;
    let a = latch(&sa, &path, "a").await;
    term_of(&a).await;
    let b = latch(&sa, &path, "b").await;
    let proxy = proxy_to(server).await;
    let watcher_session = session(&proxy.connect_string(), Duration::from_secs(2)).await;
    let observer = LeaderObserver::builder(&watcher_session, &path)
        .start()
        .await
        .unwrap();
    let rec = Recorder::record(&observer);
    rec.leader("a").await;
    let mut changes = observer.watch();
    changes.borrow_and_update();

    // Cut the observer off, expire its session on the server, and change the leader meanwhile.
    let info = watcher_session.client().unwrap().session().clone();
    proxy.cut();
    rec.state(ConnectionState::Suspended).await;
    assert_eq!(observer.leader().map(|l| l.id), Some("a".to_owned()));
    assert!(!observer.is_confirmed());
    testing::expire_session(connect, &info, BOUND)
        .await
        .unwrap();
    a.close().await.unwrap();
    let term_b = term_of(&b).await;
    // Past the client's own give-up (7/5 of the 2 s timeout): the session is resumed when the
    // link heals, and only then do the servers say it expired. Meanwhile the last leader stands.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        observer.leader().map(|l| l.id),
        Some("a".to_owned()),
        "while cut off the last leader stands (the documented choice), unconfirmed"
    );
    assert!(!observer.is_confirmed());
    assert!(
        !changes.has_changed().unwrap(),
        "the watch did not change while the observer knew nothing new"
    );

    proxy.heal();
    rec.state(ConnectionState::Lost).await;
    let (reported_b, _) = rec.leader("b").await;
    assert_eq!(reported_b.token, term_b.token());
    assert_eq!(rec.reports().len(), 2, "reports: {}", rec.describe());
    eventually(
        BOUND,
        "the observer to confirm b on its new session",
        || {
            let ok = observer.is_confirmed();
            async move { ok.then_some(()) }
        },
    )
    .await;
    let states = rec.states();
    let lost = states
        .iter()
        .position(|s| *s == ConnectionState::Lost)
        .unwrap();
    assert!(
        states[lost..].contains(&ConnectionState::Reconnected),
        "a new session after the loss: {states:?}"
    );

    observer.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test]
async fn observer_never_reports_a_leader_whose_node_is_gone() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("observe-gone");
    let sessions: Vec<Session> =
        futures::future::join_all((0..2).map(|_| session(connect, Duration::from_secs(10)))).await;
    let watcher_session = session(connect, Duration::from_secs(10)).await;
    let observer = LeaderObserver::builder(&watcher_session, &path)
        .start()
        .await
        .unwrap();
    let rec = Recorder::record(&observer);

    // Every value the watch ever takes, checked against the nodes the observer has already been
    // told are gone (and has moved off).
    let gone: Arc<Mutex<Vec<String>>> = Arc::default();
    let violations: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut watch = observer.watch();
    let (g, v) = (Arc::clone(&gone), Arc::clone(&violations));
    tokio::spawn(async move {
        while watch.changed().await.is_ok() {
            let now = watch.borrow_and_update().clone();
            if let Some(l) = now
                && g.lock().unwrap().contains(&l.node)
            {
                v.lock().unwrap().push(l.node.clone());
            }
        }
    });

    let mut latches = Vec::new();
    for i in 0..4 {
        latches.push(latch(&sessions[i % 2], &path, &format!("l{i}")).await);
    }
    let raw = watcher_session.client().unwrap();
    let mut next = 4;
    for round in 0..16 {
        // Whoever leads now goes: closed by its owner, or (every third round) its node deleted
        // by someone else, after which that latch rejoins at the back with a new node.
        // (A latch whose node was just deleted by someone else may not have noticed yet: it is
        // not the leader the server knows.)
        let (leader, node) = within(BOUND, "a leader among the latches", async {
            loop {
                let found = latches.iter().enumerate().find_map(|(i, l)| {
                    let term = l.current_leadership().filter(|t| t.is_valid())?;
                    let node = term.path().to_owned();
                    (!gone.lock().unwrap().contains(&node)).then_some((i, node))
                });
                if let Some(found) = found {
                    return found;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        within(BOUND, "the observer to report the current leader", async {
            let mut w = observer.watch();
            w.wait_for(|l| l.as_ref().is_some_and(|l| l.node == node))
                .await
                .unwrap();
        })
        .await;
        if round % 3 == 2 {
            raw.delete(&node, None).await.unwrap();
        } else {
            let l = latches.remove(leader);
            l.close().await.unwrap();
            latches.push(latch(&sessions[next % 2], &path, &format!("l{next}")).await);
            next += 1;
        }
        // The server has said the node is gone: the observer moves off it and never back.
        within(BOUND, "the observer to move off a deleted leader", async {
            let mut w = observer.watch();
            w.wait_for(|l| l.as_ref().is_none_or(|l| l.node != node))
                .await
                .unwrap();
        })
        .await;
        gone.lock().unwrap().push(node);
    }
    let reports = rec.reports();
    let nodes: Vec<&str> = reports.iter().flatten().map(|l| l.node.as_str()).collect();
    let mut unique = nodes.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        nodes.len(),
        "a node was reported twice: {nodes:?}"
    );
    assert_rising_tokens(&reports);
    assert!(
        violations.lock().unwrap().is_empty(),
        "reported again after the server said they were gone: {:?}",
        violations.lock().unwrap()
    );
    eprintln!(
        "{} leader reports over 16 handovers, none stale",
        nodes.len()
    );

    observer.close().await.unwrap();
    for l in latches {
        l.close().await.unwrap();
    }
}

/// The paths `session_id` watches, from `wchc` (`0x<id>` then one tab-indented path per line).
fn watched_paths(wchc: &str, session_id: i64) -> Vec<String> {
    let header = format!("{session_id:#x}");
    let mut out = Vec::new();
    let mut ours = false;
    for line in wchc.lines() {
        if let Some(path) = line.strip_prefix('\t') {
            if ours {
                out.push(path.trim().to_owned());
            }
        } else {
            ours = line.trim() == header;
        }
    }
    out
}

/// The observer's watches as the server has them: the paths of its data and exists watches
/// (`wchc` lists those per session, and `wchs` counts only those), and the number of children
/// watches on the whole server (`mntr`'s `zk_watch_count` counts every kind; the test's own
/// server has no other children watches).
async fn observer_watches(server: &TestingServer, session_id: i64) -> Option<(Vec<String>, usize)> {
    let wchc = server.four_letter_word("wchc").await.ok()?;
    let data_watches = wchc.lines().filter(|l| l.starts_with('\t')).count();
    let all_watches: usize = server
        .mntr()
        .await
        .ok()?
        .get("zk_watch_count")?
        .parse()
        .ok()?;
    let children_watches = all_watches.checked_sub(data_watches)?;
    Some((watched_paths(&wchc, session_id), children_watches))
}

#[tokio::test]
async fn observer_costs_one_watch_whatever_the_path_holds() {
    if !zookeeper() {
        return;
    }
    // Its own server: the count of children watches is server-wide.
    let server = own_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("observe-cost");
    let watcher_session = session(connect, Duration::from_secs(10)).await;
    let sid = watcher_session.session_id().unwrap();
    let observer = LeaderObserver::builder(&watcher_session, &path)
        .start()
        .await
        .unwrap();
    let rec = Recorder::record(&observer);
    let server = &server;
    let expect = |what: &'static str, data: Vec<String>, children: usize| {
        let what = format!(
            "the observer's watches to be data/exists {data:?} and {children} children watch ({what})"
        );
        async move {
            let seen = eventually(BOUND, &what, || async {
                let seen = observer_watches(server, sid).await?;
                (seen == (data.clone(), children)).then_some(seen)
            })
            .await;
            eprintln!("{what}: {seen:?}");
        }
    };

    // No path: an exists watch on it.
    rec.reports_at_least(1, "the first report").await;
    assert_eq!(observer.leader(), None);
    expect("no path", vec![path.clone()], 0).await;

    // An empty path: a children watch on it.
    let raw = watcher_session.client().unwrap();
    raw.mkdir(&path, &CreateMode::Persistent.with_acls(Acls::anyone_all()))
        .await
        .unwrap();
    expect("empty path", vec![], 1).await;

    // Contenders: a data watch on the leader's node only.
    let sessions: Vec<Session> =
        futures::future::join_all((0..3).map(|_| session(connect, Duration::from_secs(10)))).await;
    let mut latches = Vec::new();
    for (i, s) in sessions.iter().enumerate() {
        latches.push(latch(s, &path, &format!("l{i}")).await);
    }
    let (leader, _) = rec.leader("l0").await;
    expect("three contenders", vec![leader.node.clone()], 0).await;
    latches.remove(0).close().await.unwrap();
    let (leader, _) = rec.leader("l1").await;
    expect("after a handover", vec![leader.node.clone()], 0).await;

    // Nobody left: back to the children watch.
    for l in latches {
        l.close().await.unwrap();
    }
    eventually(BOUND, "the observer to report no leader", || {
        let none = observer.leader().is_none();
        async move { none.then_some(()) }
    })
    .await;
    expect("no contender left", vec![], 1).await;

    observer.close().await.unwrap();
    expect("after close", vec![], 0).await;
}

#[tokio::test]
async fn observer_follows_selector_nodes_and_ignores_foreign_children() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("observe-selector");
    let s = session(connect, Duration::from_secs(10)).await;
    let raw = s.client().unwrap();
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    raw.mkdir(&path, &persistent).await.unwrap();
    // Foreign children, some sorting first by name: neither a leader nor a crash.
    for foreign in ["aaa", "0000000000", "lock-", "x__lock__0000000001"] {
        raw.create(&format!("{path}/{foreign}"), b"foreign", &persistent)
            .await
            .unwrap();
    }
    let observer = LeaderObserver::builder(&s, &path).start().await.unwrap();
    let rec = Recorder::record(&observer);
    rec.reports_at_least(1, "the first report").await;
    assert_eq!(rec.reports(), vec![None], "foreign children are no leader");

    let hold = |term: Leadership| async move {
        term.ended().await;
        Ok::<(), std::io::Error>(())
    };
    let one = LeaderSelector::builder(&s, &path)
        .id("one")
        .start(hold)
        .await
        .unwrap();
    let (first, _) = rec.leader("one").await;
    assert!(first.node.contains("-lock-"), "{}", first.node);
    let two = LeaderSelector::builder(&s, &path)
        .id("two")
        .start(hold)
        .await
        .unwrap();
    eventually(BOUND, "selector two to queue", || {
        let p = path.clone();
        let raw = raw.clone();
        async move { (raw.list_children(&p).await.ok()?.len() == 6).then_some(()) }
    })
    .await;
    one.close().await.unwrap();
    let (second, _) = rec.leader("two").await;
    assert!(second.token > first.token);
    assert_eq!(rec.reports().len(), 3, "reports: {}", rec.describe());
    two.close().await.unwrap();
    eventually(BOUND, "no leader once both selectors are gone", || {
        let none = observer.leader().is_none();
        async move { none.then_some(()) }
    })
    .await;
    observer.close().await.unwrap();
}

#[tokio::test]
async fn an_observer_that_may_not_read_the_path_stops_with_the_refusal() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("observe-refused");
    let owner = Session::builder(connect)
        .digest_auth("owner", "owner-password")
        .connect()
        .await
        .unwrap();
    let raw = owner.client().unwrap();
    let parent = path.rsplit_once('/').unwrap().0;
    match raw
        .mkdir(
            parent,
            &CreateMode::Persistent.with_acls(Acls::anyone_all()),
        )
        .await
    {
        Ok(()) | Err(zookeeper_client::Error::NodeExists) => {}
        Err(e) => panic!("making {parent}: {e}"),
    }
    raw.create(
        &path,
        b"",
        &CreateMode::Persistent.with_acls(Acls::creator_all()),
    )
    .await
    .unwrap();
    let stranger = session(connect, Duration::from_secs(10)).await;
    let observer = LeaderObserver::builder(&stranger, &path)
        .start()
        .await
        .unwrap();
    let rec = Recorder::record(&observer);
    within(
        BOUND,
        "the observer's events to end after the refusal",
        async {
            let mut events = Box::pin(observer.events());
            while futures::StreamExt::next(&mut events).await.is_some() {}
        },
    )
    .await;
    match observer.failure() {
        Some(zookeeper_recipes::Error::Refused {
            source, path: p, ..
        }) => {
            assert_eq!(source, zookeeper_client::Error::NoAuth);
            assert_eq!(p, path);
        }
        other => panic!("expected a NoAuth refusal, got {other:?}"),
    }
    assert_eq!(observer.leader(), None);
    assert!(!observer.is_confirmed());
    assert!(rec.reports().is_empty(), "{}", rec.describe());
    raw.delete(&path, None).await.unwrap();
}
