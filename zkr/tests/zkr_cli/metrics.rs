//! `--metrics-addr` (issue 28, "Health and alerts"): the library's metrics in the Prometheus
//! text format and the `/ready` and `/leader` probes, scraped from the real binary with a plain
//! HTTP GET over TCP while replicas run against real ZooKeeper. Each test owns its job path;
//! every wait is bounded and says what did not happen.

use zookeeper_recipes_rigs::fixtures as common;

use std::time::Duration;

use crate::FAULTS;
use common::zkr::{Zkr, zkr};
use common::{BOUND, shared_server, zookeeper};
use nix::sys::signal::Signal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_recipes_testing as testing;

/// `GET target` on `addr`: the status code and the body.
async fn get(addr: &str, target: &str) -> (u16, String) {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok::<String, std::io::Error>(response)
    };
    let response = tokio::time::timeout(BOUND, exchange)
        .await
        .unwrap_or_else(|_| panic!("GET {target} on {addr}: no answer within {BOUND:?}"))
        .unwrap_or_else(|e| panic!("GET {target} on {addr}: {e}"));
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("GET {target}: not an HTTP response: {response:?}"));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("GET {target}: no status in {head:?}"));
    (status, body.to_owned())
}

/// Polls `GET target` until it answers `status`, for at most `BOUND`.
async fn until_status(addr: &str, target: &str, status: u16, what: &str) -> String {
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let (got, body) = get(addr, target).await;
        if got == status {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: GET {target} still answers {got} ({body:?}) after {BOUND:?}, not {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A replica serving its metrics on a port of its choosing, and the address it announced.
async fn replica(connect: &str, id: &str, path: &str) -> (Zkr, String) {
    replica_with(connect, id, path, "6s").await
}

async fn replica_with(connect: &str, id: &str, path: &str, session: &str) -> (Zkr, String) {
    let args = [
        "--session-timeout",
        session,
        "cron",
        "run",
        path,
        "--id",
        id,
        "--every",
        "1s",
        "--metrics-addr",
        "127.0.0.1:0",
        "--",
        "true",
    ];
    let mut z = Zkr::supervisor(connect, id, &args);
    let line = z
        .wait_for("metrics_listening", BOUND, "no metrics_listening line")
        .await;
    let addr = line.str("addr").to_owned();
    (z, addr)
}

/// The value of the sample `name{...}` whose labels contain every one of `labels`.
fn sample(metrics: &str, name: &str, labels: &[&str]) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix('{')?;
        let (set, value) = rest.split_once("} ")?;
        labels
            .iter()
            .all(|want| set.contains(want))
            .then(|| value.trim().parse().ok())?
    })
}

#[tokio::test]
async fn a_foreign_node_ahead_of_the_replicas_is_skipped_and_counted() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-foreign");
    let election = format!("{path}/leader");
    // A persistent node named like a selector's, sorting first in the job's election: before,
    // every replica waited behind it for good (no slot ever ran); now it is skipped, logged and
    // counted.
    let zk = common::client(connect).await;
    let open = zookeeper_client::Acls::anyone_all();
    zk.mkdir(
        &election,
        &zookeeper_client::CreateMode::Persistent.with_acls(open),
    )
    .await
    .unwrap();
    let foreign = format!("{election}/x-lock-0000000000");
    zk.create(
        &foreign,
        b"stuck",
        &zookeeper_client::CreateMode::Persistent.with_acls(open),
    )
    .await
    .unwrap();
    let (mut a, a_addr) = replica(connect, "a", &path).await;
    let finished = a
        .wait_for(
            "slot_finished",
            BOUND,
            "a ran no slot behind the foreign node",
        )
        .await;
    assert_eq!(finished.str("outcome"), "succeeded", "{}", finished.json);
    let (status, metrics) = get(&a_addr, "/metrics").await;
    assert_eq!(status, 200, "{metrics}");
    let label = format!("path=\"{election}\"");
    let counted = sample(
        &metrics,
        "zookeeper_recipes_foreign_nodes_total",
        &[label.as_str()],
    )
    .unwrap_or_else(|| panic!("no zookeeper_recipes_foreign_nodes_total{{{label}}} in\n{metrics}"));
    assert!(counted >= 1.0, "{counted}");
    a.signal(Signal::SIGTERM);
    a.exit(BOUND, "replica a after SIGTERM").await;
    zk.delete(&foreign, None).await.unwrap();
}

