//! The session's supervisor: its one background task, which connects straight to the servers,
//! serves each ZooKeeper session (heartbeats, touches, the lease, the client's reports),
//! publishes every state change, resumes a session its client gave up on, and starts a new
//! session after loss.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tracing::{debug, error, info, warn};
use zookeeper_client::{Client, Connector, CreateMode, SessionInfo, SessionState};

use super::builder::{Config, Digest};
use super::lease::{
    self, Lease, QuorumProof, assumed_tick, heartbeat_interval, relay_allowance, touch_interval,
};
use super::{Live, SessionStatus, Shared, hex};
use crate::clock::{BootTime, BootTimer};
use crate::error::{Backoff, Error, Result};
use crate::state::{ClientSignal, ConnectionState, next_state};

/// At most this many heartbeats wait for an answer at once (they queue while disconnected).
const MAX_HEARTBEATS_IN_FLIGHT: usize = 2;

/// How the client of one ZooKeeper session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EndOfSession {
    /// [`Session::close`](super::Session::close).
    Closed,
    /// The client gave up on the session without the servers saying it expired (zookeeper-client
    /// declares a session expired by itself after about 7/5 of the timeout without a
    /// connection): the session may well be alive on the servers, and a new client resumes it.
    GaveUp,
    /// The servers said the session expired.
    Expired,
    /// The client ended for a reason a resume would meet again (refused credentials), or it
    /// left its session for another one (a read-only session it replaced).
    Failed,
}

/// What became of one of the session's own requests: a heartbeat (`sync`) or a touch (`exists`).
#[derive(Debug, Clone, Copy)]
struct Answer {
    /// Stamped before the request was handed to the client.
    sent: BootTime,
    /// The lease's connection it went out on.
    conn: u64,
    /// When its answer came back; `None` when it failed.
    answered: Option<BootTime>,
    /// The server answered "expired" or "session moved".
    said_expired: bool,
}

/// One of the session's own requests in flight.
type Request = Pin<Box<dyn std::future::Future<Output = Answer> + Send>>;

/// A session whose client gave up on it: what a new client needs to resume it.
struct Resume {
    info: SessionInfo,
    lease: Arc<Lease>,
    timeout: Duration,
}

