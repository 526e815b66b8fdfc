//! A loopback relay in front of each server, which reads the timeout every connection of the
//! session negotiates.
//!
//! Every reconnect renegotiates the session timeout: the client asks for the timeout it has,
//! and the server it reaches clamps the request to its own `[minSessionTimeout,
//! maxSessionTimeout]`. From then on the quorum leader expires the session one *new* timeout
//! after its last touch. zookeeper-client 0.11 reports only the timeout of the session's first
//! connection (`Client::session_timeout`), and has no hook on its connections. So the session
//! gives its client one local address per server, here, and relays each connection to its
//! server, reading the two frames that open it: the client's `ConnectRequest` (which session,
//! when it was sent) and the server's `ConnectResponse` (the negotiated timeout). The
//! negotiation is reported before the response reaches the client, so the lease knows the new
//! timeout before the client can act on the connection; a request that was sent and never
//! answered is reported too (the server may have touched the session with a timeout we will not
//! learn). After those two frames the relay copies bytes, in order, both ways (a side that
//! closes closes the other), and reads only the head of each frame as it passes: a ping's
//! request and its answer are reported ([`RelayEvent::Pinged`]), for the lease to count as a
//! touch of the session (see `lease`).
//!
//! The cost: one loopback hop per request and per reply (a few tens of microseconds), and two
//! sockets and a task per connection. It also tells which server a connection went to.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::debug;

use crate::clock::{BootTime, Clock};

/// What the relay saw of one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RelayEvent {
    /// The server answered a `ConnectRequest` for `session_id` (0 for a new session) with
    /// `timeout` (and the session's id: `answered_session`).
    Negotiated {
        /// The relay's number for the connection.
        relay_conn: u64,
        server: String,
        /// The session the request asked for (0: a new one).
        requested_session: i64,
        /// The session the server answered with (0: expired or refused).
        answered_session: i64,
        timeout: Duration,
        /// When the request's last byte went to the server.
        sent: BootTime,
        /// When its answer was read.
        answered: BootTime,
    },
    /// A `ConnectRequest` for `session_id` reached the server and no answer came back before
    /// the connection ended.
    Unanswered {
        server: String,
        session_id: i64,
        sent: BootTime,
    },
    /// The client's ping on connection `relay_conn` went to the server at `sent` and its answer
    /// was read at `answered`.
    Pinged {
        relay_conn: u64,
        sent: BootTime,
        answered: BootTime,
    },
}

/// The xid of a ping and of its answer.
const PING_XID: i32 = -2;

/// Reads the head of each frame of a ZooKeeper stream (a 4-byte length, then a body that opens
/// with the 4-byte xid), across reads of any size.
#[derive(Debug, Default)]
struct FrameScan {
    /// Bytes of the current frame still to pass after its head.
    rest: usize,
    head: [u8; 8],
    have: usize,
    /// Set once the stream held something that is not a frame: scanning stops.
    lost: bool,
}

