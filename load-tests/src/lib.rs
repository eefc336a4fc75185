//! Clarion's load-test crate: the demo that drives a real cluster, and (as
//! the project grows) the mock APNs / FCM servers, the bulk seeder and the
//! 90in2 benchmark. Nothing here is a dependency of the services.

pub mod audience;
pub mod bench;
pub mod demo;
pub mod local_cluster;
pub mod mocks;
pub mod process;
pub mod procinfo;
pub mod seed;
pub mod testkit;
