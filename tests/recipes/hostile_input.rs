//! Hostile and bad input against real ZooKeeper: every case ends in a typed error or a documented
//! behaviour, never a panic or a spin, and leaves no node behind.
//!
//! Construction-time checks (paths, ids, ACLs), election paths the server refuses (an ephemeral
//! node, no permission), foreign and rewritten nodes, requests over the server's size limit,
//! connect strings that point at something that is not ZooKeeper, and chroots that do not exist.

use zookeeper_recipes_rigs::fixtures as common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{
    BOUND, StateRecorder, children, eventually, ms, persistent, session, shared_server, slack,
    within, zookeeper,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_client::{Acl, Acls, AuthId, CreateMode, LockPrefix, Permission};
use zookeeper_recipes::job::{JobAdmin, ScheduledJob};
use zookeeper_recipes::path::MAX_CHILDREN;
use zookeeper_recipes::{
    ConnectionState, Error, FencedOp, InterProcessMutex, LatchEvent, LeaderLatch, LeaderObserver,
    LeaderPool, LeaderSelector, Leadership, NodeAcl, SelectorState, Session, TermEnd,
    election_nodes_on, participants_on,
};
use zookeeper_recipes_testing as testing;

/// Makes the node `path` (its parent exists) as `mode` with `acls`, as an operator or another
/// client would.
async fn make(zk: &zookeeper_client::Client, path: &str, mode: CreateMode, acls: Acls<'_>) {
    zk.create(path, b"", &mode.with_acls(acls))
        .await
        .unwrap_or_else(|e| panic!("making {path}: {e}"));
}

/// A connected session that authenticates as digest user `user`.
async fn authed(connect: &str, user: &str) -> Session {
    Session::builder(connect)
        .digest_auth(user, format!("{user}-password"))
        .session_timeout(Duration::from_secs(10))
        .connection_timeout(BOUND)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("no session as {user}: {e}"))
}

/// A selector closure that holds its term until the term ends.
async fn hold_term(term: Leadership) -> Result<(), std::io::Error> {
    term.ended().await;
    Ok(())
}

/// Whether `err` is the server's refusal `expected` for `path`.
fn is_refusal(err: &Error, expected: &zookeeper_client::Error) -> bool {
    matches!(err, Error::Refused { source, .. } if source == expected)
}

/// Starts a latch, a selector and a mutex acquire on `path` and checks that each ends with the
/// refusal `expected` (not a hang, not a retry loop), and that the latch reports it as its last
/// event.
async fn every_recipe_is_refused(s: &Session, path: &str, expected: zookeeper_client::Error) {
    let latch = LeaderLatch::builder(s, path)
        .id("latch")
        .start()
        .await
        .unwrap();
    let mut events = Box::pin(latch.events());
    let err = within(BOUND, "the latch to give up", latch.await_leadership())
        .await
        .unwrap_err();
    assert!(is_refusal(&err, &expected), "latch on {path}: {err:?}");
    eprintln!("latch on {path}: {err}");
    // Every wait says the same, at once, and so does the last event.
    let again = within(BOUND, "wait_joined", latch.wait_joined(BOUND)).await;
    assert!(is_refusal(&again.unwrap_err(), &expected));
    assert!(is_refusal(&latch.failure().unwrap(), &expected));
    let last = within(BOUND, "the latch's events to end", async {
        let mut last = None;
        while let Some(e) = futures::StreamExt::next(&mut events).await {
            last = Some(e);
        }
        last
    })
    .await;
    assert!(
        matches!(&last, Some(LatchEvent::Failed(e)) if is_refusal(e, &expected)),
        "{last:?}"
    );
    latch.close().await.unwrap();

    let selector = LeaderSelector::builder(s, path)
        .id("selector")
        .auto_requeue(true)
        .start(hold_term)
        .await
        .unwrap();
    let err = within(
        BOUND,
        "the selector to give up",
        selector.await_leadership(),
    )
    .await
    .unwrap_err();
    assert!(is_refusal(&err, &expected), "selector on {path}: {err:?}");
    assert_eq!(selector.state(), SelectorState::Failed);
    selector.close().await.unwrap();

    let mutex = InterProcessMutex::builder(s, path)
        .id("mutex")
        .build()
        .unwrap();
    let err = within(BOUND, "acquire to give up", mutex.acquire())
        .await
        .unwrap_err();
    assert!(is_refusal(&err, &expected), "mutex on {path}: {err:?}");
    let err = within(BOUND, "try_acquire to give up", mutex.try_acquire())
        .await
        .unwrap_err();
    assert!(
        is_refusal(&err, &expected),
        "try_acquire on {path}: {err:?}"
    );
}

