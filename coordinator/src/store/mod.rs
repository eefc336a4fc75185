//! SQL access to PostgreSQL, one module per table.

pub mod notifications;
pub mod registrations;
pub mod topics;
