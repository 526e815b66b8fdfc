//! The demo: a nightly statement job that must run on exactly one of three replicas, a crashed
//! leader, and a frozen leader whose late write is fenced off.
//!
//! ```text
//! cargo run --example demo
//! ```
//!
//! It uses an embedded ZooKeeper (a real server process, from Debian's `zookeeper` package or
//! `$ZOOKEEPER_HOME`), or `$ZK_CONNECT` when set. This process is the *director*: it hosts the
//! resource the job writes to (a ledger behind a [`Fence`], on a local TCP port) and starts three
//! *replicas* as child processes (this same executable, re-run with a hidden role argument). Each
//! replica runs a [`LeaderSelector`] on `/election/statement-job` with a 2 s session; the leader's
//! job writes a statement batch to the ledger every 400 ms, each write carrying its term's fencing
//! token. Then the director
//!
//! 1. kills the leader with `SIGKILL`: a successor takes over once ZooKeeper expires the dead
//!    replica's session;
//! 2. freezes the new leader with `SIGSTOP` between its validity check and its next write (the
//!    worst moment for a long GC pause: the write has left the job's hands, handed to a sender,
//!    as a request queued on a connection), waits until a third replica leads and has written,
//!    and wakes it with `SIGCONT`: the replica sees by itself that its term is over
//!    ([`Leadership::is_valid`] is false: the term's deadline passed during the pause) and its
//!    selector stops the job at once, but the write already on its way goes out; the ledger
//!    rejects it (older token), and the replica rejoins as a follower.
//!
//! It prints a timeline, then a summary, and exits 0 only if the story held (no stale write
//! accepted, tokens rising from term to term, the frozen replica noticing by itself). Every
//! replica asks the kernel to kill it when the director dies (`PR_SET_PDEATHSIG`), and the director
//! kills and reaps them on every exit path: no replica outlives the demo.

use zookeeper_recipes_rigs::prologue as common;

use std::error::Error;
use std::io::Write as _;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc};
use zookeeper_recipes::{
    BoxError, Fence, FencingToken, LeaderSelector, Leadership, Session, participants_on,
};

use common::ZooKeeper;

/// The election path the replicas share.
const PATH: &str = "/election/statement-job";
/// Short, so that a failover takes a couple of seconds and the whole demo well under a minute.
const SESSION_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the leader writes a statement batch.
const WRITE_EVERY: Duration = Duration::from_millis(400);
const REPLICAS: usize = 3;
/// The hidden first argument that makes this executable a replica.
const REPLICA_ROLE: &str = "__demo-replica";
/// How long the director waits for any one step of the story before it gives up.
const STEP_BOUND: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    common::init_tracing();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(REPLICA_ROLE) {
        return replica::main(&args[2..]);
    }
    // A current-thread runtime: the replicas are spawned from the main thread, which lives as
    // long as the process (PR_SET_PDEATHSIG fires when the spawning *thread* exits).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return common::exit_code(Err(e.into())),
    };
    common::exit_code(runtime.block_on(director::run()))
}

/// A write, as a replica sends it to the ledger (one JSON object per line).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct WriteRequest {
    writer: String,
    token: i64,
    batch: u64,
}

/// The ledger's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct WriteReply {
    accepted: bool,
    highest: i64,
}

/// What a replica tells the director, one JSON object per line on its stdout.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Report {
    Joined {
        pid: u32,
        session_id: i64,
        timeout_ms: u64,
    },
    Session {
        state: String,
        session_id: Option<i64>,
        new_session: bool,
        closed: bool,
    },
    Elected {
        token: i64,
    },
    /// Checked `is_valid()` and built the next write; waits for the director's go.
    Prepared {
        batch: u64,
        token: i64,
        valid_for_ms: u64,
    },
    /// The prepared write went out, and the ledger answered.
    LateWrite(LateWrite),
    /// The job's term is over (reported when the job returns or is stopped by its selector).
    TermOver {
        token: i64,
        is_valid: bool,
        end_reason: Option<String>,
        rejected: bool,
    },
    Closed,
}

/// The write a replica sent after standing still between its check and the write.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LateWrite {
    batch: u64,
    paused_ms: u64,
    /// What `is_valid()` said when the write went out (the sender did not look, on purpose).
    was_valid: bool,
    accepted: bool,
}

