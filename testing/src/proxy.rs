//! [`FaultProxy`]: a TCP proxy between clients and servers that can cut, blackhole or delay the
//! link.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::{HarnessError, Result};

/// What the proxy does to traffic; every connection task watches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Forward.
    Normal,
    /// Forward each chunk after this long.
    Delay(Duration),
    /// Forward client-to-server chunks at once, server-to-client chunks after this long.
    DelayReplies(Duration),
    /// Keep connections open, pass nothing (bytes are held back until healed).
    Blackhole,
    /// Pass server-to-client bytes; hold client-to-server bytes back until healed.
    BlackholeRequests,
    /// Pass client-to-server bytes; hold server-to-client bytes back until healed.
    BlackholeReplies,
    /// Reset every connection, and reset new ones at once.
    Cut,
}

/// An upstream's scheme (`tcp+tls://`, `tcp://`, or empty) and its `host:port`.
fn split_scheme(upstream: &str) -> (&'static str, &str) {
    for scheme in ["tcp+tls://", "tcp://"] {
        if let Some(rest) = upstream.strip_prefix(scheme) {
            return (scheme, rest);
        }
    }
    ("", upstream)
}

/// A loopback TCP proxy in front of one or more servers, to do network faults to a client.
///
/// [`start`](Self::start) opens one listener per upstream; clients connect to
/// [`connect_string`](Self::connect_string) instead of the servers'. Then:
///
/// - [`cut`](Self::cut): every current connection is reset (RST), new ones are accepted and
///   reset at once, until [`heal`](Self::heal). The client sees a disconnect immediately.
/// - [`blackhole`](Self::blackhole): connections stay open but no byte passes either way; new
///   connections are accepted and pass nothing either (the server sees them only after the
///   heal, as if their first packets had been dropped). The client sees requests hang, then
///   (after its connection timeout) a disconnect: a network partition.
/// - [`blackhole_requests`](Self::blackhole_requests) and
///   [`blackhole_replies`](Self::blackhole_replies): the same, one way only: what the client
///   sends is held back while what the server sends still flows, or the reverse.
/// - [`delay`](Self::delay): each forwarded chunk waits this long, in both directions;
///   [`delay_replies`](Self::delay_replies) delays only what the servers send back.
/// - [`heal`](Self::heal): forwarding resumes; bytes held back by a blackhole flow again, as
///   after a healed partition.
///
/// The proxy is bound to the tokio runtime it was started on (its tasks run there); dropping it
/// stops every task and closes every connection.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use zookeeper_recipes_testing::{FaultProxy, TestingServer};
///
/// let server = TestingServer::start().await?;
/// let proxy = FaultProxy::start(&[server.connect_string().to_owned()]).await?;
/// let client = zookeeper_client::Client::connect(&proxy.connect_string()).await?;
/// proxy.cut(); // the client is disconnected
/// proxy.heal(); // and reconnects, same session
/// # drop(client);
/// # Ok(())
/// # }
/// ```
pub struct FaultProxy {
    listen: Vec<SocketAddr>,
    /// Each upstream's scheme (`tcp+tls://`, `tcp://` or empty), kept in the connect string.
    schemes: Vec<&'static str>,
    mode: watch::Sender<Mode>,
    connections: Arc<AtomicUsize>,
    /// How many chunks the servers sent wait out a delay in the proxy now.
    held_replies: Arc<watch::Sender<usize>>,
    /// The accept loops; each owns its connections' tasks, so aborting it aborts them.
    _tasks: JoinSet<()>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("listen", &self.listen)
            .field("mode", &*self.mode.borrow())
            .field("connections", &self.connection_count())
            .field("held_replies", &self.held_replies())
            .finish()
    }
}

