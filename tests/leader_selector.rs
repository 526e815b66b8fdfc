//! LeaderSelector against real ZooKeeper: Curator's TestLeaderSelector scenarios.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{children, eventually, ms, own_server, session, shared_server, within, zookeeper};
use zookeeper_recipes::testing;
use zookeeper_recipes::{
    ErrorPolicy, FencingToken, LeaderSelector, Leadership, SelectorState, Session, TermEnd,
};

const BOUND: Duration = Duration::from_secs(20);

/// One term as the closure saw it.
#[derive(Debug, Clone)]
struct Term {
    who: String,
    token: FencingToken,
    start: Instant,
    end: Instant,
    cancelled: bool,
}

#[derive(Clone, Default)]
struct History(Arc<Mutex<Vec<Term>>>);

impl History {
    fn terms(&self) -> Vec<Term> {
        self.0.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    fn assert_no_overlap(&self) {
        let mut terms = self.terms();
        terms.sort_by_key(|t| t.start);
        for w in terms.windows(2) {
            assert!(
                w[0].end <= w[1].start,
                "terms overlap: {:?} and {:?}",
                w[0],
                w[1]
            );
        }
    }
}

/// A closure that holds each term for `hold` (or until the term ends) and records it.
fn holder(
    who: &str,
    history: &History,
    hold: Duration,
) -> impl Fn(Leadership) -> futures::future::BoxFuture<'static, Result<(), std::io::Error>>
+ Send
+ Sync
+ 'static {
    let who = who.to_owned();
    let history = history.clone();
    move |term: Leadership| {
        let who = who.clone();
        let history = history.clone();
        Box::pin(async move {
            let start = Instant::now();
            let stop = term.cancelled();
            let cancelled = tokio::select! {
                _ = tokio::time::sleep(hold) => false,
                _ = stop.cancelled() => true,
            };
            history.0.lock().unwrap().push(Term {
                who,
                token: term.token(),
                start,
                end: Instant::now(),
                cancelled,
            });
            Ok(())
        })
    }
}

async fn sessions(connect: &str, n: usize) -> Vec<Session> {
    futures::future::join_all((0..n).map(|_| session(connect, Duration::from_secs(10)))).await
}

#[tokio::test]
async fn auto_requeue_gives_every_participant_terms_that_never_overlap() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let path = testing::unique_path("requeue");
    let ss = sessions(server.connect_string(), 3).await;
    let history = History::default();
    let mut selectors = Vec::new();
    for (i, s) in ss.iter().enumerate() {
        let id = format!("s{i}");
        selectors.push(
            LeaderSelector::builder(s, &path)
                .id(&id)
                .auto_requeue(true)
                .start(holder(&id, &history, Duration::from_millis(40)))
                .await
                .unwrap(),
        );
    }
    eventually(BOUND, "nine terms", || {
        let n = history.count();
        async move { (n >= 9).then_some(()) }
    })
    .await;
    for s in &selectors {
        s.close().await.unwrap();
    }
    let terms = history.terms();
    for i in 0..3 {
        let n = terms.iter().filter(|t| t.who == format!("s{i}")).count();
        assert!(n >= 2, "s{i} led only {n} times in {terms:?}");
    }
    history.assert_no_overlap();
    let mut sorted = terms.clone();
    sorted.sort_by_key(|t| t.start);
    for w in sorted.windows(2) {
        assert!(w[1].token > w[0].token, "tokens rise from term to term");
    }
    assert!(children(&ss[0], &path).await.is_empty());
}

