//! The `pool J R [T]` workload (documented in the bench's module doc) and its hidden
//! `pool-replica` side: each replica of the measured `LeaderPool` is a child process (this same
//! bench, re-executed), so that a real `kill -9` leaves its nodes to the server's session expiry.
//!
//! The parent talks to its replicas over their stdin and stdout, never through ZooKeeper, so that
//! the server counts only the pool's own requests:
//!
//! - a replica connects its session and prints `ready`; it starts its pool when it reads `start`,
//!   and closes its session and exits on `stop` or when its stdin closes;
//! - while running it prints a `status` line whenever what it sees changes:
//!   `status HASH BYTES MEMBERS MINE LEADING MATCH COORDINATOR`, where HASH identifies the
//!   assignment it last read (its JSON, hashed), BYTES its length, MEMBERS how many members it
//!   names, MINE how many jobs it gives this replica, LEADING how many jobs this replica leads
//!   (a valid term), MATCH whether those are exactly the assigned ones, and COORDINATOR whether
//!   this replica is the coordinator.
//!
//! The pool has settled when every live replica has read the same assignment, that assignment
//! names exactly the live replicas, gives each `floor(J / n)` or `ceil(J / n)` jobs, all `J` in
//! all, and every replica leads exactly its own.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash as _, Hasher as _};
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use zookeeper_recipes::{LeaderPool, Session};

use super::{
    Packets, ROOT, Result, bounded, connect_one, connect_with_timeout, ensure_path, figure,
    first_host,
};
use zookeeper_recipes_rigs::prologue::ZooKeeper;

/// The replicas' session timeout when none is given.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(4);
/// The control window before each measured phase (see "Counting requests").
const CONTROL: Duration = Duration::from_secs(1);
/// How often a replica looks at its state besides its events (a term that passed its deadline
/// sends none); it costs no request.
const LOOK_EVERY: Duration = Duration::from_millis(50);
/// How long the parent waits for a replica to exit after `stop`.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// `pool J R [T]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Params {
    pub(super) jobs: usize,
    pub(super) replicas: usize,
    pub(super) timeout: Duration,
}

/// `pool-replica TAG INDEX J T_MS`: replica `INDEX` of the pool `/zkr-bench/pool-rust-TAG`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Replica {
    tag: u32,
    index: usize,
    jobs: usize,
    timeout: Duration,
}

fn whole(params: &[String], i: usize, what: &str, min: u64) -> Result<u64, String> {
    let text = params.get(i).map_or("", String::as_str);
    match text.parse::<u64>() {
        Ok(v) if v >= min => Ok(v),
        _ => Err(format!(
            "{what} must be a whole number >= {min}, got {text:?}"
        )),
    }
}

fn count(params: &[String], i: usize, what: &str, min: u64) -> Result<usize, String> {
    whole(params, i, what, min).and_then(|v| usize::try_from(v).map_err(|e| e.to_string()))
}

/// Parses the arguments of `pool`: `J R [T]`.
pub(super) fn parse(params: &[String]) -> Result<Params, String> {
    if !(2..=3).contains(&params.len()) {
        return Err(format!("`pool` takes J R [T], got {params:?}"));
    }
    Ok(Params {
        jobs: count(params, 0, "J (jobs)", 1)?,
        replicas: count(params, 1, "R (replicas)", 1)?,
        timeout: if params.len() == 3 {
            Duration::from_secs(whole(params, 2, "T (session timeout, seconds)", 1)?)
        } else {
            DEFAULT_TIMEOUT
        },
    })
}

/// Parses the arguments of the hidden `pool-replica`: `TAG INDEX J T_MS`.
pub(super) fn parse_replica(params: &[String]) -> Result<Replica, String> {
    if params.len() != 4 {
        return Err(format!(
            "`pool-replica` takes TAG INDEX J T_MS, got {params:?}"
        ));
    }
    let tag = params.first().map_or("", String::as_str);
    Ok(Replica {
        tag: u32::from_str_radix(tag, 16).map_err(|_| format!("TAG must be hex, got {tag:?}"))?,
        index: count(params, 1, "INDEX", 0)?,
        jobs: count(params, 2, "J (jobs)", 1)?,
        timeout: Duration::from_millis(whole(params, 3, "T_MS", 1)?),
    })
}

