//! The claim rule at a handover (recipes/leader-latch.md, "Claiming without a listing"): a
//! waiter whose predecessor was first in its last listing leads on that predecessor's deletion
//! event with no request, and lists first in every case where the event alone does not prove it
//! first. Each test names the case; a real ZooKeeper server, faults between one client and the
//! server (a proxy that holds back requests, or cuts the connection), and other clients deleting
//! or rewriting nodes in one transaction.

use zookeeper_recipes_rigs::fixtures as common;

use std::time::Duration;

use common::{
    BOUND, Recording, eventually, latch, proxy_to, session, shared_server, within, zookeeper,
};
use zookeeper_recipes::{InterProcessMutex, LatchEvent, LeaderLatch, Session};
use zookeeper_recipes_testing::{self as testing, TestingServer};

const TIMEOUT: Duration = Duration::from_secs(10);

/// The paths that session `session_id` watches, from the server's `wchc`.
async fn watched_by(server: &TestingServer, session_id: i64) -> Vec<String> {
    let wchc = server.four_letter_word("wchc").await.unwrap();
    let id = format!("0x{session_id:x}");
    let mut out = Vec::new();
    let mut ours = false;
    for line in wchc.lines() {
        if line.starts_with("0x") {
            ours = line.trim() == id;
        } else if ours && !line.trim().is_empty() {
            out.push(line.trim().to_owned());
        }
    }
    out
}

/// Waits until `session` watches every path in `paths` (its node and its predecessor's).
async fn until_watching(server: &TestingServer, session: &Session, paths: &[&str], what: &str) {
    let id = session.session_id().unwrap();
    eventually(BOUND, what, || async {
        let watched = watched_by(server, id).await;
        paths
            .iter()
            .all(|p| watched.iter().any(|w| w == p))
            .then_some(())
    })
    .await;
}

/// A leader `a` and its successor `b` (whose session connects to `b_connect`, a proxy or the
/// server), settled: a leads, and b watches a's node and its own. `admin` is a third session for
/// the test's own writes.
struct Pair {
    sa: Session,
    sb: Session,
    admin: Session,
    a: LeaderLatch,
    b: LeaderLatch,
    /// b's events since it joined.
    b_events: Recording<LatchEvent>,
    a_node: String,
    b_node: String,
}

impl Pair {
    async fn start(server: &TestingServer, b_connect: &str, prefix: &str) -> Pair {
        let sa = session(server.connect_string(), TIMEOUT).await;
        let sb = session(b_connect, TIMEOUT).await;
        let admin = session(server.connect_string(), TIMEOUT).await;
        let path = testing::unique_path(prefix);
        let a = latch(&sa, &path, "a").await;
        within(BOUND, "a to lead", a.await_leadership())
            .await
            .unwrap();
        let b = latch(&sb, &path, "b").await;
        let b_events = Recording::of(b.events());
        let (a_node, b_node) = (a.our_path().unwrap(), b.our_path().unwrap());
        until_watching(
            server,
            &sb,
            &[&a_node, &b_node],
            "b to watch a's node and its own",
        )
        .await;
        Pair {
            sa,
            sb,
            admin,
            a,
            b,
            b_events,
            a_node,
            b_node,
        }
    }

    /// Closes both latches, then the sessions.
    async fn close(self) {
        for l in [self.a, self.b] {
            l.close().await.unwrap();
        }
        for s in [self.admin, self.sb, self.sa] {
            s.close().await.unwrap();
        }
    }
}

/// The sequence number at the end of a node's name (`_c_<uuid>-latch-0000000012`).
fn sequence(node: &str) -> u64 {
    node.rsplit('-').next().unwrap().parse().unwrap()
}

