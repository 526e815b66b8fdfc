//! Leadership and session metrics through the [`metrics`](https://docs.rs/metrics) facade
//! (crate feature `metrics`).
//!
//! With the feature on, the recipes record the metrics below wherever they log the matching
//! state change with `tracing`; install any `metrics` recorder (Prometheus, StatsD,
//! OpenTelemetry...) to export them. Without a recorder, or without the feature, recording costs
//! nothing. The repository's `health` example serves them with `metrics-exporter-prometheus`.
//!
//! Labels: `path` is the election (or lock) path as given to the recipe (after a chroot, as the
//! recipe sees it), `id` the participant id, `reason` a [`TermEnd`](crate::TermEnd) name,
//! `state` a [`ConnectionState`](crate::ConnectionState) name.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `zookeeper_recipes_leader` | gauge | `path`, `id` | 1 while this participant holds a term on `path`, else 0 (client-go's `leader_election_master_status`) |
//! | `zookeeper_recipes_fencing_token` | gauge | `path`, `id` | the current term's fencing token; 0 when not leading (a zxid: exact up to 2^53) |
//! | `zookeeper_recipes_terms_started_total` | counter | `path`, `id` | terms won |
//! | `zookeeper_recipes_terms_ended_total` | counter | `path`, `id`, `reason` | terms ended, by [`TermEnd`](crate::TermEnd) (`suspended`, `lost`, `read_only`, `node_deleted`, `deadline_passed`, `closed`, `interrupted`) |
//! | `zookeeper_recipes_time_to_leadership_seconds` | histogram | `path`, `id` | from joining the line (the node created) to winning the term |
//! | `zookeeper_recipes_terms_held` | gauge | | terms this process holds right now, over all paths |
//! | `zookeeper_recipes_deadline_misses_total` | counter | `path`, `id` | terms whose deadline ([`Leadership::valid_until`](crate::Leadership::valid_until)) passed before anything else ended them: a leader that was frozen or cut off |
//! | `zookeeper_recipes_leader_changes_total` | counter | `path` | handovers seen by a [`LeaderObserver`](crate::LeaderObserver): the leader it reports changed |
//! | `zookeeper_recipes_selector_overruns_total` | counter | `path` | [`LeaderSelector`](crate::LeaderSelector) closures aborted after their grace period |
//! | `zookeeper_recipes_foreign_nodes_total` | counter | `path` | foreign nodes a contender or an observer found in line on `path`: named like contenders but persistent (`ephemeralOwner == 0`), so that they never leave by themselves. Each is skipped (takes no place in line), logged with `error!`, and counted once by each contender or observer that finds it; a Curator peer still waits behind it. Alert on any increase |
//! | `zookeeper_recipes_connection_state_changes_total` | counter | `state` | connection state changes of every [`Session`](crate::Session) (`connected`, `suspended`, `reconnected`, `lost`, `read_only`, `closed`) |
//! | `zookeeper_recipes_session_losses_total` | counter | | sessions lost (`Lost`: the servers said the session expired, or the client gave up on it; a deliberate close is not counted) |
//! | `zookeeper_recipes_lease_lapses_total` | counter | | leases that lapsed: a session could not prove within its timeout that the quorum heard of it, so every term on it ended (the session itself was kept) |
//! | `zookeeper_recipes_job_slots_started_total` | counter | `path`, `id` | slots a [`ScheduledJob`](crate::job::ScheduledJob) replica claimed and started (retries and triggers included) |
//! | `zookeeper_recipes_job_slots_ended_total` | counter | `path`, `id`, `outcome` | slot ends this replica recorded: `succeeded`, `failed`, `parked` (a cut-off slot settled by the on-crash policy counts here too), or `abandoned` (the end was refused because the term was over; the slot stays open for the next leader) |
//! | `zookeeper_recipes_job_slots_not_run_total` | counter | `path`, `id`, `reason` | slots recorded as not run: `overlap`, `paused`, `catch_up` (each slot of a folded `missed` range counts) |
//! | `zookeeper_recipes_job_slot_retries_total` | counter | `path`, `id` | retries on failure this replica scheduled ([`ScheduledJobBuilder::retries`](crate::job::ScheduledJobBuilder::retries)): a run that returned an error, recorded `pending` (`retry`) to run again after the backoff. A cut-off run retried by the on-crash policy is not counted here (it starts again: `slots_started_total`) |
//! | `zookeeper_recipes_job_run_duration_seconds` | histogram | `path`, `id`, `outcome` | how long this replica's runs took, from the claim to the recorded end (`succeeded`, `failed`, `abandoned`) |
//! | `zookeeper_recipes_job_running` | gauge | `path`, `id` | 1 while this replica runs a slot, else 0 |
//! | `zookeeper_recipes_job_last_success_timestamp_seconds` | gauge | `path`, `id` | the ensemble's time (Unix seconds; the `mtime` of the job's writes, not this replica's clock) of the last slot end this replica recorded `succeeded`. For a "the nightly job has not succeeded for 26 h" alert, take the `max` over `id`: the replicas lead in turn, and a replica that just started has none |
//! | `zookeeper_recipes_job_clock_offset_seconds` | gauge | `path`, `id` | this replica's wall clock minus the ensemble's (positive: ahead), as last measured while it led the job; alert when its absolute value nears the job's clock tolerance |
//! | `zookeeper_recipes_job_clock_skew_terms_total` | counter | `path`, `id` | terms this replica gave up because its wall clock was off the ensemble's by more than the clock tolerance (it took up no slot in them) |
//!
//! A scheduled job's counters (slots started, ended by each outcome, not run by each reason,
//! retries, clock-skew terms) are exported at 0 from the replica's start, before anything
//! happened: an alert on `increase(...[1h]) > 0` then sees the first failure too.
//!
//! The names are constants in this module, so that a dashboard or a test can refer to them.
//!
//! This module is a leaf of the crate's module graph: its recorders take names and numbers, and
//! each layer maps its own events onto them (the session its states, the contender its terms,
//! the job its events), so that the lowest layer can record without the highest.