#[tokio::test]
async fn bad_paths_ids_and_acls_are_rejected_at_construction_by_every_recipe() {
    // No server needed: nothing may reach one.
    let s = Session::builder("127.0.0.1:1").start().unwrap();
    let long_id = "x".repeat(zookeeper_recipes::path::MAX_ID_LEN + 1);
    let bad_paths = [
        "jobs",
        "/jobs/",
        "/a//b",
        "/zookeeper",
        "/zookeeper/quota/x",
        "/a/\u{1}",
    ];
    let bad_ids = [long_id.as_str(), "line\nbreak", "esc\u{1b}[2J", "del\u{7f}"];
    for path in bad_paths {
        let latch = LeaderLatch::builder(&s, path).start().await;
        assert!(
            matches!(latch, Err(Error::InvalidPath { .. })),
            "latch {path:?}"
        );
        let selector = LeaderSelector::builder(&s, path).start(hold_term).await;
        assert!(
            matches!(selector, Err(Error::InvalidPath { .. })),
            "selector {path:?}"
        );
        let mutex = InterProcessMutex::builder(&s, path).build();
        assert!(
            matches!(mutex, Err(Error::InvalidPath { .. })),
            "mutex {path:?}"
        );
        let observer = LeaderObserver::builder(&s, path).start().await;
        assert!(
            matches!(observer, Err(Error::InvalidPath { .. })),
            "observer {path:?}"
        );
        let pool = LeaderPool::builder(&s, path).jobs(["a"]).start().await;
        assert!(
            matches!(pool, Err(Error::InvalidPath { .. })),
            "pool {path:?}"
        );
        let job = ScheduledJob::builder(&s, path)
            .every(Duration::from_secs(60))
            .build();
        assert!(
            matches!(job, Err(Error::InvalidPath { .. })),
            "scheduled job {path:?}"
        );
    }
    let invalid_id = |r: &Result<(), Error>| {
        matches!(
            r,
            Err(Error::InvalidArgument {
                what: "participant id",
                ..
            })
        )
    };
    for id in bad_ids {
        let latch = LeaderLatch::builder(&s, "/x")
            .id(id)
            .start()
            .await
            .map(drop);
        assert!(invalid_id(&latch), "latch {id:?}: {latch:?}");
        let selector = LeaderSelector::builder(&s, "/x")
            .id(id)
            .start(hold_term)
            .await
            .map(drop);
        assert!(invalid_id(&selector), "selector {id:?}");
        let mutex = InterProcessMutex::builder(&s, "/x")
            .id(id)
            .build()
            .map(drop);
        assert!(invalid_id(&mutex), "mutex {id:?}");
        let pool = LeaderPool::builder(&s, "/x")
            .id(id)
            .jobs(["a"])
            .start()
            .await
            .map(drop);
        assert!(invalid_id(&pool), "pool {id:?}");
        let job = ScheduledJob::builder(&s, "/x")
            .id(id)
            .every(Duration::from_secs(60))
            .build()
            .map(drop);
        assert!(invalid_id(&job), "scheduled job {id:?}");
    }
    // A creator ACL needs credentials on the session: the server would refuse every node.
    let invalid_acl = |r: &Result<(), Error>| {
        matches!(
            r,
            Err(Error::InvalidArgument {
                what: "node ACL",
                ..
            })
        )
    };
    let latch = LeaderLatch::builder(&s, "/x")
        .acl(NodeAcl::creator_all())
        .start()
        .await;
    assert!(invalid_acl(&latch.map(drop)));
    let selector = LeaderSelector::builder(&s, "/x")
        .acl(Acls::creator_all())
        .start(hold_term)
        .await;
    assert!(invalid_acl(&selector.map(drop)));
    let mutex = InterProcessMutex::builder(&s, "/x")
        .acl(NodeAcl::creator_all())
        .build();
    assert!(invalid_acl(&mutex.map(drop)));
    let job = ScheduledJob::builder(&s, "/x")
        .acl(NodeAcl::creator_all())
        .every(Duration::from_secs(60))
        .build();
    assert!(invalid_acl(&job.map(drop)));
    assert!(matches!(
        NodeAcl::new([]),
        Err(Error::InvalidArgument { .. })
    ));
    // With credentials the same ACL is fine.
    let with_auth = Session::builder("127.0.0.1:1")
        .digest_auth("u", "p")
        .start()
        .unwrap();
    assert!(
        InterProcessMutex::builder(&with_auth, "/x")
            .acl(NodeAcl::creator_all())
            .build()
            .is_ok()
    );
    // The session's own limits.
    assert!(matches!(
        Session::builder("127.0.0.1:1").jute_max_buffer(0).start(),
        Err(Error::InvalidArgument {
            what: "jute.maxbuffer",
            ..
        })
    ));
    s.close().await.unwrap();
    with_auth.close().await.unwrap();
}

#[tokio::test]
async fn an_election_path_that_is_an_ephemeral_node_stops_every_recipe_with_a_refusal() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let admin = session(server.connect_string(), Duration::from_secs(10)).await;
    let root = testing::unique_path("ephemeral");
    let zk = admin.client().unwrap();
    zk.mkdir(&root, &persistent()).await.unwrap();
    let path = format!("{root}/election");
    make(&zk, &path, CreateMode::Ephemeral, Acls::anyone_all()).await;
    // The path itself (the node's create is refused), and a path below it (its parent's is).
    every_recipe_is_refused(&s, &path, zookeeper_client::Error::NoChildrenForEphemerals).await;
    every_recipe_is_refused(
        &s,
        &format!("{path}/below"),
        zookeeper_client::Error::NoChildrenForEphemerals,
    )
    .await;
    // Nothing was made, and the sessions are fine.
    assert_eq!(zk.list_children(&root).await.unwrap(), ["election"]);
    assert_eq!(s.state(), Some(ConnectionState::Connected));
}

#[tokio::test]
async fn a_path_the_session_may_not_use_stops_every_recipe_with_no_auth_and_leaves_no_node() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let admin = authed(server.connect_string(), "admin").await;
    let zk = admin.client().unwrap();
    let root = testing::unique_path("noauth");
    zk.mkdir(&root, &persistent()).await.unwrap();

    // Read-only for everyone: the create is refused.
    let read_only = format!("{root}/read-only");
    make(&zk, &read_only, CreateMode::Persistent, Acls::anyone_read()).await;
    every_recipe_is_refused(&s, &read_only, zookeeper_client::Error::NoAuth).await;
    // A missing election path under it: the parent's create is refused.
    every_recipe_is_refused(
        &s,
        &format!("{read_only}/jobs"),
        zookeeper_client::Error::NoAuth,
    )
    .await;

    // Create and delete but no read: the node is made, the listing is refused, and the recipe
    // deletes its node on the way out.
    let blind = format!("{root}/blind");
    let acl = [
        Acl::new(Permission::CREATE | Permission::DELETE, AuthId::anyone()),
        Acl::new(Permission::ALL, AuthId::authed()),
    ];
    make(&zk, &blind, CreateMode::Persistent, Acls::new(&acl)).await;
    every_recipe_is_refused(&s, &blind, zookeeper_client::Error::NoAuth).await;
    eventually(
        BOUND,
        "the refused recipes' nodes to be deleted",
        || async {
            zk.list_children(&blind)
                .await
                .unwrap()
                .is_empty()
                .then_some(())
        },
    )
    .await;
    assert_eq!(s.state(), Some(ConnectionState::Connected));
}