#[tokio::test]
async fn metrics_addr_serves_slot_and_term_metrics_and_probes_by_role() {
    if !zookeeper() {
        return;
    }
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-metrics");
    let (mut a, a_addr) = replica(connect, "a", &path).await;
    let finished = a
        .wait_for("slot_finished", BOUND, "a finished no slot")
        .await;
    assert_eq!(finished.str("outcome"), "succeeded", "{}", finished.json);

    let (status, metrics) = get(&a_addr, "/metrics").await;
    assert_eq!(status, 200, "{metrics}");
    let id = "id=\"a\"";
    for (name, labels) in [
        ("zookeeper_recipes_job_slots_started_total", &[id][..]),
        (
            "zookeeper_recipes_job_slots_ended_total",
            &[id, "outcome=\"succeeded\""],
        ),
        ("zookeeper_recipes_terms_started_total", &[id]),
        (
            "zookeeper_recipes_job_last_success_timestamp_seconds",
            &[id],
        ),
    ] {
        let value = sample(&metrics, name, labels)
            .unwrap_or_else(|| panic!("no {name}{{{labels:?}}} in\n{metrics}"));
        assert!(value >= 1.0, "{name} is {value}\n{metrics}");
    }
    assert_eq!(
        sample(&metrics, "zookeeper_recipes_leader", &[id]),
        Some(1.0),
        "a leads: {metrics}"
    );
    // zkr's own: connected (what /ready answers), and which build serves.
    assert!(
        metrics.lines().any(|l| l == "zkr_connected 1"),
        "a is connected: {metrics}"
    );
    assert!(
        metrics.contains("zkr_build_info{version=\""),
        "no zkr_build_info: {metrics}"
    );
    assert!(
        metrics.contains(&path),
        "the samples should carry the job's path {path}: {metrics}"
    );
    assert_eq!(get(&a_addr, "/ready").await.0, 200);
    assert_eq!(get(&a_addr, "/leader").await.0, 200);
    assert_eq!(get(&a_addr, "/healthz").await.0, 200);
    assert_eq!(get(&a_addr, "/nothing").await.0, 404);

    // A standby: ready (it is what takes over), not the leader.
    let (mut b, b_addr) = replica(connect, "b", &path).await;
    until_status(&b_addr, "/ready", 200, "b never became ready").await;
    let (status, body) = get(&b_addr, "/leader").await;
    assert_eq!(status, 503, "b stands by, yet /leader says {body:?}");

    // a drains and leaves: b's /leader turns 200, and its metrics count its term and slots.
    a.signal(Signal::SIGTERM);
    let code = a.exit(BOUND, "a after SIGTERM").await.code();
    assert!(matches!(code, Some(0 | 143)), "a exited {code:?}");
    until_status(&b_addr, "/leader", 200, "b never took over").await;
    b.wait_for(
        "slot_finished",
        BOUND,
        "b finished no slot after the handover",
    )
    .await;
    let (_, metrics) = get(&b_addr, "/metrics").await;
    assert!(
        sample(
            &metrics,
            "zookeeper_recipes_terms_started_total",
            &["id=\"b\""]
        ) >= Some(1.0),
        "b's term is not counted: {metrics}"
    );
    b.signal(Signal::SIGTERM);
    let code = b.exit(BOUND, "b after SIGTERM").await.code();
    assert!(matches!(code, Some(0 | 143)), "b exited {code:?}");
}

#[tokio::test]
async fn a_metrics_addr_in_use_is_refused_before_anything_joins() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    // No server is needed: the port is checked before zkr connects.
    let out = tokio::time::timeout(
        BOUND,
        zkr("127.0.0.1:1")
            .args([
                "cron",
                "run",
                "job",
                "--every",
                "1m",
                "--metrics-addr",
                &addr,
            ])
            .args(["--", "true"])
            .output(),
    )
    .await
    .expect("zkr ended within the bound")
    .expect("zkr ran");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot listen on --metrics-addr {addr}")),
        "{err}"
    );
}

