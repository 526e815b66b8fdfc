//! LeaderPool (`recipes/leader-pool.md`) on top of the election: the membership latch, whose
//! leader is the coordinator, and one latch per job, each of them the model's one election (the
//! contender core of `lib.rs`), run side by side on each replica's one session.
//!
//! The elections other than the one in [`State::nodes`] are *parked* ([`Parked`]): their
//! nodes, `F`'s copy of them, their highest token and every client's contender in them. A step
//! of a contender in a parked election swaps that election in, runs the contender core
//! unchanged, and swaps it back ([`ElectionModel::swap`]); a step of a whole replica (a tick's
//! expiry, a cut, a heal, a reconnect, a new session) is applied to every election. So there is
//! one election algorithm, as in the library, where the pool is a policy over `LeaderLatch`es.
//!
//! The pool's own state at the quorum leader is `<root>/assignment` (each job's owner and the
//! node's version, 0 while it does not exist). The coordinator (the membership latch's leader)
//! reads the members (the owners of the membership nodes, in join order) and the assignment,
//! computes the balancing rule, and writes the assignment in one fenced multi: its own
//! membership node's check, then the version. Every replica reads the assignment when it changes
//! (its data watch) and follows the assignment it last read: it joins the latch of a job assigned
//! to it, and releases (a graceful close: the term ends, the node is deleted) a job assigned away.

use crate::{Action, ElectionModel, Node, Phase, Rule, State};

/// The pool's jobs (each one election besides the membership's).
pub const POOL_JOBS: usize = 2;

/// A parked election: what [`State`] holds for the resident one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Parked {
    /// Its children at `L`.
    pub nodes: Vec<Node>,
    /// `F`'s copy of them while it is cut off.
    pub f_view: Option<Vec<Node>>,
    /// The highest token any of its terms began with.
    pub max_token: Option<u8>,
    /// Each client's contender in it: phase, node, the node's session.
    pub cts: Vec<(Phase, Option<u8>, u8)>,
}

/// What the coordinator read in one round trip: the members, the assignment and its version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoordRead {
    /// The members in join order (`u8::MAX` pads).
    pub members: [u8; 4],
    /// The assignment's version.
    pub ver: u8,
    /// The assignment as read.
    pub assign: [Option<u8>; POOL_JOBS],
}

/// One replica's pool state: the assignment it follows, and its coordinator's loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PoolReplica {
    /// The assignment it last read.
    pub got: [Option<u8>; POOL_JOBS],
    /// Its version.
    pub gotv: u8,
    /// The membership term (the model's number for it) its coordinator loop runs in; 0: none.
    pub cterm: u8,
    /// What the coordinator last read (or wrote) in this term.
    pub cread: Option<CoordRead>,
    /// Frozen right after the fence's own check of its write passed.
    pub armed: bool,
}

/// The balancing rule (`recipes/leader-pool.md`, "The balancing rule") for `members` in join
/// order and the previous assignment.
pub fn balance(members: &[u8], prev: [Option<u8>; POOL_JOBS]) -> [Option<u8>; POOL_JOBS] {
    let n = members.len();
    if n == 0 {
        return [None; POOL_JOBS];
    }
    // 1. Every job keeps its previous owner if that owner is still a member.
    let mut a = prev.map(|o| o.filter(|m| members.contains(m)));
    let count = |a: &[Option<u8>; POOL_JOBS], m: u8| a.iter().filter(|o| **o == Some(m)).count();
    // 2. Quotas: the `j mod n` members keeping the most jobs (ties: the earliest) get one more.
    let (base, extra) = (POOL_JOBS / n, POOL_JOBS % n);
    let mut order: Vec<(usize, u8)> = members.iter().copied().enumerate().collect();
    order.sort_by_key(|&(i, m)| (std::cmp::Reverse(count(&a, m)), i));
    let quota = |m: u8| base + usize::from(order.iter().position(|&(_, o)| o == m) < Some(extra));
    // 3. A member over its quota gives up its jobs last in name order.
    for &m in members {
        while count(&a, m) > quota(m) {
            if let Some(j) = (0..POOL_JOBS).rev().find(|&j| a[j] == Some(m)) {
                a[j] = None;
            }
        }
    }
    // 4. Jobs without an owner, in name order, to members under their quota, in join order.
    for j in 0..POOL_JOBS {
        if a[j].is_none() {
            a[j] = members.iter().copied().find(|&m| count(&a, m) < quota(m));
        }
    }
    a
}

