//! LeaderSelector against real ZooKeeper: Curator's TestLeaderSelector scenarios.

use zookeeper_recipes_rigs::fixtures as common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    BOUND, children, eventually, ms, own_server, session, sessions, shared_server, within,
    zookeeper,
};
use zookeeper_recipes::{
    ErrorPolicy, FencingToken, LeaderSelector, Leadership, SelectorState, TermEnd,
};
use zookeeper_recipes_testing as testing;

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
            let stop = term.cancellation_token();
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

#[tokio::test]
async fn auto_requeue_gives_every_participant_terms_that_never_overlap() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let path = testing::unique_path("requeue");
    let ss = sessions(server.connect_string(), 3, Duration::from_secs(10)).await;
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
    let ss = sessions(server.connect_string(), 2, Duration::from_secs(10)).await;
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
    assert_eq!(
        selector.overruns(),
        1,
        "the abort was counted as an overrun"
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
    let ss = sessions(server.connect_string(), 2, Duration::from_secs(10)).await;
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

/// The tracing records of this thread (the test's current-thread runtime runs the selector's
/// tasks on it), as text.
#[derive(Clone, Default)]
struct LogCapture(Arc<Mutex<Vec<u8>>>);

/// Keeps a second dispatcher registered while a capture runs. With exactly one registered,
/// tracing-core computes a callsite's interest from the default dispatcher of whichever thread
/// hits it first: another test's thread (no subscriber) would cache "never" for the event this
/// test waits for. With two, every callsite's interest is taken from all of them.
struct NotJustOne(#[allow(dead_code)] tracing::Dispatch);

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    /// Captures `warn!` and above of this thread until the guard is dropped.
    fn start() -> (Self, (NotJustOne, tracing::subscriber::DefaultGuard)) {
        let second = NotJustOne(tracing::Dispatch::new(
            tracing::subscriber::NoSubscriber::default(),
        ));
        let capture = LogCapture::default();
        let writer = capture.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        (capture, (second, guard))
    }

    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// A closure stuck in blocking code outlives the abort of its task: the grace-period abort
/// cannot stop a thread. The selector says so (an `error!` with the path, the token and how long
/// the closure ran on after its term ended) and the election goes on: the node is released and
/// the next leader starts while the stuck work still runs, which is what fencing is for.
#[tokio::test]
async fn a_closure_stuck_in_blocking_code_is_reported_when_aborted_and_the_next_term_starts() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let ss = sessions(server.connect_string(), 2, Duration::from_secs(10)).await;
    let path = testing::unique_path("overrun");
    let (logs, _guard) = LogCapture::start();
    let grace = Duration::from_millis(300);
    let stuck_for = Duration::from_secs(4);
    let blocking_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = blocking_done.clone();
    let stuck = LeaderSelector::builder(&ss[0], &path)
        .id("stuck")
        .grace(grace)
        .start(move |_term: Leadership| {
            let done = done.clone();
            async move {
                // Ignores its term's cancellation: a blocking call, awaited.
                tokio::task::spawn_blocking(move || {
                    std::thread::sleep(stuck_for);
                    done.store(true, Ordering::SeqCst);
                })
                .await
                .unwrap();
                Ok::<(), std::io::Error>(())
            }
        })
        .await
        .unwrap();
    let term = within(
        BOUND,
        "the stuck selector to lead",
        stuck.await_leadership(),
    )
    .await
    .unwrap();
    let history = History::default();
    let next = LeaderSelector::builder(&ss[1], &path)
        .id("next")
        .start(holder("next", &history, Duration::from_secs(600)))
        .await
        .unwrap();
    eventually(BOUND, "the next selector to queue", || {
        let f = next.participants();
        async move { f.await.ok().filter(|p| p.len() == 2) }
    })
    .await;

    let interrupted = Instant::now();
    stuck.interrupt_leadership();
    let next_term = within(
        BOUND,
        "the next term to start after the stuck closure's abort",
        next.await_leadership(),
    )
    .await
    .unwrap();
    let took = interrupted.elapsed();
    eprintln!(
        "stuck closure: next term started {}ms after the interrupt (grace {}ms)",
        ms(took),
        ms(grace)
    );
    assert!(next_term.token() > term.token());
    assert!(
        !blocking_done.load(Ordering::SeqCst),
        "the next term started while the stuck closure's blocking work still ran"
    );
    let report: Vec<String> = logs
        .lines()
        .into_iter()
        .filter(|l| l.contains("ERROR") && l.contains("overran_ms="))
        .collect();
    assert_eq!(
        report.len(),
        1,
        "one error! report of the overrun, with overran_ms; logs: {:#?}",
        logs.lines()
    );
    assert!(
        report[0].contains(&format!("token={}", term.token())) && report[0].contains(&path),
        "the report names the token and the path: {}",
        report[0]
    );
    // The application sees it too, without reading logs.
    assert_eq!(stuck.overruns(), 1, "one overrun counted");
    let overrun = stuck
        .watch_overrun()
        .borrow()
        .clone()
        .expect("the overrun is on the selector's watch");
    assert_eq!(overrun.token, term.token());
    assert_eq!(overrun.node, term.path());
    assert_eq!(overrun.reason, Some(TermEnd::Interrupted));
    assert_eq!(overrun.count, 1);
    assert!(
        overrun.overran >= grace,
        "it ran on at least the grace period after its term ended: {:?}",
        overrun.overran
    );
    assert_eq!(stuck.last_overrun(), Some(overrun));
    next.close().await.unwrap();
    stuck.close().await.unwrap();
}

/// A closure that never yields cannot even be aborted until it does. The selector must not wait
/// for that (it would wedge the election for as long as the closure runs on): after the grace
/// period it aborts, reports, releases the node, and the next term starts while the closure is
/// still running on its worker thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closure_that_never_yields_does_not_hold_up_the_next_term() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let ss = sessions(server.connect_string(), 2, Duration::from_secs(10)).await;
    let path = testing::unique_path("never-yields");
    let grace = Duration::from_millis(300);
    let stuck_for = Duration::from_secs(4);
    let loop_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = loop_done.clone();
    let stuck = LeaderSelector::builder(&ss[0], &path)
        .id("spinning")
        .grace(grace)
        .start(move |_term: Leadership| {
            let done = done.clone();
            async move {
                // Never yields: blocks its worker thread until it is done.
                let until = Instant::now() + stuck_for;
                while Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(10));
                }
                done.store(true, Ordering::SeqCst);
                Ok::<(), std::io::Error>(())
            }
        })
        .await
        .unwrap();
    let term = within(
        BOUND,
        "the spinning selector to lead",
        stuck.await_leadership(),
    )
    .await
    .unwrap();
    let history = History::default();
    let next = LeaderSelector::builder(&ss[1], &path)
        .id("next")
        .start(holder("next", &history, Duration::from_secs(600)))
        .await
        .unwrap();
    eventually(BOUND, "the next selector to queue", || {
        let f = next.participants();
        async move { f.await.ok().filter(|p| p.len() == 2) }
    })
    .await;

    let interrupted = Instant::now();
    stuck.interrupt_leadership();
    let next_term = within(
        BOUND,
        "the next term to start after the spinning closure's abort",
        next.await_leadership(),
    )
    .await
    .unwrap();
    eprintln!(
        "never-yielding closure: next term started {}ms after the interrupt (grace {}ms)",
        ms(interrupted.elapsed()),
        ms(grace)
    );
    assert!(next_term.token() > term.token());
    assert!(
        !loop_done.load(Ordering::SeqCst),
        "the next term started only after the never-yielding closure finished by itself: \
         the abort waited for it"
    );
    assert_eq!(stuck.overruns(), 1, "the abort was counted");
    assert_eq!(
        stuck.last_overrun().map(|o| o.token),
        Some(term.token()),
        "the overrun names the term"
    );
    next.close().await.unwrap();
    stuck.close().await.unwrap();
}

/// `LeaderSelector::current_leadership()` is the running term (the one the closure got, for a
/// readiness endpoint), and `None` once it ended; the term's `cancelled()` future completes then.
#[tokio::test]
async fn current_leadership_is_the_closures_term_until_it_ends() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let s = session(server.connect_string(), Duration::from_secs(10)).await;
    let path = testing::unique_path("current-leadership");
    let history = History::default();
    let selector = LeaderSelector::builder(&s, &path)
        .id("a")
        .start(holder("a", &history, Duration::from_secs(600)))
        .await
        .unwrap();
    let term = within(BOUND, "the first term", selector.await_leadership())
        .await
        .unwrap();
    assert_eq!(selector.current_leadership().as_ref(), Some(&term));
    let stop = term.cancelled();
    selector.interrupt_leadership();
    within(BOUND, "the term's cancelled() future to complete", stop).await;
    assert!(!term.is_valid());
    eventually(
        BOUND,
        "current_leadership() to be None after the term",
        || {
            let none = selector.current_leadership().is_none();
            async move { none.then_some(()) }
        },
    )
    .await;
    selector.close().await.unwrap();
}
