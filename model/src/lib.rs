//! A model of the contender core of `zookeeper-recipes` (the latch's, the selector's and the
//! mutex's election), of the lease that bounds every term, and of the ZooKeeper servers they run
//! on, written from `recipes/leader-latch.md`, `recipes/mutex.md` and the lease's proof rules
//! (`src/session/lease.rs`), for the `stateright` model checker.
//!
//! The world: one quorum leader `L` that holds the store and expires sessions, one follower `F`
//! that can be cut off from it (it then keeps answering reads from a stale copy and the client's
//! pings, but cannot answer a `sync` or a write), clients that connect to either server, lose a
//! create's reply, reconnect, get frozen, and see time pass in ticks. With [`Config::slots`] > 0
//! the election's leader also runs the scheduled job (`recipes/scheduled-job.md`): its slot
//! records, cursor, claims, ends, retries and cut-off slots, every write a fenced `multi`. With
//! [`Config::pool_jobs`] > 0 the election is LeaderPool's membership latch, whose leader
//! coordinates, and each of the pool's jobs is another election of the same core
//! (`recipes/leader-pool.md`; see the `pool` module). With [`Config::leader_change`] the quorum
//! is `F` and an unmodelled third server: `L` can lose its followers, answer for a stale window
//! and be replaced by `F` (see the `quorum` module). With [`Config::lag`] `F` may lag one
//! write behind `L` while in touch with it (see the `lag` module). See
//! `README.md` for what is and is not modelled, and for every rule that can be switched off
//! ([`Rule`]).

use std::fmt::Write as _;

use stateright::{Model, Property};

mod job;
mod lag;
mod pool;
mod quorum;
pub mod trace;

pub use job::{Job, MAX_ATTEMPTS, MAX_SLOTS, RETRIES, Record, Run, SlotState, due};
pub use pool::{CoordRead, POOL_JOBS, Parked, PoolReplica, balance};

/// The session timeout, in ticks. A lease proven by a touch sent at `s` lasts until `s + TIMEOUT`
/// (a term is valid while `now < deadline`); the quorum leader expires a session once
/// `now - last_touch > TIMEOUT`.
pub const TIMEOUT: u8 = 4;

/// A protocol rule that the model can switch off (a *mutation*), by its kebab-case name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// "A ping proves nothing by itself; a later `sync` proves it": a heartbeat's own answer
    /// proves nothing. Mutated: a ping's answer (which a cut-off follower gives) proves the
    /// lease up to its own send time.
    LeaseNeedsLaterSync,
    /// "The lease advances to `j`'s send time, never to `k`'s": a `sync`'s answer proves the
    /// earlier touch, not itself (its own touch may still sit at the follower). Mutated: the
    /// lease advances to the answered `sync`'s own send time.
    LeaseAdvancesToEarlierTouch,
    /// "No valid term without a proof": a term begins only on a lease proven with room.
    /// Mutated: the answer that made the contender first (its listing) is taken as a proof.
    TermStartsOnProvenLease,
    /// "A lapsed lease ends terms": a term is valid only while its deadline is ahead. Mutated:
    /// a term is valid until the client sees its node or session go (Curator's behaviour).
    TermEndsAtDeadline,
    /// "The first node leads". Mutated: a listing that shows the node second is taken as first.
    ClaimOnlyWhenFirst,
    /// "Claiming on the deletion event", case "the predecessor was not first (`position` > 1)":
    /// list again. Mutated: any waiter claims on its predecessor's deletion event.
    ClaimOnEventOnlyAtPosition1,
    /// "Claiming on the deletion event", argument 2: the contender polls the watch on its own
    /// node after the predecessor's event, and a fired watch sends it back into line. Mutated:
    /// it claims without looking.
    ClaimOnEventChecksOwnNode,
    /// "Claiming on the deletion event", case "the client's connection changed after the
    /// predecessor's watch went out": list first (replayed events come in watch order, not zxid
    /// order). Mutated: it claims on the event, its own node's event possibly still to come.
    ClaimOnEventNeedsSameConnection,
    /// "Create reply lost": `sync`, find our node by its prefix and adopt it. Mutated: create a
    /// new node without looking (the first one is left behind, owned by the live session).
    ProtectedCreateAdoptsOwnNode,
    /// CURATOR-498 / CURATOR-696 ("Claiming without a read"): a node is adopted or claimed from
    /// only if the current session owns it; a node of an earlier session is deleted and replaced,
    /// and a listing answered on an earlier session is dropped ([`Config::in_flight`]). Mutated:
    /// a prefix match of any session is adopted, the node of the earlier session is kept (and
    /// listed, and claimed from) after a new session, and a listing answered on the old session
    /// is handled on the new one.
    NoClaimFromNodeOfEarlierSession,
    /// The quorum leader deletes an expired session's ephemeral nodes (ZooKeeper's rule, on
    /// which "the successor starts once the quorum expires the session" rests). Mutated: they
    /// stay.
    ExpireDeletesEphemerals,
    /// The job: every leader write is a multi whose first operation checks that the leader's
    /// own election node still exists ("Every write and its guard"). Mutated: the check is
    /// left out (the fence's own check of the term, before sending, stays).
    JobWriteChecksLeaderNode,
    /// The job's claim creates the record `running` and moves the cursor in one multi.
    /// Mutated: the cursor is not moved.
    ClaimMovesCursor,
    /// The job's end of a run is set with the version its claim produced. Mutated: with no
    /// version.
    EndChecksClaimVersion,
    /// Retries on failure: a failover during the backoff leaves the record `pending`, and the
    /// next leader runs the retry with its own, higher token. Mutated: with the token recorded.
    RetryInNewTermTakesItsToken,
    /// On crash, `Retry`: a cut-off slot is run again with this term's token. Mutated: with the
    /// token recorded.
    CutOffRetryTakesTermToken,
    /// A slot found `running` with the term's own token (a claim whose reply was lost) gives
    /// the term up. Mutated: it is retried in the same term, with the same token.
    SlotRunningWithOwnTokenEndsTerm,
    /// A new term takes up every `running` record as cut off (Recover), before new claims.
    /// Mutated: a `running` record is left alone, as if someone ran it.
    NewTermTakesUpCutOffSlots,
    /// A run is aborted when its term ends, at the latest at the term's lease. Mutated: it goes
    /// on.
    RunStopsAtLease,
    /// LeaderPool: the coordinator's assignment write is a fenced multi whose first operation
    /// checks its own membership node ("a coordinator that was paused past its session ...
    /// writes nothing"). Mutated: the check is left out.
    AssignmentWriteChecksMembershipNode,
    /// LeaderPool: the assignment write is set with the version the coordinator read. Mutated:
    /// with no version.
    AssignmentWriteChecksVersion,
    /// LeaderPool: a replica releases (closes the latch of) a job assigned away from it.
    /// Mutated: it keeps standing for it (and leading it).
    ReleaseJobsAssignedAway,
    /// LeaderPool: the coordinator reads the members again whenever they change (its watch on
    /// the membership) and rewrites the assignment. Mutated: it reads them once per term.
    CoordinatorFollowsMembership,
    /// A quorum leader that is replaced ([`Config::leader_change`]): an answered `sync` `k`
    /// proves an earlier touch `j` only if `k` was sent at least the relay allowance (1 tick)
    /// after `j` was answered (`QuorumProof::record`), which covers a quorum leader that has
    /// lost its followers and still answers `sync` for the stale window. Mutated: an allowance
    /// of 0 (any earlier answered touch is proven).
    ProofWaitsRelayAllowance,
    /// A quorum leader that is replaced: "expired" is believed only when it is said twice, a
    /// tick apart (`recipes/leader-latch.md`, "A lapsed lease ends terms, not the session").
    /// Mutated: the first "expired", which a stale quorum leader may say for a session the new
    /// quorum keeps, is believed (Curator's behaviour): the session and its nodes are given up.
    ExpiredBelievedWhenSaidTwice,
    /// A follower that lags ([`Config::lag`]): after a lost create reply, Recover `sync`s before
    /// it looks for the node by its prefix ("a lagging server could otherwise hide it").
    /// Mutated: it reads the server's view as it is, which a lagging follower's may not yet show
    /// the node; it then creates another, and the first is left behind.
    RecoverSyncsFirst,
    /// A follower that lags: a session resumed with a new client (`Resume`, which ZooKeeper's
    /// `lastZxid` check does not refuse: the new client sends zxid 0) `sync`s through its new
    /// server before its first read. Mutated: it reads at once, and a lagging follower's view
    /// may not yet show a node the session has already seen.
    ResumeSyncsFirst,
}

impl Rule {
    /// Every rule, in the order `--list-mutations` prints them.
    pub const ALL: [Rule; 27] = [
        Rule::LeaseNeedsLaterSync,
        Rule::LeaseAdvancesToEarlierTouch,
        Rule::TermStartsOnProvenLease,
        Rule::TermEndsAtDeadline,
        Rule::ClaimOnlyWhenFirst,
        Rule::ClaimOnEventOnlyAtPosition1,
        Rule::ClaimOnEventChecksOwnNode,
        Rule::ClaimOnEventNeedsSameConnection,
        Rule::ProtectedCreateAdoptsOwnNode,
        Rule::NoClaimFromNodeOfEarlierSession,
        Rule::ExpireDeletesEphemerals,
        Rule::JobWriteChecksLeaderNode,
        Rule::ClaimMovesCursor,
        Rule::EndChecksClaimVersion,
        Rule::RetryInNewTermTakesItsToken,
        Rule::CutOffRetryTakesTermToken,
        Rule::SlotRunningWithOwnTokenEndsTerm,
        Rule::NewTermTakesUpCutOffSlots,
        Rule::RunStopsAtLease,
        Rule::AssignmentWriteChecksMembershipNode,
        Rule::AssignmentWriteChecksVersion,
        Rule::ReleaseJobsAssignedAway,
        Rule::CoordinatorFollowsMembership,
        Rule::ProofWaitsRelayAllowance,
        Rule::ExpiredBelievedWhenSaidTwice,
        Rule::RecoverSyncsFirst,
        Rule::ResumeSyncsFirst,
    ];

