//! `zkr lock`: CMD while holding an InterProcessMutex, like flock(1) across machines.

use std::cell::Cell;
use std::process::ExitCode;
use std::time::Duration;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use zookeeper_recipes::InterProcessMutex;

use crate::Fail;
use crate::args::LockArgs;
use crate::conn::{Conn, close_session, connect};
use crate::output::Out;
use crate::signals::Signals;
use crate::supervise::{self as process, StopReason, SupervisedCommand};
use crate::term::{TermReport, command_spec, exit_code, supervise, term_end_reason};

/// The exit code of `zkr lock --timeout` when the lock was not acquired in time (EX_TEMPFAIL).
const EXIT_TIMEOUT: u8 = 75;

pub(crate) async fn lock(
    conn: &Conn,
    session_timeout: Duration,
    grace: Duration,
    args: LockArgs,
) -> Result<ExitCode, Fail> {
    let mut signals = Signals::new()?;
    let cmd = command_spec(args.supervised.command)?;
    if let Err(e) = process::become_child_subreaper() {
        tracing::warn!(error = %e, "cannot become a child subreaper; CMD's orphans go to init");
    }
    let session = connect(conn, session_timeout).await?;
    // A hold whose lease is not renewed ends CMD's grace before the lease's deadline, so that
    // CMD gets its grace (zkr stops it itself, never past the lease).
    let mut builder = InterProcessMutex::builder(&session, &args.path)
        .stop_ahead(grace)
        .error_policy(args.supervised.policy.policy())
        .acl(conn.node_acl());
    if let Some(id) = &args.supervised.id {
        builder = builder.id(id.clone());
    }
    let mutex = builder.build()?;
    let out = Out::Stderr;
    let states = session.state_changes();
    tokio::pin!(states);

    let acquire = async {
        match args.timeout {
            Some(timeout) => mutex.acquire_timeout(timeout).await,
            None => mutex.acquire().await.map(Some),
        }
    };
    tokio::pin!(acquire);
    let acquired = loop {
        tokio::select! {
            biased;
            code = signals.recv() => {
                // Dropping the acquire withdraws from the queue; closing the session makes sure
                // the node is gone before we exit. CMD never ran: exit 128 + signal, as a shell
                // does, so that `zkr lock ... && next` does not go on.
                close_session(&session).await;
                return Ok(ExitCode::from(code));
            }
            acquired = &mut acquire => break acquired,
            Some(status) = states.next() => out.state(&status, mutex.id(), None),
        }
    };
    let guard = match acquired {
        Ok(Some(guard)) => guard,
        Ok(None) => {
            close_session(&session).await;
            eprintln!(
                "zkr: timed out after {} waiting for the lock on {}",
                humantime::format_duration(args.timeout.unwrap_or_default()),
                args.path
            );
            return Ok(ExitCode::from(EXIT_TIMEOUT));
        }
        Err(e) => {
            close_session(&session).await;
            return Err(crate::auth::fail(
                format_args!("cannot acquire the lock on {}", args.path),
                &e,
            ));
        }
    };
    let term = guard.leadership().clone();
    let shutdown = CancellationToken::new();
    let supervisor = SupervisedCommand::new(cmd)
        .grace(grace)
        .shutdown(shutdown.clone());
    let report = TermReport {
        out,
        session: &session,
        id: mutex.id(),
        term: &term,
        not_leader_sent: Cell::new(false),
    };
    report.leader();
    let result = supervise(&report, &supervisor, &shutdown, &mut signals, &mut states).await;
    // CMD's group is gone: release, so the next waiter gets the lock at once.
    guard.release().await?;
    let code = match result {
        Ok(outcome) => {
            report.finish(&outcome);
            Ok(exit_code(outcome.exit.code()))
        }
        Err(e) => {
            report.not_leader(term_end_reason(&session, &term, StopReason::TermEnded));
            Err(Fail::new(e.to_string()))
        }
    };
    close_session(&session).await;
    code
}
