//! `--metrics-addr` (issue 28, "Health and alerts"): the library's metrics in the Prometheus
//! text format and the `/ready` and `/leader` probes, scraped from the real binary with a plain
//! HTTP GET over TCP while replicas run against real ZooKeeper. Each test owns its job path;
//! every wait is bounded and says what did not happen.

use zookeeper_recipes_rigs::fixtures as common;

use std::time::Duration;

use crate::FAULTS;
use common::zkr::{Zkr, zkr};
use common::{BOUND, shared_server, zookeeper};
use nix::sys::signal::Signal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_recipes_testing as testing;

/// `GET target` on `addr`: the status code and the body.
async fn get(addr: &str, target: &str) -> (u16, String) {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok::<String, std::io::Error>(response)
    };
    let response = tokio::time::timeout(BOUND, exchange)
        .await
        .unwrap_or_else(|_| panic!("GET {target} on {addr}: no answer within {BOUND:?}"))
        .unwrap_or_else(|e| panic!("GET {target} on {addr}: {e}"));
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("GET {target}: not an HTTP response: {response:?}"));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("GET {target}: no status in {head:?}"));
    (status, body.to_owned())
}

/// Polls `GET target` until it answers `status`, for at most `BOUND`.
async fn until_status(addr: &str, target: &str, status: u16, what: &str) -> String {
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let (got, body) = get(addr, target).await;
        if got == status {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: GET {target} still answers {got} ({body:?}) after {BOUND:?}, not {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A replica serving its metrics on a port of its choosing, and the address it announced.
async fn replica(connect: &str, id: &str, path: &str) -> (Zkr, String) {
    replica_with(connect, id, path, "6s").await
}

async fn replica_with(connect: &str, id: &str, path: &str, session: &str) -> (Zkr, String) {
    let args = [
        "--session-timeout",
        session,
        "cron",
        "run",
        path,
        "--id",
        id,
        "--every",
        "1s",
        "--metrics-addr",
        "127.0.0.1:0",
        "--",
        "true",
    ];
    let mut z = Zkr::supervisor(connect, id, &args);
    let line = z
        .wait_for("metrics_listening", BOUND, "no metrics_listening line")
        .await;
    let addr = line.str("addr").to_owned();
    (z, addr)
}

/// The value of the sample `name{...}` whose labels contain every one of `labels`.
fn sample(metrics: &str, name: &str, labels: &[&str]) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix('{')?;
        let (set, value) = rest.split_once("} ")?;
        labels
            .iter()
            .all(|want| set.contains(want))
            .then(|| value.trim().parse().ok())?
    })
}

#[tokio::test]
async fn metrics_addr_serves_slot_and_term_metrics_and_probes_by_role() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-metrics");
    let (mut a, a_addr) = replica(connect, "a", &path).await;
    let finished = a
        .wait_for("slot_finished", BOUND, "a finished no slot")
        .await;
    assert_eq!(finished.str("outcome"), "succeeded", "{}", finished.json);

    let (status, metrics) = get(&a_addr, "/metrics").await;
    assert_eq!(status, 200, "{metrics}");
    let id = "id=\"a\"";
    for (name, labels) in [
        ("zookeeper_recipes_job_slots_started_total", &[id][..]),
        (
            "zookeeper_recipes_job_slots_ended_total",
            &[id, "outcome=\"succeeded\""],
        ),
        ("zookeeper_recipes_terms_started_total", &[id]),
        (
            "zookeeper_recipes_job_last_success_timestamp_seconds",
            &[id],
        ),
    ] {
        let value = sample(&metrics, name, labels)
            .unwrap_or_else(|| panic!("no {name}{{{labels:?}}} in\n{metrics}"));
        assert!(value >= 1.0, "{name} is {value}\n{metrics}");
    }
    assert_eq!(
        sample(&metrics, "zookeeper_recipes_leader", &[id]),
        Some(1.0),
        "a leads: {metrics}"
    );
    // zkr's own: connected (what /ready answers), and which build serves.
    assert!(
        metrics.lines().any(|l| l == "zkr_connected 1"),
        "a is connected: {metrics}"
    );
    assert!(
        metrics.contains("zkr_build_info{version=\""),
        "no zkr_build_info: {metrics}"
    );
    assert!(
        metrics.contains(&path),
        "the samples should carry the job's path {path}: {metrics}"
    );
    assert_eq!(get(&a_addr, "/ready").await.0, 200);
    assert_eq!(get(&a_addr, "/leader").await.0, 200);
    assert_eq!(get(&a_addr, "/healthz").await.0, 200);
    assert_eq!(get(&a_addr, "/nothing").await.0, 404);

    // A standby: ready (it is what takes over), not the leader.
    let (mut b, b_addr) = replica(connect, "b", &path).await;
    until_status(&b_addr, "/ready", 200, "b never became ready").await;
    let (status, body) = get(&b_addr, "/leader").await;
    assert_eq!(status, 503, "b stands by, yet /leader says {body:?}");

    // a drains and leaves: b's /leader turns 200, and its metrics count its term and slots.
    a.signal(Signal::SIGTERM);
    let code = a.exit(BOUND, "a after SIGTERM").await.code();
    assert!(matches!(code, Some(0 | 143)), "a exited {code:?}");
    until_status(&b_addr, "/leader", 200, "b never took over").await;
    b.wait_for(
        "slot_finished",
        BOUND,
        "b finished no slot after the handover",
    )
    .await;
    let (_, metrics) = get(&b_addr, "/metrics").await;
    assert!(
        sample(
            &metrics,
            "zookeeper_recipes_terms_started_total",
            &["id=\"b\""]
        ) >= Some(1.0),
        "b's term is not counted: {metrics}"
    );
    b.signal(Signal::SIGTERM);
    let code = b.exit(BOUND, "b after SIGTERM").await.code();
    assert!(matches!(code, Some(0 | 143)), "b exited {code:?}");
}