#[tokio::test]
async fn an_acl_the_server_rejects_stops_the_recipe_with_invalid_acl() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("invalid-acl");
    // A digest id must be `user:base64 hash`; the server rejects anything else.
    let acl = NodeAcl::new([Acl::new(Permission::ALL, AuthId::new("digest", "no-colon"))]).unwrap();
    let latch = LeaderLatch::builder(&s, &path)
        .acl(acl)
        .start()
        .await
        .unwrap();
    let err = within(BOUND, "the latch to give up", latch.await_leadership())
        .await
        .unwrap_err();
    assert!(
        is_refusal(&err, &zookeeper_client::Error::InvalidAcl),
        "{err:?}"
    );
    latch.close().await.unwrap();
    assert!(children(&s, &path).await.is_empty());
}

#[tokio::test]
async fn an_oversized_fenced_write_is_refused_before_sending_and_the_leader_keeps_its_term() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let admin = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("oversized");
    let data_path = format!("{path}-data");
    admin
        .client()
        .unwrap()
        .mkdir(&data_path, &persistent())
        .await
        .unwrap();
    let latch = LeaderLatch::builder(&s, &path)
        .id("writer")
        .start()
        .await
        .unwrap();
    let term = within(BOUND, "leadership", latch.await_leadership())
        .await
        .unwrap();
    let mut leader_states = StateRecorder::start(&s);

    // The multi `fenced` sends, in jute: request header 8, check header 9 + path (4 + len) +
    // version 4, set-data header 9 + path (4 + len) + data (4 + n) + version 4, closing header 9.
    let limit = zookeeper_recipes::Session::DEFAULT_JUTE_MAX_BUFFER;
    let overhead = 8 + 9 + 4 + term.path().len() + 4 + 9 + 4 + data_path.len() + 4 + 4 + 9;
    let at_limit = limit - overhead;

    // The premise: one byte over the server's jute.maxbuffer and the server drops the
    // *connection*. Shown on another session, with the same request sent raw.
    let mut admin_states = StateRecorder::start(&admin);
    let raw = admin.client().unwrap();
    let mut writer = raw.new_check_writer(term.path(), None).unwrap();
    writer
        .add_set_data(&data_path, &vec![7u8; at_limit + 1], None)
        .unwrap();
    let raw_result = within(BOUND, "the raw oversized write to fail", writer.commit()).await;
    assert!(
        raw_result.is_err(),
        "the server accepted {} bytes",
        limit + 1
    );
    admin_states.expect(ConnectionState::Suspended, BOUND).await;
    eprintln!("raw write of {} bytes: {:?}", limit + 1, raw_result.err());

    // Through the term: refused here, nothing sent.
    let started = Instant::now();
    let refused = term
        .fenced([FencedOp::set_data(&data_path, vec![7u8; at_limit + 1])])
        .await;
    match refused {
        Err(Error::RequestTooLarge { size, limit: l }) => {
            assert_eq!((size, l), (limit + 1, limit));
        }
        other => panic!("expected RequestTooLarge, got {other:?}"),
    }
    eprintln!(
        "oversized fenced write refused locally in {:?}",
        started.elapsed()
    );
    // Exactly at the limit it goes through, on the same connection, in the same term.
    let written = within(
        BOUND,
        "the write at the limit",
        term.fenced([FencedOp::set_data(&data_path, vec![1u8; at_limit])]),
    )
    .await;
    assert!(written.is_ok(), "{written:?}");
    let (data, _) = admin.client().unwrap().get_data(&data_path).await.unwrap();
    assert_eq!(data.len(), at_limit);
    assert!(
        !term.has_ended() && latch.has_leadership(),
        "the leader lost its term"
    );
    assert!(
        !leader_states
            .drain()
            .contains(&Some(ConnectionState::Suspended)),
        "the leader's connection was dropped: {:?}",
        leader_states.states()
    );
    // A node created by a fenced write counts its ACL too.
    let create = term
        .fenced([FencedOp::create(
            format!("{data_path}/big"),
            vec![0u8; limit],
        )])
        .await;
    assert!(
        matches!(create, Err(Error::RequestTooLarge { .. })),
        "{create:?}"
    );
    assert!(!term.has_ended());
    latch.close().await.unwrap();
}

/// What a client without the election's credentials tries against a leader's term, each of which
/// the server must refuse; returns how many were refused.
async fn intrude(intruder: &Session, term: &Leadership, election: &str, data: &str) -> usize {
    let zk = intruder.client().unwrap();
    let mut refused = 0;
    let mut expect_no_auth = |what: &str, r: Result<(), zookeeper_client::Error>| {
        assert_eq!(r, Err(zookeeper_client::Error::NoAuth), "{what}");
        refused += 1;
    };
    expect_no_auth(
        "delete the leader's node",
        zk.delete(term.path(), None).await,
    );
    // Its own "fenced" write: a multi that checks the leader's node, then writes.
    let mut multi = zk.new_check_writer(term.path(), None).unwrap();
    multi.add_set_data(data, b"forged", None).unwrap();
    let forged = multi.commit().await.map(drop).map_err(|e| match e {
        zookeeper_client::CheckWriteError::CheckFailed { source }
        | zookeeper_client::CheckWriteError::RequestFailed { source }
        | zookeeper_client::CheckWriteError::OperationFailed { source, .. } => source,
    });
    expect_no_auth("a multi checking the leader's node", forged);
    let mut multi = zk.new_multi_writer();
    multi.add_set_data(data, b"forged", None).unwrap();
    let forged = multi.commit().await.map(drop).map_err(|e| match e {
        zookeeper_client::MultiWriteError::RequestFailed { source }
        | zookeeper_client::MultiWriteError::OperationFailed { source, .. } => source,
    });
    expect_no_auth("a multi writing the fenced data", forged);
    expect_no_auth(
        "write the fenced data",
        zk.set_data(data, b"forged", None).await.map(drop),
    );
    expect_no_auth(
        "take over the election path's ACL",
        zk.set_acl(election, &Acls::anyone_all(), None)
            .await
            .map(drop),
    );
    expect_no_auth(
        "queue a node of its own",
        zk.create(
            &format!("{election}/_c_00000000-0000-0000-0000-000000000000-latch-"),
            b"intruder",
            &CreateMode::EphemeralSequential.with_acls(Acls::anyone_all()),
        )
        .await
        .map(drop),
    );
    // Joining with a recipe: refused as a typed error, not a hang.
    let latch = LeaderLatch::builder(intruder, election)
        .id("intruder")
        .start()
        .await
        .unwrap();
    let err = within(
        BOUND,
        "the intruder's latch to be refused",
        latch.await_leadership(),
    )
    .await
    .unwrap_err();
    assert!(
        is_refusal(&err, &zookeeper_client::Error::NoAuth),
        "{err:?}"
    );
    latch.close().await.unwrap();
    refused + 1
}

