//! Time as it really is: a host that suspends, a timeout a reconnect renegotiates, a grace that
//! must end inside the lease, and a lease that lapses while the ensemble re-elects its leader.
//!
//! Each test names the fault it covers:
//! - a host suspend (boot time jumps, the monotonic clock does not): through a
//!   [`TestClock`] under the session, the one fault no process can cause to itself;
//! - a quorum leader that dies silently (paused longer than `syncLimit x tickTime`), with the
//!   contenders on its followers;
//! - a client link blackholed while the term's work ignores its cancellation;
//! - a reconnect to a server whose `maxSessionTimeout` is lower than the session's timeout.

use zookeeper_recipes_rigs::fixtures as common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    BOUND, Recording, StateRecorder, eventually, ms, own_server, session, slack, within, zookeeper,
};
use zookeeper_recipes::{BootTime, TestClock};
use zookeeper_recipes::{
    ConnectionState, ErrorPolicy, LatchEvent, LeaderLatch, LeaderSelector, Leadership, Session,
    TermEnd,
};
use zookeeper_recipes_testing::history::{History, Term};
use zookeeper_recipes_testing::{FaultProxy, TestingCluster, unique_path};

const TICK: Duration = Duration::from_millis(200);
/// The first server's session limit in the renegotiation test.
const FIRST: Duration = Duration::from_secs(20);

/// A host suspend, through the clock seam: the session of a leader reads a [`TestClock`], and
/// the test moves its boot time ten minutes ahead while the monotonic clock (and every tokio
/// timer) does not move. The term must be invalid at once, before any task runs, and end
/// promptly; and since the servers never saw a gap (only the clock moved), the lease is proven
/// again by the next heartbeats and the latch leads again on its node with its token. A
/// selector's closure on the same session sees its term cancelled too.
#[tokio::test]
async fn a_suspended_host_sees_its_term_over_at_once_on_resume() {
    if !zookeeper() {
        return;
    }
    let server = common::shared_server().await;
    let clock = TestClock::new();
    let s = Session::builder(server.connect_string())
        .session_timeout(Duration::from_secs(60))
        .server_tick_time(TICK)
        .clock(clock.clock())
        .connect()
        .await
        .unwrap();
    let path = unique_path("suspend");
    let latch = LeaderLatch::builder(&s, format!("{path}/latch"))
        .id("a")
        .error_policy(ErrorPolicy::SessionExpired)
        .start()
        .await
        .unwrap();
    let term = within(BOUND, "the latch to lead", latch.await_leadership())
        .await
        .unwrap();
    let (selector_tx, mut selector_rx) = tokio::sync::mpsc::unbounded_channel::<Leadership>();
    let selector = LeaderSelector::builder(&s, format!("{path}/selector"))
        .id("a")
        .start(move |term: Leadership| {
            let tx = selector_tx.clone();
            async move {
                let _ = tx.send(term.clone());
                term.cancelled().await;
                Ok::<(), std::io::Error>(())
            }
        })
        .await
        .unwrap();
    let selector_term = within(BOUND, "the selector to lead", selector_rx.recv())
        .await
        .unwrap();
    assert!(term.is_valid() && selector_term.is_valid());
    let left_before = term.remaining();

    clock.suspend(Duration::from_secs(600));
    // No task has run yet: the check itself reads boot time.
    assert!(
        !term.is_valid(),
        "a term whose time passed in a suspend is over at once"
    );
    assert!(!selector_term.is_valid());
    let resumed = Instant::now();
    within(BOUND, "the latch's term to end", term.ended()).await;
    within(BOUND, "the selector's term to end", selector_term.ended()).await;
    let ended_after = resumed.elapsed();
    eprintln!(
        "suspend of 600 s with {} ms of lease left: invalid at once, ended {} ms after the resume ({:?})",
        ms(left_before),
        ms(ended_after),
        term.end_reason()
    );
    assert_eq!(term.end_reason(), Some(TermEnd::DeadlinePassed));
    assert!(
        ended_after < slack(Duration::from_secs(2)),
        "the term ended {} ms after the resume",
        ms(ended_after)
    );
    // The servers saw no gap: the same session, proven again, leads again on the same node.
    let again = within(BOUND, "the latch to lead again", latch.await_leadership())
        .await
        .unwrap();
    assert_eq!(again.path(), term.path());
    assert_eq!(again.token(), term.token());
    assert_eq!(again.session_id(), term.session_id());
    selector.close().await.unwrap();
    latch.close().await.unwrap();
    s.close().await.unwrap();
}