fn pool_root(tag: u32) -> String {
    format!("{ROOT}/pool-rust-{tag:08x}")
}

fn job_names(jobs: usize) -> Vec<String> {
    (0..jobs).map(|i| format!("job-{i:04}")).collect()
}

fn replica_id(index: usize) -> String {
    format!("replica-{index:02}")
}

// ---------------------------------------------------------------------------------------------
// The replica (a child process)

/// What a replica sees, as its `status` line says it.
fn status(pool: &LeaderPool) -> String {
    let assignment = pool.assignment().borrow().clone();
    let Some(assignment) = assignment else {
        return "status none".to_owned();
    };
    let json = serde_json::to_vec(&assignment).unwrap_or_default();
    let mut hasher = DefaultHasher::new();
    json.hash(&mut hasher);
    let mine = assignment.jobs_of(pool.id());
    let leading = pool.leading();
    let matches = leading.len() == mine.len() && leading.iter().zip(&mine).all(|(a, b)| a == b);
    format!(
        "status {:016x} {} {} {} {} {} {}",
        hasher.finish(),
        json.len(),
        assignment.members.len(),
        mine.len(),
        leading.len(),
        matches,
        pool.is_coordinator()
    )
}

/// The `pool-replica` workload: one member of the pool, driven by the parent over stdin/stdout.
pub(super) async fn replica(connect: &str, r: Replica) -> Result<()> {
    let session = connect_with_timeout(connect, r.timeout).await?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    println!("ready");
    match lines.next_line().await? {
        Some(line) if line == "start" => {}
        _ => {
            session.close().await?;
            return Ok(());
        }
    }
    let pool = LeaderPool::builder(&session, pool_root(r.tag))
        .id(replica_id(r.index))
        .jobs(job_names(r.jobs))
        .start()
        .await?;
    let mut events = Box::pin(pool.events());
    let mut look = tokio::time::interval(LOOK_EVERY);
    let mut last = String::new();
    loop {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(line)) if line != "stop" => {}
                _ => break,
            },
            event = events.next() => if event.is_none() {
                break;
            },
            _ = look.tick() => {}
        }
        let now = status(&pool);
        if now != last {
            println!("{now}");
            last = now;
        }
    }
    if let Some(e) = pool.failure() {
        eprintln!("bench: pool replica {} failed: {e}", r.index);
    }
    // Closing the session deletes every node of this replica at once; the parent is done
    // measuring by then.
    drop(pool);
    session.close().await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The parent

/// A replica's `status` line, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Status {
    hash: String,
    bytes: usize,
    members: usize,
    mine: usize,
    leading: usize,
    matches: bool,
    coordinator: bool,
}

fn parse_status(line: &str) -> Option<Status> {
    let mut f = line.strip_prefix("status ")?.split(' ');
    let mut next = || f.next();
    Some(Status {
        hash: next()?.to_owned(),
        bytes: next()?.parse().ok()?,
        members: next()?.parse().ok()?,
        mine: next()?.parse().ok()?,
        leading: next()?.parse().ok()?,
        matches: next()?.parse().ok()?,
        coordinator: next()?.parse().ok()?,
    })
}

/// Whether the replicas `live` (their last statuses) have settled on `jobs` jobs.
fn settled(statuses: &[Option<&Status>], jobs: usize) -> bool {
    let n = statuses.len();
    if n == 0 {
        return false;
    }
    let Some(Some(first)) = statuses.first() else {
        return false;
    };
    let (lo, hi) = (jobs / n, jobs.div_ceil(n));
    let mut total = 0;
    for s in statuses {
        let Some(s) = s else { return false };
        if s.hash != first.hash
            || s.members != n
            || !s.matches
            || s.leading != s.mine
            || !(lo..=hi).contains(&s.mine)
        {
            return false;
        }
        total += s.mine;
    }
    total == jobs
}

/// A line from replica `index` (`None`: its stdout closed), and when it came.
struct Message {
    index: usize,
    at: Instant,
    line: Option<String>,
}

