//! The nightly statement run as a [`ScheduledJob`]: once per slot across failovers, its writes
//! fenced in SQLite by the token and keyed by the slot.
//!
//! ```text
//! cargo run --example statement_job                       # nightly, 02:00 Europe/Oslo: waits for it
//! cargo run --example statement_job -- --every 3s         # a slot every 3 s: the story at once
//! cargo run --example statement_job -- --cron "0 2 * * *" --tz Europe/Oslo --batches 8 --db statements.db
//! ```
//!
//! Two replicas (two ZooKeeper sessions in this process; run it on two machines against one
//! ensemble with `ZK_CONNECT` and it works the same) stand for the job `/cron/statement-job`.
//! The leader runs each slot of the schedule once: the slot's nominal instant, in the job's time
//! zone, gives the business date whose statements it writes (the 02:00 run closes the day
//! before). The run claims its row, keyed by the slot, with the term's token, and every later
//! write of the run is fenced by that token:
//!
//! ```sql
//! INSERT INTO statement_runs (slot, business_date, total_batches, attempt, updated_by, fencing_token)
//! VALUES (:slot, :date, :total, :attempt, :writer, :token)
//! ON CONFLICT (slot) DO UPDATE SET attempt = excluded.attempt, updated_by = excluded.updated_by,
//!                                  fencing_token = excluded.fencing_token
//!  WHERE statement_runs.fencing_token < excluded.fencing_token;
//!
//! UPDATE statement_runs SET batches_done = :batch, updated_by = :writer
//!  WHERE slot = :slot AND fencing_token = :token;    -- 0 rows: a newer term owns the slot
//! ```
//!
//! Halfway through the first slot the leader leaves at once (`close()`, as a crash or a deploy
//! that cannot wait; [`ScheduledJob::drain`] would let the run finish first): its run is cut off
//! and the slot's record stays `running`. The other replica finds it, runs the same slot again with
//! attempt 2 and a higher token, resumes after the last batch the first run wrote, and a write
//! the old leader had prepared changes nothing. Then the job's history is printed. A re-run of a
//! slot whose batches were all written (its end was not recorded) writes nothing: the row says
//! it is complete.
//!
//! `tests/recipes/examples.rs` runs this job's code (it includes this file) against a real server.

use zookeeper_recipes_rigs::prologue as common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{Days, TimeZone, Utc};
use chrono_tz::Tz;
use rusqlite::{Connection, OptionalExtension, named_params};
use tokio::sync::mpsc;
use zookeeper_recipes::job::{JobEvent, Schedule, ScheduledJob, SlotRun};
use zookeeper_recipes::{FencingToken, Session};

/// The job's path.
pub(crate) const PATH: &str = "/cron/statement-job";

/// One row per slot (a night's run), and the statement batches it wrote.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS statement_runs (
    slot          TEXT PRIMARY KEY,           -- the slot key: the run's nominal instant, UTC
    business_date TEXT NOT NULL,              -- the day whose statements the run writes
    total_batches INTEGER NOT NULL,
    batches_done  INTEGER NOT NULL DEFAULT 0,
    attempt       INTEGER NOT NULL,
    updated_by    TEXT,
    fencing_token INTEGER NOT NULL            -- the term that owns the run
);
CREATE TABLE IF NOT EXISTS statement_batches (
    slot          TEXT NOT NULL,
    batch         INTEGER NOT NULL,
    written_by    TEXT NOT NULL,
    fencing_token INTEGER NOT NULL,
    PRIMARY KEY (slot, batch)
);";

/// The claim: the first run of a slot inserts its row; a later run (a retry after a failover)
/// takes the row over only with a higher token. An older token changes nothing.
const CLAIM_RUN: &str = "
INSERT INTO statement_runs (slot, business_date, total_batches, attempt, updated_by, fencing_token)
VALUES (:slot, :date, :total, :attempt, :writer, :token)
ON CONFLICT (slot) DO UPDATE SET attempt = excluded.attempt, updated_by = excluded.updated_by,
                                 fencing_token = excluded.fencing_token
 WHERE statement_runs.fencing_token < excluded.fencing_token";