use std::time::Duration;

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
/// Foreign (persistent) nodes found in line.
pub const FOREIGN_NODES: &str = "zookeeper_recipes_foreign_nodes_total";
/// Connection state changes.
pub const CONNECTION_STATE_CHANGES: &str = "zookeeper_recipes_connection_state_changes_total";
/// Sessions lost.
pub const SESSION_LOSSES: &str = "zookeeper_recipes_session_losses_total";
/// Leases that lapsed (terms ended, session kept).
pub const LEASE_LAPSES: &str = "zookeeper_recipes_lease_lapses_total";
/// Slots a scheduled job's replica claimed and started.
pub const JOB_SLOTS_STARTED: &str = "zookeeper_recipes_job_slots_started_total";
/// Slot ends a scheduled job's replica recorded, by outcome.
pub const JOB_SLOTS_ENDED: &str = "zookeeper_recipes_job_slots_ended_total";
/// Slots recorded as not run, by reason.
pub const JOB_SLOTS_NOT_RUN: &str = "zookeeper_recipes_job_slots_not_run_total";
/// Retries on failure a scheduled job's replica scheduled.
pub const JOB_SLOT_RETRIES: &str = "zookeeper_recipes_job_slot_retries_total";
/// How long a scheduled job's runs took, by outcome, in seconds.
pub const JOB_RUN_DURATION: &str = "zookeeper_recipes_job_run_duration_seconds";
/// 1 while a scheduled job's replica runs a slot.
pub const JOB_RUNNING: &str = "zookeeper_recipes_job_running";
/// When a scheduled job's replica last recorded a slot `succeeded` (Unix seconds, the
/// ensemble's clock).
pub const JOB_LAST_SUCCESS: &str = "zookeeper_recipes_job_last_success_timestamp_seconds";
/// A scheduled job's replica's wall clock minus the ensemble's, in seconds.
pub const JOB_CLOCK_OFFSET: &str = "zookeeper_recipes_job_clock_offset_seconds";
/// Terms a scheduled job's replica gave up because its clock was off the ensemble's.
pub const JOB_CLOCK_SKEW_TERMS: &str = "zookeeper_recipes_job_clock_skew_terms_total";
/// Counter: inputs a job's leader refused, by `input`: `control` (a trigger jump beyond the
/// cap, a bad `trigger_for`, unparseable data), `state` (unparseable, or rewound behind the
/// history), `record` (a final record the job did not write), `clock` (a step of the
/// ensemble's clock).
pub const JOB_INPUTS_REFUSED: &str = "zookeeper_recipes_job_inputs_refused_total";