/// What a closure that ignores its cancellation did: when it last ran, every 5 ms.
#[derive(Default)]
struct Stubborn {
    started: Option<BootTime>,
    last_alive: Option<BootTime>,
}

/// The grace runs inside the lease. Leader A's link is blackholed; its closure ignores its
/// cancellation (it never returns by itself). B waits on another session. Whatever the grace
/// asked for (the default, clamped to what the 2 s timeout leaves), A's closure must have
/// stopped running before B's closure starts: the abort comes by the lease's deadline at the
/// latest, which is before the quorum can expire A's session. Both error policies. Faults: a
/// client link blackholed; work that ignores its stop signal.
#[tokio::test]
async fn a_closure_that_ignores_its_cancellation_stops_before_the_successor_starts() {
    if !zookeeper() {
        return;
    }
    let server = own_server().await;
    for policy in [ErrorPolicy::Standard, ErrorPolicy::SessionExpired] {
        let proxy = FaultProxy::start(&[server.connect_string().to_owned()])
            .await
            .unwrap();
        let timeout = Duration::from_secs(2);
        let sa = Session::builder(proxy.connect_string())
            .session_timeout(timeout)
            .server_tick_time(TICK)
            .connect()
            .await
            .unwrap();
        let sb = session(server.connect_string(), Duration::from_secs(10)).await;
        let path = unique_path("stubborn");
        let a_book = Arc::new(Mutex::new(Stubborn::default()));
        let book = Arc::clone(&a_book);
        let a = LeaderSelector::builder(&sa, &path)
            .id("a")
            .error_policy(policy)
            .start(move |term: Leadership| {
                let book = Arc::clone(&book);
                async move {
                    book.lock().unwrap().started = Some(term.clock().now());
                    loop {
                        book.lock().unwrap().last_alive = Some(term.clock().now());
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    #[allow(unreachable_code)]
                    Ok::<(), std::io::Error>(())
                }
            })
            .await
            .unwrap();
        eventually(BOUND, "A's closure to run", || async {
            a_book.lock().unwrap().started.map(|_| ())
        })
        .await;
        let b_started = Arc::new(Mutex::new(None::<BootTime>));
        let b_book = Arc::clone(&b_started);
        let b = LeaderSelector::builder(&sb, &path)
            .id("b")
            .start(move |term: Leadership| {
                let b_book = Arc::clone(&b_book);
                async move {
                    b_book.lock().unwrap().get_or_insert(term.clock().now());
                    term.cancelled().await;
                    Ok::<(), std::io::Error>(())
                }
            })
            .await
            .unwrap();
        let holed = BootTime::now();
        proxy.blackhole();
        let b_at = eventually(BOUND, "B to start its closure", || async {
            *b_started.lock().unwrap()
        })
        .await;
        let a_last = a_book.lock().unwrap().last_alive.unwrap();
        eprintln!(
            "{policy:?}: A's closure last ran {} ms after the blackhole, B's started {} ms after it: {}",
            ms(a_last - holed),
            ms(b_at - holed),
            if a_last < b_at {
                format!("{} ms apart", ms(b_at - a_last))
            } else {
                format!("OVERLAP of {} ms", ms(a_last - b_at))
            }
        );
        assert!(
            a_last < b_at,
            "{policy:?}: A's closure ran {} ms after B's started",
            ms(a_last - b_at)
        );
        proxy.heal();
        b.close().await.unwrap();
        a.close().await.unwrap();
    }
}

/// A grace that cannot fit in the lease of the session timeout is refused at build, with the
/// limit in the error; the default grace is lowered to the limit instead.
#[tokio::test]
async fn a_grace_longer_than_the_lease_allows_is_refused_at_build() {
    if !zookeeper() {
        return;
    }
    let server = common::shared_server().await;
    let s = Session::builder(server.connect_string())
        .session_timeout(Duration::from_secs(10))
        .server_tick_time(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let refused = LeaderSelector::builder(&s, unique_path("grace"))
        .grace(Duration::from_secs(5))
        .start(|_term: Leadership| async { Ok::<(), std::io::Error>(()) })
        .await;
    match refused {
        Err(zookeeper_recipes::Error::GraceTooLong { grace, limit, .. }) => {
            assert_eq!(grace, Duration::from_secs(5));
            assert_eq!(limit, Duration::from_millis(2750));
        }
        other => panic!("a 5 s grace on a 10 s session was not refused: {other:?}"),
    }
    let fits = LeaderSelector::builder(&s, unique_path("grace"))
        .grace(Duration::from_millis(2750))
        .start(|_term: Leadership| async { Ok::<(), std::io::Error>(()) })
        .await
        .unwrap();
    fits.close().await.unwrap();
}

/// One contender of the silent-leader test: its latch, its session, and its events.
struct Contender {
    session: Session,
    latch: LeaderLatch,
    events: Recording<LatchEvent>,
    states: StateRecorder,
}

async fn contender(connect: &str, path: &str, id: &str, policy: ErrorPolicy) -> Contender {
    let session = Session::builder(connect)
        .session_timeout(Duration::from_secs(4))
        .server_tick_time(TICK)
        .connection_timeout(Duration::from_secs(20))
        .connect()
        .await
        .unwrap();
    let states = StateRecorder::start(&session);
    let latch = LeaderLatch::builder(&session, path)
        .id(id)
        .error_policy(policy)
        .start()
        .await
        .unwrap();
    let events = Recording::of(latch.events());
    Contender {
        session,
        latch,
        events,
        states,
    }
}

/// The terms a contender's events recorded, with their own start and end instants.
fn terms_of(c: &Contender, election: &str) -> Vec<Term> {
    let mut out: Vec<Term> = Vec::new();
    for event in c.events.items() {
        if let LatchEvent::Leader(term) = event {
            out.push(Term {
                election: election.to_owned(),
                holder: term.participant_id().to_owned(),
                token: term.token(),
                start: term.started_at(),
                end: term.ended_at(),
            });
        }
    }
    out
}

/// A lapsed lease ends terms, not sessions. Three servers, tick 200 ms, `syncLimit` 30 (6 s);
/// A leads and B waits, each on a follower, with a 4 s timeout and the tick given. The quorum
/// leader is paused for 7 s (a host that died silently): the followers keep their clients for
/// 6 s while every `sync` hangs, then elect a new leader. A's term must end during the pause
/// (its lease lapses), A's session must never change and never be `Lost`, A must lead again on
/// its node (same token) once the ensemble is back, B must never lead, and the history of terms
/// must show no overlap. Both error policies. Fault: the quorum leader frozen longer than
/// `syncLimit x tickTime`.
#[tokio::test]
async fn a_silent_quorum_leader_ends_terms_but_keeps_sessions_and_the_leader() {
    if !zookeeper() {
        return;
    }
    let _turn = common::ensemble_turn().await;
    let cluster = TestingCluster::builder()
        .servers(3)
        .tick_time(TICK)
        .sync_limit(30)
        .start()
        .await
        .unwrap();
    for policy in [ErrorPolicy::Standard, ErrorPolicy::SessionExpired] {
        let leader = cluster.wait_for_leader(BOUND).await.unwrap();
        let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
        let path = unique_path("silent");
        let mut a = contender(
            cluster.server_connect_string(followers[0]).unwrap(),
            &path,
            "a",
            policy,
        )
        .await;
        let first = within(BOUND, "A to lead", a.latch.await_leadership())
            .await
            .unwrap();
        let mut b = contender(
            cluster.server_connect_string(followers[1]).unwrap(),
            &path,
            "b",
            policy,
        )
        .await;
        b.latch.wait_joined(BOUND).await.unwrap();
        let a_id = a.session.session_id().unwrap();
        let b_id = b.session.session_id().unwrap();

        let paused = Instant::now();
        cluster.pause_server(leader).unwrap();
        within(BOUND, "A's term to end during the pause", first.ended()).await;
        let a_ended = paused.elapsed();
        tokio::time::sleep(Duration::from_secs(7).saturating_sub(paused.elapsed())).await;
        cluster.resume_server(leader).unwrap();
        let resumed = paused.elapsed();

        let again = within(
            Duration::from_secs(60),
            "A to lead again",
            a.latch.await_leadership(),
        )
        .await
        .unwrap();
        let back = paused.elapsed();
        let a_states = a.states.drain();
        let b_states = b.states.drain();
        eprintln!(
            "{policy:?}: A's term ended {} ms into the pause ({:?}); resumed at {} ms; A led again at {} ms on the same node: {}, token {} -> {}; A's session {:#x} -> {:#x?}, B's {:#x} -> {:#x?}; A's states {a_states:?}",
            ms(a_ended),
            first.end_reason(),
            ms(resumed),
            ms(back),
            again.path() == first.path(),
            first.token(),
            again.token(),
            a_id,
            a.session.session_id(),
            b_id,
            b.session.session_id(),
        );
        assert!(
            a_ended < Duration::from_secs(7),
            "A's term must end during the pause"
        );
        assert!(
            !a_states.contains(&Some(ConnectionState::Lost)),
            "{policy:?}: A's session was lost: {a_states:?}"
        );
        assert!(
            !b_states.contains(&Some(ConnectionState::Lost)),
            "{policy:?}: B's session was lost: {b_states:?}"
        );
        assert_eq!(
            a.session.session_id(),
            Some(a_id),
            "A's session was replaced"
        );
        assert_eq!(
            b.session.session_id(),
            Some(b_id),
            "B's session was replaced"
        );
        assert_eq!(again.path(), first.path(), "A did not lead on its node");
        assert_eq!(again.token(), first.token());
        assert!(
            !b.events
                .items()
                .iter()
                .any(|e| matches!(e, LatchEvent::Leader(_))),
            "{policy:?}: B led"
        );
        let mut history = History::default();
        history.terms.extend(terms_of(&a, &path));
        history.terms.extend(terms_of(&b, &path));
        let violations = history.check();
        assert!(violations.is_empty(), "{policy:?}: {violations:?}");
        b.latch.close().await.unwrap();
        a.latch.close().await.unwrap();
        a.session.close().await.unwrap();
        b.session.close().await.unwrap();
    }
}

/// A timeout renegotiated on a reconnect. Server 0 allows sessions up to 20 s, server 1 up to
/// 4 s (a rolling change half done). A's session (20 s asked) starts on server 0 through a
/// proxy, then moves to server 1 (the same session: the client asks for the 20 s it has, and
/// server 1 clamps it to 4 s). From then on the quorum may expire the session 4 s after its
/// last touch: `safe_until` must be at most 4 s ahead, and when A is then cut off, B (waiting
/// on server 2) must start only after A's term ended. Faults: a reconnect to a server with
/// other limits; a client link cut.
///
/// The session connects straight to the servers, and zookeeper-client 0.11 does not report
/// what its reconnects renegotiate: A declares the lowest `maxSessionTimeout` of the ensemble
/// (`session_timeout_floor`, 4 s), as an operator whose servers' limits differ must, and its
/// lease counts with 4 s from the start (`docs/decisions/0001-no-relay.md`).
///
/// How soon B leads is not this test's claim, and it is not always 4 s: server 0 reports the
/// touches of its clients to the quorum leader in batches, with the timeout of its own
/// connection, and a batch that lands after server 1's revalidation sets the session's expiry
/// 20 s out again (CI stop 30 met it: B did not lead within 30 s of the cut on a 60 s first
/// timeout). B's wait is therefore bounded by the longest timeout the session ever had, plus
/// the usual bound; the lease, which keeps the lowest, is on the safe side of either.
#[tokio::test]
async fn a_timeout_renegotiated_down_on_a_reconnect_bounds_the_lease() {
    if !zookeeper() {
        return;
    }
    let _turn = common::ensemble_turn().await;
    let cluster = TestingCluster::builder()
        .servers(3)
        .tick_time(TICK)
        .max_session_timeout(FIRST)
        .server_session_timeouts(1, Duration::from_millis(400), Duration::from_secs(4))
        .start()
        .await
        .unwrap();
    let p0 = FaultProxy::start(&[cluster.server_connect_string(0).unwrap().to_owned()])
        .await
        .unwrap();
    let p1 = FaultProxy::start(&[cluster.server_connect_string(1).unwrap().to_owned()])
        .await
        .unwrap();
    // Server 1 refuses A for now, so that A's session starts on server 0.
    p1.cut();
    let sa = Session::builder(format!("{},{}", p0.connect_string(), p1.connect_string()))
        .session_timeout(FIRST)
        .session_timeout_floor(Duration::from_secs(4))
        .server_tick_time(TICK)
        .connection_timeout(Duration::from_secs(20))
        .connect()
        .await
        .unwrap();
    assert_eq!(
        sa.client().unwrap().session_timeout(),
        FIRST,
        "server 0 gave the 20 s asked for"
    );
    assert_eq!(
        sa.negotiated_timeout(),
        Some(Duration::from_secs(4)),
        "the lease counts with the declared floor from the start"
    );
    let a_id = sa.session_id().unwrap();
    let path = unique_path("renegotiated");
    let a = LeaderLatch::builder(&sa, &path)
        .id("a")
        .error_policy(ErrorPolicy::SessionExpired)
        .start()
        .await
        .unwrap();
    let a_term = within(BOUND, "A to lead", a.await_leadership())
        .await
        .unwrap();
    let sb = session(
        cluster.server_connect_string(2).unwrap(),
        Duration::from_secs(10),
    )
    .await;
    let b = LeaderLatch::builder(&sb, &path)
        .id("b")
        .start()
        .await
        .unwrap();
    b.wait_joined(BOUND).await.unwrap();
    let before_move = a_term.remaining();

    // The move: server 0 goes away for A, server 1 takes it.
    p1.heal();
    p0.cut();
    // Every connection through server 0's proxy is reset: an answer now comes through server 1.
    eventually(BOUND, "A's session to move to server 1", || async {
        sa.client().ok()?.check_stat("/").await.ok().map(|_| ())
    })
    .await;
    assert_eq!(sa.negotiated_timeout(), Some(Duration::from_secs(4)));
    assert_eq!(sa.session_id(), Some(a_id), "the same session moved");
    let ahead = sa.safe_until().saturating_duration_since(sa.clock().now());
    eprintln!(
        "renegotiated: lease {} ms ahead before the move ({} s), {} ms ahead after it (4 s)",
        ms(before_move),
        FIRST.as_secs(),
        ms(ahead)
    );
    assert!(
        ahead <= Duration::from_secs(4),
        "safe_until is {} ms ahead on a 4 s session",
        ms(ahead)
    );

    // Cut A off: the quorum expires its session 4 s (or, see above, up to 20 s) after the
    // last touch, and B leads.
    let a_term = a.await_leadership().await.unwrap_or(a_term);
    p1.cut();
    let cut_at = sb.clock().now();
    let b_term = within(
        FIRST + BOUND,
        "B to lead once A's session expired",
        b.await_leadership(),
    )
    .await
    .unwrap();
    let a_ended = eventually(BOUND, "A's term to end", || async { a_term.ended_at() }).await;
    eprintln!(
        "A's term ended {} ms before B's began; B led {} ms after the cut",
        ms(b_term.started_at().saturating_duration_since(a_ended)),
        ms(b_term.started_at().saturating_duration_since(cut_at))
    );
    assert!(
        a_ended <= b_term.started_at(),
        "A's term ran {} ms into B's",
        ms(a_ended.saturating_duration_since(b_term.started_at()))
    );
    b.close().await.unwrap();
    drop(a);
}

/// A recipe closed while its session's lease has lapsed (the session itself alive on the
/// servers) deletes its node once the session is back: the node would otherwise stay first in
/// line for as long as the session lives, and nobody would lead (found by the fault trials: a
/// lock without a leader for 40 to 84 s after a quorum loss). `close()` returns at once, and the
/// deletion waits for a connected client of the session in the background. Fault: a client
/// link blackholed past the lease, healed before the server's timeout.
#[tokio::test]
async fn a_selector_closed_during_a_lapse_deletes_its_node_once_the_session_is_back() {
    if !zookeeper() {
        return;
    }
    let server = common::shared_server().await;
    let proxy = FaultProxy::start(&[server.connect_string().to_owned()])
        .await
        .unwrap();
    let sa = Session::builder(proxy.connect_string())
        .session_timeout(Duration::from_secs(6))
        .server_tick_time(TICK)
        .lease_margin(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let sb = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = unique_path("closed-in-lapse");
    let a = LeaderSelector::builder(&sa, &path)
        .id("a")
        .start(|term: Leadership| async move {
            term.cancelled().await;
            Ok::<(), std::io::Error>(())
        })
        .await
        .unwrap();
    let a_term = within(BOUND, "A to lead", a.await_leadership())
        .await
        .unwrap();
    let b = LeaderSelector::builder(&sb, &path)
        .id("b")
        .start(|term: Leadership| async move {
            term.cancelled().await;
            Ok::<(), std::io::Error>(())
        })
        .await
        .unwrap();
    let a_id = sa.session_id().unwrap();
    proxy.blackhole();
    let holed = Instant::now();
    within(BOUND, "A's term to end by its lease", a_term.ended()).await;
    within(
        Duration::from_secs(2),
        "A's close to return while its session is cut off",
        a.close(),
    )
    .await
    .unwrap();
    assert!(
        holed.elapsed() < Duration::from_secs(5),
        "too late to heal before the server's timeout: {} ms",
        ms(holed.elapsed())
    );
    proxy.heal();
    let b_term = within(
        BOUND,
        "B to lead once A's node is deleted",
        b.await_leadership(),
    )
    .await
    .unwrap();
    eprintln!(
        "closed during a lapse: B led {} ms after the blackhole, A's session {:#x} kept: {}",
        ms(holed.elapsed()),
        a_id,
        sa.session_id() == Some(a_id)
    );
    assert_eq!(sa.session_id(), Some(a_id), "A's session was kept");
    assert!(b_term.is_valid());
    b.close().await.unwrap();
}

/// A session that may be on the quorum leader itself when that leader dies silently. Three
/// servers, tick 200 ms, `syncLimit` 15 (3 s); a session of 2 s with every server in its connect
/// string, the leader first (zookeeper-client picks among them), sees the leader paused for
/// 4.2 s, four times, each with a new session. ZooKeeper's new quorum keeps the session; the
/// session must keep it too. Fault: the quorum leader frozen longer than `syncLimit x
/// tickTime`. The paused leader, once resumed, calls the session expired until its first tick:
/// a client that reconnects to it then hears "expired" for a session the new quorum keeps (3 of
/// 28 rounds before the session asked twice; see "A lapsed lease ends terms, not the session"
/// in the latch's spec).
#[tokio::test]
async fn a_session_on_a_silent_quorum_leader_is_kept() {
    if !zookeeper() {
        return;
    }
    let _turn = common::ensemble_turn().await;
    let cluster = TestingCluster::builder()
        .servers(3)
        .tick_time(TICK)
        .sync_limit(15)
        .start()
        .await
        .unwrap();
    let mut replaced = Vec::new();
    // `ROUNDS=N` runs more rounds, to measure how often a session is replaced.
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    for round in 0..rounds {
        // The ensemble whole again: a leader that was paused says `leader` until its first tick.
        let leader = cluster.wait_whole(BOUND).await.unwrap();
        let mut order = vec![leader];
        order.extend((0..3).filter(|i| *i != leader));
        let connect = order
            .iter()
            .map(|i| cluster.server_connect_string(*i).unwrap())
            .collect::<Vec<_>>()
            .join(",");
        let s = Session::builder(connect)
            .session_timeout(Duration::from_secs(2))
            .server_tick_time(TICK)
            .connection_timeout(Duration::from_secs(20))
            .connect()
            .await
            .unwrap();
        let mut states = StateRecorder::start(&s);
        let id = s.session_id().unwrap();
        cluster.pause_server(leader).unwrap();
        // The fault's length, not a wait for an event.
        tokio::time::sleep(Duration::from_millis(4200)).await;
        cluster.resume_server(leader).unwrap();
        eventually(BOUND, "the session's lease to be proven again", || async {
            (s.safe_until() > s.clock().now()).then_some(())
        })
        .await;
        let now = s.session_id();
        let seen = states.drain();
        let seen: Vec<&str> = seen
            .iter()
            .map(|s| s.map_or("none", |s| s.as_str()))
            .collect();
        eprintln!("round {round}: leader {leader}, session {id:#x} -> {now:x?}; states {seen:?}");
        if now != Some(id) {
            replaced.push(round);
        }
        s.close().await.unwrap();
    }
    assert!(
        replaced.is_empty(),
        "sessions replaced in rounds {replaced:?}"
    );
}

/// A session closed by another client: ids are public (`ephemeralOwner`), and ZooKeeper 3.8
/// derives a session's password from its id, so any client that reaches a server can resume a
/// session and close it (here a twin with the session's own id and password, as Curator's
/// `KillSession`). The servers delete A's node at once and B leads; A learns of it only from
/// the "expired" its client's next reconnect brings back. Under the SessionExpired policy A's
/// term used to outlive that first "expired" by the two server ticks the session waits before it
/// asks again (1004 ms into B's term, twice). The lease is void at the first "expired" now: the
/// term ends as A's client hears it. Tick 500 ms, 4 s sessions. Fault: a
/// session closed from outside while A's link is cut (healed at once after the close), so that
/// A cannot reconnect between the twin's connect and its close.
///
/// Without the cut, the twin's connect kicks A's connection off, and A's client may reconnect
/// before the twin's close is applied: ZooKeeper then accepts that reconnect and leaves the
/// connection silent after the close, and A hears nothing until its client drops the silent
/// connection (its term then ends at its lease's deadline, 2.8 s after the close, in 5 of 16
/// runs here). A close is not an expiry: no lease bounds it, only fencing (and keeping other
/// clients off the ensemble) does. Under the Standard policy A's term ends at the cut, before B's.
#[tokio::test]
async fn a_term_ends_at_the_first_expired_when_another_client_closes_the_session() {
    if !zookeeper() {
        return;
    }
    let tick = Duration::from_millis(500);
    let server = zookeeper_recipes_testing::TestingServer::builder()
        .tick_time(tick)
        .start()
        .await
        .unwrap();
    let proxy = FaultProxy::start(&[server.connect_string().to_owned()])
        .await
        .unwrap();
    let build = |connect: String| {
        Session::builder(connect)
            .session_timeout(Duration::from_secs(4))
            .server_tick_time(tick)
            .connection_timeout(Duration::from_secs(20))
            .connect()
    };
    for policy in [ErrorPolicy::SessionExpired, ErrorPolicy::Standard] {
        let path = unique_path("closed-by-another");
        let sa = build(proxy.connect_string().to_owned()).await.unwrap();
        let sb = build(server.connect_string().to_owned()).await.unwrap();
        let a = LeaderLatch::builder(&sa, &path)
            .id("a")
            .error_policy(policy)
            .start()
            .await
            .unwrap();
        let a_term = within(BOUND, "A to lead", a.await_leadership())
            .await
            .unwrap();
        let b = LeaderLatch::builder(&sb, &path)
            .id("b")
            .error_policy(policy)
            .start()
            .await
            .unwrap();
        b.wait_joined(BOUND).await.unwrap();
        let lease_timeout = sa.negotiated_timeout();
        // When A's client hears "expired" (the first word A can have of the close).
        let mut watcher = sa.client().unwrap().state_watcher();
        let clock = sa.clock().clone();
        let heard = tokio::spawn(async move {
            loop {
                if watcher.changed().await == zookeeper_client::SessionState::Expired {
                    return clock.now();
                }
            }
        });
        let cut_at = sb.clock().now();
        // Cut, close from outside (waiting until the server has applied the close), heal.
        common::expire_behind(&server, &proxy, &sa).await;
        let healed_at = sb.clock().now();
        let b_term = within(
            BOUND,
            "B to lead once A's session is closed",
            b.await_leadership(),
        )
        .await
        .unwrap();
        let a_ended = eventually(BOUND, "A's term to end", || async { a_term.ended_at() }).await;
        let heard_at = within(BOUND, "A's client to hear \"expired\"", heard)
            .await
            .unwrap();
        let b_began = b_term.started_at();
        let (sign, gap) = if a_ended <= b_began {
            ("before", b_began.saturating_duration_since(a_ended))
        } else {
            ("AFTER", a_ended.saturating_duration_since(b_began))
        };
        let (when, after_heard) = if a_ended >= heard_at {
            ("after", a_ended.saturating_duration_since(heard_at))
        } else {
            ("before", heard_at.saturating_duration_since(a_ended))
        };
        eprintln!(
            "{policy:?}: lease timeout {lease_timeout:?}; B began {} ms after the cut, the link healed {} ms after it, A's client heard \"expired\" {} ms after the heal; A's term ended {} ms {when} that ({:?}), {} ms {sign} B's began",
            ms(b_began.saturating_duration_since(cut_at)),
            ms(healed_at.saturating_duration_since(cut_at)),
            ms(heard_at.saturating_duration_since(healed_at)),
            ms(after_heard),
            a_term.end_reason(),
            ms(gap),
        );
        match policy {
            ErrorPolicy::Standard => assert!(
                a_ended <= b_began,
                "Standard: A's term ran {} ms into B's",
                ms(a_ended.saturating_duration_since(b_began))
            ),
            // It ends as its session hears the first "expired" (a tenth of a tick for the
            // tasks between), not two ticks later.
            _ => assert!(
                a_ended <= heard_at + tick / 10,
                "{policy:?}: A's term ended {} ms after its client heard \"expired\": it outlived the first \"expired\"",
                ms(a_ended.saturating_duration_since(heard_at))
            ),
        }
        b.close().await.unwrap();
        drop(a);
        sa.close().await.unwrap();
        sb.close().await.unwrap();
    }
}

/// The creation timeout bounds the lease for the session's whole life. A new quorum leader
/// re-arms every session with the timeout it was *created* with, whatever a reconnect
/// renegotiated since. Server 0 allows sessions up to 2 s, server 1 at least 6 s. A's session
/// (6 s asked) is created on server 0 with 2 s, then moves to server 1 (the client asks for the
/// 2 s it has, server 1 raises it to its 6 s minimum) and proves its lease there. Then A is cut
/// off and the quorum leader killed: the next leader expires A's session 2 s after it takes
/// over, and B leads. A's term (SessionExpired policy: a cut alone does not end it) must have
/// ended by then. Faults: a reconnect to a server that raises the timeout; a client link cut;
/// the quorum leader killed.
#[tokio::test]
async fn the_creation_timeout_bounds_the_lease_after_a_move_to_a_server_that_gives_more() {
    if !zookeeper() {
        return;
    }
    let _turn = common::ensemble_turn().await;
    let created = Duration::from_secs(2);
    let cluster = TestingCluster::builder()
        .servers(3)
        .tick_time(TICK)
        .max_session_timeout(FIRST)
        .server_session_timeouts(0, Duration::from_millis(400), created)
        .server_session_timeouts(1, Duration::from_secs(6), FIRST)
        .start()
        .await
        .unwrap();
    let p0 = FaultProxy::start(&[cluster.server_connect_string(0).unwrap().to_owned()])
        .await
        .unwrap();
    let p1 = FaultProxy::start(&[cluster.server_connect_string(1).unwrap().to_owned()])
        .await
        .unwrap();
    // Server 1 refuses A for now, so that A's session is created on server 0.
    p1.cut();
    let sa = Session::builder(format!("{},{}", p0.connect_string(), p1.connect_string()))
        .session_timeout(Duration::from_secs(6))
        .server_tick_time(TICK)
        .connection_timeout(Duration::from_secs(20))
        .connect()
        .await
        .unwrap();
    assert_eq!(sa.negotiated_timeout(), Some(created));
    let path = unique_path("creation-timeout");
    let a = LeaderLatch::builder(&sa, &path)
        .id("a")
        .error_policy(ErrorPolicy::SessionExpired)
        .start()
        .await
        .unwrap();
    within(BOUND, "A to lead", a.await_leadership())
        .await
        .unwrap();
    let leader = cluster.wait_for_leader(BOUND).await.unwrap();
    let b_server = (0..3).find(|i| *i != leader).unwrap_or(2);
    let sb = session(
        cluster.server_connect_string(b_server).unwrap(),
        Duration::from_secs(10),
    )
    .await;
    let b = LeaderLatch::builder(&sb, &path)
        .id("b")
        .start()
        .await
        .unwrap();
    b.wait_joined(BOUND).await.unwrap();

    // The move: server 0 goes away for A, server 1 takes it, and a touch sent there is proven.
    p1.heal();
    p0.cut();
    eventually(BOUND, "A's session to move to server 1", || async {
        sa.client().ok()?.check_stat("/").await.ok().map(|_| ())
    })
    .await;
    let moved = sa.clock().now();
    // The deadline is the proven touch's send time plus 2 s minus the margin (100 ms): past
    // `moved` + 1.9 s only once a touch sent after the move is proven.
    eventually(BOUND, "a touch sent on server 1 to be proven", || async {
        (sa.safe_until().saturating_duration_since(moved) > created * 19 / 20).then_some(())
    })
    .await;
    let a_term = within(BOUND, "A to lead", a.await_leadership())
        .await
        .unwrap();
    let ahead = sa.safe_until().saturating_duration_since(sa.clock().now());
    let counted = sa.negotiated_timeout();

    // A cut off, the quorum leader killed: the next leader re-arms A's session with 2 s.
    p1.cut();
    let cut_at = sb.clock().now();
    cluster.kill_server(leader).await.unwrap();
    let b_term = within(
        FIRST + BOUND,
        "B to lead once A's session expired",
        b.await_leadership(),
    )
    .await
    .unwrap();
    let a_ended = eventually(BOUND, "A's term to end", || async { a_term.ended_at() }).await;
    let b_began = b_term.started_at();
    let (sign, gap) = if a_ended <= b_began {
        ("before", b_began.saturating_duration_since(a_ended))
    } else {
        ("AFTER", a_ended.saturating_duration_since(b_began))
    };
    eprintln!(
        "creation timeout: the lease counted with {counted:?}, {} ms ahead at the cut; A's term ended {} ms after the cut, {} ms {sign} B's began ({} ms after the cut; quorum leader was server {leader}, B on server {b_server})",
        ms(ahead),
        ms(a_ended.saturating_duration_since(cut_at)),
        ms(gap),
        ms(b_began.saturating_duration_since(cut_at)),
    );
    assert!(
        a_ended <= b_began,
        "A's term ran {} ms into B's",
        ms(a_ended.saturating_duration_since(b_began))
    );
    b.close().await.unwrap();
    drop(a);
}
