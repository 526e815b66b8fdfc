//! Leader election: [`LeaderLatch`] (stay in the election, lead while first) and
//! [`LeaderSelector`] (run a closure while leader), both on the one contender core;
//! [`LeaderObserver`] (follow who leads without standing).

pub mod latch;
pub mod observer;
pub mod selector;

pub use latch::{CloseMode, LatchEvent, LeaderLatch, LeaderLatchBuilder};
pub use observer::{LeaderInfo, LeaderObserver, LeaderObserverBuilder, ObserverEvent};
pub use selector::{
    BoxError, LeaderSelector, LeaderSelectorBuilder, LeaderSelectorListener, SelectorState,
};
