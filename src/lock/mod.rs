//! Locks: [`InterProcessMutex`], on the same contender core as the leader recipes.

mod mutex;

pub use mutex::{InterProcessMutex, InterProcessMutexBuilder, MutexGuard};
