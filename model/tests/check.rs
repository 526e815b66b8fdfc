//! The unmutated model has no violation in a small configuration, and every mutation that the
//! model can show yields a counterexample.

#![allow(clippy::panic)]

use zookeeper_recipes_model::{Config, Rule, check};

/// Rules whose mutation no run of the model can show (defence in depth; see README.md).
const DEFENCE_IN_DEPTH: [Rule; 5] = [
    Rule::NoClaimFromNodeOfEarlierSession,
    Rule::JobWriteChecksLeaderNode,
    Rule::EndChecksClaimVersion,
    Rule::AssignmentWriteChecksMembershipNode,
    Rule::AssignmentWriteChecksVersion,
];

/// The configuration a rule's mutation is checked in (the job's for a job rule, the pool's for
/// a pool rule).
fn config_for(rule: Rule) -> Config {
    let base = if rule.is_job() {
        Config::job()
    } else if rule.is_leader_change() {
        Config::leader_change()
    } else if rule.is_pool() {
        Config::pool()
    } else {
        Config::default()
    };
    Config {
        clients: rule.clients_needed(),
        mutation: Some(rule),
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

#[test]
fn every_mutation_yields_a_counterexample() {
    for rule in Rule::ALL {
        if DEFENCE_IN_DEPTH.contains(&rule) {
            continue;
        }
        let report = check(config_for(rule), 40);
        assert!(
            !report.violations.is_empty(),
            "{}: no counterexample ({} states, depth {})",
            rule.name(),
            report.states,
            report.depth
        );
    }
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
fn the_unmutated_job_has_no_violation_in_its_default_configuration() {
    let report = check(Config::job(), 60);
    assert!(
        report.violations.is_empty(),
        "unexpected violations: {:#?}",
        report.violations
    );
    assert!(report.states > 100_000, "too few states: {}", report.states);
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
/// found with the tightest depth bound (`steps + 2`).
fn each_breaks_its_property_within_its_depth_bound(table: &[(Rule, &str, usize)]) {
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
    }
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

#[test]
fn the_unmutated_pool_has_no_violation_at_horizon_8() {
    let report = check(
        Config {
            horizon: 8,
            ..Config::pool()
        },
        60,
    );
    assert!(
        report.violations.is_empty(),
        "unexpected violations: {:#?}",
        report.violations
    );
    assert!(report.states > 100_000, "too few states: {}", report.states);
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
    let report = check(
        Config {
            budget: 1,
            ..Config::leader_change()
        },
        60,
    );
    assert!(
        report.violations.is_empty(),
        "unexpected violations: {:#?}",
        report.violations
    );
    assert!(report.states > 10_000, "too few states: {}", report.states);
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
