//! Clarion's load-test crate: the mock APNs / FCM servers, the bulk seeder,
//! the demo that drives a real cluster, the in-process test cluster
//! (`testkit`), process clusters, the benchmarks (the 90in2 run among
//! them) and a black-hole TCP proxy for fault tests. Nothing here is a
//! dependency of the services.

pub mod audience;
pub mod bench;
pub mod blackhole;
pub mod demo;
pub mod local_cluster;
pub mod mocks;
pub mod process;
pub mod procinfo;
pub mod seed;
pub mod testkit;
