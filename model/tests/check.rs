//! The unmutated model has no violation in a small configuration, and every mutation that the
//! model can show yields a counterexample.

#![allow(clippy::panic)]

use zookeeper_recipes_model::{Config, Rule, check};

/// Rules whose mutation no run of the model can show (defence in depth; see README.md).
const DEFENCE_IN_DEPTH: [Rule; 4] = [
    Rule::JobWriteChecksLeaderNode,
    Rule::EndChecksClaimVersion,
    Rule::AssignmentWriteChecksMembershipNode,
    Rule::AssignmentWriteChecksVersion,
];

/// The configuration a rule's mutation is checked in (the job's for a job rule, the pool's for
/// a pool rule, the lag configuration for a lag rule; answers in flight for a rule that needs
/// them).
fn config_for(rule: Rule) -> Config {
    let base = if rule.is_job() {
        Config::job()
    } else if rule.is_leader_change() {
        Config::leader_change()
    } else if rule.is_lag() {
        Config::lag()
    } else if rule.is_pool() {
        Config::pool()
    } else {
        Config::default()
    };
    Config {
        clients: rule.clients_needed(),
        mutation: Some(rule),
        in_flight: rule.needs_in_flight(),
        ..base
    }
}

#[test]
fn the_unmutated_model_has_no_violation_in_a_small_configuration() {
    let config = Config {
        horizon: 5,
        budget: 1,
        ..Config::default()
    };
    let report = check(config, 60);
    assert!(
        report.violations.is_empty(),
        "unexpected violations: {:#?}",
        report.violations
    );
    // The count before the leader-change slice: the slice leaves this state space as it was.
    assert_eq!(report.states, 47_162, "the election's state space changed");
}

#[test]
fn the_claim_on_the_event_is_safe_even_when_the_own_nodes_event_comes_late() {
    let config = Config {
        horizon: 5,
        budget: 2,
        late_own_event: true,
        ..Config::default()
    };
    let report = check(config, 60);
    assert!(
        report.violations.is_empty(),
        "unexpected violations: {:#?}",
        report.violations
    );
    // The count before the leader-change slice: the slice leaves this state space as it was.
    assert_eq!(report.states, 883_663, "the election's state space changed");
}

/// Each election rule's mutation (the contender core and the lease, `recipes/leader-latch.md`,
/// `recipes/mutex.md`): the property its counterexample breaks first, and the counterexample's
/// length (the shortest, breadth first, in the election's default configuration; 3 clients for
/// the rule that needs a waiter two places back, answers in flight for CURATOR-696's), checked with the tightest depth bound that
/// finds it (`steps + 2`, as for the job's).
const ELECTION_COUNTEREXAMPLES: [(Rule, &str, usize); 11] = [
    (Rule::LeaseNeedsLaterSync, "at most one valid term", 9),
    (
        Rule::LeaseAdvancesToEarlierTouch,
        "at most one valid term",
        9,
    ),
    (Rule::TermStartsOnProvenLease, "at most one valid term", 10),
    (Rule::TermEndsAtDeadline, "at most one valid term", 9),
    (Rule::ClaimOnlyWhenFirst, "at most one valid term", 4),
    (
        Rule::ClaimOnEventOnlyAtPosition1,
        "at most one valid term",
        6,
    ),
    (Rule::ClaimOnEventChecksOwnNode, "at most one valid term", 8),
    (
        Rule::ClaimOnEventNeedsSameConnection,
        "at most one valid term",
        9,
    ),
    (
        Rule::ProtectedCreateAdoptsOwnNode,
        "a leader eventually",
        16,
    ),
    (
        Rule::NoClaimFromNodeOfEarlierSession,
        "at most one valid term",
        14,
    ),
    (
        Rule::ExpireDeletesEphemerals,
        "no node outlives its session",
        6,
    ),
];

#[test]
fn every_election_mutation_breaks_its_property_within_its_depth_bound() {
    each_breaks_its_property_within_its_depth_bound(&ELECTION_COUNTEREXAMPLES);
}

#[test]
fn every_election_rule_is_either_shown_by_a_counterexample_or_defence_in_depth() {
    each_is_shown_or_defence_in_depth(
        |r| !r.is_job() && !r.is_pool() && !r.is_leader_change() && !r.is_lag(),
        &ELECTION_COUNTEREXAMPLES,
        "ELECTION_COUNTEREXAMPLES",
    );
}

#[test]
fn rule_names_round_trip() {
    for rule in Rule::ALL {
        assert_eq!(Rule::from_name(rule.name()), Some(rule));
    }
    assert_eq!(Rule::from_name("no-such-rule"), None);
}

