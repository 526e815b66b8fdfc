//! The lease of one ZooKeeper session: the instant up to which the session is provably alive on
//! the quorum leader, and the proof rules that move it.
//!
//! The argument is in `recipes/leader-latch.md`, "The deadline". In short: a heartbeat is a
//! `sync`, which only a server in touch with the quorum leader can answer; an answer proves that
//! an earlier heartbeat's touch reached the leader once a relay allowance has passed between the
//! two ([`QuorumProof`]); the leader then cannot expire the session before that touch's send
//! time plus the session timeout. Everything here is on boot time ([`BootTime`]), which counts a
//! host's suspend, and:
//!
//! - **the timeout is the lowest the session may have on the quorum leader**: the timeout it was
//!   *created* with, for its whole life (a new quorum leader re-arms every session with it,
//!   whatever a reconnect renegotiated since); the floor the operator declared
//!   (`SessionBuilder::session_timeout_floor`: the lowest `maxSessionTimeout` any server may
//!   have); and what every client of the session negotiated since the proven touch (a resumed
//!   session's new client reports its own). zookeeper-client 0.11 does not report what its own
//!   reconnects renegotiate: the floor stands for them (`docs/decisions/0001-no-relay.md`);
//! - **a wall clock that ran ahead of boot time** by more than the margin since the last look
//!   means a pause that boot time did not see (a hypervisor that restored the guest's clock): the
//!   lease is void, and only heartbeats sent after that look can prove it again;
//! - **a server that says "expired"** (or "session moved") voids the lease at once: only a
//!   touch sent after that answer, proven again, makes it valid (a resume that the servers
//!   accept, then a `sync`);
//! - **a lease that lapsed is not a lost session.** The deadline passing ends the terms won on the
//!   session; the session itself lives on until the servers say it expired, and a later proof
//!   makes the lease valid again;
//! - **the lease is proven only while something needs it** ([`Demand`]): a held term, a
//!   contender next in line or claiming, a caller of `Session::safe_until`, and for one session
//!   timeout after the last of them. Otherwise the session sends no `sync`, only a cheap touch
//!   of its own (an `exists` that a follower answers by itself) every [`touch_interval`], which
//!   costs the quorum leader nothing. Those touches count like any heartbeat's
//!   ([`QuorumProof::touched`]), so the first `sync` after a quiet spell proves the newest touch
//!   answered a relay allowance before it was sent: one round trip to the quorum leader, not a
//!   relay allowance, before a term can begin.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::clock::{BootTime, Clock};

/// How often, as a fraction of the negotiated timeout, the session proves itself alive.
pub(crate) const HEARTBEATS_PER_TIMEOUT: u32 = 8;

/// ZooKeeper's default `tickTime`.
const DEFAULT_SERVER_TICK: Duration = Duration::from_secs(2);

/// The lease margin when none is configured: 1/20 of the timeout, at least 10 ms, and never more
/// than half the timeout.
pub(crate) fn default_margin(timeout: Duration) -> Duration {
    (timeout / 20)
        .max(Duration::from_millis(10))
        .min(timeout / 2)
}

/// How often the session proves itself alive.
pub(crate) fn heartbeat_interval(timeout: Duration) -> Duration {
    (timeout / HEARTBEATS_PER_TIMEOUT).max(Duration::from_millis(5))
}

/// How often a session whose lease nothing needs touches its server with a request of its own (an
/// `exists` a follower answers by itself): a fifth of the timeout. That is about as often as the
/// client would ping an idle connection (after 0.225 of the timeout without a send), so the
/// touches take the pings' place at the same cost to the server, and a demand that begins finds
/// a touch at most a fifth of the timeout plus a relay allowance old to prove.
pub(crate) fn touch_interval(timeout: Duration) -> Duration {
    (timeout / 5).max(Duration::from_millis(5))
}

/// The servers' tick as the session assumes it: the configured one; else ZooKeeper's default,
/// but at most a third of the negotiated timeout (a server whose tick is larger than that
/// leaves a lease too short to keep, see `SessionBuilder::server_tick_time`).
pub(crate) fn assumed_tick(configured: Option<Duration>, timeout: Duration) -> Duration {
    configured.unwrap_or_else(|| DEFAULT_SERVER_TICK.min(timeout / 3))
}

/// How long a quorum leader that has lost its followers goes on answering its clients, `sync`
/// included, as if it still led: until it notices, up to a tick and a half after its followers
/// left it (and began electing the next leader).
pub(crate) fn stale_leader_window(tick: Duration) -> Duration {
    tick * 3 / 2
}