/// The fenced write: only the term that owns the run moves it on.
const ADVANCE_RUN: &str = "
UPDATE statement_runs SET batches_done = :batch, updated_by = :writer
 WHERE slot = :slot AND fencing_token = :token";

/// A run as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) business_date: String,
    pub(crate) total_batches: u32,
    pub(crate) batches_done: u32,
    pub(crate) attempt: u32,
    pub(crate) updated_by: Option<String>,
    pub(crate) fencing_token: FencingToken,
}

/// What a claim did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The run's row is this token's (inserted, taken over, or this term's already): go on
    /// after `batches_done`.
    Owned(Run),
    /// A newer term owns the slot. Stop.
    Deposed,
}

/// What a fenced write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Write {
    /// The batch is stored and the run moved on.
    Applied,
    /// Zero rows changed: another term owns the run. Stop.
    Deposed,
}

/// One replica's connection to the statements database (SQLite here; any database with
/// conditional updates works the same way).
#[derive(Clone)]
pub(crate) struct Statements {
    connection: Arc<Mutex<Connection>>,
}

impl Statements {
    pub(crate) fn open(path: &Path) -> rusqlite::Result<Self> {
        let connection = Connection::open(path)?;
        connection.busy_timeout(Duration::from_secs(5))?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.execute_batch(SCHEMA)?;
        Ok(Statements {
            connection: Arc::new(Mutex::new(connection)),
        })
    }

    /// Runs `f` on the connection off the async threads (SQLite blocks).
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, JobError> {
        let connection = Arc::clone(&self.connection);
        tokio::task::spawn_blocking(move || {
            let mut connection = connection.lock().map_err(|_| JobError::Poisoned)?;
            f(&mut connection).map_err(JobError::Sqlite)
        })
        .await
        .map_err(|e| JobError::Task(e.to_string()))?
    }

    /// Claims the run of `slot` for `token` (see [`CLAIM_RUN`]).
    pub(crate) async fn claim(
        &self,
        slot: &str,
        business_date: &str,
        total_batches: u32,
        attempt: u32,
        writer: &str,
        token: FencingToken,
    ) -> Result<Claim, JobError> {
        let (slot, date, writer) = (slot.to_owned(), business_date.to_owned(), writer.to_owned());
        self.with(move |c| {
            let tx = c.transaction()?;
            tx.execute(
                CLAIM_RUN,
                named_params! {
                    ":slot": slot, ":date": date, ":total": total_batches, ":attempt": attempt,
                    ":writer": writer, ":token": token.get(),
                },
            )?;
            // Zero rows changed and a row with this very token: this term claimed it before
            // (its first claim's reply was lost). A higher token: deposed.
            let run = read_run(&tx, &slot)?;
            tx.commit()?;
            Ok(match run {
                Some(run) if run.fencing_token == token => Claim::Owned(run),
                _ => Claim::Deposed,
            })
        })
        .await
    }

    pub(crate) async fn run(&self, slot: &str) -> Result<Option<Run>, JobError> {
        let slot = slot.to_owned();
        self.with(move |c| read_run(c, &slot)).await
    }

    /// Stores `batch` of the run of `slot` and moves the run on, in one transaction, fenced by
    /// `token`.
    pub(crate) async fn write_batch(
        &self,
        slot: &str,
        batch: u32,
        writer: &str,
        token: FencingToken,
    ) -> Result<Write, JobError> {
        let (slot, writer) = (slot.to_owned(), writer.to_owned());
        self.with(move |c| {
            let tx = c.transaction()?;
            let changed = tx.execute(
                ADVANCE_RUN,
                named_params! {
                    ":batch": batch, ":writer": writer, ":token": token.get(), ":slot": slot,
                },
            )?;
            if changed == 0 {
                return Ok(Write::Deposed); // dropping `tx` rolls back
            }
            tx.execute(
                "INSERT INTO statement_batches (slot, batch, written_by, fencing_token)
                 VALUES (?1, ?2, ?3, ?4)",
                (&slot, batch, &writer, token.get()),
            )?;
            tx.commit()?;
            Ok(Write::Applied)
        })
        .await
    }
}