#[tokio::test]
async fn metrics_scraped_through_a_failover_show_the_standby_take_over_after_a_kill_9() {
    if !zookeeper() {
        return;
    }
    let _one_at_a_time = FAULTS.lock().await;
    let server = shared_server().await;
    let connect = server.connect_string();
    let path = testing::unique_path("cron-metrics-failover");
    let (mut a, a_addr) = replica_with(connect, "a", &path, "3s").await;
    a.wait_for("slot_finished", BOUND, "a finished no slot")
        .await;
    assert_eq!(get(&a_addr, "/leader").await.0, 200);
    let (mut b, b_addr) = replica_with(connect, "b", &path, "3s").await;
    b.wait_for("standby", BOUND, "b did not stand by").await;
    until_status(&b_addr, "/ready", 200, "b never became ready").await;

    a.signal(Signal::SIGKILL);
    let killed = tokio::time::Instant::now();
    a.exit(BOUND, "a after SIGKILL").await;
    // Until ZooKeeper expires a's session, b stands by: ready, not leader, no term counted.
    let (status, body) = get(&b_addr, "/leader").await;
    assert_eq!(status, 503, "b leads at once after a's kill -9: {body:?}");
    let (_, metrics) = get(&b_addr, "/metrics").await;
    assert_eq!(
        sample(
            &metrics,
            "zookeeper_recipes_terms_started_total",
            &["id=\"b\""]
        ),
        None,
        "b counts a term before a's session expired: {metrics}"
    );
    until_status(
        &b_addr,
        "/leader",
        200,
        "b never took over from the killed a",
    )
    .await;
    let took = killed.elapsed();
    b.wait_for(
        "slot_finished",
        BOUND,
        "b finished no slot after the failover",
    )
    .await;
    let (_, metrics) = get(&b_addr, "/metrics").await;
    for (name, labels) in [
        ("zookeeper_recipes_terms_started_total", &["id=\"b\""][..]),
        ("zookeeper_recipes_leader", &["id=\"b\""]),
        (
            "zookeeper_recipes_job_slots_ended_total",
            &["id=\"b\"", "outcome=\"succeeded\""],
        ),
        (
            "zookeeper_recipes_job_last_success_timestamp_seconds",
            &["id=\"b\""],
        ),
    ] {
        let value = sample(&metrics, name, labels).unwrap_or_else(|| {
            panic!("no {name}{{{labels:?}}} on b after the failover:\n{metrics}")
        });
        assert!(value >= 1.0, "{name} is {value} on b\n{metrics}");
    }
    println!("b's /leader answered 200 {took:?} after a's kill -9 (session timeout 3s)");
    b.signal(Signal::SIGTERM);
    let code = b.exit(BOUND, "b after SIGTERM").await.code();
    assert!(matches!(code, Some(0 | 143)), "b exited {code:?}");
}

