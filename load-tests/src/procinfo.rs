//! Resource use of a process, read from `/proc` (Linux).

/// Peak resident memory and CPU time of one process so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Usage {
    /// Peak resident set size (VmHWM), in MiB.
    pub peak_rss_mib: f64,
    /// User + system CPU time, in seconds.
    pub cpu_s: f64,
}

/// Usage of process `pid`, or `None` when it cannot be read.
pub fn usage(pid: u32) -> Option<Usage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let peak_kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(Usage {
        peak_rss_mib: peak_kib / 1024.0,
        cpu_s: ticks / clock_ticks_per_second(),
    })
}

fn clock_ticks_per_second() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map_or(100.0, |ticks| ticks as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let own = usage(std::process::id()).expect("own /proc entry");
        assert!(own.peak_rss_mib > 1.0, "{own:?}");
        assert!(own.cpu_s >= 0.0);
    }
}
