//! The recipes over every transport (issue 42): the latch, the selector and the mutex, each
//! over plaintext, TLS, mutual TLS, mutual TLS with the creator ACL naming the certificate, and
//! a SASL DIGEST-MD5 login with the creator ACL naming the login. `zkr run` and `zkr cron run`
//! are the same table's other rows (`zkr/tests/zkr_cli/tls_matrix.rs`).
//!
//! One test per transport, on the binary's one server of that transport
//! (`fixtures::transport`); each case works under a path of its own: participant `a` is
//! elected (or takes the lock), `b` waits behind it, `a` closes, `b` takes over; where the
//! transport names an identity, `a`'s node carries the creator ACL naming it alone. Each case
//! prints a `matrix:` line (case, transport, result, time) for the table in the report.
//!
//! Curator over mutual TLS: `interop_curator::*_over_mtls` (latch, selector, mutex, observer).

use zookeeper_recipes_rigs::fixtures as common;

use std::time::{Duration, Instant};

use common::transport::{Secured, Transport};
use common::{BOUND, children, within};
use zookeeper_recipes::{InterProcessMutex, LeaderLatch, LeaderSelector, Leadership, Session};
use zookeeper_recipes_testing as testing;

/// The participants' session timeout.
const TIMEOUT: Duration = Duration::from_secs(6);
/// How long `b` is given to take what `a` holds, and must not.
const WINDOW: Duration = Duration::from_millis(300);

#[derive(Debug, Clone, Copy)]
enum Case {
    Latch,
    Selector,
    Mutex,
}

impl Case {
    const ALL: [Case; 3] = [Case::Latch, Case::Selector, Case::Mutex];

    fn name(self) -> &'static str {
        match self {
            Case::Latch => "latch",
            Case::Selector => "selector",
            Case::Mutex => "mutex",
        }
    }
}

/// The first node of `path` in sequence order (`a`'s, which joined first).
async fn first_node(session: &Session, path: &str) -> String {
    let mut nodes = children(session, path).await;
    nodes.sort_by_key(|n| n.rsplit('-').next().unwrap_or_default().to_owned());
    let first = nodes
        .first()
        .unwrap_or_else(|| panic!("no node under {path}"));
    format!("{path}/{first}")
}

/// Waits until `path` has `n` children (both participants have joined).
async fn joined(session: &Session, path: &str, n: usize, what: &str) {
    common::eventually(BOUND, what, || async {
        (children(session, path).await.len() == n).then_some(())
    })
    .await;
}

