//! The managed session against real ZooKeeper servers: Curator's connection states after each
//! fault, the deadline, recovery with a new session, and the protected create.
//!
//! Each fault test prints what it measured (time to Suspended and to Lost after the fault, with
//! the configured timeout) so the figures are visible in `cargo test -- --nocapture`.

use zookeeper_recipes_rigs::fixtures as common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;

use common::{
    BOUND, StateRecorder, children, eventually, ms, own_server, session, shared_server, slack,
    within, zookeeper,
};
use zookeeper_recipes::{ConnectionState, Error, ErrorPolicy, LeaderLatch, Session, TermEnd};
use zookeeper_recipes_testing::{self as testing, TestingCluster};

#[tokio::test]
async fn server_restarted_within_the_timeout_gives_suspended_then_reconnected_same_session() {
    if !zookeeper() {
        return;
    }
    let server = own_server().await;
    let timeout = Duration::from_secs(8);
    let s = session(server.connect_string(), timeout).await;
    let id = s.session_id().unwrap();
    let mut states = StateRecorder::start(&s);

    let stopped = Instant::now();
    server.stop().await.unwrap();
    let (_, suspended_at) = states.expect(ConnectionState::Suspended, BOUND).await;
    server.restart().await.unwrap();
    let (status, reconnected_at) = states.expect(ConnectionState::Reconnected, BOUND).await;

    assert_eq!(
        status.session_id,
        Some(id),
        "the session must survive a restart within its timeout"
    );
    assert!(
        !status.new_session,
        "same session, so recipes keep their nodes"
    );
    assert_eq!(status.epoch, 1);
    assert!(
        !states.drain().contains(&Some(ConnectionState::Lost)),
        "no Lost: {:?}",
        states.states()
    );
    eprintln!(
        "restart within timeout {}ms: Suspended {}ms after stop, Reconnected {}ms after stop",
        ms(timeout),
        ms(suspended_at - stopped),
        ms(reconnected_at - stopped)
    );
}

/// The only server down for longer than the timeout, then back: the session is `Suspended`
/// (its terms end by the deadline), never `Lost` while no server can say whether it expired
/// (zookeeper-client gives up on it by itself after 7/5 of the timeout, and the session resumes
/// it with a new client), and when the server is back, which restores its sessions from its
/// data and gives each a fresh timeout, the same session is resumed: `Reconnected`, not a new
/// session. Fault: a server killed and restarted.
#[tokio::test]
async fn server_down_past_the_timeout_gives_suspended_and_the_same_session_back_once_it_returns() {
    if !zookeeper() {
        return;
    }
    let server = own_server().await;
    let timeout = Duration::from_secs(2);
    let s = session(server.connect_string(), timeout).await;
    let first_id = s.session_id().unwrap();
    let mut states = StateRecorder::start(&s);

    server.kill().await.unwrap();
    let killed = Instant::now();
    let (_, suspended_at) = states.expect(ConnectionState::Suspended, BOUND).await;
    // Well past the client's own 7/5 of the timeout.
    tokio::time::sleep(timeout * 2).await;
    server.restart().await.unwrap();
    let (status, back_at) = states.expect(ConnectionState::Reconnected, BOUND).await;
    let seen = states.states();
    eprintln!(
        "server down, timeout {}ms: Suspended {}ms after kill, back {}ms after kill; states {seen:?}",
        ms(timeout),
        ms(suspended_at - killed),
        ms(back_at - killed),
    );
    assert!(
        !seen.contains(&Some(ConnectionState::Lost)),
        "nothing said the session expired: {seen:?}"
    );
    assert!(!status.new_session, "the session was resumed, not replaced");
    assert_eq!(status.session_id, Some(first_id));
    assert_eq!(s.session_id(), Some(first_id));
    s.client().unwrap().check_stat("/").await.unwrap();
}