/// The session's one background task: connects, watches, proves the session alive, resumes a
/// session its client gave up on, starts a new session after loss. All state changes go through
/// `publish`.
pub(super) async fn supervise(shared: Arc<Shared>) {
    let clock = shared.config.clock.clone();
    let mut epoch = 0u64;
    let mut state: Option<ConnectionState> = None;
    let mut backoff = Backoff::new(MAX_RECONNECT_PAUSE.min(shared.config.connection_timeout));
    let mut resume: Option<Resume> = None;
    // One server said the session expired, and it is not believed yet (see `doubt`).
    let mut doubted = false;
    loop {
        // Stamped before the client sends its `ConnectRequest`: the server touches the session
        // (and the quorum leader creates it) only after this.
        let started = clock.now();
        let connected = tokio::select! {
            _ = shared.stop.cancelled() => break,
            r = async {
                match &resume {
                    Some(r) => connect_resumed(&shared.config, r).await,
                    None => connect_client(&shared.config).await,
                }
            } => r,
        };
        let answered = clock.now();
        let client = match connected {
            Ok(client) => client,
            Err(Error::SessionExpired) if resume.is_some() => {
                // The servers said "expired" to the resume: the lease is void at once, whether
                // or not it is believed yet (a client that gave up without a word from the
                // servers, or lost its connection to a close it was not told of, left it valid).
                if let Some(r) = &resume {
                    if r.lease.is_valid() {
                        warn!(
                            "a server says the session expired: its lease is void until a resume proves it again"
                        );
                    }
                    r.lease.void_now();
                }
                if !doubted {
                    doubted = true;
                    let timeout = resume
                        .as_ref()
                        .map_or(shared.config.session_timeout, |r| r.timeout);
                    doubt(
                        &shared,
                        second_ask_after(assumed_tick(shared.config.server_tick_time, timeout)),
                    )
                    .await;
                    continue;
                }
                // Two answers, a server tick apart, say the session is gone: now it is lost.
                doubted = false;
                if let Some(r) = resume.take() {
                    lose(
                        &shared,
                        &mut state,
                        epoch,
                        &r.lease,
                        "the servers say the session expired",
                    );
                }
                continue;
            }
            Err(err) => {
                let pause = backoff.fail();
                if matches!(
                    err,
                    Error::Refused { .. }
                        | Error::NoChroot { .. }
                        | Error::AuthFailed
                        | Error::Unreachable { .. }
                        | Error::TlsHandshake { .. }
                ) && let Ok(mut refusal) = shared.refusal.lock()
                {
                    *refusal = Some(err.clone());
                }
                if matches!(err, Error::AuthFailed) {
                    error!(hosts = %shared.config.hosts, "ZooKeeper refused the credentials; retrying in {pause:?}");
                } else if resume.is_some() {
                    debug!(hosts = %shared.config.hosts, error = %err, "could not resume the session yet; retrying in {pause:?}");
                } else {
                    warn!(hosts = %shared.config.hosts, error = %err, failures = backoff.failures(), "could not establish a ZooKeeper session; retrying in {pause:?}");
                }
                tokio::select! {
                    _ = shared.stop.cancelled() => break,
                    _ = tokio::time::sleep(pause) => continue,
                }
            }
        };
        backoff.succeed();
        doubted = false;
        epoch += 1;
        let session_id = client.session_id().0;
        let resumed = resume.take();
        let (lease, timeout, new_session, handshake) = match resumed {
            Some(r) => {
                // The new client negotiated again: its timeout counts, and its handshake, which
                // the server revalidated with the quorum leader before it answered, is a touch
                // that a later `sync` proves.
                let negotiated = client.session_timeout();
                let before = r.lease.timeout();
                let conn = r.lease.connected(negotiated);
                if negotiated < before {
                    warn!(
                        epoch,
                        from_ms = before.as_millis() as u64,
                        to_ms = negotiated.as_millis() as u64,
                        "the resumed session negotiated a shorter timeout: the lease counts with it from now on"
                    );
                }
                info!(
                    epoch,
                    negotiated_timeout_ms = negotiated.as_millis() as u64,
                    "resumed the session its client had given up on: its nodes are still there"
                );
                debug!(session_id = %hex(session_id), epoch, "resumed session");
                (r.lease, r.timeout, false, Some((started, answered, conn)))
            }
            None => {
                let timeout = client.session_timeout();
                let tick = assumed_tick(shared.config.server_tick_time, timeout);
                if shared.config.server_tick_time.is_none()
                    && !shared.tick_warned.swap(true, Ordering::AcqRel)
                {
                    warn!(
                        assumed_tick_ms = tick.as_millis() as u64,
                        negotiated_timeout_ms = timeout.as_millis() as u64,
                        "the servers' tickTime is not configured: the lease assumes {tick:?} (ZooKeeper's default, at most a third of the timeout); a larger real tick makes the lease unsafe, so set it (SessionBuilder::server_tick_time, zkr --server-tick-time)"
                    );
                }
                let floor = shared.config.session_timeout_floor;
                info!(
                    epoch,
                    negotiated_timeout_ms = timeout.as_millis() as u64,
                    floor_ms = floor.map(|f| f.as_millis() as u64),
                    "ZooKeeper session established"
                );
                debug!(session_id = %hex(session_id), epoch, "established session");
                let lease = Arc::new(Lease::new(
                    clock.clone(),
                    started,
                    timeout,
                    floor,
                    shared.config.lease_margin,
                ));
                (lease, timeout, true, None)
            }
        };
        let tick = assumed_tick(shared.config.server_tick_time, timeout);
        let live = Live {
            client: client.clone(),
            epoch,
            session_id,
            lease: Arc::clone(&lease),
        };
        if let Ok(mut current) = shared.current.write() {
            *current = Some(live.clone());
        }
        let read_only = client.state() == SessionState::ConnectedReadOnly;
        // A resumed session whose lease has lapsed stays suspended until a heartbeat proves it,
        // if something needs the lease: needed as `serve` judges it, with the lease's timeout
        // (which a floor or a renegotiation can make shorter than the session's).
        if new_session || read_only || lease.is_valid() || !shared.demand.wanted(lease.timeout()) {
            let signal = if read_only {
                ClientSignal::ConnectedReadOnly
            } else {
                ClientSignal::Connected
            };
            if let Some(next) = next_state(state, signal, new_session) {
                state = Some(next);
                publish(&shared, next, Some(session_id), epoch, new_session);
            }
        }
        let end = serve(&shared, &live, &mut state, handshake, tick).await;
        if let Ok(mut current) = shared.current.write() {
            *current = None;
        }
        // Release our handle before anything waits: the client ends its session only once its
        // last handle is gone.
        drop(live);
        match end {
            EndOfSession::Closed => {
                lease.mark_lost();
                // Tell recipes first, so that they drop their handles too, then close.
                publish_closed(&shared, state, epoch);
                close_client(client, shared.config.connection_timeout).await;
                return;
            }
            EndOfSession::GaveUp | EndOfSession::Expired => {
                if end == EndOfSession::GaveUp {
                    warn!(
                        epoch,
                        "the client gave up on the session without the servers saying it expired; resuming it with a new client (it is lost only if the servers say so)"
                    );
                } else {
                    // Ask again before believing it (see `doubt`): resume the session with a
                    // new client, as if the client had given up on it; the answer to that
                    // decides (a second "expired" loses the session).
                    doubted = true;
                }
                if next_state(state, ClientSignal::Disconnected, false).is_some() {
                    state = Some(ConnectionState::Suspended);
                    publish(
                        &shared,
                        ConnectionState::Suspended,
                        Some(session_id),
                        epoch,
                        false,
                    );
                }
                resume = Some(Resume {
                    info: client.session().clone(),
                    lease,
                    timeout,
                });
                drop(client);
                if doubted {
                    doubt(&shared, second_ask_after(tick)).await;
                }
            }
            EndOfSession::Failed => {
                lose(
                    &shared,
                    &mut state,
                    epoch,
                    &lease,
                    "the client ended for good",
                );
                // Should the servers still hold the session, end it there: a clone of the
                // client that the application still holds (`Session::client()`) would
                // otherwise keep it, and its nodes, alive.
                let info = client.session().clone();
                drop(client);
                let twin = connector(&shared.config, timeout);
                tokio::spawn(retire(twin, shared.config.servers(), info, timeout));
            }
        }
    }
    publish_closed(&shared, state, epoch);
}

