//! A quorum leader that is replaced ([`Config::leader_change`](crate::Config::leader_change)):
//! the ensemble's third server, implicitly. The quorum is `F` and an unmodelled third server, so
//! `L` can lose its followers (`IsolateLeader`, a fault). For the *stale window* (1 tick) it
//! still believes it leads: it answers reads, pings and `sync` from its own state, and its
//! session tracker expires sessions nobody touched at it, but no write lands (writes need the
//! quorum). The quorum elects `F` within that window (`IsolateLeader`'s flag: at once, or at
//! the next tick boundary); the new leader's store is the committed state (what `L` had at the
//! isolation: nothing landed since) and its session tracker gives every live session a fresh
//! timeout from the election (`last_touch = now`), as ZooKeeper's new leader does. `L` then steps down (`StepDown`) and drops its clients, which
//! connect to `F` (`Redial`); `L` is gone from the model (the smallest world that shows the
//! rules: a rejoining follower adds nothing the cut-off `F` does not already show).
//!
//! **Time inside a tick.** The model stamps every step with the tick it happens in. Heartbeats
//! go out at the tick's start; every other step (a reconnect, a heartbeat to the stale `L`
//! between ticks) happens later in the tick, at a real time the stamp only bounds from below.
//! The relay allowance (1 tick, [`Rule::ProofWaitsRelayAllowance`]) is therefore checked on the
//! least real gap the stamps allow: a `sync` sent in tick `k` proves a heartbeat of tick `j` if
//! `k >= j + 1`, and a touch answered inside tick `j` only if `k >= j + 2`. Without
//! `leader_change` the allowance is 0 and the FIFO link stands for it (see `README.md`).

use crate::{Action, Client, ElectionModel, Phase, Rule, Server, State, TIMEOUT};

/// The stale window and the relay allowance, in ticks.
const STALE_WINDOW: u8 = 1;

/// The allowance the proof waits, in ticks (the implementation's tick and a half, rounded to
/// the stale window it must cover in the model).
const RELAY_ALLOWANCE: u8 = STALE_WINDOW;

impl ElectionModel {
    /// `L` is isolated and has not yet stepped down: it believes it leads.
    fn stale(s: &State) -> bool {
        s.isolated.is_some() && !s.l_gone
    }

    /// The client has no connection: dropped by the stepped-down `L`, or asking again a tick
    /// after a first "expired".
    fn disconnected(s: &State, c: usize) -> bool {
        let cl = &s.clients[c];
        cl.doubt.is_some() || (cl.server == Server::L && s.l_gone)
    }

    /// The stale `L`'s tracker has expired the session of client `c`.
    fn stale_expired(s: &State, c: usize) -> bool {
        s.l_expired & (1 << c) != 0
    }

    /// Time may not pass: the stale `L` steps down within the stale window.
    pub(crate) fn quorum_due(&self, s: &State) -> bool {
        s.isolated
            .is_some_and(|i| s.now >= i + STALE_WINDOW && !s.l_gone)
    }

    /// No leader change is under way: none began, or `F` leads, `L` is gone and every client
    /// is connected again (for bounded liveness, as `F` healed and nobody frozen).
    pub(crate) fn quorum_settled(&self, s: &State) -> bool {
        s.isolated.is_none()
            || (s.elected && s.l_gone && (0..s.clients.len()).all(|c| !Self::disconnected(s, c)))
    }

    /// A request of client `c` touches its session while `L` is isolated: at the stale `L`
    /// only its own tracker hears it (nothing reaches the quorum); at the elected `F`, the
    /// quorum leader, at once; at `F` before the election, nowhere that counts (the new leader
    /// gives every session its creation timeout afresh anyway).
    pub(crate) fn touch_isolated(s: &mut State, c: usize) {
        let now = s.now;
        match s.clients[c].server {
            Server::L if !s.l_gone => s.l_touch[c] = now,
            Server::F if s.elected && s.sessions[c].alive => s.sessions[c].last_touch = now,
            _ => {}
        }
    }