/// Found by the fault trials (seed 2000: the quorum was lost for some ten seconds, and the first
/// leader came 6 s after the heal, beyond session timeout + 2 s): the pause between attempts to
/// start (now: resume) a session doubled up to the connection timeout (15 s by default), so a
/// session that had failed through a long outage could sleep for seconds after the servers were
/// back.
#[tokio::test]
async fn the_session_comes_back_soon_after_the_servers_return_from_a_long_outage() {
    if !zookeeper() {
        return;
    }
    let server = own_server().await;
    let s = Session::builder(server.connect_string())
        .session_timeout(Duration::from_secs(2))
        .connection_timeout(Duration::from_secs(15))
        .connect()
        .await
        .unwrap();
    let mut states = StateRecorder::start(&s);
    server.kill().await.unwrap();
    let (_, down_at) = states.expect(ConnectionState::Suspended, BOUND).await;
    // The outage: every attempt to resume the session fails. Long enough that pauses doubling
    // from 100 ms would have reached seconds by now: the server comes back some 21 s later, in
    // what would be a 6.4 s pause.
    tokio::time::sleep_until((down_at + Duration::from_millis(21_000)).into()).await;
    server.restart().await.unwrap();
    let serving = Instant::now();
    let (status, at) = states.expect(ConnectionState::Reconnected, BOUND).await;
    let took = at.saturating_duration_since(serving);
    eprintln!(
        "after a {}ms outage: the session back {}ms after the server served again (new session: {})",
        ms(serving - down_at),
        ms(took),
        status.new_session
    );
    // What it may take: the pause between attempts (at most 1 s, whatever the outage), the
    // server's "expired" asked again two server ticks later before it is believed (the assumed
    // tick, T/3 here: see `doubt` and `second_ask_after` in the supervisor; it was one tick
    // until the second ask moved past a stale quorum leader's window), and three exchanges with
    // a JVM that has just started (resume, resume again, a new session): 1.5 s for them on a
    // loaded machine. Pauses doubling from 100 ms would have been at 6.4 s.
    let promised =
        Duration::from_secs(1) + Duration::from_secs(2) * 2 / 3 + Duration::from_millis(1500);
    assert!(
        took <= slack(promised),
        "the session came back {}ms after the server was back (promised {}ms): the pause between attempts must stay short",
        ms(took),
        ms(promised)
    );
}

#[tokio::test]
async fn expired_session_gives_lost_then_a_new_session() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    // The session reaches the server through a proxy so that it can be kept away while a twin
    // connection takes its session over and closes it: left connected, zookeeper-client
    // reconnects at once and takes the session back before the twin can close it.
    let proxy = common::proxy_to(server).await;
    let s = session(&proxy.connect_string(), Duration::from_secs(4)).await;
    let first = s.client().unwrap().session().clone();
    let mut states = StateRecorder::start(&s);

    let expired = Instant::now();
    common::expire_behind(server, &proxy, &s).await;
    let (lost, lost_at) = states.expect(ConnectionState::Lost, BOUND).await;
    let (status, reconnected_at) = states.expect(ConnectionState::Reconnected, BOUND).await;
    eprintln!(
        "expired from outside (timeout 4000ms): Lost {}ms, new session {}ms after the expiry",
        ms(lost_at - expired),
        ms(reconnected_at - expired)
    );
    assert!(
        lost_at - expired < Duration::from_secs(3),
        "Lost must come from the server's answer, not from the deadline"
    );
    assert_eq!(lost.epoch, 1);
    assert!(status.new_session);
    assert_ne!(status.session_id, Some(first.id().0));
    // The new session works.
    s.client().unwrap().check_stat("/").await.unwrap();
}