#[test]
fn the_defence_in_depth_rules_find_nothing_in_a_small_configuration() {
    for rule in DEFENCE_IN_DEPTH {
        let config = Config {
            horizon: if rule.is_job() { 8 } else { 5 },
            budget: 1,
            ..config_for(rule)
        };
        let report = check(config, 60);
        assert!(
            report.violations.is_empty(),
            "{}: the model now shows it; move it out of DEFENCE_IN_DEPTH and into README's table: {:#?}",
            rule.name(),
            report.violations
        );
    }
}

#[test]
fn the_unmutated_model_with_answers_in_flight_has_no_violation_at_horizon_5() {
    let config = Config {
        horizon: 5,
        budget: 2,
        in_flight: true,
        ..Config::default()
    };
    unmutated_has_no_violation(config, 10_000);
}

/// Without answers in flight a listing is answered and handled in one step, so no listing
/// answered on the old session is handled on the new one: the rule's mutation shows nothing
/// (README.md, "Answers in flight").
#[test]
fn a_node_of_an_earlier_session_is_claimed_from_only_with_answers_in_flight() {
    let config = Config {
        horizon: 5,
        budget: 2,
        in_flight: false,
        ..config_for(Rule::NoClaimFromNodeOfEarlierSession)
    };
    let report = check(config, 60);
    assert!(
        report.violations.is_empty(),
        "the model now shows it without answers in flight: {:#?}",
        report.violations
    );
}

#[test]
fn the_unmutated_job_has_no_violation_in_its_default_configuration() {
    unmutated_has_no_violation(Config::job(), 100_000);
}

/// Each job rule's mutation: the property its counterexample breaks, and the counterexample's
/// length (the shortest, breadth first, in the job's default configuration), checked with the
/// tightest depth bound that finds it (stateright counts the initial state as depth 1, and
/// expands no state at the bound: `steps + 2`).
const JOB_COUNTEREXAMPLES: [(Rule, &str, usize); 6] = [
    (
        Rule::ClaimMovesCursor,
        "each slot succeeds at most once",
        10,
    ),
    (Rule::RetryInNewTermTakesItsToken, "attempt tokens rise", 12),
    (Rule::CutOffRetryTakesTermToken, "attempt tokens rise", 11),
    (
        Rule::SlotRunningWithOwnTokenEndsTerm,
        "attempt tokens rise",
        8,
    ),
    (Rule::NewTermTakesUpCutOffSlots, "a due slot runs", 25),
    (
        Rule::RunStopsAtLease,
        "no two attempts of a slot at once",
        11,
    ),
];

#[test]
fn every_job_mutation_breaks_its_property_within_its_depth_bound() {
    each_breaks_its_property_within_its_depth_bound(&JOB_COUNTEREXAMPLES);
}

#[test]
fn every_job_rule_is_either_shown_by_a_counterexample_or_defence_in_depth() {
    each_is_shown_or_defence_in_depth(Rule::is_job, &JOB_COUNTEREXAMPLES, "JOB_COUNTEREXAMPLES");
}

/// Each mutation of `table` breaks its property with a counterexample of exactly its length,
/// found with the tightest depth bound (`steps + 2`), and the counterexample is the one on file
/// in `model/counterexamples/RULE.txt`, which the specs' rule tables link to. With
/// `ZKR_BLESS_COUNTEREXAMPLES=1` the files are written instead of compared.
fn each_breaks_its_property_within_its_depth_bound(table: &[(Rule, &str, usize)]) {
    let bless = std::env::var_os("ZKR_BLESS_COUNTEREXAMPLES").is_some_and(|v| v == "1");
    for &(rule, property, steps) in table {
        let report = check(config_for(rule), steps + 2);
        let Some(v) = report.violations.first() else {
            panic!(
                "{}: no counterexample within {} steps ({} states)",
                rule.name(),
                steps,
                report.states
            );
        };
        assert_eq!(v.property, property, "{}: {:#?}", rule.name(), v.steps);
        assert_eq!(v.steps.len(), steps, "{}: {:#?}", rule.name(), v.steps);
        let text = counterexample_file(rule, v.property, &v.steps);
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("counterexamples")
            .join(format!("{}.txt", rule.name()));
        if bless {
            std::fs::write(&path, &text)
                .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
            continue;
        }
        let on_file = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; write it with ZKR_BLESS_COUNTEREXAMPLES=1 cargo test -p zookeeper-recipes-model --test check",
                path.display()
            )
        });
        assert!(
            on_file == text,
            "{}: the checker's counterexample is no longer the one on file (the specs link to it); \
             if the change is meant, write it again with ZKR_BLESS_COUNTEREXAMPLES=1 cargo test \
             -p zookeeper-recipes-model --test check and check the specs' tables.\n\
             --- on file\n{on_file}--- found\n{text}",
            path.display()
        );
    }
}

