//! `zkr run` and `zkr cron run` over every transport (issue 42): plaintext, TLS, mutual TLS,
//! mutual TLS with `--acl creator` naming the certificate, and a SASL DIGEST-MD5 login
//! (`--sasl-digest-file`) with `--acl creator` naming the login. The library's rows of the
//! same table (latch, selector, mutex) are `tests/recipes/tls_matrix.rs`.
//!
//! One test per transport, on the binary's one server of that transport
//! (`fixtures::transport`); each case works under a path of its own: replica `a` leads and runs
//! its command, `b` queues behind it, `a` gets SIGTERM, `b` takes over with a higher token;
//! where the transport names an identity, `a`'s node carries the creator ACL naming it alone.
//! Each case prints a `matrix:` line (case, transport, result, time).

use zookeeper_recipes_rigs::fixtures as common;

use std::time::{Duration, Instant};

use common::transport::{Secured, Transport};
use common::zkr::{Groups, Zkr};
use common::{BOUND, children, zookeeper};
use nix::sys::signal::Signal;
use zookeeper_recipes::Session;
use zookeeper_recipes_testing as testing;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Run,
    CronRun,
}

impl Case {
    const ALL: [Case; 2] = [Case::Run, Case::CronRun];

    fn name(self) -> &'static str {
        match self {
            Case::Run => "zkr run",
            Case::CronRun => "zkr cron run",
        }
    }

    /// A replica's arguments after the global ones, and the event that says it holds the term.
    fn args(self, path: &str, id: &str) -> (Vec<String>, &'static str) {
        let args: &[&str] = match self {
            Case::Run => &["run", path, "--id", id, "--", "sleep", "1000"],
            Case::CronRun => &[
                "cron", "run", path, "--id", id, "--every", "1s", "--", "true",
            ],
        };
        let held = match self {
            Case::Run => "cmd_started",
            Case::CronRun => "slot_started",
        };
        (args.iter().map(|&a| a.to_owned()).collect(), held)
    }

    /// Where the replicas' election nodes are.
    fn election(self, path: &str) -> String {
        match self {
            Case::Run => path.to_owned(),
            Case::CronRun => format!("{path}/leader"),
        }
    }
}

/// Waits until `path` has `n` children (both replicas have joined).
async fn joined(session: &Session, path: &str, n: usize, what: &str) {
    common::eventually(BOUND, what, || async {
        (children(session, path).await.len() == n).then_some(())
    })
    .await;
}

/// `zkr --session-timeout 6s SECURITY... ARGS...` as replica `id`.
fn replica(net: &Secured, case: Case, path: &str, id: &str) -> (Zkr, &'static str) {
    let mut all = vec!["--session-timeout".to_owned(), "6s".to_owned()];
    all.extend(net.zkr_args());
    let (args, held) = case.args(path, id);
    all.extend(args);
    (Zkr::supervisor(net.connect_string(), id, &all), held)
}

/// One case over one transport.
async fn case(net: &Secured, case: Case) {
    let what = format!("{} over {}", case.name(), net.transport().name());
    let path = testing::unique_path(&format!(
        "matrix-{}",
        case.name().replace("zkr ", "").replace(' ', "-")
    ));
    let election = case.election(&path);
    let reader = net.session(Duration::from_secs(10)).await;
    let mut groups = Groups::default();

    let (mut a, held) = replica(net, case, &path, "a");
    let a_held = a
        .wait_for(held, BOUND, &format!("{what}: a never led"))
        .await;
    if case == Case::Run {
        groups.add(&a_held);
    }
    let (mut b, _) = replica(net, case, &path, "b");
    joined(&reader, &election, 2, &format!("{what}: b did not queue")).await;
    let mut nodes = children(&reader, &election).await;
    nodes.sort_by_key(|n| n.rsplit('-').next().unwrap_or_default().to_owned());
    net.assert_acl_names_identity(&reader, &format!("{election}/{}", nodes[0]), &what)
        .await;

    a.signal(Signal::SIGTERM);
    let code = a
        .exit(BOUND, &format!("{what}: a after SIGTERM"))
        .await
        .code();
    assert!(
        matches!(code, Some(0 | 143)),
        "{what}: a exited {code:?}\n{}",
        a.context()
    );
    let b_held = b
        .wait_for(held, BOUND, &format!("{what}: b did not take over from a"))
        .await;
    if case == Case::Run {
        groups.add(&b_held);
    }
    assert!(
        b_held.int("token") > a_held.int("token"),
        "{what}: b's token {} is not above a's {}",
        b_held.json,
        a_held.json
    );
    b.signal(Signal::SIGTERM);
    let code = b
        .exit(BOUND, &format!("{what}: b after SIGTERM"))
        .await
        .code();
    assert!(matches!(code, Some(0 | 143)), "{what}: b exited {code:?}");
    let _ = reader.close().await;
}

/// Every case over `transport`, one after the other.
async fn matrix(transport: Transport) {
    if !zookeeper() {
        return;
    }
    let net = Secured::shared(transport).await;
    for c in Case::ALL {
        let started = Instant::now();
        case(net, c).await;
        eprintln!(
            "matrix: {:<12} | {:<15} | pass | {} ms",
            c.name(),
            transport.name(),
            started.elapsed().as_millis()
        );
    }
}

#[tokio::test]
async fn zkr_run_and_cron_run_fail_over_on_a_plaintext_server() {
    matrix(Transport::Plaintext).await;
}

#[tokio::test]
async fn zkr_run_and_cron_run_fail_over_over_tls() {
    matrix(Transport::Tls).await;
}

#[tokio::test]
async fn zkr_run_and_cron_run_fail_over_over_mtls() {
    matrix(Transport::MutualTls).await;
}

#[tokio::test]
async fn zkr_run_and_cron_run_fail_over_over_mtls_with_acl_creator_naming_the_certificate() {
    matrix(Transport::MutualTlsX509Acl).await;
}

#[tokio::test]
async fn zkr_run_and_cron_run_fail_over_over_sasl_with_acl_creator_naming_the_login() {
    matrix(Transport::SaslDigest).await;
}