#[tokio::test]
async fn a_metrics_addr_in_use_is_refused_before_anything_joins() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    // No server is needed: the port is checked before zkr connects.
    let out = tokio::time::timeout(
        BOUND,
        zkr("127.0.0.1:1")
            .args([
                "cron",
                "run",
                "job",
                "--every",
                "1m",
                "--metrics-addr",
                &addr,
            ])
            .args(["--", "true"])
            .output(),
    )
    .await
    .expect("zkr ended within the bound")
    .expect("zkr ran");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot listen on --metrics-addr {addr}")),
        "{err}"
    );
}

#[tokio::test]
async fn metrics_scraped_through_a_failover_show_the_standby_take_over_after_a_kill_9() {
    if !zookeeper() {
        return;
    }
    let _one_at_a_time = FAULTS.lock().await;
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-metrics-failover");
    let (mut a, a_addr) = replica_with(connect, "a", &path, "3s").await;
    a.wait_for("slot_finished", BOUND, "a finished no slot")
        .await;
    assert_eq!(get(&a_addr, "/leader").await.0, 200);
    let (mut b, b_addr) = replica_with(connect, "b", &path, "3s").await;
    b.wait_for("standby", BOUND, "b did not stand by").await;
    until_status(&b_addr, "/ready", 200, "b never became ready").await;

    a.signal(Signal::SIGKILL);
    let killed = tokio::time::Instant::now();
    a.exit(BOUND, "a after SIGKILL").await;
    // Until ZooKeeper expires a's session, b stands by: ready, not leader, no term counted.
    let (status, body) = get(&b_addr, "/leader").await;
    assert_eq!(status, 503, "b leads at once after a's kill -9: {body:?}");
    let (_, metrics) = get(&b_addr, "/metrics").await;
    assert_eq!(
        sample(
            &metrics,
            "zookeeper_recipes_terms_started_total",
            &["id=\"b\""]
        ),
        None,
        "b counts a term before a's session expired: {metrics}"
    );
    until_status(
        &b_addr,
        "/leader",
        200,
        "b never took over from the killed a",
    )
    .await;
    let took = killed.elapsed();
    b.wait_for(
        "slot_finished",
        BOUND,
        "b finished no slot after the failover",
    )
    .await;
    let (_, metrics) = get(&b_addr, "/metrics").await;
    for (name, labels) in [
        ("zookeeper_recipes_terms_started_total", &["id=\"b\""][..]),
        ("zookeeper_recipes_leader", &["id=\"b\""]),
        (
            "zookeeper_recipes_job_slots_ended_total",
            &["id=\"b\"", "outcome=\"succeeded\""],
        ),
        (
            "zookeeper_recipes_job_last_success_timestamp_seconds",
            &["id=\"b\""],
        ),
    ] {
        let value = sample(&metrics, name, labels).unwrap_or_else(|| {
            panic!("no {name}{{{labels:?}}} on b after the failover:\n{metrics}")
        });
        assert!(value >= 1.0, "{name} is {value} on b\n{metrics}");
    }
    println!("b's /leader answered 200 {took:?} after a's kill -9 (session timeout 3s)");
    b.signal(Signal::SIGTERM);
    let code = b.exit(BOUND, "b after SIGTERM").await.code();
    assert!(matches!(code, Some(0 | 143)), "b exited {code:?}");
}
