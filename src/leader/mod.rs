//! Leader election: [`LeaderLatch`] (stay in the election, lead when first) and, built on the same
//! contender core, the selector.

pub mod latch;

pub use latch::{CloseMode, LatchEvent, LeaderLatch, LeaderLatchBuilder};
