//! A nightly statement job as a `LeaderSelector`, fenced in SQLite.
//!
//! ```text
//! cargo run --example statement_job [-- --batches 8 --db statements.db]
//! ```
//!
//! Two replicas (two ZooKeeper sessions in this process; run it on two machines against one
//! ensemble with `ZK_CONNECT` and it works the same) queue for `/election/statement-job`. The
//! leader works through tonight's run batch by batch. Every write to the database is fenced by the
//! term's token, in the same transaction as the write itself:
//!
//! ```sql
//! UPDATE statement_runs SET batches_done = :batch, updated_by = :writer, fencing_token = :token
//!  WHERE id = :id AND fencing_token <= :token
//! ```
//!
//! Zero rows changed means a newer term has written the row: this replica is deposed and stops,
//! however long it was paused and whatever it believes. Halfway through, the leader leaves (a
//! rolling deploy); the other replica resumes where it stopped, with a higher token, and a write
//! the old leader had prepared changes nothing.
//!
//! `tests/examples.rs` runs this job's code (it includes this file) against a real server.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, named_params};
use tokio::sync::mpsc;
use zookeeper_recipes::{FencingToken, LeaderSelector, Leadership, Session};

/// The election path of the job.
pub(crate) const PATH: &str = "/election/statement-job";

/// One row per nightly run, and the statement batches it wrote.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS statement_runs (
    id            TEXT PRIMARY KEY,           -- the run: the business date
    total_batches INTEGER NOT NULL,
    batches_done  INTEGER NOT NULL DEFAULT 0,
    updated_by    TEXT,
    fencing_token INTEGER NOT NULL DEFAULT 0  -- the newest term that wrote this run
);
CREATE TABLE IF NOT EXISTS statement_batches (
    run_id        TEXT NOT NULL,
    batch         INTEGER NOT NULL,
    written_by    TEXT NOT NULL,
    fencing_token INTEGER NOT NULL,
    PRIMARY KEY (run_id, batch)
);";

/// The fenced write: only a term at least as new as the last writer's may move the run on.
const ADVANCE_RUN: &str = "
UPDATE statement_runs SET batches_done = :batch, updated_by = :writer, fencing_token = :token
 WHERE id = :id AND fencing_token <= :token";

/// A run as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) total_batches: u32,
    pub(crate) batches_done: u32,
    pub(crate) updated_by: Option<String>,
    pub(crate) fencing_token: FencingToken,
}

/// What a fenced write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Write {
    /// The batch is stored and the run moved on.
    Applied,
    /// Zero rows changed: a newer term owns the run. Stop.
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

    /// Creates tonight's run unless it exists.
    pub(crate) async fn schedule(&self, run: &str, total_batches: u32) -> Result<(), JobError> {
        let run = run.to_owned();
        self.with(move |c| {
            c.execute(
                "INSERT OR IGNORE INTO statement_runs (id, total_batches) VALUES (?1, ?2)",
                (run, total_batches),
            )
            .map(drop)
        })
        .await
    }

    pub(crate) async fn run(&self, run: &str) -> Result<Option<Run>, JobError> {
        let run = run.to_owned();
        self.with(move |c| {
            c.query_row(
                "SELECT total_batches, batches_done, updated_by, fencing_token
                   FROM statement_runs WHERE id = ?1",
                [run],
                |row| {
                    Ok(Run {
                        total_batches: row.get(0)?,
                        batches_done: row.get(1)?,
                        updated_by: row.get(2)?,
                        fencing_token: FencingToken::from_raw(row.get(3)?),
                    })
                },
            )
            .optional()
        })
        .await
    }

    /// Stores `batch` of `run` and moves the run on, in one transaction, fenced by `token`.
    pub(crate) async fn write_batch(
        &self,
        run: &str,
        batch: u32,
        writer: &str,
        token: FencingToken,
    ) -> Result<Write, JobError> {
        let (run, writer) = (run.to_owned(), writer.to_owned());
        self.with(move |c| {
            let tx = c.transaction()?;
            let changed = tx.execute(
                ADVANCE_RUN,
                named_params! {
                    ":batch": batch, ":writer": writer, ":token": token.get(), ":id": run,
                },
            )?;
            if changed == 0 {
                return Ok(Write::Deposed); // dropping `tx` rolls back
            }
            tx.execute(
                "INSERT INTO statement_batches (run_id, batch, written_by, fencing_token)
                 VALUES (?1, ?2, ?3, ?4)",
                (&run, batch, &writer, token.get()),
            )?;
            tx.commit()?;
            Ok(Write::Applied)
        })
        .await
    }
}

/// Errors of the job.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JobError {
    #[error("SQLite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("the run {0} is not scheduled")]
    NoSuchRun(String),
    #[error("the database connection's lock is poisoned")]
    Poisoned,
    #[error("database task: {0}")]
    Task(String),
}

/// What the job reports as it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Progress {
    /// A term began; the run resumes after `batches_done`.
    Leading {
        writer: String,
        token: FencingToken,
        batches_done: u32,
    },
    /// A batch is stored.
    Wrote {
        writer: String,
        token: FencingToken,
        batch: u32,
    },
    /// The run is complete; the leader stays leader, idle, until its term ends.
    Finished { writer: String, token: FencingToken },
    /// The job stopped before the run was complete.
    Stopped {
        writer: String,
        token: FencingToken,
        deposed: bool,
    },
}

