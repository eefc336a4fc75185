//! SQL access to PostgreSQL, one module per table.

pub mod delivery;
pub mod notifications;
pub mod registrations;
pub mod topics;
