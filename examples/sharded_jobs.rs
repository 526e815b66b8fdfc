//! Sharded leadership: 12 singleton jobs spread over the replicas of a service.
//!
//! ```text
//! cargo run --example sharded_jobs
//! ```
//!
//! It starts an embedded ZooKeeper (a real server process, from Debian's `zookeeper` package or
//! `$ZOOKEEPER_HOME`), or uses `$ZK_CONNECT` if set. Three replicas join a `LeaderPool` with 12
//! jobs and lead 4 each; a fourth joins and each of the three hands one job over to it; then one
//! replica is cut off from the network as if its machine died, and once the server has expired its
//! session its 3 jobs go one to each survivor. After each change it prints who leads what, the
//! time to settle and the number of handovers.

use zookeeper_recipes_rigs::prologue as common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use zookeeper_recipes::{LeaderObserver, LeaderPool, Session};
use zookeeper_recipes_testing::FaultProxy;

const ROOT: &str = "/pools/sharded-jobs-example";
const SESSION_TIMEOUT: Duration = Duration::from_secs(2);

fn jobs() -> Vec<String> {
    (1..=12).map(|i| format!("job-{i:02}")).collect()
}

struct Replica {
    id: String,
    proxy: FaultProxy,
    session: Session,
    pool: LeaderPool,
}

async fn replica(upstream: &str, id: &str) -> Result<Replica, Box<dyn std::error::Error>> {
    // Each replica reaches ZooKeeper through a proxy, so that one can be cut off.
    let proxy = FaultProxy::start(&[upstream.to_owned()]).await?;
    let session = Session::builder(proxy.connect_string())
        .session_timeout(SESSION_TIMEOUT)
        .connect()
        .await?;
    let pool = LeaderPool::builder(&session, ROOT)
        .id(id)
        .jobs(jobs())
        .start()
        .await?;
    Ok(Replica {
        id: id.to_owned(),
        proxy,
        session,
        pool,
    })
}

/// Who leads each job, as ZooKeeper says (one observer per job path), and how often a job has
/// changed hands so far.
struct Truth {
    observers: Vec<LeaderObserver>,
    last: BTreeMap<String, String>,
    handovers: usize,
}

impl Truth {
    fn leaders(&self) -> BTreeMap<String, Option<String>> {
        self.observers
            .iter()
            .map(|o| {
                let job = o.path().rsplit('/').next().unwrap_or_default().to_owned();
                (job, o.leader().map(|l| l.id))
            })
            .collect()
    }

    /// Waits until every job is led by one of `members` and nobody leads more than its share;
    /// prints the table, the time since `since` and the handovers since the last call.
    async fn settled(
        &mut self,
        members: &[&str],
        since: Instant,
        what: &str,
    ) -> Result<(), String> {
        let ceiling = 12_usize.div_ceil(members.len());
        let deadline = Instant::now() + Duration::from_secs(60);
        let leaders = loop {
            let leaders = self.leaders();
            // Count every leader change seen while waiting.
            for (job, id) in &leaders {
                if let Some(id) = id {
                    match self.last.insert(job.clone(), id.clone()) {
                        Some(before) if before != *id => self.handovers += 1,
                        _ => {}
                    }
                }
            }
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            let all_led = leaders.values().all(|id| {
                id.as_deref().is_some_and(|id| {
                    *counts
                        .entry(members.iter().find(|m| **m == id).copied().unwrap_or("?"))
                        .or_default() += 1;
                    members.contains(&id)
                })
            });
            if all_led && counts.values().all(|c| *c <= ceiling) {
                break leaders;
            }
            if Instant::now() >= deadline {
                return Err(format!("{what}: not settled within 60 s: {leaders:?}"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        println!(
            "\n== {what}: settled in {} ms, {} handovers",
            since.elapsed().as_millis(),
            std::mem::take(&mut self.handovers)
        );
        for member in members {
            let led: Vec<&str> = leaders
                .iter()
                .filter(|(_, id)| id.as_deref() == Some(*member))
                .map(|(job, _)| job.as_str())
                .collect();
            println!("   {member:<10} leads {:>2}: {}", led.len(), led.join(" "));
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::init_tracing();
    common::exit_code(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let zookeeper = common::ZooKeeper::from_env().await?;
    println!("using {}", zookeeper.describe());
    let upstream = zookeeper.connect_string().to_owned();
    let watcher = Session::builder(&upstream).connect().await?;
    let mut observers = Vec::new();
    for job in jobs() {
        observers.push(
            LeaderObserver::builder(&watcher, format!("{ROOT}/jobs/{job}"))
                .start()
                .await?,
        );
    }
    let mut truth = Truth {
        observers,
        last: BTreeMap::new(),
        handovers: 0,
    };

    let started = Instant::now();
    let mut replicas = Vec::new();
    for i in 1..=3 {
        replicas.push(replica(&upstream, &format!("replica-{i}")).await?);
    }
    truth
        .settled(
            &["replica-1", "replica-2", "replica-3"],
            started,
            "3 replicas",
        )
        .await?;

    let joined = Instant::now();
    replicas.push(replica(&upstream, "replica-4").await?);
    truth
        .settled(
            &["replica-1", "replica-2", "replica-3", "replica-4"],
            joined,
            "replica-4 joined",
        )
        .await?;

    // replica-2's machine "dies": its link goes silent. Its terms end by their deadline on its
    // side; the server expires its session after the session timeout, and its jobs move.
    let cut = Instant::now();
    replicas[1].proxy.blackhole();
    println!(
        "\n.. replica-2 is cut off, as if its machine died; its jobs move once the server expires its session ({} s)",
        SESSION_TIMEOUT.as_secs()
    );
    truth
        .settled(
            &["replica-1", "replica-3", "replica-4"],
            cut,
            "replica-2 is gone",
        )
        .await?;
    let dead = &replicas[1];
    println!(
        "   {} itself leads {:?} (its terms ended at their deadline)",
        dead.id,
        dead.pool.leading()
    );

    for r in &replicas {
        r.proxy.heal();
    }
    for r in &replicas {
        r.pool.close().await?;
        r.session.close().await?;
    }
    watcher.close().await?;
    Ok(())
}
