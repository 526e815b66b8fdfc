//! [`expire_session`]: Curator's `KillSession`, done from outside the client.

use std::net::Ipv4Addr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use zookeeper_client::SessionInfo;

use super::server_process::{self as process, FLW_TIMEOUT};
use super::{HarnessError, Result};

/// Poll interval while waiting for the session to leave the servers.
const POLL: Duration = Duration::from_millis(20);

/// Expires a live session from outside, as Curator's `KillSession` does.
///
/// Connects a twin client with the same session id and password, has it close the session, and
/// waits until the session is gone: no server of `connect_string` lists it in its session
/// tracker (`dump`), so every server has applied the close. The session's ephemeral nodes are
/// then gone; each server closes the connections it had of the session as it applies the close,
/// and the session's own client, when it reconnects, is told that its session has expired
/// ([`zookeeper_client::SessionState::Expired`]).
///
/// A connection of the session may still show in a server's `cons` after that, and is not
/// waited for: a follower that gets two reconnects of one session at once asks the leader to
/// revalidate both, gets one answer, and leaves the other connection unanswered ("Missing
/// session ... for validation" in its log) until that client gives up on it. CI once waited
/// out its whole timeout on such a connection of a session that was long closed.
///
/// The twin connects through a small interceptor that sends `CloseSession` right behind the
/// twin's `ConnectRequest`, in the same write. Without it the session's own client wins a race:
/// ZooKeeper allows one connection per session, so the twin's connect kicks the original
/// client off, which reconnects at once (zookeeper-client retries immediately) and kicks the
/// twin off before the twin's connect has finished, over and over; the twin never gets to
/// close the session. (Java's client waits up to a second before reconnecting, which is why
/// Curator's old `KillSession` could simply connect the twin and close it.)
///
/// `connect_string` is a plain `host:port[,host:port...]` list of the servers (not a proxy:
/// `dump` and `cons` are asked of each); a chroot suffix is ignored. `timeout` bounds the whole
/// operation.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use zookeeper_recipes_testing::{TestingServer, expire_session};
///
/// let server = TestingServer::start().await?;
/// let client = zookeeper_client::Client::connect(server.connect_string()).await?;
/// expire_session(server.connect_string(), client.session(), Duration::from_secs(10)).await?;
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// [`HarnessError::Timeout`] if the session is still there after `timeout` (the message
/// carries the twin's connect error, if it had one); [`HarnessError::Io`] if the interceptor
/// cannot listen.
///
/// # Cancel safety
///
/// Dropping the future stops the twin and the interceptor; the session may or may not have
/// been closed by then.
///
/// # Curator
///
/// `org.apache.curator.test.KillSession.kill` (Curator 5 does it through the client's test
/// hooks instead; the effect on the server is the same).
pub async fn expire_session(
    connect_string: &str,
    session: &SessionInfo,
    timeout: Duration,
) -> Result<()> {
    let servers = servers(connect_string)?;
    let id = session.id().0;
    // One interceptor per server, aborted when this function returns (or is dropped).
    let mut interceptors = JoinSet::new();
    let mut intercepted = Vec::with_capacity(servers.len());
    for server in &servers {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(HarnessError::io("binding the twin's interceptor"))?;
        let address = listener
            .local_addr()
            .map_err(HarnessError::io("reading the interceptor's address"))?;
        intercepted.push(address.to_string());
        interceptors.spawn(intercept_all(listener, server.clone()));
    }
    let mut twin_error = None;
    let work = async {
        loop {
            // Rounds: in an ensemble a close can lose an ownership race (SessionMoved) with the
            // original client's reconnection; a new twin then tries again.
            let round_end = tokio::time::Instant::now() + ROUND;
            let targets = twin_targets(&servers, &intercepted, id).await;
            let twin = zookeeper_client::Client::connector()
                .with_session(session.clone())
                .with_session_timeout(timeout.clamp(Duration::from_secs(1), ROUND))
                .connect(&targets);
            let mut twin = std::pin::pin!(twin);
            let mut twin_done = false;
            while tokio::time::Instant::now() < round_end {
                tokio::select! {
                    result = &mut twin, if !twin_done => {
                        twin_done = true;
                        match result {
                            // Connected before its CloseSession took effect: dropping it closes.
                            Ok(client) => drop(client),
                            Err(zookeeper_client::Error::SessionExpired) => {}
                            Err(e) => twin_error = Some(e),
                        }
                    }
                    () = tokio::time::sleep(POLL) => {
                        if session_gone(&servers, id).await {
                            return;
                        }
                    }
                }
            }
            tracing::debug!(session = %format!("{id:#x}"), "session survived its twin; trying again");
        }
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(()) => Ok(()),
        Err(_) => Err(HarnessError::Timeout {
            what: match twin_error {
                Some(e) => {
                    format!("session {id:#x} was not closed (its twin failed to connect: {e})")
                }
                None => format!("session {id:#x} was not closed by its twin"),
            },
            timeout,
        }),
    }
}

