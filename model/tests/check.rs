//! The unmutated model has no violation in a small configuration, and every mutation that the
//! model can show yields a counterexample.

use zookeeper_recipes_model::{Config, Rule, check};

/// Rules whose mutation no run of the model can show (defence in depth; see README.md).
const DEFENCE_IN_DEPTH: [Rule; 1] = [Rule::NoClaimFromNodeOfEarlierSession];

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
    assert!(report.states > 1000, "too few states: {}", report.states);
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
}

#[test]
fn every_mutation_yields_a_counterexample() {
    for rule in Rule::ALL {
        if DEFENCE_IN_DEPTH.contains(&rule) {
            continue;
        }
        let config = Config {
            clients: rule.clients_needed(),
            mutation: Some(rule),
            ..Config::default()
        };
        let report = check(config, 40);
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
            horizon: 5,
            budget: 1,
            mutation: Some(rule),
            ..Config::default()
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
