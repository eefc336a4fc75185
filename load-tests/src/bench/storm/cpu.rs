//! CPU seconds and peak memory of every process of the run, read from
//! `/proc` (`procinfo`): the load generator (this process less the mocks'
//! threads), the mocks, each Clarion service, PostgreSQL and RabbitMQ.

use serde::Serialize;

use crate::bench::run::{MOCK_THREAD_PREFIX, ServicesCpu, own_cpu_s};
use crate::local_cluster::LocalCluster;
use crate::procinfo::{own_threads_cpu_s, usage};

/// CPU seconds by process (so far, or over a window with [`Cpu::since`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Cpu {
    /// This benchmark's own load generator (its process less the mocks).
    pub generator_s: f64,
    pub mocks_s: f64,
    pub coordinator_s: f64,
    pub harvesters_s: f64,
    pub dispatchers_s: f64,
    /// Absent when PostgreSQL or RabbitMQ runs on another machine.
    pub postgres_s: Option<f64>,
    pub rabbitmq_s: Option<f64>,
}

impl Cpu {
    pub fn read(cluster: &LocalCluster) -> Self {
        let of = |pids: Vec<Option<u32>>| {
            pids.into_iter()
                .flatten()
                .filter_map(usage)
                .map(|usage| usage.cpu_s)
                .sum::<f64>()
        };
        let mocks_s = own_threads_cpu_s(MOCK_THREAD_PREFIX);
        let services = ServicesCpu::read();
        Self {
            generator_s: own_cpu_s() - mocks_s,
            mocks_s,
            coordinator_s: of(vec![cluster.coordinator.pid()]),
            harvesters_s: of(cluster.harvesters.iter().map(|h| h.pid()).collect()),
            dispatchers_s: of(cluster.dispatchers.iter().map(|d| d.pid()).collect()),
            postgres_s: services.postgres_s,
            rabbitmq_s: services.rabbitmq_s,
        }
    }

    /// What was used since `before`.
    pub fn since(self, before: Self) -> Self {
        let services = ServicesCpu {
            postgres_s: self.postgres_s,
            rabbitmq_s: self.rabbitmq_s,
        }
        .since(ServicesCpu {
            postgres_s: before.postgres_s,
            rabbitmq_s: before.rabbitmq_s,
        });
        Self {
            generator_s: self.generator_s - before.generator_s,
            mocks_s: self.mocks_s - before.mocks_s,
            coordinator_s: self.coordinator_s - before.coordinator_s,
            harvesters_s: self.harvesters_s - before.harvesters_s,
            dispatchers_s: self.dispatchers_s - before.dispatchers_s,
            postgres_s: services.postgres_s,
            rabbitmq_s: services.rabbitmq_s,
        }
    }

    /// Every process's CPU together.
    pub fn total_s(&self) -> f64 {
        self.generator_s
            + self.mocks_s
            + self.coordinator_s
            + self.harvesters_s
            + self.dispatchers_s
            + self.postgres_s.unwrap_or(0.0)
            + self.rabbitmq_s.unwrap_or(0.0)
    }
}

/// Peak resident memory of the Clarion processes, in MiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PeakMemory {
    pub coordinator_mib: f64,
    pub harvester_mib: f64,
    pub dispatcher_mib: f64,
}

impl PeakMemory {
    pub fn read(cluster: &LocalCluster) -> Self {
        let peak = |pids: Vec<Option<u32>>| {
            pids.into_iter()
                .flatten()
                .filter_map(usage)
                .map(|usage| usage.peak_rss_mib)
                .fold(0.0, f64::max)
        };
        Self {
            coordinator_mib: peak(vec![cluster.coordinator.pid()]),
            harvester_mib: peak(cluster.harvesters.iter().map(|h| h.pid()).collect()),
            dispatcher_mib: peak(cluster.dispatchers.iter().map(|d| d.pid()).collect()),
        }
    }
}