/// A server said the session expired: wait [`second_ask_after`], then ask again.
///
/// A quorum leader that was paused (a long GC, a frozen VM) longer than `syncLimit` has been
/// replaced, but until its first tick after it resumes it still believes it leads: its own
/// session tracker, which saw no touch while it was paused, calls every session expired, and a
/// client that reconnects to it (or to a follower still following it) in that instant hears
/// "expired" for a session that the new quorum keeps. A quorum leader cut off from its
/// followers does the same for a session nobody touched at it for the timeout, for as long as
/// it believes it leads. The client believes the first answer; we believe the second, asked
/// when the stale leader has stepped down. Nothing depends on the wait for safety: the lease
/// counts only quorum proofs, and no proof comes while the servers say expired. A session that
/// did expire is declared lost two ticks and one request later.
async fn doubt(shared: &Shared, wait: Duration) {
    info!(
        wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        "a server says the session expired; asking again before declaring it lost (a quorum leader that was paused or cut off answers from a stale view until it steps down)"
    );
    tokio::select! {
        _ = shared.stop.cancelled() => {}
        _ = tokio::time::sleep(wait) => {}
    }
}

/// How long to wait before asking again whether the session expired: past the window in which
/// a quorum leader that lost its followers still answers as one
/// ([`stale_leader_window`](super::lease::stale_leader_window), a tick and a half), by half a
/// tick: two ticks.
pub(crate) fn second_ask_after(tick: Duration) -> Duration {
    super::lease::stale_leader_window(tick) + tick / 2
}

/// The session is lost: its lease ends and `Lost` is published; a new session follows.
fn lose(
    shared: &Shared,
    state: &mut Option<ConnectionState>,
    epoch: u64,
    lease: &Lease,
    why: &str,
) {
    lease.mark_lost();
    warn!(epoch, why, "session lost");
    if let Some(next) = next_state(*state, ClientSignal::Terminated, false) {
        *state = Some(next);
        publish(shared, next, None, epoch, false);
    }
}

/// Publishes the final status: closed.
fn publish_closed(shared: &Shared, state: Option<ConnectionState>, epoch: u64) {
    if let Ok(mut current) = shared.current.write() {
        *current = None;
    }
    let status = SessionStatus {
        state: state.map(|_| ConnectionState::Closed),
        session_id: None,
        epoch,
        new_session: false,
        closed: true,
    };
    info!(epoch, "session closed");
    if status.state.is_some() {
        crate::metrics::connection_state(ConnectionState::Closed.as_str(), false);
    }
    shared.status_tx.send_replace(status.clone());
    let _ = shared.events_tx.send(status);
}

/// What the client says of its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Connected,
    ReadOnly,
    Down,
}

