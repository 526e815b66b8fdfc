//! Rust recipes and real Apache Curator 5.4 participants on the same paths.
//!
//! Every test runs Curator's own `LeaderLatch`, `LeaderSelector` or `InterProcessMutex` in a JVM
//! (`rigs/java/CuratorPeer.java`, driven by `common::curator`) next to this crate's, on one
//! ZooKeeper server: the election order, the participant lists, handovers in both directions,
//! replacement of a killed candidate of either side, selector terms that never overlap, and a
//! lock that serves both sides in request order. Without Java or the Curator jars the tests skip
//! (and fail under `CI=true`).
//!
//! Each test runs twice, over plaintext (its name) and over mutual TLS (`<name>_over_mtls`,
//! issue 42): on a TLS-only server with `ssl.clientAuth=need`, the Rust sessions and the Curator
//! JVMs (`zookeeper.client.secure`, the Netty socket and `PEM` stores: see
//! `fixtures::curator::spawn_with`) present the same client certificate, as two replicas of
//! one service would.

use zookeeper_recipes_rigs::fixtures as common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::curator::{CuratorPeer, event_ts, parse_participants};
use common::transport::{Secured, Transport};
use common::{BOUND, children, eventually, ms, within};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use zookeeper_recipes::{
    FencingToken, InterProcessMutex, LatchEvent, LeaderLatch, LeaderObserver, LeaderSelector,
    LeaderSelectorListener, Leadership, Participant, Session, participants_on,
};
use zookeeper_recipes_testing as testing;

/// Session timeout of the Rust sessions and Curator peers of tests that do not expire sessions.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long something that must not happen is given to happen anyway.
const WINDOW: Duration = Duration::from_millis(400);

/// Wall-clock milliseconds, the clock of the peer's `ts=`.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Gives something that must not happen the chance to happen anyway (an absence check needs a
/// window; every positive wait in this file is on an event).
async fn window() {
    tokio::time::sleep(WINDOW).await;
}

/// Whether the interop tests can run (ZooKeeper, Java and Curator are there), and the server
/// of `transport` (plaintext or mutual TLS) they meet on.
async fn net(transport: Transport) -> Option<&'static Secured> {
    if !common::zookeeper() || !common::curator::require_java() {
        return None;
    }
    Some(Secured::shared(transport).await)
}

/// A Curator peer that reaches `net` as the Rust sessions do.
async fn peer(net: &Secured, timeout: Duration) -> CuratorPeer {
    CuratorPeer::spawn_with(net.connect_string(), timeout, net.peer_tls().as_ref()).await
}

async fn peers(net: &Secured, n: usize, timeout: Duration) -> Vec<CuratorPeer> {
    futures::future::join_all((0..n).map(|_| peer(net, timeout))).await
}

async fn sessions(net: &Secured, n: usize, timeout: Duration) -> Vec<Session> {
    futures::future::join_all((0..n).map(|_| net.session(timeout))).await
}

fn pairs(ps: &[Participant]) -> Vec<(String, bool)> {
    ps.iter().map(|p| (p.id.clone(), p.is_leader)).collect()
}

fn expected(ids: &[&str]) -> Vec<(String, bool)> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| ((*id).to_owned(), i == 0))
        .collect()
}

/// Awaits a Rust `close()` or `release()`, at most [`BOUND`].
async fn closed(fut: impl std::future::Future<Output = zookeeper_recipes::Result<()>>) {
    within(BOUND, "a Rust close or release to finish", fut)
        .await
        .unwrap_or_else(|e| panic!("a Rust close or release failed: {e}"));
}

/// Checks that `node` (a path or a name) is named as Curator names it:
/// `_c_<36-char uuid>-<lock_name><10 digits>`.
fn assert_curator_name(node: &str, lock_name: &str) {
    let name = node.rsplit('/').next().unwrap_or(node);
    let shape_ok = name.strip_prefix("_c_").is_some_and(|rest| {
        rest.len() == 36 + 1 + lock_name.len() + 10
            && rest
                .get(..36)
                .is_some_and(|u| uuid::Uuid::parse_str(u).is_ok())
            && rest
                .get(36..)
                .and_then(|t| t.strip_prefix('-'))
                .and_then(|t| t.strip_prefix(lock_name))
                .is_some_and(|seq| seq.bytes().all(|b| b.is_ascii_digit()))
    });
    assert!(
        shape_ok,
        "{name:?} is not named _c_<uuid>-{lock_name}<10 digits> as Curator names its nodes"
    );
}

// --- the Curator side, one command at a time -------------------------------------------------

/// The last token of a reply such as `ok latch_has j1 true`.
fn last_word(reply: &str) -> &str {
    reply.rsplit(' ').next().unwrap_or_default()
}

fn parse_bool(reply: &str) -> bool {
    match last_word(reply) {
        "true" => true,
        "false" => false,
        _ => panic!("no boolean at the end of {reply:?}"),
    }
}

