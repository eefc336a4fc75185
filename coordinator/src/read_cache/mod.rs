//! Reads served from this coordinator's memory where that is honest: the
//! snapshots of a notification's status and curve, computed once per
//! refresh interval however many poll them ([`snapshot`]).

pub mod snapshot;