/// The replica processes.
struct Fleet {
    children: Vec<Option<Child>>,
    stdins: Vec<Option<ChildStdin>>,
    statuses: Vec<Option<Status>>,
    rx: mpsc::UnboundedReceiver<Message>,
}

impl Fleet {
    /// Starts `n` replicas and waits until each has connected its session.
    async fn spawn(connect: &str, tag: u32, n: usize, p: Params) -> Result<Fleet> {
        let exe = std::env::current_exe()?;
        let (tx, rx) = mpsc::unbounded_channel();
        let mut children = Vec::with_capacity(n);
        let mut stdins = Vec::with_capacity(n);
        for index in 0..n {
            let mut child = Command::new(&exe)
                .args(["--connect", connect, "pool-replica"])
                .arg(format!("{tag:08x}"))
                .arg(index.to_string())
                .arg(p.jobs.to_string())
                .arg(p.timeout.as_millis().to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .kill_on_drop(true)
                .spawn()?;
            let stdout = child.stdout.take().ok_or("no stdout of a replica")?;
            stdins.push(child.stdin.take());
            children.push(Some(child));
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let at = Instant::now();
                    if tx
                        .send(Message {
                            index,
                            at,
                            line: Some(line),
                        })
                        .is_err()
                    {
                        return;
                    }
                }
                let _ = tx.send(Message {
                    index,
                    at: Instant::now(),
                    line: None,
                });
            });
        }
        let mut fleet = Fleet {
            children,
            stdins,
            statuses: vec![None; n],
            rx,
        };
        let mut ready = vec![false; n];
        while !ready.iter().all(|r| *r) {
            let m = fleet.next("every replica to connect").await?;
            match m.line.as_deref() {
                Some("ready") => ready[m.index] = true,
                Some(other) => return Err(format!("replica {}: {other:?}", m.index).into()),
                None => {
                    return Err(format!("replica {} exited before it was ready", m.index).into());
                }
            }
        }
        Ok(fleet)
    }

    async fn next(&mut self, what: &str) -> Result<Message> {
        bounded(
            || format!("no word from the replicas while waiting for {what}"),
            self.rx.recv(),
        )
        .await?
        .ok_or_else(|| "every replica's stdout closed".into())
    }

    async fn tell(&mut self, index: usize, word: &str) -> Result<()> {
        let stdin = self.stdins[index]
            .as_mut()
            .ok_or_else(|| format!("replica {index} has no stdin"))?;
        stdin.write_all(format!("{word}\n").as_bytes()).await?;
        stdin.flush().await?;
        Ok(())
    }

    /// Waits until the replicas `live` have settled on `jobs` jobs; returns when the line that
    /// made it so arrived.
    async fn settled(&mut self, live: &[usize], jobs: usize, what: &str) -> Result<Instant> {
        loop {
            let m = self.next(what).await?;
            match m.line {
                Some(line) => {
                    if let Some(s) = parse_status(&line) {
                        self.statuses[m.index] = Some(s);
                    }
                }
                None if live.contains(&m.index) => {
                    return Err(format!("replica {} exited during {what}", m.index).into());
                }
                None => {}
            }
            let statuses: Vec<Option<&Status>> =
                live.iter().map(|i| self.statuses[*i].as_ref()).collect();
            if settled(&statuses, jobs) {
                return Ok(m.at);
            }
        }
    }

    /// The live replica that says it coordinates.
    fn coordinator(&self, live: &[usize]) -> Option<usize> {
        live.iter()
            .copied()
            .find(|i| self.statuses[*i].as_ref().is_some_and(|s| s.coordinator))
    }

    fn kill(&mut self, index: usize) -> Result<()> {
        let child = self.children[index]
            .as_mut()
            .ok_or_else(|| format!("replica {index} is gone"))?;
        child.start_kill()?;
        self.stdins[index] = None;
        Ok(())
    }

    /// Stops every replica (closing its session) and waits for it to exit.
    async fn stop(mut self) {
        for index in 0..self.stdins.len() {
            let _ = self.tell(index, "stop").await;
            self.stdins[index] = None;
        }
        for child in self.children.iter_mut().flatten() {
            if tokio::time::timeout(STOP_WAIT, child.wait()).await.is_err() {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
    }
}

/// The assignment node's version and size, read outside every window.
async fn assignment_stat(session: &Session, root: &str) -> Result<(i32, usize)> {
    let stat = session
        .client()?
        .check_stat(&format!("{root}/assignment"))
        .await?
        .ok_or("no assignment node")?;
    Ok((stat.version, usize::try_from(stat.data_length)?))
}

/// One measured phase's figures.
struct Phase {
    name: &'static str,
    millis: f64,
    requests: f64,
    background: f64,
    writes: i32,
    bytes: usize,
    replicas: usize,
}

impl Phase {
    fn print(&self) {
        let n = self.name;
        eprintln!(
            "bench: pool {n}: settled in {:.1} ms over {} replicas, {:.1} requests \
             ({:.1} background taken out), {} assignment write(s) of {} bytes \
             (each read back by every replica: {} bytes)",
            self.millis,
            self.replicas,
            self.requests,
            self.background,
            self.writes,
            self.bytes,
            self.bytes * self.replicas
        );
        figure(
            &format!("pool_{n}_settle_ms"),
            format_args!("{:.1}", self.millis),
            "ms",
        );
        figure(
            &format!("pool_{n}_requests"),
            self.requests.round() as i64,
            "requests",
        );
        figure(
            &format!("pool_{n}_assignment_writes"),
            self.writes,
            "writes",
        );
        figure(&format!("pool_{n}_assignment_bytes"), self.bytes, "bytes");
    }
}

/// The `pool J R [T]` workload.
pub(super) async fn run(target: &ZooKeeper, p: Params) -> Result<()> {
    let connect = target.connect_string();
    let packets = Packets::calibrate(first_host(connect)).await?;
    let session = connect_one(connect).await?;
    let tag: u32 = rand_tag();
    let root = pool_root(tag);
    ensure_path(&session, &root).await?;
    eprintln!(
        "bench: pool J={} R={} on {root}: {} replica processes (one joins later), session timeout {:?}",
        p.jobs,
        p.replicas,
        p.replicas + 1,
        p.timeout
    );
    let mut fleet = Fleet::spawn(connect, tag, p.replicas + 1, p).await?;
    let mut live: Vec<usize> = (0..p.replicas).collect();

    // Start: R replicas start their pools at once.
    let opened = packets.open(CONTROL).await?;
    let t0 = Instant::now();
    for i in live.clone() {
        fleet.tell(i, "start").await?;
    }
    let at = fleet
        .settled(&live, p.jobs, "the start-up to settle")
        .await?;
    let (requests, background) = packets.close(opened).await?;
    let (version, bytes) = assignment_stat(&session, &root).await?;
    let start = Phase {
        name: "start",
        millis: (at - t0).as_secs_f64() * 1e3,
        requests,
        background,
        writes: version + 1,
        bytes,
        replicas: live.len(),
    };
    start.print();

    // Join: one more replica (connected already) starts its pool.
    let joiner = p.replicas;
    let opened = packets.open(CONTROL).await?;
    let t0 = Instant::now();
    fleet.tell(joiner, "start").await?;
    live.push(joiner);
    let at = fleet.settled(&live, p.jobs, "the join to settle").await?;
    let (requests, background) = packets.close(opened).await?;
    let (after, bytes) = assignment_stat(&session, &root).await?;
    Phase {
        name: "join",
        millis: (at - t0).as_secs_f64() * 1e3,
        requests,
        background,
        writes: after - version,
        bytes,
        replicas: live.len(),
    }
    .print();
    let version = after;

    // kill -9 of the coordinator: its nodes stay until the server expires its session.
    let victim = fleet
        .coordinator(&live)
        .ok_or("no replica says it coordinates")?;
    live.retain(|i| *i != victim);
    let opened = packets.open(CONTROL).await?;
    let t0 = Instant::now();
    fleet.kill(victim)?;
    let at = fleet
        .settled(&live, p.jobs, "the kill -9 to settle")
        .await?;
    let (requests, background) = packets.close(opened).await?;
    let (after, bytes) = assignment_stat(&session, &root).await?;
    eprintln!(
        "bench: pool kill: killed the coordinator, replica {victim}; the settle time includes the \
         wait for the server to expire its session (timeout {:?} asked, plus up to one tick)",
        p.timeout
    );
    Phase {
        name: "kill",
        millis: (at - t0).as_secs_f64() * 1e3,
        requests,
        background,
        writes: after - version,
        bytes,
        replicas: live.len(),
    }
    .print();
    figure("pool_assignment_bytes", start.bytes, "bytes");

    fleet.stop().await;
    session.close().await?;
    Ok(())
}

fn rand_tag() -> u32 {
    let id = uuid::Uuid::new_v4();
    let b = id.as_bytes();
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn pool_arguments_are_parsed() {
        assert_eq!(
            parse(&strings("1000 10")),
            Ok(Params {
                jobs: 1000,
                replicas: 10,
                timeout: DEFAULT_TIMEOUT
            })
        );
        assert_eq!(
            parse(&strings("5 2 8")).map(|p| p.timeout),
            Ok(Duration::from_secs(8))
        );
        for (bad, says) in [
            ("1000", "takes J R [T]"),
            ("0 10", "J (jobs)"),
            ("10 0", "R (replicas)"),
            ("10 2 0", "T (session timeout"),
        ] {
            let err = parse(&strings(bad)).expect_err(bad);
            assert!(err.contains(says), "{bad:?}: {err}");
        }
        let r = parse_replica(&strings("00ab12cd 3 1000 4000")).unwrap();
        assert_eq!(pool_root(r.tag), "/zkr-bench/pool-rust-00ab12cd");
        assert_eq!(
            (r.index, r.jobs, r.timeout),
            (3, 1000, Duration::from_secs(4))
        );
        assert!(parse_replica(&strings("zz 3 1000 4000")).is_err());
        // Through the bench's own parser.
        assert_eq!(
            crate::parse_args(&strings("pool 1000 10")).map(|a| a.workload),
            Ok(crate::Workload::Pool(Params {
                jobs: 1000,
                replicas: 10,
                timeout: DEFAULT_TIMEOUT
            }))
        );
        let err = crate::parse_args(&strings("pool-replica 00ab12cd 3 1000 4000")).unwrap_err();
        assert!(err.contains("needs --connect"), "{err}");
        assert!(
            crate::parse_args(&strings("--connect h:1 pool-replica 00ab12cd 3 1000 4000")).is_ok()
        );
    }

    #[test]
    fn settled_needs_one_assignment_naming_the_live_replicas_all_led() {
        let s = |hash: &str, members, mine, leading, matches| Status {
            hash: hash.into(),
            bytes: 100,
            members,
            mine,
            leading,
            matches,
            coordinator: false,
        };
        let a = s("a", 3, 4, 4, true);
        let b = s("a", 3, 3, 3, true);
        // 10 jobs over 3: 4 + 3 + 3.
        assert!(settled(&[Some(&a), Some(&b), Some(&b)], 10));
        // One has not read the new assignment yet.
        assert!(!settled(
            &[Some(&a), Some(&s("b", 3, 3, 3, true)), Some(&b)],
            10
        ));
        // The assignment still names a killed replica.
        assert!(!settled(
            &[Some(&s("a", 4, 5, 5, true)), Some(&s("a", 4, 5, 5, true))],
            10
        ));
        // One does not lead all of its jobs yet.
        assert!(!settled(
            &[Some(&a), Some(&s("a", 3, 3, 2, false)), Some(&b)],
            10
        ));
        // No word from one.
        assert!(!settled(&[Some(&a), None, Some(&b)], 10));
        assert_eq!(
            parse_status("status 00ff 120 3 4 4 true false"),
            Some(s("00ff", 3, 4, 4, true).with_bytes(120))
        );
        assert_eq!(parse_status("ready"), None);
    }

    impl Status {
        fn with_bytes(mut self, bytes: usize) -> Status {
            self.bytes = bytes;
            self
        }
    }
}
