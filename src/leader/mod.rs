//! Leader election: [`LeaderLatch`] (stay in the election, lead while first) and
//! [`LeaderSelector`] (run a closure while leader), both on the one contender core;
//! [`LeaderObserver`] (follow who leads without standing); [`LeaderPool`] (many jobs spread
//! evenly over the replicas, one latch per job).

mod latch;
mod observer;
mod pool;
mod selector;

pub use latch::{CloseMode, LatchEvent, LeaderLatch, LeaderLatchBuilder};
pub use observer::{LeaderInfo, LeaderObserver, LeaderObserverBuilder, ObserverEvent};
pub use pool::{Assignment, LeaderPool, LeaderPoolBuilder, PoolEvent};
pub use selector::{
    LeaderSelector, LeaderSelectorBuilder, LeaderSelectorListener, Overrun, SelectorState,
};