/// Contender steps: those a parked election's contender takes (the id is `client + 4 * e`).
pub(crate) fn contender(a: Action) -> Option<u8> {
    match a {
        Action::Join(k)
        | Action::JoinReplyLost(k)
        | Action::Recover(k)
        | Action::List(k)
        | Action::Claim(k)
        | Action::PredDeleted(k)
        | Action::OwnNodeGone(k)
        | Action::EndTerm(k)
        | Action::Release(k) => Some(k),
        _ => None,
    }
}

/// `a` with its contender id set to `k`.
pub(crate) fn retag(a: Action, k: u8) -> Action {
    match a {
        Action::Join(_) => Action::Join(k),
        Action::JoinReplyLost(_) => Action::JoinReplyLost(k),
        Action::Recover(_) => Action::Recover(k),
        Action::List(_) => Action::List(k),
        Action::Claim(_) => Action::Claim(k),
        Action::PredDeleted(_) => Action::PredDeleted(k),
        Action::OwnNodeGone(_) => Action::OwnNodeGone(k),
        Action::EndTerm(_) => Action::EndTerm(k),
        Action::Release(_) => Action::Release(k),
        other => other,
    }
}

impl ElectionModel {
    pub(crate) fn pool_on(&self) -> bool {
        self.config.pool_jobs > 0
    }

    /// The client and the parked election (1..) of a contender step in a parked election.
    pub(crate) fn parked_step(&self, a: Action) -> Option<(u8, usize)> {
        let k = contender(a)?;
        (self.pool_on() && k >= 4).then_some((k % 4, (k / 4) as usize))
    }

    /// Swaps election `e` (1..) in for the resident one, or back (the swap is its own inverse).
    pub(crate) fn swap(s: &mut State, e: usize) {
        let p = &mut s.parked[e - 1];
        std::mem::swap(&mut s.nodes, &mut p.nodes);
        std::mem::swap(&mut s.f_view, &mut p.f_view);
        std::mem::swap(&mut s.max_token, &mut p.max_token);
        for (cl, ct) in s.clients.iter_mut().zip(p.cts.iter_mut()) {
            let mine = (cl.phase, cl.node, cl.node_epoch);
            (cl.phase, cl.node, cl.node_epoch) = *ct;
            *ct = mine;
        }
        s.resident = if s.resident == 0 { e as u8 } else { 0 };
    }

    /// `s` with election `e` swapped in.
    pub(crate) fn swapped(s: &State, e: usize) -> State {
        let mut t = s.clone();
        Self::swap(&mut t, e);
        t
    }

    /// The members at `L`: the owners of the membership nodes, in join order.
    pub(crate) fn members(s: &State) -> Vec<u8> {
        let nodes = if s.resident == 0 {
            &s.nodes
        } else {
            &s.parked[s.resident as usize - 1].nodes
        };
        let mut m: Vec<u8> = Vec::new();
        for n in nodes {
            if !m.contains(&n.owner) {
                m.push(n.owner);
            }
        }
        m
    }

    fn pack(members: &[u8]) -> [u8; 4] {
        let mut p = [u8::MAX; 4];
        p[..members.len()].copy_from_slice(members);
        p
    }

    fn unpack(p: &[u8; 4]) -> Vec<u8> {
        p.iter().copied().filter(|&m| m != u8::MAX).collect()
    }

    /// Client `c` holds a term in election `e` (0: the membership) that is valid by the model's
    /// real time.
    pub fn valid_in(&self, s: &State, c: usize, e: usize) -> bool {
        if e == 0 {
            return self.valid(s, c);
        }
        s.parked[e - 1].cts[c].0 == Phase::Leading
            && (s.clients[c].lease > s.now || !self.on(Rule::TermEndsAtDeadline))
    }

    /// The job `j` is assigned to client `c` by the assignment it last read.
    fn assigned(s: &State, c: usize, j: usize) -> bool {
        s.replicas[c].got[j] == Some(c as u8)
    }

