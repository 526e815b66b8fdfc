//! Fencing tokens, leadership terms, and writes that only a current leader can make (the
//! argument is on [`FencingToken`], where the rendered docs show it).

mod term;
mod token;
mod write;

pub use term::{Leadership, TermEnd};
pub use token::{Fence, FencingToken, StaleToken};
pub use write::{FencedOp, FencedResult};