impl FrameScan {
    /// Reads `bytes`, calling `on_xid` with the xid of each frame whose head completes in them.
    fn feed(&mut self, mut bytes: &[u8], mut on_xid: impl FnMut(i32)) {
        while !bytes.is_empty() && !self.lost {
            if self.rest > 0 {
                let n = self.rest.min(bytes.len());
                self.rest -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (self.head.len() - self.have).min(bytes.len());
            self.head[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have == self.head.len() {
                let h = self.head;
                let len = i32::from_be_bytes([h[0], h[1], h[2], h[3]]);
                let xid = i32::from_be_bytes([h[4], h[5], h[6], h[7]]);
                match usize::try_from(len) {
                    Ok(len) if len >= 4 => {
                        on_xid(xid);
                        self.rest = len - 4;
                        self.have = 0;
                    }
                    _ => self.lost = true,
                }
            }
        }
    }
}

/// The relay of one session: one listener per server, in the order of the connect string.
pub(crate) struct Relay {
    /// The connect string to give the client: one local address per server, same order.
    pub(crate) local: String,
    _stop: DropGuard,
}

/// A `ConnectRequest` or `ConnectResponse` is never larger than this (a password is 16 bytes):
/// a first frame announcing more is not ZooKeeper's handshake (a four-letter word).
const MAX_HANDSHAKE_FRAME: usize = 4096;

impl Relay {
    /// Starts a listener on loopback for each of `hosts` (`host:port,host:port`), reporting
    /// each connection's opening to `events`.
    pub(crate) async fn start(
        hosts: &str,
        clock: Clock,
        events: mpsc::UnboundedSender<RelayEvent>,
    ) -> io::Result<Relay> {
        let stop = CancellationToken::new();
        let conns = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut local = Vec::new();
        for host in hosts.split(',') {
            let host = host.trim().trim_start_matches("tcp://").to_owned();
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            local.push(listener.local_addr()?.to_string());
            let stop = stop.clone();
            let clock = clock.clone();
            let events = events.clone();
            let conns = std::sync::Arc::clone(&conns);
            tokio::spawn(async move {
                loop {
                    let accepted = tokio::select! {
                        _ = stop.cancelled() => return,
                        a = listener.accept() => a,
                    };
                    match accepted {
                        Ok((client, _)) => {
                            let host = host.clone();
                            let clock = clock.clone();
                            let events = events.clone();
                            let stop = stop.clone();
                            let conn = conns.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            tokio::spawn(async move {
                                tokio::select! {
                                    _ = stop.cancelled() => {}
                                    () = relay(client, &host, conn, &clock, &events) => {}
                                }
                            });
                        }
                        Err(e) => {
                            debug!(error = %e, "the relay could not accept a connection");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                }
            });
        }
        Ok(Relay {
            local: local.join(","),
            _stop: stop.drop_guard(),
        })
    }
}

/// The first frame of a stream: its length, once known, and the bytes read so far.
#[derive(Default)]
struct FirstFrame {
    bytes: Vec<u8>,
}

impl FirstFrame {
    /// The frame's body once it has all arrived; `Err(())` when the stream does not open with a
    /// handshake frame.
    fn body(&self) -> Result<Option<&[u8]>, ()> {
        let Some(len) = self.bytes.get(..4) else {
            return Ok(None);
        };
        let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
        let len = usize::try_from(len).map_err(|_| ())?;
        if len > MAX_HANDSHAKE_FRAME {
            return Err(());
        }
        Ok(self.bytes.get(4..4 + len))
    }
}

fn i32_at(body: &[u8], at: usize) -> Option<i32> {
    let b = body.get(at..at + 4)?;
    Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn i64_at(body: &[u8], at: usize) -> Option<i64> {
    let b = body.get(at..at + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(i64::from_be_bytes(a))
}

/// `ConnectRequest`: protocol version (i32), last zxid seen (i64), timeout (i32), session id
/// (i64), password, read-only flag. Returns the session id.
pub(crate) fn parse_connect_request(body: &[u8]) -> Option<i64> {
    i64_at(body, 16)
}

/// `ConnectResponse`: protocol version (i32), timeout (i32), session id (i64), password,
/// read-only flag. Returns the timeout and the session id.
pub(crate) fn parse_connect_response(body: &[u8]) -> Option<(Duration, i64)> {
    let timeout = i32_at(body, 4)?;
    let session = i64_at(body, 8)?;
    let timeout = Duration::from_millis(u64::try_from(timeout).ok()?);
    Some((timeout, session))
}

/// Relays one connection of the client to `host`.
async fn relay(
    mut client: TcpStream,
    host: &str,
    conn: u64,
    clock: &Clock,
    events: &mpsc::UnboundedSender<RelayEvent>,
) {
    let _ = client.set_nodelay(true);
    let mut request = FirstFrame::default();
    let mut buf = vec![0u8; 8192];
    // Connect to the server while taking what the client sends meanwhile (its handshake).
    let connect = TcpStream::connect(host);
    tokio::pin!(connect);
    let mut upstream = loop {
        tokio::select! {
            up = &mut connect => match up {
                Ok(up) => break up,
                Err(e) => {
                    debug!(server = host, error = %e, "the relay could not reach the server");
                    return;
                }
            },
            read = client.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => request.bytes.extend_from_slice(&buf[..n]),
            },
        }
    };
    let _ = upstream.set_nodelay(true);
    let (mut client_rx, mut client_tx) = client.split();
    let (mut server_rx, mut server_tx) = upstream.split();
    // The handshake: forward the client's bytes as they come, note when its request has gone
    // out, and hold the server's first frame until it can be read.
    let mut forwarded = 0usize;
    let mut sent: Option<(BootTime, i64)> = None;
    let mut passthrough = false;
    let mut response = FirstFrame::default();
    let mut sbuf = vec![0u8; 8192];
    loop {
        if forwarded < request.bytes.len() {
            if server_tx
                .write_all(&request.bytes[forwarded..])
                .await
                .is_err()
            {
                return;
            }
            forwarded = request.bytes.len();
        }
        if sent.is_none() && !passthrough {
            match request.body() {
                Ok(Some(body)) => match parse_connect_request(body) {
                    Some(session) => sent = Some((clock.now(), session)),
                    None => passthrough = true,
                },
                Ok(None) => {}
                Err(()) => passthrough = true,
            }
        }
        tokio::select! {
            read = client_rx.read(&mut buf) => match read {
                Ok(0) | Err(_) => {
                    report_unanswered(host, sent, events);
                    return;
                }
                Ok(n) => request.bytes.extend_from_slice(&buf[..n]),
            },
            read = server_rx.read(&mut sbuf) => match read {
                Ok(0) | Err(_) => {
                    // Whatever the server said before it closed (a four-letter word's answer)
                    // still goes to the client.
                    let _ = client_tx.write_all(&response.bytes).await;
                    report_unanswered(host, sent, events);
                    return;
                }
                Ok(n) => {
                    response.bytes.extend_from_slice(&sbuf[..n]);
                    match response.body() {
                        Ok(None) if !passthrough => continue,
                        Ok(Some(body)) if !passthrough => {
                            if let (Some((sent_at, requested)), Some((timeout, answered_session))) =
                                (sent, parse_connect_response(body))
                            {
                                let _ = events.send(RelayEvent::Negotiated {
                                    relay_conn: conn,
                                    server: host.to_owned(),
                                    requested_session: requested,
                                    answered_session,
                                    timeout,
                                    sent: sent_at,
                                    answered: clock.now(),
                                });
                            }
                        }
                        _ => {}
                    }
                    if client_tx.write_all(&response.bytes).await.is_err() {
                        return;
                    }
                    break;
                }
            },
        }
    }
    // The rest of the client's bytes that arrived with the handshake.
    if forwarded < request.bytes.len()
        && server_tx
            .write_all(&request.bytes[forwarded..])
            .await
            .is_err()
    {
        return;
    }
    if passthrough {
        tokio::select! {
            _ = tokio::io::copy(&mut client_rx, &mut server_tx) => {}
            _ = tokio::io::copy(&mut server_rx, &mut client_tx) => {}
        }
        return;
    }
    // From here on, each ping's request and answer, by the head of the frames as they pass. The
    // handshake's frames (and what came with them) are read first so that the scans start on a
    // frame's head.
    let pings = std::sync::Mutex::new(std::collections::VecDeque::<BootTime>::new());
    let note_ping = |xid: i32, now: BootTime| {
        if xid == PING_XID
            && let Ok(mut pings) = pings.lock()
            && pings.len() < 64
        {
            pings.push_back(now);
        }
    };
    let answer_ping = |xid: i32, now: BootTime| {
        if xid != PING_XID {
            return;
        }
        let sent = pings.lock().ok().and_then(|mut p| p.pop_front());
        if let Some(sent) = sent {
            let _ = events.send(RelayEvent::Pinged {
                relay_conn: conn,
                sent,
                answered: now,
            });
        }
    };
    let mut up = FrameScan::default();
    let mut down = FrameScan::default();
    let now = clock.now();
    up.feed(&request.bytes, |xid| note_ping(xid, now));
    down.feed(&response.bytes, |xid| answer_ping(xid, now));
    // Each side's reads are stamped before they go on: the server touches the session after the
    // request's stamp, and the answer's stamp is no earlier than its arrival.
    tokio::select! {
        () = pump(&mut client_rx, &mut server_tx, &mut buf, &mut up, clock, note_ping) => {}
        () = pump(&mut server_rx, &mut client_tx, &mut sbuf, &mut down, clock, answer_ping) => {}
    }
}

/// Copies `from` to `to` until either side ends, reading the head of each frame as it passes
/// and calling `on_xid` with its xid and the time the bytes were read.
async fn pump(
    from: &mut (impl AsyncReadExt + Unpin),
    to: &mut (impl AsyncWriteExt + Unpin),
    buf: &mut [u8],
    scan: &mut FrameScan,
    clock: &Clock,
    on_xid: impl Fn(i32, BootTime),
) {
    loop {
        let n = match from.read(buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let now = clock.now();
        scan.feed(&buf[..n], |xid| on_xid(xid, now));
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

fn report_unanswered(
    host: &str,
    sent: Option<(BootTime, i64)>,
    events: &mpsc::UnboundedSender<RelayEvent>,
) {
    if let Some((sent, session_id)) = sent
        && session_id != 0
    {
        let _ = events.send(RelayEvent::Unanswered {
            server: host.to_owned(),
            session_id,
            sent,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    #[test]
    fn the_scan_finds_each_frames_xid_across_reads_of_any_size_and_stops_at_what_is_no_frame() {
        let mut ping = (-2i32).to_be_bytes().to_vec();
        ping.extend_from_slice(&11i32.to_be_bytes());
        let mut sync = 7i32.to_be_bytes().to_vec();
        sync.extend_from_slice(&9i32.to_be_bytes());
        sync.extend_from_slice(&1i32.to_be_bytes());
        sync.push(b'/');
        let stream = [frame(&ping), frame(&sync), frame(&ping)].concat();
        for chunk in 1..=stream.len() {
            let mut scan = FrameScan::default();
            let mut xids = Vec::new();
            for part in stream.chunks(chunk) {
                scan.feed(part, |x| xids.push(x));
            }
            assert_eq!(xids, [-2, 7, -2], "in reads of {chunk} bytes");
        }
        let mut scan = FrameScan::default();
        let mut xids = Vec::new();
        scan.feed(&[0, 0, 0, 2, 1, 2, 0, 0], |x| xids.push(x));
        scan.feed(&frame(&ping), |x| xids.push(x));
        assert!(
            xids.is_empty(),
            "a frame too short for an xid ends the scan: {xids:?}"
        );
    }

    #[test]
    fn handshake_frames_parse() {
        // ConnectRequest: version 0, last zxid 7, timeout 60000, session 0x1234, 16-byte
        // password, read-only false.
        let mut req = Vec::new();
        req.extend_from_slice(&0i32.to_be_bytes());
        req.extend_from_slice(&7i64.to_be_bytes());
        req.extend_from_slice(&60_000i32.to_be_bytes());
        req.extend_from_slice(&0x1234i64.to_be_bytes());
        req.extend_from_slice(&16i32.to_be_bytes());
        req.extend_from_slice(&[0u8; 16]);
        req.push(0);
        assert_eq!(parse_connect_request(&req), Some(0x1234));
        // ConnectResponse: version 0, timeout 4000, session 0x1234, password, read-only.
        let mut resp = Vec::new();
        resp.extend_from_slice(&0i32.to_be_bytes());
        resp.extend_from_slice(&4_000i32.to_be_bytes());
        resp.extend_from_slice(&0x1234i64.to_be_bytes());
        resp.extend_from_slice(&16i32.to_be_bytes());
        resp.extend_from_slice(&[0u8; 16]);
        resp.push(0);
        assert_eq!(
            parse_connect_response(&resp),
            Some((Duration::from_millis(4_000), 0x1234))
        );
        assert_eq!(parse_connect_response(&resp[..10]), None);
        assert_eq!(parse_connect_request(&req[..20]), None);
    }

    #[test]
    fn a_first_frame_is_complete_only_with_all_its_bytes_and_a_four_letter_word_is_not_one() {
        let mut first = FirstFrame::default();
        first.bytes.extend_from_slice(&frame(b"abcdef")[..7]);
        assert_eq!(first.body(), Ok(None));
        first.bytes.extend_from_slice(b"def");
        assert_eq!(first.body(), Ok(Some(&b"abcdef"[..])));
        let ruok = FirstFrame {
            bytes: b"ruok".to_vec(),
        };
        assert_eq!(ruok.body(), Err(()));
        let negative = FirstFrame {
            bytes: (-1i32).to_be_bytes().to_vec(),
        };
        assert_eq!(negative.body(), Err(()));
    }

    #[tokio::test]
    async fn the_relay_reports_the_negotiation_before_the_client_reads_it_and_then_copies_bytes() {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server_addr = server.local_addr().unwrap().to_string();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let relay = Relay::start(&server_addr, Clock::system(), tx)
            .await
            .unwrap();
        let serve = tokio::spawn(async move {
            let (mut s, _) = server.accept().await.unwrap();
            let mut req = vec![0u8; 4 + 45];
            s.read_exact(&mut req).await.unwrap();
            let mut resp = Vec::new();
            resp.extend_from_slice(&0i32.to_be_bytes());
            resp.extend_from_slice(&4_000i32.to_be_bytes());
            resp.extend_from_slice(&0x99i64.to_be_bytes());
            resp.extend_from_slice(&16i32.to_be_bytes());
            resp.extend_from_slice(&[0u8; 16]);
            resp.push(0);
            s.write_all(&frame(&resp)).await.unwrap();
            let mut ping = [0u8; 4];
            s.read_exact(&mut ping).await.unwrap();
            s.write_all(b"pong").await.unwrap();
        });
        let mut c = TcpStream::connect(&relay.local).await.unwrap();
        let mut req = Vec::new();
        req.extend_from_slice(&0i32.to_be_bytes());
        req.extend_from_slice(&0i64.to_be_bytes());
        req.extend_from_slice(&60_000i32.to_be_bytes());
        req.extend_from_slice(&0x99i64.to_be_bytes());
        req.extend_from_slice(&16i32.to_be_bytes());
        req.extend_from_slice(&[0u8; 16]);
        req.push(0);
        c.write_all(&frame(&req)).await.unwrap();
        let mut resp = vec![0u8; 4 + 37];
        c.read_exact(&mut resp).await.unwrap();
        match rx.try_recv() {
            Ok(RelayEvent::Negotiated {
                requested_session,
                answered_session,
                timeout,
                ..
            }) => {
                assert_eq!((requested_session, answered_session), (0x99, 0x99));
                assert_eq!(timeout, Duration::from_millis(4_000));
            }
            other => panic!("no negotiation reported before the response: {other:?}"),
        }
        c.write_all(b"ping").await.unwrap();
        let mut pong = [0u8; 4];
        c.read_exact(&mut pong).await.unwrap();
        assert_eq!(&pong, b"pong");
        serve.await.unwrap();
    }

    #[tokio::test]
    async fn a_request_the_server_never_answers_is_reported_unanswered() {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server_addr = server.local_addr().unwrap().to_string();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let relay = Relay::start(&server_addr, Clock::system(), tx)
            .await
            .unwrap();
        let serve = tokio::spawn(async move {
            let (mut s, _) = server.accept().await.unwrap();
            let mut req = vec![0u8; 4 + 45];
            s.read_exact(&mut req).await.unwrap();
            // Close without answering.
        });
        let mut c = TcpStream::connect(&relay.local).await.unwrap();
        let mut req = Vec::new();
        req.extend_from_slice(&0i32.to_be_bytes());
        req.extend_from_slice(&0i64.to_be_bytes());
        req.extend_from_slice(&60_000i32.to_be_bytes());
        req.extend_from_slice(&0x42i64.to_be_bytes());
        req.extend_from_slice(&16i32.to_be_bytes());
        req.extend_from_slice(&[0u8; 16]);
        req.push(0);
        c.write_all(&frame(&req)).await.unwrap();
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest).await;
        serve.await.unwrap();
        let event = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap();
        assert!(
            matches!(
                event,
                Some(RelayEvent::Unanswered {
                    session_id: 0x42,
                    ..
                })
            ),
            "{event:?}"
        );
    }
}
