//! The scheduled job (`recipes/scheduled-job.md`) on top of the election: its leader is the
//! election's leader in one-term (selector) mode, and every write it makes is one fenced `multi`
//! whose first operation checks the leader's own election node, then versions.
//!
//! The store at the quorum leader holds `state` (the cursor and its version) and one record per
//! slot (`slots/<key>`: no record, `running`, `succeeded`, `failed`, `pending`, with its token,
//! attempt, failures and version). A leader's job loop, per term: **Load** (read `state` and the
//! records, then the term's first write, the sample: `state` set onto itself with its version);
//! **Recover** (a `running` record with the term's own token gives the term up; another
//! `running` record was cut off: retried with this term's token, or recorded `failed` once its
//! cut-off starts reach the maximum; a `pending` record is retried with this term's token);
//! **claim** the next due slot (create the record `running` and move the cursor, one multi);
//! the run's **end** (`succeeded`, `failed`, or with a retry left `pending`, with the version the
//! claim produced); **prune** a settled record. See `README.md`, "The scheduled job".

use crate::{Action, ElectionModel, Phase, Rule, State};

/// The most slots a configuration has.
pub const MAX_SLOTS: usize = 2;
/// Retries on failure (`retries(n, ..)`): a run that fails is run again once within its slot.
pub const RETRIES: u8 = 1;
/// Starts of a slot that were cut off before it is recorded `failed` (`max_attempts`).
pub const MAX_ATTEMPTS: u8 = 2;

/// The tick at which slot `i` comes due (the ensemble's clock is the model's real time).
pub fn due(i: usize) -> u8 {
    1 + 2 * i as u8
}

/// A slot record's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SlotState {
    /// No record (never started, or pruned).
    #[default]
    None,
    /// Claimed and started; no end recorded.
    Running,
    /// The run returned `Ok`.
    Succeeded,
    /// The run failed (no retry left), or a cut-off slot reached `max_attempts`.
    Failed,
    /// Waiting for its retry after a failure.
    Pending,
}

impl SlotState {
    fn is_final(self) -> bool {
        matches!(self, SlotState::Succeeded | SlotState::Failed)
    }
}

/// `slots/<key>` at the quorum leader (or as a leader last read or wrote it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Record {
    /// Its state.
    pub st: SlotState,
    /// The token of the last attempt.
    pub token: u8,
    /// The last attempt's number.
    pub attempt: u8,
    /// Attempts that returned an error.
    pub failures: u8,
    /// The node's version (0 when created; a delete and a create start it again).
    pub ver: u8,
    /// Ghost: the term (a number the model hands out, not stored by the recipe) whose claim
    /// made the last attempt.
    pub term: u8,
}

/// A run the leader's loop has started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Run {
    /// The slot.
    pub slot: u8,
    /// The record's version the claim produced.
    pub ver: u8,
    /// When it started.
    pub since: u8,
}

/// One client's job loop (the term's task), reset when its term ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Job {
    /// The term (the model's number for it) the loop runs in; 0: no term.
    pub term: u8,
    /// Load is done: `sver`, `cursor` and `view` are what it read and wrote since.
    pub loaded: bool,
    /// The version of `state` the loop knows.
    pub sver: u8,
    /// The cursor it knows (slots taken up: every slot below it has or had a record).
    pub cursor: u8,
    /// The records as it knows them.
    pub view: [Record; MAX_SLOTS],
    /// The run in progress.
    pub run: Option<Run>,
    /// The process was frozen right after the fence's own check passed (its term valid): its
    /// next write goes out without that check, however late it wakes.
    pub armed: bool,
    /// Mutation `run-stops-at-lease` only: a run of an ended term that goes on.
    pub stray: Option<u8>,
}

impl ElectionModel {
    pub(crate) fn jobs_on(&self) -> bool {
        self.config.slots > 0
    }

