//! `zookeeper-recipes-model`: checks the model of the election, lease and mutex protocol.
//!
//! ```text
//! check [--mutate RULE] [--max-depth D] [--clients N] [--horizon H] [--budget B]
//!       [--late-own-event] [--slots S] [--pool] [--in-flight] [--leader-change] [--lag]
//! check --list-mutations
//! replay FILE
//! ```
//!
//! `check` prints `states: N`, `depth: D`, `violations: K` and, for each violation, the
//! property's name and the counterexample's steps; it exits 0 when K = 0, 1 otherwise, 2 on a
//! usage error. Without `--mutate` and without a configuration flag it checks the default
//! configurations one after another (the election's, the scheduled job's, the job's with 3
//! clients, LeaderPool's, the election's with answers in flight, the election's with a quorum
//! leader that is replaced, the election's with a follower that lags) and the three lines carry the totals: the states summed, the greatest depth, the violations summed; each
//! configuration's figures go to stderr. A job rule's mutation, or `--slots S` (S > 0), checks
//! the job's configuration ([`Config::job`]) with the flags given; a pool rule's mutation, or
//! `--pool`, LeaderPool's ([`Config::pool`]). `--in-flight` ([`Config::in_flight`]) lets a
//! listing's answer be handled after it was sent; the mutation of a rule that needs it
//! ([`Rule::needs_in_flight`]) turns it on.
//! A leader-change rule's mutation, or `--leader-change`, checks the leader-change configuration
//! ([`Config::leader_change`]).
//! A lag rule's mutation, or `--lag`, checks the lag configuration ([`Config::lag`]): the
//! election's with a follower that lags while in touch with the quorum leader.
//!
//! `replay` validates one recorded trial history (format 1 or 2, see `trace`) against the model's
//! observable actions: it prints `events: N`, `mapped: M`, `divergences: K` and, for each
//! divergence, the event's index and the event, the abstract state's relevant part, and why the
//! model does not allow it; it exits 0 when K = 0, 1 otherwise, 2 on a usage error (no file, a
//! file that cannot be read, bad JSON, another format, events out of time order).

use std::process::ExitCode;
use std::time::Instant;

use zookeeper_recipes_model::trace::{Trace, check_order, replay};
use zookeeper_recipes_model::{Config, MAX_SLOTS, Rule, check};

/// The default depth bound: deep enough for the unmutated model to run to the horizon in every
/// state the bound leaves, and for every mutation's counterexample.
const DEFAULT_MAX_DEPTH: usize = 60;

fn usage(msg: &str) -> ExitCode {
    eprintln!("error: {msg}");
    eprintln!(
        "usage: zookeeper-recipes-model check [--mutate RULE] [--max-depth D] [--clients N] \
         [--horizon H] [--budget B] [--late-own-event] [--slots S] [--pool] [--in-flight] \
         [--leader-change] [--lag] \
         | check --list-mutations \
         | replay FILE"
    );
    ExitCode::from(2)
}