/// Serves one ZooKeeper session until it ends: proves it alive, follows the client's state and
/// the answers to its own requests, and publishes the state that follows from both.
/// `handshake` is a resumed client's `ConnectRequest`: its send time, its answer's, and its
/// connection, a touch like any other.
///
/// The published state is `Suspended` while the client is disconnected *or* the lease has
/// lapsed, and `Connected`/`Reconnected` once both are right again: a lapsed lease ends every
/// term on the session, not the session.
async fn serve(
    shared: &Shared,
    live: &Live,
    state: &mut Option<ConnectionState>,
    handshake: Option<(BootTime, BootTime, u64)>,
    tick: Duration,
) -> EndOfSession {
    let client = &live.client;
    let lease = &live.lease;
    let clock = lease.clock().clone();
    let mut watcher = client.state_watcher();
    let timeout = lease.timeout();
    let relay = relay_allowance(tick);
    let room = lease::headroom(timeout, tick, lease.margin());
    if room < heartbeat_interval(timeout) * 2 {
        warn!(
            timeout_ms = timeout.as_millis() as u64,
            relay_ms = relay.as_millis() as u64,
            "the session timeout leaves almost no lease once a heartbeat's way to the quorum leader is allowed for: every hiccup will end its terms; use a timeout of at least four server ticks"
        );
    }
    let mut link = if client.state() == SessionState::ConnectedReadOnly {
        Link::ReadOnly
    } else {
        Link::Connected
    };
    let mut lapsed = !lease.is_valid();
    let mut proof = QuorumProof::default();
    if let Some((sent, answered, conn)) = handshake {
        proof.touched(sent, answered, conn);
    }
    // When a server last answered this session: tells the servers' "expired" from the client's
    // own (see `expired_said_by_servers`).
    let mut last_answer = clock.now();
    // Whether something needs the lease (see `lease::Demand`); heartbeats go out only then.
    let demand = &shared.demand;
    let linger = timeout;
    let mut wanted = demand.wanted(linger);
    // A lease that nobody needs is not judged: only a needed one has lapsed.
    lapsed &= wanted;
    // A connected link whose lease is not judged lapsed is published connected, whatever the
    // caller decided a moment ago: a need that ended in between must not leave the session
    // `Suspended` with nothing left to publish it (trial seed 43033: a resume not published,
    // a closed contender's node kept first in line for 40 s, its deletion waiting for it).
    if !lapsed
        && link == Link::Connected
        && let Some(next) = next_state(*state, ClientSignal::Connected, false)
    {
        *state = Some(next);
        publish(shared, next, Some(live.session_id), live.epoch, false);
    }
    // Set when a demand began on a lease that had run down unneeded: not a lapse, and nothing
    // to report; the first proof ends it.
    let mut unproven = false;
    let mut timer = BootTimer::new(clock.clone());
    let mut heartbeats: FuturesUnordered<Request> = FuturesUnordered::new();
    // While nothing needs the lease: one touch of our own at a time, every touch interval.
    let mut touches: FuturesUnordered<Request> = FuturesUnordered::new();
    let touch_every = touch_interval(timeout);
    let next_touch = tokio::time::sleep(touch_every);
    tokio::pin!(next_touch);
    // When a run of heartbeats begins, the first of them can be proven a relay allowance after
    // its answer: one extra proving `sync` goes out then (the margin stands for the answer's
    // round trip), besides the run's heartbeats on the interval's grid, which begins with the
    // run. The grid must not wait for the extra one: the next proof after it proves only a
    // heartbeat answered a relay allowance before, and with nothing sent in between, that
    // would be the extra one itself, a second relay allowance later, past the lease the first
    // proof gave on a short session (a busy connection sends no touches to fill the gap).
    let first_proof = relay + lease.margin();
    let next_beat = tokio::time::sleep(heartbeat_interval(timeout));
    tokio::pin!(next_beat);
    let early_beat = tokio::time::sleep(first_proof);
    tokio::pin!(early_beat);
    let mut early_armed = wanted;
    if wanted {
        let now = clock.now();
        lease.heartbeats_began(now, now + first_proof + lease.margin());
        heartbeats.push(heartbeat(live));
    } else {
        lease.heartbeats_stopped();
    }
    loop {
        let deadline = lease.deadline();
        let judged = wanted && !unproven;
        let signal = tokio::select! {
            biased;
            _ = shared.stop.cancelled() => return EndOfSession::Closed,
            () = demand.woken(), if !wanted => {
                if !demand.wanted(linger) {
                    // A wake-up stored while the lease was needed anyway.
                    continue;
                }
                // A term, a claim or a reader needs the lease again: prove it now, then on
                // every heartbeat interval.
                wanted = true;
                unproven = !lease.is_valid();
                debug!(session_id = %hex(live.session_id), unproven, "the lease is needed: heartbeats resume");
                let now = clock.now();
                lease.heartbeats_began(now, now + first_proof + lease.margin());
                if link == Link::Connected && heartbeats.len() < MAX_HEARTBEATS_IN_FLIGHT {
                    heartbeats.push(heartbeat(live));
                }
                let at = tokio::time::Instant::now();
                next_beat.as_mut().reset(at + heartbeat_interval(lease.timeout()));
                early_beat.as_mut().reset(at + first_proof);
                early_armed = true;
                continue;
            }
            () = &mut early_beat, if early_armed => {
                // The run's extra heartbeat, a relay allowance after its first: it proves the
                // first one as soon as anything can.
                early_armed = false;
                if wanted && heartbeats.len() < MAX_HEARTBEATS_IN_FLIGHT {
                    heartbeats.push(heartbeat(live));
                }
                continue;
            }
            () = &mut next_touch => {
                next_touch.as_mut().reset(tokio::time::Instant::now() + touch_every);
                if !wanted && link == Link::Connected && touches.is_empty() {
                    touches.push(touch(live));
                }
                continue;
            }
            Some(answer) = touches.next(), if !touches.is_empty() => {
                if let Some(at) = answer.answered {
                    last_answer = last_answer.max(at);
                    // A touch: proven by a later heartbeat, if one is sent.
                    proof.touched(answer.sent, at, answer.conn);
                } else if answer.said_expired {
                    void_on_expired(live, lease);
                }
                continue;
            }
            _ = timer.sleep_until(deadline), if !lapsed && judged => {
                match lapse_or_proof(live, lease, &mut lapsed, link, judged) {
                    Some(signal) => signal,
                    None => continue,
                }
            }
            zk = watcher.changed() => {
                debug!(session_id = %hex(live.session_id), zk_state = %zk, "client state changed");
                match zk {
                    SessionState::SyncConnected if client.session_id().0 != live.session_id => {
                        // A client that started on a read-only server opens a brand-new session
                        // when it finds a writable one. That is not the session we track (its
                        // nodes, its lease): end ours, and start over with a client of our own.
                        warn!("the client left its read-only session for a new one; starting over with a new session");
                        debug!(session_id = %hex(live.session_id), new_session_id = %hex(client.session_id().0), "left for a new session");
                        return EndOfSession::Failed;
                    }
                    SessionState::SyncConnected => {
                        link = Link::Connected;
                        last_answer = last_answer.max(clock.now());
                        if wanted {
                            heartbeats.push(heartbeat(live));
                        }
                        if lease.is_valid() || !judged {
                            lapsed = false;
                            ClientSignal::Connected
                        } else {
                            // Back on a server, but nothing proves the quorum heard of us yet:
                            // still suspended until a heartbeat does.
                            lapsed = true;
                            continue;
                        }
                    }
                    SessionState::ConnectedReadOnly => {
                        link = Link::ReadOnly;
                        ClientSignal::ConnectedReadOnly
                    }
                    SessionState::Disconnected => {
                        link = Link::Down;
                        ClientSignal::Disconnected
                    }
                    SessionState::Expired => {
                        // Whoever said it, the lease is void at once: a term must not outlive
                        // the first "expired" (a resume that the servers accept proves it
                        // again).
                        void_on_expired(live, lease);
                        let quiet = clock.now().saturating_duration_since(last_answer);
                        return if expired_said_by_servers(quiet, lease.timeout()) {
                            EndOfSession::Expired
                        } else {
                            EndOfSession::GaveUp
                        };
                    }
                    SessionState::AuthFailed => return EndOfSession::Failed,
                    // Expired by the client's own timer, or closed under us: the servers may
                    // still hold the session.
                    _ => return EndOfSession::GaveUp,
                }
            }
            Some(answer) = heartbeats.next(), if !heartbeats.is_empty() => {
                if let Some(at) = answer.answered {
                    last_answer = last_answer.max(at);
                    if let Some((proven, on)) = proof.record(answer.sent, at, answer.conn, relay) {
                        lease.advance(proven, on);
                    }
                } else if answer.said_expired {
                    void_on_expired(live, lease);
                }
                if unproven && lease.is_valid() {
                    unproven = false;
                    debug!(session_id = %hex(live.session_id), "the lease is proven again after a quiet spell");
                }
                match lapse_or_proof(live, lease, &mut lapsed, link, wanted && !unproven) {
                    Some(signal) => signal,
                    None => continue,
                }
            }
            () = &mut next_beat => {
                next_beat.as_mut().reset(tokio::time::Instant::now() + heartbeat_interval(lease.timeout()));
                if lease.check_clocks() {
                    warn!("the wall clock ran ahead of boot time: a pause that boot time did not see (a hypervisor that restored the guest's clock); the lease is void until a later heartbeat proves it");
                    proof.forget_until(clock.now());
                }
                wanted = demand.wanted(linger);
                if !wanted {
                    unproven = false;
                    lease.heartbeats_stopped();
                } else if heartbeats.len() < MAX_HEARTBEATS_IN_FLIGHT {
                    heartbeats.push(heartbeat(live));
                }
                match lapse_or_proof(live, lease, &mut lapsed, link, wanted && !unproven) {
                    Some(signal) => signal,
                    None => continue,
                }
            }
        };
        if let Some(next) = next_state(*state, signal, false) {
            *state = Some(next);
            publish(shared, next, Some(live.session_id), live.epoch, false);
        }
    }
}

