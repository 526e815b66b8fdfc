//! InterProcessMutex against real ZooKeeper: Curator's TestInterProcessMutexBase scenarios, and
//! the loss signal Curator does not have.

use zookeeper_recipes_rigs::fixtures as common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{BOUND, children, eventually, ms, session, shared_server, within, zookeeper};
use zookeeper_recipes::{FencingToken, InterProcessMutex, Session};
use zookeeper_recipes_testing as testing;

/// One hold: the task, its token, when it began and ended.
type Hold = (usize, FencingToken, Instant, Instant);

#[tokio::test]
async fn ten_tasks_on_three_sessions_never_hold_the_lock_together() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let ss: Vec<Session> = futures::future::join_all(
        (0..3).map(|_| session(server.connect_string(), Duration::from_secs(10))),
    )
    .await;
    let path = testing::unique_path("contention");
    let holders = Arc::new(AtomicUsize::new(0));
    let history: Arc<Mutex<Vec<Hold>>> = Arc::default();
    let mut tasks = Vec::new();
    for t in 0..10 {
        let mutex = InterProcessMutex::builder(&ss[t % 3], &path)
            .id(format!("t{t}"))
            .build()
            .unwrap();
        let holders = holders.clone();
        let history = history.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..3 {
                let guard = mutex.acquire().await.unwrap();
                let start = Instant::now();
                let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                assert_eq!(now, 1, "two holders at once");
                assert!(guard.is_held());
                tokio::time::sleep(Duration::from_millis(5)).await;
                holders.fetch_sub(1, Ordering::SeqCst);
                let end = Instant::now();
                history.lock().unwrap().push((t, guard.token(), start, end));
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        within(BOUND * 3, "every task to finish its three holds", task)
            .await
            .unwrap();
    }
    let mut h = history.lock().unwrap().clone();
    assert_eq!(h.len(), 30);
    h.sort_by_key(|x| x.2);
    for w in h.windows(2) {
        assert!(w[0].3 <= w[1].2, "holds overlap: {:?} / {:?}", w[0], w[1]);
        assert!(w[1].1 > w[0].1, "tokens rise from hold to hold");
    }
    assert!(children(&ss[0], &path).await.is_empty());
}

#[tokio::test]
async fn waiters_are_served_in_request_order() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("fifo");
    let first = InterProcessMutex::builder(&s, &path)
        .id("first")
        .build()
        .unwrap();
    let guard = first.acquire().await.unwrap();
    let order: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut waiters = Vec::new();
    for i in 0..4 {
        let m = InterProcessMutex::builder(&s, &path)
            .id(format!("w{i}"))
            .build()
            .unwrap();
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let g = m.acquire().await.unwrap();
            order.lock().unwrap().push(m.id().to_owned());
            g.release().await.unwrap();
        }));
        // Queue strictly one after another.
        eventually(BOUND, "the waiter to be queued", || {
            let f = first.participants();
            async move { f.await.ok().filter(|p| p.len() == i + 2) }
        })
        .await;
    }
    guard.release().await.unwrap();
    for w in waiters {
        within(BOUND, "every waiter to get the lock", w)
            .await
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), ["w0", "w1", "w2", "w3"]);
}

#[tokio::test]
async fn try_acquire_and_acquire_timeout_give_up_without_leaving_a_node() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("try");
    let mutex = InterProcessMutex::builder(&s, &path)
        .id("a")
        .build()
        .unwrap();
    let guard = mutex
        .try_acquire()
        .await
        .unwrap()
        .expect("a free lock is taken by try_acquire");
    assert!(
        mutex.try_acquire().await.unwrap().is_none(),
        "a held lock is not"
    );
    let started = Instant::now();
    assert!(
        mutex
            .acquire_timeout(Duration::from_millis(200))
            .await
            .unwrap()
            .is_none()
    );
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(
        children(&s, &path).await.len(),
        1,
        "the failed attempts withdrew their nodes"
    );
    // Not re-entrant: the holder's own second acquire waits like anyone else's.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), mutex.acquire())
            .await
            .is_err()
    );
    guard.release().await.unwrap();
    eventually(
        BOUND,
        "no node after release and the dropped acquire",
        || {
            let s = s.clone();
            let path = path.clone();
            async move { children(&s, &path).await.is_empty().then_some(()) }
        },
    )
    .await;
}