/// Starts a Curator latch and waits until its node exists; returns the node's path.
async fn java_latch(peer: &mut CuratorPeer, name: &str, path: &str, id: &str) -> String {
    assert_eq!(
        peer.cmd(&format!("latch {name} {path} {id}")).await,
        format!("ok latch {name}")
    );
    let prefix = format!("ok latch_path {name}");
    let deadline = Instant::now() + BOUND;
    loop {
        let reply = peer.cmd(&format!("latch_path {name}")).await;
        let node = reply
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("odd reply {reply:?}"))
            .trim();
        if !node.is_empty() {
            assert_curator_name(node, "latch-");
            return node.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "Curator latch {name} created no node under {path} within {BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn java_has(peer: &mut CuratorPeer, name: &str) -> bool {
    parse_bool(&peer.cmd(&format!("latch_has {name}")).await)
}

/// Waits for Curator latch `name`'s `leader` event and checks `hasLeadership()`; returns the
/// event's `ts=`.
async fn java_leads(peer: &mut CuratorPeer, name: &str) -> u64 {
    let prefix = format!("event latch {name} leader ");
    let line = peer
        .expect_event(
            |l| l.starts_with(&prefix),
            BOUND,
            &format!("Curator latch {name} to lead"),
        )
        .await;
    assert!(
        java_has(peer, name).await,
        "Curator latch {name} said `leader` but hasLeadership() is false"
    );
    event_ts(&line)
}

/// Whether a `leader` event of Curator latch `name` has been seen (pumps the peer's output first).
async fn java_led(peer: &mut CuratorPeer, name: &str) -> bool {
    peer.cmd("session").await;
    let prefix = format!("event latch {name} leader ");
    peer.events().iter().any(|l| l.starts_with(&prefix))
}

async fn java_close(peer: &mut CuratorPeer, name: &str) {
    assert_eq!(
        peer.cmd(&format!("latch_close {name}")).await,
        format!("ok latch_close {name}")
    );
}

/// Curator's `getParticipants()` of a fresh latch or selector (`kind`) on `path`.
async fn java_participants(peer: &mut CuratorPeer, kind: &str, path: &str) -> Vec<(String, bool)> {
    parse_participants(&peer.cmd(&format!("participants_{kind} {path}")).await)
}

/// Curator's `getLeader().getId()` of a fresh latch or selector (`kind`) on `path`.
async fn java_leader(peer: &mut CuratorPeer, kind: &str, path: &str) -> String {
    let reply = peer.cmd(&format!("leader_{kind} {path}")).await;
    reply
        .strip_prefix("ok leader")
        .unwrap_or_else(|| panic!("odd reply {reply:?}"))
        .trim()
        .to_owned()
}

// --- the Rust side ---------------------------------------------------------------------------

async fn rust_latch(session: &Session, path: &str, id: &str) -> LeaderLatch {
    let latch = LeaderLatch::builder(session, path)
        .id(id)
        .start()
        .await
        .unwrap();
    let node = latch
        .wait_joined(BOUND)
        .await
        .unwrap_or_else(|e| panic!("Rust latch {id} did not join {path}: {e}"));
    assert_curator_name(&node, "latch-");
    latch
}

/// Waits until the Rust participants on `path` (read through `latch`) are `ids`, the first one
/// leading.
async fn rust_sees(latch: &LeaderLatch, ids: &[&str]) {
    let want = expected(ids);
    eventually(BOUND, &format!("Rust participants {want:?}"), || async {
        let got = pairs(&latch.participants().await.unwrap());
        (got == want).then_some(())
    })
    .await;
}

// --- 1. election order -----------------------------------------------------------------------

/// A Rust or a Curator latch in a mixed election.
enum Candidate {
    Rust(LeaderLatch),
    /// A latch named `name` in `peers[peer]`.
    Java {
        peer: usize,
        name: String,
    },
}

async fn leads(c: &Candidate, peers: &mut [CuratorPeer]) -> bool {
    match c {
        Candidate::Rust(l) => l.has_leadership(),
        Candidate::Java { peer, name } => java_has(&mut peers[*peer], name).await,
    }
}

/// Creates r1/j1/r2/j2 (or j1/r1/j2/r2) one after the other on a fresh path and checks that
/// leadership passes along exactly that order as each leader closes.
async fn leadership_follows_creation_order(
    rust_first: bool,
    sessions: &[Session],
    peers: &mut [CuratorPeer],
) {
    let tag = if rust_first {
        "rust-first"
    } else {
        "java-first"
    };
    let path = testing::unique_path(&format!("mixed-order-{tag}"));
    let mut candidates: Vec<(String, Candidate)> = Vec::new();
    for k in 0..2 {
        let sides = if rust_first {
            [true, false]
        } else {
            [false, true]
        };
        for rust in sides {
            if rust {
                let id = format!("r{}", k + 1);
                let latch = rust_latch(&sessions[k], &path, &id).await;
                candidates.push((id, Candidate::Rust(latch)));
            } else {
                let id = format!("j{}", k + 1);
                let name = format!("{tag}-{id}");
                java_latch(&mut peers[k], &name, &path, &id).await;
                candidates.push((id, Candidate::Java { peer: k, name }));
            }
        }
    }
    let order: Vec<&str> = candidates.iter().map(|(id, _)| id.as_str()).collect();
    eprintln!("{tag}: created {order:?} on {path}");
    assert_eq!(
        java_participants(&mut peers[0], "latch", &path).await,
        expected(&order),
        "{tag}: Curator's election order is not the creation order"
    );

    for i in 0..candidates.len() {
        let (id, candidate) = &candidates[i];
        match candidate {
            Candidate::Rust(l) => {
                within(
                    BOUND,
                    &format!("{tag}: Rust {id} to lead"),
                    l.await_leadership(),
                )
                .await
                .unwrap();
            }
            Candidate::Java { peer, name } => {
                java_leads(&mut peers[*peer], name).await;
            }
        }
        for (j, (other, c)) in candidates.iter().enumerate() {
            if j == i {
                assert!(
                    leads(c, peers).await,
                    "{tag}: {id} lost leadership right after gaining it"
                );
            } else if j > i {
                assert!(
                    !leads(c, peers).await,
                    "{tag}: {other} leads together with {id}"
                );
            } else if let Candidate::Rust(l) = c {
                assert!(!l.has_leadership(), "{tag}: closed {other} still leads");
            }
        }
        match candidate {
            Candidate::Rust(l) => closed(l.close()).await,
            Candidate::Java { peer, name } => java_close(&mut peers[*peer], name).await,
        }
    }
    // Curator deletes its node in the background after close.
    eventually(
        BOUND,
        &format!("{tag}: every node under {path} to be gone"),
        || async { children(&sessions[0], &path).await.is_empty().then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn rust_and_curator_latches_lead_in_creation_order_whoever_created_first() {
    rust_and_curator_latches_lead_in_creation_order_whoever_created_first_on(Transport::Plaintext)
        .await;
}

#[tokio::test]
async fn rust_and_curator_latches_lead_in_creation_order_whoever_created_first_over_mtls() {
    rust_and_curator_latches_lead_in_creation_order_whoever_created_first_on(Transport::MutualTls)
        .await;
}

async fn rust_and_curator_latches_lead_in_creation_order_whoever_created_first_on(
    transport: Transport,
) {
    let Some(net) = net(transport).await else {
        return;
    };
    let sessions = sessions(net, 2, TIMEOUT).await;
    let mut peers = peers(net, 2, TIMEOUT).await;
    leadership_follows_creation_order(true, &sessions, &mut peers).await;
    leadership_follows_creation_order(false, &sessions, &mut peers).await;
    for peer in peers {
        peer.quit().await;
    }
}

// --- 2. participant lists --------------------------------------------------------------------

/// Checks that Curator, the latch's own `participants()`/`leader()` and `participants_on` all
/// list `ids` (first leading) on `path`.
async fn everyone_lists(
    peer: &mut CuratorPeer,
    latch: &LeaderLatch,
    session: &Session,
    path: &str,
    ids: &[&str],
) {
    let want = expected(ids);
    let java = java_participants(peer, "latch", path).await;
    let rust = pairs(&latch.participants().await.unwrap());
    let any = pairs(&participants_on(session, path).await.unwrap());
    assert_eq!(java, want, "Curator's getParticipants()");
    assert_eq!(rust, want, "LeaderLatch::participants()");
    assert_eq!(any, want, "participants_on");
    let leader = ids.first().copied().unwrap_or_default();
    assert_eq!(
        java_leader(peer, "latch", path).await,
        leader,
        "Curator's getLeader()"
    );
    let rust_leader = latch.leader().await.unwrap();
    assert_eq!(rust_leader.id, leader, "LeaderLatch::leader()");
    assert_eq!(
        rust_leader.is_leader,
        !ids.is_empty(),
        "LeaderLatch::leader() flag"
    );
}

#[tokio::test]
async fn curator_lists_rust_ids_and_rust_lists_curator_ids() {
    curator_lists_rust_ids_and_rust_lists_curator_ids_on(Transport::Plaintext).await;
}

#[tokio::test]
async fn curator_lists_rust_ids_and_rust_lists_curator_ids_over_mtls() {
    curator_lists_rust_ids_and_rust_lists_curator_ids_on(Transport::MutualTls).await;
}

async fn curator_lists_rust_ids_and_rust_lists_curator_ids_on(transport: Transport) {
    let Some(net) = net(transport).await else {
        return;
    };
    let s = net.session(TIMEOUT).await;
    let mut peer = peer(net, TIMEOUT).await;
    let path = testing::unique_path("participants");
    // A non-ASCII id: both sides store and read the id as UTF-8.
    let r1 = rust_latch(&s, &path, "rust-1").await;
    java_latch(&mut peer, "j1", &path, "java-1").await;
    let r2 = rust_latch(&s, &path, "rüst-2").await;
    within(BOUND, "rust-1 to lead", r1.await_leadership())
        .await
        .unwrap();
    everyone_lists(&mut peer, &r2, &s, &path, &["rust-1", "java-1", "rüst-2"]).await;

    closed(r1.close()).await;
    java_leads(&mut peer, "j1").await;
    everyone_lists(&mut peer, &r2, &s, &path, &["java-1", "rüst-2"]).await;

    java_close(&mut peer, "j1").await;
    within(
        BOUND,
        "rüst-2 to lead after java-1 closed",
        r2.await_leadership(),
    )
    .await
    .unwrap();
    everyone_lists(&mut peer, &r2, &s, &path, &["rüst-2"]).await;

    closed(r2.close()).await;
    everyone_lists(&mut peer, &r2, &s, &path, &[]).await;
    // A path that never existed: both sides give an empty list and the dummy leader.
    let nowhere = testing::unique_path("participants-nowhere");
    assert_eq!(java_participants(&mut peer, "latch", &nowhere).await, []);
    assert_eq!(java_leader(&mut peer, "latch", &nowhere).await, "");
    assert_eq!(participants_on(&s, &nowhere).await.unwrap(), []);
    peer.quit().await;
}

// --- 3. handovers ----------------------------------------------------------------------------

#[tokio::test]
async fn after_the_java_leader_closes_the_next_rust_candidate_leads_and_vice_versa() {
    after_the_java_leader_closes_the_next_rust_candidate_leads_and_vice_versa_on(
        Transport::Plaintext,
    )
    .await;
}

#[tokio::test]
async fn after_the_java_leader_closes_the_next_rust_candidate_leads_and_vice_versa_over_mtls() {
    after_the_java_leader_closes_the_next_rust_candidate_leads_and_vice_versa_on(
        Transport::MutualTls,
    )
    .await;
}

async fn after_the_java_leader_closes_the_next_rust_candidate_leads_and_vice_versa_on(
    transport: Transport,
) {
    let Some(net) = net(transport).await else {
        return;
    };
    let s = net.session(TIMEOUT).await;
    let mut peer = peer(net, TIMEOUT).await;

    // Java leads, two Rust candidates wait: closing Java elects the first of them only.
    let path = testing::unique_path("handover-java-to-rust");
    java_latch(&mut peer, "ja", &path, "java-a").await;
    java_leads(&mut peer, "ja").await;
    let r1 = rust_latch(&s, &path, "rust-1").await;
    let r2 = rust_latch(&s, &path, "rust-2").await;
    rust_sees(&r1, &["java-a", "rust-1", "rust-2"]).await;
    assert!(
        !r1.has_leadership() && !r2.has_leadership(),
        "a Rust candidate leads while Curator does"
    );
    let started = Instant::now();
    java_close(&mut peer, "ja").await;
    let term = within(
        BOUND,
        "rust-1 to lead after the Curator leader closed",
        r1.await_leadership(),
    )
    .await
    .unwrap();
    let java_to_rust = started.elapsed();
    assert!(!r2.has_leadership(), "rust-2 was elected too");
    peer.expect_event(
        |l| l.starts_with("event latch ja not_leader "),
        BOUND,
        "Curator's not_leader on close (NOTIFY_LEADER)",
    )
    .await;
    assert_eq!(term.participant_id(), "rust-1");
    window().await;
    assert!(
        r1.has_leadership() && !r2.has_leadership(),
        "leadership moved on by itself"
    );
    closed(r1.close()).await;
    closed(r2.close()).await;

    // Rust leads, two Curator candidates wait: closing Rust elects the first of them only.
    let path = testing::unique_path("handover-rust-to-java");
    let r3 = rust_latch(&s, &path, "rust-3").await;
    within(BOUND, "rust-3 to lead", r3.await_leadership())
        .await
        .unwrap();
    java_latch(&mut peer, "jb", &path, "java-b").await;
    java_latch(&mut peer, "jc", &path, "java-c").await;
    rust_sees(&r3, &["rust-3", "java-b", "java-c"]).await;
    assert!(!java_has(&mut peer, "jb").await && !java_has(&mut peer, "jc").await);
    let started = Instant::now();
    closed(r3.close()).await;
    java_leads(&mut peer, "jb").await;
    let rust_to_java = started.elapsed();
    assert!(!java_has(&mut peer, "jc").await, "java-c was elected too");
    window().await;
    assert!(
        java_has(&mut peer, "jb").await && !java_led(&mut peer, "jc").await,
        "leadership moved on by itself"
    );
    java_close(&mut peer, "jb").await;
    java_leads(&mut peer, "jc").await;
    java_close(&mut peer, "jc").await;
    eprintln!(
        "handover: Curator leader closes -> Rust successor leads {} ms; Rust leader closes -> Curator successor leads {} ms",
        ms(java_to_rust),
        ms(rust_to_java)
    );
    peer.quit().await;
}

#[tokio::test]
async fn a_middle_candidate_of_either_side_leaving_elects_nobody_and_its_successor_follows_the_leader()
 {
    a_middle_candidate_of_either_side_leaving_elects_nobody_and_its_successor_follows_the_leader_on(Transport::Plaintext).await;
}

#[tokio::test]
async fn a_middle_candidate_of_either_side_leaving_elects_nobody_and_its_successor_follows_the_leader_over_mtls()
 {
    a_middle_candidate_of_either_side_leaving_elects_nobody_and_its_successor_follows_the_leader_on(Transport::MutualTls).await;
}

async fn a_middle_candidate_of_either_side_leaving_elects_nobody_and_its_successor_follows_the_leader_on(
    transport: Transport,
) {
    let Some(net) = net(transport).await else {
        return;
    };
    let s = net.session(TIMEOUT).await;
    let mut peer = peer(net, TIMEOUT).await;

    // Curator leader, Rust in the middle, Curator behind it.
    let path = testing::unique_path("middle-rust");
    java_latch(&mut peer, "ja", &path, "java-a").await;
    java_leads(&mut peer, "ja").await;
    let middle = rust_latch(&s, &path, "rust-middle").await;
    java_latch(&mut peer, "jb", &path, "java-b").await;
    closed(middle.close()).await;
    window().await;
    assert!(
        !java_led(&mut peer, "jb").await,
        "java-b was elected when the Rust candidate before it left"
    );
    assert!(
        java_has(&mut peer, "ja").await,
        "java-a lost leadership when a candidate behind it left"
    );
    java_close(&mut peer, "ja").await;
    java_leads(&mut peer, "jb").await;
    java_close(&mut peer, "jb").await;

    // Rust leader, Curator in the middle, Rust behind it.
    let path = testing::unique_path("middle-java");
    let ra = rust_latch(&s, &path, "rust-a").await;
    within(BOUND, "rust-a to lead", ra.await_leadership())
        .await
        .unwrap();
    java_latch(&mut peer, "jm", &path, "java-middle").await;
    let rb = rust_latch(&s, &path, "rust-b").await;
    rust_sees(&rb, &["rust-a", "java-middle", "rust-b"]).await;
    java_close(&mut peer, "jm").await;
    rust_sees(&rb, &["rust-a", "rust-b"]).await;
    let early = tokio::time::timeout(WINDOW, rb.await_leadership()).await;
    assert!(
        early.is_err(),
        "rust-b was elected when the Curator candidate before it left"
    );
    assert!(
        ra.has_leadership(),
        "rust-a lost leadership when a candidate behind it left"
    );
    closed(ra.close()).await;
    within(
        BOUND,
        "rust-b to lead after rust-a closed",
        rb.await_leadership(),
    )
    .await
    .unwrap();
    closed(rb.close()).await;
    peer.quit().await;
}

// --- 4. killed candidates --------------------------------------------------------------------

#[tokio::test]
async fn a_killed_candidate_of_either_side_is_replaced_after_its_session_expires() {
    a_killed_candidate_of_either_side_is_replaced_after_its_session_expires_on(
        Transport::Plaintext,
    )
    .await;
}

#[tokio::test]
async fn a_killed_candidate_of_either_side_is_replaced_after_its_session_expires_over_mtls() {
    a_killed_candidate_of_either_side_is_replaced_after_its_session_expires_on(
        Transport::MutualTls,
    )
    .await;
}

async fn a_killed_candidate_of_either_side_is_replaced_after_its_session_expires_on(
    transport: Transport,
) {
    let Some(net) = net(transport).await else {
        return;
    };
    let short = Duration::from_secs(2);
    let (mut doomed, mut heir) = tokio::join!(peer(net, short), peer(net, TIMEOUT));

    // A Curator leader is SIGKILLed: its node stays until the server expires its session.
    let s = net.session(TIMEOUT).await;
    let path = testing::unique_path("killed-java-leader");
    java_latch(&mut doomed, "doomed", &path, "java-doomed").await;
    java_leads(&mut doomed, "doomed").await;
    let rust = rust_latch(&s, &path, "rust-heir").await;
    rust_sees(&rust, &["java-doomed", "rust-heir"]).await;
    let killed = Instant::now();
    doomed.kill9().await;
    let term = within(
        short + BOUND,
        "the Rust candidate to lead after the Curator leader was killed",
        rust.await_leadership(),
    )
    .await
    .unwrap();
    let java_replaced = killed.elapsed();
    rust_sees(&rust, &["rust-heir"]).await;
    assert!(
        java_replaced >= short / 2,
        "the Rust candidate led {} ms after the kill, before the killed leader's {} ms session can have expired",
        ms(java_replaced),
        ms(short)
    );
    assert_eq!(term.participant_id(), "rust-heir");
    closed(rust.close()).await;

    // A Rust leader's link goes silent for good (the process is as good as dead): its term ends
    // on its own (suspended, at the latest at its deadline) before the server expires its session
    // and so elects the Curator candidate.
    let proxy = common::proxy_to(net.server()).await;
    let dying = net.session_to(&proxy.connect_string(), short).await;
    let negotiated = dying.negotiated_timeout().unwrap();
    let path = testing::unique_path("killed-rust-leader");
    let rust = rust_latch(&dying, &path, "rust-doomed").await;
    let first = within(BOUND, "rust-doomed to lead", rust.await_leadership())
        .await
        .unwrap();
    let mut events = Box::pin(rust.events());
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        while let Some(e) = events.next().await {
            if let LatchEvent::NotLeader { reason, .. } = e {
                let _ = ended_tx.send((reason, Instant::now(), now_ms()));
                return;
            }
        }
    });
    java_latch(&mut heir, "heir", &path, "java-heir").await;
    rust_sees(&rust, &["rust-doomed", "java-heir"]).await;
    assert!(!java_has(&mut heir, "heir").await);
    let silenced = Instant::now();
    proxy.blackhole();
    let java_ts = java_leads(&mut heir, "heir").await;
    let rust_replaced = silenced.elapsed();
    let (reason, rust_end, rust_end_ms) = within(BOUND, "the Rust leader's term to end", ended_rx)
        .await
        .expect("the latch's event stream ended early");
    let rust_stopped = rust_end.duration_since(silenced);
    assert!(
        rust_end_ms <= java_ts,
        "the silenced Rust leader's term ended at {rust_end_ms}, after the Curator successor began at {java_ts}: two leaders"
    );
    assert!(
        rust_replaced >= negotiated / 2,
        "Curator led {} ms after the link went silent, before the {} ms session can have expired",
        ms(rust_replaced),
        ms(negotiated)
    );
    assert!(
        !rust.has_leadership(),
        "the silenced Rust leader still claims leadership"
    );

    // The link comes back: the Rust latch joins again on a new session, behind Curator, and
    // leads again only after Curator leaves, with a higher token.
    proxy.heal();
    eventually(BOUND, "the Rust latch to rejoin with a new node", || {
        let node = rust.our_path();
        let old = first.path().to_owned();
        async move { node.filter(|n| *n != old) }
    })
    .await;
    let observer = net.session(TIMEOUT).await;
    let want = expected(&["java-heir", "rust-doomed"]);
    eventually(
        BOUND,
        &format!("participants {want:?} after the rejoin"),
        || async {
            let got = pairs(&participants_on(&observer, &path).await.unwrap());
            (got == want).then_some(())
        },
    )
    .await;
    assert!(
        !rust.has_leadership(),
        "the rejoined Rust latch leads while Curator does (CURATOR-696)"
    );
    assert!(
        java_has(&mut heir, "heir").await,
        "Curator lost leadership when the Rust latch rejoined"
    );
    java_close(&mut heir, "heir").await;
    let second = within(
        BOUND,
        "the rejoined Rust latch to lead after Curator closed",
        rust.await_leadership(),
    )
    .await
    .unwrap();
    assert!(
        second.token() > first.token(),
        "the new term's token {} is not above {}",
        second.token(),
        first.token()
    );
    assert_ne!(second.session_id(), first.session_id());
    within(BOUND, "the Rust latch to close", rust.close())
        .await
        .unwrap();
    within(BOUND, "the Rust session to close", dying.close())
        .await
        .unwrap();
    eprintln!(
        "replacement: Curator leader kill -9 -> Rust candidate leads after {} ms (Curator session timeout {} ms); \
         Rust leader silenced -> its term ended after {} ms ({reason}), Curator candidate leads after {} ms, \
         {} ms after the Rust term ended (Rust session timeout {} ms requested, {} ms negotiated)",
        ms(java_replaced),
        ms(short),
        ms(rust_stopped),
        ms(rust_replaced),
        java_ts - rust_end_ms,
        ms(short),
        ms(negotiated)
    );
    heir.quit().await;
}

// --- 5. selectors taking turns ---------------------------------------------------------------

/// One leadership term as seen by its participant, in wall-clock milliseconds.
#[derive(Debug, Clone)]
struct Term {
    who: String,
    start: u64,
    end: u64,
    /// Rust terms only.
    token: Option<FencingToken>,
    /// Whether the term was valid when it started and (unless cut short) when it ended.
    valid: bool,
    /// Ended by something other than its own return (Rust: cancelled; Curator: interrupted).
    cut_short: bool,
}

type History = Arc<Mutex<Vec<Term>>>;

/// How long a Rust selector's closure holds each term.
const RUST_HOLD: Duration = Duration::from_millis(150);
/// How long after a Curator term starts the test releases it.
const CURATOR_HOLD: Duration = Duration::from_millis(100);

fn recording_listener(who: &str, history: &History) -> impl LeaderSelectorListener {
    let who = who.to_owned();
    let history = Arc::clone(history);
    move |term: Leadership| {
        let who = who.clone();
        let history = Arc::clone(&history);
        async move {
            let start = now_ms();
            let valid_at_start = term.is_valid();
            let cut_short = tokio::select! {
                () = tokio::time::sleep(RUST_HOLD) => false,
                () = term.ended() => true,
            };
            let valid_at_end = term.is_valid();
            let end = now_ms();
            history.lock().unwrap().push(Term {
                who,
                start,
                end,
                token: Some(term.token()),
                valid: valid_at_start && (cut_short || valid_at_end),
                cut_short,
            });
            Ok::<(), std::io::Error>(())
        }
    }
}

/// Releases every term of Curator selector `name` [`CURATOR_HOLD`] after it starts, until
/// `stop`; counts the terms in `terms`.
async fn drive_curator_selector(
    mut peer: CuratorPeer,
    name: String,
    terms: Arc<AtomicUsize>,
    stop: CancellationToken,
) -> CuratorPeer {
    let start = format!("event selector {name} term_start ");
    let end = format!("event selector {name} term_end ");
    let what = format!("a term of Curator selector {name}");
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            _ = peer.expect_event(|l| l.starts_with(&start), Duration::from_secs(60), &what) => {}
        }
        tokio::time::sleep(CURATOR_HOLD).await;
        let reply = peer.cmd(&format!("selector_release {name}")).await;
        assert_eq!(
            reply,
            format!("ok selector_release {name}"),
            "Curator selector {name}'s term ended before the test released it"
        );
        peer.expect_event(
            |l| l.starts_with(&end),
            BOUND,
            &format!("the end of {what}"),
        )
        .await;
        terms.fetch_add(1, Ordering::SeqCst);
    }
    peer
}