#[tokio::test]
async fn interrupt_leadership_ends_the_term_and_requeues_even_when_called_twice() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("interrupt");
    let history = History::default();
    let selector = LeaderSelector::builder(&s, &path)
        .id("a")
        .auto_requeue(true)
        .start(holder("a", &history, Duration::from_secs(600)))
        .await
        .unwrap();
    let first = within(BOUND, "the first term", selector.await_leadership())
        .await
        .unwrap();
    selector.interrupt_leadership();
    selector.interrupt_leadership(); // CURATOR-518/671: a second interrupt must not break requeue
    within(BOUND, "the first term to end", first.ended()).await;
    let second = within(BOUND, "a second term after the interrupt", async {
        loop {
            let t = selector.await_leadership().await.unwrap();
            if t != first {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(second.token() > first.token());
    let terms = history.terms();
    assert!(terms[0].cancelled, "the closure saw its term cancelled");
    selector.interrupt_leadership();
    eventually(BOUND, "a third term", || {
        let n = history.count();
        async move { (n >= 2).then_some(()) }
    })
    .await;
    within(BOUND, "leading again", selector.await_leadership())
        .await
        .unwrap();
    selector.close().await.unwrap();
}

#[tokio::test]
async fn closing_while_leader_cancels_the_closure_and_deletes_the_node() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("close-leader");
    let history = History::default();
    let selector = LeaderSelector::builder(&s, &path)
        .id("a")
        .start(holder("a", &history, Duration::from_secs(600)))
        .await
        .unwrap();
    let term = within(BOUND, "leadership", selector.await_leadership())
        .await
        .unwrap();
    assert_eq!(children(&s, &path).await.len(), 1);
    within(BOUND, "close", selector.close()).await.unwrap();
    assert!(term.has_ended());
    assert_eq!(
        term.end_reason(),
        Some(TermEnd::Closed),
        "a term ended by close() says so"
    );
    let terms = history.terms();
    assert_eq!(terms.len(), 1, "the closure returned before close finished");
    assert!(terms[0].cancelled);
    assert!(
        children(&s, &path).await.is_empty(),
        "close deleted the node"
    );
    assert_eq!(selector.state(), SelectorState::Closed);
}

#[tokio::test]
async fn without_auto_requeue_the_selector_leads_once_and_requeue_queues_it_again() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("once");
    let history = History::default();
    let selector = LeaderSelector::builder(&s, &path)
        .id("a")
        .start(holder("a", &history, Duration::from_millis(20)))
        .await
        .unwrap();
    let mut state = selector.watch_state();
    within(
        BOUND,
        "idle after one term",
        state.wait_for(|s| *s == SelectorState::Idle),
    )
    .await
    .unwrap();
    assert_eq!(history.count(), 1);
    assert!(
        children(&s, &path).await.is_empty(),
        "the finished term relinquished its node"
    );
    assert!(selector.requeue());
    eventually(BOUND, "a second term after requeue", || {
        let n = history.count();
        async move { (n == 2).then_some(()) }
    })
    .await;
    within(
        BOUND,
        "idle again",
        state.wait_for(|s| *s == SelectorState::Idle),
    )
    .await
    .unwrap();
    selector.close().await.unwrap();
}

#[tokio::test]
async fn a_panicking_or_failing_closure_does_not_wedge_the_election() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let ss = sessions(server.connect_string(), 2).await;
    let path = testing::unique_path("panic");
    let panics = Arc::new(AtomicUsize::new(0));
    let p = panics.clone();
    let bad = LeaderSelector::builder(&ss[0], &path)
        .id("bad")
        .auto_requeue(true)
        .start(move |_term: Leadership| {
            let n = p.fetch_add(1, Ordering::SeqCst);
            async move {
                if n.is_multiple_of(2) {
                    panic!("closure panics on purpose");
                }
                Err::<(), _>(std::io::Error::other("closure fails on purpose"))
            }
        })
        .await
        .unwrap();
    let history = History::default();
    let good = LeaderSelector::builder(&ss[1], &path)
        .id("good")
        .auto_requeue(true)
        .start(holder("good", &history, Duration::from_millis(20)))
        .await
        .unwrap();
    eventually(
        BOUND,
        "the good selector to lead three times alongside the bad one",
        || {
            let n = history.count();
            async move { (n >= 3).then_some(()) }
        },
    )
    .await;
    assert!(
        panics.load(Ordering::SeqCst) >= 2,
        "the bad selector kept being elected after panicking"
    );
    bad.close().await.unwrap();
    good.close().await.unwrap();
    assert!(children(&ss[0], &path).await.is_empty());
}

#[tokio::test]
async fn a_closure_that_ignores_its_cancelled_term_is_aborted_after_the_grace_period() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("grace");
    let finished = Arc::new(AtomicUsize::new(0));
    let f = finished.clone();
    let selector = LeaderSelector::builder(&s, &path)
        .id("stubborn")
        .grace(Duration::from_millis(300))
        .start(move |_term: Leadership| {
            let f = f.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(600)).await;
                f.fetch_add(1, Ordering::SeqCst);
                Ok::<(), std::io::Error>(())
            }
        })
        .await
        .unwrap();
    let term = within(BOUND, "leadership", selector.await_leadership())
        .await
        .unwrap();
    let started = Instant::now();
    selector.interrupt_leadership();
    let mut state = selector.watch_state();
    within(
        BOUND,
        "the selector to give up the term",
        state.wait_for(|s| *s == SelectorState::Idle),
    )
    .await
    .unwrap();
    let took = started.elapsed();
    eprintln!(
        "stubborn closure aborted and node released {}ms after the interrupt (grace 300ms)",
        ms(took)
    );
    assert!(term.has_ended());
    assert!(
        took >= Duration::from_millis(300),
        "the closure got its grace period"
    );
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "the closure was aborted, not finished"
    );
    assert!(children(&s, &path).await.is_empty());
    selector.close().await.unwrap();
}