#[tokio::test]
async fn a_dropped_acquire_leaves_no_node() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("dropped-acquire");
    let holder = InterProcessMutex::builder(&s, &path)
        .id("holder")
        .build()
        .unwrap();
    let guard = holder.acquire().await.unwrap();
    let waiter = InterProcessMutex::builder(&s, &path)
        .id("waiter")
        .build()
        .unwrap();
    // Dropped while waiting in line.
    let pending = tokio::time::timeout(Duration::from_millis(300), waiter.acquire()).await;
    assert!(pending.is_err());
    // Dropped right away, with its create in flight.
    drop(tokio::time::timeout(Duration::from_millis(1), waiter.acquire()).await);
    eventually(BOUND, "only the holder's node left", || {
        let s = s.clone();
        let path = path.clone();
        async move { (children(&s, &path).await.len() == 1).then_some(()) }
    })
    .await;
    drop(guard);
    eventually(BOUND, "no node after the guard was dropped", || {
        let s = s.clone();
        let path = path.clone();
        async move { children(&s, &path).await.is_empty().then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn killing_the_holders_session_fires_its_lost_signal_and_the_next_waiter_gets_the_lock() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let proxy = common::proxy_to(server).await;
    let holder_session = session(&proxy.connect_string(), Duration::from_secs(4)).await;
    let other = session(server.connect_string(), Duration::from_secs(4)).await;
    let path = testing::unique_path("holder-killed");
    let holder = InterProcessMutex::builder(&holder_session, &path)
        .id("holder")
        .build()
        .unwrap();
    let guard = holder.acquire().await.unwrap();
    let lost = guard.lost_token();
    let waiter = InterProcessMutex::builder(&other, &path)
        .id("waiter")
        .build()
        .unwrap();
    let next = tokio::spawn(async move { waiter.acquire().await.unwrap() });
    eventually(BOUND, "the waiter to queue", || {
        let f = holder.participants();
        async move { f.await.ok().filter(|p| p.len() == 2) }
    })
    .await;

    let killed = Instant::now();
    common::expire_behind(server, &proxy, &holder_session).await;
    within(BOUND, "the holder's lost signal", lost.cancelled()).await;
    let lost_after = killed.elapsed();
    assert!(!guard.is_held());
    let next_guard = within(BOUND, "the waiter to get the lock", next)
        .await
        .unwrap();
    eprintln!(
        "holder's session killed: lost signal after {}ms, waiter held the lock after {}ms",
        ms(lost_after),
        ms(killed.elapsed())
    );
    assert!(next_guard.token() > guard.token());
    proxy.heal();
    drop(guard);
    next_guard.release().await.unwrap();
}

#[tokio::test]
async fn deleting_the_holders_node_fires_lost() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let admin = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("node-deleted");
    let mutex = InterProcessMutex::builder(&s, &path)
        .id("a")
        .build()
        .unwrap();
    let guard = mutex.acquire().await.unwrap();
    admin
        .client()
        .unwrap()
        .delete(guard.leadership().path(), None)
        .await
        .unwrap();
    within(BOUND, "lost after the node was deleted", guard.lost()).await;
    assert!(!guard.is_held());
    guard.release().await.unwrap();
}

/// The window: `acquire` sees a hold only when its future runs, while the contender's task
/// claims and holds on its own. A hold that ends in between (here a suspension, which ends it
/// under the Standard policy) must not surface as `Error::Closed` on a healthy session: acquire
/// queues again with a new node, as Curator's `acquire()` retries until its time runs out. The
/// window is opened deterministically by polling the acquire once (which starts its contender)
/// and not again until the hold is over.
#[tokio::test]
async fn a_hold_that_ends_before_acquire_returns_it_is_queued_for_again_not_closed() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let proxy = common::proxy_to(server).await;
    let s = session(&proxy.connect_string(), Duration::from_secs(4)).await;
    let admin = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("hold-ended-unseen");
    let mutex = InterProcessMutex::builder(&s, &path)
        .id("a")
        .build()
        .unwrap();

    let acquire = mutex.acquire();
    tokio::pin!(acquire);
    assert!(
        futures::poll!(&mut acquire).is_pending(),
        "no hold before the node exists"
    );
    let first = eventually(BOUND, "the first node to be created", || {
        let admin = admin.clone();
        let path = path.clone();
        async move { children(&admin, &path).await.into_iter().next() }
    })
    .await;
    // The claim follows the create's reply with no request of its own: give the contender's
    // task a moment to make it before the link is cut.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut states = common::StateRecorder::start(&s);
    proxy.cut();
    states
        .expect(zookeeper_recipes::ConnectionState::Suspended, BOUND)
        .await;
    proxy.heal();
    states
        .expect(zookeeper_recipes::ConnectionState::Reconnected, BOUND)
        .await;

    let guard = within(
        BOUND,
        "acquire to return after the unseen hold ended",
        &mut acquire,
    )
    .await
    .expect("acquire on a healthy session returns a hold, not an error");
    assert!(guard.is_held());
    let node = guard.leadership().path().to_owned();
    assert!(
        !node.ends_with(&first),
        "the hold is on a new node, not the one whose hold ended ({first})"
    );
    assert_eq!(
        children(&admin, &path).await,
        vec![node.rsplit('/').next().unwrap().to_owned()],
        "the node of the ended hold was deleted before queueing again"
    );
    guard.release().await.unwrap();
}