    /// The client's run on `slot` is going, by the model's real time: its term is valid (the run
    /// is aborted at the term's end, at the latest at its lease), or it is a stray run.
    pub(crate) fn run_live(&self, s: &State, c: usize, slot: u8) -> bool {
        let j = &s.jobs[c];
        let running = j.run.is_some_and(|r| r.slot == slot);
        let keeps_going = !self.on(Rule::RunStopsAtLease)
            && s.clients[c].phase == crate::Phase::Leading
            && j.term != 0;
        (running && (self.valid(s, c) || keeps_going)) || j.stray == Some(slot)
    }

    /// The job's actions of client `c` (not frozen, its term held).
    pub(crate) fn job_actions(&self, s: &State, c: usize, actions: &mut Vec<Action>) {
        let cl = &s.clients[c];
        let j = &s.jobs[c];
        if cl.phase != Phase::Leading || j.term == 0 {
            return;
        }
        // The fence's own check, before anything is sent: the term is valid (or the process was
        // frozen right after that check passed).
        // The server refuses every request of an expired session, whatever it carries.
        let may = cl.lease > s.now || j.armed;
        if !may || !Self::reaches_leader(s, cl.server) || !s.sessions[c].alive {
            return;
        }
        let ci = c as u8;
        if !j.loaded {
            actions.push(Action::JobLoad(ci));
            return;
        }
        // Prune (a history limit of none): a settled record goes first.
        if let Some(i) = (0..self.config.slots as usize).find(|&i| j.view[i].st.is_final()) {
            actions.push(Action::JobPrune(ci, i as u8));
            return;
        }
        if j.run.is_some() {
            actions.push(Action::JobEnd(ci, true));
            actions.push(Action::JobEnd(ci, false));
            return;
        }
        let token = cl.node.unwrap_or(0);
        let n = self.config.slots as usize;
        let claim = |i: usize, actions: &mut Vec<Action>| {
            actions.push(Action::JobClaim(ci, i as u8));
            if s.budget > 0 {
                actions.push(Action::JobClaimReplyLost(ci, i as u8));
            }
        };
        let own = (0..n).find(|&i| j.view[i].st == SlotState::Running && j.view[i].token == token);
        if own.is_some() && self.on(Rule::SlotRunningWithOwnTokenEndsTerm) {
            actions.push(Action::JobGiveUp(ci));
            return;
        }
        let recover = (0..n).find(|&i| match j.view[i].st {
            SlotState::Running => self.on(Rule::NewTermTakesUpCutOffSlots),
            SlotState::Pending => true,
            _ => false,
        });
        if let Some(i) = recover {
            let r = j.view[i];
            if r.st == SlotState::Running && r.attempt - r.failures >= MAX_ATTEMPTS {
                actions.push(Action::JobSettle(ci, i as u8));
            } else {
                claim(i, actions);
            }
        } else if let Some(i) = (0..n)
            .find(|&i| i >= j.cursor as usize && due(i) <= s.now && j.view[i].st == SlotState::None)
        {
            claim(i, actions);
        }
    }

    /// Job steps that time waits for: the loop's reads and writes, and the end of a run that
    /// has run for a tick (runs are at most a tick long, to bound the model).
    pub(crate) fn job_urgent(&self, s: &State, a: &Action) -> bool {
        match *a {
            Action::JobLoad(_)
            | Action::JobClaim(..)
            | Action::JobSettle(..)
            | Action::JobGiveUp(_)
            | Action::JobPrune(..) => true,
            Action::JobEnd(c, _) => s.jobs[c as usize].run.is_some_and(|r| r.since < s.now),
            _ => false,
        }
    }

    /// The fenced multi's first operation: the leader's own election node still exists.
    fn fence(&self, s: &State, c: usize) -> bool {
        let own = s.clients[c].node;
        !self.on(Rule::JobWriteChecksLeaderNode) || s.nodes.iter().any(|n| Some(n.seq) == own)
    }

    /// A job write landed: the ghost checks that it was the newest term's.
    fn landed(s: &mut State, c: usize) {
        if s.jobs[c].term != s.terms {
            s.stale_write = true;
        }
        s.jobs[c].armed = false;
    }