fn read_run(c: &Connection, slot: &str) -> rusqlite::Result<Option<Run>> {
    c.query_row(
        "SELECT business_date, total_batches, batches_done, attempt, updated_by, fencing_token
           FROM statement_runs WHERE slot = ?1",
        [slot],
        |row| {
            Ok(Run {
                business_date: row.get(0)?,
                total_batches: row.get(1)?,
                batches_done: row.get(2)?,
                attempt: row.get(3)?,
                updated_by: row.get(4)?,
                fencing_token: FencingToken::from_raw(row.get(5)?),
            })
        },
    )
    .optional()
}

/// The business date a slot closes: the day before its nominal instant, in the job's zone (the
/// 02:00 run of 3 December writes the statements of 2 December).
pub(crate) fn business_date(nominal_ms: i64, zone: Tz) -> String {
    Utc.timestamp_millis_opt(nominal_ms)
        .single()
        .map(|at| at.with_timezone(&zone).date_naive())
        .and_then(|day| day.checked_sub_days(Days::new(1)))
        .map_or_else(|| format!("{nominal_ms}ms"), |day| day.to_string())
}

/// Errors of the job.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JobError {
    #[error("SQLite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("a newer term owns the run of slot {0}")]
    Deposed(String),
    #[error("the term ended before the run of slot {0} was complete")]
    TermEnded(String),
    #[error("the database connection's lock is poisoned")]
    Poisoned,
    #[error("database task: {0}")]
    Task(String),
}

/// What the job reports as it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Progress {
    /// A run of a slot began; it resumes after `batches_done`.
    Started {
        slot: String,
        business_date: String,
        writer: String,
        token: FencingToken,
        attempt: u32,
        recovering: bool,
        batches_done: u32,
    },
    /// A batch is stored.
    Wrote {
        slot: String,
        writer: String,
        token: FencingToken,
        batch: u32,
    },
    /// Every batch of the slot's run is stored.
    Finished {
        slot: String,
        writer: String,
        token: FencingToken,
    },
    /// The run stopped before it was complete.
    Stopped {
        slot: String,
        writer: String,
        token: FencingToken,
        deposed: bool,
    },
}

/// What each run of the job needs.
#[derive(Clone)]
pub(crate) struct StatementJob {
    pub(crate) db: Statements,
    pub(crate) zone: Tz,
    pub(crate) total_batches: u32,
    /// How long producing one batch takes.
    pub(crate) pace: Duration,
    pub(crate) progress: mpsc::UnboundedSender<Progress>,
}

impl StatementJob {
    /// One slot's run: claim the slot's row, then batch by batch, for as long as the term holds.
    pub(crate) async fn run(self, run: SlotRun) -> Result<(), JobError> {
        let (slot, token) = (run.slot().to_owned(), run.token());
        let term = run.leadership();
        let writer = term.participant_id().to_owned();
        let report = |p: Progress| {
            let _ = self.progress.send(p);
        };
        let stopped = |deposed: bool| Progress::Stopped {
            slot: slot.clone(),
            writer: writer.clone(),
            token,
            deposed,
        };
        let date = business_date(run.nominal_ms(), self.zone);
        let claimed = self
            .db
            .claim(
                &slot,
                &date,
                self.total_batches,
                run.attempt(),
                &writer,
                token,
            )
            .await?;
        let Claim::Owned(state) = claimed else {
            report(stopped(true));
            return Err(JobError::Deposed(slot));
        };
        report(Progress::Started {
            slot: slot.clone(),
            business_date: state.business_date.clone(),
            writer: writer.clone(),
            token,
            attempt: run.attempt(),
            recovering: run.is_recovering(),
            batches_done: state.batches_done,
        });
        // A re-run of a run whose batches were all written (its end was not recorded) writes
        // nothing more.
        for batch in state.batches_done + 1..=state.total_batches {
            // Producing a batch takes a while. Stop at once if the term ends meanwhile.
            tokio::select! {
                _ = term.cancelled() => {
                    report(stopped(false));
                    return Err(JobError::TermEnded(slot));
                }
                _ = tokio::time::sleep(self.pace) => {}
            }
            // Check right before the side effect: no network needed.
            if !term.is_valid() {
                report(stopped(false));
                return Err(JobError::TermEnded(slot));
            }
            if self.db.write_batch(&slot, batch, &writer, token).await? == Write::Deposed {
                report(stopped(true));
                return Err(JobError::Deposed(slot));
            }
            report(Progress::Wrote {
                slot: slot.clone(),
                writer: writer.clone(),
                token,
                batch,
            });
        }
        report(Progress::Finished {
            slot,
            writer,
            token,
        });
        Ok(())
    }
}