#[tokio::test]
async fn with_creator_acls_an_intruder_can_neither_delete_the_leaders_node_nor_write_fenced_data() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let (a, b) = (authed(connect, "job").await, authed(connect, "job").await);
    let anonymous = session(connect, Duration::from_secs(10)).await;
    let mallory = authed(connect, "mallory").await;
    let root = testing::unique_path("acl");
    anonymous
        .client()
        .unwrap()
        .mkdir(&root, &persistent())
        .await
        .unwrap();
    let election = format!("{root}/election/jobs");
    let start = |s: &Session, id: &str| {
        LeaderLatch::builder(s, &election)
            .id(id)
            .acl(NodeAcl::creator_all())
            .start()
    };
    let first = start(&a, "a").await.unwrap();
    let term = within(BOUND, "a to lead", first.await_leadership())
        .await
        .unwrap();
    let second = start(&b, "b").await.unwrap();
    within(BOUND, "b to queue", second.wait_joined(BOUND))
        .await
        .unwrap();
    // The leader's fenced writes create nodes with the recipe's ACL.
    let data = format!("{root}/ledger");
    term.fenced([FencedOp::create(&data, b"batch 1".to_vec())])
        .await
        .unwrap();

    // Everything the recipe made carries the creator's identity only: the election path and its
    // missing ancestor (containers), the nodes, the fenced write's node.
    let zk = a.client().unwrap();
    for path in [
        format!("{root}/election"),
        election.clone(),
        term.path().to_owned(),
        data.clone(),
    ] {
        let (acl, _) = zk.get_acl(&path).await.unwrap();
        assert_eq!(acl.len(), 1, "{path}: {acl:?}");
        assert_eq!(acl[0].scheme(), "digest", "{path}: {acl:?}");
        assert!(acl[0].id().starts_with("job:"), "{path}: {acl:?}");
        assert_eq!(acl[0].permission(), Permission::ALL);
    }

    let mut attempts = 0;
    for intruder in [&anonymous, &mallory] {
        attempts += intrude(intruder, &term, &election, &data).await;
    }
    // Not even a listing: the election's participants are the creator's business.
    let listing = zookeeper_recipes::participants_on(&anonymous, &election).await;
    assert!(matches!(
        listing,
        Err(Error::Zookeeper(zookeeper_client::Error::NoAuth))
    ));

    // The election did not notice: same term, fenced writes still land, data untouched.
    assert!(
        !term.has_ended() && first.has_leadership(),
        "the leader lost its term"
    );
    term.fenced([FencedOp::set_data(&data, b"batch 2")])
        .await
        .unwrap();
    let (bytes, _) = zk.get_data(&data).await.unwrap();
    assert_eq!(bytes, b"batch 2");
    let ids: Vec<String> = first
        .participants()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(ids, ["a", "b"]);
    eprintln!("{attempts} intrusions refused; the term went on");

    // And a handover works as ever.
    first.close().await.unwrap();
    let next = within(BOUND, "b to lead after a closes", second.await_leadership())
        .await
        .unwrap();
    assert!(next.token() > term.token());
    next.fenced([FencedOp::set_data(&data, b"batch 3")])
        .await
        .unwrap();
    second.close().await.unwrap();
    assert!(children(&a, &election).await.is_empty());
}

#[tokio::test]
async fn an_existing_election_path_keeps_its_acl_until_an_operator_sets_one() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let operator = authed(connect, "job").await;
    let anonymous = session(connect, Duration::from_secs(10)).await;
    let election = testing::unique_path("existing-acl");
    // Made before the recipe ran, open to anyone.
    operator
        .client()
        .unwrap()
        .mkdir(&election, &persistent())
        .await
        .unwrap();
    let latch = LeaderLatch::builder(&operator, &election)
        .id("a")
        .acl(NodeAcl::creator_all())
        .start()
        .await
        .unwrap();
    let term = within(BOUND, "leadership", latch.await_leadership())
        .await
        .unwrap();
    // The node is the creator's, but deleting it is decided by its parent's ACL: anyone may.
    let intruder = anonymous.client().unwrap();
    intruder.delete(term.path(), None).await.unwrap();
    within(BOUND, "the term to end", term.ended()).await;
    assert_eq!(term.end_reason(), Some(TermEnd::NodeDeleted));
    // The operator's fix: set the path's ACL (zkCli: `setAcl <path> auth::cdrwa`).
    operator
        .client()
        .unwrap()
        .set_acl(&election, &Acls::creator_all(), None)
        .await
        .unwrap();
    let term = within(BOUND, "leadership again", latch.await_leadership())
        .await
        .unwrap();
    assert_eq!(
        intruder.delete(term.path(), None).await,
        Err(zookeeper_client::Error::NoAuth)
    );
    assert!(!term.has_ended());
    latch.close().await.unwrap();
}

