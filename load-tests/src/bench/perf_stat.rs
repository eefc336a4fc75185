//! `perf stat` attached to a running process: CPU time, system calls and
//! context switches from the moment it is attached until it is stopped,
//! with the user and kernel split read from `/proc` (perf's own
//! `user_time` / `system_time` count only a command it started). Unlike
//! callgrind it runs the process at full speed, so it shows what callgrind
//! cannot: time in the kernel, and how many system calls and wake-ups the
//! work takes at the rate it really runs.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::Serialize;

use crate::procinfo::user_and_system_s;

/// The events counted: software events and one tracepoint, which a VM
/// without hardware counters has too.
const EVENTS: &str = "task-clock,context-switches,raw_syscalls:sys_enter";

/// What `perf stat` counted for one process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PerfCounts {
    /// perf's task clock: CPU time, user and kernel.
    pub cpu_ms: f64,
    /// From `/proc`, at the clock tick's resolution (10 ms).
    pub user_ms: f64,
    pub system_ms: f64,
    pub context_switches: u64,
    pub syscalls: u64,
}

/// A `perf stat -p` running beside its process; stopped and reaped when
/// dropped, whatever happened in between.
pub struct PerfStat {
    child: Child,
    output: PathBuf,
    pid: u32,
    /// User and kernel CPU seconds of the process when counting began.
    cpu_at_attach: (f64, f64),
}

impl PerfStat {
    /// Starts counting process `pid`'s events into `output` (perf's own
    /// messages go to `output` with `.stderr` appended).
    pub fn attach(pid: u32, output: &Path) -> Result<Self> {
        let cpu_at_attach = user_and_system_s(pid).context("reading the process's CPU time")?;
        let stderr_path = output.with_extension("stderr");
        let stderr =
            File::create(&stderr_path).with_context(|| format!("creating {}", stderr_path.display()))?;
        let mut child = Command::new("perf")
            .args(["stat", "-x", ",", "-e", EVENTS, "-p"])
            .arg(pid.to_string())
            .arg("-o")
            .arg(output)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .context("running perf (package linux-perf)")?;
        if let Some(status) = child.try_wait()? {
            let said = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            bail!("perf stat ended at once ({status}): {said}");
        }
        Ok(Self {
            child,
            output: output.to_owned(),
            pid,
            cpu_at_attach,
        })
    }

    /// Stops counting (SIGINT, as Ctrl-C) and reads the counts.
    pub async fn finish(mut self) -> Result<PerfCounts> {
        self.interrupt();
        let cpu_now = user_and_system_s(self.pid);
        let started = Instant::now();
        while self.child.try_wait()?.is_none() {
            if started.elapsed() > Duration::from_secs(30) {
                bail!("perf stat did not stop within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (user, system) = cpu_now.context("reading the process's CPU time")?;
        let text = std::fs::read_to_string(&self.output)
            .with_context(|| format!("reading {}", self.output.display()))?;
        let mut counts = parse(&text).with_context(|| {
            format!(
                "perf stat did not count all of {EVENTS} (events with a `:u` suffix mean perf could count \
                 user space only):\n{text}"
            )
        })?;
        counts.user_ms = (user - self.cpu_at_attach.0) * 1000.0;
        counts.system_ms = (system - self.cpu_at_attach.1) * 1000.0;
        Ok(counts)
    }

    fn interrupt(&self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGINT);
        }
    }
}

impl Drop for PerfStat {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.interrupt();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Reads `perf stat -x ,` output (`value,unit,event,...` per line); every
/// event counted or `None`.
fn parse(text: &str) -> Option<PerfCounts> {
    let (mut cpu_ms, mut context_switches, mut syscalls) = (None, None, None);
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let mut fields = line.split(',');
        let (Some(value), Some(_unit), Some(event)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        match event {
            "task-clock" => cpu_ms = Some(value),
            "context-switches" => context_switches = Some(value as u64),
            "raw_syscalls:sys_enter" => syscalls = Some(value as u64),
            _ => {}
        }
    }
    Some(PerfCounts {
        cpu_ms: cpu_ms?,
        user_ms: 0.0,
        system_ms: 0.0,
        context_switches: context_switches?,
        syscalls: syscalls?,
    })
}

#[cfg(test)]
mod tests {
    use super::{PerfCounts, parse};

    #[test]
    fn perf_stat_csv_is_read_by_event_name() {
        let text = "# started on Thu Dec  3 00:40:00 2026\n\n\
            1234.50,msec,task-clock,1234500000,100.00,0.999,CPUs utilized\n\
            5678,,context-switches,1234500000,100.00,4.599,K/sec\n\
            91011,,raw_syscalls:sys_enter,1234500000,100.00,73.723,K/sec\n\
            <not supported>,,instructions,0,100.00,,\n";
        assert_eq!(
            parse(text),
            Some(PerfCounts {
                cpu_ms: 1234.5,
                user_ms: 0.0,
                system_ms: 0.0,
                context_switches: 5678,
                syscalls: 91011,
            })
        );
        assert_eq!(parse("# nothing\n"), None);
        let user_space_only = "1234.50,msec,task-clock:u,1,100.00,,\n5678,,context-switches:u,1,100.00,,\n\
            <not supported>,,raw_syscalls:sys_enter,0,100.00,,\n";
        assert_eq!(parse(user_space_only), None, "an event not counted is not a zero");
    }
}