/// One replica: it stands for the job and runs each slot it takes up while leading.
pub(crate) async fn start_replica(
    session: &Session,
    path: &str,
    id: &str,
    schedule: Schedule,
    job: StatementJob,
) -> zookeeper_recipes::Result<ScheduledJob> {
    ScheduledJob::builder(session, path)
        .schedule(schedule)
        .id(id)
        .start(move |run: SlotRun| job.clone().run(run))
        .await
}

#[derive(clap::Parser)]
struct Args {
    /// The cron expression of the nightly run (in `--tz`).
    #[arg(long, default_value = "0 2 * * *")]
    cron: String,
    /// The job's IANA time zone: the cron expression's, and the business dates'.
    #[arg(long, default_value = "Europe/Oslo")]
    tz: String,
    /// A slot every DURATION (`3s`) instead of the cron expression: the story at once.
    #[arg(long, value_parser = humantime::parse_duration)]
    every: Option<Duration>,
    /// How many batches each run has.
    #[arg(long, default_value_t = 8)]
    batches: u32,
    /// How long producing one batch takes.
    #[arg(long, default_value = "300ms", value_parser = humantime::parse_duration)]
    pace: Duration,
    /// The SQLite database (default: a fresh file in the temporary directory).
    #[arg(long)]
    db: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::init_tracing();
    common::exit_code(demo(clap::Parser::parse()).await)
}

