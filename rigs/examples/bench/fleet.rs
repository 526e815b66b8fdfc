//! The `fleet N [T]` workload (documented in the bench's module doc): what a fleet at rest costs
//! the quorum leader of a three-server ensemble, and the `cluster` workload that serves such an
//! ensemble to another process (`rigs/bench/compare.sh` runs Curator's side against it).
//!
//! N sessions (timeout T), one `LeaderLatch` each in one election, all connected to the
//! followers, never to the quorum leader: one leads, the rest wait. Once every latch has its node
//! and one leads, and after [`SETTLE`], a window of [`window`] in which nothing of the bench
//! happens: the figures are what the sessions cost by themselves.
//!
//! - `leader_requests_per_s`: the quorum leader's `zk_prep_processor_request_queued` (every
//!   request its request-preparation thread takes in: a follower forwards each `sync` there,
//!   while a session's pings are answered by its follower and reach the leader only as session
//!   touches batched into the follower's own pings), per second of the window;
//! - `follower_packets_per_s`: the followers' `zk_packets_received`, summed, per second (the
//!   closing `mntr` reads taken out);
//! - `rss_kb_per_session`: this process's resident set after the fleet has settled, less before
//!   the first session connected, divided by N.

use std::io::Write as _;
use std::time::{Duration, Instant};

use futures::StreamExt;
use zookeeper_recipes::{LeaderLatch, Session};
use zookeeper_recipes_testing::{self as testing, TestingCluster};

use super::{Result, bounded, ensure_path, figure, fresh_path, rss_kb};

/// The session timeout when none is given: `zkr`'s default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The embedded ensemble's `tickTime`: ZooKeeper's default, as a deployment has it.
const TICK: Duration = Duration::from_secs(2);
/// How long after the fleet has settled the window opens.
const SETTLE: Duration = Duration::from_secs(5);
/// How many sessions connect at the same time.
const CONNECTS_IN_FLIGHT: usize = 64;
/// Open files the fleet needs per session: the client's socket, with room for the runtime's own
/// (the session's loopback relay, two more sockets, is gone; the budget is kept).
const FILES_PER_SESSION: u64 = 4;

/// `fleet N [T]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Params {
    pub(super) sessions: usize,
    pub(super) timeout: Duration,
}

/// Parses `N [T]`.
pub(super) fn parse(params: &[String]) -> Result<Params, String> {
    if !(1..=2).contains(&params.len()) {
        return Err(format!("`fleet` takes N [T], got {params:?}"));
    }
    let sessions = match params[0].parse::<usize>() {
        Ok(n) if n >= 2 => n,
        _ => {
            return Err(format!(
                "N (sessions) must be a whole number >= 2, got {:?}",
                params[0]
            ));
        }
    };
    let timeout = match params.get(1) {
        None => DEFAULT_TIMEOUT,
        Some(t) => match t.parse::<u64>() {
            Ok(s) if s >= 1 => Duration::from_secs(s),
            _ => {
                return Err(format!(
                    "T (session timeout, seconds) must be a whole number >= 1, got {t:?}"
                ));
            }
        },
    };
    Ok(Params { sessions, timeout })
}

/// The window: at least 20 s, and at least two session timeouts (so that every session's
/// periodic traffic falls into it about as often as its period says).
fn window(timeout: Duration) -> Duration {
    (timeout * 2).max(Duration::from_secs(20))
}

/// The embedded ensemble both sides of a comparison use.
async fn embedded() -> Result<TestingCluster> {
    Ok(TestingCluster::builder()
        .servers(3)
        .tick_time(TICK)
        .max_session_timeout(Duration::from_secs(60))
        .start()
        .await?)
}

/// The servers of an ensemble's connect string, `host:port` each.
fn hosts(connect: &str) -> Vec<String> {
    let hosts = connect.split('/').next().unwrap_or(connect);
    hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Which of `hosts` is the quorum leader (by its `mntr`), and the others.
async fn roles(hosts: &[String]) -> Result<(String, Vec<String>)> {
    let mut leader = None;
    let mut followers = Vec::new();
    for host in hosts {
        let mntr = testing::mntr(host).await?;
        match mntr.get("zk_server_state").map(String::as_str) {
            Some("leader") => leader = Some(host.clone()),
            Some("follower") => followers.push(host.clone()),
            other => {
                return Err(format!(
                    "{host} is {}, not a leader or follower: `fleet` needs a three-server ensemble",
                    other.unwrap_or("of unknown state")
                )
                .into());
            }
        }
    }
    let leader = leader.ok_or("no server of the ensemble says it leads")?;
    if followers.is_empty() {
        return Err("the ensemble has no follower: `fleet` needs three servers".into());
    }
    Ok((leader, followers))
}

/// A counter of `mntr`, as a number.
async fn counter(host: &str, key: &str) -> Result<f64> {
    let mntr = testing::mntr(host).await?;
    Ok(mntr
        .get(key)
        .ok_or_else(|| format!("mntr of {host} has no {key}"))?
        .parse::<f64>()?)
}

/// One reading of the window: the leader's prepared requests and the followers' packets.
async fn reading(leader: &str, followers: &[String]) -> Result<(f64, f64, Instant)> {
    let requests = counter(leader, "zk_prep_processor_request_queued").await?;
    let mut packets = 0.0;
    for f in followers {
        packets += counter(f, "zk_packets_received").await?;
    }
    Ok((requests, packets, Instant::now()))
}

/// Raises this process's open-file limit to what `sessions` need (up to the hard limit).
fn raise_open_files(sessions: usize) -> Result<()> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let want = (sessions as u64) * FILES_PER_SESSION + 256;
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < want {
        if hard < want {
            return Err(format!(
                "{sessions} sessions need {want} open files, the hard limit is {hard}: raise it (ulimit -Hn)"
            )
            .into());
        }
        setrlimit(Resource::RLIMIT_NOFILE, want, hard)?;
    }
    Ok(())
}