/// The node paths of every term `events` reported so far.
fn term_paths(events: &Recording<LatchEvent>) -> Vec<String> {
    events
        .items()
        .iter()
        .filter_map(|e| match e {
            LatchEvent::Leader(term) => Some(term.path().to_owned()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_latch_whose_requests_are_held_back_still_takes_over_on_the_leaders_deletion() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let proxy = proxy_to(server).await;
    let pair = Pair::start(server, &proxy.connect_string(), "handover-no-request").await;

    // Nothing b sends reaches the server from here on; events still reach b.
    proxy.blackhole_requests();
    pair.a.close().await.unwrap();
    let term = within(
        BOUND,
        "b to lead with its requests held back",
        pair.b.await_leadership(),
    )
    .await
    .unwrap();
    assert_eq!(term.path(), pair.b_node);
    proxy.heal();
    pair.close().await;
}

#[tokio::test]
async fn a_mutex_waiter_whose_requests_are_held_back_still_acquires_on_release() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let proxy = proxy_to(server).await;
    let sa = session(server.connect_string(), TIMEOUT).await;
    let sb = session(&proxy.connect_string(), TIMEOUT).await;
    let path = testing::unique_path("handover-mutex-no-request");
    let ma = InterProcessMutex::builder(&sa, &path)
        .id("a")
        .build()
        .unwrap();
    let mb = InterProcessMutex::builder(&sb, &path)
        .id("b")
        .build()
        .unwrap();
    let held = within(BOUND, "a to acquire", ma.acquire()).await.unwrap();
    let waiter = tokio::spawn(async move {
        let guard = mb.acquire().await;
        (mb, guard)
    });
    let admin = session(server.connect_string(), TIMEOUT).await;
    let b_node = eventually(BOUND, "b to queue", || async {
        common::children(&admin, &path)
            .await
            .into_iter()
            .map(|c| format!("{path}/{c}"))
            .find(|c| *c != held.leadership().path())
    })
    .await;
    until_watching(
        server,
        &sb,
        &[held.leadership().path(), &b_node],
        "b to watch a's node and its own",
    )
    .await;

    proxy.blackhole_requests();
    held.release().await.unwrap();
    let (mb, guard) = within(BOUND, "b to acquire with its requests held back", waiter)
        .await
        .unwrap();
    let guard = guard.unwrap();
    assert_eq!(guard.leadership().path(), b_node);
    proxy.heal();
    guard.release().await.unwrap();
    drop((ma, mb));
    for s in [admin, sb, sa] {
        s.close().await.unwrap();
    }
}

#[tokio::test]
async fn after_a_reconnect_the_successor_lists_before_it_claims() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let proxy = proxy_to(server).await;
    let pair = Pair::start(server, &proxy.connect_string(), "handover-replay").await;

    // While b is cut off (its session lives on), its node goes first, then a's. When b
    // reconnects, the server replays both deletions in the order of b's re-registered watches,
    // not in zxid order: the predecessor's may come first.
    proxy.cut();
    pair.admin
        .client()
        .unwrap()
        .delete(&pair.b_node, None)
        .await
        .unwrap();
    pair.a.close().await.unwrap();
    proxy.heal();

    let term = within(
        BOUND,
        "b to lead with a new node",
        pair.b.await_leadership(),
    )
    .await
    .unwrap();
    assert_ne!(
        term.path(),
        pair.b_node,
        "b led with the node that was deleted while it was away"
    );
    assert_eq!(
        term_paths(&pair.b_events),
        vec![term.path().to_owned()],
        "b had a term before the one on its new node"
    );
    pair.close().await;
}

#[tokio::test]
async fn a_waiter_whose_node_goes_just_before_the_leaders_rejoins_and_its_successor_leads() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let sessions: Vec<Session> =
        futures::future::join_all((0..3).map(|_| session(server.connect_string(), TIMEOUT))).await;
    let admin = session(server.connect_string(), TIMEOUT).await;
    let path = testing::unique_path("handover-waiter-first");
    let a = latch(&sessions[0], &path, "a").await;
    within(BOUND, "a to lead", a.await_leadership())
        .await
        .unwrap();
    let b = latch(&sessions[1], &path, "b").await;
    let c = latch(&sessions[2], &path, "c").await;
    let b_events = Recording::of(b.events());
    let (a_node, b_node, c_node) = (
        a.our_path().unwrap(),
        b.our_path().unwrap(),
        c.our_path().unwrap(),
    );
    until_watching(
        server,
        &sessions[1],
        &[&a_node, &b_node],
        "b to watch a and itself",
    )
    .await;
    until_watching(
        server,
        &sessions[2],
        &[&b_node, &c_node],
        "c to watch b and itself",
    )
    .await;

    // b's node, then a's, in one transaction: b sees its own deletion before its predecessor's.
    {
        // A client handle kept alive would hold the admin session open past its close.
        let raw = admin.client().unwrap();
        let mut both = raw.new_multi_writer();
        both.add_delete(&b_node, None).unwrap();
        both.add_delete(&a_node, None).unwrap();
        both.commit().await.unwrap();
    }

    let term = within(BOUND, "c to lead", c.await_leadership())
        .await
        .unwrap();
    assert_eq!(term.path(), c_node);
    let rejoined = eventually(BOUND, "b to join again behind c", || async {
        b.our_path().filter(|p| *p != b_node)
    })
    .await;
    assert!(
        sequence(&rejoined) > sequence(&c_node),
        "b's new node {rejoined} sorts after c's {c_node}"
    );
    assert!(
        term_paths(&b_events).is_empty(),
        "b led: {:?}",
        term_paths(&b_events)
    );
    assert!(!b.has_leadership() && c.has_leadership());
    for l in [a, b, c] {
        l.close().await.unwrap();
    }
    admin.close().await.unwrap();
    for s in sessions {
        s.close().await.unwrap();
    }
}