#[tokio::test]
async fn blackhole_gives_suspended_no_later_than_safe_until_and_lost_once_the_server_says_so() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let proxy = common::proxy_to(server).await;
    let timeout = Duration::from_secs(2);
    let s = session(&proxy.connect_string(), timeout).await;
    let first_id = s.session_id().unwrap();
    let mut states = StateRecorder::start(&s);

    proxy.blackhole();
    let holed = Instant::now();
    let holed_boot = s.clock().now();
    let safe_until = s.safe_until();
    let (_, suspended_at) = states.expect(ConnectionState::Suspended, BOUND).await;
    let suspended_boot = holed_boot + (suspended_at - holed);
    // Past the server's timeout: it expires the session, but nothing can tell us until the link
    // heals; then the server says so.
    tokio::time::sleep(timeout * 2).await;
    assert!(
        !states.drain().contains(&Some(ConnectionState::Lost)),
        "Lost before any server said the session expired"
    );
    proxy.heal();
    let (_, lost_at) = states.expect(ConnectionState::Lost, BOUND).await;
    eprintln!(
        "blackhole, timeout {}ms: Suspended {}ms after the partition (safe_until was {}ms after it), Lost {}ms after it, once healed",
        ms(timeout),
        ms(suspended_at - holed),
        ms(safe_until.saturating_duration_since(holed_boot)),
        ms(lost_at - holed),
    );
    // Nothing was answered after the partition, so the deadline cannot have moved: Suspended
    // (every term ends) is due at safe_until at the latest (scheduling may add a little).
    assert!(
        suspended_boot <= safe_until + Duration::from_millis(150),
        "Suspended came {}ms after safe_until",
        ms(suspended_boot.saturating_duration_since(safe_until))
    );
    assert!(suspended_at < lost_at);

    let (status, _) = states.expect(ConnectionState::Reconnected, BOUND).await;
    assert!(status.new_session);
    assert_ne!(status.session_id, Some(first_id));
}

/// Milliseconds since the epoch, comparable with a node's `ctime` on the same machine.
fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test]
async fn connection_cut_during_a_protected_create_leaves_exactly_one_node_owned_by_the_session() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let proxy = common::proxy_to(server).await;
    let s = session(&proxy.connect_string(), Duration::from_secs(8)).await;
    let observer = session(server.connect_string(), Duration::from_secs(8)).await;
    let path = testing::unique_path("cut-during-create");
    // Make the parent exist so that the create is a single request.
    observer
        .client()
        .unwrap()
        .mkdir(
            &path,
            &zookeeper_client::CreateMode::Persistent
                .with_acls(zookeeper_client::Acls::anyone_all()),
        )
        .await
        .unwrap();

    // Requests reach the server at once, replies wait 6 s in the proxy (time to see the node even
    // on a loaded machine: 2 s were not, with the Docker backend beside another suite). Cutting
    // as soon as the server has the node (another session sees it) loses the reply of a create
    // that the server has applied; the heal ends the delay.
    proxy.delay_replies(Duration::from_secs(6));
    let latch = LeaderLatch::builder(&s, &path)
        .id("cut")
        .start()
        .await
        .unwrap();
    eventually(BOUND, "the server to apply the create", || async {
        (!children(&observer, &path).await.is_empty()).then_some(())
    })
    .await;
    // The server answers the create as it applies it, but on a loaded machine the proxy may read
    // that reply a moment after another session sees the node: wait for the proxy to hold it.
    proxy
        .wait_held_replies(1, BOUND)
        .await
        .expect("the create's reply held in the proxy by the 6 s delay");
    let cut_ms = wall_ms();
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.heal();

    let term = within(
        BOUND,
        "the latch to lead after the cut",
        latch.await_leadership(),
    )
    .await
    .unwrap();
    let kids = children(&observer, &path).await;
    assert_eq!(
        kids.len(),
        1,
        "exactly one node after a lost create reply: {kids:?}"
    );
    let node = format!("{path}/{}", kids[0]);
    let stat = observer
        .client()
        .unwrap()
        .check_stat(&node)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stat.ephemeral_owner,
        s.session_id().unwrap(),
        "the node must belong to the current session"
    );
    assert_eq!(term.path(), node);
    assert!(
        stat.ctime < cut_ms,
        "the node was created before the cut ({} < {cut_ms}), so the latch adopted it instead of creating another",
        stat.ctime
    );
    latch.close().await.unwrap();
    assert!(children(&observer, &path).await.is_empty());
}