impl FaultProxy {
    /// Opens one loopback listener per upstream (`host:port`, such as a server's
    /// [`connect_string`](super::TestingServer::connect_string)) and starts forwarding.
    ///
    /// # Errors
    ///
    /// [`HarnessError::InvalidArgument`] for no upstream; [`HarnessError::Io`] if a listener
    /// cannot be bound. Upstreams are connected per client connection, so a down upstream is
    /// not an error here (that client connection is closed).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is started before the last await.
    pub async fn start(upstreams: &[String]) -> Result<FaultProxy> {
        if upstreams.is_empty() {
            return Err(HarnessError::InvalidArgument {
                what: "upstreams",
                reason: "a proxy needs at least one upstream".to_owned(),
            });
        }
        let mut listeners = Vec::with_capacity(upstreams.len());
        let mut schemes = Vec::with_capacity(upstreams.len());
        for upstream in upstreams {
            let (scheme, address) = split_scheme(upstream);
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .await
                .map_err(HarnessError::io("binding a proxy listener"))?;
            let listen = listener
                .local_addr()
                .map_err(HarnessError::io("reading a proxy listener's address"))?;
            listeners.push((listener, listen, address.to_owned()));
            schemes.push(scheme);
        }
        let mut proxy = FaultProxy::serve(listeners, None, Duration::ZERO)?;
        proxy.schemes = schemes;
        Ok(proxy)
    }

    /// A proxy for one directed link between two ZooKeeper servers: listener 0 forwards to the
    /// peer's quorum port, listener 1 to its election port. On the election listener, the
    /// election address the connecting server announces in its first message is replaced by
    /// `announce` once that is set: ZooKeeper's `QuorumCnxManager` answers a connection from a
    /// smaller server id by connecting back to the announced address, which must be the proxy
    /// of the reverse link, or that connection would bypass every proxy.
    ///
    /// A connection whose peer refuses it (not listening yet, or down) is held open for up to
    /// `hold`, its upstream connect retried, instead of being reset at once: see [`Upstream`].
    pub(crate) async fn start_peer_link(
        quorum: String,
        election: String,
        announce: Arc<OnceLock<String>>,
        hold: Duration,
    ) -> Result<FaultProxy> {
        let mut listeners = Vec::with_capacity(2);
        for upstream in [quorum, election] {
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .await
                .map_err(HarnessError::io("binding a peer link listener"))?;
            let address = listener
                .local_addr()
                .map_err(HarnessError::io("reading a peer link listener's address"))?;
            listeners.push((listener, address, upstream));
        }
        FaultProxy::serve(listeners, Some((1, announce)), hold)
    }

    /// Starts the accept loops; the listener at `rewrite.0` rewrites election hellos.
    fn serve(
        listeners: Vec<(TcpListener, SocketAddr, String)>,
        rewrite: Option<(usize, Arc<OnceLock<String>>)>,
        hold: Duration,
    ) -> Result<FaultProxy> {
        let (mode, _) = watch::channel(Mode::Normal);
        let connections = Arc::new(AtomicUsize::new(0));
        let held_replies = Arc::new(watch::Sender::new(0));
        let mut tasks = JoinSet::new();
        let mut listen = Vec::with_capacity(listeners.len());
        for (k, (listener, address, upstream)) in listeners.into_iter().enumerate() {
            listen.push(address);
            let hello = rewrite
                .as_ref()
                .filter(|(at, _)| *at == k)
                .map(|(_, announce)| announce.clone());
            tasks.spawn(accept_loop(
                listener,
                Upstream {
                    address: upstream,
                    hold,
                },
                hello,
                mode.subscribe(),
                connections.clone(),
                held_replies.clone(),
            ));
        }
        Ok(FaultProxy {
            listen,
            schemes: Vec::new(),
            mode,
            connections,
            held_replies,
            _tasks: tasks,
        })
    }