    /// The rule's kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            Rule::LeaseNeedsLaterSync => "lease-needs-later-sync",
            Rule::LeaseAdvancesToEarlierTouch => "lease-advances-to-earlier-touch",
            Rule::TermStartsOnProvenLease => "term-starts-on-proven-lease",
            Rule::TermEndsAtDeadline => "term-ends-at-deadline",
            Rule::ClaimOnlyWhenFirst => "claim-only-when-first",
            Rule::ClaimOnEventOnlyAtPosition1 => "claim-on-event-only-at-position-1",
            Rule::ClaimOnEventChecksOwnNode => "claim-on-event-checks-own-node",
            Rule::ClaimOnEventNeedsSameConnection => "claim-on-event-needs-same-connection",
            Rule::ProtectedCreateAdoptsOwnNode => "protected-create-adopts-own-node",
            Rule::NoClaimFromNodeOfEarlierSession => "no-claim-from-node-of-earlier-session",
            Rule::ExpireDeletesEphemerals => "expire-deletes-ephemerals",
            Rule::JobWriteChecksLeaderNode => "job-write-checks-leader-node",
            Rule::ClaimMovesCursor => "claim-moves-cursor",
            Rule::EndChecksClaimVersion => "end-checks-claim-version",
            Rule::RetryInNewTermTakesItsToken => "retry-in-new-term-takes-its-token",
            Rule::CutOffRetryTakesTermToken => "cut-off-retry-takes-term-token",
            Rule::SlotRunningWithOwnTokenEndsTerm => "slot-running-with-own-token-ends-term",
            Rule::NewTermTakesUpCutOffSlots => "new-term-takes-up-cut-off-slots",
            Rule::RunStopsAtLease => "run-stops-at-lease",
            Rule::AssignmentWriteChecksMembershipNode => "assignment-write-checks-membership-node",
            Rule::AssignmentWriteChecksVersion => "assignment-write-checks-version",
            Rule::ReleaseJobsAssignedAway => "release-jobs-assigned-away",
            Rule::CoordinatorFollowsMembership => "coordinator-follows-membership",
            Rule::ProofWaitsRelayAllowance => "proof-waits-relay-allowance",
            Rule::ExpiredBelievedWhenSaidTwice => "expired-believed-when-said-twice",
            Rule::RecoverSyncsFirst => "recover-syncs-first",
            Rule::ResumeSyncsFirst => "resume-syncs-first",
        }
    }

    /// The rule named `name`, if any.
    pub fn from_name(name: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|r| r.name() == name)
    }

    /// A rule of the scheduled job: its mutation is checked in the job's configuration.
    pub fn is_job(self) -> bool {
        matches!(
            self,
            Rule::JobWriteChecksLeaderNode
                | Rule::ClaimMovesCursor
                | Rule::EndChecksClaimVersion
                | Rule::RetryInNewTermTakesItsToken
                | Rule::CutOffRetryTakesTermToken
                | Rule::SlotRunningWithOwnTokenEndsTerm
                | Rule::NewTermTakesUpCutOffSlots
                | Rule::RunStopsAtLease
        )
    }

    /// A rule of LeaderPool: its mutation is checked in the pool's configuration.
    pub fn is_pool(self) -> bool {
        matches!(
            self,
            Rule::AssignmentWriteChecksMembershipNode
                | Rule::AssignmentWriteChecksVersion
                | Rule::ReleaseJobsAssignedAway
                | Rule::CoordinatorFollowsMembership
        )
    }

    /// The smallest configuration that can show this rule's mutation has answers in flight
    /// ([`Config::in_flight`]): a listing answered on the old session and handled on the new.
    pub fn needs_in_flight(self) -> bool {
        matches!(self, Rule::NoClaimFromNodeOfEarlierSession)
    }

    /// A rule of a quorum leader that is replaced: its mutation is checked in the leader-change
    /// configuration ([`Config::leader_change`]).
    pub fn is_leader_change(self) -> bool {
        matches!(
            self,
            Rule::ProofWaitsRelayAllowance | Rule::ExpiredBelievedWhenSaidTwice
        )
    }

    /// A rule of a follower that lags: its mutation is checked in the lag configuration
    /// ([`Config::lag`]).
    pub fn is_lag(self) -> bool {
        matches!(self, Rule::RecoverSyncsFirst | Rule::ResumeSyncsFirst)
    }

    /// The number of clients the smallest configuration that can show this rule's mutation
    /// needs (a waiter two places back needs two nodes ahead of it).
    pub fn clients_needed(self) -> u8 {
        match self {
            Rule::ClaimOnEventOnlyAtPosition1 => 3,
            _ => 2,
        }
    }
}

/// A server of the ensemble.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Server {
    /// The quorum leader: holds the store, expires sessions, answers `sync`.
    L,
    /// A follower: can be cut off from `L`.
    F,
}

impl Server {
    fn other(self) -> Server {
        match self {
            Server::L => Server::F,
            Server::F => Server::L,
        }
    }
}

/// One ephemeral sequential node under the election path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    /// The sequence the server appended; also its `czxid`'s order (creates under one path are
    /// the only writes that order nodes), so it is the fencing token.
    pub seq: u8,
    /// The client whose protected create made it (its prefix).
    pub owner: u8,
    /// The owner's session (epoch) that made it: the node's `ephemeralOwner`.
    pub epoch: u8,
}

/// A session as the quorum leader knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Session {
    /// The client's current session number.
    pub epoch: u8,
    /// Not yet expired by the quorum leader.
    pub alive: bool,
    /// The last time the quorum leader heard of the session.
    pub last_touch: u8,
    /// `F` holds a touch of this session that it has not yet relayed to `L`.
    pub f_pending: bool,
}

/// Where a contender is in the contender core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// No node: the next step is the protected create (and the listing behind it).
    Idle,
    /// The create's reply was lost: the next step is `sync` and a look for the node by prefix.
    Lost,
    /// Must list the children.
    List,
    /// First in its last listing: claims once the lease is proven.
    First,
    /// Watching the node just before its own.
    Waiting {
        /// The predecessor's sequence.
        pred: u8,
        /// The predecessor was first in the listing (the waiter is next in line).
        pos1: bool,
        /// The connection the predecessor's watch was set on.
        wconn: u8,
    },
    /// Holds a term on its node; the token is the node's sequence.
    Leading,
    /// The job's leader (a selector) whose term ended: it deletes its node once it reaches
    /// the quorum leader, and queues again with a new one.
    Relinquish,
}

/// One client: its connection, its contender, its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// The server it is connected to.
    pub server: Server,
    /// Its connection number (one more on every reconnect or new session).
    pub conn: u8,
    /// Frozen: takes no step while time passes.
    pub frozen: bool,
    /// The contender's phase.
    pub phase: Phase,
    /// The sequence of the node it believes its own.
    pub node: Option<u8>,
    /// The session (epoch) the node was created or adopted in.
    pub node_epoch: u8,
    /// The lease's deadline: a term is valid while `now < lease`.
    pub lease: u8,
    /// The send time of the newest answered touch (ping, `sync`, reconnect) not yet proven.
    /// With [`Config::leader_change`]: of the newest answered at a tick boundary (a heartbeat).
    pub unproven: Option<u8>,
    /// With [`Config::leader_change`]: the send time (tick) of the newest touch answered inside
    /// a tick (a reconnect, a heartbeat to a stale quorum leader between ticks) not yet proven;
    /// it was answered later than the tick began (see `quorum.rs`). Always `None` without.
    pub unproven_mid: Option<u8>,
    /// Heard "expired" once, at this tick, from a stale quorum leader: the client has no
    /// connection and asks again a tick later.
    pub doubt: Option<u8>,
    /// Sent its heartbeat between ticks to a stale quorum leader in this tick.
    pub hb_mid: bool,
}

