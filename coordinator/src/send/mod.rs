//! Sending: accepting a notification and storing its plan in one
//! transaction ([`accept`]), cutting its audience into shard jobs
//! ([`plan`]) from the cached topic sizes ([`topic_counter`]), and sends
//! scheduled for later: the `send_at` window and firing ([`send_at`]), run
//! by the [`scheduler`] actor. Publishing the planned jobs is the job
//! relay's ([`crate::release`]).

pub mod accept;
pub mod plan;
pub mod scheduler;
pub mod send_at;
pub mod topic_counter;
