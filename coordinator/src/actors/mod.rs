//! The coordinator's actors, one per file with its messages beside it.

pub mod hygiene;
pub mod job_relay;
pub mod scheduler;
pub mod topic_counter;
pub mod watchdog;

use actix::Message;

/// The coordinator is stopping: the actor starts no new work (what runs
/// finishes) and stops. Handled by the actors that run on a schedule.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Stop;
