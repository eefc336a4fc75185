//! Reads served from this coordinator's memory where that is honest: the
//! snapshots of a notification's status and curve, computed once per
//! refresh interval however many poll them ([`snapshot`]); registrations,
//! dropped when PostgreSQL says they changed and served only once this
//! coordinator is proven caught up ([`registrations`], [`listener`]).

pub mod listener;
pub mod notices;
pub mod registrations;
pub mod snapshot;
