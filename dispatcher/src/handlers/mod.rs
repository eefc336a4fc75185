//! What the dispatcher does with the messages it consumes. Each handler is
//! run by `clarion_runtime::amqp::consumer::QueueConsumer`, one actor per
//! batch worker, which hands it one delivery at a time and reopens its
//! channel itself when the broker drops it (no actix `Supervisor`).

pub mod channel_commands;
pub mod token_batches;