/// The alert rules (docs/prometheus/zkr-cron.rules.yml) against a real scrape: every metric the
/// rules select is in the scrape of a `zkr cron run` replica that leads and has run one slot,
/// with every label the rules match on, group by or name in an annotation, and every value the
/// rules match `outcome` and `reason` on. So a renamed metric, label or outcome breaks this
/// test rather than silently muting an alert; and since the counters of failed, parked and
/// missed slots are exported at 0 from the start, the rules' `increase` sees a replica's first
/// failure. `job` and `instance` are Prometheus's target labels; `path` and `id` values are
/// the deployment's.
#[tokio::test]
async fn every_metric_and_label_the_alert_rules_use_is_in_a_replicas_scrape() {
    if !zookeeper() {
        return;
    }
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/prometheus/zkr-cron.rules.yml"
    );
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let rules = alert_rules(&text);
    assert!(
        rules.len() >= 7,
        "only {} alerts parsed from {file}",
        rules.len()
    );

    let server = shared_server().await;
    let path = testing::unique_path("cron-metrics-rules");
    let (mut a, addr) = replica(server.connect_string(), "a", &path).await;
    let finished = a
        .wait_for("slot_finished", BOUND, "a finished no slot")
        .await;
    assert_eq!(finished.str("outcome"), "succeeded", "{}", finished.json);
    let (status, scrape) = get(&addr, "/metrics").await;
    assert_eq!(status, 200, "{scrape}");
    let samples = samples(&scrape);

    let target_labels = ["job", "instance"];
    let mut missing = std::collections::BTreeSet::new();
    for rule in &rules {
        let selectors = selectors(&rule.expr);
        assert!(
            !selectors.is_empty(),
            "{}: no metric found in its expr {:?}",
            rule.alert,
            rule.expr
        );
        for selector in &selectors {
            if of(&samples, &selector.metric).next().is_none() {
                missing.insert(format!("{}: metric {}", rule.alert, selector.metric));
                continue;
            }
            for (label, op, value) in &selector.matchers {
                if target_labels.contains(&label.as_str()) {
                    continue;
                }
                let carried = |s: &Sample| s.labels.iter().any(|(l, _)| l == label);
                if !of(&samples, &selector.metric).any(carried) {
                    missing.insert(format!("{}: {}{{{label}}}", rule.alert, selector.metric));
                    continue;
                }
                if matches!(label.as_str(), "path" | "id") {
                    continue;
                }
                let wanted: Vec<&str> = match op.as_str() {
                    "=" => vec![value.as_str()],
                    "=~" => value.split('|').collect(),
                    _ => vec![],
                };
                for want in wanted {
                    if !of(&samples, &selector.metric)
                        .any(|s| s.labels.iter().any(|(l, v)| l == label && v == want))
                    {
                        missing.insert(format!(
                            "{}: {}{{{label}=\"{want}\"}}",
                            rule.alert, selector.metric
                        ));
                    }
                }
            }
        }
        // Labels the result keeps (by) or an annotation names: on a metric of the rule.
        for label in grouping_labels(&rule.expr)
            .into_iter()
            .chain(rule.annotation_labels.iter().cloned())
        {
            let carried = selectors.iter().any(|sel| {
                samples
                    .iter()
                    .any(|s| s.name == sel.metric && s.labels.iter().any(|(l, _)| *l == label))
            });
            if !carried {
                missing.insert(format!(
                    "{}: label {label} on none of its metrics",
                    rule.alert
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the alert rules use what a replica's scrape does not have:\n  {}\nscrape:\n{scrape}",
        missing.into_iter().collect::<Vec<_>>().join("\n  ")
    );
    a.signal(Signal::SIGTERM);
    let code = a.exit(BOUND, "a after SIGTERM").await.code();
    assert!(matches!(code, Some(0 | 143)), "a exited {code:?}");
}

/// The samples of `metric`.
fn of<'a>(samples: &'a [Sample], metric: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
    samples.iter().filter(move |s| s.name == metric)
}

/// An alert of a rules file: its name, its expression, the labels its annotations name.
#[derive(Debug)]
struct AlertRule {
    alert: String,
    expr: String,
    annotation_labels: Vec<String>,
}

/// The alerts of a Prometheus rules file, read the simple way: a rule starts at `- alert:`, its
/// `expr:` is the rest of the line or, after `|` or `>`, the lines indented deeper than it.
fn alert_rules(text: &str) -> Vec<AlertRule> {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut rules: Vec<AlertRule> = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('#') {
            continue;
        }
        if let Some(name) = trimmed.strip_prefix("- alert:") {
            rules.push(AlertRule {
                alert: name.trim().to_owned(),
                expr: String::new(),
                annotation_labels: Vec::new(),
            });
            continue;
        }
        let Some(rule) = rules.last_mut() else {
            continue;
        };
        if let Some(rest) = trimmed.strip_prefix("expr:") {
            let rest = rest.trim();
            if rest.starts_with('|') || rest.starts_with('>') {
                let at = indent(line);
                while let Some(next) = lines.next_if(|l| l.trim().is_empty() || indent(l) > at) {
                    rule.expr.push_str(next.trim());
                    rule.expr.push('\n');
                }
            } else {
                rule.expr = rest.to_owned();
            }
            continue;
        }
        let mut rest = trimmed;
        while let Some(at) = rest.find("$labels.") {
            rest = &rest[at + "$labels.".len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            rule.annotation_labels.push(rest[..end].to_owned());
        }
    }
    rules
}

/// A series selector of an expression: the metric and its matchers (label, operator, value).
#[derive(Debug)]
struct Selector {
    metric: String,
    matchers: Vec<(String, String, String)>,
}

/// PromQL's words that are not metrics and may stand before something else than `(`: the
/// keywords, and the aggregations (`sum by (path) (...)`).
const PROMQL_WORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "or",
    "and",
    "unless",
    "offset",
    "bool",
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "group",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
];

/// The selectors of a PromQL expression: each name followed by `{...}`, and each bare name of
/// zkr's (`zookeeper_recipes_*`, `zkr_*`). Functions and keywords are names followed by `(`.
fn selectors(expr: &str) -> Vec<Selector> {
    let chars: Vec<char> = expr.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_digit() {
            // A number or a duration (26h, 1m): not a name.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            continue;
        }
        if c == '"' {
            i = skip_string(&chars, i);
            continue;
        }
        if !(c.is_ascii_alphabetic() || c == '_' || c == ':') {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len()
            && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
        {
            i += 1;
        }
        let name: String = chars[start..i].iter().collect();
        let mut j = i;
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        match chars.get(j) {
            // A grouping's label list is not a metric's name: past it.
            Some('(') if ["by", "without", "on", "ignoring"].contains(&name.as_str()) => {
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
            }
            Some('(') => {}
            Some('{') => {
                let (matchers, end) = matchers(&chars, j + 1);
                found.push(Selector {
                    metric: name,
                    matchers,
                });
                i = end;
            }
            _ if name.starts_with("zookeeper_recipes_") || name.starts_with("zkr_") => {
                found.push(Selector {
                    metric: name,
                    matchers: Vec::new(),
                });
            }
            _ => assert!(
                PROMQL_WORDS.contains(&name.as_str()),
                "a name the test cannot tell a metric or a keyword: {name:?} in {expr:?}"
            ),
        }
    }
    found
}

/// Past the string literal that starts at `at` (a `"`).
fn skip_string(chars: &[char], at: usize) -> usize {
    let mut i = at + 1;
    while i < chars.len() && chars[i] != '"' {
        i += if chars[i] == '\\' { 2 } else { 1 };
    }
    i + 1
}

/// The matchers from `at` (past a `{`) to the closing `}`, and the index past it.
fn matchers(chars: &[char], at: usize) -> (Vec<(String, String, String)>, usize) {
    let mut found = Vec::new();
    let mut i = at;
    loop {
        while i < chars.len() && (chars[i].is_whitespace() || chars[i] == ',') {
            i += 1;
        }
        if i >= chars.len() || chars[i] == '}' {
            return (found, i + 1);
        }
        let start = i;
        while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
            i += 1;
        }
        let label: String = chars[start..i].iter().collect();
        let start = i;
        while i < chars.len() && matches!(chars[i], '=' | '!' | '~') {
            i += 1;
        }
        let op: String = chars[start..i].iter().collect();
        assert!(
            !label.is_empty() && !op.is_empty() && chars.get(i) == Some(&'"'),
            "a matcher the test cannot read at {:?}",
            chars[at..].iter().collect::<String>()
        );
        let end = skip_string(chars, i);
        let value: String = chars[i + 1..end - 1].iter().collect();
        found.push((label, op, value));
        i = end;
    }
}

/// The labels named in `by (...)`, `without (...)`, `on (...)` and `ignoring (...)`.
fn grouping_labels(expr: &str) -> Vec<String> {
    let mut found = Vec::new();
    for word in ["by", "without", "on", "ignoring"] {
        let mut rest = expr;
        while let Some(at) = rest.find(word) {
            let before = rest[..at].chars().next_back();
            rest = &rest[at + word.len()..];
            let after = rest.trim_start();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                || !after.starts_with('(')
            {
                continue;
            }
            if let Some(end) = after.find(')') {
                found.extend(
                    after[1..end]
                        .split(',')
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .map(str::to_owned),
                );
            }
        }
    }
    found
}

/// A sample of a scrape: its metric name and labels.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
}

/// The samples of a Prometheus text-format scrape (comments skipped).
fn samples(scrape: &str) -> Vec<Sample> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            let name = line[..end].to_owned();
            let mut labels = Vec::new();
            if line[end..].starts_with('{') {
                let chars: Vec<char> = line[end + 1..].chars().collect();
                let (matchers, _) = matchers(&chars, 0);
                labels = matchers.into_iter().map(|(l, _, v)| (l, v)).collect();
            }
            Sample { name, labels }
        })
        .collect()
}