/// The whole world.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Real time, in ticks.
    pub now: u8,
    /// `F` is cut off from `L`.
    pub cut: bool,
    /// `F`'s copy of the children while it is cut off (`None`: the same as `L`'s).
    pub f_view: Option<Vec<Node>>,
    /// The children at `L`, in sequence order.
    pub nodes: Vec<Node>,
    /// The next sequence the parent hands out.
    pub next_seq: u8,
    /// Sessions at `L`, one per client.
    pub sessions: Vec<Session>,
    /// The clients.
    pub clients: Vec<Client>,
    /// Faults still allowed (cut, freeze, reconnect, lost reply, foreign delete).
    pub budget: u8,
    /// The highest token any term began with.
    pub max_token: Option<u8>,
    /// A term began with a token lower than an earlier term's.
    pub token_fell: bool,
    /// A fault began or ended (a heal, an unfreeze) within the last `recovery` ticks before
    /// the horizon.
    pub late_fault: bool,
    /// The sequences deleted so far, in zxid order (kept only with
    /// [`Config::late_own_event`]).
    pub deleted: Vec<u8>,
    /// The job's loop per client (empty without the job).
    pub jobs: Vec<Job>,
    /// `state`'s cursor at `L`: slots below it were taken up.
    pub job_cursor: u8,
    /// `state`'s version at `L`.
    pub job_sver: u8,
    /// `slots/<key>` at `L`.
    pub records: [Record; MAX_SLOTS],
    /// Ghost: terms begun so far (the newest term's number).
    pub terms: u8,
    /// Ghost: how many times each slot was recorded `succeeded`.
    pub succeeded: [u8; MAX_SLOTS],
    /// Ghost: each slot has had an attempt.
    pub attempted: [bool; MAX_SLOTS],
    /// Ghost: each slot's last attempt: its token, its term, and whether its end is still
    /// unrecorded.
    pub last_attempt: [(u8, u8, bool); MAX_SLOTS],
    /// Ghost: an attempt began with a token below the previous attempt's, or not above it
    /// when it was another term's or its end was never recorded.
    pub attempt_token_fell: bool,
    /// Ghost: a run's end was recorded by a term other than the one that claimed it.
    pub foreign_end: bool,
    /// Ghost: a job write landed from a term that was not the newest.
    pub stale_write: bool,
    /// LeaderPool: the jobs' elections while the membership's is in `nodes` (empty without
    /// the pool).
    pub parked: Vec<Parked>,
    /// The election now in `nodes`: 0 (the election; the pool's membership), or a parked job's
    /// swapped in for one of its contender's steps.
    pub resident: u8,
    /// LeaderPool: `<root>/assignment` at `L`, each job's owner.
    pub assign: [Option<u8>; POOL_JOBS],
    /// Its version (0: not yet written).
    pub aver: u8,
    /// LeaderPool: each client's assignment as last read, and its coordinator loop.
    pub replicas: Vec<PoolReplica>,
    /// Ghost: membership terms begun so far (the newest coordinator's number).
    pub cterms: u8,
    /// Ghost: an assignment write landed from a coordinator whose term was not the newest.
    pub stale_assign: bool,
    /// Each client's listing in flight (empty without [`Config::in_flight`]).
    pub listings: Vec<Option<Listing>>,
    /// [`Config::leader_change`]: the tick at which `L` lost its followers (`IsolateLeader`).
    pub isolated: Option<u8>,
    /// `F` has been elected quorum leader (after `isolated`).
    pub elected: bool,
    /// The isolated `L` has stepped down and dropped its clients (it is gone from the model).
    pub l_gone: bool,
    /// `L`'s store as it was at the isolation: what the stale `L` answers reads from.
    pub l_view: Option<Vec<Node>>,
    /// The stale `L`'s session tracker: the last time it heard of each session (empty until
    /// the isolation).
    pub l_touch: Vec<u8>,
    /// The sessions the stale `L`'s tracker expired (a bit per client): it says "expired" for
    /// them, and nothing commits.
    pub l_expired: u8,
    /// Ghost: a client gave up a session that the quorum had not expired.
    pub gave_up_live: bool,
    /// [`Config::lag`]: the clients (a bit each) that have not seen `L`'s newest write (their
    /// last seen zxid is behind it), so that a lagging `F` may still take their reconnect.
    pub behind: u8,
}

/// A listing's answer on its way to the contender ([`Config::in_flight`]): the server answered
/// it when it was sent; the contender handles it in a later step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Listing {
    /// The children as the server answered, at the moment it answered.
    pub children: Vec<Node>,
    /// The session (epoch) the listing was sent on.
    pub epoch: u8,
    /// The connection it was sent on (the predecessor's watch is set on it).
    pub conn: u8,
}

/// One step of the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Real time advances by one tick: `F` relays its pending touches (unless cut off), the
    /// quorum leader expires every session not touched for the timeout, and every running
    /// client sends its heartbeat (a `sync` through `L`, a ping to a cut-off `F`).
    Tick,
    /// `F` is cut off from `L` (fault).
    Cut,
    /// `F` is in touch with `L` again and catches up.
    Heal,
    /// The client's process is frozen (fault).
    Freeze(u8),
    /// The client's process runs again.
    Unfreeze(u8),
    /// The client's connection moves to the other server (fault).
    Reconnect(u8),
    /// [`Config::lag`]: the session supervisor resumes the client's session with a new client
    /// on the other server (fault): a reconnect that the `lastZxid` check does not refuse,
    /// because the new client's last seen zxid is 0. Offered only where a reconnect would be
    /// refused (to a lagging `F`, by a client that has seen the write it misses); elsewhere it
    /// is a reconnect.
    Resume(u8),
    /// Another client deletes a node that is not first (fault; "a waiting participant's node
    /// deleted by someone else").
    ForeignDelete(u8),
    /// Protected create and the listing behind it.
    Join(u8),
    /// Protected create whose reply is lost (fault).
    JoinReplyLost(u8),
    /// After a lost create reply: `sync`, find the node by prefix, list.
    Recover(u8),
    /// List the children.
    List(u8),
    /// First in line: begin a term.
    Claim(u8),
    /// The predecessor's deletion event.
    PredDeleted(u8),
    /// The watch on the client's own node fires: the node is gone.
    OwnNodeGone(u8),
    /// The term's deadline has passed: the term ends, the node stays.
    EndTerm(u8),
    /// The leader releases (mutex release, latch close) and queues again.
    Release(u8),
    /// The job's leader whose term ended deletes its node (the selector's relinquish).
    Relinquish(u8),
    /// The job's Load: read `state` and the records, then sample (set `state` onto itself).
    JobLoad(u8),
    /// The job's claim of a slot (client, slot): a due slot (create the record, move the
    /// cursor), a `pending` one (retry) or a cut-off one (retry with this term's token).
    JobClaim(u8, u8),
    /// A claim whose multi lands but whose reply is lost (fault).
    JobClaimReplyLost(u8, u8),
    /// A cut-off slot at `max_attempts` recorded `failed`.
    JobSettle(u8, u8),
    /// A slot found running with the term's own token: the term is given up.
    JobGiveUp(u8),
    /// The run ends (client, ok): `succeeded`, or `failed` / `pending` (a retry left).
    JobEnd(u8, bool),
    /// A settled record is pruned (deleted with its version).
    JobPrune(u8, u8),
    /// The client hears that its session expired and opens a new one.
    SessionExpired(u8),
    /// LeaderPool: the client reads the assignment (its data watch fired).
    PoolFollow(u8),
    /// LeaderPool: the coordinator reads the members and the assignment (one round trip).
    PoolRead(u8),
    /// LeaderPool: the coordinator writes the assignment (a fenced multi).
    PoolWrite(u8),
    /// With [`Config::in_flight`]: the contender sends a listing, which its server answers at
    /// once from what it holds; the answer is in flight to the contender.
    SendList(u8),
    /// With [`Config::in_flight`]: the contender handles the answer to its listing (possibly
    /// after its session expired and a new one was opened).
    HandleListing(u8),
    /// [`Config::leader_change`]: `L` loses its followers (fault). It believes it leads for
    /// the stale window (1 tick): it answers reads, pings and `sync` from its own state, and no
    /// write lands anywhere until the quorum (`F` and the unmodelled third server) elects `F`:
    /// at once (`true`) or at the next tick boundary (`false`). The new leader's store is the
    /// committed state, and every live session gets its creation timeout afresh from the
    /// election.
    IsolateLeader(bool),
    /// The stale `L` notices that it lost its quorum: it steps down and drops its clients.
    StepDown,
    /// A client on the stale `L` sends a heartbeat (`sync`) between ticks (the implementation
    /// sends them every `T/8`, twice a model tick).
    StaleHeartbeat(u8),
    /// A client on the stale `L` hears "expired" from its session tracker, for a session the
    /// new quorum may keep.
    HearStaleExpired(u8),
    /// A client without a connection (dropped by the stepped-down `L`, or asking again a tick
    /// after a first "expired") connects to `F`.
    Redial(u8),
    /// [`Config::lag`]: the lagging `F` applies the newest commit (its watches fire). Free; time
    /// does not pass until it has.
    FCatchUp,
}

/// The model's configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Clients (contenders), one election.
    pub clients: u8,
    /// The last tick.
    pub horizon: u8,
    /// Faults allowed per run.
    pub budget: u8,
    /// Sequences the parent hands out at most (bounds creates).
    pub max_nodes: u8,
    /// Ticks after the last fault (healed, nobody frozen) within which a leader must exist.
    pub recovery: u8,
    /// The rule switched off, if any.
    pub mutation: Option<Rule>,
    /// Model the own node's deletion event as arriving at the contender only when ZooKeeper's
    /// zxid order guarantees it: before the predecessor's event if our node was deleted first,
    /// possibly after it otherwise (the contender's task may poll its watch before the client's
    /// I/O has read the event). Off by default: events sent are seen before the next step.
    pub late_own_event: bool,
    /// Slots of the scheduled job (0: no job; at most [`MAX_SLOTS`]). With the job, the
    /// election's leader runs it in one-term (selector) mode: a term's end relinquishes the node.
    pub slots: u8,
    /// LeaderPool's jobs (0: no pool; else [`POOL_JOBS`]). With the pool the election is the
    /// membership latch, whose leader is the coordinator, and each job has its own election.
    pub pool_jobs: u8,
    /// Answers in flight: a contender's listing (the `List` step) is sent, answered by its
    /// server from the state at that moment, and handled by the contender in a later step, in
    /// any order with the client's other due steps (hearing that its session expired, above
    /// all); a frozen client holds its answer across ticks. One listing in flight per client;
    /// while it is, the contender awaits it and takes no other step. Off by default; not with
    /// the pool (its elections' listings stay one step).
    pub in_flight: bool,
    /// The ensemble's third server, implicitly: the quorum is `F` and an unmodelled third
    /// server, so `L` can lose its quorum (`IsolateLeader`) and be replaced by `F`; the lease's
    /// relay allowance (1 tick) applies. Off: `L` never changes and the allowance is 0 (the FIFO
    /// link stands for it). Election configuration only (no job, no pool).
    pub leader_change: bool,
    /// A follower that lags while in touch with `L`: its view may miss `L`'s newest write until
    /// it catches up (`FCatchUp`, before the next tick boundary); a `sync` or a write through it
    /// brings it up to date first; a reconnect to it is refused while it lags behind a write the
    /// client has seen, but a session resumed with a new client is not (`Resume`; see the `lag`
    /// module). Off: `F` in touch with `L` is always up to date.
    /// Election configuration only (no job, no pool, no leader change).
    pub lag: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            clients: 2,
            horizon: 12,
            budget: 2,
            max_nodes: 5,
            recovery: TIMEOUT,
            mutation: None,
            late_own_event: false,
            slots: 0,
            pool_jobs: 0,
            in_flight: false,
            leader_change: false,
            lag: false,
        }
    }
}