/// How long after a heartbeat was answered a later one must have been sent for the later one's
/// answer to prove that the first one's touch reached the quorum leader: a tick and a half.
///
/// It covers the longer of two delays. Through a follower, our touch reaches the leader in the
/// follower's next ping reply, on the same connection that later carries our `sync` to the
/// leader: half a tick of ping period and half a tick for a late ping, one tick in all. Through
/// a quorum leader that has lost its followers, nothing is relayed, but it answers `sync` itself
/// for its [`stale_leader_window`], a tick and a half. The model checks the rule
/// (`model/`, `check --mutate proof-waits-relay-allowance`). The argument is in
/// `recipes/leader-latch.md`, "The deadline".
pub(crate) fn relay_allowance(tick: Duration) -> Duration {
    let through_a_follower = tick;
    through_a_follower.max(stale_leader_window(tick))
}

/// The least lease a healthy session has left at any moment: the timeout minus the margin, the
/// relay allowance and two heartbeat intervals (a proof arrives a relay allowance and up to a
/// heartbeat interval after the heartbeat it proves was sent, and the next one a heartbeat
/// interval later).
pub(crate) fn headroom(timeout: Duration, tick: Duration, margin: Duration) -> Duration {
    timeout
        .saturating_sub(margin)
        .saturating_sub(relay_allowance(tick))
        .saturating_sub(heartbeat_interval(timeout) * 2)
}

/// The longest grace that work of a term (a selector's closure, a job's run, `zkr`'s command)
/// may be given to stop: the [`headroom`] minus one more heartbeat interval. A term whose lease
/// is not renewed is ended this long before its deadline, so that the work gets its grace and
/// still stops before the deadline; the extra interval keeps one late proof from ending a term
/// on a healthy session.
pub(crate) fn grace_limit(timeout: Duration, tick: Duration, margin: Duration) -> Duration {
    headroom(timeout, tick, margin).saturating_sub(heartbeat_interval(timeout))
}

/// The grace work gets when none is asked for: 5 s, but at most half the [`grace_limit`], so
/// that a term whose lease is not renewed keeps the other half to ride out a short suspension
/// (what [`ErrorPolicy::SessionExpired`](crate::ErrorPolicy::SessionExpired) is for) before it
/// ends.
pub(crate) fn default_grace(limit: Duration) -> Duration {
    Duration::from_secs(5).min(limit / 2)
}

/// The answered heartbeats of one session, kept until a later answer proves that they reached
/// the quorum leader.
///
/// A heartbeat is a `sync`, which a follower cannot answer without its leader. An answer to
/// heartbeat `k` proves that the server's link to the quorum leader carried `k` to the leader;
/// that same link carried, before it, the server's ping reply with our session's touch from
/// every heartbeat `j` it had answered at least [`relay_allowance`] before `k` was sent. So the
/// leader heard of the session no earlier than `j`'s send time. A reconnect counts as a
/// heartbeat too: the server revalidated the session with the leader before it answered.
#[derive(Debug, Default)]
pub(crate) struct QuorumProof {
    /// `(sent, answered, connection)` of heartbeats not yet proven, oldest first.
    answered: VecDeque<(BootTime, BootTime, u64)>,
}

/// How many unproven heartbeats are kept at most (a few relay allowances' worth).
const MAX_UNPROVEN: usize = 64;

impl QuorumProof {
    /// Records a touch that was answered but proves nothing by itself: the session's own
    /// `exists`, which a follower answers on its own, cut off or not. Like every request it
    /// touched the session on that server, which relays the touch to the quorum leader with its
    /// next ping reply, so a later `sync`'s answer proves it as it proves an earlier heartbeat
    /// ([`record`](Self::record)). `sent` is stamped before the request is handed to the client,
    /// `answered` after its answer came back.
    pub(crate) fn touched(&mut self, sent: BootTime, answered: BootTime, conn: u64) {
        if self.answered.len() >= MAX_UNPROVEN {
            self.answered.pop_front();
        }
        let at = self
            .answered
            .iter()
            .position(|(s, _, _)| *s > sent)
            .unwrap_or(self.answered.len());
        self.answered.insert(at, (sent, answered, conn));
    }

    /// Records that a heartbeat sent at `sent` (on connection `conn`) was answered at
    /// `answered`; returns the send time and connection of the newest earlier heartbeat that this
    /// answer proves reached the quorum leader.
    pub(crate) fn record(
        &mut self,
        sent: BootTime,
        answered: BootTime,
        conn: u64,
        relay: Duration,
    ) -> Option<(BootTime, u64)> {
        let proven = self
            .answered
            .iter()
            .filter(|(_, at, _)| *at + relay <= sent)
            .map(|(s, _, c)| (*s, *c))
            .max();
        if let Some((proven, _)) = proven {
            self.answered.retain(|(s, _, _)| *s > proven);
        }
        if self.answered.len() >= MAX_UNPROVEN {
            self.answered.pop_front();
        }
        self.answered.push_back((sent, answered, conn));
        proven
    }