/// Whether the lease just lapsed (`Disconnected`: the state becomes `Suspended`) or was just
/// proven again on a connected client (`Connected`: `Reconnected`); `None` when neither.
/// `judged` is whether a lapse counts now: the lease is needed and was proven since the need
/// began. A lease nobody needs runs down unseen, and one that lapsed while needed is over once
/// nothing needs it any more (a term that needs it again waits for a proof).
fn lapse_or_proof(
    live: &Live,
    lease: &Lease,
    lapsed: &mut bool,
    link: Link,
    judged: bool,
) -> Option<ClientSignal> {
    let valid = lease.is_valid();
    match (*lapsed, valid) {
        (true, false) if !judged => {
            *lapsed = false;
            info!("nothing needs the lapsed lease any more");
            (link == Link::Connected).then_some(ClientSignal::Connected)
        }
        (false, false) if judged => {
            *lapsed = true;
            debug!(session_id = %hex(live.session_id), "the lease of this session lapsed");
            warn!(
                unproven_ms = lease
                    .clock()
                    .now()
                    .saturating_duration_since(lease.acked())
                    .as_millis() as u64,
                timeout_ms = lease.timeout().as_millis() as u64,
                "the quorum cannot be shown to have heard from this session within its timeout: its terms end; the session is kept and keeps proving itself"
            );
            crate::metrics::lease_lapsed();
            lease.note_lapse();
            // A read-only link already keeps every term from starting; leave its state alone.
            (link != Link::ReadOnly).then_some(ClientSignal::Disconnected)
        }
        (true, true) => {
            *lapsed = false;
            debug!(session_id = %hex(live.session_id), "the lease of this session is proven again");
            info!("the lease is proven again");
            (link == Link::Connected).then_some(ClientSignal::Connected)
        }
        _ => None,
    }
}

/// One heartbeat: a `sync`, which only a server in touch with the quorum leader can answer (a
/// follower forwards it to the leader). Its send time is stamped before the request is handed
/// to the client (the future sends it when first polled). One request per heartbeat, whatever
/// the number of terms the session holds: each term watches its own node instead.
fn heartbeat(live: &Live) -> Request {
    let clock = live.lease.clock().clone();
    let sent = clock.now();
    let conn = live.lease.current_conn();
    let client = live.client.clone();
    Box::pin(async move {
        let result = client.sync("/").await;
        answer(sent, conn, result.map(|()| clock.now()), "heartbeat")
    })
}