impl Config {
    /// LeaderPool's default configuration: 2 clients (replicas), 2 jobs, horizon 10, fault
    /// budget 1, at most 8 creates.
    pub fn pool() -> Self {
        Config {
            horizon: 10,
            budget: 1,
            max_nodes: 8,
            pool_jobs: POOL_JOBS as u8,
            ..Config::default()
        }
    }

    /// The leader-change configuration: the election's, 2 clients, with a quorum leader that is
    /// replaced ([`Config::leader_change`]), horizon 6, fault budget 2.
    pub fn leader_change() -> Self {
        Config {
            horizon: 6,
            budget: 2,
            leader_change: true,
            ..Config::default()
        }
    }

    /// The lag configuration: the election's, 2 clients, with a follower that lags
    /// ([`Config::lag`]), horizon 8, fault budget 2 (at horizon 12 it is 6.9 M states, too many
    /// for the default `check`).
    pub fn lag() -> Self {
        Config {
            horizon: 8,
            lag: true,
            ..Config::default()
        }
    }

    /// The job's default configuration: 2 clients, 2 slots, horizon 12, fault budget 1.
    pub fn job() -> Self {
        Config {
            horizon: 12,
            budget: 1,
            slots: 2,
            ..Config::default()
        }
    }
}

/// The model: a [`Config`] and the rules.
#[derive(Clone, Debug)]
pub struct ElectionModel {
    /// Its configuration.
    pub config: Config,
}

impl ElectionModel {
    /// A model of `config`.
    pub fn new(config: Config) -> Self {
        ElectionModel { config }
    }

    /// The rule holds (is not the one switched off).
    fn on(&self, rule: Rule) -> bool {
        self.config.mutation != Some(rule)
    }

    /// Listings are answered in one step and handled in another ([`Config::in_flight`]).
    fn in_flight_on(&self) -> bool {
        self.config.in_flight && !self.pool_on()
    }

    /// The client's listing is in flight: the contender awaits it.
    fn awaits_listing(s: &State, c: usize) -> bool {
        s.listings.get(c).is_some_and(Option::is_some)
    }

    /// The contender's step that lists the children: one step, or the send of a listing whose
    /// answer is handled later.
    fn list_action(&self, c: u8) -> Action {
        if self.in_flight_on() {
            Action::SendList(c)
        } else {
            Action::List(c)
        }
    }

