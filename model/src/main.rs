//! `zookeeper-recipes-model`: checks the model of the election, lease and mutex protocol.
//!
//! ```text
//! check [--mutate RULE] [--max-depth D] [--clients N] [--horizon H] [--budget B]
//!       [--late-own-event]
//! check --list-mutations
//! replay FILE
//! ```
//!
//! `check` prints `states: N`, `depth: D`, `violations: K` and, for each violation, the
//! property's name and the counterexample's steps; it exits 0 when K = 0, 1 otherwise, 2 on a
//! usage error.
//!
//! `replay` validates one recorded trial history (format 1, see `trace`) against the model's
//! observable actions: it prints `events: N`, `mapped: M`, `divergences: K` and, for each
//! divergence, the event's index and the event, the abstract state's relevant part, and why the
//! model does not allow it; it exits 0 when K = 0, 1 otherwise, 2 on a usage error (no file, a
//! file that cannot be read, bad JSON, another format, events out of time order).

use std::process::ExitCode;
use std::time::Instant;

use zookeeper_recipes_model::trace::{Trace, check_order, replay};
use zookeeper_recipes_model::{Config, Rule, check};

/// The default depth bound: deep enough for the unmutated model to run to the horizon in every
/// state the bound leaves, and for every mutation's counterexample.
const DEFAULT_MAX_DEPTH: usize = 60;

fn usage(msg: &str) -> ExitCode {
    eprintln!("error: {msg}");
    eprintln!(
        "usage: zookeeper-recipes-model check [--mutate RULE] [--max-depth D] [--clients N] \
         [--horizon H] [--budget B] [--late-own-event] | check --list-mutations | replay FILE"
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
    let mut config = Config::default();
    let mut clients = None;
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
                        config.mutation = Some(rule);
                        Ok(())
                    }
                    None => Err(format!(
                        "unknown rule {name:?} (see check --list-mutations)"
                    )),
                },
            },
            "--max-depth" => number("--max-depth", args.next()).map(|d| depth = d),
            "--clients" => number("--clients", args.next()).map(|n| clients = Some(n)),
            "--horizon" => number("--horizon", args.next()).map(|h| config.horizon = h),
            "--budget" => number("--budget", args.next()).map(|b| config.budget = b),
            "--late-own-event" => {
                config.late_own_event = true;
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
    config.clients = clients.unwrap_or_else(|| config.mutation.map_or(2, Rule::clients_needed));
    if !(1..=4).contains(&config.clients) {
        return usage("--clients must be 1 to 4");
    }
    if depth == 0 {
        return usage("--max-depth must be at least 1");
    }
    eprintln!(
        "config: clients {}, horizon {} ticks, timeout {} ticks, fault budget {}, mutation {}, \
         late own-node event {}",
        config.clients,
        config.horizon,
        zookeeper_recipes_model::TIMEOUT,
        config.budget,
        config.mutation.map_or("none", Rule::name),
        config.late_own_event
    );
    let started = Instant::now();
    let report = check(config, depth);
    println!("states: {}", report.states);
    println!("depth: {}", report.depth);
    println!("violations: {}", report.violations.len());
    for v in &report.violations {
        println!("{}", v.property);
        for (i, step) in v.steps.iter().enumerate() {
            println!("  {}. {}", i + 1, step);
        }
    }
    eprintln!("time: {:.1} s", started.elapsed().as_secs_f64());
    if report.violations.is_empty() {
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