#[cfg(feature = "metrics")]
fn labels(path: &str, id: &str) -> [(&'static str, String); 2] {
    [("path", path.to_owned()), ("id", id.to_owned())]
}

/// A term with fencing token `token` began on `path` for `id`, `waited` after the node joined
/// the line.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn term_started(path: &str, id: &str, token: i64, waited: Duration) {
    #[cfg(feature = "metrics")]
    {
        let l = labels(path, id);
        // The leader gauge last: a scrape that sees it at 1 sees the rest of the term too.
        metrics::gauge!(TERMS_HELD).increment(1.0);
        metrics::counter!(TERMS_STARTED, &l).increment(1);
        metrics::histogram!(TIME_TO_LEADERSHIP, &l).record(waited.as_secs_f64());
        // A zxid as f64: exact while below 2^53 (an epoch below 2^21).
        #[allow(clippy::cast_precision_loss)]
        metrics::gauge!(FENCING_TOKEN, &l).set(token as f64);
        metrics::gauge!(LEADER, &l).set(1.0);
    }
}

/// The term on `path` for `id` ended for `reason` (a `TermEnd` name); `deadline_missed` when
/// its deadline passed before anything else ended it.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn term_ended(path: &str, id: &str, reason: &'static str, deadline_missed: bool) {
    #[cfg(feature = "metrics")]
    {
        let l = labels(path, id);
        metrics::gauge!(LEADER, &l).set(0.0);
        metrics::gauge!(FENCING_TOKEN, &l).set(0.0);
        let [(_, p), (_, i)] = l.clone();
        metrics::counter!(TERMS_ENDED, "path" => p, "id" => i, "reason" => reason).increment(1);
        if deadline_missed {
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

/// A contender or an observer on `path` found a foreign node in line (and skips it).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn foreign_node(path: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(FOREIGN_NODES, "path" => path.to_owned()).increment(1);
}

/// A session's connection state changed to `state` (a `ConnectionState` name); `lost` when the
/// session is gone.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn connection_state(state: &'static str, lost: bool) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!(CONNECTION_STATE_CHANGES, "state" => state).increment(1);
        if lost {
            metrics::counter!(SESSION_LOSSES).increment(1);
        }
    }
}

/// A session's lease lapsed: its terms end, the session is kept.
pub(crate) fn lease_lapsed() {
    #[cfg(feature = "metrics")]
    metrics::counter!(LEASE_LAPSES).increment(1);
}

#[cfg(feature = "job")]
/// A scheduled job's replica on `path` started: its counters are exported at 0 from now on,
/// one per outcome in `outcomes` and per reason in `reasons`, so that the first failed,
/// parked or missed slot is an increase a rule sees (Prometheus's `increase` over a counter
/// that first appears at 1 is 0). A counter this process already has keeps its count.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn job_started(path: &str, id: &str, outcomes: &[&str], reasons: &[&str]) {
    #[cfg(feature = "metrics")]
    {
        let l = labels(path, id);
        metrics::counter!(JOB_SLOTS_STARTED, &l).increment(0);
        metrics::counter!(JOB_SLOT_RETRIES, &l).increment(0);
        metrics::counter!(JOB_CLOCK_SKEW_TERMS, &l).increment(0);
        for input in ["control", "state", "record", "clock"] {
            let [(_, p), (_, i)] = l.clone();
            let refused = [("path", p), ("id", i), ("input", input.to_owned())];
            metrics::counter!(JOB_INPUTS_REFUSED, &refused).increment(0);
        }
        for outcome in outcomes {
            let [(_, p), (_, i)] = l.clone();
            let ended = [("path", p), ("id", i), ("outcome", (*outcome).to_owned())];
            metrics::counter!(JOB_SLOTS_ENDED, &ended).increment(0);
        }
        for reason in reasons {
            let [(_, p), (_, i)] = l.clone();
            let not_run = [("path", p), ("id", i), ("reason", (*reason).to_owned())];
            metrics::counter!(JOB_SLOTS_NOT_RUN, &not_run).increment(0);
        }
    }
}