/// Curator selector `name`'s terms, from every event the peer printed.
fn curator_terms(peer: &CuratorPeer, name: &str) -> Vec<Term> {
    let start = format!("event selector {name} term_start ");
    let end = format!("event selector {name} term_end ");
    let mut terms = Vec::new();
    let mut open: Option<u64> = None;
    for line in peer.events() {
        if line.starts_with(&start) {
            assert!(
                open.is_none(),
                "{name}: two term_start events without a term_end between"
            );
            open = Some(event_ts(line));
        } else if line.starts_with(&end) {
            let began = open
                .take()
                .unwrap_or_else(|| panic!("{name}: term_end without term_start: {line}"));
            terms.push(Term {
                who: name.to_owned(),
                start: began,
                end: event_ts(line),
                token: None,
                valid: true,
                cut_short: !line.contains("reason=released"),
            });
        }
    }
    assert!(
        open.is_none(),
        "{name}: a term that never ended, after its selector was closed"
    );
    terms
}

#[tokio::test]
async fn rust_and_curator_selectors_with_auto_requeue_take_turns_without_overlapping_terms() {
    rust_and_curator_selectors_with_auto_requeue_take_turns_without_overlapping_terms_on(
        Transport::Plaintext,
    )
    .await;
}

#[tokio::test]
async fn rust_and_curator_selectors_with_auto_requeue_take_turns_without_overlapping_terms_over_mtls()
 {
    rust_and_curator_selectors_with_auto_requeue_take_turns_without_overlapping_terms_on(
        Transport::MutualTls,
    )
    .await;
}