/// The text of `model/counterexamples/RULE.txt`: how to reproduce it, the property it breaks,
/// and the steps as `check` prints them.
fn counterexample_file(rule: Rule, property: &str, steps: &[String]) -> String {
    let mut clients = match rule.clients_needed() {
        2 => String::new(),
        n => format!(" --clients {n}"),
    };
    if rule.needs_in_flight() {
        clients.push_str(" --in-flight");
    }
    let mut text = format!(
        "# The shortest counterexample with `{name}` switched off (breadth first, in its default\n\
         # configuration; model/README.md names it). Reproduce it with\n\
         #   cargo run -p zookeeper-recipes-model --release -- check --mutate {name}{clients} --max-depth {depth}\n\
         # Written by model/tests/check.rs (ZKR_BLESS_COUNTEREXAMPLES=1), which compares it with the\n\
         # checker's on every test run.\n\
         property: {property}\n\
         steps: {n}\n",
        name = rule.name(),
        depth = steps.len() + 2,
        n = steps.len(),
    );
    for (i, step) in steps.iter().enumerate() {
        text.push_str(&format!("  {}. {step}\n", i + 1));
    }
    text
}

/// Every rule that `which` picks is listed in exactly one of `table` and `DEFENCE_IN_DEPTH`.
fn each_is_shown_or_defence_in_depth(
    which: fn(Rule) -> bool,
    table: &[(Rule, &str, usize)],
    name: &str,
) {
    for rule in Rule::ALL.into_iter().filter(|r| which(*r)) {
        let shown = table.iter().any(|(r, _, _)| *r == rule);
        assert!(
            shown != DEFENCE_IN_DEPTH.contains(&rule),
            "{}: list it in exactly one of {name} and DEFENCE_IN_DEPTH",
            rule.name()
        );
    }
}

/// Mutations of the election about a node's lifetime and its session: the property the
/// counterexample breaks, and the counterexample's length (the shortest, breadth first, in the
/// rule's configuration with `horizon`), checked with the tightest depth bound that finds it
/// (`steps + 2`). A property judged at the horizon has a shorter counterexample at a smaller
/// horizon (`protected-create-adopts-own-node`'s is 16 steps at the default 12); the others'
/// lengths are those of the default horizon (`no-claim-from-node-of-earlier-session`: with
/// answers in flight).
const LIFETIME_COUNTEREXAMPLES: [(Rule, &str, u8, usize); 3] = [
    (
        Rule::ExpireDeletesEphemerals,
        "no node outlives its session",
        12,
        6,
    ),
    (
        Rule::ProtectedCreateAdoptsOwnNode,
        "no node is left behind",
        5,
        9,
    ),
    (
        Rule::NoClaimFromNodeOfEarlierSession,
        "at most one valid term",
        5,
        14,
    ),
];

#[test]
fn each_lifetime_mutation_breaks_its_property_within_its_depth_bound() {
    for (rule, property, horizon, steps) in LIFETIME_COUNTEREXAMPLES {
        let config = Config {
            horizon,
            ..config_for(rule)
        };
        let report = check(config, steps + 2);
        let Some(v) = report.violations.iter().find(|v| v.property == property) else {
            panic!(
                "{}: {property:?} not broken within {steps} steps ({} states): {:#?}",
                rule.name(),
                report.states,
                report.violations
            );
        };
        assert_eq!(v.steps.len(), steps, "{}: {:#?}", rule.name(), v.steps);
    }
}

#[test]
fn the_unmutated_pool_has_no_violation_at_horizon_8() {
    unmutated_has_no_violation(
        Config {
            horizon: 8,
            ..Config::pool()
        },
        100_000,
    );
}

/// Each pool rule's mutation: the property its counterexample breaks, and the counterexample's
/// length (the shortest, breadth first, in the pool's default configuration), checked with the
/// tightest depth bound that finds it (`steps + 2`, as for the job's).
const POOL_COUNTEREXAMPLES: [(Rule, &str, usize); 2] = [
    (
        Rule::ReleaseJobsAssignedAway,
        "every job is led by its assignee",
        25,
    ),
    (
        Rule::CoordinatorFollowsMembership,
        "no member leads more than its share",
        21,
    ),
];

#[test]
fn every_pool_mutation_breaks_its_property_within_its_depth_bound() {
    each_breaks_its_property_within_its_depth_bound(&POOL_COUNTEREXAMPLES);
}