#[tokio::test]
async fn a_leaders_node_rewritten_by_another_client_keeps_its_term_and_a_persistent_impostor_is_skipped()
 {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let admin = session(server.connect_string(), Duration::from_secs(10)).await;
    let zk = admin.client().unwrap();
    let path = testing::unique_path("rewritten");
    let data = format!("{path}-data");
    zk.mkdir(&data, &persistent()).await.unwrap();
    let latch = LeaderLatch::builder(&s, &path)
        .id("a")
        .start()
        .await
        .unwrap();
    let term = within(BOUND, "leadership", latch.await_leadership())
        .await
        .unwrap();

    // Its data rewritten: the node is still ours (same session, same czxid), so the term goes on;
    // participants report what the server holds.
    zk.set_data(term.path(), b"forged id", None).await.unwrap();
    term.fenced([FencedOp::set_data(&data, b"after rewrite")])
        .await
        .unwrap();
    let ids: Vec<String> = latch
        .participants()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(ids, ["forged id"]);
    assert!(!term.has_ended() && latch.has_leadership());

    // Replaced, in one multi, by a persistent node of the same name: the heartbeat finds a node
    // no session owns and ends the term, as for a deletion.
    let mut swap = zk.new_multi_writer();
    swap.add_delete(term.path(), None).unwrap();
    swap.add_create(term.path(), b"impostor", &persistent())
        .unwrap();
    swap.commit().await.unwrap();
    let swapped = Instant::now();
    within(BOUND, "the term to end after the swap", term.ended()).await;
    eprintln!("swap noticed after {} ms", ms(swapped.elapsed()));
    assert_eq!(term.end_reason(), Some(TermEnd::NodeDeleted));
    assert!(matches!(
        term.fenced([FencedOp::set_data(&data, b"stale")]).await,
        Err(Error::NotLeader { .. })
    ));
    // The latch rejoins with a new node. The impostor sorts first but is persistent, so it is
    // foreign: skipped (an `error!` names it) and the latch leads from its new node, with a
    // higher token. Before issue 43 the election stalled behind it (as Curator's still does)
    // until an operator deleted it.
    let next = within(
        BOUND,
        "leadership past the persistent impostor",
        latch.await_leadership(),
    )
    .await
    .unwrap();
    assert_ne!(next.path(), term.path());
    assert!(next.token() > term.token());
    let ids: Vec<String> = latch
        .participants()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(ids, ["a"], "the impostor is no participant");
    let nodes = election_nodes_on(&admin, &path).await.unwrap();
    let seen: Vec<(&str, bool, bool)> = nodes
        .iter()
        .map(|n| (n.id.as_str(), n.is_leader, n.foreign))
        .collect();
    assert_eq!(seen, [("impostor", false, true), ("a", true, false)]);
    zk.delete(term.path(), None).await.unwrap();
    latch.close().await.unwrap();
    assert!(children(&admin, &path).await.is_empty());
}

#[tokio::test]
async fn zookeeper_client_locks_take_part_under_curators_naming_and_are_foreign_otherwise() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let other = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("zk-client-locks");
    let zk = other.client().unwrap();
    zk.mkdir(&path, &persistent()).await.unwrap();
    let acl = Acls::anyone_all();
    // Foreign namings, each holding "its" lock: zookeeper-client's shared prefix (ZooKeeper's
    // LeaderElectionSupport), its custom prefix (ZooKeeper's WriteLock), and a Kazoo lock node.
    let shared_prefix = format!("{path}/n-");
    let shared = zk
        .lock(
            LockPrefix::new_shared(&shared_prefix).unwrap(),
            b"shared",
            acl,
        )
        .await
        .unwrap();
    let custom_prefix = format!("{path}/x-{}-", zk.session_id().0);
    let custom = zk
        .lock(
            LockPrefix::new_custom(custom_prefix, "x-").unwrap(),
            b"custom",
            acl,
        )
        .await
        .unwrap();
    zk.create(
        &format!("{path}/8f2e{}__lock__", "0".repeat(28)),
        b"kazoo",
        &CreateMode::EphemeralSequential.with_acls(acl),
    )
    .await
    .unwrap();
    // zookeeper-client's lock under Curator's naming is one of us.
    let curator_named = zk
        .lock(
            LockPrefix::new_curator(&path, "lock-").unwrap(),
            b"zk-client",
            acl,
        )
        .await
        .unwrap();
    let mutex = InterProcessMutex::builder(&s, &path)
        .id("rust")
        .build()
        .unwrap();
    assert!(
        within(BOUND, "try_acquire", mutex.try_acquire())
            .await
            .unwrap()
            .is_none(),
        "the mutex ignored a zookeeper-client lock with Curator's naming"
    );
    let ids: Vec<String> = mutex
        .participants()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(ids, ["zk-client"]);
    // Released: the mutex gets the lock, although the foreign nodes are older and still there.
    drop(curator_named);
    let guard = within(BOUND, "the mutex to acquire", mutex.acquire())
        .await
        .unwrap();
    assert_eq!(children(&s, &path).await.len(), 4);
    // And a zookeeper-client lock under Curator's naming waits for us.
    let acquired_at = Arc::new(std::sync::Mutex::new(None));
    let waiter = {
        let zk = zk.clone();
        let path = path.clone();
        let acquired_at = acquired_at.clone();
        tokio::spawn(async move {
            let lock = zk
                .lock(
                    LockPrefix::new_curator(&path, "lock-").unwrap(),
                    b"zk-client-2",
                    acl,
                )
                .await
                .unwrap();
            *acquired_at.lock().unwrap() = Some(Instant::now());
            drop(lock);
        })
    };
    eventually(
        BOUND,
        "the zookeeper-client lock to queue behind us",
        || async { (mutex.participants().await.unwrap().len() == 2).then_some(()) },
    )
    .await;
    let released_at = Instant::now();
    guard.release().await.unwrap();
    within(BOUND, "the zookeeper-client lock to be acquired", waiter)
        .await
        .unwrap();
    let acquired_at = acquired_at.lock().unwrap().unwrap();
    assert!(
        acquired_at >= released_at,
        "zookeeper-client's lock did not wait for ours"
    );
    drop((shared, custom));
}