/// The replica: one `LeaderSelector` whose job writes to the director's ledger.
mod replica {
    use super::*;

    /// What the director says on the replica's stdin; end of input means "shut down".
    /// (`send`, the go for a held write, does not go through the job: see [`statement_job`].)
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Command {
        /// Prepare the next write and hand it to a sender that waits for `send`.
        Hold,
    }

    /// `<exe> __demo-replica <director pid> <connect string> <ledger address> <id>`
    pub(super) fn main(args: &[String]) -> ExitCode {
        // First of all: die with the director, whatever happens to it.
        if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
            eprintln!("replica: cannot ask for a parent-death signal: {e}");
            return ExitCode::FAILURE;
        }
        let [director, connect, ledger, id] = args else {
            eprintln!("replica: usage: {REPLICA_ROLE} <director pid> <connect> <ledger> <id>");
            return ExitCode::FAILURE;
        };
        // The director may have died before the request took effect.
        if nix::unistd::getppid().as_raw().to_string() != *director {
            eprintln!("replica {id}: the demo that started it is gone");
            return ExitCode::FAILURE;
        }
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => return common::exit_code(Err(e.into())),
        };
        common::exit_code(runtime.block_on(run(connect, ledger, id)))
    }

    fn report(report: &Report) {
        if let Ok(line) = serde_json::to_string(report) {
            let _ = writeln!(std::io::stdout().lock(), "{line}");
        }
    }

    async fn run(connect: &str, ledger: &str, id: &str) -> Result<(), Box<dyn Error>> {
        let session = Session::builder(connect)
            .session_timeout(SESSION_TIMEOUT)
            .connect()
            .await?;
        report(&Report::Joined {
            pid: std::process::id(),
            session_id: session.session_id().unwrap_or_default(),
            timeout_ms: session.negotiated_timeout().unwrap_or_default().as_millis() as u64,
        });
        let mut changes = Box::pin(session.state_changes());
        tokio::spawn(async move {
            use futures::StreamExt;
            while let Some(status) = changes.next().await {
                report(&Report::Session {
                    state: status.state.map_or("none", |s| s.as_str()).to_owned(),
                    session_id: status.session_id,
                    new_session: status.new_session,
                    closed: status.closed,
                });
            }
        });

        let (commands_tx, commands_rx) = mpsc::unbounded_channel();
        let commands = Arc::new(tokio::sync::Mutex::new(commands_rx));
        let ledger = Arc::new(LedgerClient::new(ledger));
        let batches = Arc::new(AtomicU64::new(0));
        let go = Arc::new(Notify::new());
        let job_go = Arc::clone(&go);
        let selector = LeaderSelector::builder(&session, PATH)
            .id(id)
            .auto_requeue(true)
            .start(move |term: Leadership| {
                let commands = Arc::clone(&commands);
                let ledger = Arc::clone(&ledger);
                let batches = Arc::clone(&batches);
                let go = Arc::clone(&job_go);
                async move { statement_job(term, &commands, ledger, &batches, go).await }
            })
            .await?;

        let mut stdin = BufReader::new(tokio::io::stdin()).lines();
        while let Some(line) = stdin.next_line().await? {
            match line.trim() {
                "hold" => {
                    let _ = commands_tx.send(Command::Hold);
                }
                // Kept as a permit if the sender is not waiting yet.
                "send" => go.notify_one(),
                _ => {}
            }
        }
        // End of input: leave the election (the node is deleted at once) and end the session.
        drop(commands_tx);
        selector.close().await?;
        session.close().await?;
        report(&Report::Closed);
        Ok(())
    }

    /// The singleton job: while the term holds, write a statement batch every `WRITE_EVERY`,
    /// each carrying the term's fencing token.
    ///
    /// Told to hold, it checks `is_valid()`, builds the next write and hands it to a sender task
    /// that sends it on the director's go: a write that has left the job's hands (queued on a
    /// connection, in a socket buffer, on the wire) when the process freezes. The selector stops
    /// the job itself at its deadline, but nothing can call that write back: only the fence
    /// stops it.
    async fn statement_job(
        term: Leadership,
        commands: &tokio::sync::Mutex<mpsc::UnboundedReceiver<Command>>,
        ledger: Arc<LedgerClient>,
        batches: &AtomicU64,
        go: Arc<Notify>,
    ) -> Result<(), BoxError> {
        let token = term.token();
        report(&Report::Elected { token: token.get() });
        // Reports the end of the term however the job ends: by returning, or dropped by the
        // selector once its grace is up (a frozen leader that runs again past its deadline).
        let mut over = TermOverReport {
            term: term.clone(),
            rejected: false,
        };
        let mut commands = commands.lock().await;
        let mut hold = false;
        let mut director_talks = true;
        loop {
            tokio::select! {
                _ = term.cancelled() => break,
                _ = tokio::time::sleep(WRITE_EVERY) => {}
                command = commands.recv(), if director_talks => match command {
                    Some(Command::Hold) => hold = true,
                    None => {
                        director_talks = false;
                        continue;
                    }
                },
            }
            // The check, right before the side effect. It needs no network, so a replica that
            // was frozen past its session sees here that its term is over before it sends
            // anything.
            if !term.is_valid() {
                break;
            }
            let batch = batches.fetch_add(1, Ordering::SeqCst) + 1;
            let write = WriteRequest {
                writer: term.participant_id().to_owned(),
                token: token.get(),
                batch,
            };
            let accepted = if hold {
                hold = false;
                report(&Report::Prepared {
                    batch,
                    token: token.get(),
                    valid_for_ms: term.remaining().as_millis() as u64,
                });
                let sender = tokio::spawn(send_held(
                    Arc::clone(&ledger),
                    write,
                    term.clone(),
                    Arc::clone(&go),
                ));
                sender.await??
            } else {
                ledger.write(&write).await?.accepted
            };
            if !accepted {
                // The ledger has seen a newer term: we are deposed, stop.
                over.rejected = true;
                break;
            }
        }
        Ok(())
    }

    /// The sender of a held write: waits for the go (the director freezes the process before it
    /// gives it, so the go is read once the process runs again), then sends at once, without
    /// checking again, as a write already on its way does.
    async fn send_held(
        ledger: Arc<LedgerClient>,
        write: WriteRequest,
        term: Leadership,
        go: Arc<Notify>,
    ) -> Result<bool, BoxError> {
        let prepared = Instant::now();
        go.notified().await;
        let paused_ms = prepared.elapsed().as_millis() as u64;
        let was_valid = term.is_valid();
        let accepted = ledger.write(&write).await?.accepted;
        report(&Report::LateWrite(LateWrite {
            batch: write.batch,
            paused_ms,
            was_valid,
            accepted,
        }));
        Ok(accepted)
    }

    struct TermOverReport {
        term: Leadership,
        rejected: bool,
    }

    impl Drop for TermOverReport {
        fn drop(&mut self) {
            report(&Report::TermOver {
                token: self.term.token().get(),
                is_valid: self.term.is_valid(),
                end_reason: self.term.end_reason().map(|r| r.as_str().to_owned()),
                rejected: self.rejected,
            });
        }
    }

    /// The replica's side of the ledger: one TCP connection, one JSON line per write and reply.
    struct LedgerClient {
        address: String,
        connection: tokio::sync::Mutex<Option<Connection>>,
    }

    struct Connection {
        replies: tokio::io::Lines<BufReader<tokio::net::tcp::OwnedReadHalf>>,
        requests: tokio::net::tcp::OwnedWriteHalf,
    }

    impl LedgerClient {
        fn new(address: &str) -> Self {
            LedgerClient {
                address: address.to_owned(),
                connection: tokio::sync::Mutex::new(None),
            }
        }

        async fn write(&self, write: &WriteRequest) -> Result<WriteReply, BoxError> {
            let mut slot = self.connection.lock().await;
            let connection = match slot.take() {
                Some(c) => c,
                None => {
                    let stream = TcpStream::connect(&self.address).await?;
                    stream.set_nodelay(true)?;
                    let (read, write) = stream.into_split();
                    Connection {
                        replies: BufReader::new(read).lines(),
                        requests: write,
                    }
                }
            };
            let connection = slot.insert(connection);
            let mut line = serde_json::to_string(write)?;
            line.push('\n');
            connection.requests.write_all(line.as_bytes()).await?;
            match connection.replies.next_line().await? {
                Some(reply) => Ok(serde_json::from_str(&reply)?),
                None => {
                    *slot = None;
                    Err("the ledger closed the connection".into())
                }
            }
        }
    }
}