/// How long one twin gets before a new one tries.
const ROUND: Duration = Duration::from_secs(2);

/// The twin's connect string: the interceptors of the servers that do not hold a connection of
/// the session, so the twin does not kick the original client off (which would reconnect and
/// race the close); all of them when every server holds one (a standalone server).
async fn twin_targets(servers: &[String], intercepted: &[String], id: i64) -> String {
    let holds = futures::future::join_all(servers.iter().map(|s| async move {
        process::four_letter_word(s, "cons", FLW_TIMEOUT)
            .await
            .is_ok_and(|cons| lists_session(&cons, id))
    }))
    .await;
    let others: Vec<&str> = intercepted
        .iter()
        .zip(&holds)
        .filter(|(_, holds)| !**holds)
        .map(|(i, _)| i.as_str())
        .collect();
    if others.is_empty() {
        intercepted.join(",")
    } else {
        others.join(",")
    }
}

/// A ZooKeeper `CloseSession` request frame: length 8, an xid no client request uses, op -11.
const CLOSE_SESSION_FRAME: [u8; 12] = [
    0, 0, 0, 8, // frame length
    0x7f, 0xff, 0xff, 0xfe, // xid i32::MAX - 1
    0xff, 0xff, 0xff, 0xf5, // OpCode.closeSession = -11
];

/// Largest first frame (the twin's `ConnectRequest`) the interceptor accepts.
const MAX_CONNECT_FRAME: usize = 64 * 1024;

async fn intercept_all(listener: TcpListener, upstream: String) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((client, _)) = accepted {
                    conns.spawn(intercept(client, upstream.clone()));
                }
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// Forwards the twin's first frame (its `ConnectRequest`) followed by `CloseSession`, then
/// plain bytes both ways.
async fn intercept(mut client: TcpStream, upstream: String) {
    let Ok(mut server) = TcpStream::connect(&upstream).await else {
        return;
    };
    let mut len = [0u8; 4];
    if client.read_exact(&mut len).await.is_err() {
        return;
    }
    let n = usize::try_from(u32::from_be_bytes(len)).unwrap_or(usize::MAX);
    if n > MAX_CONNECT_FRAME {
        return;
    }
    let mut frame = vec![0u8; 4 + n];
    frame[..4].copy_from_slice(&len);
    if client.read_exact(&mut frame[4..]).await.is_err() {
        return;
    }
    frame.extend_from_slice(&CLOSE_SESSION_FRAME);
    if server.write_all(&frame).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}

/// Whether every server that answers has forgotten session `id`: not in its session tracker
/// (`dump`). At least one server must answer.
async fn session_gone(servers: &[String], id: i64) -> bool {
    let answers = futures::future::join_all(
        servers
            .iter()
            .map(|s| async move { process::four_letter_word(s, "dump", FLW_TIMEOUT).await.ok() }),
    )
    .await;
    let mut answered = false;
    for dump in answers.iter().flatten() {
        answered = true;
        if tracks_session(dump, id) {
            return false;
        }
    }
    answered
}

