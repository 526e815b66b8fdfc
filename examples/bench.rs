//! Leadership handover, Rust and Curator side by side, in one invocation against one server.
//!
//! ```text
//! cargo run --release --example bench [-- --candidates N --repeats R]
//! ```
//!
//! On one ZooKeeper (embedded, or `$ZK_CONNECT`), each side runs `N` latches on one session
//! (Curator: one `CuratorFramework` in a JVM driven by `tests/java/CuratorPeer.java`; Rust: one
//! `Session`), started one after another. Then each leader in turn closes, and the time from the
//! start of `close()` until the successor's `await` returns is one handover. After one warm-up
//! pass per side (the JVM's JIT, the connection), `R` passes are measured. Curator needs Java and
//! Debian's `libcurator-recipes-java`; without them only the Rust figures are printed.
//!
//! Output: one line per figure, `key=value` pairs separated by spaces, stable for tools:
//!
//! ```text
//! bench=latch_handover impl=rust candidates=11 handovers=30 median_us=.. p90_us=.. max_us=..
//! bench=latch_handover impl=curator candidates=11 handovers=30 median_us=.. p90_us=.. max_us=..
//! bench=latch_handover ratio=curator/rust median=.. p90=..
//! ```

// The tests' Curator driver: test-support code, which fails loudly by design.
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#[path = "../tests/common/curator.rs"]
mod curator;

use std::time::{Duration, Instant};

use zookeeper_recipes::testing::TestingServer;
use zookeeper_recipes::{LeaderLatch, Session};

const SESSION_TIMEOUT: Duration = Duration::from_secs(20);

struct Figures {
    median: u64,
    p90: u64,
    max: u64,
    n: usize,
}

fn figures(mut us: Vec<u64>) -> Figures {
    us.sort_unstable();
    let at = |q: f64| us[((us.len() as f64 - 1.0) * q).round() as usize];
    Figures {
        median: at(0.5),
        p90: at(0.9),
        max: us[us.len() - 1],
        n: us.len(),
    }
}

fn print(implementation: &str, candidates: usize, f: &Figures) {
    println!(
        "bench=latch_handover impl={implementation} candidates={candidates} handovers={} median_us={} p90_us={} max_us={}",
        f.n, f.median, f.p90, f.max
    );
}

/// One Rust pass: `n` latches on one session, each close timed until the successor leads.
async fn rust_pass(session: &Session, n: usize) -> Result<Vec<u64>, Box<dyn std::error::Error>> {
    let path = format!("/bench/rust-{}", uuid::Uuid::new_v4().simple());
    let mut latches = Vec::with_capacity(n);
    for i in 0..n {
        let latch = LeaderLatch::builder(session, &path)
            .id(format!("rust-bench-{i}"))
            .start()
            .await?;
        latch.wait_joined(Duration::from_secs(20)).await?;
        latches.push(latch);
    }
    tokio::time::timeout(Duration::from_secs(20), latches[0].await_leadership()).await??;
    let mut us = Vec::with_capacity(n - 1);
    for i in 0..n - 1 {
        let t0 = Instant::now();
        latches[i].close().await?;
        tokio::time::timeout(Duration::from_secs(20), latches[i + 1].await_leadership()).await??;
        us.push(t0.elapsed().as_micros() as u64);
    }
    latches[n - 1].close().await?;
    Ok(us)
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let candidates = arg(&args, "--candidates", 11).max(2);
    let repeats = arg(&args, "--repeats", 3).max(1);
    let (_server, connect) = match std::env::var("ZK_CONNECT") {
        Ok(connect) => (None, connect),
        Err(_) => {
            let server = TestingServer::start().await?;
            let connect = server.connect_string().to_owned();
            (Some(server), connect)
        }
    };
    eprintln!(
        "bench: ZooKeeper at {connect}, {candidates} candidates, {repeats} measured passes per side"
    );

    let session = Session::builder(&connect)
        .session_timeout(SESSION_TIMEOUT)
        .connect()
        .await?;
    rust_pass(&session, candidates).await?; // warm-up
    let mut rust = Vec::new();
    for _ in 0..repeats {
        rust.extend(rust_pass(&session, candidates).await?);
    }
    let rust = figures(rust);
    print("rust", candidates, &rust);
    session.close().await?;

    if let Err(why) = curator::java_available() {
        eprintln!("bench: no Curator figures: {why}");
        return Ok(());
    }
    let mut peer = curator::CuratorPeer::spawn(&connect, SESSION_TIMEOUT).await;
    let mut java = Vec::new();
    for pass in 0..=repeats {
        let path = format!("/bench/curator-{}", uuid::Uuid::new_v4().simple());
        let reply = peer
            .cmd(&format!("bench_latch_handover {path} {candidates}"))
            .await;
        let list = reply.trim_start_matches("ok bench_latch_handover ").trim();
        let us: Vec<u64> = list.split(',').filter_map(|v| v.parse().ok()).collect();
        if pass > 0 {
            java.extend(us); // pass 0 warms the JIT up
        }
    }
    peer.quit().await;
    let java = figures(java);
    print("curator", candidates, &java);
    println!(
        "bench=latch_handover ratio=curator/rust median={:.2} p90={:.2}",
        java.median as f64 / rust.median.max(1) as f64,
        java.p90 as f64 / rust.p90.max(1) as f64
    );
    Ok(())
}