/// The director: hosts the ledger, starts the replicas, does the faults, tells the story.
mod director {
    use super::*;

    /// One write, as the ledger saw it.
    #[derive(Debug, Clone)]
    struct Record {
        writer: String,
        token: FencingToken,
        batch: u64,
        accepted: bool,
        /// The highest token the fence had admitted after this write.
        highest: FencingToken,
    }

    /// The protected resource: a statement ledger behind a fence. A write is appended only if its
    /// token is not older than any token admitted before; rejected writes are recorded too.
    struct Ledger {
        fence: Fence,
        log: std::sync::Mutex<Vec<Record>>,
        events: mpsc::UnboundedSender<Event>,
    }

    impl Ledger {
        fn write(&self, request: WriteRequest) -> WriteReply {
            let token = FencingToken::from_raw(request.token);
            // One lock around check and append, so the log is in admission order.
            let mut log = match self.log.lock() {
                Ok(log) => log,
                Err(poisoned) => poisoned.into_inner(),
            };
            let accepted = self.fence.admit(token).is_ok();
            let highest = self.fence.highest().unwrap_or(token);
            let record = Record {
                writer: request.writer,
                token,
                batch: request.batch,
                accepted,
                highest,
            };
            log.push(record.clone());
            let _ = self.events.send(Event::Write(record));
            WriteReply {
                accepted,
                highest: highest.get(),
            }
        }

