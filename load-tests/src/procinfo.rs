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
    let ticks = stat_cpu_ticks(&stat)?;
    Some(Usage {
        peak_rss_mib: peak_kib / 1024.0,
        cpu_s: ticks / clock_ticks_per_second(),
    })
}

/// CPU seconds used so far by this process's threads whose name starts
/// with `prefix` (e.g. the mocks' `mock-` threads).
pub fn own_threads_cpu_s(prefix: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let ticks: f64 = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
        .filter(|stat| stat_name(stat).is_some_and(|name| name.starts_with(prefix)))
        .filter_map(|stat| stat_cpu_ticks(&stat))
        .sum();
    ticks / clock_ticks_per_second()
}

/// User and system (kernel) CPU seconds of process `pid` so far.
pub fn user_and_system_s(pid: u32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (user, system) = stat_user_system_ticks(&stat)?;
    let hz = clock_ticks_per_second();
    Some((user / hz, system / hz))
}

/// CPU seconds used so far by every process named one of `names` (as
/// `/proc/<pid>/stat` names it), with the CPU of the children each has
/// reaped: PostgreSQL's postmaster reaps its backends and parallel workers,
/// so their CPU is counted after they exit. `None` when no such process
/// runs here (a database or broker on another machine).
pub fn processes_cpu_s(names: &[&str]) -> Option<f64> {
    let mut found = false;
    let mut ticks = 0.0;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if !stat_name(&stat).is_some_and(|name| names.contains(&name)) {
            continue;
        }
        if let Some(own_and_reaped) = stat_cpu_ticks_with_children(&stat) {
            found = true;
            ticks += own_and_reaped;
        }
    }
    found.then(|| ticks / clock_ticks_per_second())
}

/// The command (or thread) name of a `stat` line.
fn stat_name(stat: &str) -> Option<&str> {
    Some(&stat[stat.find('(')? + 1..stat.rfind(')')?])
}

/// utime + stime of a `stat` line: the 14th and 15th fields of the whole
/// line, counted after the parenthesised name.
fn stat_cpu_ticks(stat: &str) -> Option<f64> {
    let (user, system) = stat_user_system_ticks(stat)?;
    Some(user + system)
}

/// utime + stime + cutime + cstime of a `stat` line: the process's own CPU
/// and that of the children it has waited for.
fn stat_cpu_ticks_with_children(stat: &str) -> Option<f64> {
    let fields = stat_fields_after_name(stat)?;
    (11..=14).map(|i| fields.get(i)?.parse::<f64>().ok()).sum()
}

/// utime and stime of a `stat` line.
fn stat_user_system_ticks(stat: &str) -> Option<(f64, f64)> {
    let fields = stat_fields_after_name(stat)?;
    Some((fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?))
}

/// The fields of a `stat` line after the parenthesised name (which may
/// itself hold spaces and parentheses), the state first.
fn stat_fields_after_name(stat: &str) -> Option<Vec<&str>> {
    Some(stat[stat.rfind(')')? + 2..].split_whitespace().collect())
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
        // Split first: the total read after it can only be as large or larger.
        let (user, system) = user_and_system_s(std::process::id()).expect("own /proc entry");
        let own = usage(std::process::id()).expect("own /proc entry");
        assert!(own.peak_rss_mib > 1.0, "{own:?}");
        assert!(
            user >= 0.0 && system >= 0.0 && user + system <= own.cpu_s + 1e-9,
            "{user} + {system} > {own:?}"
        );
    }

    #[test]
    fn counts_own_and_reaped_children_cpu() {
        let stat = "42 (postgres) S 1 42 42 0 -1 4194560 1 2 3 4 100 20 7 3 20 0 1 0 5 6 7";
        assert_eq!(stat_cpu_ticks_with_children(stat), Some(130.0));
        assert_eq!(stat_cpu_ticks(stat), Some(120.0));
        assert_eq!(stat_cpu_ticks_with_children("42 (postgres) S 1 42"), None);
    }

    #[test]
    fn finds_processes_by_name_only() {
        let own = std::fs::read_to_string("/proc/self/stat").expect("own /proc entry");
        let name = stat_name(&own).expect("own name").to_owned();
        assert!(processes_cpu_s(&[name.as_str()]).is_some_and(|cpu| cpu >= 0.0));
        assert_eq!(processes_cpu_s(&["no-such-process-name"]), None);
    }

    #[test]
    fn counts_the_cpu_of_named_threads_only() {
        let busy = std::thread::Builder::new()
            .name("procinfo-busy".into())
            .spawn(|| {
                // Spins until its own CPU time shows, however busy the
                // machine (a wall-clock spin got too little CPU to count on
                // a loaded box); a reader that never sees it hits the deadline.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
                let mut x = 0u64;
                loop {
                    for _ in 0..1_000_000 {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    }
                    let measured = own_threads_cpu_s("procinfo-busy");
                    if measured >= 0.1 || std::time::Instant::now() > deadline {
                        return measured;
                    }
                }
            })
            .unwrap();
        let measured = busy.join().unwrap();
        assert!(measured >= 0.1, "the busy thread's CPU is counted: {measured}");
        assert_eq!(own_threads_cpu_s("no-such-thread"), 0.0);
    }
}