    /// Client `i`'s server answers its reads and pings while `L` is isolated: the stale `L`
    /// unless its tracker expired the session; `F` before the election as a cut-off follower
    /// (for any session); the elected `F` for a live session.
    pub(crate) fn answers_isolated(&self, s: &State, i: usize) -> bool {
        if Self::disconnected(s, i) {
            return false;
        }
        match s.clients[i].server {
            Server::L => !Self::stale_expired(s, i),
            Server::F => !s.elected || s.sessions[i].alive,
        }
    }

    /// A reconnect of client `c` to `to` is answered: `to` can revalidate the session (the
    /// quorum leader, a follower in touch with it, or the stale `L`, which believes it leads).
    pub(crate) fn revalidates(&self, s: &State, to: Server, _c: usize) -> bool {
        if s.isolated.is_none() {
            return to == Server::L || !s.cut;
        }
        match to {
            // Once `F` leads, a client that reached it has seen a newer zxid than the stale
            // `L` has, and ZooKeeper's `lastZxid` check refuses it there; before, no write
            // has landed since the isolation.
            Server::L => !s.l_gone && !s.elected,
            Server::F => s.elected,
        }
    }

    /// The leader change's own steps: the fault, the election, the step-down.
    pub(crate) fn quorum_actions(&self, s: &State, actions: &mut Vec<Action>) {
        match s.isolated {
            None => {
                if !s.cut && s.budget > 0 {
                    actions.push(Action::IsolateLeader(true));
                    actions.push(Action::IsolateLeader(false));
                }
            }
            Some(i) => {
                if !s.l_gone && s.now >= i + STALE_WINDOW {
                    actions.push(Action::StepDown);
                }
            }
        }
    }

    /// Client `i`'s steps that the leader change adds; `true` when the client takes no other
    /// (it has no connection).
    pub(crate) fn quorum_client_actions(
        &self,
        s: &State,
        i: usize,
        actions: &mut Vec<Action>,
    ) -> bool {
        let c = i as u8;
        let cl = &s.clients[i];
        if Self::disconnected(s, i) {
            // A first "expired" is asked about again a tick later.
            if cl.doubt.is_none_or(|t| s.now > t) && self.revalidates(s, Server::F, i) {
                actions.push(Action::Redial(c));
            }
            if cl.phase == Phase::Leading && cl.lease <= s.now && self.on(Rule::TermEndsAtDeadline)
            {
                actions.push(Action::EndTerm(c));
            }
            return true;
        }
        if cl.server == Server::L && Self::stale(s) {
            if Self::stale_expired(s, i) {
                actions.push(Action::HearStaleExpired(c));
            } else if !cl.hb_mid {
                actions.push(Action::StaleHeartbeat(c));
            }
        }
        false
    }

    /// The state after a leader change's step (`late`: within the recovery window before the
    /// horizon).
    pub(crate) fn quorum_step(&self, s: &mut State, action: Action, late: bool) {
        let now = s.now;
        match action {
            Action::IsolateLeader(at_once) => {
                s.isolated = Some(now);
                s.budget -= 1;
                s.late_fault |= late;
                s.l_view = Some(s.nodes.clone());
                s.l_touch = s.sessions.iter().map(|x| x.last_touch).collect();
                s.l_expired = s
                    .sessions
                    .iter()
                    .enumerate()
                    .filter(|(_, x)| !x.alive)
                    .fold(0, |m, (c, _)| m | (1 << c));
                // `F`'s touches not yet relayed never reach `L`.
                for sess in &mut s.sessions {
                    sess.f_pending = false;
                }
                if at_once {
                    Self::elect(s);
                }
            }
            Action::StepDown => {
                s.l_gone = true;
                s.late_fault |= late;
            }
            Action::StaleHeartbeat(c) => {
                let c = c as usize;
                s.l_touch[c] = now;
                let on = self.on(Rule::ProofWaitsRelayAllowance);
                let advances = self.on(Rule::LeaseAdvancesToEarlierTouch);
                let cl = &mut s.clients[c];
                cl.hb_mid = true;
                prove(cl, now, on, advances);
                cl.unproven_mid = Some(now);
            }
            Action::HearStaleExpired(c) => self.hear_stale_expired(s, c as usize),
            Action::Redial(c) => {
                s.late_fault |= late;
                self.quorum_connect(s, c as usize, Server::F);
            }
            _ => {}
        }
    }