fn number<T: std::str::FromStr>(flag: &str, value: Option<String>) -> Result<T, String> {
    let Some(v) = value else {
        return Err(format!("{flag} needs a value"));
    };
    v.parse()
        .map_err(|_| format!("{flag}: not a valid number: {v:?}"))
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("check") => {}
        Some("replay") => return replay_command(args),
        Some(other) => return usage(&format!("unknown command {other:?}")),
        None => return usage("no command"),
    }
    let mut mutation = None;
    let mut clients = None;
    let mut horizon = None;
    let mut budget = None;
    let mut slots = None;
    let mut late_own_event = false;
    let mut pool = false;
    let mut in_flight = false;
    let mut leader_change = false;
    let mut lag = false;
    let mut depth = DEFAULT_MAX_DEPTH;
    let mut list = false;
    while let Some(flag) = args.next() {
        let parsed: Result<(), String> = match flag.as_str() {
            "--list-mutations" => {
                list = true;
                Ok(())
            }
            "--mutate" => match args.next() {
                None => Err("--mutate needs a rule name (see --list-mutations)".to_string()),
                Some(name) => match Rule::from_name(&name) {
                    Some(rule) => {
                        mutation = Some(rule);
                        Ok(())
                    }
                    None => Err(format!(
                        "unknown rule {name:?} (see check --list-mutations)"
                    )),
                },
            },
            "--max-depth" => number("--max-depth", args.next()).map(|d| depth = d),
            "--clients" => number("--clients", args.next()).map(|n| clients = Some(n)),
            "--horizon" => number("--horizon", args.next()).map(|h| horizon = Some(h)),
            "--budget" => number("--budget", args.next()).map(|b| budget = Some(b)),
            "--slots" => number("--slots", args.next()).map(|n| slots = Some(n)),
            "--late-own-event" => {
                late_own_event = true;
                Ok(())
            }
            "--pool" => {
                pool = true;
                Ok(())
            }
            "--in-flight" => {
                in_flight = true;
                Ok(())
            }
            "--leader-change" => {
                leader_change = true;
                Ok(())
            }
            "--lag" => {
                lag = true;
                Ok(())
            }
            other => Err(format!("unknown flag {other:?}")),
        };
        if let Err(msg) = parsed {
            return usage(&msg);
        }
    }
    if list {
        for rule in Rule::ALL {
            println!("{}", rule.name());
        }
        return ExitCode::SUCCESS;
    }
    if depth == 0 {
        return usage("--max-depth must be at least 1");
    }
    if slots.is_some_and(|n: u8| n as usize > MAX_SLOTS) {
        return usage(&format!("--slots must be 0 to {MAX_SLOTS}"));
    }
    let flagged = clients.is_some()
        || horizon.is_some()
        || budget.is_some()
        || slots.is_some()
        || late_own_event
        || pool
        || in_flight
        || leader_change
        || lag;
    let pool = pool || mutation.is_some_and(Rule::is_pool);
    if pool && (slots.is_some_and(|n| n > 0) || mutation.is_some_and(Rule::is_job)) {
        return usage("the pool's configuration has no scheduled job (--slots 0)");
    }
    if pool && in_flight {
        return usage("the pool's configuration has no answers in flight (no --in-flight)");
    }
    let in_flight = in_flight || (!pool && mutation.is_some_and(Rule::needs_in_flight));
    let job = slots.map_or(mutation.is_some_and(Rule::is_job), |n| n > 0);
    let leader_change = leader_change || mutation.is_some_and(Rule::is_leader_change);
    if leader_change && (job || pool) {
        return usage("the leader-change configuration is the election's (no job, no pool)");
    }
    if leader_change && in_flight {
        return usage("the leader-change configuration has no answers in flight (no --in-flight)");
    }
    let lag = lag || mutation.is_some_and(Rule::is_lag);
    if lag && (job || pool || leader_change) {
        return usage(
            "the lag configuration is the election's (no job, no pool, no leader change)",
        );
    }
    if slots == Some(0) && mutation.is_some_and(Rule::is_job) {
        return usage("a job rule's mutation needs the job (--slots 1 or 2)");
    }
    let build = |job: bool, pool: bool| {
        let mut config = if pool {
            Config::pool()
        } else if job {
            Config::job()
        } else if leader_change {
            Config::leader_change()
        } else if lag {
            Config::lag()
        } else {
            Config::default()
        };
        config.mutation = mutation;
        config.clients = clients.unwrap_or_else(|| mutation.map_or(2, Rule::clients_needed));
        if let Some(h) = horizon {
            config.horizon = h;
        }
        if let Some(b) = budget {
            config.budget = b;
        }
        if let Some(n) = slots {
            config.slots = n;
        }
        config.late_own_event = late_own_event;
        config.in_flight = in_flight && !pool;
        config
    };
    let configs = if mutation.is_none() && !flagged {
        // The election's, the job's, the job's with a third contender, LeaderPool's, the
        // election's with answers in flight, the election's with a quorum leader that is
        // replaced, and the election's with a follower that lags.
        vec![
            build(false, false),
            build(true, false),
            Config {
                clients: 3,
                ..build(true, false)
            },
            build(false, true),
            Config {
                in_flight: true,
                ..build(false, false)
            },
            Config::leader_change(),
            Config::lag(),
        ]
    } else {
        vec![build(job && !pool, pool)]
    };
    if configs.iter().any(|c| !(1..=4).contains(&c.clients)) {
        return usage("--clients must be 1 to 4");
    }
    let mut states = 0;
    let mut max_depth = 0;
    let mut violations = Vec::new();
    let all = Instant::now();
    for config in configs {
        eprintln!(
            "config: clients {}, horizon {} ticks, timeout {} ticks, fault budget {}, mutation {}, \
             late own-node event {}, slots {}{}{}{}",
            config.clients,
            config.horizon,
            zookeeper_recipes_model::TIMEOUT,
            config.budget,
            config.mutation.map_or("none", Rule::name),
            config.late_own_event,
            config.slots,
            if config.pool_jobs > 0 {
                format!(", pool jobs {}", config.pool_jobs)
            } else if config.leader_change {
                ", leader change".to_string()
            } else {
                String::new()
            },
            if config.in_flight {
                ", answers in flight"
            } else {
                ""
            },
            if config.lag { ", lagging follower" } else { "" }
        );
        let started = Instant::now();
        let report = check(config, depth);
        eprintln!(
            "  states {}, depth {}, violations {}, time {:.1} s",
            report.states,
            report.depth,
            report.violations.len(),
            started.elapsed().as_secs_f64()
        );
        states += report.states;
        max_depth = max_depth.max(report.depth);
        violations.extend(report.violations);
    }
    println!("states: {states}");
    println!("depth: {max_depth}");
    println!("violations: {}", violations.len());
    for v in &violations {
        println!("{}", v.property);
        for (i, step) in v.steps.iter().enumerate() {
            println!("  {}. {}", i + 1, step);
        }
    }
    eprintln!("time: {:.1} s", all.elapsed().as_secs_f64());
    if violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `replay FILE`: see the module docs.
fn replay_command(mut args: impl Iterator<Item = String>) -> ExitCode {
    let Some(file) = args.next() else {
        return usage("replay needs a history file");
    };
    if let Some(extra) = args.next() {
        return usage(&format!("replay takes one file; unexpected {extra:?}"));
    }
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) => return usage(&format!("reading {file}: {e}")),
    };
    let trace = match Trace::parse(&text).and_then(|t| check_order(&t).map(|()| t)) {
        Ok(trace) => trace,
        Err(e) => return usage(&format!("{file}: {e}")),
    };
    eprintln!(
        "history: {} (seed {}, session timeout {})",
        if trace.source.is_empty() {
            "unnamed"
        } else {
            &trace.source
        },
        trace.seed.map_or("none".to_string(), |s| s.to_string()),
        trace
            .session_timeout_ms
            .map_or("unknown".to_string(), |t| format!("{t} ms")),
    );
    let report = replay(&trace);
    println!("events: {}", report.events);
    println!("mapped: {}", report.mapped);
    println!("divergences: {}", report.divergences.len());
    for d in &report.divergences {
        println!("{d}");
    }
    if report.divergences.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