        fn records(&self) -> Vec<Record> {
            match self.log.lock() {
                Ok(log) => log.clone(),
                Err(poisoned) => poisoned.into_inner().clone(),
            }
        }
    }

    async fn serve(listener: TcpListener, ledger: Arc<Ledger>) {
        while let Ok((stream, _)) = listener.accept().await {
            let ledger = Arc::clone(&ledger);
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let Ok(request) = serde_json::from_str::<WriteRequest>(&line) else {
                        break;
                    };
                    let reply = ledger.write(request);
                    let Ok(mut reply) = serde_json::to_string(&reply) else {
                        break;
                    };
                    reply.push('\n');
                    if write.write_all(reply.as_bytes()).await.is_err() {
                        break;
                    }
                }
            });
        }
    }

    /// What reaches the director, in the order it happens.
    enum Event {
        Report(usize, Report),
        /// A replica's stdout closed: it exited.
        Gone(usize),
        Write(Record),
    }

    /// The replica processes. Dropping this kills and reaps every one still there, whatever
    /// path the director leaves by.
    struct Replicas(Vec<Replica>);

    struct Replica {
        id: String,
        child: std::process::Child,
        stdin: Option<tokio::process::ChildStdin>,
    }

    impl Drop for Replicas {
        fn drop(&mut self) {
            for replica in &mut self.0 {
                let _ = replica.child.kill(); // SIGKILL, also ends a stopped process
                let _ = replica.child.wait();
            }
        }
    }

    impl Replicas {
        fn spawn(
            &mut self,
            connect: &str,
            ledger: &str,
            events: &mpsc::UnboundedSender<Event>,
        ) -> Result<(), Box<dyn Error>> {
            let index = self.0.len();
            let id = format!("replica-{}", index + 1);
            let child = std::process::Command::new(std::env::current_exe()?)
                .arg(REPLICA_ROLE)
                .arg(std::process::id().to_string())
                .arg(connect)
                .arg(ledger)
                .arg(&id)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()?;
            self.0.push(Replica {
                id,
                child,
                stdin: None,
            });
            let replica = &mut self.0[index];
            if let Some(stdin) = replica.child.stdin.take() {
                replica.stdin = Some(tokio::process::ChildStdin::from_std(stdin)?);
            }
            let stdout = replica
                .child
                .stdout
                .take()
                .ok_or("the replica has no stdout")?;
            let mut lines = BufReader::new(tokio::process::ChildStdout::from_std(stdout)?).lines();
            let events = events.clone();
            tokio::spawn(async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Ok(report) = serde_json::from_str(&line) {
                        let _ = events.send(Event::Report(index, report));
                    }
                }
                let _ = events.send(Event::Gone(index));
            });
            Ok(())
        }

        fn pid(&self, index: usize) -> Pid {
            Pid::from_raw(self.0[index].child.id() as i32)
        }

        fn signal(&self, index: usize, signal: Signal) -> Result<(), Box<dyn Error>> {
            kill(self.pid(index), signal)
                .map_err(|e| format!("cannot send {signal} to {}: {e}", self.0[index].id).into())
        }

        async fn tell(&mut self, index: usize, line: &str) -> Result<(), Box<dyn Error>> {
            let stdin = self.0[index]
                .stdin
                .as_mut()
                .ok_or("the replica's stdin is closed")?;
            stdin.write_all(format!("{line}\n").as_bytes()).await?;
            stdin.flush().await?;
            Ok(())
        }

        /// Closes every replica's stdin: each leaves the election and ends its session.
        fn shut_down(&mut self) {
            for replica in &mut self.0 {
                replica.stdin = None;
            }
        }
    }

    /// A leadership term as the director saw it begin.
    struct Term {
        replica: usize,
        token: FencingToken,
    }

    #[derive(Default)]
    struct ReplicaView {
        joined: bool,
        /// Killed on purpose, or asked to shut down: its exit is expected.
        may_exit: bool,
        gone: bool,
        prepared: Option<u64>,
        late_write: Option<LateWrite>,
        noticed: Option<bool>,
        rejoined_session: Option<i64>,
    }

    /// The story so far, and the timeline printer.
    struct Story {
        started: Instant,
        events: mpsc::UnboundedReceiver<Event>,
        ids: Vec<String>,
        replicas: Vec<ReplicaView>,
        terms: Vec<Term>,
        writes: Vec<Record>,
        timeout: Option<Duration>,
        /// A fault whose failover is being timed.
        fault: Option<(&'static str, Instant)>,
        failovers: Vec<(&'static str, Duration)>,
    }

    fn secs(d: Duration) -> String {
        format!("{:.2} s", d.as_secs_f64())
    }

    impl Story {
        fn say(&self, text: impl AsRef<str>) {
            println!(
                "[{:>6.2}s] {}",
                self.started.elapsed().as_secs_f64(),
                text.as_ref()
            );
        }

        fn accepted_from(&self, replica: usize, token: FencingToken) -> usize {
            self.writes
                .iter()
                .filter(|w| w.accepted && w.writer == self.ids[replica] && w.token == token)
                .count()
        }

        /// Handles events until `check` gives a value, for at most `STEP_BOUND`.
        async fn until<T>(
            &mut self,
            what: &str,
            mut check: impl FnMut(&Story) -> Option<T>,
        ) -> Result<T, Box<dyn Error>> {
            let deadline = tokio::time::Instant::now() + STEP_BOUND;
            loop {
                if let Some(value) = check(self) {
                    return Ok(value);
                }
                let event = match tokio::time::timeout_at(deadline, self.events.recv()).await {
                    Ok(Some(e)) => e,
                    Ok(None) => return Err("the replicas' event channel closed".into()),
                    Err(_) => {
                        return Err(format!(
                            "the story stalled: no {what} within {}",
                            secs(STEP_BOUND)
                        )
                        .into());
                    }
                };
                self.handle(event)?;
            }
        }

        /// Waits for the `n`-th leadership term (from 0) to begin: its replica and token.
        async fn term(
            &mut self,
            n: usize,
            what: &str,
        ) -> Result<(usize, FencingToken), Box<dyn Error>> {
            self.until(what, |s| s.terms.get(n).map(|t| (t.replica, t.token)))
                .await
        }

        /// Waits until the leader of `term` has written `count` batches in it.
        async fn batches(
            &mut self,
            term: (usize, FencingToken),
            count: usize,
        ) -> Result<(), Box<dyn Error>> {
            let what = format!("{count} batches from {}", self.ids[term.0]);
            self.until(&what, |s| {
                (s.accepted_from(term.0, term.1) >= count).then_some(())
            })
            .await
        }

        /// Handles the events that arrive during `period`.
        async fn pump(&mut self, period: Duration) -> Result<(), Box<dyn Error>> {
            let until = tokio::time::Instant::now() + period;
            while let Ok(Some(event)) = tokio::time::timeout_at(until, self.events.recv()).await {
                self.handle(event)?;
            }
            Ok(())
        }

        fn handle(&mut self, event: Event) -> Result<(), Box<dyn Error>> {
            match event {
                Event::Write(w) => {
                    if w.accepted {
                        self.say(format!(
                            "ledger: accepted batch {} from {} (token {})",
                            w.batch, w.writer, w.token
                        ));
                    } else {
                        self.say(format!(
                            "ledger: REJECTED batch {} from {}: its token {} is older than {}, which the fence has already admitted",
                            w.batch, w.writer, w.token, w.highest
                        ));
                    }
                    self.writes.push(w);
                }
                Event::Gone(i) => {
                    self.replicas[i].gone = true;
                    if !self.replicas[i].may_exit {
                        return Err(format!(
                            "{} exited unexpectedly (its error, if any, is above)",
                            self.ids[i]
                        )
                        .into());
                    }
                }
                Event::Report(i, report) => self.on_report(i, report),
            }
            Ok(())
        }

        fn on_report(&mut self, i: usize, report: Report) {
            let id = self.ids[i].clone();
            match report {
                Report::Joined {
                    pid,
                    session_id,
                    timeout_ms,
                } => {
                    let timeout = Duration::from_millis(timeout_ms);
                    self.timeout.get_or_insert(timeout);
                    self.replicas[i].joined = true;
                    self.say(format!(
                        "{id} is up (pid {pid}): ZooKeeper session {session_id:#x}, timeout {}",
                        secs(timeout)
                    ));
                }
                Report::Session {
                    state,
                    session_id,
                    new_session,
                    closed,
                } => {
                    if closed || state == "connected" {
                        // Its first session (reported as `Joined`), or closed on purpose (it
                        // reports that itself).
                    } else if new_session && let Some(sid) = session_id {
                        self.replicas[i].rejoined_session = Some(sid);
                        self.say(format!(
                            "{id}: back on a new ZooKeeper session {sid:#x} (its old node went with the old session)"
                        ));
                    } else {
                        let what = match state.as_str() {
                            "lost" => "its session is lost (as far as it can prove)",
                            "suspended" => "its connection is suspended",
                            "reconnected" => "reconnected, same session",
                            other => other,
                        };
                        self.say(format!("{id}: {what}"));
                    }
                }
                Report::Elected { token } => {
                    let token = FencingToken::from_raw(token);
                    let mut line = format!("{id} is elected leader: fencing token {token}");
                    if let Some(previous) = self.terms.last() {
                        line.push_str(&format!(" (> {})", previous.token));
                    }
                    if let Some((fault, at)) = self.fault.take() {
                        let took = at.elapsed();
                        line.push_str(&format!("; failover took {} after the {fault}", secs(took)));
                        self.failovers.push((fault, took));
                    }
                    self.say(line);
                    self.terms.push(Term { replica: i, token });
                }
                Report::Prepared {
                    batch,
                    token,
                    valid_for_ms,
                } => {
                    self.replicas[i].prepared = Some(batch);
                    self.say(format!(
                        "{id} checks is_valid() = true ({} left before its term's deadline) and prepares batch {batch} with token {token}",
                        secs(Duration::from_millis(valid_for_ms))
                    ));
                }
                Report::LateWrite(late) => {
                    self.say(format!(
                        "{id} had stood still {} between its check and that write; when it went out, is_valid() was already {}",
                        secs(Duration::from_millis(late.paused_ms)),
                        late.was_valid
                    ));
                    self.replicas[i].late_write = Some(late);
                }
                Report::TermOver {
                    token,
                    is_valid,
                    end_reason,
                    rejected,
                } => {
                    let reason = end_reason.as_deref().unwrap_or("not yet");
                    if rejected {
                        self.say(format!(
                            "{id} stops its job, deposed: the ledger said no, and is_valid() = {is_valid} (its term with token {token} ended: {reason})"
                        ));
                    } else {
                        self.say(format!(
                            "{id}'s term with token {token} ends ({reason}); is_valid() = {is_valid}, its job stops"
                        ));
                    }
                    if self.replicas[i].prepared.is_some() && self.replicas[i].noticed.is_none() {
                        self.replicas[i].noticed = Some(!is_valid);
                    }
                }
                Report::Closed => {
                    self.say(format!("{id} left the election and closed its session"));
                }
            }
        }
    }

    fn order(participants: &[zookeeper_recipes::Participant]) -> String {
        participants
            .iter()
            .map(|p| {
                if p.is_leader {
                    format!("{} (leader)", p.id)
                } else {
                    p.id.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub(super) async fn run() -> Result<(), Box<dyn Error>> {
        let started = Instant::now();
        println!(
            "A nightly statement job must run on exactly one of {REPLICAS} replicas (child processes of this\n\
             demo). They elect a leader with a LeaderSelector on {PATH}. The leader writes\n\
             statement batches to a ledger hosted here, passing its term's fencing token; the ledger's\n\
             fence rejects a token older than one it has already seen. Then the leader crashes\n\
             (SIGKILL), and the next leader freezes (SIGSTOP) right before a write, as in a long GC\n\
             pause. Times are since the start.\n"
        );
        let (events_tx, events) = mpsc::unbounded_channel();
        let mut story = Story {
            started,
            events,
            ids: (1..=REPLICAS).map(|i| format!("replica-{i}")).collect(),
            replicas: (0..REPLICAS).map(|_| ReplicaView::default()).collect(),
            terms: Vec::new(),
            writes: Vec::new(),
            timeout: None,
            fault: None,
            failovers: Vec::new(),
        };
        let zookeeper = ZooKeeper::from_env().await?;
        story.say(format!("using {}", zookeeper.describe()));
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let ledger_address = listener.local_addr()?.to_string();
        let ledger = Arc::new(Ledger {
            fence: Fence::new(),
            log: std::sync::Mutex::new(Vec::new()),
            events: events_tx.clone(),
        });
        tokio::spawn(serve(listener, Arc::clone(&ledger)));
        story.say(format!("the fenced ledger listens on {ledger_address}"));
        // The director's own session, to show the election order.
        let observer = Session::builder(zookeeper.connect_string())
            .session_timeout(Duration::from_secs(10))
            .connect()
            .await?;

        let mut replicas = Replicas(Vec::new());
        for _ in 0..REPLICAS {
            replicas.spawn(zookeeper.connect_string(), &ledger_address, &events_tx)?;
        }
        story
            .until("start of all replicas", |s| {
                s.replicas.iter().all(|r| r.joined).then_some(())
            })
            .await?;

        // 1. A leader, writing.
        let first = story.term(0, "first leader").await?;
        story.pump(Duration::from_millis(100)).await?;
        let participants = participants_on(&observer, PATH).await?;
        story.say(format!("election order: {}", order(&participants)));
        story.batches(first, 3).await?;

        // 2. Crash the leader.
        story.say(format!(
            "=> SIGKILL {}: the leader crashes. Its node lives until ZooKeeper expires its session ({} after its last heartbeat)",
            story.ids[first.0],
            secs(story.timeout.unwrap_or(SESSION_TIMEOUT))
        ));
        story.replicas[first.0].may_exit = true;
        story.fault = Some(("SIGKILL", Instant::now()));
        replicas.signal(first.0, Signal::SIGKILL)?;
        let second = story.term(1, "successor after the crash").await?;
        story.batches(second, 2).await?;

        // 3. Freeze the new leader between its check and its write.
        replicas.tell(second.0, "hold").await?;
        story
            .until("prepared write of the second leader", |s| {
                s.replicas[second.0].prepared
            })
            .await?;
        replicas.signal(second.0, Signal::SIGSTOP)?;
        let frozen_at = Instant::now();
        story.fault = Some(("SIGSTOP", frozen_at));
        story.say(format!(
            "=> SIGSTOP {}: frozen between that check and its write, as in a long GC pause",
            story.ids[second.0]
        ));
        // The go for the prepared write waits in the pipe until the replica runs again.
        replicas.tell(second.0, "send").await?;
        let third = story.term(2, "successor after the freeze").await?;
        story.batches(third, 1).await?;

        // 4. Wake the frozen one: its late write meets the fence.
        story.say(format!(
            "=> SIGCONT {} after {} frozen: it runs again, and so does the write it had handed to its sender",
            story.ids[second.0],
            secs(frozen_at.elapsed())
        ));
        replicas.signal(second.0, Signal::SIGCONT)?;
        let late_batch = story.replicas[second.0].prepared.unwrap_or_default();
        let late_id = story.ids[second.0].clone();
        let late_accepted = story
            .until("late write of the frozen leader at the ledger", |s| {
                s.writes
                    .iter()
                    .find(|w| w.writer == late_id && w.batch == late_batch)
                    .map(|w| w.accepted)
            })
            .await?;
        story
            .until("frozen leader's own verdict on its term", |s| {
                s.replicas[second.0].noticed
            })
            .await?;
        story
            .until("new session of the frozen replica", |s| {
                s.replicas[second.0].rejoined_session
            })
            .await?;
        let rejoin_bound = Instant::now() + STEP_BOUND;
        let participants = loop {
            let participants = participants_on(&observer, PATH).await?;
            if participants.iter().any(|p| p.id == late_id && !p.is_leader) {
                break participants;
            }
            if Instant::now() > rejoin_bound {
                return Err(format!("{late_id} did not rejoin the election as a follower").into());
            }
            story.pump(Duration::from_millis(100)).await?;
        };
        story.say(format!(
            "{late_id} is back as a follower; election order: {}",
            order(&participants)
        ));

        // 5. Shut down: every replica leaves the election and ends its session.
        story.say(
            "shutting down: each replica closes its selector (deleting its node) and its session",
        );
        for view in &mut story.replicas {
            view.may_exit = true;
        }
        replicas.shut_down();
        story
            .until("exit of every replica", |s| {
                s.replicas.iter().all(|r| r.gone).then_some(())
            })
            .await?;
        drop(replicas);
        observer.close().await?;

        summary(&story, &ledger.records(), late_accepted, second.0)
    }

    /// Prints the summary and checks that the story held.
    fn summary(
        story: &Story,
        records: &[Record],
        late_accepted: bool,
        frozen: usize,
    ) -> Result<(), Box<dyn Error>> {
        let mut broken = Vec::new();
        println!("\nSummary");
        let leaders: Vec<String> = story
            .terms
            .iter()
            .map(|t| format!("{} (token {})", story.ids[t.replica], t.token))
            .collect();
        println!("  leaders, in order:  {}", leaders.join(" -> "));
        if story.terms.windows(2).any(|w| w[1].token <= w[0].token) {
            broken.push("a later term did not get a higher fencing token".to_owned());
        }
        for (fault, took) in &story.failovers {
            println!(
                "  failover after {fault}: {} (session timeout {})",
                secs(*took),
                secs(story.timeout.unwrap_or(SESSION_TIMEOUT))
            );
        }
        let accepted = records.iter().filter(|r| r.accepted).count();
        let rejected: Vec<&Record> = records.iter().filter(|r| !r.accepted).collect();
        println!(
            "  ledger:             {accepted} batches accepted, {} rejected{}",
            rejected.len(),
            rejected
                .iter()
                .map(|r| format!(
                    " ({}'s batch {}, token {} < {})",
                    r.writer, r.batch, r.token, r.highest
                ))
                .collect::<String>()
        );
        // Every accepted write carried the highest token seen so far: no deposed leader wrote.
        if records.iter().any(|r| r.accepted && r.token < r.highest) {
            broken.push("the ledger accepted a write from a deposed leader".to_owned());
        }
        if late_accepted {
            broken.push(format!(
                "the ledger ACCEPTED the frozen leader's late write ({}'s batch)",
                story.ids[frozen]
            ));
        }
        let view = &story.replicas[frozen];
        match (view.noticed, &view.late_write) {
            (Some(true), Some(late)) => println!(
                "  frozen leader:      {} stood still {}, then saw by itself that its term was over (is_valid() = false) and rejoined as a follower",
                story.ids[frozen],
                secs(Duration::from_millis(late.paused_ms))
            ),
            _ => broken.push(format!(
                "{} did not see by itself that its term was over",
                story.ids[frozen]
            )),
        }
        if broken.is_empty() {
            println!(
                "\nThe story held: one leader at a time, each term with a higher token, and the frozen\n\
                 leader's late write was rejected by the fence while the leader itself saw its term was\n\
                 over from its deadline. Check is_valid() before every side effect, and pass the token to\n\
                 every resource you write."
            );
            Ok(())
        } else {
            Err(format!("the story did NOT hold:\n  {}", broken.join("\n  ")).into())
        }
    }
}
