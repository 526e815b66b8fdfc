//! An outbox relay that runs only while leader.
//!
//! ```text
//! cargo run --example outbox_relay [-- --seconds 5]
//! ```
//!
//! The transactional-outbox pattern: the service writes messages to an outbox table in the same
//! transaction as its data, and one relay publishes them to the broker and marks them sent. Two
//! relays publishing at once would send every message twice, so the relay is a
//! `LeaderSelector` job with auto-requeue: it runs on one replica at a time, and comes back on
//! another when that replica loses its term.
//!
//! The loop is the part to copy. It waits for messages *or* the end of the term, whichever comes
//! first (`term.cancelled()`), and checks `term.is_valid()` before each publish, so it stops
//! within one message of losing its term, also after a freeze. Each message carries the term's
//! fencing token, so a broker or consumer that keeps the highest token per stream can drop the
//! late publish of a deposed relay.
//!
//! Here two replicas run in this process; the outbox and the broker are in memory. After a
//! while the leader is interrupted (as `interruptLeadership()` would) and the other replica takes
//! over.

use zookeeper_recipes_rigs::prologue as common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use zookeeper_recipes::{BoxError, Fence, FencingToken, LeaderSelector, Leadership, Session};

const PATH: &str = "/election/outbox-relay";

/// The outbox table: messages in insertion order, removed once sent.
#[derive(Default)]
struct Outbox {
    unsent: Mutex<VecDeque<String>>,
    added: Notify,
}

impl Outbox {
    fn add(&self, message: String) {
        if let Ok(mut unsent) = self.unsent.lock() {
            unsent.push_back(message);
        }
        self.added.notify_waiters();
    }

    /// Up to `n` unsent messages, oldest first; waits while there are none.
    async fn next_batch(&self, n: usize) -> Vec<String> {
        loop {
            let added = self.added.notified();
            let batch: Vec<String> = match self.unsent.lock() {
                Ok(unsent) => unsent.iter().take(n).cloned().collect(),
                Err(_) => Vec::new(),
            };
            if !batch.is_empty() {
                return batch;
            }
            added.await;
        }
    }

    fn mark_sent(&self, message: &str) {
        if let Ok(mut unsent) = self.unsent.lock()
            && unsent.front().is_some_and(|m| m == message)
        {
            unsent.pop_front();
        }
    }
}

/// The broker side: rejects a publish whose token is older than one it has seen.
#[derive(Default)]
struct Broker {
    fence: Fence,
    published: Mutex<Vec<(String, FencingToken)>>,
}

impl Broker {
    async fn publish(&self, message: &str, token: FencingToken) -> Result<(), BoxError> {
        self.fence.admit(token)?;
        if let Ok(mut published) = self.published.lock() {
            published.push((message.to_owned(), token));
        }
        Ok(())
    }
}

/// The relay: runs for one term.
async fn relay(term: Leadership, outbox: &Outbox, broker: &Broker) -> Result<(), BoxError> {
    let id = term.participant_id().to_owned();
    println!("{id} relays, token {}", term.token());
    'term: loop {
        let batch = tokio::select! {
            _ = term.cancelled() => break,
            batch = outbox.next_batch(10) => batch,
        };
        for message in batch {
            // Right before each side effect: no network needed, false the moment the term ends.
            if !term.is_valid() {
                break 'term;
            }
            broker.publish(&message, term.token()).await?;
            outbox.mark_sent(&message);
            println!("{id} published {message}");
        }
    }
    println!(
        "{id} stopped relaying ({})",
        term.end_reason().map_or("-", |r| r.as_str())
    );
    Ok(())
}

#[derive(clap::Parser)]
struct Args {
    /// How long to run.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::init_tracing();
    common::exit_code(run(clap::Parser::parse()).await)
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let zookeeper = common::ZooKeeper::from_env().await?;
    println!("using {}", zookeeper.describe());
    let outbox = Arc::new(Outbox::default());
    let broker = Arc::new(Broker::default());

    let mut replicas = Vec::new();
    for id in ["relay-1", "relay-2"] {
        let session = Session::builder(zookeeper.connect_string())
            .session_timeout(Duration::from_secs(5))
            .connect()
            .await?;
        let (outbox, broker) = (Arc::clone(&outbox), Arc::clone(&broker));
        let selector = LeaderSelector::builder(&session, PATH)
            .id(id)
            .auto_requeue(true)
            .start(move |term: Leadership| {
                let (outbox, broker) = (Arc::clone(&outbox), Arc::clone(&broker));
                async move { relay(term, &outbox, &broker).await }
            })
            .await?;
        replicas.push((session, selector));
    }

    // The service: an order every 200 ms, written to the outbox.
    let producer = {
        let outbox = Arc::clone(&outbox);
        tokio::spawn(async move {
            for n in 1.. {
                outbox.add(format!("order-{n}"));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };

    let half = Duration::from_secs(args.seconds) / 2;
    tokio::time::sleep(half).await;
    if let Some((_, leader)) = replicas.iter().find(|(_, s)| s.has_leadership()) {
        println!("interrupting {}'s leadership", leader.id());
        leader.interrupt_leadership();
    }
    tokio::time::sleep(half).await;
    producer.abort();
    for (session, selector) in &replicas {
        selector.close().await?;
        session.close().await?;
    }
    let published = broker.published.lock().map(|p| p.len()).unwrap_or(0);
    let unsent = outbox.unsent.lock().map(|u| u.len()).unwrap_or(0);
    println!("published {published} messages, {unsent} left in the outbox");
    Ok(())
}
