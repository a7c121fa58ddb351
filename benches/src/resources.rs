//! What a broker process spends during the measured window, read from /proc.
//!
//! - CPU: `utime + stime` of the whole process (all threads) over wall time, in
//!   cores used.
//! - Memory: `VmHWM` (peak resident set over the process's life; the harness starts
//!   a fresh broker per workload, so that is the workload's peak) and `VmRSS` now.
//! - Disk: `write_bytes` of `/proc/<pid>/io` (bytes the process caused to be sent
//!   to the block layer, counted when page-cache pages are dirtied or O_DIRECT I/O
//!   is issued, summed over all threads), divided by payload bytes acknowledged.
//! - fsyncs: counted with `perf stat` on kernel tracepoints attached to the
//!   process. The filesystem tracepoint (`ext4:ext4_sync_file_enter`,
//!   `xfs:xfs_file_fsync`) sees fsync and fdatasync whether they come from a
//!   syscall or from io_uring (`IORING_OP_FSYNC` runs in the process's own io-wq
//!   threads); `ext4:ext4_sync_fs` (with `wait == 1`) adds each `syncfs`; the
//!   `syscalls:` tracepoints break the syscall part down. Without
//!   perf or tracefs the column is `n/a` and the reason is kept.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

/// Resources of one broker process over one measured window.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Resources {
    pub pid: u32,
    pub seconds: f64,
    /// CPU time over wall time: 1.0 = one core busy all the time.
    pub cpu_cores: f64,
    pub peak_rss_mb: f64,
    pub rss_mb: f64,
    pub disk_write_bytes: u64,
    /// Set by the caller, which knows the payload bytes acknowledged.
    pub disk_bytes_per_payload_byte: Option<f64>,
    /// fsync + fdatasync per second, all paths (filesystem tracepoint) when known.
    pub fsyncs_per_sec: Option<f64>,
    /// Per-event counts from perf, e.g. `syscalls:sys_enter_fdatasync`.
    pub fsync_events: Vec<(String, u64)>,
    /// How fsyncs were counted, or why they were not.
    pub fsync_method: String,
}

struct Snapshot {
    at: Instant,
    cpu_ticks: u64,
    write_bytes: u64,
}

/// Samples one broker process between `begin` and `end`.
pub struct ResourceProbe {
    pid: u32,
    begin: Option<Snapshot>,
    perf: Option<(Child, PathBuf, Vec<String>)>,
    perf_note: String,
    data_dir: PathBuf,
    scratch_dir: PathBuf,
}

fn read_snapshot(pid: u32) -> Result<Snapshot, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|error| format!("broker process {pid} is gone: {error}"))?;
    // Fields after the ")" that closes the command name: state is field 3, utime 14, stime 15.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    Ok(Snapshot { at: Instant::now(), cpu_ticks: field(14) + field(15), write_bytes: status_value(&io, "write_bytes") })
}

/// utime + stime of process `pid` (all its threads), in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    read_snapshot(pid).ok().map(|snapshot| snapshot.cpu_ticks)
}

/// The number after `key:` in a /proc key-value file (kB for memory lines).
fn status_value(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Clock ticks per second of /proc CPU times.
pub fn clock_ticks_per_sec() -> f64 {
    // SAFETY: sysconf only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// The filesystem-level fsync tracepoint for the filesystem holding `path`.
fn filesystem_fsync_event(path: &Path) -> Option<&'static str> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    let path = path.canonicalize().ok()?;
    let fs_type = mounts
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let (_, mount_point, fs_type) = (parts.next()?, parts.next()?, parts.next()?);
            path.starts_with(mount_point).then(|| (mount_point.len(), fs_type.to_string()))
        })
        .max()?
        .1;
    match fs_type.as_str() {
        "ext4" => Some("ext4:ext4_sync_file_enter"),
        "xfs" => Some("xfs:xfs_file_fsync"),
        "btrfs" => Some("btrfs:btrfs_sync_file"),
        _ => None,
    }
}

/// Fires for every sync of an ext4 file system (`syncfs`, `sync`).
const SYNCFS_EVENT: &str = "ext4:ext4_sync_fs";

fn tracepoint_exists(event: &str) -> bool {
    let Some((system, name)) = event.split_once(':') else {
        return false;
    };
    ["/sys/kernel/tracing/events", "/sys/kernel/debug/tracing/events"]
        .iter()
        .any(|root| Path::new(root).join(system).join(name).exists())
}

impl ResourceProbe {
    /// `data_dir` is where the broker writes (to pick the filesystem tracepoint).
    pub fn new(pid: u32, data_dir: &Path, scratch_dir: &Path) -> Self {
        ResourceProbe {
            pid,
            begin: None,
            perf: None,
            perf_note: String::new(),
            data_dir: data_dir.to_path_buf(),
            scratch_dir: scratch_dir.to_path_buf(),
        }
    }

    /// Start of the measured window.
    pub fn begin(&mut self) {
        self.perf_note.clear();
        self.begin = read_snapshot(self.pid).ok();
        let data_dir = self.data_dir.clone();
        if let Err(reason) = self.start_perf(&data_dir) {
            self.perf_note = reason;
        }
    }

