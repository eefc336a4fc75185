//! Clarion services started as child processes, stopped (SIGTERM, then
//! SIGKILL) when dropped so an interrupted demo leaves nothing running.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long a service gets to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

pub struct ServiceProcess {
    pub name: String,
    /// The log of the current run (each restart writes a new one).
    pub log: PathBuf,
    child: Option<Child>,
    launch: Launch,
}

/// How the process was started, so it can be started again the same way.
struct Launch {
    /// A program the binary runs under (e.g. `valgrind --tool=callgrind`).
    wrapper: Vec<String>,
    path: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log_dir: PathBuf,
    /// Runs so far (the first is 1).
    runs: u32,
}

impl ServiceProcess {
    /// Starts `binary` (a sibling of the running executable) with `env`,
    /// writing its output to `log_dir/<name>.log`.
    pub fn spawn(
        name: &str,
        binary: &str,
        args: &[&str],
        env: &[(String, String)],
        log_dir: &Path,
    ) -> Result<Self> {
        Self::spawn_under(&[], name, binary, args, env, log_dir)
    }

    /// As [`ServiceProcess::spawn`], run under `wrapper` (a program and its
    /// arguments, the binary's path appended) unless it is empty.
    pub fn spawn_under(
        wrapper: &[String],
        name: &str,
        binary: &str,
        args: &[&str],
        env: &[(String, String)],
        log_dir: &Path,
    ) -> Result<Self> {
        let launch = Launch {
            wrapper: wrapper.to_vec(),
            path: sibling_binary(binary)?,
            args: args.iter().map(|arg| (*arg).to_owned()).collect(),
            env: env.to_vec(),
            log_dir: log_dir.to_owned(),
            runs: 0,
        };
        let mut service = Self {
            name: name.to_owned(),
            log: PathBuf::new(),
            child: None,
            launch,
        };
        service.launch()?;
        Ok(service)
    }

    /// Starts the process; the first run logs to `<name>.log`, run n to
    /// `<name>.<n>.log`, so a restart keeps the earlier logs.
    fn launch(&mut self) -> Result<()> {
        let launch = &mut self.launch;
        std::fs::create_dir_all(&launch.log_dir)
            .with_context(|| format!("creating {}", launch.log_dir.display()))?;
        launch.runs += 1;
        let file = match launch.runs {
            1 => format!("{}.log", self.name),
            n => format!("{}.{n}.log", self.name),
        };
        let log = launch.log_dir.join(file);
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let mut command = match launch.wrapper.split_first() {
            Some((program, wrapper_args)) => {
                let mut command = Command::new(program);
                command.args(wrapper_args).arg(&launch.path);
                command
            }
            None => Command::new(&launch.path),
        };
        let child = command
            .args(&launch.args)
            .envs(
                launch
                    .env
                    .iter()
                    .map(|(key, value)| (key.as_str(), value.as_str())),
            )
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {}", launch.path.display()))?;
        self.log = log;
        self.child = Some(child);
        Ok(())
    }

    /// Starts the process again with the same settings (stopping it first
    /// if it still runs).
    pub fn restart(&mut self) -> Result<()> {
        self.stop();
        self.launch()
    }

    /// Changes a setting for the next (re)start.
    pub fn set(&mut self, key: &str, value: &str) {
        self.launch.env.push((key.to_owned(), value.to_owned()));
    }

    /// Drops a setting for the next (re)start: the process's default applies.
    pub fn unset(&mut self, key: &str) {
        self.launch.env.retain(|(k, _)| k != key);
    }

    /// Every setting the process was started with, in order (a later one
    /// of the same name wins).
    pub fn settings(&self) -> &[(String, String)] {
        &self.launch.env
    }

    /// The value of one of the settings the process was started with.
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.launch
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, value)| value.as_str())
    }

    /// Kills the process at once (SIGKILL: no shutdown, nothing flushed)
    /// and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Fails (with the end of its log) if the process has exited.
    pub fn ensure_running(&mut self) -> Result<()> {
        if let Some(child) = self.child.as_mut()
            && let Some(status) = child.try_wait()?
        {
            bail!(
                "{} exited ({status}); last log lines:\n{}",
                self.name,
                self.log_tail(20)
            );
        }
        Ok(())
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Sends SIGTERM and waits up to `patience` for the process to exit;
    /// its exit status and how long it took (`None`: still running, killed).
    pub fn terminate(&mut self, patience: Duration) -> Option<(std::process::ExitStatus, Duration)> {
        let mut child = self.child.take()?;
        let started = Instant::now();
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        while started.elapsed() < patience {
            if let Ok(Some(status)) = child.try_wait() {
                return Some((status, started.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// SIGTERM, wait up to the grace period, then SIGKILL.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A binary built next to the running one (same cargo profile and target
/// dir); a test binary lives one level deeper, in `deps/`.
fn sibling_binary(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the running executable")?;
    let dir = exe.parent().context("the executable has no directory")?;
    let candidates = [Some(dir.join(name)), dir.parent().map(|parent| parent.join(name))];
    candidates
        .into_iter()
        .flatten()
        .find(|path| path.exists())
        .with_context(|| {
            format!(
                "{name} not found beside {}; build it first (cargo build --workspace --bins)",
                exe.display()
            )
        })
}

/// A free TCP port on 127.0.0.1 (free now; taken by whoever binds it next).
pub fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}