    /// Forgets every heartbeat sent at or before `at`: they prove nothing any more.
    pub(crate) fn forget_until(&mut self, at: BootTime) {
        self.answered.retain(|(s, _, _)| *s > at);
    }
}

/// One client of the session and the timeout its connection negotiated.
#[derive(Debug, Clone, Copy)]
struct Conn {
    seq: u64,
    timeout: Duration,
}

#[derive(Debug)]
struct State {
    /// The send time of the newest touch proven to have reached the quorum leader.
    acked: BootTime,
    /// The timeout the session was created with: a new quorum leader re-arms the session with
    /// it, whatever a reconnect renegotiated since, so it counts for the session's whole life.
    creation: Duration,
    /// The lowest timeout any server may give the session (`session_timeout_floor`).
    floor: Option<Duration>,
    /// The connections from the one current when `acked` was sent on, with their timeouts.
    conns: VecDeque<Conn>,
    /// The connection heartbeats go out on now.
    current: u64,
    next_seq: u64,
    /// Set when a pause was seen that boot time missed: nothing proven so far counts.
    void: bool,
    /// Heartbeats sent at or before this prove nothing (the last time the lease was voided).
    void_before: BootTime,
    /// Boot and wall time at the last look, to see the wall clock run ahead of boot time.
    seen: (BootTime, i64),
    lost_at: Option<BootTime>,
    /// The run of heartbeats going on now: when it began, and by when the first of them can
    /// be proven (a relay allowance after it, see `heartbeats_began`). `None` while no
    /// heartbeats go out (nothing needs the lease).
    run: Option<(BootTime, BootTime)>,
}

impl State {
    fn timeout(&self) -> Duration {
        self.conns
            .iter()
            .map(|c| c.timeout)
            .chain(self.floor)
            .fold(self.creation, Duration::min)
    }
}

/// The lease of one ZooKeeper session (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct Lease {
    clock: Clock,
    margin: Duration,
    state: Mutex<State>,
    /// Bumped whenever the deadline moves earlier than the proofs alone would move it (a
    /// shorter timeout, a void lease, the loss): a term that waits for its deadline looks again.
    changes: watch::Sender<u64>,
}

