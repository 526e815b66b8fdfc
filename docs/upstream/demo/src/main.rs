//! `with-ensemble COMMAND [ARGS...]`: runs COMMAND beside a 3-server ensemble whose servers 0
//! and 1 have different session-timeout limits, given to it as `ZK_CONNECT_A` (server 0,
//! `maxSessionTimeout` 20 s) and `ZK_CONNECT_B` (server 1, 4 s), and exits with its status.
//! The ensemble is stopped when COMMAND ends. check.sh runs the patched crate's own tests in it.

use std::process::ExitCode;
use std::time::Duration;

use zookeeper_recipes_testing::TestingCluster;

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(program) = args.next() else {
        eprintln!("usage: with-ensemble COMMAND [ARGS...]");
        return ExitCode::from(2);
    };
    let min = Duration::from_millis(400);
    let cluster = match TestingCluster::builder()
        .servers(3)
        .server_session_timeouts(0, min, Duration::from_secs(20))
        .server_session_timeouts(1, min, Duration::from_secs(4))
        .start()
        .await
    {
        Ok(cluster) => cluster,
        Err(e) => {
            eprintln!("with-ensemble: the ensemble did not start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (Ok(a), Ok(b)) = (
        cluster.server_connect_string(0),
        cluster.server_connect_string(1),
    ) else {
        eprintln!("with-ensemble: the ensemble has no servers 0 and 1");
        return ExitCode::FAILURE;
    };
    eprintln!("with-ensemble: ZK_CONNECT_A={a} (maxSessionTimeout 20 s), ZK_CONNECT_B={b} (4 s)");
    let status = tokio::process::Command::new(&program)
        .args(args)
        .env("ZK_CONNECT_A", a)
        .env("ZK_CONNECT_B", b)
        .status()
        .await;
    drop(cluster);
    match status {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("with-ensemble: {program} exited with {status}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("with-ensemble: cannot run {program}: {e}");
            ExitCode::FAILURE
        }
    }
}
