//! Everything Clarion does on RabbitMQ: opening a connection (plain or
//! TLS), the self-healing connection (which declares the topology), consumers with manual acks, publishing with
//! confirms, message properties and trace context, and the control fanout.

pub mod broker;
pub mod connect;
pub mod consumer;
pub mod control;
pub mod message;
pub mod publisher;
pub mod topology;