impl Lease {
    /// The lease of a session whose request was sent at `started` and that was created with
    /// `timeout`, on servers none of which gives less than `floor`.
    pub(crate) fn new(
        clock: Clock,
        started: BootTime,
        timeout: Duration,
        floor: Option<Duration>,
        margin: Option<Duration>,
    ) -> Self {
        let seen = (clock.now(), clock.wall_ms());
        let lowest = floor.map_or(timeout, |f| f.min(timeout));
        Lease {
            margin: margin.unwrap_or_else(|| default_margin(lowest)),
            state: Mutex::new(State {
                acked: started,
                creation: timeout,
                floor,
                conns: VecDeque::from([Conn { seq: 0, timeout }]),
                current: 0,
                next_seq: 1,
                void: false,
                void_before: BootTime::default(),
                seen,
                lost_at: None,
                run: None,
            }),
            changes: watch::channel(0).0,
            clock,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn bump(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The clock the lease reads.
    pub(crate) fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The margin kept before the leader could expire the session.
    pub(crate) fn margin(&self) -> Duration {
        self.margin
    }

    /// The timeout the lease counts with: the lowest of the creation timeout, the declared floor
    /// and what any client of the session negotiated since the proven touch.
    pub(crate) fn timeout(&self) -> Duration {
        self.lock().timeout()
    }

    /// The send time of the newest proven touch.
    pub(crate) fn acked(&self) -> BootTime {
        self.lock().acked
    }

    /// The connection heartbeats go out on now, to tag a heartbeat with when it is sent.
    pub(crate) fn current_conn(&self) -> u64 {
        self.lock().current
    }

    /// A receiver that changes whenever the deadline moves: a proof, or a move earlier than the
    /// proofs alone would make (a lapse, a shorter timeout, a void lease, the loss).
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Whether the wall clock ran ahead of boot time by more than the margin since the last look.
    fn wall_ran_ahead(&self, state: &State, now: BootTime, wall: i64) -> bool {
        let (boot_then, wall_then) = state.seen;
        let boot_ms =
            i64::try_from(now.saturating_duration_since(boot_then).as_millis()).unwrap_or(i64::MAX);
        let hidden = wall.saturating_sub(wall_then).saturating_sub(boot_ms);
        hidden > i64::try_from(self.margin.as_millis()).unwrap_or(i64::MAX)
    }

    /// Looks at the clocks: a wall clock that ran ahead of boot time voids the lease. Returns
    /// whether it did. The session calls this on every heartbeat.
    pub(crate) fn check_clocks(&self) -> bool {
        let now = self.clock.now();
        let wall = self.clock.wall_ms();
        let voided = {
            let mut state = self.lock();
            let ran_ahead = self.wall_ran_ahead(&state, now, wall);
            if ran_ahead {
                state.void = true;
                state.void_before = now;
            }
            state.seen = (now, wall);
            ran_ahead
        };
        if voided {
            self.bump();
        }
        voided
    }

    /// Records that a touch sent at `sent`, on connection `conn`, provably reached the quorum
    /// leader.
    pub(crate) fn advance(&self, sent: BootTime, conn: u64) {
        if self.check_clocks() {
            return;
        }
        let mut state = self.lock();
        if sent <= state.void_before {
            return;
        }
        if state.void || sent > state.acked {
            state.acked = sent;
            state.void = false;
            state.conns.retain(|c| c.seq >= conn);
            drop(state);
            // A claim that waits for a proof looks again.
            self.bump();
        }
    }

    /// A new client of the session (a resume) negotiated `timeout`; returns its connection's
    /// number. Heartbeats go out on it from now on.
    pub(crate) fn connected(&self, timeout: Duration) -> u64 {
        let shorter = {
            let mut state = self.lock();
            let before = state.timeout();
            let seq = state.next_seq;
            state.next_seq += 1;
            state.current = seq;
            state.conns.push_back(Conn { seq, timeout });
            state.timeout() < before
        };
        if shorter {
            self.bump();
        }
        self.current_conn()
    }

    /// The instant up to which the session is provably alive: the proven touch's send time plus
    /// the timeout, minus the margin. Now or earlier when the lease is void (also when the wall
    /// clock has run ahead of boot time since the last look) or lost.
    pub(crate) fn deadline(&self) -> BootTime {
        self.deadline_at(self.clock.now())
    }

    /// [`deadline`](Self::deadline) as seen at boot time `now`.
    fn deadline_at(&self, now: BootTime) -> BootTime {
        let wall = self.clock.wall_ms();
        let state = self.lock();
        let proven = state.acked + state.timeout().saturating_sub(self.margin);
        let mut deadline = proven;
        if state.void || self.wall_ran_ahead(&state, now, wall) {
            deadline = deadline.min(now);
        }
        if let Some(at) = state.lost_at {
            deadline = deadline.min(at);
        }
        deadline
    }

    /// Whether the deadline is still ahead.
    pub(crate) fn is_valid(&self) -> bool {
        let now = self.clock.now();
        now < self.deadline_at(now)
    }

    /// The lease lapsed (its deadline passed without a newer proof): whoever waits for the
    /// deadline looks again.
    pub(crate) fn note_lapse(&self) {
        self.bump();
    }

    /// Completes once the deadline is within `ahead` of now, or as soon as the lease changed in
    /// a way that may have moved the deadline earlier (a lapse, a shorter timeout, a void lease,
    /// the loss, a test's clock jump): the caller looks again. Cancel safe.
    pub(crate) async fn until_within(&self, ahead: Duration) {
        let mut changes = self.subscribe();
        let mut jumps = self.clock.jumps();
        loop {
            let target = self.deadline() - ahead;
            let left = target.saturating_duration_since(self.clock.now());
            if left.is_zero() {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(left) => {}
                _ = changes.changed() => return,
                () = Clock::jumped(&mut jumps) => return,
            }
        }
    }

    /// Heartbeats go out from `at` on (something needs the lease again), and the first of
    /// them can be proven by `provable_by` (a relay allowance after it, see [`QuorumProof`]).
    /// Nothing changes while a run is already going on.
    pub(crate) fn heartbeats_began(&self, at: BootTime, provable_by: BootTime) {
        let mut state = self.lock();
        if state.run.is_none() {
            state.run = Some((at, provable_by));
            drop(state);
            self.bump();
        }
    }

    /// No heartbeats go out any more: nothing needs the lease.
    pub(crate) fn heartbeats_stopped(&self) {
        self.lock().run = None;
    }

    /// Whether a term may begin now on this lease with `ahead` of room: the lease is valid
    /// beyond `ahead`, and it will be renewed before that room is used up. A lease proven by a
    /// heartbeat of the current run is renewed every heartbeat interval; one proven only by
    /// what came before the run (a touch, a heartbeat of an earlier run) is renewed only once
    /// the run's first heartbeat can be proven, a relay allowance later, and until then it
    /// must last. Otherwise a term would begin and end by its deadline before the first
    /// renewal: safe, but a term for nothing.
    pub(crate) fn term_may_begin(&self, ahead: Duration) -> bool {
        let now = self.clock.now();
        let deadline = self.deadline_at(now);
        let state = self.lock();
        deadline > now + ahead
            && state
                .run
                .is_some_and(|(began, by)| state.acked >= began || deadline > by + ahead)
    }

    /// Completes once [`term_may_begin`](Self::term_may_begin) holds. Cancel safe.
    pub(crate) async fn until_term_may_begin(&self, ahead: Duration) {
        let mut changes = self.subscribe();
        let mut jumps = self.clock.jumps();
        loop {
            if self.term_may_begin(ahead) {
                return;
            }
            tokio::select! {
                _ = changes.changed() => {}
                () = Clock::jumped(&mut jumps) => {}
            }
        }
    }

    /// A server answered "expired" (or "session moved") for the session: the lease is void at
    /// once, and only a touch sent after now, proven again, makes it valid (the answer may be a
    /// stale quorum leader's, and the session may be resumed). Whoever waits on the deadline
    /// looks again.
    pub(crate) fn void_now(&self) {
        let now = self.clock.now();
        {
            let mut state = self.lock();
            state.void = true;
            state.void_before = state.void_before.max(now);
        }
        self.bump();
    }

    /// The session ended: the deadline is now at the latest.
    pub(crate) fn mark_lost(&self) {
        let now = self.clock.now();
        self.lock().lost_at.get_or_insert(now);
        self.bump();
    }

    /// Whether the session this lease belongs to has ended.
    pub(crate) fn is_lost(&self) -> bool {
        self.lock().lost_at.is_some()
    }
}

/// Who needs a session's lease proven now. The session heartbeats through the quorum leader
/// only while a [`LeaseDemand`] is held or a caller asked for the deadline
/// ([`pulse`](Self::pulse)), and for a linger of one session timeout after the last of them: a
/// mutex taken again and again, a leader that rejoins the line, keep their lease proven between
/// terms. It belongs to the `Session`, not to one ZooKeeper session: a holder keeps its demand
/// across a new session.
#[derive(Debug, Default)]
pub(crate) struct Demand {
    held: AtomicUsize,
    /// When the last demand ended, or a caller last asked for the deadline.
    last: Mutex<Option<tokio::time::Instant>>,
    /// Woken when a demand begins or a caller asks for the deadline.
    wake: Notify,
}

impl Demand {
    /// A demand, held until the guard drops.
    pub(crate) fn hold(self: &Arc<Self>) -> LeaseDemand {
        if self.held.fetch_add(1, Ordering::AcqRel) == 0 {
            self.wake.notify_one();
        }
        LeaseDemand(Arc::clone(self))
    }

    fn touch_last(&self) {
        *self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tokio::time::Instant::now());
    }

    /// Someone read the deadline: keep it proven for a linger from now.
    pub(crate) fn pulse(&self) {
        self.touch_last();
        if self.held.load(Ordering::Acquire) == 0 {
            self.wake.notify_one();
        }
    }

    /// Whether the lease is needed now: a demand is held, or the last one ended (or the last
    /// pulse came) less than `linger` ago.
    pub(crate) fn wanted(&self, linger: Duration) -> bool {
        self.held.load(Ordering::Acquire) > 0
            || self
                .last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_some_and(|at| at.elapsed() < linger)
    }

    /// Completes when a demand begins or a caller asks for the deadline (one that came while
    /// nobody waited is kept for the next wait). Cancel safe.
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }
}

/// A held need for the session's lease ([`Demand`]); the need ends, after the linger, when it
/// drops.
#[derive(Debug)]
pub(crate) struct LeaseDemand(Arc<Demand>);

impl Drop for LeaseDemand {
    fn drop(&mut self) {
        self.0.touch_last();
        self.0.held.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::TestClock;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_deadline_is_the_proven_touch_plus_the_timeout_minus_the_margin() {
        let clock = TestClock::new();
        let t0 = clock.clock().now();
        let lease = Lease::new(clock.clock(), t0, ms(10_000), None, Some(ms(100)));
        assert_eq!(lease.deadline(), t0 + ms(9_900));
        lease.advance(t0 + ms(3_000), 0);
        lease.advance(t0 + ms(1_000), 0);
        assert_eq!(
            lease.deadline(),
            t0 + ms(12_900),
            "the lease only moves forward"
        );
        lease.mark_lost();
        assert!(!lease.is_valid());
        assert!(lease.is_lost());
    }

    #[test]
    fn a_term_begins_only_on_a_lease_that_lasts_until_its_heartbeats_can_renew_it() {
        // A lease proven long ago (a touch before the run of heartbeats began) may be valid now
        // and still run out before the run's first heartbeat can be proven: a term begun on it
        // would end by its deadline at once.
        let clock = TestClock::new();
        let now = clock.clock().now();
        let lease = Lease::new(
            clock.clock(),
            now - ms(6_000),
            ms(10_000),
            None,
            Some(ms(100)),
        );
        assert_eq!(lease.deadline(), now + ms(3_900));
        assert!(!lease.term_may_begin(ms(0)), "no heartbeats go out");
        lease.heartbeats_began(now, now + ms(4_000));
        assert!(
            !lease.term_may_begin(ms(0)),
            "the lease runs out before the first heartbeat can be proven"
        );
        lease.advance(now - ms(5_500), 0);
        assert!(lease.term_may_begin(ms(0)), "it lasts until then");
        assert!(
            !lease.term_may_begin(ms(1_000)),
            "but not with a second of grace to spare"
        );
        lease.advance(now, 0);
        assert!(
            lease.term_may_begin(ms(1_000)),
            "proven by the run's own heartbeat: renewed every interval from now on"
        );
        lease.heartbeats_began(now + ms(1), now + ms(9_000));
        assert!(
            lease.term_may_begin(ms(1_000)),
            "a run already going on is not restarted"
        );
        lease.heartbeats_stopped();
        assert!(!lease.term_may_begin(ms(1_000)), "no heartbeats go out");
    }

    #[test]
    fn a_suspended_host_sees_its_lease_over_at_once() {
        // Boot time moves ahead while the monotonic clock does not: a host that resumes from a
        // suspend. The lease is read off boot time, so it is over without any timer firing.
        let clock = TestClock::new();
        let lease = Lease::new(clock.clock(), clock.clock().now(), ms(60_000), None, None);
        assert!(lease.is_valid());
        clock.suspend(Duration::from_secs(600));
        assert!(
            !lease.is_valid(),
            "a lease whose time passed during a suspend is over"
        );
    }

    #[test]
    fn a_wall_clock_that_runs_ahead_of_boot_time_voids_the_lease_until_a_later_proof() {
        let clock = TestClock::new();
        let now = clock.clock().now();
        let lease = Lease::new(clock.clock(), now, ms(10_000), None, Some(ms(500)));
        assert!(lease.is_valid());
        // A hypervisor paused the guest for a minute and restored its clocks; the guest sees it
        // only when its wall clock is set right.
        clock.step_wall(60_000);
        assert!(!lease.is_valid(), "the hidden pause is seen at once");
        let changes = lease.subscribe();
        assert!(lease.check_clocks());
        assert!(changes.has_changed().unwrap_or(false));
        // A heartbeat sent before the pause was seen proves nothing; one sent after does.
        lease.advance(now, 0);
        assert!(!lease.is_valid());
        let later = clock.clock().now() + ms(1);
        lease.advance(later, 0);
        assert_eq!(lease.deadline(), later + ms(9_500));
        // A wall clock stepped back hides no time.
        clock.step_wall(-120_000);
        assert!(lease.is_valid());
    }

    #[test]
    fn a_timeout_renegotiated_down_on_a_reconnect_shortens_the_lease_at_once() {
        let clock = TestClock::new();
        let t0 = clock.clock().now();
        let lease = Lease::new(clock.clock(), t0, ms(60_000), None, Some(ms(100)));
        let changes = lease.subscribe();
        assert_eq!(lease.deadline(), t0 + ms(59_900));
        // The session moves to a server whose maxSessionTimeout is 4 s.
        let conn = lease.connected(ms(4_000));
        assert!(changes.has_changed().unwrap_or(false));
        assert_eq!(lease.timeout(), ms(4_000));
        assert_eq!(lease.deadline(), t0 + ms(3_900));
        // Touches proven on the new connection count with its timeout; back on a server that
        // gives 60 s, only touches of that connection count with 60 s.
        lease.advance(t0 + ms(1_000), conn);
        assert_eq!(lease.deadline(), t0 + ms(4_900));
        let back = lease.connected(ms(60_000));
        lease.advance(t0 + ms(2_000), conn);
        assert_eq!(lease.deadline(), t0 + ms(5_900), "still min(4 s, 60 s)");
        lease.advance(t0 + ms(3_000), back);
        assert_eq!(lease.deadline(), t0 + ms(62_900));
    }

    #[test]
    fn the_creation_timeout_bounds_the_lease_for_the_sessions_whole_life() {
        // Created on a server that gives 2 s, the session moves to one that gives 6 s, and a
        // touch on the new connection is proven. A new quorum leader re-arms the session with
        // the 2 s it was created with: the lease must still count with 2 s.
        let clock = TestClock::new();
        let t0 = clock.clock().now();
        let lease = Lease::new(clock.clock(), t0, ms(2_000), None, Some(ms(100)));
        let moved = lease.connected(ms(6_000));
        lease.advance(t0 + ms(500), moved);
        assert_eq!(
            lease.timeout(),
            ms(2_000),
            "the creation timeout was dropped"
        );
        assert_eq!(lease.deadline(), t0 + ms(2_400));
    }

    #[test]
    fn the_declared_floor_bounds_the_lease_from_the_start() {
        // The session asked for 20 s and got it; some server may give only 4 s, and a reconnect
        // there would not be reported: the lease counts with 4 s from the start, and the
        // default margin with it.
        let clock = TestClock::new();
        let t0 = clock.clock().now();
        let lease = Lease::new(clock.clock(), t0, ms(20_000), Some(ms(4_000)), None);
        assert_eq!(lease.timeout(), ms(4_000));
        assert_eq!(lease.margin(), default_margin(ms(4_000)));
        assert_eq!(lease.deadline(), t0 + ms(3_800));
        // A resumed client that negotiated less still lowers it; more never raises it.
        let conn = lease.connected(ms(3_000));
        assert_eq!(lease.timeout(), ms(3_000));
        let back = lease.connected(ms(20_000));
        lease.advance(t0 + ms(100), back);
        assert_eq!(lease.timeout(), ms(4_000), "back to the floor, not 20 s");
        assert!(conn < back);
        // A floor above the creation timeout changes nothing.
        let lease = Lease::new(clock.clock(), t0, ms(2_000), Some(ms(4_000)), None);
        assert_eq!(lease.timeout(), ms(2_000));
    }

    #[test]
    fn an_expired_answer_voids_the_lease_at_once_until_a_later_touch_is_proven() {
        let clock = TestClock::new();
        clock.freeze();
        let said = clock.clock().now();
        let lease = Lease::new(
            clock.clock(),
            said - ms(1_000),
            ms(10_000),
            None,
            Some(ms(100)),
        );
        let changes = lease.subscribe();
        assert!(lease.is_valid());
        lease.void_now();
        assert!(
            changes.has_changed().unwrap_or(false),
            "a waiter looks again"
        );
        assert!(!lease.is_valid(), "a term outlived the first \"expired\"");
        assert!(lease.deadline() <= said);
        // A touch sent before the answer proves nothing any more; one sent after it does (the
        // resume that the servers accepted, proven by a later `sync`).
        lease.advance(said - ms(10), 0);
        assert!(!lease.is_valid());
        lease.advance(said, 0);
        assert!(
            !lease.is_valid(),
            "a touch sent at the answer's instant is not after it"
        );
        let resumed = said + ms(1);
        lease.advance(resumed, 0);
        assert_eq!(lease.deadline(), resumed + ms(9_900));
    }

    #[test]
    fn an_answer_proves_only_heartbeats_answered_a_relay_allowance_before_it_was_sent() {
        let t = |n: u64| BootTime::from_nanos(1_000_000_000 + n * 1_000_000);
        let relay = ms(750);
        let mut proof = QuorumProof::default();
        // Heartbeats every 250 ms, each answered 5 ms later.
        assert_eq!(proof.record(t(0), t(5), 0, relay), None);
        assert_eq!(proof.record(t(250), t(255), 0, relay), None);
        assert_eq!(proof.record(t(500), t(505), 0, relay), None);
        // Sent 745 ms after the first answer: not yet enough.
        assert_eq!(proof.record(t(750), t(755), 0, relay), None);
        // Sent 755 ms after it: proves the first, and only the first.
        assert_eq!(proof.record(t(760), t(765), 1, relay), Some((t(0), 0)));
        // Later answers prove the newest heartbeat they can, never an older one again.
        assert_eq!(proof.record(t(1010), t(1015), 1, relay), Some((t(250), 0)));
        assert_eq!(proof.record(t(1600), t(1605), 1, relay), Some((t(760), 1)));
    }

    #[test]
    fn answers_out_of_order_prove_nothing_they_cannot() {
        let t = |n: u64| BootTime::from_nanos(1_000_000_000 + n * 1_000_000);
        let relay = ms(300);
        let mut proof = QuorumProof::default();
        // A heartbeat sent before another's answer proves nothing about it, whatever the order
        // in which their answers arrive.
        assert_eq!(proof.record(t(100), t(900), 0, relay), None);
        assert_eq!(proof.record(t(0), t(950), 0, relay), None);
        assert_eq!(proof.record(t(1190), t(1195), 0, relay), None);
        assert_eq!(proof.record(t(1260), t(1270), 0, relay), Some((t(100), 0)));
        // Forgotten heartbeats prove nothing.
        proof.forget_until(t(2000));
        assert_eq!(proof.record(t(5000), t(5001), 0, relay), None);
    }

    #[test]
    fn a_touch_proves_nothing_by_itself_and_a_later_sync_proves_it_like_a_heartbeat() {
        let t = |n: u64| BootTime::from_nanos(1_000_000_000 + n * 1_000_000);
        let relay = ms(750);
        let mut proof = QuorumProof::default();
        // Touches (`exists`) every 300 ms while nothing needs the lease: a cut-off follower
        // answers them too.
        proof.touched(t(0), t(2), 0);
        proof.touched(t(300), t(302), 0);
        proof.touched(t(600), t(602), 0);
        // The first sync after the quiet spell proves the newest touch answered a relay
        // allowance before the sync was sent, and no later one.
        assert_eq!(proof.record(t(1000), t(1004), 0, relay), Some((t(0), 0)));
        assert_eq!(proof.record(t(1060), t(1064), 0, relay), Some((t(300), 0)));
        // A touch answered late (after a sync's answer) still sorts by its send time.
        proof.touched(t(1100), t(1102), 0);
        proof.touched(t(900), t(905), 0);
        assert_eq!(proof.record(t(1700), t(1704), 0, relay), Some((t(900), 0)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_lease_is_wanted_while_a_demand_is_held_and_for_a_linger_after() {
        let demand = Arc::new(Demand::default());
        let linger = Duration::from_secs(10);
        assert!(!demand.wanted(linger), "nothing asked for the lease yet");
        let held = demand.hold();
        // The beginning of a demand wakes the session's task, even one not waiting yet.
        tokio::time::timeout(ms(10), demand.woken())
            .await
            .expect("a demand that begins wakes the session");
        assert!(demand.wanted(linger));
        drop(held);
        assert!(demand.wanted(linger), "a linger after the last demand");
        tokio::time::advance(linger + ms(1)).await;
        assert!(!demand.wanted(linger));
        demand.pulse();
        tokio::time::timeout(ms(10), demand.woken())
            .await
            .expect("a read of the deadline wakes the session");
        assert!(demand.wanted(linger));
    }

    #[test]
    fn unproven_heartbeats_are_bounded() {
        let mut proof = QuorumProof::default();
        let relay = Duration::from_secs(3600);
        for i in 0..1000 {
            let at = BootTime::from_nanos(i * 1_000_000);
            assert_eq!(proof.record(at, at, 0, relay), None);
        }
        assert!(proof.answered.len() <= MAX_UNPROVEN);
    }

    #[test]
    fn default_margin_is_a_twentieth_with_a_floor() {
        assert_eq!(default_margin(Duration::from_secs(2)), ms(100));
        assert_eq!(default_margin(ms(100)), ms(10));
        assert_eq!(default_margin(ms(10)), ms(5));
    }

    #[test]
    fn the_assumed_tick_is_the_configured_one_else_zookeepers_default_within_a_third() {
        assert_eq!(assumed_tick(Some(ms(500)), Duration::from_secs(2)), ms(500));
        assert_eq!(
            assumed_tick(None, Duration::from_secs(60)),
            Duration::from_secs(2)
        );
        assert_eq!(
            assumed_tick(None, Duration::from_secs(3)),
            Duration::from_secs(1)
        );
        assert_eq!(relay_allowance(ms(500)), ms(750));
    }

    #[test]
    fn heartbeats_are_an_eighth_of_the_timeout() {
        assert_eq!(
            heartbeat_interval(Duration::from_secs(8)),
            Duration::from_secs(1)
        );
        assert_eq!(heartbeat_interval(ms(16)), ms(5));
    }

    #[test]
    fn the_grace_limit_leaves_the_least_healthy_lease_minus_one_heartbeat() {
        // T = 10 s, tick 2 s: margin 0.5 s, relay 3 s, heartbeats 1.25 s.
        let t = Duration::from_secs(10);
        assert_eq!(headroom(t, ms(2_000), default_margin(t)), ms(4_000));
        assert_eq!(grace_limit(t, ms(2_000), default_margin(t)), ms(2_750));
        // T = 60 s (Curator's default), tick 2 s.
        let t = Duration::from_secs(60);
        assert_eq!(grace_limit(t, ms(2_000), default_margin(t)), ms(31_500));
        // A timeout too short for any grace.
        assert_eq!(
            grace_limit(ms(1_000), ms(500), default_margin(ms(1_000))),
            Duration::ZERO
        );
    }
}