async fn demo(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    const REPLICAS: [&str; 2] = ["replica-1", "replica-2"];
    let zone: Tz = args
        .tz
        .parse()
        .map_err(|_| format!("{:?} is not an IANA time zone", args.tz))?;
    let schedule = match args.every {
        Some(period) => Schedule::every(period)?,
        None => Schedule::cron(&args.cron, &args.tz)?,
    };
    let zookeeper = common::ZooKeeper::from_env().await?;
    println!("using {}", zookeeper.describe());
    let temporary = args.db.is_none();
    let db_path = args.db.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("statement-job-{}.db", std::process::id()))
    });
    println!("statements database: {}", db_path.display());
    let now_ms = Utc::now().timestamp_millis();
    if let Some(next) = schedule.next_after(now_ms) {
        println!(
            "schedule {}: the next slot is {} (in {:.1} s)",
            schedule.spec(),
            Schedule::key(next),
            (next - now_ms) as f64 / 1000.0
        );
    }

    let (progress_tx, mut progress) = mpsc::unbounded_channel();
    let mut replicas = Vec::new();
    let mut events = Vec::new();
    for id in REPLICAS {
        let session = Session::builder(zookeeper.connect_string())
            .session_timeout(Duration::from_secs(5))
            .connect()
            .await?;
        // Each replica has its own database connection, as it would on its own machine.
        let job = StatementJob {
            db: Statements::open(&db_path)?,
            zone,
            total_batches: args.batches,
            pace: args.pace,
            progress: progress_tx.clone(),
        };
        let replica = start_replica(&session, PATH, id, schedule.clone(), job).await?;
        events.push(replica.events());
        replicas.push((session, replica));
    }

    let mut story: Option<String> = None; // the slot whose leader leaves halfway
    let mut deposed = None;
    while let Some(p) = progress.recv().await {
        match p {
            Progress::Started {
                slot,
                business_date,
                writer,
                token,
                attempt,
                recovering,
                batches_done,
            } => println!(
                "{writer} runs slot {slot} (business date {business_date}): attempt {attempt}, \
                 token {token}{}; resumes after batch {batches_done}",
                if recovering { ", recovering" } else { "" }
            ),
            Progress::Wrote {
                slot,
                writer,
                token,
                batch,
            } => {
                println!(
                    "{writer} wrote batch {batch}/{} of {slot} (token {token})",
                    args.batches
                );
                // Halfway through the first slot, its leader is taken down by a rolling deploy.
                if story.is_none() && batch == args.batches / 2 {
                    story = Some(slot.clone());
                    deposed = Some((slot, writer.clone(), token, batch + 1));
                    println!("{writer} leaves at once (close(), not drain(): the run is cut off)");
                    if let Some((_, job)) = replicas.iter().find(|(_, j)| j.id() == writer) {
                        job.close().await?;
                    }
                }
            }
            Progress::Finished { slot, writer, .. } => {
                println!("{writer} finished the run of {slot}");
                if story.as_ref() == Some(&slot) {
                    break;
                }
            }
            Progress::Stopped {
                slot,
                writer,
                deposed,
                ..
            } => println!(
                "{writer} stopped its run of {slot}{}",
                if deposed {
                    ": deposed (0 rows)"
                } else {
                    ": its term ended"
                }
            ),
        }
    }

    // The old leader's write, prepared before it left, arrives late: zero rows change.
    let db = Statements::open(&db_path)?;
    if let Some((slot, writer, token, batch)) = deposed {
        if db.write_batch(&slot, batch, &writer, token).await? != Write::Deposed {
            return Err("a stale write changed the run".into());
        }
        println!(
            "a late write of batch {batch} of {slot} by {writer} with token {token}: 0 rows changed, rejected"
        );
        if let Some(run) = db.run(&slot).await? {
            println!(
                "run {slot} (business date {}): {}/{} batches, attempt {}, last written by {} with token {}",
                run.business_date,
                run.batches_done,
                run.total_batches,
                run.attempt,
                run.updated_by.as_deref().unwrap_or("nobody"),
                run.fencing_token
            );
        }
    }
    if let Some((i, (_, job))) = replicas
        .iter()
        .enumerate()
        .find(|(_, (_, j))| !j.is_stopped())
    {
        // The successor records the slot's end right after the job returns: wait for that.
        let slot = story.unwrap_or_default();
        let recorded = tokio::time::timeout(Duration::from_secs(10), async {
            while let Ok(event) = events[i].recv().await {
                if matches!(&event, JobEvent::SlotFinished { slot: s, .. } if *s == slot) {
                    return true;
                }
            }
            false
        })
        .await;
        if recorded != Ok(true) {
            return Err(format!("the end of slot {slot} was not recorded within 10 s").into());
        }
        println!("the job's history, newest first:");
        for record in job.admin().history(5).await? {
            println!(
                "  {} {} attempt {} token {} runner {}{}",
                record.slot,
                record.state.as_str(),
                record.attempt,
                record.token.map_or("-".to_owned(), |t| t.to_string()),
                record.runner.as_deref().unwrap_or("-"),
                record
                    .reason
                    .as_deref()
                    .map_or(String::new(), |r| format!(" ({r})")),
            );
        }
    }
    for (session, job) in &replicas {
        job.close().await?;
        session.close().await?;
    }
    if temporary {
        for suffix in ["", "-wal", "-shm"] {
            let mut file = db_path.clone().into_os_string();
            file.push(suffix);
            let _ = std::fs::remove_file(file);
        }
    }
    Ok(())
}
