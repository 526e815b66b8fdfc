//! Apache Curator's ZooKeeper recipes for async Rust.
//!
//! (crate docs are written in a later step)

pub mod contender;
pub mod error;
pub mod fencing;
pub mod leader;
pub mod lock;
pub mod path;
pub mod session;
pub mod state;

#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

pub use contender::{Participant, TermEnd, leader_of, participants_on};
pub use error::{Error, Result};
pub use fencing::{Fence, FencedOp, FencedResult, FencingToken, Leadership, StaleToken};
pub use leader::{
    BoxError, CloseMode, LatchEvent, LeaderLatch, LeaderLatchBuilder, LeaderSelector,
    LeaderSelectorBuilder, LeaderSelectorListener, SelectorState,
};
pub use lock::{InterProcessMutex, InterProcessMutexBuilder, MutexGuard};
pub use session::{Session, SessionBuilder, SessionStatus};
pub use state::{ConnectionState, ErrorPolicy};
