//! The `Stop` message every actor that runs on a schedule handles (the job
//! relay, the scheduler, the watchdog and the hygiene actor); each actor
//! lives in its feature's folder, one per file with its messages beside it.

use actix::Message;

/// The coordinator is stopping: the actor starts no new work (what runs
/// finishes) and stops. Handled by the actors that run on a schedule.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Stop;