#[tokio::test]
async fn closing_during_a_create_leaves_no_node() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let proxy = common::proxy_to(server).await;
    let s = session(&proxy.connect_string(), Duration::from_secs(8)).await;
    let observer = session(server.connect_string(), Duration::from_secs(8)).await;
    let path = testing::unique_path("close-during-create");

    // The create is held in the proxy when close is called.
    proxy.delay(Duration::from_millis(300));
    let latch = LeaderLatch::builder(&s, &path)
        .id("closing")
        .start()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    within(BOUND, "close to finish", latch.close())
        .await
        .unwrap();
    assert!(
        children(&observer, &path).await.is_empty(),
        "close returned with a node left behind"
    );

    // Dropping instead of closing: the cleanup runs in the background.
    let latch = LeaderLatch::builder(&s, &path)
        .id("dropped")
        .start()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(latch);
    // A node may appear (the create lands) and must then go.
    eventually(
        BOUND,
        "no node left after dropping a latch mid-create",
        || async {
            tokio::time::sleep(Duration::from_millis(700)).await;
            children(&observer, &path).await.is_empty().then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn killing_the_quorum_leader_gives_at_most_suspended_then_reconnected() {
    if !zookeeper() {
        return;
    }
    let _turn = common::ensemble_turn().await;
    let cluster = TestingCluster::start(3).await.unwrap();
    let s = session(cluster.connect_string(), Duration::from_secs(10)).await;
    let id = s.session_id().unwrap();
    let mut states = StateRecorder::start(&s);
    let leader = cluster.wait_for_leader(BOUND).await.unwrap();

    let killed = Instant::now();
    cluster.kill_server(leader).await.unwrap();
    let new_leader = within(BOUND * 2, "a new quorum leader", async {
        loop {
            if let Ok(Some(i)) = cluster.leader_index().await
                && i != leader
            {
                return i;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    // The client is on the dead leader or on a follower that dropped its clients while the
    // ensemble re-elected; either way it must come back with the same session.
    let saw_suspended = within(BOUND, "the session to be connected again", async {
        let mut rx = s.watch_status();
        let st = rx
            .wait_for(|st| st.state.is_some_and(ConnectionState::is_connected) && st.epoch == 1)
            .await
            .map(|st| st.clone());
        st.unwrap()
    })
    .await;
    // Give a pending Suspended/Reconnected pair the chance to be recorded.
    s.client().unwrap().check_stat("/").await.unwrap();
    let seen = states.drain();
    eprintln!(
        "quorum leader {leader} killed, new leader {new_leader} after {}ms; client saw {seen:?}",
        ms(killed.elapsed())
    );
    assert_eq!(saw_suspended.session_id, Some(id));
    assert!(
        !seen.contains(&Some(ConnectionState::Lost)),
        "killing one of three servers must not lose the session: {seen:?}"
    );
    assert_eq!(s.session_id(), Some(id));
}

#[tokio::test]
async fn bad_input_gives_typed_errors_never_a_panic() {
    let rt_check = |r: Result<Session, Error>| r.err();
    for bad in [
        "", "  ", "host:", ":2181", "a:1,,b:2", "a:70000", "a:1/rel/",
    ] {
        assert!(
            matches!(
                rt_check(Session::builder(bad).start()),
                Some(Error::InvalidConnectString { .. })
            ),
            "{bad:?}"
        );
    }
    assert!(matches!(
        rt_check(
            Session::builder("127.0.0.1:1")
                .session_timeout(Duration::ZERO)
                .start()
        ),
        Some(Error::InvalidArgument {
            what: "session timeout",
            ..
        })
    ));
    assert!(matches!(
        rt_check(Session::builder("127.0.0.1:1").chroot("relative").start()),
        Some(Error::InvalidPath { .. })
    ));
    // A session to nowhere is fine to build; recipes on it reject bad paths and ids up front.
    let s = Session::builder("127.0.0.1:1").start().unwrap();
    assert!(matches!(
        LeaderLatch::builder(&s, "election/x").start().await,
        Err(Error::InvalidPath { .. })
    ));
    assert!(matches!(
        LeaderLatch::builder(&s, "/election/x/").start().await,
        Err(Error::InvalidPath { .. })
    ));
    assert!(matches!(
        LeaderLatch::builder(&s, "/x").id("").start().await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        zookeeper_recipes::InterProcessMutex::builder(&s, "locks").build(),
        Err(Error::InvalidPath { .. })
    ));
    assert!(matches!(
        zookeeper_recipes::LeaderSelector::builder(&s, "/x")
            .id("")
            .start(|_t: zookeeper_recipes::Leadership| async { Ok::<(), std::io::Error>(()) })
            .await,
        Err(Error::InvalidArgument { .. })
    ));
    // Waiting for a connection that cannot come is bounded and typed.
    assert!(matches!(
        s.wait_connected(Duration::from_millis(200)).await,
        Err(Error::Timeout(_))
    ));
    s.close().await.unwrap();
}

// Multi-threaded: the session's task publishes on another worker while this test subscribes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_changes_begin_after_the_state_already_visible() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    // Many times, because the old behaviour (the first Connected delivered to a stream made just
    // after connect returned) was a race between the status watch and the event channel.
    for _ in 0..20 {
        let s = session(server.connect_string(), Duration::from_secs(10)).await;
        let mut changes = Box::pin(s.state_changes());
        s.close().await.unwrap();
        let first = within(BOUND, "the close to be reported", changes.next())
            .await
            .expect("the stream ended without reporting the close");
        assert!(
            first.closed,
            "the first change after subscribing must be the close, not {first:?}"
        );
    }
}

/// A lapsed lease ends the terms on the session, not the session. The link is blackholed past
/// the lease, then healed well inside the server's timeout: the term ended by its deadline, the
/// session reported `Suspended` and never `Lost`, it is the same ZooKeeper session afterwards,
/// and the latch leads again on the node it had, with the same token (the node was first and
/// existed throughout, so nobody can have led in between). Before this, the session was
/// reported `Lost`, closed on the servers through a twin and replaced: the latch came back on a
/// new node, with a new token. Fault: a client link blackholed for a while.
#[tokio::test]
async fn a_lapsed_lease_ends_the_term_but_keeps_the_session_and_the_latch_leads_again_on_its_node()
{
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let proxy = common::proxy_to(server).await;
    let timeout = Duration::from_secs(6);
    // A wide margin: the lease lapses 2 s before the server could expire the session, time
    // enough to heal on a loaded machine.
    let s = Session::builder(proxy.connect_string())
        .session_timeout(timeout)
        .server_tick_time(Duration::from_millis(200))
        .lease_margin(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let path = testing::unique_path("lapsed");
    let latch = LeaderLatch::builder(&s, &path)
        .id("a")
        .error_policy(ErrorPolicy::SessionExpired)
        .start()
        .await
        .unwrap();
    let first = within(BOUND, "the first term", latch.await_leadership())
        .await
        .unwrap();
    let old_id = s.session_id().unwrap();
    let mut states = StateRecorder::start(&s);
    // Past the lease the session started with: a heartbeat has been proven to reach the quorum.
    let initial = s.safe_until();
    eventually(BOUND, "the lease to advance past its start", || async {
        (s.safe_until() > initial).then_some(())
    })
    .await;

    proxy.blackhole();
    let holed = Instant::now();
    within(BOUND, "the term to end by its deadline", first.ended()).await;
    let ended = holed.elapsed();
    assert_eq!(first.end_reason(), Some(TermEnd::DeadlinePassed));
    // Heal well inside the server's timeout: the session is still alive there.
    assert!(
        ended < timeout - Duration::from_millis(1500),
        "the term ended {}ms after the blackhole: too late for this test's premise",
        ms(ended)
    );
    proxy.heal();

    let second = within(BOUND, "a term again", latch.await_leadership())
        .await
        .unwrap();
    let states_seen = states.drain();
    eprintln!(
        "lapsed lease: the term ended {}ms after the blackhole (timeout {}ms); states {:?}; again on {} with token {} (was {})",
        ms(ended),
        ms(timeout),
        states_seen,
        second.path(),
        second.token(),
        first.token()
    );
    assert!(
        !states_seen.contains(&Some(ConnectionState::Lost)),
        "a lapsed lease must not lose the session: {states_seen:?}"
    );
    assert!(states_seen.contains(&Some(ConnectionState::Suspended)));
    assert_eq!(s.session_id(), Some(old_id), "the session was replaced");
    assert_eq!(second.session_id(), old_id);
    assert_eq!(second.path(), first.path(), "the latch left its node");
    assert_eq!(second.token(), first.token(), "same node, same token");
    assert_eq!(s.status().epoch, 1);
    latch.close().await.unwrap();
}

/// A session that starts on a read-only server (its ensemble has lost its quorum) and later
/// reaches a writable one: the client then opens a brand-new ZooKeeper session. The managed
/// session must treat that as a new session (new epoch, new id), so that a latch's node belongs
/// to the session it believes it has; otherwise the latch sees its own node as someone else's,
/// forgets it without deleting it and queues behind itself. Fault: two of three servers down,
/// then back.
///
/// Ignored: zookeeper-client 0.11 cannot establish a session on a ZooKeeper 3.8 read-only
/// server at all (every attempt ends "unable to unmarshal ConnectResponse due to insufficient
/// buf"), so the upgrade cannot be reached with these parts today; the session handles it
/// anyway (`serve` ends a session whose client changed its session id). Run it with
/// `--ignored` against a client that connects.
#[tokio::test]
#[ignore = "zookeeper-client 0.11 cannot connect to a ZooKeeper 3.8 read-only server"]
async fn a_session_that_moves_from_a_read_only_server_to_a_writable_one_is_a_new_session() {
    if !zookeeper() {
        return;
    }
    let _turn = common::ensemble_turn().await;
    let cluster = TestingCluster::builder()
        .read_only_mode(true)
        .start()
        .await
        .unwrap();
    cluster.stop_server(1).await.unwrap();
    cluster.stop_server(2).await.unwrap();
    eventually(
        Duration::from_secs(30),
        "server 0 to serve read-only",
        || async {
            matches!(cluster.mode(0).await, Ok(testing::ServerMode::ReadOnly)).then_some(())
        },
    )
    .await;
    let s = Session::builder(cluster.server_connect_string(0).unwrap())
        .session_timeout(Duration::from_secs(4))
        .server_tick_time(cluster.tick_time())
        .can_be_read_only(true)
        .connect()
        .await
        .unwrap();
    assert_eq!(s.state(), Some(ConnectionState::ReadOnly));
    let read_only_epoch = s.status().epoch;
    let mut states = StateRecorder::start(&s);
    let path = testing::unique_path("read-only-upgrade");
    let latch = LeaderLatch::builder(&s, &path)
        .id("a")
        .start()
        .await
        .unwrap();

    let (r1, r2) = tokio::join!(cluster.restart_server(1), cluster.restart_server(2));
    r1.unwrap();
    r2.unwrap();
    let term = within(
        BOUND,
        "the latch to lead on a writable server",
        latch.await_leadership(),
    )
    .await
    .unwrap();
    let status = s.status();
    assert!(
        status.epoch > read_only_epoch,
        "the move off the read-only server must count as a new session: {status:?}"
    );
    assert_eq!(Some(term.session_id()), s.session_id());
    // The lease is proven twice over on the new session; the term is still the same one, on the
    // only node under the path, owned by the session the latch believes it has.
    let proven = s.safe_until();
    eventually(BOUND, "the new session's lease to advance", || async {
        (s.safe_until() > proven).then_some(())
    })
    .await;
    assert!(!term.has_ended(), "the term ended: {:?}", term.end_reason());
    let client = s.client().unwrap();
    let kids = client.list_children(&path).await.unwrap();
    assert_eq!(kids.len(), 1, "one node under the path: {kids:?}");
    let stat = client
        .check_stat(&format!("{path}/{}", kids[0]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(Some(stat.ephemeral_owner), s.session_id());
    let seen = states.drain();
    eprintln!(
        "read-only upgrade: states {seen:?}, term {} on epoch {}",
        term.token(),
        status.epoch
    );
    latch.close().await.unwrap();
}

/// A protected create whose reply is lost, retried after the session moved to another follower
/// that the leader's bytes had stopped reaching: exactly one node, adopted. Faults: the leader's
/// bytes to one follower held, the client's link to the other follower cut while the create's
/// reply is on its way.
///
/// Meant to show a lagging follower hiding the first attempt's node (the retry syncs before it
/// lists for that reason), but it cannot: the session's move to that follower completes only
/// when the leader has revalidated the session, and the leader's answer travels behind the
/// create's commit on the same link, so the follower has the node by then. It passes with and
/// without the `sync`; it stays as the ensemble case of the lost-reply rule.
#[tokio::test]
async fn a_create_whose_reply_is_lost_is_adopted_after_the_session_moves_to_another_follower() {
    if !zookeeper() {
        return;
    }
    // A follower that lags keeps serving for syncLimit x tick = 6 s: time for the retry.
    let _turn = common::ensemble_turn().await;
    let cluster = TestingCluster::builder()
        .sync_limit(30)
        .start()
        .await
        .unwrap();
    let leader = cluster.wait_for_leader(BOUND).await.unwrap();
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let mut proxies = Vec::new();
    for f in &followers {
        let upstream = cluster.server_connect_string(*f).unwrap().to_owned();
        proxies.push(testing::FaultProxy::start(&[upstream]).await.unwrap());
    }
    let observer = session(cluster.server_connect_string(leader).unwrap(), BOUND).await;
    let path = testing::unique_path("lagging-retry");
    observer
        .client()
        .unwrap()
        .mkdir(
            &path,
            &zookeeper_client::CreateMode::Persistent
                .with_acls(zookeeper_client::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let connect = format!(
        "{},{}",
        proxies[0].connect_string(),
        proxies[1].connect_string()
    );
    let s = Session::builder(connect)
        .session_timeout(Duration::from_secs(10))
        .server_tick_time(cluster.tick_time())
        .connect()
        .await
        .unwrap();
    // `a`: the follower the session is on; `b`: the other, which is about to lag.
    let a = (0..2)
        .find(|i| proxies[*i].connection_count() > 0)
        .expect("the session is on neither follower's proxy");
    let b = 1 - a;
    // b has everything up to now (the parent included) before it starts to lag.
    let on_b = session(cluster.server_connect_string(followers[b]).unwrap(), BOUND).await;
    let b_client = on_b.client().unwrap();
    b_client.sync(&path).await.unwrap();
    assert!(b_client.check_stat(&path).await.unwrap().is_some());
    cluster.cut_one_way(leader, followers[b]).unwrap();

    // The create reaches a and the leader; its reply waits in a's proxy, which is then cut for
    // good: the session moves to b, which has not seen the create.
    proxies[a].delay_replies(Duration::from_secs(2));
    let latch = LeaderLatch::builder(&s, &path)
        .id("a")
        .start()
        .await
        .unwrap();
    eventually(BOUND, "the quorum to apply the create", || async {
        (!children(&observer, &path).await.is_empty()).then_some(())
    })
    .await;
    assert!(
        proxies[a].held_replies() > 0,
        "the create's reply passed before the cut: the 6 s delay did not hold it"
    );
    proxies[a].cut();
    eventually(
        BOUND,
        "the session to reach the lagging follower",
        || async { (proxies[b].connection_count() > 0).then_some(()) },
    )
    .await;
    // Let the retry run against b while it lags, then let b catch up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.heal();
    let term = within(BOUND, "the latch to lead", latch.await_leadership())
        .await
        .unwrap();
    let kids = children(&observer, &path).await;
    assert_eq!(kids.len(), 1, "one node for one create: {kids:?}");
    assert_eq!(term.path(), format!("{path}/{}", kids[0]));
    latch.close().await.unwrap();
}

/// A deliberate `close()` is not a loss: the last change has `ConnectionState::Closed` (and
/// `closed`), never `Lost`, so an alert on Lost does not fire on a clean shutdown; a latch on the
/// session still ends its term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deliberate_close_reports_closed_never_lost() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("close-is-not-lost");
    let latch = LeaderLatch::builder(&s, &path)
        .id("a")
        .start()
        .await
        .unwrap();
    let term = within(BOUND, "the latch to lead", latch.await_leadership())
        .await
        .unwrap();
    // Unpin: `.next()` works without pinning.
    let mut changes = s.state_changes();
    s.close().await.unwrap();
    let mut seen = Vec::new();
    within(BOUND, "the state stream to end after the close", async {
        while let Some(status) = changes.next().await {
            seen.push(status);
        }
    })
    .await;
    let last = seen.last().expect("the close was not reported");
    assert!(last.closed, "{seen:?}");
    assert_eq!(last.state, Some(ConnectionState::Closed), "{seen:?}");
    assert!(
        seen.iter().all(|s| s.state != Some(ConnectionState::Lost)),
        "a deliberate close must not report Lost: {seen:?}"
    );
    assert_eq!(s.state(), Some(ConnectionState::Closed));
    within(
        BOUND,
        "the latch's term to end with the session",
        term.cancelled(),
    )
    .await;
    latch.close().await.unwrap();
}

/// A port where nothing listens: `connect` fails with a message that says "connection refused"
/// (not a bare timeout), and a started session keeps trying, round after round, with a bounded
/// backoff, until something listens.
#[tokio::test]
async fn a_refused_connection_says_connection_refused_and_is_retried() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let err = Session::builder(&addr)
        .connection_timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect_err("a session to a port where nothing listens cannot connect");
    assert!(
        matches!(&err, Error::Unreachable { reason } if reason.contains("connection refused")),
        "{err}"
    );
    assert!(err.to_string().contains("connection refused"), "{err}");

    // Retried: once something listens, attempts arrive again and again (each is dropped, so no
    // session is ever established).
    let s = Session::builder(&addr).start().unwrap();
    let listener = tokio::net::TcpListener::bind(&addr).await.unwrap();
    within(
        BOUND,
        "three connection attempts after the refusals",
        async {
            for _ in 0..3 {
                let (conn, _) = listener.accept().await.unwrap();
                drop(conn);
            }
        },
    )
    .await;
    assert_eq!(s.state(), None, "no session can have been established");
    s.close().await.unwrap();
}

/// The last operation the server saw on each connection, by session id, from `cons`.
async fn last_ops(server: &testing::TestingServer) -> std::collections::HashMap<i64, String> {
    let cons = server.four_letter_word("cons").await.unwrap();
    cons.lines()
        .filter_map(|line| {
            let field = |name: &str| {
                line.split([',', '(', ')'])
                    .find_map(|f| f.trim().strip_prefix(name).map(str::to_owned))
            };
            let sid = i64::from_str_radix(field("sid=0x")?.as_str(), 16).ok()?;
            Some((sid, field("lop=")?))
        })
        .collect()
}

/// The lease only where a term may need it (issue 26): a session whose only candidate waits
/// further back than second in line sends no `sync` (its own touches, an `exists` its server
/// answers by itself, keep it alive, as a Curator client's pings do, and cost the quorum leader
/// nothing); the leader's session and the first
/// two in line prove theirs all along. When the three ahead leave, the one from the back still
/// leads on a proven lease. Faults: none (the steady state, then a triple handover).
#[tokio::test]
async fn only_the_leader_and_the_first_two_in_line_prove_their_lease_and_the_rest_only_ping() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let timeout = Duration::from_secs(2);
    let path = testing::unique_path("lease-where-needed");
    let ss = common::sessions(server.connect_string(), 4, timeout).await;
    let leader = common::latch(&ss[0], &path, "leader").await;
    within(BOUND, "the first leader", leader.await_leadership())
        .await
        .unwrap();
    let next = common::latch(&ss[1], &path, "next").await;
    let second = common::latch(&ss[2], &path, "second").await;
    let back = common::latch(&ss[3], &path, "back").await;
    let ids: Vec<i64> = ss.iter().map(|s| s.session_id().unwrap()).collect();
    // Over a whole session timeout: eight heartbeats of a session that proves its lease.
    let mut synced = [false; 4];
    let window = Instant::now();
    while window.elapsed() < timeout {
        let ops = last_ops(server).await;
        for (i, id) in ids.iter().enumerate() {
            synced[i] |= ops.get(id).is_some_and(|op| op == "SYNC");
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    assert!(synced[0], "the leader's session must prove its lease");
    assert!(synced[1], "the next in line must keep its lease proven");
    assert!(synced[2], "the second in line must keep its lease proven");
    assert!(
        !synced[3],
        "a session whose candidate waits behind the second in line sent a sync"
    );
    leader.close().await.unwrap();
    next.close().await.unwrap();
    second.close().await.unwrap();
    let term = within(
        BOUND,
        "the candidate from the back to lead",
        back.await_leadership(),
    )
    .await
    .unwrap();
    assert!(
        term.is_valid(),
        "a term must begin on a proven lease: {:?}",
        term.end_reason()
    );
    assert!(ss[3].safe_until() > ss[3].clock().now());
    back.close().await.unwrap();
}
