//! The harvester's actors.

pub mod harvest_worker;
