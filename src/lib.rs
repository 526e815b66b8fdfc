//! Apache Curator's ZooKeeper recipes for async Rust.
//!
//! (crate docs are written in a later step)

pub mod error;

#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

pub use error::{Error, Result};