async fn rust_and_curator_selectors_with_auto_requeue_take_turns_without_overlapping_terms_on(
    transport: Transport,
) {
    let Some(net) = net(transport).await else {
        return;
    };
    let path = testing::unique_path("selector-turns");
    let rust_sessions = sessions(net, 2, TIMEOUT).await;
    let mut java_peers = peers(net, 2, TIMEOUT).await;
    let history: History = Arc::default();
    let stop = CancellationToken::new();

    let mut rust = Vec::new();
    let mut drivers = Vec::new();
    let mut java_counts = Vec::new();
    // Alternate the sides in the queue: rs1, js1, rs2, js2.
    for (k, rust_session) in rust_sessions.iter().enumerate() {
        let id = format!("rs{}", k + 1);
        let selector = LeaderSelector::builder(rust_session, &path)
            .id(&id)
            .auto_requeue(true)
            .start(recording_listener(&id, &history))
            .await
            .unwrap();
        rust.push(selector);
        let name = format!("js{}", k + 1);
        let mut peer = java_peers.remove(0);
        assert_eq!(
            peer.cmd(&format!("selector {name} {path} {name} true"))
                .await,
            format!("ok selector {name}")
        );
        let count = Arc::new(AtomicUsize::new(0));
        java_counts.push((name.clone(), Arc::clone(&count)));
        drivers.push(tokio::spawn(drive_curator_selector(
            peer,
            name,
            count,
            stop.clone(),
        )));
    }

    let wanted = 4;
    let counts = || {
        let mut c: BTreeMap<String, usize> = BTreeMap::new();
        for t in history.lock().unwrap().iter() {
            *c.entry(t.who.clone()).or_default() += 1;
        }
        for (name, n) in &java_counts {
            c.insert(name.clone(), n.load(Ordering::SeqCst));
        }
        c
    };
    let started = Instant::now();
    eventually(
        Duration::from_secs(90),
        &format!("every participant to lead {wanted} times"),
        || {
            let c = counts();
            async move { (c.len() == 4 && c.values().all(|&n| n >= wanted)).then_some(()) }
        },
    )
    .await;
    let run_time = started.elapsed();
    let stop_ms = now_ms();
    stop.cancel();
    let mut java_peers = Vec::new();
    for d in drivers {
        java_peers.push(
            within(BOUND, "a Curator selector driver to stop", d)
                .await
                .expect("a Curator selector driver failed"),
        );
    }
    for (k, peer) in java_peers.iter_mut().enumerate() {
        let name = format!("js{}", k + 1);
        assert_eq!(
            peer.cmd(&format!("selector_close {name}")).await,
            format!("ok selector_close {name}")
        );
    }
    for selector in &rust {
        within(BOUND, "a Rust selector to close", selector.close())
            .await
            .unwrap();
    }
    // Every term ended before its node went (Curator prints term_end before releasing), so once
    // the path is empty, a command's reply comes after every term event of that peer.
    eventually(BOUND, "every selector node to be gone", || async {
        children(&rust_sessions[0], &path)
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    let mut terms: Vec<Term> = history.lock().unwrap().clone();
    for (k, peer) in java_peers.iter_mut().enumerate() {
        peer.cmd("session").await;
        terms.extend(curator_terms(peer, &format!("js{}", k + 1)));
    }
    terms.sort_by_key(|t| (t.start, t.end));

    let sequence: Vec<String> = terms
        .iter()
        .map(|t| format!("{}@{}+{}", t.who, t.start % 100_000, t.end - t.start))
        .collect();
    let gaps: Vec<u64> = terms
        .windows(2)
        .map(|w| w[1].start.saturating_sub(w[0].end))
        .collect();
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for t in &terms {
        *per.entry(t.who.as_str()).or_default() += 1;
    }
    eprintln!(
        "selectors: {} terms in {} ms, per participant {per:?}; handover gaps (end -> next start) mean {} ms, max {} ms\n  {}",
        terms.len(),
        ms(run_time),
        gaps.iter().sum::<u64>() / gaps.len().max(1) as u64,
        gaps.iter().max().copied().unwrap_or(0),
        sequence.join(" ")
    );

    assert!(terms.len() >= 12, "only {} terms", terms.len());
    for who in ["rs1", "rs2", "js1", "js2"] {
        assert!(
            per.get(who).copied().unwrap_or(0) >= 2,
            "{who} led fewer than twice: {per:?}"
        );
    }
    for t in &terms {
        assert!(t.start <= t.end, "a term ends before it starts: {t:?}");
        assert!(t.valid, "a Rust term was not valid throughout: {t:?}");
        assert!(
            !t.cut_short || t.end >= stop_ms,
            "a term was cut short before the test stopped: {t:?}"
        );
    }
    for w in terms.windows(2) {
        assert!(
            w[0].end <= w[1].start,
            "terms overlap: {:?} and {:?}\n  {}",
            w[0],
            w[1],
            sequence.join(" ")
        );
    }
    let tokens: Vec<FencingToken> = terms.iter().filter_map(|t| t.token).collect();
    for w in tokens.windows(2) {
        assert!(
            w[0] < w[1],
            "Rust fencing tokens do not rise strictly: {tokens:?}"
        );
    }
    for peer in java_peers {
        peer.quit().await;
    }
}

// --- 6. mutex --------------------------------------------------------------------------------

/// Whether Curator mutex `name` holds its lock (`mutex_path` is empty unless held), and that no
/// `acquired` event says otherwise.
async fn java_holds(peer: &mut CuratorPeer, name: &str) -> bool {
    let reply = peer.cmd(&format!("mutex_path {name}")).await;
    let held = !reply
        .strip_prefix(&format!("ok mutex_path {name}"))
        .unwrap_or_else(|| panic!("odd reply {reply:?}"))
        .trim()
        .is_empty();
    let acquired = format!("event mutex {name} acquired ");
    assert_eq!(
        held,
        peer.events().iter().any(|l| l.starts_with(&acquired)),
        "Curator mutex {name}: mutex_path and the acquired event disagree"
    );
    held
}

/// Whether Curator can take the lock within 200 ms (a fresh mutex `name`).
async fn java_try(peer: &mut CuratorPeer, name: &str, path: &str) -> bool {
    parse_bool(
        &peer
            .cmd(&format!("mutex_try {name} {path} 200 java-try"))
            .await,
    )
}

async fn mutex_sees(mutex: &InterProcessMutex, ids: &[&str]) {
    let want = expected(ids);
    eventually(BOUND, &format!("mutex participants {want:?}"), || async {
        let got = pairs(&mutex.participants().await.unwrap());
        (got == want).then_some(())
    })
    .await;
}

#[tokio::test]
async fn rust_and_curator_mutexes_exclude_each_other_and_are_served_in_request_order() {
    rust_and_curator_mutexes_exclude_each_other_and_are_served_in_request_order_on(
        Transport::Plaintext,
    )
    .await;
}

#[tokio::test]
async fn rust_and_curator_mutexes_exclude_each_other_and_are_served_in_request_order_over_mtls() {
    rust_and_curator_mutexes_exclude_each_other_and_are_served_in_request_order_on(
        Transport::MutualTls,
    )
    .await;
}

async fn rust_and_curator_mutexes_exclude_each_other_and_are_served_in_request_order_on(
    transport: Transport,
) {
    let Some(net) = net(transport).await else {
        return;
    };
    let s = net.session(TIMEOUT).await;
    let mut ps = peers(net, 2, TIMEOUT).await;
    let (mut b, mut a) = (ps.pop().unwrap(), ps.pop().unwrap());
    let path = testing::unique_path("mutex-interop");

    // Curator A holds.
    assert_eq!(
        a.cmd(&format!("mutex_acquire ma {path} java-a")).await,
        "ok mutex_acquire ma pending"
    );
    a.expect_event(
        |l| l.starts_with("event mutex ma acquired "),
        BOUND,
        "Curator A to acquire the free lock",
    )
    .await;

    // Rust queues behind A; then Curator B queues behind Rust.
    let mutex = InterProcessMutex::builder(&s, &path)
        .id("rust")
        .build()
        .unwrap();
    let m = mutex.clone();
    let mut rust = tokio::spawn(async move { m.acquire().await });
    mutex_sees(&mutex, &["java-a", "rust"]).await;
    assert_eq!(
        b.cmd(&format!("mutex_acquire mb {path} java-b")).await,
        "ok mutex_acquire mb pending"
    );
    mutex_sees(&mutex, &["java-a", "rust", "java-b"]).await;
    assert_eq!(
        java_participants(&mut b, "selector", &path).await,
        expected(&["java-a", "rust", "java-b"])
    );
    for node in children(&s, &path).await {
        assert_curator_name(&node, "lock-");
    }

    // While A holds, neither Rust nor B has it.
    assert!(
        !java_try(&mut b, "tb1", &path).await,
        "Curator took the lock while Curator A held it"
    );
    window().await;
    if rust.is_finished() {
        panic!(
            "Rust acquired while Curator A held the lock: {:?}",
            rust.await
        );
    }
    assert!(
        !java_holds(&mut b, "mb").await,
        "Curator B acquired while Curator A held the lock"
    );
    assert!(java_holds(&mut a, "ma").await);

    // A releases: Rust, next in line, gets it; B still waits.
    assert_eq!(a.cmd("mutex_release ma").await, "ok mutex_release ma");
    let guard = within(BOUND, "Rust to acquire after Curator A released", &mut rust)
        .await
        .unwrap()
        .unwrap();
    assert!(guard.is_held());
    mutex_sees(&mutex, &["rust", "java-b"]).await;
    assert!(
        !java_try(&mut a, "ta1", &path).await,
        "Curator took the lock while Rust held it"
    );
    window().await;
    assert!(
        !java_holds(&mut b, "mb").await,
        "Curator B acquired while Rust held the lock"
    );
    assert!(guard.is_held(), "Rust's hold ended by itself");

    // Rust releases: B gets it; Rust cannot get it back while B holds.
    closed(guard.release()).await;
    b.expect_event(
        |l| l.starts_with("event mutex mb acquired "),
        BOUND,
        "Curator B to acquire after Rust released",
    )
    .await;
    mutex_sees(&mutex, &["java-b"]).await;
    assert!(
        mutex.try_acquire().await.unwrap().is_none(),
        "Rust try_acquire took the lock while Curator B held it"
    );
    assert!(
        mutex.acquire_timeout(WINDOW).await.unwrap().is_none(),
        "Rust acquire_timeout took the lock while Curator B held it"
    );
    assert!(java_holds(&mut b, "mb").await);
    assert_eq!(b.cmd("mutex_release mb").await, "ok mutex_release mb");

    // Free again: Rust takes it at once, and nothing is left behind.
    let last = within(BOUND, "Rust to acquire the free lock", mutex.acquire())
        .await
        .unwrap();
    closed(last.release()).await;
    eventually(BOUND, "every lock node to be gone", || async {
        children(&s, &path).await.is_empty().then_some(())
    })
    .await;
    a.quit().await;
    b.quit().await;
}

// --- 7. selector participants ----------------------------------------------------------------

/// A listener that holds each term until it ends.
fn holding_listener() -> impl LeaderSelectorListener {
    |term: Leadership| async move {
        term.ended().await;
        Ok::<(), std::io::Error>(())
    }
}

async fn selectors_list(
    peer: &mut CuratorPeer,
    rust: &LeaderSelector,
    session: &Session,
    path: &str,
    ids: &[&str],
) {
    let want = expected(ids);
    eventually(
        BOUND,
        &format!("Rust selector participants {want:?}"),
        || async {
            let got = pairs(&rust.participants().await.unwrap());
            (got == want).then_some(())
        },
    )
    .await;
    assert_eq!(
        java_participants(peer, "selector", path).await,
        want,
        "Curator's LeaderSelector.getParticipants()"
    );
    assert_eq!(
        pairs(&participants_on(session, path).await.unwrap()),
        want,
        "participants_on"
    );
    let leader = ids.first().copied().unwrap_or_default();
    assert_eq!(
        java_leader(peer, "selector", path).await,
        leader,
        "Curator's LeaderSelector.getLeader()"
    );
    assert_eq!(
        rust.leader().await.unwrap().id,
        leader,
        "LeaderSelector::leader()"
    );
}

#[tokio::test]
async fn curator_selector_participants_show_rust_selector_ids() {
    curator_selector_participants_show_rust_selector_ids_on(Transport::Plaintext).await;
}

#[tokio::test]
async fn curator_selector_participants_show_rust_selector_ids_over_mtls() {
    curator_selector_participants_show_rust_selector_ids_on(Transport::MutualTls).await;
}

async fn curator_selector_participants_show_rust_selector_ids_on(transport: Transport) {
    let Some(net) = net(transport).await else {
        return;
    };
    let s = net.session(TIMEOUT).await;
    let mut peer = peer(net, TIMEOUT).await;
    let path = testing::unique_path("selector-participants");

    let rs1 = LeaderSelector::builder(&s, &path)
        .id("rust-s1")
        .start(holding_listener())
        .await
        .unwrap();
    within(BOUND, "rust-s1 to lead", rs1.await_leadership())
        .await
        .unwrap();
    assert_eq!(
        peer.cmd(&format!("selector js1 {path} java-s1 false"))
            .await,
        "ok selector js1"
    );
    selectors_list(&mut peer, &rs1, &s, &path, &["rust-s1", "java-s1"]).await;
    let rs2 = LeaderSelector::builder(&s, &path)
        .id("rust-s2")
        .start(holding_listener())
        .await
        .unwrap();
    selectors_list(
        &mut peer,
        &rs1,
        &s,
        &path,
        &["rust-s1", "java-s1", "rust-s2"],
    )
    .await;
    for node in children(&s, &path).await {
        assert_curator_name(&node, "lock-");
    }
    assert!(
        !parse_bool(&peer.cmd("selector_has js1").await),
        "Curator leads while rust-s1 does"
    );

    closed(rs1.close()).await;
    peer.expect_event(
        |l| l.starts_with("event selector js1 term_start "),
        BOUND,
        "Curator to lead after rust-s1 closed",
    )
    .await;
    selectors_list(&mut peer, &rs2, &s, &path, &["java-s1", "rust-s2"]).await;
    assert!(!rs2.has_leadership(), "rust-s2 leads while Curator does");

    // Without auto-requeue, Curator's term ends for good when released.
    assert_eq!(
        peer.cmd("selector_release js1").await,
        "ok selector_release js1"
    );
    within(
        BOUND,
        "rust-s2 to lead after Curator released",
        rs2.await_leadership(),
    )
    .await
    .unwrap();
    selectors_list(&mut peer, &rs2, &s, &path, &["rust-s2"]).await;

    closed(rs2.close()).await;
    selectors_list(&mut peer, &rs2, &s, &path, &[]).await;
    assert_eq!(
        peer.cmd("selector_close js1").await,
        "ok selector_close js1"
    );
    peer.quit().await;
}

// --- 8. observing Curator's own elections ------------------------------------------------------

/// Waits until the observer reports `id`; returns the report.
async fn observed(observer: &LeaderObserver, id: &str) -> zookeeper_recipes::LeaderInfo {
    let mut watch = observer.watch();
    let what = format!("the observer to report {id}");
    within(BOUND, &what, async {
        watch
            .wait_for(|l| l.as_ref().is_some_and(|l| l.id == id))
            .await
            .unwrap()
            .clone()
            .unwrap()
    })
    .await
}

#[tokio::test]
async fn observer_follows_curator_selectors_and_latches() {
    observer_follows_curator_selectors_and_latches_on(Transport::Plaintext).await;
}

#[tokio::test]
async fn observer_follows_curator_selectors_and_latches_over_mtls() {
    observer_follows_curator_selectors_and_latches_on(Transport::MutualTls).await;
}

async fn observer_follows_curator_selectors_and_latches_on(transport: Transport) {
    let Some(net) = net(transport).await else {
        return;
    };
    let mut peer = peer(net, TIMEOUT).await;
    let rust = net.session(TIMEOUT).await;

    // Curator selectors: `lock-` nodes (Curator queues them through its InterProcessMutex).
    let selectors = testing::unique_path("observe-curator-selector");
    let observer = LeaderObserver::builder(&rust, &selectors)
        .start()
        .await
        .unwrap();
    for (name, id) in [("s1", "java-s1"), ("s2", "java-s2")] {
        assert_eq!(
            peer.cmd(&format!("selector {name} {selectors} {id} false"))
                .await,
            format!("ok selector {name}")
        );
        let n = if name == "s1" { 1 } else { 2 };
        eventually(BOUND, "the Curator selector to queue", || async {
            (children(&rust, &selectors).await.len() == n).then_some(())
        })
        .await;
    }
    let first = observed(&observer, "java-s1").await;
    assert!(first.node.contains("-lock-"), "{}", first.node);
    assert_eq!(
        java_leader(&mut peer, "selector", &selectors).await,
        "java-s1"
    );
    assert_eq!(
        peer.cmd("selector_release s1").await,
        "ok selector_release s1"
    );
    let second = observed(&observer, "java-s2").await;
    assert!(second.token > first.token);
    assert_eq!(
        java_leader(&mut peer, "selector", &selectors).await,
        "java-s2"
    );

    // Curator latches: `latch-` nodes.
    let latches = testing::unique_path("observe-curator-latch");
    let latch_observer = LeaderObserver::builder(&rust, &latches)
        .start()
        .await
        .unwrap();
    java_latch(&mut peer, "l1", &latches, "java-l1").await;
    java_latch(&mut peer, "l2", &latches, "java-l2").await;
    let l1 = observed(&latch_observer, "java-l1").await;
    assert!(l1.node.contains("-latch-"), "{}", l1.node);
    java_close(&mut peer, "l1").await;
    let l2 = observed(&latch_observer, "java-l2").await;
    assert!(l2.token > l1.token);

    observer.close().await.unwrap();
    latch_observer.close().await.unwrap();
    peer.quit().await;
}