    /// The quorum elects `F`: ZooKeeper's new leader gives every live session its creation
    /// timeout afresh (the model's sessions never renegotiate, so it is their only one).
    fn elect(s: &mut State) {
        s.elected = true;
        let now = s.now;
        for sess in &mut s.sessions {
            if sess.alive {
                sess.last_touch = now;
            }
            sess.f_pending = false;
        }
    }

    /// Client `c` hears "expired" from the stale `L`: it asks again a tick later (or, mutated,
    /// believes it at once and gives up the session and its nodes).
    fn hear_stale_expired(&self, s: &mut State, c: usize) {
        if self.on(Rule::ExpiredBelievedWhenSaidTwice) {
            s.clients[c].doubt = Some(s.now);
            return;
        }
        if s.sessions[c].alive {
            s.gave_up_live = true;
        }
        self.new_session(s, c);
    }

    /// Client `c` connects to `to` (a reconnect, or a redial after a drop or a first
    /// "expired"): `to` revalidates the session; an answered reconnect is a touch inside the
    /// tick. Standard policy: a term ends and the contender lists again.
    pub(crate) fn quorum_connect(&self, s: &mut State, c: usize, to: Server) {
        let now = s.now;
        {
            let cl = &mut s.clients[c];
            cl.server = to;
            cl.conn += 1;
            cl.doubt = None;
        }
        let stale_l = to == Server::L && Self::stale(s);
        if stale_l && Self::stale_expired(s, c) {
            self.hear_stale_expired(s, c);
            return;
        }
        if !stale_l && !s.sessions[c].alive {
            // The quorum leader says "expired": its word stands when asked again.
            self.new_session(s, c);
            return;
        }
        if stale_l {
            s.l_touch[c] = now;
        } else {
            // A revalidation at the quorum leader (through `F` when `F` is a follower).
            s.sessions[c].last_touch = now;
        }
        let cl = &mut s.clients[c];
        cl.unproven_mid = Some(now);
        if matches!(cl.phase, Phase::Leading | Phase::First) {
            cl.phase = Phase::List;
        }
    }

    /// One tick with [`Config::leader_change`](crate::Config::leader_change): as
    /// `ElectionModel::tick`, with the quorum leader that expires sessions being `L` or, after
    /// the election, `F` (none in between), the stale `L`'s own tracker, and the proofs waiting
    /// the relay allowance.
    pub(crate) fn quorum_tick(&self, s: &mut State) {
        let normal = s.isolated.is_none();
        if normal && !s.cut {
            Self::relay(s);
        }
        s.now += 1;
        let now = s.now;
        if s.isolated.is_some() && !s.elected {
            // The election at the tick boundary, the stale window after the isolation.
            Self::elect(s);
        }
        if normal || s.elected {
            self.expire_sessions(s);
        }
        if Self::stale(s) {
            for c in 0..s.l_touch.len() {
                if now >= s.l_touch[c] + TIMEOUT {
                    s.l_expired |= 1 << c;
                }
            }
        }
        let on = self.on(Rule::ProofWaitsRelayAllowance);
        let advances = self.on(Rule::LeaseAdvancesToEarlierTouch);
        let needs_sync = self.on(Rule::LeaseNeedsLaterSync);
        for c in 0..s.clients.len() {
            s.clients[c].hb_mid = false;
            let cl = s.clients[c];
            if cl.frozen || Self::disconnected(s, c) {
                continue;
            }
            let alive = s.sessions[c].alive;
            let cut_f = cl.server == Server::F && s.cut;
            if cut_f {
                // A ping: `F`, cut off or without a leader, answers it from its own state.
                Self::touch(s, c);
                let cl = &mut s.clients[c];
                cl.unproven = Some(now);
                if !needs_sync {
                    cl.lease = cl.lease.max(now + TIMEOUT);
                }
                continue;
            }
            let answered = if cl.server == Server::L && !normal {
                // The stale `L` answers the `sync` itself, unless its tracker expired the
                // session.
                !Self::stale_expired(s, c)
            } else {
                alive
            };
            if !answered {
                continue;
            }
            if normal && cl.server == Server::F {
                // The ping replies went out on the link before the forwarded `sync`.
                Self::relay(s);
            }
            Self::touch(s, c);
            let cl = &mut s.clients[c];
            prove(cl, now, on, advances);
            cl.unproven = Some(now);
        }
    }

