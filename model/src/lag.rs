//! A follower that lags while connected to the quorum leader ([`Config::lag`](crate::Config::lag)).
//!
//! ZooKeeper's followers apply the leader's commits asynchronously: a follower in touch with the
//! leader may answer a read before it has applied a create, a delete or a `closeSession` that the
//! leader already committed. What ZooKeeper guarantees, and what the model keeps:
//!
//! - **A server applies commits in zxid order**, and its watches fire when it applies the change.
//!   The model's lag is one write deep: `F`'s view (`State::f_view`) is `L`'s store as of one
//!   earlier write, so a lagging `F` misses exactly the newest write. `F` catches up
//!   (`FCatchUp`, a free step) before the next tick boundary: time does not pass while it lags.
//! - **A client's own write is seen by its next read on the same server**: the server answers a
//!   write only once it has applied it, and holds a session's reads behind its pending writes.
//!   So a write (a create, a delete, a new session's `createSession`) sent through `F` brings `F`
//!   up to date, also when its reply is lost (the session's next request at `F` waits for it).
//! - **`sync` and then a read is up to date as of the `sync`**: `F` answers a `sync` only once it
//!   has applied everything the leader committed before it. Recover's `sync` and the heartbeats'
//!   bring `F` up to date first.
//! - **One client's view never goes back in zxid order**: every answer carries the server's last
//!   applied zxid, and a server refuses a client whose last seen zxid is ahead of it
//!   (`lastZxid`). The model keeps, per client, whether it has seen the newest write
//!   (`State::behind`): a reconnect to a lagging `F` is refused unless the client is behind the
//!   newest write (it has not seen it: a create whose reply was lost, or a write by someone else
//!   while it talked to `F`).
//! - **A session resumed with a new client is not refused** (`Resume`): the library's session
//!   supervisor resumes a session with a new zookeeper-client when the old one gave up on it, and
//!   the new client's last seen zxid is 0, so the check above passes on a lagging `F`. The client
//!   then has no guarantee that its reads show what its session has already seen; the rule
//!   `resume-syncs-first` has it `sync` through its new server before its first read. With the
//!   `sync`, a resume lands where `FCatchUp` and then a reconnect land, so the rule adds no state.

use crate::{Action, ElectionModel, Node, Rule, Server, State};

impl ElectionModel {
    /// `F` is in touch with `L` but has not applied the newest write.
    pub(crate) fn lagging(&self, s: &State) -> bool {
        self.config.lag && !s.cut && s.f_view.is_some()
    }

    /// `server` answers from `L`'s newest state.
    fn up_to_date(&self, s: &State, server: Server) -> bool {
        match server {
            Server::L => true,
            Server::F => !s.cut && s.f_view.is_none(),
        }
    }

    /// A reconnect of client `c` to `F` is refused by ZooKeeper's `lastZxid` check: `F` lags
    /// behind a write the client has already seen.
    pub(crate) fn refused_at_lagging_f(&self, s: &State, c: usize) -> bool {
        self.lagging(s) && s.behind & (1 << c) == 0
    }

    /// A session resumed with a new client on `F` (`Resume`, not refused: the new client's last
    /// seen zxid is 0, so it is behind every write until it hears from an up-to-date server).
    /// With `resume-syncs-first` it `sync`s through `F` before its first read, which brings `F`
    /// up to date; mutated, its first read answers from `F`'s view as it is.
    pub(crate) fn resumed(&self, s: &mut State, c: usize) {
        s.behind |= 1 << c;
        if self.on(Rule::ResumeSyncsFirst) {
            self.catch_up(s);
        }
    }

    /// `F` applies every commit it has received (a `sync` through it, a write through it, the
    /// tick boundary): its watches fire.
    pub(crate) fn catch_up(&self, s: &mut State) {
        if self.lagging(s) {
            s.f_view = None;
        }
    }

    /// `L` committed a write (a change of its store from `before`): every client is behind it
    /// until it hears from an up-to-date server, and `F` has applied everything but it, unless
    /// the write went through `F` (`via_f`), which applies it before it answers.
    pub(crate) fn wrote(&self, s: &mut State, before: &[Node], via_f: bool) {
        if !self.config.lag || s.nodes == before {
            return;
        }
        s.behind = (1u8 << s.clients.len()) - 1;
        if s.cut {
            // A cut-off `F` keeps its copy until the heal.
            return;
        }
        s.f_view = if via_f { None } else { Some(before.to_vec()) };
    }

    /// Client `c` got an answer from its server: it has seen the newest write if the server
    /// had applied it.
    pub(crate) fn heard(&self, s: &mut State, c: usize) {
        if self.config.lag && self.up_to_date(s, s.clients[c].server) {
            s.behind &= !(1u8 << c);
        }
    }

    /// After a step other than `Tick` (whose expiry and heartbeats are handled in it): a write
    /// committed at `L` leaves `F` one write behind unless it went through `F`; a new session
    /// made through `F` brings `F` up to date (its `createSession` comes after every earlier
    /// commit); the client that got an answer has seen what its server had applied.
    pub(crate) fn lag_after(&self, last: &State, s: &mut State, action: Action) {
        let (client, answered) = match action {
            Action::Join(c)
            | Action::Recover(c)
            | Action::List(c)
            | Action::SendList(c)
            | Action::Release(c)
            | Action::Relinquish(c)
            | Action::Reconnect(c)
            | Action::Resume(c)
            | Action::SessionExpired(c) => (Some(c as usize), true),
            // A claim sends a request only to delete a node of an earlier session.
            Action::Claim(c) => (Some(c as usize), s.nodes != last.nodes),
            Action::JoinReplyLost(c) => (Some(c as usize), false),
            _ => (None, false),
        };
        let Some(c) = client else {
            // A foreign delete: another client's write, through neither server of the model.
            self.wrote(s, &last.nodes, false);
            return;
        };
        let via_f = s.clients[c].server == Server::F;
        self.wrote(s, &last.nodes, via_f);
        if via_f && s.sessions[c].epoch != last.sessions[c].epoch {
            // The new session's `createSession`, answered by `F` once applied.
            self.catch_up(s);
        }
        if answered {
            self.heard(s, c);
        }
    }

    /// `FCatchUp` is enabled.
    pub(crate) fn lag_actions(&self, s: &State, actions: &mut Vec<Action>) {
        if self.lagging(s) {
            actions.push(Action::FCatchUp);
        }
    }
}