/// One case over one transport: `a` leads or holds, `b` takes over when `a` closes.
async fn case(net: &Secured, case: Case) {
    let what = format!("{} over {}", case.name(), net.transport().name());
    let path = testing::unique_path(&format!("matrix-{}", case.name()));
    let (a, b) = tokio::join!(net.session(TIMEOUT), net.session(TIMEOUT));
    match case {
        Case::Latch => {
            let start = |s: &Session, id: &str| {
                let mut builder = LeaderLatch::builder(s, &path).id(id);
                if let Some(acl) = net.node_acl() {
                    builder = builder.acl(acl);
                }
                builder.start()
            };
            let la = start(&a, "a")
                .await
                .unwrap_or_else(|e| panic!("{what}: a: {e}"));
            within(BOUND, &format!("{what}: a to lead"), la.await_leadership())
                .await
                .unwrap_or_else(|e| panic!("{what}: a: {e}"));
            let lb = start(&b, "b")
                .await
                .unwrap_or_else(|e| panic!("{what}: b: {e}"));
            joined(&a, &path, 2, &format!("{what}: b to join")).await;
            net.assert_acl_names_identity(&a, &first_node(&a, &path).await, &what)
                .await;
            assert!(!lb.has_leadership(), "{what}: b leads while a does");
            la.close()
                .await
                .unwrap_or_else(|e| panic!("{what}: a's close: {e}"));
            within(
                BOUND,
                &format!("{what}: b to lead after a closed"),
                lb.await_leadership(),
            )
            .await
            .unwrap_or_else(|e| panic!("{what}: b: {e}"));
            lb.close().await.unwrap();
        }
        Case::Selector => {
            let hold = |term: Leadership| async move {
                term.ended().await;
                Ok::<(), std::io::Error>(())
            };
            let start = |s: &Session, id: &str| {
                let mut builder = LeaderSelector::builder(s, &path).id(id);
                if let Some(acl) = net.node_acl() {
                    builder = builder.acl(acl);
                }
                builder.start(hold)
            };
            let sa = start(&a, "a")
                .await
                .unwrap_or_else(|e| panic!("{what}: a: {e}"));
            within(BOUND, &format!("{what}: a to lead"), sa.await_leadership())
                .await
                .unwrap_or_else(|e| panic!("{what}: a: {e}"));
            let sb = start(&b, "b")
                .await
                .unwrap_or_else(|e| panic!("{what}: b: {e}"));
            joined(&a, &path, 2, &format!("{what}: b to queue")).await;
            net.assert_acl_names_identity(&a, &first_node(&a, &path).await, &what)
                .await;
            assert!(!sb.has_leadership(), "{what}: b leads while a does");
            sa.close()
                .await
                .unwrap_or_else(|e| panic!("{what}: a's close: {e}"));
            within(
                BOUND,
                &format!("{what}: b to lead after a closed"),
                sb.await_leadership(),
            )
            .await
            .unwrap_or_else(|e| panic!("{what}: b: {e}"));
            sb.close().await.unwrap();
        }
        Case::Mutex => {
            let mutex = |s: &Session, id: &str| {
                let mut builder = InterProcessMutex::builder(s, &path).id(id);
                if let Some(acl) = net.node_acl() {
                    builder = builder.acl(acl);
                }
                builder
                    .build()
                    .unwrap_or_else(|e| panic!("{what}: {id}: {e}"))
            };
            let (ma, mb) = (mutex(&a, "a"), mutex(&b, "b"));
            let held = within(BOUND, &format!("{what}: a to take the lock"), ma.acquire())
                .await
                .unwrap_or_else(|e| panic!("{what}: a: {e}"));
            let waiting = tokio::spawn(async move { mb.acquire().await });
            joined(&a, &path, 2, &format!("{what}: b to queue")).await;
            net.assert_acl_names_identity(&a, &first_node(&a, &path).await, &what)
                .await;
            tokio::time::sleep(WINDOW).await;
            assert!(!waiting.is_finished(), "{what}: b took the lock a holds");
            held.release()
                .await
                .unwrap_or_else(|e| panic!("{what}: a's release: {e}"));
            let next = within(
                BOUND,
                &format!("{what}: b to take the lock a released"),
                waiting,
            )
            .await
            .expect("b's task")
            .unwrap_or_else(|e| panic!("{what}: b: {e}"));
            next.release().await.unwrap();
        }
    }
    let _ = tokio::join!(a.close(), b.close());
}

/// Every case over `transport`, one after the other.
async fn matrix(transport: Transport) {
    if !common::zookeeper() {
        return;
    }
    let net = Secured::shared(transport).await;
    for c in Case::ALL {
        let started = Instant::now();
        case(net, c).await;
        eprintln!(
            "matrix: {:<8} | {:<15} | pass | {} ms",
            c.name(),
            transport.name(),
            started.elapsed().as_millis()
        );
    }
}

#[tokio::test]
async fn the_latch_selector_and_mutex_fail_over_on_a_plaintext_server() {
    matrix(Transport::Plaintext).await;
}

#[tokio::test]
async fn the_latch_selector_and_mutex_fail_over_over_tls() {
    matrix(Transport::Tls).await;
}

#[tokio::test]
async fn the_latch_selector_and_mutex_fail_over_over_mtls() {
    matrix(Transport::MutualTls).await;
}

#[tokio::test]
async fn the_latch_selector_and_mutex_fail_over_over_mtls_with_their_nodes_owned_by_the_certificate()
 {
    matrix(Transport::MutualTlsX509Acl).await;
}

#[tokio::test]
async fn the_latch_selector_and_mutex_fail_over_over_sasl_with_their_nodes_owned_by_the_login() {
    matrix(Transport::SaslDigest).await;
}