    /// The line of a counterexample for a leader change's step.
    pub(crate) fn describe_quorum(
        &self,
        before: &State,
        after: &State,
        action: Action,
        phase: impl Fn(u8) -> String,
    ) -> String {
        let t = before.now;
        match action {
            Action::IsolateLeader(at_once) => format!(
                "t={t}: L loses its followers; it still believes it leads (reads, pings and \
                 sync from its own state; no write lands); the quorum elects F {}",
                if at_once {
                    format!("at once: every live session's timeout starts afresh at t={t}")
                } else {
                    "at the next tick boundary".to_string()
                }
            ),
            Action::StepDown => format!("t={t}: L steps down and drops its clients"),
            Action::StaleHeartbeat(c) => format!(
                "t={t}: client {c}'s heartbeat between ticks is answered by the stale L; its \
                 lease is now until t={}",
                after.clients[c as usize].lease
            ),
            Action::HearStaleExpired(c) => {
                let cl = &after.clients[c as usize];
                if cl.doubt.is_some() {
                    format!(
                        "t={t}: client {c} hears \"expired\" from the stale L; it will ask again \
                         a tick later"
                    )
                } else {
                    format!(
                        "t={t}: client {c} hears \"expired\" from the stale L and believes it: \
                         gives up session s{} (the quorum {}), opens s{}; it {}",
                        before.sessions[c as usize].epoch,
                        if before.sessions[c as usize].alive {
                            "keeps it"
                        } else {
                            "expired it"
                        },
                        after.sessions[c as usize].epoch,
                        phase(c)
                    )
                }
            }
            Action::Redial(c) => format!(
                "t={t}: client {c} connects to F (connection {}); it {}",
                after.clients[c as usize].conn,
                phase(c)
            ),
            _ => format!("{action:?}"),
        }
    }
}

/// A `sync` sent in tick `k` was answered: it proves the newest earlier answered touch sent at
/// least the relay allowance before it (`allowance`: the rule holds; else any earlier touch),
/// and the lease advances to that touch's send time plus the timeout (`earlier`: never to the
/// `sync`'s own).
fn prove(cl: &mut Client, k: u8, allowance: bool, earlier: bool) {
    let a = if allowance { RELAY_ALLOWANCE } else { 0 };
    // A heartbeat of tick `j` went out at `j`; a touch inside tick `j` was answered before
    // `j + 1`. The least real gap to a `sync` sent in tick `k` is `k - j`, or `k - j - 1`.
    let boundary = cl.unproven.filter(|&j| !allowance || k >= j + a);
    let inside = cl.unproven_mid.filter(|&j| !allowance || k > j + a);
    let proven = match (boundary.map(|j| (j, 0)), inside.map(|j| (j, 1))) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
    if let Some(p) = proven {
        cl.lease = cl.lease.max(p.0 + TIMEOUT);
        if cl.unproven.is_some_and(|j| (j, 0) <= p) {
            cl.unproven = None;
        }
        if cl.unproven_mid.is_some_and(|j| (j, 1) <= p) {
            cl.unproven_mid = None;
        }
    }
    if !earlier {
        cl.lease = cl.lease.max(k + TIMEOUT);
    }
}