    /// The pool's steps of client `i` (not frozen, its session not heard expired): its
    /// contenders in the jobs' elections, following the assignment it last read; reading the
    /// assignment; and, as the coordinator, reading the members and writing the assignment.
    pub(crate) fn pool_actions(&self, s: &State, i: usize, actions: &mut Vec<Action>) {
        let c = i as u8;
        let cl = &s.clients[i];
        let alive = s.sessions[i].alive;
        let reach = Self::reaches_leader(s, cl.server);
        for e in 1..=self.config.pool_jobs as usize {
            let t = Self::swapped(s, e);
            let mut ours = Vec::new();
            self.contender_actions(&t, i, &mut ours);
            let assigned = Self::assigned(s, i, e - 1);
            for a in ours {
                // It stands only for the jobs assigned to it.
                if matches!(a, Action::Join(_) | Action::JoinReplyLost(_)) && !assigned {
                    continue;
                }
                actions.push(retag(a, c + 4 * e as u8));
            }
            let ct = t.clients[i];
            let holds = ct.node.is_some() && !matches!(ct.phase, Phase::Idle | Phase::Lost);
            if !assigned && holds && alive && reach && self.on(Rule::ReleaseJobsAssignedAway) {
                actions.push(Action::Release(c + 4 * e as u8));
            }
        }
        if !alive || !reach {
            return;
        }
        let r = &s.replicas[i];
        if r.gotv != s.aver {
            actions.push(Action::PoolFollow(c));
        }
        // The coordinator: the membership latch's leader, its fence's own check passed.
        if cl.phase != Phase::Leading || r.cterm == 0 || !(cl.lease > s.now || r.armed) {
            return;
        }
        let members = Self::members(s);
        match r.cread {
            Some(read)
                if read.ver == s.aver
                    && (Self::unpack(&read.members) == members
                        || !self.on(Rule::CoordinatorFollowsMembership)) =>
            {
                if balance(&Self::unpack(&read.members), read.assign) != read.assign {
                    actions.push(Action::PoolWrite(c));
                }
            }
            _ => actions.push(Action::PoolRead(c)),
        }
    }

    /// The pool's steps that time waits for.
    pub(crate) fn pool_urgent(&self, a: &Action) -> bool {
        self.pool_on()
            && match *a {
                Action::PoolRead(_) | Action::PoolWrite(_) | Action::PoolFollow(_) => true,
                Action::Release(k) => k >= 4,
                _ => false,
            }
    }

    /// The pool's step `action`.
    pub(crate) fn pool_step(&self, s: &mut State, action: Action) {
        match action {
            Action::PoolFollow(c) => {
                let r = &mut s.replicas[c as usize];
                r.got = s.assign;
                r.gotv = s.aver;
            }
            Action::PoolRead(c) => {
                let members = Self::pack(&Self::members(s));
                s.replicas[c as usize].cread = Some(CoordRead {
                    members,
                    ver: s.aver,
                    assign: s.assign,
                });
            }
            Action::PoolWrite(c) => {
                let c = c as usize;
                let r = s.replicas[c];
                let Some(read) = r.cread else {
                    return;
                };
                let own = s.clients[c].node;
                let node_ok = !self.on(Rule::AssignmentWriteChecksMembershipNode)
                    || s.nodes.iter().any(|n| Some(n.seq) == own);
                let ver_ok = !self.on(Rule::AssignmentWriteChecksVersion) || read.ver == s.aver;
                let r = &mut s.replicas[c];
                r.armed = false;
                if !node_ok || !ver_ok {
                    // Refused: nothing written; the coordinator reads again.
                    r.cread = None;
                    return;
                }
                if r.cterm != s.cterms {
                    s.stale_assign = true;
                }
                let next = balance(&Self::unpack(&read.members), read.assign);
                s.assign = next;
                s.aver += 1;
                s.replicas[c].cread = Some(CoordRead {
                    ver: s.aver,
                    assign: next,
                    ..read
                });
            }
            _ => {}
        }
    }

    /// A membership term begins for client `c`: its coordinator loop starts afresh.
    pub(crate) fn pool_begin(&self, s: &mut State, c: usize) {
        s.cterms += 1;
        s.replicas[c] = crate::pool::PoolReplica {
            cterm: s.cterms,
            cread: None,
            armed: false,
            ..s.replicas[c]
        };
    }