    /// The children as `server` answers a read.
    fn view<'a>(&self, s: &'a State, server: Server) -> &'a [Node] {
        if let (Server::L, Some(v)) = (server, &s.l_view) {
            return v;
        }
        match (server, &s.f_view) {
            (Server::F, Some(v)) => v,
            _ => &s.nodes,
        }
    }

    /// `server` can carry a write or a `sync` to `L`.
    fn reaches_leader(s: &State, server: Server) -> bool {
        if s.isolated.is_some() {
            // Only the elected `F` commits: the stale `L` has no quorum.
            return server == Server::F && s.elected;
        }
        server == Server::L || !s.cut
    }

    /// The client holds a term it believes valid (by the model's real time).
    pub fn valid(&self, s: &State, c: usize) -> bool {
        s.clients[c].phase == Phase::Leading
            && (s.clients[c].lease > s.now || !self.on(Rule::TermEndsAtDeadline))
    }

    /// Steps of the contender core that are due: time does not pass while one is (a client
    /// that is slow to take one is a frozen client).
    fn urgent(&self, s: &State) -> bool {
        let mut actions = Vec::new();
        self.protocol_actions(s, &mut actions);
        actions.iter().any(|a| {
            matches!(
                a,
                Action::Join(_)
                    | Action::Recover(_)
                    | Action::List(_)
                    | Action::Claim(_)
                    | Action::PredDeleted(_)
                    | Action::OwnNodeGone(_)
                    | Action::EndTerm(_)
                    | Action::SessionExpired(_)
                    | Action::Relinquish(_)
                    | Action::SendList(_)
                    | Action::HandleListing(_)
                    | Action::Redial(_)
                    | Action::FCatchUp
            ) || self.job_urgent(s, a)
                || self.pool_urgent(a)
        })
    }

    /// The state in which a fair, healed run must have a leader.
    fn liveness_due(&self, s: &State) -> bool {
        // The model's bound on creates, not the protocol, may keep a client out of line.
        let bound_hit = s.next_seq >= self.config.max_nodes
            && (self.pool_on()
                || s.clients
                    .iter()
                    .any(|c| matches!(c.phase, Phase::Idle | Phase::Lost)));
        let healed = !s.cut
            && s.clients.iter().all(|c| !c.frozen)
            && !s.late_fault
            && self.quorum_settled(s);
        s.now == self.config.horizon && healed && !bound_hit && !self.urgent(s)
    }

    /// Touches the client's session at its server: at `L` at once, at `F` pending a relay.
    fn touch(s: &mut State, c: usize) {
        if s.isolated.is_some() {
            Self::touch_isolated(s, c);
            return;
        }
        let server = s.clients[c].server;
        let now = s.now;
        let sess = &mut s.sessions[c];
        if !sess.alive {
            return;
        }
        match server {
            Server::L => sess.last_touch = now,
            Server::F => sess.f_pending = true,
        }
    }

    /// `F`'s ping reply reaches `L`: every pending touch counts now.
    fn relay(s: &mut State) {
        let now = s.now;
        for sess in &mut s.sessions {
            if sess.f_pending && sess.alive {
                sess.last_touch = now;
            }
            sess.f_pending = false;
        }
    }

    /// Deletes the node `seq` at `L` (and at `F`, unless it is cut off).
    fn delete(&self, s: &mut State, seq: u8) {
        self.remove(s, |n| n.seq == seq);
    }

    /// Deletes every node `gone` picks, in sequence order (one transaction at most), and logs
    /// the deletions when the late own-node event is modelled.
    /// The quorum leader expires every session not touched for the timeout by now, and
    /// deletes its ephemeral nodes with it (ZooKeeper's `closeSession`).
    fn expire_sessions(&self, s: &mut State) {
        let now = s.now;
        for c in 0..s.sessions.len() {
            let sess = s.sessions[c];
            if sess.alive && now >= sess.last_touch + TIMEOUT {
                s.sessions[c].alive = false;
                s.sessions[c].f_pending = false;
                if self.on(Rule::ExpireDeletesEphemerals) {
                    self.remove(s, |n| n.owner as usize == c && n.epoch == sess.epoch);
                }
            }
        }
    }

    fn remove(&self, s: &mut State, gone: impl Fn(&Node) -> bool) {
        if self.config.late_own_event {
            let seqs: Vec<u8> = s.nodes.iter().filter(|n| gone(n)).map(|n| n.seq).collect();
            s.deleted.extend(seqs);
        }
        s.nodes.retain(|n| !gone(n));
    }

    /// The contender's standing in a listing from its server.
    fn standing(&self, s: &State, c: usize) -> Phase {
        let cl = &s.clients[c];
        self.standing_in(self.view(s, cl.server), cl.node, cl.conn)
    }

    /// The standing of the node `own` in the listing `view`, whose predecessor's watch is set on
    /// connection `conn`.
    fn standing_in(&self, view: &[Node], own: Option<u8>, conn: u8) -> Phase {
        let Some(own) = own else {
            return Phase::Idle;
        };
        match view.iter().position(|n| n.seq == own) {
            None => Phase::Idle,
            Some(0) => Phase::First,
            Some(1) if !self.on(Rule::ClaimOnlyWhenFirst) => Phase::First,
            Some(i) => Phase::Waiting {
                pred: view[i - 1].seq,
                pos1: i == 1,
                wconn: conn,
            },
        }
    }

    /// Sets the client's phase from a listing; a node missing from it is forgotten.
    fn apply_listing(&self, s: &mut State, c: usize) {
        let phase = self.standing(s, c);
        if phase == Phase::Idle {
            s.clients[c].node = None;
        }
        s.clients[c].phase = phase;
    }

    /// Begins a term on the client's node, if the lease allows.
    fn begin_term(&self, s: &mut State, c: usize) {
        if !self.on(Rule::TermStartsOnProvenLease) {
            let now = s.now;
            let cl = &mut s.clients[c];
            cl.lease = cl.lease.max(now + TIMEOUT);
        }
        let cl = &mut s.clients[c];
        if cl.lease <= s.now {
            cl.phase = Phase::First;
            return;
        }
        let Some(token) = cl.node else {
            cl.phase = Phase::Idle;
            return;
        };
        cl.phase = Phase::Leading;
        if self.jobs_on() {
            self.job_begin(s, c);
        }
        if self.pool_on() && s.resident == 0 {
            self.pool_begin(s, c);
        }
        if s.max_token.is_some_and(|m| token < m) {
            s.token_fell = true;
        }
        s.max_token = Some(s.max_token.map_or(token, |m| m.max(token)));
    }

    /// A new session for the client (it heard that its old one expired).
    fn new_session(&self, s: &mut State, c: usize) {
        let now = s.now;
        let sess = &mut s.sessions[c];
        sess.epoch += 1;
        sess.alive = true;
        sess.last_touch = now;
        sess.f_pending = false;
        let cl = &mut s.clients[c];
        cl.conn += 1;
        cl.lease = now + TIMEOUT;
        cl.unproven = None;
        cl.unproven_mid = None;
        cl.doubt = None;
        if self.on(Rule::NoClaimFromNodeOfEarlierSession) || cl.node.is_none() {
            cl.node = None;
            cl.phase = Phase::Idle;
        } else {
            cl.phase = Phase::List;
        }
    }

    /// One line of a counterexample: what `action` did in `before`.
    pub fn describe(&self, before: &State, action: &Action) -> String {
        if let Some((c, e)) = self.parked_step(*action) {
            let t = Self::swapped(before, e);
            return format!(
                "job{e}: {}",
                self.describe_core(&t, &pool::retag(*action, c))
            );
        }
        let line = self.describe_core(before, action);
        if self.pool_on() && pool::contender(*action).is_some() {
            format!("members: {line}")
        } else {
            line
        }
    }

    fn describe_core(&self, before: &State, action: &Action) -> String {
        let after = self.next_state(before, *action);
        let list = |s: &State, server: Server| {
            let v = self.view(s, server);
            let names: Vec<String> = v
                .iter()
                .map(|n| format!("n{}(c{}s{})", n.seq, n.owner, n.epoch))
                .collect();
            format!("[{}]", names.join(" "))
        };
        let phase = |s: &State, c: usize| match s.clients[c].phase {
            Phase::Idle => "has no node".to_string(),
            Phase::Lost => "does not know its node".to_string(),
            Phase::List => "must list".to_string(),
            Phase::First => "is first, waits for a proven lease".to_string(),
            Phase::Waiting { pred, pos1, .. } => format!(
                "watches n{pred}{}",
                if pos1 { " (next in line)" } else { "" }
            ),
            Phase::Leading => format!(
                "LEADS with token {} until t={}",
                s.clients[c].node.map_or(0, |n| n),
                s.clients[c].lease
            ),
            Phase::Relinquish => "must relinquish its node".to_string(),
        };
        let rec = |s: &State, i: u8| {
            let r = s.records[i as usize];
            match r.st {
                SlotState::None => format!("slot {i}: no record"),
                st => format!(
                    "slot {i}: {st:?} (token {}, attempt {}, failures {}, version {})",
                    r.token, r.attempt, r.failures, r.ver
                ),
            }
        };
        let term = |s: &State, c: u8| {
            let cl = &s.clients[c as usize];
            format!(
                "client {c} (term #{}, token {})",
                s.jobs[c as usize].term,
                cl.node.map_or(0, |n| n)
            )
        };
        let mut out = String::new();
        let Some(a) = after else {
            let _ = write!(out, "{action:?} (no change)");
            return out;
        };
        let t = before.now;
        match *action {
            Action::Tick => {
                let _ = write!(out, "time passes: t={}", a.now);
                if !before.elected && a.elected {
                    let _ = write!(
                        out,
                        "; the quorum elects F: every live session's timeout starts afresh at t={}",
                        a.now
                    );
                }
                for (c, (was, is)) in before.sessions.iter().zip(&a.sessions).enumerate() {
                    if was.alive && !is.alive {
                        let _ = write!(
                            out,
                            "; {} expires client {c}'s session s{} (last heard of at t={})",
                            if a.elected {
                                "F, the new quorum leader,"
                            } else {
                                "L"
                            },
                            was.epoch,
                            was.last_touch
                        );
                    }
                    if before.l_expired & (1 << c) == 0 && a.l_expired & (1 << c) != 0 {
                        let _ = write!(
                            out,
                            "; the stale L's tracker expires client {c}'s session (nothing \
                             commits)"
                        );
                    }
                }
                let leases: Vec<String> = a
                    .clients
                    .iter()
                    .enumerate()
                    .map(|(c, cl)| {
                        let frozen = if cl.frozen { ", frozen" } else { "" };
                        format!("c{c} on {:?} until t={}{frozen}", cl.server, cl.lease)
                    })
                    .collect();
                let _ = write!(out, "; leases after the heartbeats: {}", leases.join(", "));
            }
            Action::Cut => {
                let _ = write!(out, "t={t}: F is cut off from L");
            }
            Action::Heal => {
                let _ = write!(out, "t={t}: F is back in touch with L");
            }
            Action::Freeze(c) => {
                let armed = a.jobs.get(c as usize).is_some_and(|j| j.armed);
                let _ = write!(
                    out,
                    "t={t}: client {c} is frozen{}",
                    if armed {
                        " (its next job write has passed the fence's own check)"
                    } else {
                        ""
                    }
                );
            }
            Action::Unfreeze(c) => {
                let _ = write!(out, "t={t}: client {c} runs again");
            }
            Action::Reconnect(c) => {
                let cl = &a.clients[c as usize];
                let _ = write!(
                    out,
                    "t={t}: client {c} reconnects to {:?} (connection {}); it {}",
                    cl.server,
                    cl.conn,
                    phase(&a, c as usize)
                );
            }
            Action::Resume(c) => {
                let cl = &a.clients[c as usize];
                let _ = write!(
                    out,
                    "t={t}: client {c}'s session is resumed by a new client on {:?} (connection {}, \
                     last seen zxid 0: not refused){}; it {}",
                    cl.server,
                    cl.conn,
                    if a.sessions[c as usize].epoch != before.sessions[c as usize].epoch {
                        ""
                    } else if self.on(Rule::ResumeSyncsFirst) {
                        ", syncs"
                    } else {
                        ", does not sync"
                    },
                    phase(&a, c as usize)
                );
            }
            Action::ForeignDelete(seq) => {
                let _ = write!(
                    out,
                    "t={t}: another client deletes n{seq}; L has {}",
                    list(&a, Server::L)
                );
            }
            Action::Join(c) | Action::JoinReplyLost(c) | Action::Recover(c) | Action::List(c) => {
                let cl = &a.clients[c as usize];
                let verb = match *action {
                    Action::Join(_) => format!("creates n{} and lists", before.next_seq),
                    Action::JoinReplyLost(_) => {
                        format!("creates n{} but the reply is lost", before.next_seq)
                    }
                    Action::Recover(_) if !self.on(Rule::ProtectedCreateAdoptsOwnNode) => {
                        "does not look for its node (it will create another), sees".to_string()
                    }
                    Action::Recover(_)
                        if self.config.lag
                            && !self.on(Rule::RecoverSyncsFirst)
                            && cl.server == Server::F =>
                    {
                        "looks for its node by prefix without a sync, lists".to_string()
                    }
                    Action::Recover(_) => "syncs, looks for its node by prefix, lists".to_string(),
                    _ => "lists".to_string(),
                };
                let _ = write!(
                    out,
                    "t={t}: client {c} {verb} {} on {:?}; it {}",
                    list(&a, cl.server),
                    cl.server,
                    phase(&a, c as usize)
                );
            }
            Action::Claim(c) => {
                let _ = write!(
                    out,
                    "t={t}: client {c} claims: it {}",
                    phase(&a, c as usize)
                );
            }
            Action::PredDeleted(c) => {
                let _ = write!(
                    out,
                    "t={t}: client {c} gets its predecessor's deletion event; it {}",
                    phase(&a, c as usize)
                );
            }
            Action::OwnNodeGone(c) => {
                let _ = write!(
                    out,
                    "t={t}: client {c}'s own-node watch fires (node gone); it {}",
                    phase(&a, c as usize)
                );
            }
            Action::EndTerm(c) => {
                let _ = write!(
                    out,
                    "t={t}: client {c}'s deadline t={} has passed: its term ends",
                    before.clients[c as usize].lease
                );
            }
            Action::Release(c) => {
                let _ = write!(
                    out,
                    "t={t}: client {c} releases (deletes n{})",
                    before.clients[c as usize].node.map_or(0, |n| n)
                );
            }
            Action::SessionExpired(c) => {
                let _ = write!(
                    out,
                    "t={t}: client {c} hears its session expired, opens s{}; it {}",
                    a.sessions[c as usize].epoch,
                    phase(&a, c as usize)
                );
            }
            Action::Relinquish(c) => {
                let _ = write!(
                    out,
                    "t={t}: client {c}'s term is over: it relinquishes (deletes n{})",
                    before.clients[c as usize].node.map_or(0, |n| n)
                );
            }
            Action::JobLoad(c) => {
                let ok = a.jobs[c as usize].loaded;
                let _ = write!(
                    out,
                    "t={t}: {} loads the job{}: cursor {}, {}",
                    term(before, c),
                    if ok { "" } else { " (its sample is refused)" },
                    a.job_cursor,
                    (0..self.config.slots)
                        .map(|i| rec(&a, i))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            Action::JobClaim(c, i) | Action::JobClaimReplyLost(c, i) => {
                let landed = a.records[i as usize] != before.records[i as usize];
                let lost = matches!(action, Action::JobClaimReplyLost(..));
                let _ = write!(
                    out,
                    "t={t}: {} claims slot {i}{}: {}; cursor {}",
                    term(before, c),
                    match (landed, lost) {
                        (false, _) => " (refused: the loop reads again)",
                        (true, true) =>
                            " (the multi lands, its reply is lost: the loop reads again)",
                        (true, false) => " and starts the run",
                    },
                    rec(&a, i),
                    a.job_cursor
                );
            }
            Action::JobSettle(c, i) => {
                let _ = write!(
                    out,
                    "t={t}: {} settles cut-off {}",
                    term(before, c),
                    rec(&a, i)
                );
            }
            Action::JobGiveUp(c) => {
                let _ = write!(
                    out,
                    "t={t}: {} finds a slot running with its own token: gives the term up (deletes n{})",
                    term(before, c),
                    before.clients[c as usize].node.map_or(0, |n| n)
                );
            }
            Action::JobEnd(c, ok) => {
                let slot = before.jobs[c as usize].run.map_or(0, |r| r.slot);
                let landed = a.records[slot as usize] != before.records[slot as usize];
                let _ = write!(
                    out,
                    "t={t}: {}'s run of slot {slot} returns {}{}: {}",
                    term(before, c),
                    if ok { "Ok" } else { "an error" },
                    if landed { "" } else { " (the end is refused)" },
                    rec(&a, slot)
                );
            }
            Action::PoolFollow(_) | Action::PoolRead(_) | Action::PoolWrite(_) => {
                out = self.describe_pool(before, &a, *action);
            }
            Action::SendList(c) => {
                let cl = &before.clients[c as usize];
                let _ = write!(
                    out,
                    "t={t}: client {c} sends a listing on s{}; {:?} answers {} (in flight)",
                    before.sessions[c as usize].epoch,
                    cl.server,
                    list(before, cl.server)
                );
            }
            Action::HandleListing(c) => {
                let Some(Some(l)) = before.listings.get(c as usize) else {
                    return out;
                };
                let names: Vec<String> = l
                    .children
                    .iter()
                    .map(|n| format!("n{}(c{}s{})", n.seq, n.owner, n.epoch))
                    .collect();
                let now_epoch = before.sessions[c as usize].epoch;
                if l.epoch != now_epoch && self.on(Rule::NoClaimFromNodeOfEarlierSession) {
                    let _ = write!(
                        out,
                        "t={t}: client {c} drops the listing answered on s{} (its session is s{now_epoch}); it {}",
                        l.epoch,
                        phase(&a, c as usize)
                    );
                } else {
                    let _ = write!(
                        out,
                        "t={t}: client {c} handles the listing answered on s{} [{}] (its session is s{now_epoch}); it {}",
                        l.epoch,
                        names.join(" "),
                        phase(&a, c as usize)
                    );
                }
            }
            Action::JobPrune(c, i) => {
                let _ = write!(
                    out,
                    "t={t}: {} prunes slot {i}'s record: {}",
                    term(before, c),
                    rec(&a, i)
                );
            }
            Action::IsolateLeader(_)
            | Action::StepDown
            | Action::StaleHeartbeat(_)
            | Action::HearStaleExpired(_)
            | Action::Redial(_) => {
                let phase_of = |c: u8| phase(&a, c as usize);
                out = self.describe_quorum(before, &a, *action, phase_of);
            }
            Action::FCatchUp => {
                let _ = write!(
                    out,
                    "t={t}: F applies the newest commit: it has {}",
                    list(&a, Server::F)
                );
            }
        }
        if self.lagging(&a) && a.f_view != before.f_view {
            let _ = write!(
                out,
                "; F has not yet applied it: F has {}",
                list(&a, Server::F)
            );
        }
        out
    }
}

impl Model for ElectionModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = self.config.clients as usize;
        let mut inits = Vec::new();
        let (parked, replicas) = pool::init(n, self.config.pool_jobs as usize);
        // Every client starts on either server, with a fresh session (its lease counts from the
        // moment it asked for the session).
        // The pool's configuration has no cut, so where a client starts changes only when `L`
        // hears its touches: every client starts on `L`.
        let masks = if self.pool_on() { 1 } else { 1u32 << n };
        for mask in 0..masks {
            let clients = (0..n)
                .map(|i| Client {
                    server: if mask & (1 << i) == 0 {
                        Server::L
                    } else {
                        Server::F
                    },
                    conn: 0,
                    frozen: false,
                    phase: Phase::Idle,
                    node: None,
                    node_epoch: 0,
                    lease: TIMEOUT,
                    unproven: None,
                    unproven_mid: None,
                    doubt: None,
                    hb_mid: false,
                })
                .collect();
            inits.push(State {
                now: 0,
                cut: false,
                f_view: None,
                nodes: Vec::new(),
                next_seq: 0,
                sessions: vec![
                    Session {
                        epoch: 0,
                        alive: true,
                        last_touch: 0,
                        f_pending: false,
                    };
                    n
                ],
                clients,
                budget: self.config.budget,
                max_token: None,
                token_fell: false,
                late_fault: false,
                deleted: Vec::new(),
                jobs: if self.config.slots > 0 {
                    vec![Job::default(); n]
                } else {
                    Vec::new()
                },
                job_cursor: 0,
                job_sver: 0,
                records: [Record::default(); MAX_SLOTS],
                terms: 0,
                succeeded: [0; MAX_SLOTS],
                attempted: [false; MAX_SLOTS],
                last_attempt: [(0, 0, false); MAX_SLOTS],
                attempt_token_fell: false,
                foreign_end: false,
                stale_write: false,
                parked: parked.clone(),
                resident: 0,
                assign: [None; POOL_JOBS],
                aver: 0,
                replicas: replicas.clone(),
                cterms: 0,
                stale_assign: false,
                listings: if self.in_flight_on() {
                    vec![None; n]
                } else {
                    Vec::new()
                },
                isolated: None,
                elected: false,
                l_gone: false,
                l_view: None,
                l_touch: Vec::new(),
                l_expired: 0,
                gave_up_live: false,
                behind: 0,
            });
        }
        inits
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        self.protocol_actions(s, actions);
        let urgent = self.urgent(s);
        if self.pool_on() && urgent {
            // The pool's replicas are frozen between their steps, at a tick boundary (see
            // README.md, "LeaderPool").
            actions.retain(|a| !matches!(a, Action::Freeze(_) | Action::Reconnect(_)));
        }
        if s.now < self.config.horizon && !urgent && !self.quorum_due(s) {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        self.step(last, action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("at most one valid term", |m: &Self, s: &State| {
                (0..=m.config.pool_jobs as usize).all(|e| {
                    (0..s.clients.len())
                        .filter(|&c| m.valid_in(s, c, e))
                        .count()
                        <= 1
                })
            }),
            Property::always("tokens rise", |_: &Self, s: &State| !s.token_fell),
            Property::always("a leader eventually", |m: &Self, s: &State| {
                !m.liveness_due(s) || (0..s.clients.len()).any(|c| m.valid(s, c))
            }),
            Property::always("each slot succeeds at most once", |_: &Self, s: &State| {
                s.succeeded.iter().all(|&n| n <= 1)
            }),
            Property::always(
                "no two attempts of a slot at once",
                |m: &Self, s: &State| {
                    (0..m.config.slots)
                        .all(|i| (0..s.jobs.len()).filter(|&c| m.run_live(s, c, i)).count() <= 1)
                },
            ),
            Property::always("attempt tokens rise", |_: &Self, s: &State| {
                !s.attempt_token_fell
            }),
            Property::always(
                "a run's end is recorded only by the term that started it",
                |_: &Self, s: &State| !s.foreign_end,
            ),
            Property::always(
                "job writes only in the newest term",
                |_: &Self, s: &State| !s.stale_write,
            ),
            Property::always("a due slot runs", |m: &Self, s: &State| {
                !m.jobs_on() || !m.liveness_due(s) || m.job_live(s)
            }),
            Property::always(
                "assignment writes only from the current coordinator",
                |_: &Self, s: &State| !s.stale_assign,
            ),
            Property::always("every job is led by its assignee", |m: &Self, s: &State| {
                !m.pool_on() || !m.liveness_due(s) || m.pool_settled(s).0
            }),
            Property::always(
                "no member leads more than its share",
                |m: &Self, s: &State| !m.pool_on() || !m.liveness_due(s) || m.pool_settled(s).1,
            ),
            Property::always("no node outlives its session", |_: &Self, s: &State| {
                Self::nodes_of_live_sessions(s)
            }),
            Property::always("no node is left behind", |m: &Self, s: &State| {
                !m.liveness_due(s) || Self::nodes_held(s)
            }),
            Property::always(
                "a session is given up only once the quorum expired it",
                |_: &Self, s: &State| !s.gave_up_live,
            ),
        ]
    }
}

