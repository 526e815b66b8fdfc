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
/// use zookeeper_recipes::testing::{FaultProxy, TestingServer};
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
    mode: watch::Sender<Mode>,
    connections: Arc<AtomicUsize>,
    /// The accept loops; each owns its connections' tasks, so aborting it aborts them.
    _tasks: JoinSet<()>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("listen", &self.listen)
            .field("mode", &*self.mode.borrow())
            .field("connections", &self.connection_count())
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
        for upstream in upstreams {
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .await
                .map_err(HarnessError::io("binding a proxy listener"))?;
            let address = listener
                .local_addr()
                .map_err(HarnessError::io("reading a proxy listener's address"))?;
            listeners.push((listener, address, upstream.clone()));
        }
        FaultProxy::serve(listeners, None)
    }

    /// A proxy for one directed link between two ZooKeeper servers: listener 0 forwards to the
    /// peer's quorum port, listener 1 to its election port. On the election listener, the
    /// election address the connecting server announces in its first message is replaced by
    /// `announce` once that is set: ZooKeeper's `QuorumCnxManager` answers a connection from a
    /// smaller server id by connecting back to the announced address, which must be the proxy
    /// of the reverse link, or that connection would bypass every proxy.
    pub(crate) async fn start_peer_link(
        quorum: String,
        election: String,
        announce: Arc<OnceLock<String>>,
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
        FaultProxy::serve(listeners, Some((1, announce)))
    }

    /// Starts the accept loops; the listener at `rewrite.0` rewrites election hellos.
    fn serve(
        listeners: Vec<(TcpListener, SocketAddr, String)>,
        rewrite: Option<(usize, Arc<OnceLock<String>>)>,
    ) -> Result<FaultProxy> {
        let (mode, _) = watch::channel(Mode::Normal);
        let connections = Arc::new(AtomicUsize::new(0));
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
                upstream,
                hello,
                mode.subscribe(),
                connections.clone(),
            ));
        }
        Ok(FaultProxy {
            listen,
            mode,
            connections,
            _tasks: tasks,
        })
    }

    /// The proxy's listen addresses, comma-joined in upstream order: the connect string for
    /// clients.
    pub fn connect_string(&self) -> String {
        self.listen
            .iter()
            .map(ToString::to_string)
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

async fn accept_loop(
    listener: TcpListener,
    upstream: String,
    hello: Option<Arc<OnceLock<String>>>,
    mode: watch::Receiver<Mode>,
    connections: Arc<AtomicUsize>,
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
                conns.spawn(connection(client, upstream.clone(), hello.clone(), mode.clone(), Counted::new(&connections)));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn connection(
    client: TcpStream,
    upstream: String,
    hello: Option<Arc<OnceLock<String>>>,
    mut mode: watch::Receiver<Mode>,
    _counted: Counted,
) {
    // As with a dropped SYN, the server sees nothing of a connection opened while what the
    // client sends is held back.
    passable(&mut mode, Direction::Up).await;
    let Ok(server) = TcpStream::connect(&upstream).await else {
        reset(client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client, mut server) = (client, server);
    if let Some(announce) = hello.as_ref().and_then(|h| h.get())
        && rewrite_election_hello(&mut client, &mut server, announce)
            .await
            .is_err()
    {
        reset(client);
        reset(server);
        return;
    }
    let cut = {
        let (mut cr, mut cw) = client.split();
        let (mut sr, mut sw) = server.split();
        let up = pump(&mut cr, &mut sw, mode.clone(), Direction::Up);
        let down = pump(&mut sr, &mut cw, mode.clone(), Direction::Down);
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
    client: &mut TcpStream,
    server: &mut TcpStream,
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

/// Copies one direction, honouring blackhole and delay; half-closes on EOF.
async fn pump<R, W>(
    reader: &mut R,
    writer: &mut W,
    mut mode: watch::Receiver<Mode>,
    direction: Direction,
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
        // A chunk read just before a blackhole is held back too.
        let delay = passable(&mut mode, direction).await;
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
            passable(&mut mode, direction).await;
        }
        if writer.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
