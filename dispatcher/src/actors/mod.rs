//! The dispatcher's actors.

pub mod batch_worker;