/// One touch: an `exists` of the session's root, which the server it reaches answers from its
/// own state (a follower does not ask the quorum leader, so it costs the leader nothing). It
/// touches the session there like any request, and the server relays the touch to the quorum
/// leader with its next ping reply, so a later heartbeat's answer proves it
/// ([`QuorumProof::touched`]). It takes the place of the client's own pings, which the session
/// cannot see, at about their rate ([`touch_interval`]).
fn touch(live: &Live) -> Request {
    let clock = live.lease.clock().clone();
    let sent = clock.now();
    let conn = live.lease.current_conn();
    let client = live.client.clone();
    Box::pin(async move {
        let result = client.check_stat("/").await;
        answer(sent, conn, result.map(|_| clock.now()), "touch")
    })
}

fn answer(
    sent: BootTime,
    conn: u64,
    result: std::result::Result<BootTime, zookeeper_client::Error>,
    what: &'static str,
) -> Answer {
    match result {
        Ok(at) => Answer {
            sent,
            conn,
            answered: Some(at),
            said_expired: false,
        },
        Err(e) => {
            debug!(error = %e, "{what} failed");
            Answer {
                sent,
                conn,
                answered: None,
                said_expired: matches!(
                    e,
                    zookeeper_client::Error::SessionExpired | zookeeper_client::Error::SessionMoved
                ),
            }
        }
    }
}

/// A server said "expired" or "session moved" (or the client gave up on the session): the lease
/// is void at once. Under the SessionExpired policy a term would otherwise run on until the
/// servers were asked again, two ticks later, while a successor may already lead: a session
/// closed or moved by another client (ids are public, and ZooKeeper 3.8 derives the password
/// from the id) deletes its nodes at once.
fn void_on_expired(live: &Live, lease: &Lease) {
    if lease.is_valid() {
        debug!(session_id = %hex(live.session_id), "the servers say this session expired or moved");
        warn!(
            "a server says the session expired or moved: its lease is void until a resume proves it again"
        );
    }
    lease.void_now();
}

/// Whether the session's end was said by the servers ("expired" to a reconnect or to a request,
/// or "session moved") rather than decided by the client, from how long no server had answered
/// (`quiet`). zookeeper-client reports both as `Expired`, but it gives up only after 7/5 of the
/// timeout of its latest connection without an answer, which is at least the lease's `timeout`
/// (the floor covers renegotiations): an end sooner than that was said by a server. Only the
/// wait before the second ask depends on it (see [`doubt`]): the lease is void either way.
fn expired_said_by_servers(quiet: Duration, timeout: Duration) -> bool {
    quiet < timeout
}

fn publish(
    shared: &Shared,
    state: ConnectionState,
    session_id: Option<i64>,
    epoch: u64,
    new_session: bool,
) {
    crate::metrics::connection_state(state.as_str(), state == ConnectionState::Lost);
    // The session id at debug only: with it (the password follows from it on ZooKeeper 3.8)
    // anyone who reads the log and reaches a server can resume or close the session.
    debug!(session_id = %session_id.map(hex).unwrap_or_default(), epoch, state = %state, "connection state of this session");
    match state {
        ConnectionState::Connected | ConnectionState::Reconnected | ConnectionState::Closed => {
            info!(epoch, new_session, state = %state, "connection state changed")
        }
        ConnectionState::ReadOnly | ConnectionState::Suspended | ConnectionState::Lost => {
            warn!(epoch, state = %state, "connection state changed")
        }
    }
    let status = SessionStatus {
        state: Some(state),
        session_id: (state != ConnectionState::Lost)
            .then_some(session_id)
            .flatten(),
        epoch,
        new_session,
        closed: false,
    };
    shared.status_tx.send_replace(status.clone());
    let _ = shared.events_tx.send(status);
}

/// How long [`probe_hosts`] waits for each host (or the connection timeout, if shorter).
const PROBE_BOUND: Duration = Duration::from_secs(1);

/// What each host of `hosts` does with a plain TCP connection, for the error that says why no
/// session could be established: `127.0.0.1:2181: connection refused, zk2:2181: no answer
/// within 15s`.
async fn probe_hosts(hosts: &str, bound: Duration) -> String {
    let mut reasons = Vec::new();
    for host in hosts.split(',') {
        let addr = host.trim().trim_start_matches("tcp://");
        let what = match tokio::time::timeout(bound, tokio::net::TcpStream::connect(addr)).await {
            Err(_) => format!("no answer within {bound:?}"),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                "connection refused".to_owned()
            }
            Ok(Err(e)) => e.to_string(),
            Ok(Ok(_)) => "accepts connections but established no session".to_owned(),
        };
        reasons.push(format!("{addr}: {what}"));
    }
    reasons.join(", ")
}

/// How long the client waits without hearing from its server before it drops the connection:
/// 3/5 of the session timeout (the client's default is 2/5). The client pings after 3/8 of it
/// without a send (0.225 T, checked every 0.075 T): a session that nothing needs a lease for
/// then costs its server a packet about every quarter timeout, near a Java client's third.
fn idle_limit(timeout: Duration) -> Duration {
    timeout * 3 / 5
}