/// Whether the `SessionTracker dump:` part of a `dump` answer has session `id` (standalone and
/// leaders list ids under `Session Sets`, followers under `Global Sessions`, one per line).
fn tracks_session(dump: &str, id: i64) -> bool {
    let wanted = format!("{id:#x}");
    dump.lines()
        .skip_while(|l| !l.starts_with("SessionTracker dump:"))
        .take_while(|l| !l.starts_with("ephemeral nodes dump:"))
        .any(|l| l.split_whitespace().next() == Some(wanted.as_str()))
}

/// `host:port` of each server in a connect string (chroot dropped).
fn servers(connect_string: &str) -> Result<Vec<String>> {
    let hosts = connect_string
        .split_once('/')
        .map_or(connect_string, |(hosts, _)| hosts);
    let servers: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.strip_prefix("tcp://").unwrap_or(s).to_owned())
        .collect();
    if servers.is_empty() {
        return Err(HarnessError::InvalidArgument {
            what: "connect string",
            reason: format!("{connect_string:?} names no server"),
        });
    }
    Ok(servers)
}

/// Whether a `cons` answer has a connection of session `id`.
///
/// Lines look like ` /127.0.0.1:41234[1](queued=0,recved=3,sent=3,sid=0x100a3c5e0a70000,...)`:
/// Java's `Long.toHexString`, which like Rust's `{:x}` prints negative ids as two's complement.
fn lists_session(cons: &str, id: i64) -> bool {
    let sid = format!("sid={id:#x}");
    cons.lines().any(|line| {
        line.match_indices(&sid)
            .any(|(at, m)| matches!(line[at + m.len()..].chars().next(), Some(',' | ')') | None))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cons_lines_are_matched_on_the_whole_id() {
        let cons = " /127.0.0.1:41234[1](queued=0,recved=3,sent=3,sid=0x100a3c5e0a70000,lop=PING)\n /127.0.0.1:41236[0](queued=0,recved=1,sent=0)\n";
        assert!(lists_session(cons, 0x100a3c5e0a70000));
        assert!(!lists_session(cons, 0x100a3c5e0a7000));
        assert!(!lists_session(cons, 0x100a3c5e0a70001));
        assert!(lists_session(" x(sid=0xffffffffffffffff)", -1));
    }

    #[test]
    fn dump_session_tracker_is_read() {
        let standalone = "SessionTracker dump:\nSession Sets (1)/(1):\n1 expire at Wed Dec 02 15:18:02 UTC 2026:\n\t0x10000154a8d0000\nephemeral nodes dump:\nSessions with Ephemerals (0):\nConnections dump:\n\tip: /127.0.0.1:60368 sessionId: 0x10000154a8d0001\n";
        assert!(tracks_session(standalone, 0x10000154a8d0000));
        assert!(!tracks_session(standalone, 0x10000154a8d0001));
        let follower = "SessionTracker dump:\nGlobal Sessions(1):\n0x30000154df60000\t20000ms\nephemeral nodes dump:\n";
        assert!(tracks_session(follower, 0x30000154df60000));
        assert!(!tracks_session(follower, 0x30000154df6000));
    }

    #[test]
    fn close_session_frame_is_jute() {
        assert_eq!(
            CLOSE_SESSION_FRAME,
            [0, 0, 0, 8, 0x7f, 0xff, 0xff, 0xfe, 0xff, 0xff, 0xff, 0xf5]
        );
    }

    #[test]
    fn servers_are_split_from_a_connect_string() {
        assert_eq!(
            servers("127.0.0.1:1,127.0.0.1:2/chroot").expect("servers"),
            vec!["127.0.0.1:1".to_owned(), "127.0.0.1:2".to_owned()]
        );
        assert!(servers("").is_err());
    }
}
