//! What the chaos suite asks the coordinator's API: the topic every
//! scenario sends to and the deadline of one answer (a cancel is
//! `LocalCluster::cancel`).

pub(super) use crate::local_cluster::API_TIMEOUT;

/// The topic of the audience.
pub(super) const TOPIC: &str = "breaking/uk";