    /// A write was refused (fence, version, an existing node): nothing was written; the loop
    /// reads everything again.
    fn refused(s: &mut State, c: usize) {
        let j = &mut s.jobs[c];
        j.loaded = false;
        j.run = None;
        j.armed = false;
    }

    /// The job's step `action` of client `c`.
    pub(crate) fn job_step(&self, s: &mut State, action: Action) {
        match action {
            Action::JobLoad(c) => {
                let c = c as usize;
                if !self.fence(s, c) {
                    Self::refused(s, c);
                    return;
                }
                // Read `state` and the records, then set `state` onto itself with the version
                // read: the term's first write (the sample).
                Self::landed(s, c);
                s.job_sver += 1;
                let j = &mut s.jobs[c];
                j.loaded = true;
                j.sver = s.job_sver;
                j.cursor = s.job_cursor;
                j.view = s.records;
            }
            Action::JobClaim(c, i) | Action::JobClaimReplyLost(c, i) => {
                let c = c as usize;
                let i = i as usize;
                let j = s.jobs[c];
                let seen = j.view[i];
                let stored = s.records[i];
                let versions_ok = j.sver == s.job_sver
                    && if seen.st == SlotState::None {
                        // A create: it fails if the record exists.
                        stored.st == SlotState::None
                    } else {
                        stored.st != SlotState::None && stored.ver == seen.ver
                    };
                if !self.fence(s, c) || !versions_ok {
                    Self::refused(s, c);
                    return;
                }
                Self::landed(s, c);
                let own = s.clients[c].node.unwrap_or(0);
                let token = match seen.st {
                    SlotState::Pending
                        if seen.term != j.term && !self.on(Rule::RetryInNewTermTakesItsToken) =>
                    {
                        seen.token
                    }
                    SlotState::Running if !self.on(Rule::CutOffRetryTakesTermToken) => seen.token,
                    _ => own,
                };
                // Ghost: the attempt's token against the previous attempt's.
                if stored.st != SlotState::None || s.attempted[i] {
                    let prev = s.last_attempt[i];
                    let strict = prev.1 != j.term || prev.2;
                    if token < prev.0 || (strict && token == prev.0) {
                        s.attempt_token_fell = true;
                    }
                }
                let rec = crate::job::Record {
                    st: SlotState::Running,
                    token,
                    attempt: if seen.st == SlotState::None {
                        1
                    } else {
                        seen.attempt + 1
                    },
                    failures: if seen.st == SlotState::None {
                        0
                    } else {
                        seen.failures
                    },
                    ver: if stored.st == SlotState::None {
                        0
                    } else {
                        stored.ver + 1
                    },
                    term: j.term,
                };
                s.records[i] = rec;
                s.attempted[i] = true;
                // The previous attempt's end not recorded: the next start must carry a higher
                // token (a record found running was cut off).
                s.last_attempt[i] = (token, j.term, true);
                s.job_sver += 1;
                if self.on(Rule::ClaimMovesCursor) {
                    s.job_cursor = s.job_cursor.max(i as u8 + 1);
                }
                if matches!(action, Action::JobClaimReplyLost(..)) {
                    // The multi landed; its reply did not: the loop reads everything again.
                    s.budget -= 1;
                    s.late_fault |= s.now + self.config.recovery > self.config.horizon;
                    Self::refused(s, c);
                    return;
                }
                let now = s.now;
                let (sver, cursor) = (s.job_sver, s.job_cursor);
                let j = &mut s.jobs[c];
                j.sver = sver;
                j.cursor = cursor;
                j.view[i] = rec;
                j.run = Some(Run {
                    slot: i as u8,
                    ver: rec.ver,
                    since: now,
                });
            }
            Action::JobSettle(c, i) => {
                let c = c as usize;
                let i = i as usize;
                let seen = s.jobs[c].view[i];
                if !self.fence(s, c)
                    || s.records[i].ver != seen.ver
                    || s.records[i].st == SlotState::None
                {
                    Self::refused(s, c);
                    return;
                }
                Self::landed(s, c);
                let rec = Record {
                    st: SlotState::Failed,
                    ver: seen.ver + 1,
                    ..seen
                };
                s.records[i] = rec;
                s.last_attempt[i].2 = false;
                s.jobs[c].view[i] = rec;
            }
            Action::JobGiveUp(c) => {
                // The term is given up: the selector relinquishes (deletes its node) and queues
                // again; the next term takes the slot up as cut off, with a higher token.
                let c = c as usize;
                if let Some(n) = s.clients[c].node {
                    self.delete(s, n);
                }
                s.clients[c].node = None;
                s.clients[c].phase = Phase::Idle;
            }
            Action::JobEnd(c, ok) => {
                let c = c as usize;
                let Some(run) = s.jobs[c].run else {
                    return;
                };
                let i = run.slot as usize;
                let stored = s.records[i];
                let version_ok = stored.st != SlotState::None
                    && (stored.ver == run.ver || !self.on(Rule::EndChecksClaimVersion));
                if !self.fence(s, c) || !version_ok {
                    Self::refused(s, c);
                    return;
                }
                Self::landed(s, c);
                if stored.term != s.jobs[c].term {
                    s.foreign_end = true;
                }
                let failures = stored.failures + u8::from(!ok);
                let st = if ok {
                    s.succeeded[i] = s.succeeded[i].saturating_add(1);
                    SlotState::Succeeded
                } else if failures <= RETRIES {
                    SlotState::Pending
                } else {
                    SlotState::Failed
                };
                let rec = Record {
                    st,
                    failures,
                    ver: stored.ver + 1,
                    ..stored
                };
                s.records[i] = rec;
                s.last_attempt[i].2 = false;
                let j = &mut s.jobs[c];
                j.view[i] = rec;
                j.run = None;
            }
            Action::JobPrune(c, i) => {
                let c = c as usize;
                let i = i as usize;
                let seen = s.jobs[c].view[i];
                if !self.fence(s, c)
                    || s.records[i].st == SlotState::None
                    || s.records[i].ver != seen.ver
                {
                    Self::refused(s, c);
                    return;
                }
                Self::landed(s, c);
                s.records[i] = Record::default();
                s.jobs[c].view[i] = Record::default();
            }
            _ => {}
        }
    }