#[test]
fn every_pool_rule_is_either_shown_by_a_counterexample_or_defence_in_depth() {
    each_is_shown_or_defence_in_depth(Rule::is_pool, &POOL_COUNTEREXAMPLES, "POOL_COUNTEREXAMPLES");
}

/// The pool's elections are the model's election: with the membership latch's "first node
/// leads" switched off, two coordinators write, and the stale one's write lands.
#[test]
fn two_coordinators_are_caught_by_the_assignment_property() {
    let report = check(
        Config {
            mutation: Some(Rule::ClaimOnlyWhenFirst),
            ..Config::pool()
        },
        40,
    );
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.property == "assignment writes only from the current coordinator"),
        "{:#?}",
        report.violations
    );
}

#[test]
fn the_unmutated_leader_change_has_no_violation_at_budget_1() {
    unmutated_has_no_violation(
        Config {
            budget: 1,
            ..Config::leader_change()
        },
        10_000,
    );
}

/// Each leader-change rule's mutation: the property its counterexample breaks, and the
/// counterexample's length (the shortest, breadth first, in [`Config::leader_change`]), checked
/// with the tightest depth bound that finds it (`steps + 2`, as for the job's).
const LEADER_CHANGE_COUNTEREXAMPLES: [(Rule, &str, usize); 2] = [
    (Rule::ProofWaitsRelayAllowance, "at most one valid term", 12),
    (
        Rule::ExpiredBelievedWhenSaidTwice,
        "a session is given up only once the quorum expired it",
        10,
    ),
];

#[test]
fn every_leader_change_mutation_breaks_its_property_within_its_depth_bound() {
    each_breaks_its_property_within_its_depth_bound(&LEADER_CHANGE_COUNTEREXAMPLES);
}

#[test]
fn every_leader_change_rule_is_either_shown_by_a_counterexample_or_defence_in_depth() {
    each_is_shown_or_defence_in_depth(
        Rule::is_leader_change,
        &LEADER_CHANGE_COUNTEREXAMPLES,
        "LEADER_CHANGE_COUNTEREXAMPLES",
    );
}

#[test]
fn the_unmutated_model_with_a_lagging_follower_has_no_violation_at_horizon_5() {
    unmutated_has_no_violation(
        Config {
            horizon: 5,
            ..Config::lag()
        },
        100_000,
    );
}

/// Each lag rule's mutation: the property its counterexample breaks, and the counterexample's
/// length (the shortest, breadth first, in [`Config::lag`], horizon 8), checked with the
/// tightest depth bound that finds it (`steps + 2`, as for the job's).
const LAG_COUNTEREXAMPLES: [(Rule, &str, usize); 2] = [
    (Rule::RecoverSyncsFirst, "a leader eventually", 13),
    (Rule::ResumeSyncsFirst, "a leader eventually", 13),
];

#[test]
fn every_lag_mutation_breaks_its_property_within_its_depth_bound() {
    each_breaks_its_property_within_its_depth_bound(&LAG_COUNTEREXAMPLES);
}

#[test]
fn every_lag_rule_is_either_shown_by_a_counterexample_or_defence_in_depth() {
    each_is_shown_or_defence_in_depth(Rule::is_lag, &LAG_COUNTEREXAMPLES, "LAG_COUNTEREXAMPLES");
}

/// A lagging follower does not show a node of an earlier session to the new session's reads:
/// the new session's `createSession` is a write after the old session's `closeSession`, and a
/// server answers it only once it has applied both (zxid order); a reconnect to a server that
/// has not is refused (`lastZxid`). So without answers in flight the mutation of
/// `no-claim-from-node-of-earlier-session` shows nothing with the lag either (README.md, "A
/// follower that lags").
#[test]
fn a_lagging_follower_does_not_show_a_new_session_the_old_sessions_node() {
    let report = check(
        Config {
            horizon: 5,
            mutation: Some(Rule::NoClaimFromNodeOfEarlierSession),
            ..Config::lag()
        },
        60,
    );
    assert!(
        report.violations.is_empty(),
        "the model now shows it through the lag: {:#?}",
        report.violations
    );
    assert!(report.states > 100_000, "too few states: {}", report.states);
}

/// Checks `config` unmutated to the default depth bound: no violation, and more than
/// `min_states` states (a world that shrank by mistake would pass too easily).
fn unmutated_has_no_violation(config: Config, min_states: usize) {
    let report = check(config, 60);
    assert!(
        report.violations.is_empty(),
        "unexpected violations: {:#?}",
        report.violations
    );
    assert!(
        report.states > min_states,
        "too few states: {}",
        report.states
    );
}