/// The connector of every client of the session, asking for `timeout`: its credentials (digest,
/// SASL), its TLS settings, the idle limit and read-only choice. It connects straight to the
/// servers ([`Config::servers`]).
///
/// # Errors
/// zookeeper-client refusing the TLS material (checked when the session was built, so not
/// expected).
fn connector(config: &Config, timeout: Duration) -> Result<Connector> {
    let mut connector = Client::connector()
        .with_session_timeout(timeout)
        .with_connection_timeout(idle_limit(timeout))
        .with_readonly(config.read_only);
    if let Some(Digest { user, password }) = &config.digest {
        connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
    }
    #[cfg(feature = "sasl-digest-md5")]
    if let Some(Digest { user, password }) = &config.sasl {
        connector = connector.with_sasl(zookeeper_client::SaslOptions::digest_md5(
            user.clone(),
            password.clone(),
        ));
    }
    #[cfg(feature = "tls")]
    if let Some(tls) = &config.tls {
        connector = connector.with_tls(tls.options()?);
    }
    Ok(connector)
}

/// Why no host established a session (zookeeper-client says only "no hosts"): with TLS, a
/// failed handshake of the session's own ([`Error::TlsHandshake`]); else what each host does
/// with a plain TCP connection ([`Error::Unreachable`]).
async fn no_hosts(config: &Config) -> Error {
    let bound = config.connection_timeout.min(PROBE_BOUND);
    #[cfg(feature = "tls")]
    if let Some(tls) = &config.tls {
        let hosts: Vec<String> = config.hosts.split(',').map(str::to_owned).collect();
        if let Some(e) = tls.diagnose(&hosts, bound).await {
            return e;
        }
    }
    Error::Unreachable {
        reason: probe_hosts(&config.hosts, bound).await,
    }
}

/// Builds a client that resumes the session `resume` describes (its own client gave up on it),
/// and brings its server up to date before anything reads through it.
///
/// A client that reconnects by itself tells the server the last zxid it saw, and a server that
/// has not applied that far refuses it. A new client that resumes a session cannot: it tells
/// zero (zookeeper-client 0.11 keeps the last zxid only inside a client). So a follower that lags
/// behind our own latest writes (a create whose reply was lost with the old connection) may
/// accept it, and a listing or an `exists` there would not show our node: the contender would
/// take its node for gone and queue again behind it, with the node first for as long as the
/// session lives. A `sync` first makes the server apply everything committed before it answers.
/// The model shows the rule (`model/`, `check --mutate resume-syncs-first`).
///
/// # Errors
/// [`Error::SessionExpired`] when the servers say the session is gone; others when no server
/// answered, or the `sync` was not answered.
async fn connect_resumed(config: &Config, resume: &Resume) -> Result<Client> {
    let connector = connector(config, resume.timeout)?.with_session(resume.info.clone());
    let client = match connector
        .with_fail_eagerly()
        .connect(&config.servers())
        .await
    {
        Ok(client) => client,
        Err(zookeeper_client::Error::SessionExpired) => return Err(Error::SessionExpired),
        Err(zookeeper_client::Error::NoHosts) => return Err(no_hosts(config).await),
        Err(e) => return Err(e.into()),
    };
    // A read-only server answers no `sync`; nothing leads on it (a read-only connection ends
    // every term), and it is left as soon as a writable server answers.
    if client.state() != SessionState::ConnectedReadOnly {
        match tokio::time::timeout(idle_limit(resume.timeout), client.sync("/")).await {
            Ok(Ok(())) => {}
            Ok(Err(zookeeper_client::Error::SessionExpired)) => return Err(Error::SessionExpired),
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => return Err(zookeeper_client::Error::Timeout.into()),
        }
    }
    match &config.chroot {
        Some(chroot) => client
            .chroot(chroot.clone())
            .map_err(|_| Error::InvalidPath {
                path: chroot.clone(),
                reason: "the client refused this chroot",
            }),
        None => Ok(client),
    }
}

/// Builds a client for a new ZooKeeper session, creating the chroot if needed.
async fn connect_client(config: &Config) -> Result<Client> {
    let connector = connector(config, config.session_timeout)?;
    // One round of the hosts per attempt (the client would otherwise cycle through them until
    // the session timeout and report only `Timeout`): the supervisor retries with its own
    // bounded backoff, and can say why no host answered.
    let client = match connector
        .with_fail_eagerly()
        .connect(&config.servers())
        .await
    {
        Ok(client) => client,
        Err(zookeeper_client::Error::NoHosts) => return Err(no_hosts(config).await),
        Err(e) => return Err(e.into()),
    };
    let Some(chroot) = &config.chroot else {
        return Ok(client);
    };
    // Look before creating: the server checks CREATE on the parent before it checks whether the
    // node exists, so creating a chroot that an operator provisioned under a parent closed to us
    // would be refused although nothing needs creating (and a read-only server refuses every
    // create).
    if client.check_stat(chroot).await?.is_none() {
        if config.chroot_must_exist {
            return Err(Error::NoChroot {
                chroot: chroot.clone(),
            });
        }
        // The chroot and each missing ancestor get the chroot's ACL (by default the creator's
        // and read for anyone when the session has an identity): never more open than the
        // recipes' nodes inside it.
        let persistent = CreateMode::Persistent.with_acls(config.chroot_acl.as_acls());
        match client.mkdir(chroot, &persistent).await {
            Ok(()) | Err(zookeeper_client::Error::NodeExists) => {}
            // Without its chroot a session could make no node at all: no session then, and a
            // refusal is what `connect` reports.
            Err(e) if crate::error::is_refusal(&e) => {
                return Err(Error::Refused {
                    operation: "create the chroot",
                    path: chroot.clone(),
                    source: e,
                });
            }
            Err(e) => return Err(e.into()),
        }
    }
    client
        .chroot(chroot.clone())
        .map_err(|_| Error::InvalidPath {
            path: chroot.clone(),
            reason: "the client refused this chroot",
        })
}

