//! Apache Curator's ZooKeeper recipes for async Rust: leader election and locks that a paused
//! leader cannot abuse, wire compatible with Curator so that Rust and Java services can share one
//! election during a migration.
//!
//! A service runs as several replicas for availability, but some work must run on exactly one
//! of them. This crate gives that work a [`LeaderLatch`], a [`LeaderSelector`] or an
//! [`InterProcessMutex`], all on one contender core ([its spec](specs::leader_latch)): ephemeral sequential znodes
//! under an election path (by default under `/election`), each candidate watching only its
//! predecessor, Curator's connection states, recovery after session expiry. Every leadership term
//! carries a [`FencingToken`] (the zxid at which the leader's node was created) and a deadline
//! ([`Leadership::valid_until`]) that passes, without any network, once the session can no longer
//! be proven alive.
//!
//! # Example
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_recipes::{LeaderLatch, Session};
//!
//! # async fn demo() -> zookeeper_recipes::Result<()> {
//! let session = Session::builder("127.0.0.1:2181")
//!     .session_timeout(Duration::from_secs(10))
//!     .connect()
//!     .await?;
//! let latch = LeaderLatch::builder(&session, "/election/statement-job")
//!     .id("replica-1")
//!     .start()
//!     .await?;
//! let term = latch.await_leadership().await?;
//! println!("leading with token {}", term.token());
//! while term.is_valid() {
//!     // one step of the job; writes carry term.token() so a resource can reject stale leaders
//! #   break;
//! }
//! latch.close().await?;
//! session.close().await?;
//! # Ok(()) }
//! ```
//!
//! A singleton job is a [`LeaderSelector`]: the closure runs while this replica leads and gets
//! the term, whose token goes with every write, so that a resource can refuse a deposed leader:
//!
//! ```no_run
//! use zookeeper_recipes::{Fence, LeaderSelector, Leadership, Session};
//!
//! # async fn demo(session: Session, ledger: std::sync::Arc<Fence>) -> zookeeper_recipes::Result<()> {
//! let selector = LeaderSelector::builder(&session, "/election/statement-job")
//!     .id("replica-1")
//!     .auto_requeue(true)
//!     .start(move |term: Leadership| {
//!         let ledger = ledger.clone();
//!         async move {
//!             // false the moment the term ends (for any reason) or its deadline passes;
//!             // `term.cancelled()` is the future to await in a `select!`
//!             while term.is_valid() {
//!                 // The resource keeps the highest token it has seen and refuses older ones.
//!                 ledger.admit(term.token())?;
//!                 // ... write one batch ...
//! #               break;
//!             }
//!             Ok::<(), zookeeper_recipes::StaleToken>(())
//!         }
//!     })
//!     .await?;
//! # selector.close().await?;
//! # Ok(()) }
//! ```
//!
//! The repository's `examples/` run the patterns against a real ZooKeeper: `demo` (a crashed and
//! a frozen leader, the frozen one's late write fenced off), `statement_job` (fencing in SQL),
//! `service` (a whole replica: SIGTERM, readiness, SQL fencing), `outbox_relay`, `health`
//! (readiness by role, Prometheus metrics) and `bench`.
//!
//! # Curator → Rust
//! | Curator | zookeeper-recipes |
//! |---|---|
//! | `CuratorFrameworkFactory.builder().connectString(..).sessionTimeoutMs(..)` | [`Session::builder`] |
//! | `client.start(); client.blockUntilConnected()` | [`SessionBuilder::connect`] |
//! | `ConnectionStateListener`, `ConnectionState` | [`Session::state_changes`], [`ConnectionState`] (plus `Closed`: a deliberate close is not `LOST`) |
//! | `ConnectionStateErrorPolicy` (Standard / Session) | [`ErrorPolicy`] |
//! | simulated session expiration | terms end at [`Session::safe_until`] (`Suspended`, the session kept); `Lost` when the servers say the session expired |
//! | `new LeaderLatch(client, path, id, closeMode)` + `start()` | [`LeaderLatch::builder`] → [`LeaderLatchBuilder::start`] |
//! | `hasLeadership()`, `await()`, `await(t, unit)` | [`LeaderLatch::has_leadership`], [`LeaderLatch::await_leadership`] (+ `tokio::time::timeout`) |
//! | `LeaderLatchListener` | [`LeaderLatch::events`], [`LeaderLatch::leadership`] |
//! | `getParticipants()`, `getLeader()`, `Participant` | [`LeaderLatch::participants`], [`LeaderLatch::leader`], [`Participant`] |
//! | `LeaderSelector` + `LeaderSelectorListener.takeLeadership` | [`LeaderSelector::builder`] → `start(closure)` |
//! | `autoRequeue()`, `requeue()`, `interruptLeadership()` | [`LeaderSelectorBuilder::auto_requeue`], [`LeaderSelector::requeue`], [`LeaderSelector::interrupt_leadership`] |
//! | `CancelLeadershipException` | the term's [`Leadership::cancelled`] future |
//! | (none; client-go's `OnNewLeader`, etcd's `Election.Observe`) | [`LeaderObserver`] |
//! | (none; sharded controllers, Helix-style partition leaders) | [`LeaderPool`] |
//! | (none; ShedLock, Quartz clustered, Kubernetes CronJob) | [`job::ScheduledJob`]: once per schedule slot across failovers, fenced ([`job`]) |
//! | `new InterProcessMutex(client, path)` | [`InterProcessMutex::builder`] → [`InterProcessMutexBuilder::build`] (every recipe has one builder shape) |
//! | `InterProcessMutex.acquire()`, `acquire(t, unit)`, `release()` | [`InterProcessMutex::acquire`], [`InterProcessMutex::acquire_timeout`], [`MutexGuard::release`] |
//! | (none: CURATOR-537) | [`FencingToken`], [`Fence`], [`Leadership::fenced`] |
//! | `aclProvider(..)`, `ZooDefs.Ids.CREATOR_ALL_ACL` | [`LeaderLatchBuilder::acl`] with [`NodeAcl::creator_all`], [`SessionBuilder::digest_auth`]; with an identity the default is already the creator's plus read ([`Session::default_acl`]), and [`SessionBuilder::chroot_acl`] sets the namespace's |
//! | `curator-test`: `TestingServer`, `TestingCluster`, `KillSession` | the crate `zookeeper-recipes-testing` (a dev-dependency) |
//!
//! # Crate features
//! - `job` (on by default): [`job::ScheduledJob`] and the rest of the `job` module, with the cron and time-zone
//!   crates they need. A service that only elects or locks can turn it off
//!   (`default-features = false`).
//! - `metrics`: leadership and session metrics through the `metrics` facade; the names and
//!   labels are in [`metrics`].
//! - `tls`: TLS and mutual TLS to the servers (`tcp+tls://` hosts, `SessionBuilder::tls`,
//!   `TlsConfig`), through zookeeper-client's `tls` (rustls).
//! - `sasl-digest-md5`: SASL DIGEST-MD5 logins (`SessionBuilder::sasl_digest`).
//!
//! Beside this crate: `zookeeper-recipes-testing` (the test harness, Curator's `curator-test`:
//! `TestingServer`, `TestingCluster`, `FaultProxy`, `expire_session`, a history checker) and
//! the `zkr` command-line tool, each a package of its own.
//!
//! # zookeeper-client is part of this API
//! The escape hatches hand out types of [`zookeeper_client`] 0.11: [`Session::client`] returns
//! its `Client`, and [`Error`] carries its errors. So a zookeeper-client release that breaks
//! those types (0.12) is a breaking release of this crate too, and this crate moves to it in a
//! new minor version (0.x) or major version (1.x+); a service that calls the raw client should
//! depend on the same zookeeper-client version as this crate.
//!
//! # Cancel safety and cleanup
//! Every public async fn states its cancel safety. Recipes never leak a node: closing or dropping
//! one deletes its node, also while its create is in flight; a dropped `acquire` withdraws from
//! the queue.