    fn start_perf(&mut self, data_dir: &Path) -> Result<(), String> {
        let mut events: Vec<String> = Vec::new();
        if let Some(event) = filesystem_fsync_event(data_dir) {
            events.push(event.into());
        }
        for name in ["fsync", "fdatasync", "sync_file_range", "msync"] {
            events.push(format!("syscalls:sys_enter_{name}"));
        }
        events.retain(|event| tracepoint_exists(event));
        if events.is_empty() {
            return Err("n/a: no fsync tracepoints in tracefs".into());
        }
        let output = self.scratch_dir.join(format!("perf-{}-{}.csv", self.pid, crate::unix_nanos()));
        let mut perf = Command::new("perf");
        perf.args(["stat", "-x", ",", "--no-big-num", "-o"]).arg(&output).arg("-e").arg(events.join(","));
        // A syncfs (Keel's checkpoints sync many files with one) fires this twice,
        // with wait 0 and 1: counted once, as one more fsync.
        if events.iter().any(|e| e.starts_with("ext4:")) && tracepoint_exists(SYNCFS_EVENT) {
            perf.args(["-e", SYNCFS_EVENT, "--filter", "wait == 1"]);
        }
        let child = perf
            .args(["-p", &self.pid.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|error| format!("n/a: perf not runnable ({error})"))?;
        self.perf = Some((child, output, events));
        Ok(())
    }

    /// End of the measured window.
    pub fn end(&mut self) -> Result<Resources, String> {
        let end = read_snapshot(self.pid)?;
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        let begin = self.begin.take().ok_or("resource probe ended before it began")?;
        let seconds = end.at.duration_since(begin.at).as_secs_f64().max(1e-9);
        let ticks = end.cpu_ticks.saturating_sub(begin.cpu_ticks) as f64;
        let mut resources = Resources {
            pid: self.pid,
            seconds,
            cpu_cores: ticks / clock_ticks_per_sec() / seconds,
            peak_rss_mb: status_value(&status, "VmHWM") as f64 / 1024.0,
            rss_mb: status_value(&status, "VmRSS") as f64 / 1024.0,
            disk_write_bytes: end.write_bytes.saturating_sub(begin.write_bytes),
            fsync_method: std::mem::take(&mut self.perf_note),
            ..Resources::default()
        };
        if let Some((child, output, events)) = self.perf.take() {
            self.finish_perf(child, &output, &events, &mut resources);
        }
        Ok(resources)
    }

    fn finish_perf(&self, mut child: Child, output: &Path, events: &[String], resources: &mut Resources) {
        // perf stat writes its counts when interrupted.
        // SAFETY: kill only signals the perf child we spawned.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let _ = child.wait();
        let text = std::fs::read_to_string(output).unwrap_or_default();
        let _ = std::fs::remove_file(output);
        let counts: Vec<(String, u64)> = text
            .lines()
            .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
            .filter_map(|line| {
                let fields: Vec<&str> = line.split(',').collect();
                let count = fields.first()?.trim().parse::<u64>().ok()?;
                let event = fields.get(2)?.trim().to_string();
                Some((event, count))
            })
            .collect();
        if counts.is_empty() {
            resources.fsync_method = format!("n/a: perf stat counted nothing ({})", text.trim());
            return;
        }
        let filesystem = counts.iter().find(|(event, _)| !event.starts_with("syscalls:") && event != SYNCFS_EVENT);
        let syncfs = counts.iter().find(|(event, _)| event == SYNCFS_EVENT).map_or(0, |(_, count)| *count);
        let total = match filesystem {
            Some((event, count)) => {
                resources.fsync_method =
                    format!("perf stat -e {event},{SYNCFS_EVENT} (syscall and io_uring fsyncs, syncfs)");
                *count + syncfs
            }
            None => {
                resources.fsync_method = "perf stat -e syscalls:sys_enter_{fsync,fdatasync} (syscalls only)".into();
                counts
                    .iter()
                    .filter(|(event, _)| event.ends_with("_fsync") || event.ends_with("_fdatasync"))
                    .map(|(_, count)| count)
                    .sum()
            }
        };
        debug_assert!(events.len() + 1 >= counts.len(), "one count per event, and the syncfs one");
        resources.fsyncs_per_sec = Some(total as f64 / resources.seconds);
        resources.fsync_events = counts;
    }
}

/// The process listening on TCP `port` on this host, from `ss -Htlnp`.
pub fn pid_listening_on(port: u16) -> Option<u32> {
    let output =
        Command::new("ss").args(["-Htlnp", &format!("sport = :{port}")]).stderr(Stdio::null()).output().ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    // users:(("java",pid=1234,fd=120))
    text.split("pid=").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        let dir = std::env::temp_dir();
        let mut probe = ResourceProbe::new(pid, &dir, &dir);
        probe.begin();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert!(x > 0);
        let resources = probe.end().unwrap();
        assert!(resources.peak_rss_mb > 0.0);
        assert!(resources.cpu_cores >= 0.0);
        assert!(!resources.fsync_method.is_empty() || resources.fsyncs_per_sec.is_some());
    }

    #[test]
    fn status_values_parse() {
        let text = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t1024 kB\n";
        assert_eq!(status_value(text, "VmHWM"), 2048);
        assert_eq!(status_value(text, "VmRSS"), 1024);
        assert_eq!(status_value(text, "Missing"), 0);
    }
}