    /// The proxy's listen addresses, comma-joined in upstream order, each with its upstream's
    /// scheme (`tcp+tls://` for a TLS server): the connect string for clients.
    pub fn connect_string(&self) -> String {
        self.listen
            .iter()
            .enumerate()
            .map(|(k, a)| format!("{}{a}", self.schemes.get(k).copied().unwrap_or("")))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The listen address standing for upstream `index`.
    pub fn listen_address(&self, index: usize) -> Option<SocketAddr> {
        self.listen.get(index).copied()
    }

    /// How many client connections are open through the proxy now.
    pub fn connection_count(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// How many chunks of what the servers sent (replies, pings, watch events) the proxy holds
    /// now: read from a server and waiting out [`delay`](Self::delay) or
    /// [`delay_replies`](Self::delay_replies) before they pass on to the client. (Under a
    /// blackhole the proxy reads nothing, so what it holds back stays in the sockets, uncounted.)
    pub fn held_replies(&self) -> usize {
        *self.held_replies.borrow()
    }

    /// Waits until the proxy holds at least `n` chunks of what the servers sent
    /// ([`held_replies`](Self::held_replies)), at most `bound`: the hook a test uses to act
    /// while a reply is in flight (for instance to [`cut`](Self::cut) the link after the server
    /// applied a request and before its client hears so), instead of sleeping and hoping.
    ///
    /// # Errors
    /// [`HarnessError::Timeout`] when `bound` runs out first.
    ///
    /// # Cancel safety
    /// Cancel safe: it only watches.
    pub async fn wait_held_replies(&self, n: usize, bound: Duration) -> Result<()> {
        let mut held = self.held_replies.subscribe();
        match tokio::time::timeout(bound, held.wait_for(|h| *h >= n)).await {
            Ok(Ok(_)) => Ok(()),
            // The sender lives as long as `self`.
            Ok(Err(_)) | Err(_) => Err(HarnessError::Timeout {
                what: format!("the proxy to hold {n} chunks from the servers"),
                timeout: bound,
            }),
        }
    }

    /// Resets every connection (RST) and resets new ones at once, until [`heal`](Self::heal).
    pub fn cut(&self) {
        self.mode.send_replace(Mode::Cut);
    }

    /// Passes no bytes in either direction (holding them back) until [`heal`](Self::heal);
    /// connections stay open and new ones are accepted.
    pub fn blackhole(&self) {
        self.mode.send_replace(Mode::Blackhole);
    }

    /// Holds back what clients send (requests, and the first bytes of a new connection) until
    /// [`heal`](Self::heal), while what the servers send still flows: a one-way partition.
    pub fn blackhole_requests(&self) {
        self.mode.send_replace(Mode::BlackholeRequests);
    }

    /// Holds back what the servers send (replies, pings, watch events) until
    /// [`heal`](Self::heal), while what clients send still flows: a one-way partition.
    pub fn blackhole_replies(&self) {
        self.mode.send_replace(Mode::BlackholeReplies);
    }

    /// Delays each forwarded chunk by `latency`, both directions, until [`heal`](Self::heal).
    pub fn delay(&self, latency: Duration) {
        self.mode.send_replace(Mode::Delay(latency));
    }

    /// Delays only what the servers send back (replies, watch events) by `latency`, until
    /// [`heal`](Self::heal): a request reaches the server at once while its reply is still in
    /// flight for `latency`. A [`cut`](Self::cut) in that window loses the reply of a request
    /// that the server has already applied.
    pub fn delay_replies(&self, latency: Duration) {
        self.mode.send_replace(Mode::DelayReplies(latency));
    }

    /// Back to plain forwarding; bytes held back by a blackhole flow again.
    pub fn heal(&self) {
        self.mode.send_replace(Mode::Normal);
    }
}

/// Counts a connection for as long as its task lives (even when aborted).
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(count: &Arc<AtomicUsize>) -> Counted {
        count.fetch_add(1, Ordering::SeqCst);
        Counted(count.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Closes a socket with RST instead of FIN.
fn reset(stream: TcpStream) {
    #[allow(deprecated)] // linger zero never blocks: the one use tokio keeps it for.
    let _ = stream.set_linger(Some(Duration::ZERO));
    drop(stream);
}

/// Where a listener forwards to, and how long a refused connection is held (see
/// [`connect_upstream`]).
#[derive(Debug, Clone)]
struct Upstream {
    address: String,
    /// Zero: a refused upstream resets the client at once.
    hold: Duration,
}

async fn accept_loop(
    listener: TcpListener,
    upstream: Upstream,
    hello: Option<Arc<OnceLock<String>>>,
    mode: watch::Receiver<Mode>,
    connections: Arc<AtomicUsize>,
    held_replies: Arc<watch::Sender<usize>>,
) {
    // Dropped with this task (when the proxy drops), aborting every connection task.
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else {
                    // EMFILE and the like: back off briefly rather than spin.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                if *mode.borrow() == Mode::Cut {
                    reset(client);
                    continue;
                }
                conns.spawn(connection(client, upstream.clone(), hello.clone(), mode.clone(), Counted::new(&connections), held_replies.clone()));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn connection(
    mut client: TcpStream,
    upstream: Upstream,
    hello: Option<Arc<OnceLock<String>>>,
    mut mode: watch::Receiver<Mode>,
    _counted: Counted,
    held_replies: Arc<watch::Sender<usize>>,
) {
    // As with a dropped SYN, the server sees nothing of a connection opened while what the
    // client sends is held back.
    passable(&mut mode, Direction::Up).await;
    let mut early = Vec::new();
    let Some(mut server) = connect_upstream(&mut client, &upstream, &mut mode, &mut early).await
    else {
        reset(client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let cut = {
        let (cr, mut cw) = client.split();
        // What the client sent while the upstream was being connected goes first.
        let mut cr = std::io::Cursor::new(early).chain(cr);
        let (mut sr, mut sw) = server.split();
        if let Some(announce) = hello.as_ref().and_then(|h| h.get())
            && rewrite_election_hello(&mut cr, &mut sw, announce)
                .await
                .is_err()
        {
            drop((cr, cw, sr, sw));
            reset(client);
            reset(server);
            return;
        }
        let up = pump(&mut cr, &mut sw, mode.clone(), Direction::Up, None);
        let down = pump(
            &mut sr,
            &mut cw,
            mode.clone(),
            Direction::Down,
            Some(&held_replies),
        );
        let forward = async {
            let _ = tokio::join!(up, down);
        };
        tokio::select! {
            () = forward => false,
            _ = mode.wait_for(|m| *m == Mode::Cut) => true,
        }
    };
    if cut {
        reset(client);
        reset(server);
    }
}

/// How often a held connection retries its refused upstream.
const HOLD_RETRY: Duration = Duration::from_millis(50);
/// The most a held connection buffers of what its client sends before the upstream answers.
const MAX_EARLY: usize = 64 * 1024;

/// Connects to the upstream for `client`. A refused connect is retried every [`HOLD_RETRY`]
/// for up to `upstream.hold` while the client waits, its bytes gathered into `early`; `None`
/// (the caller resets the client) once that runs out, when the client closes or fails, or on
/// a cut.
///
/// Without the hold, a connection to a peer that is not listening yet looks to its client like
/// one accepted and then reset, where without the proxy the connect itself would be refused.
/// ZooKeeper treats the two differently: a follower retries a refused connect to its new
/// leader within `initLimit`, but gives up following a leader whose accepted connection is
/// reset, and the election starts over after the leader's `initLimit` (see
/// [`super::TestingCluster`]). Holding the connection until the peer listens is what a refused
/// connect retried amounts to.
async fn connect_upstream(
    client: &mut TcpStream,
    upstream: &Upstream,
    mode: &mut watch::Receiver<Mode>,
    early: &mut Vec<u8>,
) -> Option<TcpStream> {
    let deadline = tokio::time::Instant::now() + upstream.hold;
    let mut chunk = vec![0u8; 4096];
    loop {
        if let Ok(server) = TcpStream::connect(&upstream.address).await {
            if !is_self_connected(&server) {
                return Some(server);
            }
            // Dropped at once: it holds the very port the peer is about to bind.
            drop(server);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        let retry = tokio::time::sleep(HOLD_RETRY);
        tokio::pin!(retry);
        loop {
            tokio::select! {
                () = &mut retry => break,
                read = client.read(&mut chunk), if early.len() < MAX_EARLY => match read {
                    Ok(0) | Err(_) => return None,
                    Ok(n) => early.extend_from_slice(chunk.get(..n).unwrap_or_default()),
                },
                _ = mode.wait_for(|m| *m == Mode::Cut) => return None,
            }
        }
        // A blackhole that began meanwhile keeps the server from seeing the connection, as above.
        passable(mode, Direction::Up).await;
    }
}

/// Whether a connect to a loopback port nobody listens on was answered by the socket itself
/// (TCP simultaneous open: the kernel picked the destination port as the source port). Retried
/// connects to a port in the ephemeral range hit this sooner or later, and such a socket keeps
/// the port from the server that is about to listen on it.
fn is_self_connected(stream: &TcpStream) -> bool {
    matches!((stream.local_addr(), stream.peer_addr()), (Ok(local), Ok(peer)) if local == peer)
}

/// Which way a pump copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

impl Mode {
    /// Whether bytes going `direction` are held back.
    fn holds(self, direction: Direction) -> bool {
        match self {
            Mode::Blackhole => true,
            Mode::BlackholeRequests => direction == Direction::Up,
            Mode::BlackholeReplies => direction == Direction::Down,
            Mode::Normal | Mode::Delay(_) | Mode::DelayReplies(_) | Mode::Cut => false,
        }
    }
}

/// The longest election address accepted in a hello (a few `host:port` entries are far shorter).
const MAX_HELLO_ADDRESS: usize = 4096;

/// Copies the first message of a `QuorumCnxManager` connection (protocol version, server id,
/// election address) from `client` to `server`, with the announced address replaced by
/// `announce`. A connection of the old protocol (its first long is the server id, not a
/// negative version) has no address and is forwarded as it is.
async fn rewrite_election_hello(
    client: &mut (impl AsyncRead + Unpin),
    server: &mut (impl AsyncWrite + Unpin),
    announce: &str,
) -> std::io::Result<()> {
    let version = client.read_i64().await?;
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&version.to_be_bytes());
    if version < 0 {
        let sid = client.read_i64().await?;
        let len = usize::try_from(client.read_i32().await?).unwrap_or(usize::MAX);
        if len > MAX_HELLO_ADDRESS {
            return Err(std::io::Error::other("election hello too long"));
        }
        let mut address = vec![0u8; len];
        client.read_exact(&mut address).await?;
        tracing::trace!(
            sid,
            from = %String::from_utf8_lossy(&address),
            to = announce,
            "rewriting an election hello"
        );
        out.extend_from_slice(&sid.to_be_bytes());
        let announced = i32::try_from(announce.len()).map_err(std::io::Error::other)?;
        out.extend_from_slice(&announced.to_be_bytes());
        out.extend_from_slice(announce.as_bytes());
    }
    server.write_all(&out).await
}

/// Waits until bytes may pass `direction` (not blackholed); returns the current delay for it.
async fn passable(mode: &mut watch::Receiver<Mode>, direction: Direction) -> Duration {
    let current = mode.wait_for(|m| !m.holds(direction)).await.map(|m| *m);
    match current {
        Ok(Mode::Delay(d)) => d,
        Ok(Mode::DelayReplies(d)) if direction == Direction::Down => d,
        Ok(_) => Duration::ZERO,
        // The proxy is gone; its tasks are being aborted.
        Err(_) => std::future::pending().await,
    }
}

/// Counts a delayed chunk in `held` from read until written (or dropped with its task).
struct Held<'a>(Option<&'a watch::Sender<usize>>);

impl<'a> Held<'a> {
    fn new(held: Option<&'a watch::Sender<usize>>) -> Held<'a> {
        if let Some(held) = held {
            held.send_modify(|h| *h += 1);
        }
        Held(held)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(held) = self.0 {
            held.send_modify(|h| *h = h.saturating_sub(1));
        }
    }
}

/// Copies one direction, honouring blackhole and delay; half-closes on EOF. Each chunk that
/// waits (a delay, a blackhole) is counted in `held` while it does.
async fn pump<R, W>(
    reader: &mut R,
    writer: &mut W,
    mut mode: watch::Receiver<Mode>,
    direction: Direction,
    held: Option<&watch::Sender<usize>>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        passable(&mut mode, direction).await;
        let n = match reader.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = writer.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        let waits = match *mode.borrow() {
            Mode::Delay(_) => true,
            Mode::DelayReplies(_) => direction == Direction::Down,
            _ => false,
        };
        let holding = Held::new(held.filter(|_| waits));
        // A chunk read just before a blackhole is held back too.
        let delay = passable(&mut mode, direction).await;
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
            passable(&mut mode, direction).await;
        }
        // No longer counted before the client can see it.
        drop(holding);
        if writer.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_scheme_is_split_off() {
        assert_eq!(
            split_scheme("tcp+tls://127.0.0.1:1"),
            ("tcp+tls://", "127.0.0.1:1")
        );
        assert_eq!(split_scheme("tcp://127.0.0.1:2"), ("tcp://", "127.0.0.1:2"));
        assert_eq!(split_scheme("127.0.0.1:3"), ("", "127.0.0.1:3"));
    }

    /// A loopback port that nothing listens on now (and that this process hands out once).
    fn unused_port() -> u16 {
        crate::server_process::free_ports(1).expect("a free port")[0]
    }

    async fn peer_link(port: u16, hold: Duration) -> FaultProxy {
        let upstream = format!("127.0.0.1:{port}");
        FaultProxy::start_peer_link(upstream.clone(), upstream, Arc::new(OnceLock::new()), hold)
            .await
            .expect("a peer link proxy")
    }

    /// The race that stalled elections: a follower connects to its new leader's quorum port
    /// before the leader listens on it. Through a link proxy, the connection must reach the
    /// leader once it listens (as a refused connect, retried, would), with what the follower
    /// sent meanwhile, instead of being reset.
    #[tokio::test]
    async fn a_peer_link_holds_a_connection_until_its_peer_listens() {
        let port = unused_port();
        let proxy = peer_link(port, Duration::from_secs(10)).await;
        let address = proxy.listen_address(0).expect("the quorum listener");
        let mut follower = TcpStream::connect(address).await.expect("connect");
        follower.write_all(b"learner info").await.expect("write");
        tokio::time::sleep(Duration::from_millis(300)).await;

        let leader = TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .await
            .expect("bind the peer's port");
        let (mut accepted, _) = tokio::time::timeout(Duration::from_secs(5), leader.accept())
            .await
            .expect("the held connection reaches the peer once it listens")
            .expect("accept");
        let mut got = [0u8; 12];
        accepted.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"learner info");
        accepted
            .write_all(b"leader info")
            .await
            .expect("write back");
        let mut back = [0u8; 11];
        tokio::time::timeout(Duration::from_secs(5), follower.read_exact(&mut back))
            .await
            .expect("the reply comes back")
            .expect("read back");
        assert_eq!(&back, b"leader info");
    }

    /// A peer that stays down: the held connection is given up (reset) once the hold runs out.
    #[tokio::test]
    async fn a_peer_link_gives_up_on_a_peer_that_stays_down() {
        let proxy = peer_link(unused_port(), Duration::from_millis(300)).await;
        let address = proxy.listen_address(1).expect("the election listener");
        let mut client = TcpStream::connect(address).await.expect("connect");
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), client.read(&mut buf))
            .await
            .expect("the connection ends after the hold");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        tokio::time::timeout(Duration::from_secs(5), async {
            while proxy.connection_count() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("no connection left in the proxy");
    }

    /// The hold retries connects to a port nobody listens on; one that the kernel answers with
    /// the socket itself (same source and destination port) must not count as the peer.
    #[tokio::test]
    async fn a_socket_connected_to_itself_is_told_apart() {
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, unused_port()));
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.bind(address).expect("bind");
        let looped = socket
            .connect(address)
            .await
            .expect("a simultaneous open with itself");
        assert!(is_self_connected(&looped));
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("listener");
        let real = TcpStream::connect(listener.local_addr().expect("address"))
            .await
            .expect("connect");
        assert!(!is_self_connected(&real));
    }

    /// A client-facing proxy keeps resetting at once a connection its server refuses.
    #[tokio::test]
    async fn a_client_proxy_resets_a_refused_connection_at_once() {
        let proxy = FaultProxy::start(&[format!("127.0.0.1:{}", unused_port())])
            .await
            .expect("a proxy");
        let address = proxy.listen_address(0).expect("listener");
        let mut client = TcpStream::connect(address).await.expect("connect");
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(2), client.read(&mut buf))
            .await
            .expect("reset at once, not held");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    }

    /// The hook that replaces a sleep before a cut: a reply read from the server and delayed is
    /// counted from the moment the proxy reads it until it passes on.
    #[tokio::test]
    async fn a_delayed_reply_is_counted_while_the_proxy_holds_it() {
        let server = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("bind");
        let upstream = server.local_addr().expect("address").to_string();
        tokio::spawn(async move {
            let (mut s, _) = server.accept().await.expect("accept");
            let mut buf = [0u8; 4];
            s.read_exact(&mut buf).await.expect("request");
            s.write_all(b"pong").await.expect("reply");
            // Keep the connection open until the client is done.
            let _ = s.read(&mut buf).await;
        });
        let proxy = FaultProxy::start(&[upstream]).await.expect("a proxy");
        let mut client = TcpStream::connect(proxy.listen_address(0).expect("listener"))
            .await
            .expect("connect");
        proxy.delay_replies(Duration::from_millis(400));
        assert_eq!(proxy.held_replies(), 0);
        client.write_all(b"ping").await.expect("request");
        proxy
            .wait_held_replies(1, Duration::from_secs(5))
            .await
            .expect("the reply is held");
        assert_eq!(proxy.held_replies(), 1);
        let mut got = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut got))
            .await
            .expect("the reply passes after the delay")
            .expect("read");
        assert_eq!(&got, b"pong");
        assert_eq!(proxy.held_replies(), 0, "a passed reply is no longer held");
        assert!(matches!(
            proxy.wait_held_replies(1, Duration::from_millis(50)).await,
            Err(HarnessError::Timeout { .. })
        ));
    }
}