impl ElectionModel {
    /// Every node at the quorum leader, in every election, belongs to a session the quorum
    /// leader holds alive: its owner's current session, not yet expired (ZooKeeper expires a
    /// session and deletes its ephemeral nodes in one transaction, `closeSession`).
    fn nodes_of_live_sessions(s: &State) -> bool {
        let live = |n: &Node| {
            s.sessions
                .get(n.owner as usize)
                .is_some_and(|x| x.alive && x.epoch == n.epoch)
        };
        s.nodes.iter().all(live) && s.parked.iter().all(|p| p.nodes.iter().all(live))
    }

    /// Every node at the quorum leader, in every election, is the node its owner's contender
    /// holds in that election: none is left behind by a create whose reply was lost (so a live
    /// session owns at most one node per election).
    fn nodes_held(s: &State) -> bool {
        let held = |n: &Node, node: Option<u8>| node == Some(n.seq);
        s.nodes.iter().all(|n| {
            s.clients
                .get(n.owner as usize)
                .is_some_and(|cl| held(n, cl.node))
        }) && s.parked.iter().all(|p| {
            p.nodes
                .iter()
                .all(|n| p.cts.get(n.owner as usize).is_some_and(|ct| held(n, ct.1)))
        })
    }

    /// Every step but `Tick`.
    fn protocol_actions(&self, s: &State, actions: &mut Vec<Action>) {
        if self.config.leader_change {
            self.quorum_actions(s, actions);
        }
        if self.config.lag {
            self.lag_actions(s, actions);
        }
        if s.cut {
            actions.push(Action::Heal);
        } else if s.budget > 0 && !self.pool_on() && !self.config.leader_change {
            // The pool's configuration has freezes and reconnects for faults (see README.md).
            actions.push(Action::Cut);
        }
        if s.budget > 0 && !self.pool_on() && !self.config.leader_change {
            for n in s.nodes.iter().skip(1) {
                actions.push(Action::ForeignDelete(n.seq));
            }
        }
        for (i, cl) in s.clients.iter().enumerate() {
            let c = i as u8;
            if cl.frozen {
                actions.push(Action::Unfreeze(c));
                continue;
            }
            let sess = &s.sessions[i];
            let reach = Self::reaches_leader(s, cl.server);
            if self.config.leader_change && self.quorum_client_actions(s, i, actions) {
                continue;
            }
            if s.budget > 0 {
                actions.push(Action::Freeze(c));
                if self.config.leader_change {
                    if self.revalidates(s, cl.server.other(), i) {
                        actions.push(Action::Reconnect(c));
                    }
                } else if cl.server.other() == Server::L
                    || (!s.cut && !self.refused_at_lagging_f(s, i))
                {
                    actions.push(Action::Reconnect(c));
                } else if cl.server.other() == Server::F && self.refused_at_lagging_f(s, i) {
                    actions.push(Action::Resume(c));
                }
            }
            if Self::awaits_listing(s, i) {
                // The answer may be handled before or after the client hears that its session
                // expired; the contender takes no other step while it awaits it.
                actions.push(Action::HandleListing(c));
                if !sess.alive && reach {
                    actions.push(Action::SessionExpired(c));
                }
                continue;
            }
            if !sess.alive && reach {
                actions.push(Action::SessionExpired(c));
                continue;
            }
            self.contender_actions(s, i, actions);
            if self.pool_on() {
                self.pool_actions(s, i, actions);
            }
            if self.jobs_on() {
                self.job_actions(s, i, actions);
            }
        }
    }