#[cfg(feature = "job")]
/// A scheduled job's replica on `path` claimed and started a slot.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn job_slot_started(path: &str, id: &str) {
    #[cfg(feature = "metrics")]
    {
        let l = labels(path, id);
        metrics::counter!(JOB_SLOTS_STARTED, &l).increment(1);
        metrics::gauge!(JOB_RUNNING, &l).set(1.0);
    }
}

#[cfg(feature = "job")]
/// A scheduled job's replica on `path` recorded a slot's end as `outcome` (or had it refused:
/// `abandoned`), `run_time` after its claim if known; `succeeded_at_ms` is the ensemble's time of
/// a `succeeded` end.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn job_slot_ended(
    path: &str,
    id: &str,
    outcome: &str,
    run_time: Option<Duration>,
    succeeded_at_ms: Option<i64>,
) {
    #[cfg(feature = "metrics")]
    {
        let l = labels(path, id);
        let [(_, p), (_, i)] = l.clone();
        let ended = [("path", p), ("id", i), ("outcome", outcome.to_owned())];
        metrics::counter!(JOB_SLOTS_ENDED, &ended).increment(1);
        if let Some(took) = run_time {
            metrics::histogram!(JOB_RUN_DURATION, &ended).record(took.as_secs_f64());
        }
        if let Some(at) = succeeded_at_ms {
            // Unix milliseconds as f64 seconds: exact to the millisecond for millennia.
            #[allow(clippy::cast_precision_loss)]
            metrics::gauge!(JOB_LAST_SUCCESS, &l).set(at as f64 / 1000.0);
        }
    }
}

#[cfg(feature = "job")]
/// A scheduled job's replica on `path` recorded `count` slots as not run, for `reason`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn job_slots_not_run(path: &str, id: &str, reason: &str, count: u64) {
    #[cfg(feature = "metrics")]
    {
        let [(_, p), (_, i)] = labels(path, id);
        let l = [("path", p), ("id", i), ("reason", reason.to_owned())];
        metrics::counter!(JOB_SLOTS_NOT_RUN, &l).increment(count);
    }
}

#[cfg(feature = "job")]
/// A scheduled job's replica on `path` recorded a failed run to be retried.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn job_slot_retrying(path: &str, id: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(JOB_SLOT_RETRIES, &labels(path, id)).increment(1);
}

#[cfg(feature = "job")]
/// A scheduled job's replica on `path` gave up a term because its clock was off.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn job_clock_skew_term(path: &str, id: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(JOB_CLOCK_SKEW_TERMS, &labels(path, id)).increment(1);
}

#[cfg(feature = "job")]
/// A scheduled job's leader on `path` refused an input (`control`, `state`, `record`, `clock`).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn job_input_refused(path: &str, id: &str, input: &'static str) {
    #[cfg(feature = "metrics")]
    {
        let [(_, p), (_, i)] = labels(path, id);
        let l = [("path", p), ("id", i), ("input", input.to_owned())];
        metrics::counter!(JOB_INPUTS_REFUSED, &l).increment(1);
    }
}

#[cfg(feature = "job")]
/// A scheduled job's replica on `path` measured its wall clock `offset_ms` off the ensemble's.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn job_clock_offset(path: &str, id: &str, offset_ms: i64) {
    // Milliseconds as f64 seconds: exact for any offset a clock can have.
    #[cfg(feature = "metrics")]
    #[allow(clippy::cast_precision_loss)]
    metrics::gauge!(JOB_CLOCK_OFFSET, &labels(path, id)).set(offset_ms as f64 / 1000.0);
}

/// A scheduled job's replica on `path` stopped running a slot (its end recorded, refused, or
/// its loop gone).
#[cfg(feature = "job")]
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn job_idle(path: &str, id: &str) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(JOB_RUNNING, &labels(path, id)).set(0.0);
}