/// What a fake server does with each connection.
#[derive(Clone, Copy, Debug)]
enum Fake {
    /// Writes bytes that are no ZooKeeper reply (a huge length prefix, then noise), reads on.
    Garbage,
    /// Answers like a web server, then closes.
    Http,
    /// Accepts and says nothing.
    Silent,
}

/// A local TCP server that is not ZooKeeper; counts the connections it accepted.
async fn fake_server(kind: Fake) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                match kind {
                    Fake::Garbage => {
                        let mut noise = vec![0x7f, 0xff, 0xff, 0xf0];
                        noise.extend(
                            (0..4092u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8),
                        );
                        let _ = conn.write_all(&noise).await;
                        while matches!(conn.read(&mut buf).await, Ok(n) if n > 0) {}
                    }
                    Fake::Http => {
                        let _ = conn.read(&mut buf).await;
                        let _ = conn
                            .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                            .await;
                    }
                    Fake::Silent => while matches!(conn.read(&mut buf).await, Ok(n) if n > 0) {},
                }
            });
        }
    });
    (addr, accepted)
}

#[tokio::test]
async fn a_connect_string_pointing_at_something_else_times_out_cleanly_without_spinning() {
    let connection_timeout = Duration::from_millis(1500);
    for kind in [Fake::Garbage, Fake::Http, Fake::Silent] {
        let (addr, accepted) = fake_server(kind).await;
        let started = Instant::now();
        let result = Session::builder(&addr)
            .session_timeout(Duration::from_secs(4))
            .connection_timeout(connection_timeout)
            .connect()
            .await;
        let took = started.elapsed();
        let connections = accepted.load(Ordering::SeqCst);
        eprintln!(
            "{kind:?}: {:?} after {} ms, {connections} connections",
            result.as_ref().err(),
            ms(took)
        );
        // A timeout, or (when the client gave up on every host within the round) what the hosts
        // did: `accepts connections but established no session`.
        assert!(
            matches!(&result, Err(Error::Timeout(_)))
                || matches!(&result, Err(Error::Unreachable { reason }) if reason.contains("established no session")),
            "{kind:?}: {result:?}"
        );
        assert!(
            took < slack(connection_timeout + Duration::from_secs(2)),
            "{kind:?}: {took:?}"
        );
        // Retries back off: a spinning client would open thousands of connections here.
        assert!(
            (1..=20).contains(&connections),
            "{kind:?}: {connections} connections"
        );
        // A recipe on such a session waits, bounded by the caller, and closes cleanly.
        let s = Session::builder(&addr)
            .connection_timeout(connection_timeout)
            .start()
            .unwrap();
        let latch = LeaderLatch::builder(&s, "/x")
            .id("a")
            .start()
            .await
            .unwrap();
        let wait = tokio::time::timeout(Duration::from_millis(300), latch.await_leadership()).await;
        assert!(wait.is_err(), "{kind:?}: leadership without a server?");
        within(BOUND, "the latch to close", latch.close())
            .await
            .unwrap();
        within(BOUND, "the session to close", s.close())
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_missing_chroot_is_created_a_provisioned_one_is_used_as_it_is_and_one_that_cannot_be_made_is_refused()
 {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let admin = session(server.connect_string(), Duration::from_secs(10)).await;
    let zk = admin.client().unwrap();
    // Missing, with a missing parent: created, as Curator creates its namespace.
    let chroot = format!("{}/app", testing::unique_path("chroot"));
    let s = session(
        &format!("{}{chroot}", server.connect_string()),
        Duration::from_secs(10),
    )
    .await;
    let latch = LeaderLatch::builder(&s, "/election/jobs")
        .id("a")
        .start()
        .await
        .unwrap();
    let term = within(
        BOUND,
        "leadership under the chroot",
        latch.await_leadership(),
    )
    .await
    .unwrap();
    let name = term.path().rsplit('/').next().unwrap().to_owned();
    assert_eq!(
        zk.list_children(&format!("{chroot}/election/jobs"))
            .await
            .unwrap(),
        [name]
    );
    latch.close().await.unwrap();
    s.close().await.unwrap();

    // Under an ephemeral node it cannot exist: connect says so instead of timing out, and
    // never hands out a session that could make no node.
    let blocker = testing::unique_path("chroot-blocker");
    zk.mkdir(&blocker, &persistent()).await.unwrap();
    let ephemeral = format!("{blocker}/ephemeral");
    make(&zk, &ephemeral, CreateMode::Ephemeral, Acls::anyone_all()).await;
    let refused = Session::builder(format!("{}{ephemeral}/app", server.connect_string()))
        .connection_timeout(Duration::from_secs(2))
        .connect()
        .await;
    match refused {
        Err(Error::Refused {
            operation, source, ..
        }) => {
            assert_eq!(operation, "create the chroot");
            assert_eq!(source, zookeeper_client::Error::NoChildrenForEphemerals);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Without permission to create it: the same.
    let read_only = format!("{blocker}/read-only");
    make(&zk, &read_only, CreateMode::Persistent, Acls::anyone_read()).await;
    let refused = Session::builder(format!("{}{read_only}/app", server.connect_string()))
        .connection_timeout(Duration::from_secs(2))
        .connect()
        .await;
    assert!(
        matches!(
            &refused,
            Err(Error::Refused {
                source: zookeeper_client::Error::NoAuth,
                ..
            })
        ),
        "{refused:?}"
    );
    // Provisioned by an operator under a parent closed to us: used as it is. (Creating it again
    // would be refused: the server checks CREATE on the parent before it sees the node exists.)
    let closed_parent = format!("{blocker}/closed");
    make(
        &zk,
        &closed_parent,
        CreateMode::Persistent,
        Acls::anyone_all(),
    )
    .await;
    let provisioned_chroot = format!("{closed_parent}/app");
    make(
        &zk,
        &provisioned_chroot,
        CreateMode::Persistent,
        Acls::anyone_all(),
    )
    .await;
    zk.set_acl(&closed_parent, &Acls::anyone_read(), None)
        .await
        .unwrap();
    let s = Session::builder(format!("{}{provisioned_chroot}", server.connect_string()))
        .connection_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let latch = LeaderLatch::builder(&s, "/election/jobs")
        .id("b")
        .start()
        .await
        .unwrap();
    within(
        BOUND,
        "leadership under the provisioned chroot",
        latch.await_leadership(),
    )
    .await
    .unwrap();
    latch.close().await.unwrap();
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_waiting_contenders_node_deleted_by_another_client_rejoins_at_once() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let (s1, s2) = (
        session(server.connect_string(), Duration::from_secs(10)).await,
        session(server.connect_string(), Duration::from_secs(10)).await,
    );
    let admin = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("waiter-deleted");
    let a = LeaderLatch::builder(&s1, &path)
        .id("a")
        .start()
        .await
        .unwrap();
    let first = within(BOUND, "a to lead", a.await_leadership())
        .await
        .unwrap();
    let b = LeaderLatch::builder(&s2, &path)
        .id("b")
        .start()
        .await
        .unwrap();
    let b_node = within(BOUND, "b to queue", b.wait_joined(BOUND))
        .await
        .unwrap();
    admin.client().unwrap().delete(&b_node, None).await.unwrap();
    // b watches its own node: it joins again at once, behind a, while a still leads (Curator's
    // waiter would only notice when its predecessor goes).
    let rejoined = eventually(BOUND, "b to join again with a new node", || async {
        b.our_path().filter(|p| *p != b_node)
    })
    .await;
    assert!(
        a.has_leadership(),
        "a lost its term when b's node was deleted"
    );
    assert_eq!(children(&admin, &path).await.len(), 2);
    a.close().await.unwrap();
    let term = within(BOUND, "b to lead after a left", b.await_leadership())
        .await
        .unwrap();
    assert_ne!(term.path(), b_node);
    assert_eq!(term.path(), rejoined);
    assert!(term.token() > first.token());
    b.close().await.unwrap();
    assert!(children(&admin, &path).await.is_empty());
}

/// An operator's `JobAdmin` that creates the job's `control` before any leader did gives it the
/// ACL it was handed (as the job's own nodes get the job's): another identity can then neither
/// pause nor trigger the job. A creator ACL needs a session with credentials.
#[tokio::test]
async fn a_job_admin_creates_control_with_its_acl_and_an_intruder_cannot_steer_the_job() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let (operator, mallory) = (
        authed(connect, "operator").await,
        authed(connect, "mallory").await,
    );
    let anonymous = session(connect, Duration::from_secs(10)).await;
    // An open parent first: the handle's ACL goes to every node it creates, missing ancestors
    // included (as a recipe's does), and the shared server's test root must stay open.
    let root = testing::unique_path("job-acl");
    anonymous
        .client()
        .unwrap()
        .mkdir(&root, &persistent())
        .await
        .unwrap();
    let path = format!("{root}/job");
    let err = JobAdmin::new(&anonymous, &path)
        .unwrap()
        .with_acl(NodeAcl::creator_all())
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                what: "node ACL",
                ..
            }
        ),
        "{err:?}"
    );

    let admin = JobAdmin::new(&operator, &path)
        .unwrap()
        .with_acl(NodeAcl::creator_all())
        .unwrap();
    admin.pause().await.unwrap();
    let zk = operator.client().unwrap();
    for node in [path.clone(), format!("{path}/control")] {
        let (acl, _) = zk.get_acl(&node).await.unwrap();
        assert_eq!(acl.len(), 1, "{node}: {acl:?}");
        assert_eq!(acl[0].scheme(), "digest", "{node}: {acl:?}");
        assert!(acl[0].id().starts_with("operator:"), "{node}: {acl:?}");
    }
    let intruder = JobAdmin::new(&mallory, &path).unwrap();
    for (what, refused) in [
        ("trigger", intruder.trigger().await.map(|_| ())),
        ("resume", intruder.resume().await),
    ] {
        let err = refused.expect_err(what);
        assert!(
            is_refusal(&err, &zookeeper_client::Error::NoAuth)
                || matches!(err, Error::Zookeeper(zookeeper_client::Error::NoAuth)),
            "{what}: {err:?}"
        );
    }
    assert!(
        admin.status().await.unwrap().paused,
        "the intruder resumed the job"
    );
}