#[tokio::test]
async fn a_rewrite_of_the_leaders_node_does_not_elect_its_successor() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let pair = Pair::start(server, server.connect_string(), "handover-rewrite").await;

    // The write fires b's watch on a's node (the server drops it as it fires): b is watching a's
    // node again only once it has looked and found a still there.
    pair.admin
        .client()
        .unwrap()
        .set_data(&pair.a_node, b"rewritten", None)
        .await
        .unwrap();
    until_watching(
        server,
        &pair.sb,
        &[&pair.a_node, &pair.b_node],
        "b to watch a's node again",
    )
    .await;
    assert!(pair.a.has_leadership(), "a lost its term to a rewrite");
    assert!(
        term_paths(&pair.b_events).is_empty(),
        "b led while a's node lived"
    );

    pair.a.close().await.unwrap();
    let term = within(BOUND, "b to lead once a left", pair.b.await_leadership())
        .await
        .unwrap();
    assert_eq!(term.path(), pair.b_node);
    pair.close().await;
}

#[tokio::test]
async fn a_waiter_whose_node_is_rewritten_as_the_leader_leaves_leads_once_on_its_node() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let pair = Pair::start(server, server.connect_string(), "handover-own-rewrite").await;

    // b's own watch fires first and is set again; the predecessor's deletion may arrive while
    // that check is in flight, when the event alone does not prove b's node alive.
    {
        // A client handle kept alive would hold the admin session open past its close.
        let raw = pair.admin.client().unwrap();
        let mut both = raw.new_multi_writer();
        both.add_set_data(&pair.b_node, b"rewritten", None).unwrap();
        both.add_delete(&pair.a_node, None).unwrap();
        both.commit().await.unwrap();
    }

    let term = within(BOUND, "b to lead", pair.b.await_leadership())
        .await
        .unwrap();
    assert_eq!(term.path(), pair.b_node);
    assert_eq!(term_paths(&pair.b_events), vec![pair.b_node.clone()]);
    assert!(pair.b.has_leadership());
    pair.close().await;
}
