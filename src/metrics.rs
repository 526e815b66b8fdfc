//! Leadership and session metrics through the [`metrics`](https://docs.rs/metrics) facade
//! (crate feature `metrics`).
//!
//! With the feature on, the recipes record the metrics below wherever they log the matching
//! state change with `tracing`; install any `metrics` recorder (Prometheus, StatsD,
//! OpenTelemetry...) to export them. Without a recorder, or without the feature, recording costs
//! nothing. The repository's `health` example serves them with `metrics-exporter-prometheus`.
//!
//! Labels: `path` is the election (or lock) path as given to the recipe (after a chroot, as the
//! recipe sees it), `id` the participant id, `reason` a [`TermEnd`] name, `state` a
//! [`ConnectionState`] name.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `zookeeper_recipes_leader` | gauge | `path`, `id` | 1 while this participant holds a term on `path`, else 0 (client-go's `leader_election_master_status`) |
//! | `zookeeper_recipes_fencing_token` | gauge | `path`, `id` | the current term's fencing token; 0 when not leading (a zxid: exact up to 2^53) |
//! | `zookeeper_recipes_terms_started_total` | counter | `path`, `id` | terms won |
//! | `zookeeper_recipes_terms_ended_total` | counter | `path`, `id`, `reason` | terms ended, by [`TermEnd`] (`suspended`, `lost`, `read_only`, `node_deleted`, `deadline_passed`, `closed`, `interrupted`) |
//! | `zookeeper_recipes_time_to_leadership_seconds` | histogram | `path`, `id` | from joining the line (the node created) to winning the term |
//! | `zookeeper_recipes_terms_held` | gauge | | terms this process holds right now, over all paths |
//! | `zookeeper_recipes_deadline_misses_total` | counter | `path`, `id` | terms whose deadline ([`Leadership::valid_until`](crate::Leadership::valid_until)) passed before anything else ended them: a leader that was frozen or cut off |
//! | `zookeeper_recipes_leader_changes_total` | counter | `path` | handovers seen by a [`LeaderObserver`](crate::LeaderObserver): the leader it reports changed |
//! | `zookeeper_recipes_selector_overruns_total` | counter | `path` | [`LeaderSelector`](crate::LeaderSelector) closures aborted after their grace period |
//! | `zookeeper_recipes_connection_state_changes_total` | counter | `state` | connection state changes of every [`Session`](crate::Session) (`connected`, `suspended`, `reconnected`, `lost`, `read_only`, `closed`) |
//! | `zookeeper_recipes_session_losses_total` | counter | | sessions lost (`Lost`; a deliberate close is not counted) |
//!
//! The names are constants in this module, so that a dashboard or a test can refer to them.

use std::time::Duration;

use crate::fencing::{FencingToken, TermEnd};
use crate::state::ConnectionState;

/// 1 while this participant holds a term on `path`, else 0.
pub const LEADER: &str = "zookeeper_recipes_leader";
/// The current term's fencing token; 0 when not leading.
pub const FENCING_TOKEN: &str = "zookeeper_recipes_fencing_token";
/// Terms won.
pub const TERMS_STARTED: &str = "zookeeper_recipes_terms_started_total";
/// Terms ended, by reason.
pub const TERMS_ENDED: &str = "zookeeper_recipes_terms_ended_total";
/// From joining the line to winning the term, in seconds.
pub const TIME_TO_LEADERSHIP: &str = "zookeeper_recipes_time_to_leadership_seconds";
/// Terms this process holds right now.
pub const TERMS_HELD: &str = "zookeeper_recipes_terms_held";
/// Terms whose deadline passed before anything else ended them.
pub const DEADLINE_MISSES: &str = "zookeeper_recipes_deadline_misses_total";
/// Leader changes seen by a `LeaderObserver`.
pub const LEADER_CHANGES: &str = "zookeeper_recipes_leader_changes_total";
/// Selector closures aborted after their grace period.
pub const SELECTOR_OVERRUNS: &str = "zookeeper_recipes_selector_overruns_total";
/// Connection state changes.
pub const CONNECTION_STATE_CHANGES: &str = "zookeeper_recipes_connection_state_changes_total";
/// Sessions lost.
pub const SESSION_LOSSES: &str = "zookeeper_recipes_session_losses_total";

#[cfg(feature = "metrics")]
fn labels(path: &str, id: &str) -> [(&'static str, String); 2] {
    [("path", path.to_owned()), ("id", id.to_owned())]
}

/// A term began on `path` for `id`, `waited` after the node joined the line.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn term_started(path: &str, id: &str, token: FencingToken, waited: Duration) {
    #[cfg(feature = "metrics")]
    {
        let l = labels(path, id);
        // The leader gauge last: a scrape that sees it at 1 sees the rest of the term too.
        metrics::gauge!(TERMS_HELD).increment(1.0);
        metrics::counter!(TERMS_STARTED, &l).increment(1);
        metrics::histogram!(TIME_TO_LEADERSHIP, &l).record(waited.as_secs_f64());
        // A zxid as f64: exact while below 2^53 (an epoch below 2^21).
        #[allow(clippy::cast_precision_loss)]
        metrics::gauge!(FENCING_TOKEN, &l).set(token.get() as f64);
        metrics::gauge!(LEADER, &l).set(1.0);
    }
}

/// The term on `path` for `id` ended for `reason`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn term_ended(path: &str, id: &str, reason: TermEnd) {
    #[cfg(feature = "metrics")]
    {
        let l = labels(path, id);
        metrics::gauge!(LEADER, &l).set(0.0);
        metrics::gauge!(FENCING_TOKEN, &l).set(0.0);
        let [(_, p), (_, i)] = l.clone();
        metrics::counter!(TERMS_ENDED, "path" => p, "id" => i, "reason" => reason.as_str())
            .increment(1);
        if reason == TermEnd::DeadlinePassed {
            metrics::counter!(DEADLINE_MISSES, &l).increment(1);
        }
        metrics::gauge!(TERMS_HELD).decrement(1.0);
    }
}

/// A `LeaderObserver` on `path` reports a different leader (or none).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn leader_changed(path: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(LEADER_CHANGES, "path" => path.to_owned()).increment(1);
}

/// A selector on `path` aborted a closure after its grace period.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn selector_overrun(path: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(SELECTOR_OVERRUNS, "path" => path.to_owned()).increment(1);
}

/// A session's connection state changed to `state`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn connection_state(state: ConnectionState) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!(CONNECTION_STATE_CHANGES, "state" => state.as_str()).increment(1);
        if state == ConnectionState::Lost {
            metrics::counter!(SESSION_LOSSES).increment(1);
        }
    }
}