/// The id of issue 43: an OSC title sequence ending in a bell, a newline, then a command.
const HOSTILE_ID: &str = "\u{1b}]0;pwned\u{7}\nrm -rf";

/// A persistent node named like a contender (by hand, a backup's restore, another tool) never
/// leaves by itself. Before issue 43, one sorting first stalled the election for good (every
/// latch waited behind it, the observer reported it as the leader). Now it is foreign: skipped
/// by the contenders and the observer, left out of the participants, listed marked by
/// `election_nodes_on`; one in the middle of the line does not break the handover past it.
#[tokio::test]
async fn a_persistent_node_named_like_a_contender_is_skipped_reported_and_not_a_participant() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let (s1, s2) = (
        session(server.connect_string(), Duration::from_secs(10)).await,
        session(server.connect_string(), Duration::from_secs(10)).await,
    );
    let admin = session(server.connect_string(), Duration::from_secs(10)).await;
    let zk = admin.client().unwrap();
    let path = testing::unique_path("foreign-in-line");
    zk.mkdir(&path, &persistent()).await.unwrap();
    let first = format!("{path}/x-latch-0000000000");
    zk.create(&first, HOSTILE_ID.as_bytes(), &persistent())
        .await
        .unwrap();
    let observer = LeaderObserver::builder(&s2, &path).start().await.unwrap();
    let a = LeaderLatch::builder(&s1, &path)
        .id("a")
        .start()
        .await
        .unwrap();
    let started = Instant::now();
    let a_term = within(
        BOUND,
        "a to lead past the foreign node that sorts first",
        a.await_leadership(),
    )
    .await
    .unwrap();
    eprintln!("a led {} ms after its start", ms(started.elapsed()));
    // A persistent node in the middle of the line, sequenced by the server like a contender.
    let middle_prefix = format!("{path}/_c_{}-latch-", uuid::Uuid::new_v4());
    let (_, sequence) = zk
        .create(
            &middle_prefix,
            b"middle",
            &CreateMode::PersistentSequential.with_acls(Acls::anyone_all()),
        )
        .await
        .unwrap();
    let middle = format!("{middle_prefix}{sequence}");
    let b = LeaderLatch::builder(&s2, &path)
        .id("b")
        .start()
        .await
        .unwrap();
    within(BOUND, "b to join", b.wait_joined(BOUND))
        .await
        .unwrap();
    let leader = eventually(BOUND, "the observer to report a", || async {
        observer.leader().filter(|l| l.id == "a")
    })
    .await;
    assert_eq!(leader.token, a_term.token());

    let ids: Vec<String> = participants_on(&admin, &path)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(ids, ["a", "b"], "foreign nodes are no participants");
    let nodes = election_nodes_on(&admin, &path).await.unwrap();
    let seen: Vec<(&str, bool, bool)> = nodes
        .iter()
        .map(|n| (n.id.as_str(), n.is_leader, n.foreign))
        .collect();
    assert_eq!(
        seen,
        [
            (HOSTILE_ID, false, true),
            ("a", true, false),
            ("middle", false, true),
            ("b", false, false)
        ]
    );
    assert_eq!(nodes[0].name, "x-latch-0000000000");

    // b waits behind a, past the middle node: a's close hands over to b.
    assert!(!b.has_leadership());
    a.close().await.unwrap();
    let b_term = within(
        BOUND,
        "b to lead past the foreign node ahead of it",
        b.await_leadership(),
    )
    .await
    .unwrap();
    assert!(b_term.token() > a_term.token());
    eventually(BOUND, "the observer to report b", || async {
        observer.leader().filter(|l| l.id == "b")
    })
    .await;
    b.close().await.unwrap();
    observer.close().await.unwrap();
    zk.delete(&first, None).await.unwrap();
    zk.delete(&middle, None).await.unwrap();
    assert!(children(&admin, &path).await.is_empty());
}