/// The job: tonight's run, batch by batch, for as long as `term` holds.
pub(crate) async fn statement_job(
    term: Leadership,
    db: Statements,
    run: String,
    pace: Duration,
    progress: mpsc::UnboundedSender<Progress>,
) -> Result<(), JobError> {
    let (writer, token) = (term.participant_id().to_owned(), term.token());
    let report = |p: Progress| {
        let _ = progress.send(p);
    };
    let state = db
        .run(&run)
        .await?
        .ok_or_else(|| JobError::NoSuchRun(run.clone()))?;
    report(Progress::Leading {
        writer: writer.clone(),
        token,
        batches_done: state.batches_done,
    });
    for batch in state.batches_done + 1..=state.total_batches {
        // Producing a batch takes a while (here: `pace`). Stop at once if the term ends meanwhile.
        tokio::select! {
            _ = term.cancelled() => break,
            _ = tokio::time::sleep(pace) => {}
        }
        // Check right before the side effect: no network needed.
        if !term.is_valid() {
            break;
        }
        if db.write_batch(&run, batch, &writer, token).await? == Write::Deposed {
            report(Progress::Stopped {
                writer,
                token,
                deposed: true,
            });
            return Ok(());
        }
        report(Progress::Wrote {
            writer: writer.clone(),
            token,
            batch,
        });
        if batch == state.total_batches {
            report(Progress::Finished {
                writer: writer.clone(),
                token,
            });
            // Stay leader, idle, until the term ends: tomorrow's run is the same leader's.
            term.cancelled().await;
            return Ok(());
        }
    }
    report(Progress::Stopped {
        writer,
        token,
        deposed: false,
    });
    Ok(())
}

/// One replica: a selector that runs the job whenever it leads, and queues again after each
/// term.
pub(crate) async fn start_replica(
    session: &Session,
    path: &str,
    id: &str,
    db: Statements,
    run: &str,
    pace: Duration,
    progress: mpsc::UnboundedSender<Progress>,
) -> zookeeper_recipes::Result<LeaderSelector> {
    let run = run.to_owned();
    LeaderSelector::builder(session, path)
        .id(id)
        .auto_requeue(true)
        .start(move |term: Leadership| {
            statement_job(term, db.clone(), run.clone(), pace, progress.clone())
        })
        .await
}

#[derive(clap::Parser)]
struct Args {
    /// How many batches tonight's run has.
    #[arg(long, default_value_t = 8)]
    batches: u32,
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
    const RUN: &str = "2026-12-01";
    const REPLICAS: [&str; 2] = ["replica-1", "replica-2"];
    let zookeeper = common::ZooKeeper::from_env().await?;
    println!("using {}", zookeeper.describe());
    let temporary = args.db.is_none();
    let db_path = args.db.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("statement-job-{}.db", std::process::id()))
    });
    println!("statements database: {}", db_path.display());
    Statements::open(&db_path)?
        .schedule(RUN, args.batches)
        .await?;

    let (progress_tx, mut progress) = mpsc::unbounded_channel();
    let mut replicas = Vec::new();
    for id in REPLICAS {
        let session = Session::builder(zookeeper.connect_string())
            .session_timeout(Duration::from_secs(5))
            .connect()
            .await?;
        // Each replica has its own database connection, as it would on its own machine.
        let db = Statements::open(&db_path)?;
        let selector = start_replica(
            &session,
            PATH,
            id,
            db,
            RUN,
            Duration::from_millis(300),
            progress_tx.clone(),
        )
        .await?;
        replicas.push((session, selector));
    }

    let mut deposed_token = None;
    while let Some(p) = progress.recv().await {
        match p {
            Progress::Leading {
                writer,
                token,
                batches_done,
            } => println!(
                "{writer} leads with token {token}; the run resumes after batch {batches_done}"
            ),
            Progress::Wrote {
                writer,
                token,
                batch,
            } => {
                println!(
                    "{writer} wrote batch {batch}/{} (token {token})",
                    args.batches
                );
                // Halfway, the leader is taken down by a rolling deploy.
                if deposed_token.is_none() && batch == args.batches / 2 {
                    deposed_token = Some((writer.clone(), token, batch + 1));
                    println!("{writer} leaves (a rolling deploy)");
                    if let Some((_, selector)) = replicas.iter().find(|(_, s)| s.id() == writer) {
                        selector.close().await?;
                    }
                }
            }
            Progress::Finished { writer, .. } => {
                println!("{writer} finished tonight's run");
                break;
            }
            Progress::Stopped {
                writer, deposed, ..
            } => println!(
                "{writer} stopped its job{}",
                if deposed { ": deposed (0 rows)" } else { "" }
            ),
        }
    }

    // The old leader's write, prepared before it left, arrives late: zero rows change.
    let db = Statements::open(&db_path)?;
    if let Some((writer, token, batch)) = deposed_token {
        let outcome = db.write_batch(RUN, batch, &writer, token).await?;
        if outcome != Write::Deposed {
            return Err("a stale write changed the run".into());
        }
        println!(
            "a late write of batch {batch} by {writer} with token {token}: 0 rows changed, rejected"
        );
    }
    if let Some(run) = db.run(RUN).await? {
        println!(
            "run {RUN}: {}/{} batches, last written by {} with token {}",
            run.batches_done,
            run.total_batches,
            run.updated_by.as_deref().unwrap_or("nobody"),
            run.fencing_token
        );
    }
    for (session, selector) in &replicas {
        selector.close().await?;
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