    /// The contender core's steps of client `i` in the election whose nodes are in `s.nodes`
    /// (the pool's other elections are swapped in for it: see [`State::parked`]).
    fn contender_actions(&self, s: &State, i: usize, actions: &mut Vec<Action>) {
        let c = i as u8;
        let cl = &s.clients[i];
        let sess = &s.sessions[i];
        let view = self.view(s, cl.server);
        let reach = Self::reaches_leader(s, cl.server);
        {
            // A server answers pings and reads for a session it believes alive: `L` knows, a
            // cut-off `F` does not.
            let answers = if s.isolated.is_some() {
                self.answers_isolated(s, i)
            } else {
                sess.alive || (cl.server == Server::F && s.cut)
            };
            match cl.phase {
                Phase::Idle => {
                    if sess.alive && reach && s.next_seq < self.config.max_nodes {
                        actions.push(Action::Join(c));
                        if s.budget > 0 && !self.pool_on() && !self.config.leader_change {
                            actions.push(Action::JoinReplyLost(c));
                        }
                    }
                }
                Phase::Lost => {
                    if sess.alive && reach {
                        actions.push(Action::Recover(c));
                    }
                }
                Phase::List => {
                    if answers {
                        actions.push(self.list_action(c));
                    }
                }
                Phase::First => {
                    if cl.lease > s.now || !self.on(Rule::TermStartsOnProvenLease) {
                        actions.push(Action::Claim(c));
                    }
                }
                Phase::Waiting { pred, wconn, .. } => {
                    if !view.iter().any(|n| n.seq == pred) {
                        actions.push(Action::PredDeleted(c));
                    } else if wconn != cl.conn && answers {
                        // After a reconnect the contender lists again.
                        actions.push(self.list_action(c));
                    }
                }
                Phase::Relinquish => {
                    if sess.alive && reach {
                        actions.push(Action::Relinquish(c));
                    }
                }
                Phase::Leading => {
                    if cl.lease <= s.now && self.on(Rule::TermEndsAtDeadline) {
                        actions.push(Action::EndTerm(c));
                    }
                    // A release is followed by a new create: only while a sequence is left. The
                    // job's leader (a selector) does not release of its own accord.
                    if sess.alive
                        && reach
                        && s.next_seq < self.config.max_nodes
                        && !self.jobs_on()
                        && !self.pool_on()
                    {
                        actions.push(Action::Release(c));
                    }
                }
            }
            if let Some(own) = cl.node {
                // The watch on our node is the session's (see `Claim`).
                let watched = !matches!(cl.phase, Phase::Idle | Phase::Lost)
                    && cl.node_epoch == s.sessions[i].epoch;
                if watched && !view.iter().any(|n| n.seq == own) {
                    actions.push(Action::OwnNodeGone(c));
                }
            }
        }
    }

    /// The state after `action`, with the job's loop of an ended term reset.
    fn step(&self, last: &State, action: Action) -> Option<State> {
        if let Some((c, e)) = self.parked_step(action) {
            // A contender's step in a job's election: that election swapped in.
            let mut s = self.step_core(&Self::swapped(last, e), pool::retag(action, c))?;
            Self::swap(&mut s, e);
            self.pool_after(last, &mut s, action);
            return Some(s);
        }
        let mut s = self.step_core(last, action)?;
        if self.config.lag && action != Action::Tick {
            self.lag_after(last, &mut s, action);
        }
        if self.jobs_on() {
            self.job_after(&mut s);
        }
        if self.pool_on() {
            self.pool_after(last, &mut s, action);
        }
        Some(s)
    }

