//! The recipes' protocol specifications: znode layout and naming, watch rules, failure handling,
//! Curator compatibility, and the test that covers each rule. Documentation only: this module
//! has no items.
//!
//! - [`leader_latch`]: the election every recipe stands in, the deadline of a term, fencing;
//!   the contender core that [`LeaderLatch`], [`LeaderSelector`] and [`InterProcessMutex`]
//!   share.
//! - [`leader_selector`]: a closure run while leader, its grace and its requeue.
//! - [`leader_observer`]: who leads, without standing.
//! - [`leader_pool`]: many jobs spread over the replicas, one election per job.
//! - [`mutex`]: Curator's `InterProcessMutex`.
//! - The scheduled job's spec is the documentation of [`crate::job`] (feature `job`).
//!
//! The same pages are the files under `recipes/` in the repository.

// The pages' links name the crate's root items as the recipes' own modules see them: the glob
// brings them into scope here, where a module's outer documentation resolves its links.
#[allow(unused_imports)]
use crate::*;

#[doc = include_str!("../recipes/leader-latch.md")]
pub mod leader_latch {}

#[doc = include_str!("../recipes/leader-selector.md")]
pub mod leader_selector {}

#[doc = include_str!("../recipes/leader-observer.md")]
pub mod leader_observer {}

#[doc = include_str!("../recipes/leader-pool.md")]
pub mod leader_pool {}

#[doc = include_str!("../recipes/mutex.md")]
pub mod mutex {}