/// `fleet N [T]`: against the ensemble `connect`, else an embedded one.
pub(super) async fn run(connect: Option<String>, params: Params) -> Result<()> {
    let Params {
        sessions: n,
        timeout,
    } = params;
    raise_open_files(n)?;
    let (connect, embedded) = match connect {
        Some(given) => (given, None),
        None => {
            let cluster = embedded().await?;
            (cluster.connect_string().to_owned(), Some(cluster))
        }
    };
    let (leader, followers) = roles(&hosts(&connect)).await?;
    eprintln!("bench: fleet N={n}: quorum leader {leader}, followers {followers:?}");
    let to_followers = followers.join(",");

    let rss_before = rss_kb()?;
    let started = Instant::now();
    // The embedded ensemble's tick is known; a given one's is ZooKeeper's default, assumed.
    let builder_tick = embedded.as_ref().map(|_| TICK);
    let connected: Vec<Result<Session>> = futures::stream::iter(0..n)
        .map(|_| {
            let mut builder = Session::builder(&to_followers).session_timeout(timeout);
            if let Some(tick) = builder_tick {
                builder = builder.server_tick_time(tick);
            }
            async move { Ok(builder.connect().await?) }
        })
        .buffer_unordered(CONNECTS_IN_FLIGHT)
        .collect()
        .await;
    let sessions = connected.into_iter().collect::<Result<Vec<_>>>()?;
    eprintln!(
        "bench: fleet N={n}: connected in {:?} (session timeout {:?} negotiated)",
        started.elapsed(),
        sessions.first().and_then(Session::negotiated_timeout)
    );
    let path = fresh_path("fleet");
    ensure_path(&sessions[0], &path).await?;
    let latches: Vec<Result<LeaderLatch>> = futures::stream::iter(sessions.iter().enumerate())
        .map(|(i, s)| {
            let path = path.clone();
            async move {
                Ok(LeaderLatch::builder(s, &path)
                    .id(format!("f{i}"))
                    .start()
                    .await?)
            }
        })
        .buffer_unordered(CONNECTS_IN_FLIGHT)
        .collect()
        .await;
    let latches = latches.into_iter().collect::<Result<Vec<_>>>()?;
    bounded(
        || format!("the {n} latches of {path} did not all create their nodes"),
        futures::future::join_all(latches.iter().map(|l| l.wait_joined(super::WAIT))),
    )
    .await?
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    bounded(
        || format!("no latch of {path} leads"),
        futures::future::select_all(latches.iter().map(|l| Box::pin(l.await_leadership()))),
    )
    .await?
    .0?;
    let rss_after = rss_kb()?;
    eprintln!(
        "bench: fleet N={n}: settled {:?} after the first connect",
        started.elapsed()
    );

    tokio::time::sleep(SETTLE).await;
    let (r0, p0, t0) = reading(&leader, &followers).await?;
    tokio::time::sleep(window(timeout)).await;
    let (r1, p1, t1) = reading(&leader, &followers).await?;
    let secs = t1.saturating_duration_since(t0).as_secs_f64();
    let leading = latches.iter().filter(|l| l.has_leadership()).count();
    if leading != 1 {
        return Err(format!("{leading} latches lead after the window, not one").into());
    }
    // Each follower's closing `mntr` read is one packet of its own.
    let follower_packets = (p1 - p0 - followers.len() as f64).max(0.0);
    let leader_requests = (r1 - r0).max(0.0);
    eprintln!(
        "bench: fleet N={n}: window {secs:.1} s, {leader_requests} requests prepared at the leader, {follower_packets} packets at the followers"
    );
    figure(
        "leader_requests_per_s",
        format_args!("{:.2}", leader_requests / secs),
        "requests/s",
    );
    figure(
        "leader_requests_per_s_per_session",
        format_args!("{:.4}", leader_requests / secs / n as f64),
        "requests/s",
    );
    figure(
        "follower_packets_per_s",
        format_args!("{:.2}", follower_packets / secs),
        "packets/s",
    );
    figure(
        "rss_kb_per_session",
        format_args!(
            "{:.1}",
            rss_after.saturating_sub(rss_before) as f64 / n as f64
        ),
        "KiB",
    );

    futures::stream::iter(latches.iter())
        .for_each_concurrent(CONNECTS_IN_FLIGHT, |l| async move {
            let _ = l.close().await;
        })
        .await;
    futures::stream::iter(sessions.iter())
        .for_each_concurrent(CONNECTS_IN_FLIGHT, |s| async move {
            let _ = s.close().await;
        })
        .await;
    drop(embedded);
    Ok(())
}

/// `cluster`: serves an embedded three-server ensemble (as `fleet` starts it) until stdin closes,
/// after printing `connect HOSTS`.
pub(super) async fn serve() -> Result<()> {
    let cluster = embedded().await?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "connect {}", cluster.connect_string())?;
    out.flush()?;
    drop(out);
    eprintln!(
        "bench: serving a three-server ZooKeeper ensemble at {} (tickTime {TICK:?}) until stdin closes",
        cluster.connect_string()
    );
    super::until_stdin_closes().await?;
    drop(cluster);
    Ok(())
}
