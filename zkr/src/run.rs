//! `zkr run`: CMD while this process leads (a LeaderSelector), stopped the moment the term ends.

use std::cell::Cell;
use std::process::ExitCode;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use zookeeper_recipes::{LeaderSelector, Leadership, SelectorState};

use crate::Fail;
use crate::args::RunArgs;
use crate::conn::{Conn, close_session, connect};
use crate::output::Out;
use crate::signals::Signals;
use crate::supervise::{self as process, ProcessError, StopReason, SupervisedCommand};
use crate::term::{TermReport, command_spec, exit_code, supervise, term_end_reason};

pub(crate) async fn run(
    conn: &Conn,
    session_timeout: Duration,
    grace: Duration,
    args: RunArgs,
) -> Result<ExitCode, Fail> {
    let mut signals = Signals::new()?;
    let cmd = command_spec(args.supervised.command)?;
    if let Err(e) = process::become_child_subreaper() {
        tracing::warn!(error = %e, "cannot become a child subreaper; CMD's orphans go to init");
    }
    let session = connect(conn, session_timeout).await?;
    let shutdown = CancellationToken::new();
    let supervisor = SupervisedCommand::new(cmd)
        .grace(grace)
        .shutdown(shutdown.clone());

    // The selector's closure hands each term to this task and waits until CMD's group is gone.
    // zkr does its own stopping, so the selector's grace is set well beyond zkr's and the
    // selector never aborts the closure.
    let (term_tx, mut term_rx) = mpsc::channel::<(Leadership, oneshot::Sender<()>)>(1);
    let mut builder = LeaderSelector::builder(&session, &args.path)
        .auto_requeue(args.requeue)
        // A term whose lease is not renewed ends CMD's grace before the lease's deadline, so
        // that CMD gets its grace; zkr stops CMD itself (SIGTERM, the grace, SIGKILL, never past
        // the lease), and the closure waits beyond that for CMD's group to be gone.
        .stop_ahead(grace)
        .grace(grace * 2 + Duration::from_secs(5))
        .error_policy(args.supervised.policy.policy())
        .acl(conn.node_acl());
    if let Some(id) = &args.supervised.id {
        builder = builder.id(id.clone());
    }
    let selector = builder
        .start(move |term: Leadership| {
            let term_tx = term_tx.clone();
            async move {
                let (done_tx, done_rx) = oneshot::channel();
                if term_tx.send((term, done_tx)).await.is_ok() {
                    let _ = done_rx.await;
                }
                Ok::<(), std::io::Error>(())
            }
        })
        .await?;
    let id = selector.id().to_owned();
    let out = Out::Stderr;
    let states = session.state_changes();
    tokio::pin!(states);

    let mut code = ExitCode::SUCCESS;
    let mut failure: Option<Fail> = None;
    loop {
        let (term, done) = tokio::select! {
            biased;
            _ = signals.recv() => {
                // Not running CMD right now (any earlier run's code does not count).
                code = ExitCode::SUCCESS;
                break;
            }
            next = term_rx.recv() => match next {
                Some(next) => next,
                None => {
                    failure = Some(match selector.failure() {
                        Some(e) => crate::auth::fail("the leader selector stopped", &e),
                        None => Fail::new("the leader selector stopped unexpectedly"),
                    });
                    break;
                }
            },
            Some(status) = states.next() => {
                out.state(&status, &id, selector.our_path().as_deref());
                continue;
            }
        };
        let report = TermReport {
            out,
            session: &session,
            id: &id,
            term: &term,
            not_leader_sent: Cell::new(false),
        };
        report.leader();
        let result = supervise(&report, &supervisor, &shutdown, &mut signals, &mut states).await;
        match &result {
            Ok(outcome) => report.finish(outcome),
            Err(_) => report.not_leader(term_end_reason(&session, &term, StopReason::TermEnded)),
        }
        // CMD's group is gone: the closure returns and the selector relinquishes.
        let _ = done.send(());
        match result {
            Ok(outcome) => code = exit_code(outcome.exit.code()),
            Err(ProcessError::NotLeader) => {
                // The term was over before CMD could start: CMD did not run, so queue again.
                code = ExitCode::SUCCESS;
                if shutdown.is_cancelled() {
                    break;
                }
                if !args.requeue {
                    // `requeue` only works once the selector is idle, after it has deleted the
                    // node of the term that just ended.
                    let mut state = selector.watch_state();
                    let _ = state
                        .wait_for(|s| {
                            matches!(
                                s,
                                SelectorState::Idle | SelectorState::Closed | SelectorState::Failed
                            )
                        })
                        .await;
                    selector.requeue();
                }
                continue;
            }
            Err(e) => {
                failure = Some(Fail::new(e.to_string()));
                break;
            }
        }
        if shutdown.is_cancelled() || !args.requeue {
            break;
        }
    }
    // A term handed over but not taken up: dropping it lets the closure return at once.
    drop(term_rx);
    // Deletes our node if we are still queued or leading, at once.
    selector.close().await?;
    close_session(&session).await;
    match failure {
        Some(f) => Err(f),
        None => Ok(code),
    }
}