async fn server_stop_cancels_the_term(policy: ErrorPolicy) -> Duration {
    let server = own_server().await;
    let timeout = Duration::from_secs(2);
    let s = session(server.connect_string(), timeout).await;
    let path = testing::unique_path("stop-mid-term");
    let history = History::default();
    let selector = LeaderSelector::builder(&s, &path)
        .id("a")
        .error_policy(policy)
        .start(holder("a", &history, Duration::from_secs(600)))
        .await
        .unwrap();
    let term = within(BOUND, "leadership", selector.await_leadership())
        .await
        .unwrap();
    let stopped = Instant::now();
    server.stop().await.unwrap();
    within(BOUND, "the term to be cancelled", term.ended()).await;
    let took = stopped.elapsed();
    selector.close().await.unwrap();
    took
}

#[tokio::test]
async fn server_stopped_mid_term_cancels_the_term_within_the_policy() {
    if !zookeeper() {
        return;
    }
    let standard = server_stop_cancels_the_term(ErrorPolicy::Standard).await;
    let session_policy = server_stop_cancels_the_term(ErrorPolicy::SessionExpired).await;
    eprintln!(
        "server stopped mid-term, timeout 2000ms: term cancelled after {}ms (Standard: at Suspended), {}ms (SessionExpired: at Lost)",
        ms(standard),
        ms(session_policy)
    );
    assert!(
        standard < Duration::from_millis(1500),
        "Standard cancels at suspension, not at loss"
    );
    assert!(
        session_policy <= Duration::from_millis(2300),
        "SessionExpired cancels by the session deadline"
    );
    assert!(session_policy > standard);
}

#[tokio::test]
async fn session_expiry_mid_term_cancels_it_and_a_later_term_has_a_higher_token() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let proxy = common::proxy_to(server).await;
    let s = session(&proxy.connect_string(), Duration::from_secs(4)).await;
    let path = testing::unique_path("expiry-mid-term");
    let history = History::default();
    let selector = LeaderSelector::builder(&s, &path)
        .id("a")
        .auto_requeue(true)
        .error_policy(ErrorPolicy::SessionExpired)
        .start(holder("a", &history, Duration::from_secs(600)))
        .await
        .unwrap();
    let first = within(BOUND, "leadership", selector.await_leadership())
        .await
        .unwrap();
    common::expire_behind(server, &proxy, &s).await;
    within(
        BOUND,
        "the term to be cancelled by the expiry",
        first.ended(),
    )
    .await;
    let second = within(BOUND, "a new term on the new session", async {
        loop {
            let t = selector.await_leadership().await.unwrap();
            if t != first {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(second.token() > first.token());
    assert_ne!(second.session_id(), first.session_id());
    selector.close().await.unwrap();
}

#[tokio::test]
async fn selector_participants_list_everyone_queued_with_the_leader_first() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let ss = sessions(server.connect_string(), 2).await;
    let path = testing::unique_path("selector-participants");
    let history = History::default();
    let a = LeaderSelector::builder(&ss[0], &path)
        .id("a")
        .start(holder("a", &history, Duration::from_secs(600)))
        .await
        .unwrap();
    within(BOUND, "a to lead", a.await_leadership())
        .await
        .unwrap();
    let b = LeaderSelector::builder(&ss[1], &path)
        .id("b")
        .start(holder("b", &history, Duration::from_secs(600)))
        .await
        .unwrap();
    let ps = eventually(BOUND, "both queued", || {
        let f = b.participants();
        async move { f.await.ok().filter(|p| p.len() == 2) }
    })
    .await;
    assert_eq!(ps[0].id, "a");
    assert!(ps[0].is_leader);
    assert_eq!(ps[1].id, "b");
    assert!(!ps[1].is_leader);
    assert_eq!(b.leader().await.unwrap().id, "a");
    a.close().await.unwrap();
    within(BOUND, "b after a closed", b.await_leadership())
        .await
        .unwrap();
    b.close().await.unwrap();
}