/// 200,000 children named like contenders (persistent, as a runaway script would leave them):
/// before issue 43 every contender step read them all, and `participants()` read each one's
/// data. Now the first listing gives `TooManyChildren` (within 5 s), the latch stops and deletes
/// its node, and the observer stops with the same error.
#[tokio::test]
async fn an_election_path_with_200000_children_is_refused_with_too_many_children_within_5s() {
    if !zookeeper() {
        return;
    }
    const CHILDREN: usize = 200_000;
    // A server of its own: 200,000 nodes would burden the shared one's other tests.
    let server = common::own_server().await;
    let connect = server.connect_string();
    let admin = session(connect, Duration::from_secs(10)).await;
    let zk = admin.client().unwrap();
    let path = testing::unique_path("too-many");
    zk.mkdir(&path, &persistent()).await.unwrap();
    let made = Instant::now();
    let prefix = format!("{path}/_c_{}-latch-", uuid::Uuid::new_v4());
    let options = persistent();
    for batch in (0..CHILDREN).collect::<Vec<_>>().chunks(8_000) {
        // Eight multis of 1,000 creates in flight at a time.
        let mut commits = Vec::new();
        for part in batch.chunks(1_000) {
            let mut multi = zk.new_multi_writer();
            for i in part {
                multi
                    .add_create(&format!("{prefix}{i:010}"), b"", &options)
                    .unwrap();
            }
            commits.push(async move { multi.commit().await });
        }
        for result in futures::future::join_all(commits).await {
            result.unwrap();
        }
    }
    eprintln!("{CHILDREN} children made in {} ms", ms(made.elapsed()));

    // What a plain listing costs (zookeeper-client reads the reply whole; the server does not
    // hold a reply to jute.maxbuffer).
    let listed = Instant::now();
    let raw = zk.list_children(&path).await;
    let bytes: usize = raw
        .as_ref()
        .map(|c| c.iter().map(|n| n.len() + 4).sum())
        .unwrap_or(0);
    eprintln!(
        "a raw listing: {:?} children, {bytes} bytes of names, in {} ms",
        raw.as_ref().map(Vec::len),
        ms(listed.elapsed())
    );
    assert_eq!(raw.map(|c| c.len()).ok(), Some(CHILDREN));

    let too_many = |e: &Error| {
        matches!(e, Error::TooManyChildren { path: p, count, max }
            if *p == path && *count >= CHILDREN && *max == MAX_CHILDREN)
    };
    let five = Duration::from_secs(5);
    let s = session(connect, Duration::from_secs(10)).await;
    let latch = LeaderLatch::builder(&s, &path)
        .id("a")
        .start()
        .await
        .unwrap();
    let started = Instant::now();
    let err = within(five, "the latch to give up", latch.await_leadership())
        .await
        .unwrap_err();
    eprintln!("latch: {err} after {} ms", ms(started.elapsed()));
    assert!(too_many(&err), "{err:?}");
    assert!(too_many(&latch.failure().unwrap()));
    let started = Instant::now();
    let err = within(five, "participants to give up", latch.participants())
        .await
        .unwrap_err();
    eprintln!("participants: {err} after {} ms", ms(started.elapsed()));
    assert!(too_many(&err), "{err:?}");
    let observer = LeaderObserver::builder(&s, &path).start().await.unwrap();
    let started = Instant::now();
    let err = eventually(five, "the observer to stop", || async {
        observer.failure()
    })
    .await;
    eprintln!("observer: {err} after {} ms", ms(started.elapsed()));
    assert!(too_many(&err), "{err:?}");
    // The latch deleted its node: only the 200,000 are left.
    let stat = eventually(five, "the latch's node to go", || async {
        zk.check_stat(&path)
            .await
            .unwrap()
            .filter(|stat| stat.num_children as usize == CHILDREN)
    })
    .await;
    assert_eq!(stat.num_children as usize, CHILDREN);
    latch.close().await.unwrap();
    observer.close().await.unwrap();
}