    /// After every step: a client whose term has ended loses its job loop (the run is aborted
    /// at the term's end, at the latest at its lease; under `run-stops-at-lease` it goes on).
    pub(crate) fn job_after(&self, s: &mut State) {
        for c in 0..s.jobs.len() {
            let j = s.jobs[c];
            if j.term != 0 && s.clients[c].phase != Phase::Leading {
                let stray = match j.run {
                    Some(r) if !self.on(Rule::RunStopsAtLease) => Some(r.slot),
                    _ => j.stray,
                };
                s.jobs[c] = Job {
                    stray,
                    ..Job::default()
                };
            }
        }
    }

    /// A term begins for client `c`: its job loop starts, with Load.
    pub(crate) fn job_begin(&self, s: &mut State, c: usize) {
        s.terms += 1;
        s.jobs[c] = Job {
            term: s.terms,
            ..Job::default()
        };
    }

    /// Bounded liveness of the job: see `README.md`.
    pub(crate) fn job_live(&self, s: &State) -> bool {
        let h = self.config.horizon;
        let any_run = (0..s.jobs.len()).any(|c| s.jobs[c].run.is_some());
        (0..self.config.slots as usize).all(|i| {
            if due(i) + crate::TIMEOUT + 2 > h {
                return true;
            }
            let live = (0..s.jobs.len()).any(|c| self.run_live(s, c, i as u8));
            let claimed = s.attempted[i] || any_run;
            let cut_off = s.records[i].st == SlotState::Running && !live;
            claimed && !cut_off
        })
    }
}