    /// After a replica-level step (`last` before it): the parked elections follow it (a cut,
    /// a heal, a reconnect, an expiry, a new session); a coordinator whose membership term
    /// ended loses its loop.
    pub(crate) fn pool_after(&self, last: &State, s: &mut State, action: Action) {
        match action {
            Action::Cut => {
                for p in &mut s.parked {
                    p.f_view = Some(p.nodes.clone());
                }
            }
            Action::Heal => {
                for p in &mut s.parked {
                    p.f_view = None;
                }
            }
            Action::Tick => {
                for (c, (was, is)) in last.sessions.iter().zip(&s.sessions).enumerate() {
                    if was.alive && !is.alive && self.on(Rule::ExpireDeletesEphemerals) {
                        for p in &mut s.parked {
                            p.nodes
                                .retain(|n| !(n.owner as usize == c && n.epoch == was.epoch));
                        }
                    }
                }
            }
            Action::Reconnect(c) | Action::SessionExpired(c) => {
                let c = c as usize;
                let renewed = s.sessions[c].epoch != last.sessions[c].epoch;
                for p in &mut s.parked {
                    let ct = &mut p.cts[c];
                    if renewed {
                        *ct = (Phase::Idle, None, 0);
                    } else if matches!(ct.0, Phase::Leading | Phase::First) {
                        // Standard policy: a suspension ends the term; the latch lists again.
                        ct.0 = Phase::List;
                    }
                }
            }
            Action::Freeze(c) => {
                let c = c as usize;
                if self.valid(s, c) && s.replicas[c].cterm != 0 {
                    // Frozen right after the fence's own check of its next write passed.
                    s.replicas[c].armed = s.replicas[c].cread.is_some();
                }
            }
            _ => {}
        }
        for c in 0..s.replicas.len() {
            if s.replicas[c].cterm != 0 && s.clients[c].phase != Phase::Leading {
                let r = &mut s.replicas[c];
                r.cterm = 0;
                r.cread = None;
                r.armed = false;
            }
        }
    }

    /// Bounded liveness of the pool, in a state where it is due: every job is led by the member
    /// the assignment names, and no member leads more than its share.
    pub(crate) fn pool_settled(&self, s: &State) -> (bool, bool) {
        let members = Self::members(s);
        let jobs = self.config.pool_jobs as usize;
        let led = (0..jobs).all(|j| {
            s.assign[j].is_some_and(|m| members.contains(&m) && self.valid_in(s, m as usize, j + 1))
        });
        let share = jobs.div_ceil(members.len().max(1));
        let fair = members.iter().all(|&m| {
            (0..jobs)
                .filter(|&j| self.valid_in(s, m as usize, j + 1))
                .count()
                <= share
        });
        (led, fair)
    }

    /// A line for a pool step.
    pub(crate) fn describe_pool(&self, before: &State, after: &State, action: Action) -> String {
        let t = before.now;
        let show = |a: &[Option<u8>; POOL_JOBS]| {
            a.iter()
                .enumerate()
                .map(|(j, o)| match o {
                    Some(m) => format!("job{} -> client {m}", j + 1),
                    None => format!("job{} -> nobody", j + 1),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        match action {
            Action::PoolFollow(c) => format!(
                "t={t}: client {c} reads the assignment (version {}): {}",
                after.aver,
                show(&after.assign)
            ),
            Action::PoolRead(c) => format!(
                "t={t}: coordinator client {c} reads the members {:?} and the assignment \
                 (version {}): {}",
                Self::members(before),
                before.aver,
                show(&before.assign)
            ),
            Action::PoolWrite(c) => {
                if after.aver != before.aver {
                    format!(
                        "t={t}: coordinator client {c} writes the assignment (version {}): {}",
                        after.aver,
                        show(&after.assign)
                    )
                } else {
                    format!(
                        "t={t}: coordinator client {c}'s assignment write is refused (it reads again)"
                    )
                }
            }
            other => format!("{other:?}"),
        }
    }
}

/// The initial pool state for `n` clients and `jobs` jobs.
pub(crate) fn init(n: usize, jobs: usize) -> (Vec<Parked>, Vec<PoolReplica>) {
    let parked = (0..jobs)
        .map(|_| Parked {
            nodes: Vec::new(),
            f_view: None,
            max_token: None,
            cts: vec![(Phase::Idle, None, 0); n],
        })
        .collect();
    let replicas = if jobs > 0 {
        vec![PoolReplica::default(); n]
    } else {
        Vec::new()
    };
    (parked, replicas)
}

#[cfg(test)]
mod tests {
    use super::balance;

    #[test]
    fn the_balancing_rule_keeps_owners_and_gives_a_newcomer_the_last_job() {
        assert_eq!(balance(&[0], [None, None]), [Some(0), Some(0)]);
        assert_eq!(balance(&[0, 1], [Some(0), Some(0)]), [Some(0), Some(1)]);
        assert_eq!(balance(&[1, 0], [Some(0), Some(0)]), [Some(0), Some(1)]);
        assert_eq!(balance(&[1], [Some(0), Some(1)]), [Some(1), Some(1)]);
        assert_eq!(balance(&[0, 1], [None, None]), [Some(0), Some(1)]);
    }
}
