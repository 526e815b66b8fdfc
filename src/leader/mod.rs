//! Leader election: [`LeaderLatch`] (stay in the election, lead while first) and
//! [`LeaderSelector`] (run a closure while leader), both on the one contender core.

pub mod latch;
pub mod selector;

pub use latch::{CloseMode, LatchEvent, LeaderLatch, LeaderLatchBuilder};
pub use selector::{
    BoxError, LeaderSelector, LeaderSelectorBuilder, LeaderSelectorListener, SelectorState,
};