#![cfg_attr(docsrs, feature(doc_cfg))]
// The docs point at `ScheduledJob` from other pages; without the `job` feature those links have
// nothing to point at (docs.rs builds with it).
#![cfg_attr(not(feature = "job"), allow(rustdoc::broken_intra_doc_links))]

mod acl;
mod checks;
mod clock;
mod contender;
mod error;
mod fencing;
#[cfg(feature = "job")]
#[cfg_attr(docsrs, doc(cfg(feature = "job")))]
pub mod job;
mod leader;
mod lock;
pub mod metrics;
pub mod path;
mod session;
pub mod specs;
mod state;

pub use acl::NodeAcl;
pub use clock::{BootTime, Clock, TestClock};
pub use contender::{ElectionNode, Participant, election_nodes_on, leader_of, participants_on};
pub use error::{BoxError, Error, Result};
pub use fencing::{Fence, FencedOp, FencedResult, FencingToken, Leadership, StaleToken, TermEnd};
pub use leader::{
    Assignment, CloseMode, LatchEvent, LeaderInfo, LeaderLatch, LeaderLatchBuilder, LeaderObserver,
    LeaderObserverBuilder, LeaderPool, LeaderPoolBuilder, LeaderSelector, LeaderSelectorBuilder,
    LeaderSelectorListener, ObserverEvent, Overrun, PoolEvent, SelectorState,
};
pub use lock::{InterProcessMutex, InterProcessMutexBuilder, MutexGuard};
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub use session::TlsConfig;
pub use session::{Session, SessionBuilder, SessionStatus};
pub use state::{ConnectionState, ErrorPolicy};
/// The token type of [`Leadership::cancellation_token`] and [`MutexGuard::lost_token`], re-exported so
/// that storing one does not require matching this crate's tokio-util version.
pub use tokio_util::sync::CancellationToken;

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    /// The crate's top-level modules and which others each names in its code (`crate::x`,
    /// comments and unit-test modules left out), from the sources.
    fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
        fn visit(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    visit(&path, files);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path);
                }
            }
        }
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        // What the root re-exports, by the module it comes from: `crate::Leadership` names
        // `fencing` as much as `crate::fencing::Leadership` does.
        let root = std::fs::read_to_string(src.join("lib.rs")).unwrap_or_default();
        let mut reexports: BTreeMap<String, String> = BTreeMap::new();
        for statement in root.split("\npub use ").skip(1) {
            let statement = statement.split(';').next().unwrap_or("");
            let Some((module, items)) = statement.split_once("::") else {
                continue;
            };
            for item in items.split(['{', '}', ',']) {
                let name = item.rsplit("::").next().unwrap_or("").trim();
                if !name.is_empty() {
                    reexports.insert(name.to_owned(), module.trim().to_owned());
                }
            }
        }
        let mut files = Vec::new();
        visit(&src, &mut files);
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in files {
            let rel = file.strip_prefix(&src).unwrap_or(&file);
            let mut parts = rel.iter().map(|p| p.to_string_lossy().into_owned());
            let Some(first) = parts.next() else { continue };
            // The binaries are crates of their own; lib.rs is the root, above every module.
            if first == "bin" || first == "lib.rs" {
                continue;
            }
            let module = first.trim_end_matches(".rs").to_owned();
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
            let names = graph.entry(module.clone()).or_default();
            let code: String = code
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            let head = |item: &str| -> String {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                match reexports.get(&name) {
                    Some(module) => module.clone(),
                    None => name,
                }
            };
            for (i, _) in code.match_indices("crate::") {
                let after = &code[i + "crate::".len()..];
                // `crate::a::x` names a; `crate::{a::{x, y}, b}` names a and b.
                let mut heads = Vec::new();
                match after.strip_prefix('{') {
                    None => heads.push(head(after)),
                    Some(group) => {
                        let (mut depth, mut from) = (0usize, 0usize);
                        for (j, c) in group.char_indices() {
                            match c {
                                '{' => depth += 1,
                                '}' if depth == 0 => {
                                    heads.push(head(&group[from..j]));
                                    break;
                                }
                                '}' => depth -= 1,
                                ',' if depth == 0 => {
                                    heads.push(head(&group[from..j]));
                                    from = j + 1;
                                }
                                _ => {}
                            }
                        }
                    }
                }
                for name in heads {
                    if !name.is_empty() && name != module && name != "self" {
                        names.insert(name);
                    }
                }
            }
        }
        graph
    }

    /// A cycle through `graph`, if there is one.
    fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
        fn dfs(
            node: &str,
            graph: &BTreeMap<String, BTreeSet<String>>,
            stack: &mut Vec<String>,
            done: &mut BTreeSet<String>,
        ) -> Option<Vec<String>> {
            if let Some(at) = stack.iter().position(|n| n == node) {
                let mut cycle = stack[at..].to_vec();
                cycle.push(node.to_owned());
                return Some(cycle);
            }
            if done.contains(node) {
                return None;
            }
            stack.push(node.to_owned());
            for next in graph.get(node).into_iter().flatten() {
                if let Some(cycle) = dfs(next, graph, stack, done) {
                    return Some(cycle);
                }
            }
            stack.pop();
            done.insert(node.to_owned());
            None
        }
        let mut done = BTreeSet::new();
        graph
            .keys()
            .find_map(|node| dfs(node, graph, &mut Vec::new(), &mut done))
    }

    #[test]
    fn the_module_graph_runs_one_way() {
        let graph = module_graph();
        assert!(graph.contains_key("session") && graph.contains_key("metrics"));
        assert!(
            graph["metrics"].is_empty(),
            "metrics is a leaf: {:?}",
            graph["metrics"]
        );
        assert_eq!(find_cycle(&graph), None, "{graph:#?}");
    }

    #[test]
    fn a_cycle_is_found() {
        let graph: BTreeMap<String, BTreeSet<String>> = [
            ("a", vec!["b"]),
            ("b", vec!["c"]),
            ("c", vec!["a"]),
            ("d", vec![]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
        .collect();
        assert_eq!(
            find_cycle(&graph),
            Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
        );
    }
}