/// Ends a retired ZooKeeper session on the servers, from a twin client that takes the session
/// over and closes it. Gives up once the servers say the session is gone, or after a few session
/// timeouts: by then a session that nobody else keeps alive has expired anyway.
async fn retire(connector: Result<Connector>, hosts: String, info: SessionInfo, timeout: Duration) {
    let Ok(connector) = connector else {
        debug!(session_id = %hex(info.id().0), "could not close this retired session");
        warn!("could not close the retired session; it ends when the servers expire it");
        return;
    };
    let id = hex(info.id().0);
    let give_up = tokio::time::Instant::now() + (timeout * 4).max(Duration::from_secs(30));
    let mut backoff = Backoff::new(MAX_RECONNECT_PAUSE);
    while tokio::time::Instant::now() < give_up {
        let twin = connector
            .clone()
            .with_session(info.clone())
            .with_session_timeout(timeout)
            .connect(&hosts);
        match tokio::time::timeout(timeout, twin).await {
            Ok(Ok(twin)) => {
                close_client(twin, timeout).await;
                debug!(session_id = %id, "closed this retired session");
                info!("closed the retired session on the servers");
                return;
            }
            Ok(Err(zookeeper_client::Error::SessionExpired)) => {
                debug!(session_id = %id, "the retired session is gone from the servers");
                return;
            }
            Ok(Err(e)) => {
                debug!(session_id = %id, error = %e, "could not reach the retired session yet")
            }
            Err(_) => debug!(session_id = %id, "could not reach the retired session yet"),
        }
        tokio::time::sleep(backoff.fail()).await;
    }
    debug!(session_id = %id, "could not close this retired session");
    warn!("could not close the retired session; it ends when the servers expire it");
}

/// Drops the last handle of `client` (which makes it send CloseSession) and waits, bounded, for
/// the client to report that it is closed.
async fn close_client(client: Client, bound: Duration) {
    let mut watcher = client.state_watcher();
    drop(client);
    let closed = async {
        while !watcher.peek_state().is_terminated() {
            watcher.changed().await;
        }
    };
    if tokio::time::timeout(bound, closed).await.is_err() {
        debug!("server did not confirm the session close in time");
    }
}

/// The longest pause between two attempts to start a ZooKeeper session. Each attempt already
/// takes up to the client's own timeout; a longer pause would only delay the recovery once the
/// servers are back (the fault trials found pauses of up to the connection timeout making the
/// first leader after a long outage come seconds late). ZooKeeper's Java client, under Curator,
/// also pauses at most a second between rounds of its hosts.
const MAX_RECONNECT_PAUSE: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{expired_said_by_servers, second_ask_after};
    use crate::session::lease::{relay_allowance, stale_leader_window};

    /// A quorum leader cut off from its followers calls a session expired that nobody touched
    /// at it for the timeout, and says so for as long as it believes it leads. Asked again
    /// within that window, it says it again, and the session would be given up while the new
    /// quorum keeps it (the model's `expired-believed-when-said-twice`, with the window longer
    /// than the wait).
    #[test]
    fn the_second_ask_comes_after_a_stale_quorum_leader_has_stepped_down() {
        for ms in [2, 200, 500, 667, 2_000, 10_000] {
            let tick = Duration::from_millis(ms);
            assert!(
                second_ask_after(tick) > stale_leader_window(tick),
                "tick {tick:?}: the second ask after {:?} may still reach the stale leader, which answers for {:?}",
                second_ask_after(tick),
                stale_leader_window(tick)
            );
            assert!(relay_allowance(tick) >= stale_leader_window(tick));
        }
    }

    /// zookeeper-client gives up on a session only after 7/5 of its latest connection's timeout
    /// without an answer, and that timeout is at least the lease's: an `Expired` sooner than
    /// the lease's timeout after the last answer was said by a server, a later one may be the
    /// client's own.
    #[test]
    fn the_servers_expired_is_told_from_the_clients_give_up_by_the_quiet_before_it() {
        let t = Duration::from_secs(4);
        assert!(expired_said_by_servers(Duration::from_millis(10), t));
        assert!(expired_said_by_servers(t - Duration::from_millis(1), t));
        assert!(!expired_said_by_servers(t, t));
        assert!(!expired_said_by_servers(t * 7 / 5, t));
    }
}