    /// The state after `action`.
    fn step_core(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let now = s.now;
        let late = now + self.config.recovery > self.config.horizon;
        match action {
            Action::Tick => self.tick(&mut s),
            Action::Cut => {
                // `F` keeps what it had applied (a lagging `F`, one write less than `L`).
                s.f_view = Some(self.view(&s, Server::F).to_vec());
                s.cut = true;
                s.budget -= 1;
                s.late_fault |= late;
            }
            Action::Heal => {
                s.cut = false;
                s.f_view = None;
                Self::relay(&mut s);
                s.late_fault |= late;
            }
            Action::Freeze(c) => {
                if self.jobs_on() && self.valid(&s, c as usize) {
                    // Frozen right after the fence's own check of the term passed.
                    let j = &mut s.jobs[c as usize];
                    j.armed = j.loaded;
                }
                s.clients[c as usize].frozen = true;
                s.budget -= 1;
                s.late_fault |= late;
            }
            Action::Unfreeze(c) => {
                s.clients[c as usize].frozen = false;
                s.late_fault |= late;
            }
            Action::ForeignDelete(seq) => {
                self.delete(&mut s, seq);
                s.budget -= 1;
                s.late_fault |= late;
            }
            Action::Reconnect(c) if self.config.leader_change => {
                s.budget -= 1;
                s.late_fault |= late;
                let c = c as usize;
                let to = s.clients[c].server.other();
                self.quorum_connect(&mut s, c, to);
            }
            Action::Reconnect(c) | Action::Resume(c) => {
                let c = c as usize;
                s.budget -= 1;
                s.late_fault |= late;
                let cl = &mut s.clients[c];
                cl.server = cl.server.other();
                cl.conn += 1;
                if !s.sessions[c].alive {
                    // The server revalidates the session with `L` and says it expired.
                    self.new_session(&mut s, c);
                    return Some(s);
                }
                // The server revalidated the session with `L`: a touch there, and an answered
                // heartbeat that a later `sync` proves.
                s.sessions[c].last_touch = now;
                cl.unproven = Some(now);
                if matches!(action, Action::Resume(_)) {
                    self.resumed(&mut s, c);
                }
                let cl = &mut s.clients[c];
                // Standard policy: a suspension ends the term; the contender lists again (the
                // job's selector relinquishes its node).
                if self.config.slots > 0 && cl.phase == Phase::Leading {
                    cl.phase = Phase::Relinquish;
                } else if matches!(cl.phase, Phase::Leading | Phase::First) {
                    cl.phase = Phase::List;
                }
            }
            Action::Join(c) | Action::JoinReplyLost(c) => {
                let c = c as usize;
                let seq = s.next_seq;
                s.next_seq += 1;
                s.nodes.push(Node {
                    seq,
                    owner: c as u8,
                    epoch: s.sessions[c].epoch,
                });
                Self::touch(&mut s, c);
                if s.clients[c].server == Server::F {
                    // `F` answers our create once it has applied it, and everything before it.
                    self.catch_up(&mut s);
                }
                if matches!(action, Action::JoinReplyLost(_)) {
                    s.budget -= 1;
                    s.late_fault |= late;
                    s.clients[c].phase = Phase::Lost;
                } else {
                    s.clients[c].node = Some(seq);
                    s.clients[c].node_epoch = s.sessions[c].epoch;
                    self.apply_listing(&mut s, c);
                }
            }
            Action::Recover(c) => {
                let c = c as usize;
                let epoch = s.sessions[c].epoch;
                Self::touch(&mut s, c);
                if !self.on(Rule::ProtectedCreateAdoptsOwnNode) {
                    s.clients[c].phase = Phase::Idle;
                    return Some(s);
                }
                let server = s.clients[c].server;
                if server == Server::F && self.on(Rule::RecoverSyncsFirst) {
                    // The `sync`: `F` applies everything `L` committed before it answers.
                    self.catch_up(&mut s);
                }
                let adopt_any = !self.on(Rule::NoClaimFromNodeOfEarlierSession);
                let view = self.view(&s, server).to_vec();
                let found = view
                    .iter()
                    .find(|n| n.owner as usize == c && (adopt_any || n.epoch == epoch))
                    .copied();
                // Every other node with our prefix that the listing shows is deleted.
                let others: Vec<u8> = view
                    .iter()
                    .filter(|n| n.owner as usize == c && Some(n.seq) != found.map(|f| f.seq))
                    .map(|n| n.seq)
                    .collect();
                self.remove(&mut s, |n| others.contains(&n.seq));
                match found {
                    Some(n) => {
                        s.clients[c].node = Some(n.seq);
                        s.clients[c].node_epoch = n.epoch;
                        self.apply_listing(&mut s, c);
                    }
                    None => s.clients[c].phase = Phase::Idle,
                }
            }
            Action::List(c) => {
                let c = c as usize;
                Self::touch(&mut s, c);
                self.apply_listing(&mut s, c);
            }
            Action::Claim(c) => {
                let c = c as usize;
                let cl = &s.clients[c];
                let own_session = cl.node_epoch == s.sessions[c].epoch;
                // Events already delivered are seen before the next step: a node that is gone
                // fired the watch on it. The watch is the session's: ZooKeeper drops a
                // session's watches when it expires, so a node of an earlier session has none.
                let view = self.view(&s, cl.server);
                let present = cl.node.is_some_and(|own| view.iter().any(|n| n.seq == own));
                if own_session && !present {
                    s.clients[c].node = None;
                    s.clients[c].phase = Phase::Idle;
                    return Some(s);
                }
                if !own_session && self.on(Rule::NoClaimFromNodeOfEarlierSession) {
                    // The node of an earlier session is deleted and replaced.
                    if let Some(n) = cl.node {
                        self.delete(&mut s, n);
                    }
                    s.clients[c].node = None;
                    s.clients[c].phase = Phase::Idle;
                    return Some(s);
                }
                self.begin_term(&mut s, c);
            }
            Action::PredDeleted(c) => {
                let c = c as usize;
                let cl = s.clients[c];
                let Phase::Waiting {
                    pred, pos1, wconn, ..
                } = cl.phase
                else {
                    return None;
                };
                if !pos1 && self.on(Rule::ClaimOnEventOnlyAtPosition1) {
                    s.clients[c].phase = Phase::List;
                    return Some(s);
                }
                if wconn != cl.conn && self.on(Rule::ClaimOnEventNeedsSameConnection) {
                    s.clients[c].phase = Phase::List;
                    return Some(s);
                }
                // Our node's watch would have fired before the predecessor's event if our node
                // went first (zxid order on one connection); after a reconnect the replay comes
                // in watch order, so the poll proves nothing (the mutation above).
                let view = self.view(&s, cl.server);
                let mut own_present = cl.node.is_some_and(|own| view.iter().any(|n| n.seq == own));
                if self.config.late_own_event {
                    // Only a deletion of our node before the predecessor's is sure to be seen.
                    let at = |seq: u8| s.deleted.iter().position(|&d| d == seq);
                    let own_first = match (cl.node.and_then(at), at(pred)) {
                        (Some(o), Some(p)) => o < p,
                        (Some(_), None) => true,
                        _ => false,
                    };
                    own_present = !own_first;
                }
                let own_known = wconn == cl.conn;
                if !own_present && own_known && self.on(Rule::ClaimOnEventChecksOwnNode) {
                    s.clients[c].node = None;
                    s.clients[c].phase = Phase::Idle;
                    return Some(s);
                }
                self.begin_term(&mut s, c);
            }
            Action::OwnNodeGone(c) => {
                let cl = &mut s.clients[c as usize];
                cl.node = None;
                cl.phase = Phase::Idle;
            }
            Action::EndTerm(c) => {
                s.clients[c as usize].phase = if self.jobs_on() {
                    Phase::Relinquish
                } else {
                    Phase::First
                };
            }
            Action::Relinquish(c) => {
                let c = c as usize;
                Self::touch(&mut s, c);
                if let Some(n) = s.clients[c].node {
                    self.delete(&mut s, n);
                }
                s.clients[c].node = None;
                s.clients[c].phase = Phase::Idle;
            }
            Action::JobLoad(_)
            | Action::JobClaim(..)
            | Action::JobClaimReplyLost(..)
            | Action::JobSettle(..)
            | Action::JobGiveUp(_)
            | Action::JobEnd(..)
            | Action::JobPrune(..) => self.job_step(&mut s, action),
            Action::PoolFollow(_) | Action::PoolRead(_) | Action::PoolWrite(_) => {
                self.pool_step(&mut s, action)
            }
            Action::Release(c) => {
                let c = c as usize;
                Self::touch(&mut s, c);
                if let Some(n) = s.clients[c].node {
                    self.delete(&mut s, n);
                }
                s.clients[c].node = None;
                s.clients[c].phase = Phase::Idle;
            }
            Action::SessionExpired(c) => {
                let c = c as usize;
                self.new_session(&mut s, c);
            }
            Action::SendList(c) => {
                let c = c as usize;
                Self::touch(&mut s, c);
                let cl = &s.clients[c];
                let listing = Listing {
                    children: self.view(&s, cl.server).to_vec(),
                    epoch: s.sessions[c].epoch,
                    conn: cl.conn,
                };
                *s.listings.get_mut(c)? = Some(listing);
            }
            Action::HandleListing(c) => {
                let c = c as usize;
                let listing = s.listings.get_mut(c)?.take()?;
                if listing.epoch != s.sessions[c].epoch
                    && self.on(Rule::NoClaimFromNodeOfEarlierSession)
                {
                    // Answered on an earlier session: dropped (the new session's contender
                    // has started over).
                    return Some(s);
                }
                let cl = &s.clients[c];
                let phase = self.standing_in(&listing.children, cl.node, listing.conn);
                if phase == Phase::Idle {
                    s.clients[c].node = None;
                }
                s.clients[c].phase = phase;
            }
            Action::IsolateLeader(_)
            | Action::StepDown
            | Action::StaleHeartbeat(_)
            | Action::HearStaleExpired(_)
            | Action::Redial(_) => self.quorum_step(&mut s, action, late),
            Action::FCatchUp => self.catch_up(&mut s),
        }
        Some(s)
    }

    /// One tick: `F`'s ping replies carry its pending touches to `L` (unless it is cut off);
    /// time advances; `L` expires every session not touched for the timeout (deleting its
    /// ephemeral nodes); every running client sends its heartbeat: a `sync` through a server in
    /// touch with `L`, which proves the newest earlier answered touch, or a ping to a cut-off
    /// `F`, which proves nothing.
    fn tick(&self, s: &mut State) {
        if self.config.leader_change {
            self.quorum_tick(s);
            return;
        }
        if !s.cut {
            Self::relay(s);
        }
        s.now += 1;
        let now = s.now;
        let before = s.nodes.clone();
        self.expire_sessions(s);
        // The tick's expiries (`closeSession`), which `F` may not yet have applied.
        self.wrote(s, &before, false);
        for c in 0..s.clients.len() {
            let cl = s.clients[c];
            if cl.frozen {
                continue;
            }
            let alive = s.sessions[c].alive;
            match (cl.server, s.cut) {
                (Server::F, true) => {
                    // A ping: the cut-off follower answers it from its own state.
                    Self::touch(s, c);
                    let cl = &mut s.clients[c];
                    cl.unproven = Some(now);
                    if !self.on(Rule::LeaseNeedsLaterSync) {
                        cl.lease = cl.lease.max(now + TIMEOUT);
                    }
                }
                (server, _) if alive => {
                    if server == Server::F {
                        // The ping replies went out on the link before the forwarded `sync`.
                        Self::relay(s);
                        // `F` answers the `sync` once it has applied what came before it.
                        self.catch_up(s);
                    }
                    self.heard(s, c);
                    Self::touch(s, c);
                    let cl = &mut s.clients[c];
                    if let Some(j) = cl.unproven {
                        cl.lease = cl.lease.max(j + TIMEOUT);
                    }
                    if !self.on(Rule::LeaseAdvancesToEarlierTouch) {
                        cl.lease = cl.lease.max(now + TIMEOUT);
                    }
                    cl.unproven = Some(now);
                }
                _ => {}
            }
        }
    }
}

/// A property the checker found violated, with the counterexample.
#[derive(Clone, Debug)]
pub struct Violation {
    /// The property's name.
    pub property: &'static str,
    /// The counterexample, one readable line per step.
    pub steps: Vec<String>,
}

/// What one check found.
#[derive(Clone, Debug)]
pub struct Report {
    /// Unique states explored.
    pub states: usize,
    /// The greatest depth reached.
    pub depth: usize,
    /// Every property violated, in the order of [`Model::properties`].
    pub violations: Vec<Violation>,
}

/// Checks the model of `config` breadth first up to `max_depth` steps. With a mutation the
/// check stops at the first violation (the shortest counterexample, breadth first); without,
/// it explores every state within the bound.
pub fn check(config: Config, max_depth: usize) -> Report {
    use stateright::{Checker, HasDiscoveries};
    let mutated = config.mutation.is_some();
    let model = ElectionModel::new(config);
    let names: Vec<&'static str> = model.properties().iter().map(|p| p.name).collect();
    let describer = model.clone();
    let builder = model.checker().target_max_depth(max_depth);
    let builder = if mutated {
        builder.finish_when(HasDiscoveries::AnyFailures)
    } else {
        builder
    };
    let checker = builder.spawn_bfs().join();
    let discoveries = checker.discoveries();
    let mut violations = Vec::new();
    for name in names {
        let Some(path) = discoveries.get(name) else {
            continue;
        };
        let steps = path
            .clone()
            .into_vec()
            .into_iter()
            .filter_map(|(state, action)| action.map(|a| describer.describe(&state, &a)))
            .collect();
        violations.push(Violation {
            property: name,
            steps,
        });
    }
    Report {
        states: checker.unique_state_count(),
        depth: checker.max_depth(),
        violations,
    }
}
