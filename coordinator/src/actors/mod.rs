//! The coordinator's actors, one per file with its messages beside it.

pub mod planner;
pub mod topic_counter;
