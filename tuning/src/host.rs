//! `keel tune`: what on this host matters to Keel's shards, each finding with its
//! current value, the value Keel recommends and why, and with `--apply` (as root) the
//! change made where a file under /proc or /sys can make it.
//!
//! Every check reads plain files, so the same code runs on bare metal, in a VM and in
//! a container: a file that does not exist there (no cpufreq in a VM, no block device
//! behind an overlay file system) gives "n/a" and the reason, never a failure. The
//! files are read under a root directory (`/` in `keel tune`) so tests can lay out a
//! host of their own.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// What a finding says about the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Already as recommended.
    Ok,
    /// Differs from the recommendation; `--apply` can change it.
    Change,
    /// Differs, but only a boot parameter, a service unit or the hardware can change it.
    Advice,
    /// Cannot be read here (a VM, a container), with the reason.
    NotApplicable,
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub check: String,
    pub current: String,
    pub recommended: String,
    pub status: Status,
    /// One line: why the recommended value matters to Keel (or why it is n/a).
    pub why: String,
    /// The file `--apply` writes and the value it writes.
    #[serde(skip)]
    pub fix: Vec<(PathBuf, String)>,
    /// What `--apply` did, when asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied: Option<String>,
}

impl Finding {
    fn new(check: &str, current: impl Into<String>, recommended: impl Into<String>, status: Status, why: &str) -> Self {
        Finding {
            check: check.to_string(),
            current: current.into(),
            recommended: recommended.into(),
            status,
            why: why.to_string(),
            fix: Vec::new(),
            applied: None,
        }
    }

    fn not_applicable(check: &str, why: String) -> Self {
        Finding { why, ..Finding::new(check, "n/a", "-", Status::NotApplicable, "") }
    }

    fn fixed_by(mut self, path: PathBuf, value: &str) -> Self {
        self.fix.push((path, value.to_string()));
        self
    }
}

/// The host as `keel tune` sees it.
pub struct Host {
    /// Where /proc and /sys are found: `/`, or a test's directory.
    pub root: PathBuf,
    /// The data directory whose block device is checked.
    pub data_dir: Option<PathBuf>,
    /// The cores the shards run on (`--cpuset`), for IRQ affinity and isolation.
    pub shard_cpus: Vec<usize>,
}

impl Host {
    fn path(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
    }

    fn read(&self, p: &str) -> Result<String, String> {
        let path = self.path(p);
        std::fs::read_to_string(&path).map(|s| s.trim().to_string()).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Every check, in the order `keel tune` prints them.
    pub fn check(&self) -> Vec<Finding> {
        let mut out = vec![self.io_uring_disabled(), io_uring_probe(), memlock()];
        out.push(self.governor());
        out.push(self.isolated());
        out.push(self.irq_affinity());
        out.push(self.transparent_huge_pages());
        out.push(self.swappiness());
        out.extend(self.disk());
        out
    }

    fn io_uring_disabled(&self) -> Finding {
        const CHECK: &str = "io_uring_disabled";
        match self.read("/proc/sys/kernel/io_uring_disabled") {
            Ok(v) if v == "0" => Finding::new(CHECK, v, "0", Status::Ok, "io_uring is open to every process"),
            Ok(v) => Finding::new(
                CHECK,
                v,
                "0",
                Status::Change,
                "1 limits io_uring to one group and 2 turns it off: Keel's shards do all their I/O through it",
            )
            .fixed_by(self.path("/proc/sys/kernel/io_uring_disabled"), "0"),
            // Kernels before 6.6 have no such switch: io_uring is always on there.
            Err(_) => Finding::new(
                CHECK,
                "absent",
                "0",
                Status::Ok,
                "this kernel has no switch (before 6.6): io_uring is always on",
            ),
        }
    }

    fn governor(&self) -> Finding {
        const CHECK: &str = "cpu_governor";
        let why = "performance keeps the cores at full clock: a shard that sleeps between requests otherwise wakes at a low frequency";
        let cpus = self.cpus();
        let found: Vec<(usize, String)> = cpus
            .iter()
            .filter_map(|c| {
                self.read(&format!("/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor")).ok().map(|g| (*c, g))
            })
            .collect();
        if found.is_empty() {
            return Finding::not_applicable(
                CHECK,
                "no cpufreq in /sys/devices/system/cpu/cpu*/ (a VM or a container: the host sets the clock)".into(),
            );
        }
        let mut values: Vec<&str> = found.iter().map(|(_, g)| g.as_str()).collect();
        values.sort_unstable();
        values.dedup();
        if values == ["performance"] {
            return Finding::new(CHECK, "performance", "performance", Status::Ok, why);
        }
        let mut f = Finding::new(CHECK, values.join(","), "performance", Status::Change, why);
        for (c, _) in found.iter().filter(|(_, g)| g != "performance") {
            f = f.fixed_by(
                self.path(&format!("/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor")),
                "performance",
            );
        }
        f
    }

    /// The cores to look at: the shards' when given, else every online one.
    fn cpus(&self) -> Vec<usize> {
        if !self.shard_cpus.is_empty() {
            return self.shard_cpus.clone();
        }
        self.read("/sys/devices/system/cpu/online")
            .ok()
            .and_then(|list| crate::parse_cpuset(&list).ok())
            .unwrap_or_else(crate::allowed_cpus)
    }

    fn isolated(&self) -> Finding {
        const CHECK: &str = "isolated_cores";
        let why =
            "cores kept from the scheduler (isolcpus=, nohz_full=) run only their shard: no other task preempts it";
        let isolated = match self.read("/sys/devices/system/cpu/isolated") {
            Ok(v) => v,
            Err(e) => return Finding::not_applicable(CHECK, format!("cannot read {e}")),
        };
        let set = crate::parse_cpuset(&isolated).unwrap_or_default();
        let current = if isolated.is_empty() { "none".to_string() } else { isolated.clone() };
        if self.shard_cpus.is_empty() {
            let status = if set.is_empty() { Status::Advice } else { Status::Ok };
            return Finding::new(CHECK, current, "the shards' cores (boot with isolcpus=LIST)", status, why);
        }
        let missing: Vec<String> = self.shard_cpus.iter().filter(|c| !set.contains(c)).map(|c| c.to_string()).collect();
        let wanted = self.shard_cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
        let status = if missing.is_empty() { Status::Ok } else { Status::Advice };
        Finding::new(CHECK, current, format!("{wanted} (boot with isolcpus={wanted})"), status, why)
    }

    /// NVMe and network IRQs should be served off the shards' cores, so a burst of
    /// interrupts does not stall a reactor.
    fn irq_affinity(&self) -> Finding {
        const CHECK: &str = "irq_affinity";
        let interrupts = match self.read("/proc/interrupts") {
            Ok(v) => v,
            Err(e) => return Finding::not_applicable(CHECK, format!("cannot read {e}")),
        };
        let irqs = device_irqs(&interrupts);
        if irqs.is_empty() {
            return Finding::not_applicable(
                CHECK,
                "no NVMe or network device IRQs in /proc/interrupts (a VM with virtio or a container)".into(),
            );
        }
        let why = "NVMe and NIC interrupts served on a shard's core preempt its reactor: keep them on the other cores";
        if self.shard_cpus.is_empty() {
            return Finding::new(
                CHECK,
                format!("{} device IRQs", irqs.len()),
                "off the shards' cores (give --cpuset)",
                Status::Advice,
                why,
            );
        }
        let others: Vec<usize> = self.cpus_online().into_iter().filter(|c| !self.shard_cpus.contains(c)).collect();
        if others.is_empty() {
            return Finding::new(
                CHECK,
                format!("{} device IRQs", irqs.len()),
                "off the shards' cores",
                Status::Advice,
                "every core runs a shard: no core is left for interrupts",
            );
        }
        let others_list = others.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
        let mut on_shards = Vec::new();
        let mut f = Finding::new(CHECK, "", others_list.clone(), Status::Ok, why);
        for (irq, name) in &irqs {
            let Ok(list) = self.read(&format!("/proc/irq/{irq}/smp_affinity_list")) else { continue };
            let cpus = crate::parse_cpuset(&list).unwrap_or_default();
            if cpus.iter().any(|c| self.shard_cpus.contains(c)) {
                on_shards.push(format!("{irq}({name})"));
                f = f.fixed_by(self.path(&format!("/proc/irq/{irq}/smp_affinity_list")), &others_list);
            }
        }
        f.current = if on_shards.is_empty() {
            format!("{} device IRQs off the shards' cores", irqs.len())
        } else {
            format!("{} of {} on shard cores: {}", on_shards.len(), irqs.len(), on_shards.join(" "))
        };
        if !on_shards.is_empty() {
            f.status = Status::Change;
        }
        f
    }

    fn cpus_online(&self) -> Vec<usize> {
        self.read("/sys/devices/system/cpu/online")
            .ok()
            .and_then(|list| crate::parse_cpuset(&list).ok())
            .unwrap_or_else(crate::allowed_cpus)
    }

    fn transparent_huge_pages(&self) -> Finding {
        const CHECK: &str = "transparent_hugepages";
        let file = "/sys/kernel/mm/transparent_hugepage/enabled";
        let why = "with always, khugepaged compacts memory behind the shards' backs (latency spikes); madvise gives huge pages only to who asks, and Keel turns them off for itself";
        match self.read(file) {
            Ok(v) => {
                let current = selected(&v).unwrap_or(&v).to_string();
                if current == "always" {
                    Finding::new(CHECK, current, "madvise", Status::Change, why).fixed_by(self.path(file), "madvise")
                } else {
                    Finding::new(CHECK, current, "madvise", Status::Ok, why)
                }
            }
            Err(e) => Finding::not_applicable(CHECK, format!("cannot read {e}")),
        }
    }

    fn swappiness(&self) -> Finding {
        const CHECK: &str = "swappiness";
        let file = "/proc/sys/vm/swappiness";
        let why = "a shard's batch cache and indexes paged out turn a memory read into a disk read: swap only under real pressure";
        match self.read(file).map(|v| (v.parse::<u32>().ok(), v)) {
            Ok((Some(n), v)) if n <= 1 => Finding::new(CHECK, v, "1", Status::Ok, why),
            Ok((_, v)) => Finding::new(CHECK, v, "1", Status::Change, why).fixed_by(self.path(file), "1"),
            Err(e) => Finding::not_applicable(CHECK, format!("cannot read {e}")),
        }
    }

    /// Scheduler, nomerges and write cache of the block device under the data directory.
    fn disk(&self) -> Vec<Finding> {
        let checks = ["disk_scheduler", "disk_nomerges", "disk_write_cache"];
        let queue = match self.data_queue() {
            Ok(q) => q,
            Err(reason) => return checks.iter().map(|c| Finding::not_applicable(c, reason.clone())).collect(),
        };
        let (disk, queue) = queue;
        let read = |name: &str| std::fs::read_to_string(queue.join(name)).map(|s| s.trim().to_string());
        let mut out = Vec::new();
        let rotational = read("rotational").map(|r| r == "1").unwrap_or(false);
        let wanted = if rotational { "mq-deadline" } else { "none" };
        out.push(match read("scheduler") {
            Ok(v) => {
                let current = selected(&v).unwrap_or(&v).to_string();
                let why = "Keel orders and batches its own writes (group commit): on flash a kernel scheduler only adds latency";
                let offered = v.split_whitespace().any(|s| s.trim_matches(['[', ']']) == wanted);
                if current == wanted {
                    Finding::new(checks[0], format!("{disk}: {current}"), wanted, Status::Ok, why)
                } else if offered {
                    Finding::new(checks[0], format!("{disk}: {current}"), wanted, Status::Change, why)
                        .fixed_by(queue.join("scheduler"), wanted)
                } else {
                    Finding::new(checks[0], format!("{disk}: {current}"), wanted, Status::Advice, why)
                }
            }
            Err(e) => Finding::not_applicable(checks[0], format!("{disk}: scheduler: {e}")),
        });
        out.push(match read("nomerges") {
            Ok(v) => {
                let why = "Keel's writes are already whole, aligned runs: 2 skips the kernel's merge lookups on every request";
                let status = if v == "2" { Status::Ok } else { Status::Change };
                let f = Finding::new(checks[1], format!("{disk}: {v}"), "2", status, why);
                if status == Status::Change {
                    f.fixed_by(queue.join("nomerges"), "2")
                } else {
                    f
                }
            }
            Err(e) => Finding::not_applicable(checks[1], format!("{disk}: nomerges: {e}")),
        });
        out.push(match read("write_cache") {
            Ok(v) => {
                let why = if v == "write back" {
                    "a volatile drive cache: each group commit's fdatasync also flushes it, so acks=-1 waits for the flush (correct; a drive with power-loss protection can be set to write through)"
                } else {
                    "no volatile cache to flush: fdatasync returns once the drive has the data"
                };
                Finding::new(checks[2], format!("{disk}: {v}"), "as the drive is (informational)", Status::Ok, why)
            }
            Err(e) => Finding::not_applicable(checks[2], format!("{disk}: write_cache: {e}")),
        });
        out
    }

    /// The disk (not the partition) holding the data directory and its queue directory.
    fn data_queue(&self) -> Result<(String, PathBuf), String> {
        let dir = self.data_dir.as_deref().ok_or("no --data-dir given")?;
        let dev = device_of(dir)?;
        let link = self.path(&format!("/sys/dev/block/{}:{}", dev.0, dev.1));
        let mut sys = std::fs::canonicalize(&link).map_err(|_| {
            format!(
                "{} is on device {}:{}, which is no block device (overlay or network file system, a container)",
                dir.display(),
                dev.0,
                dev.1
            )
        })?;
        if sys.join("partition").exists() {
            sys = sys.parent().map(Path::to_path_buf).ok_or("a partition without a disk")?;
        }
        let name = sys.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let queue = sys.join("queue");
        if !queue.is_dir() {
            return Err(format!("{name} has no queue directory (a device mapper or virtual device)"));
        }
        Ok((name, queue))
    }
}

/// The bracketed choice of a sysfs list such as "always [madvise] never".
fn selected(v: &str) -> Option<&str> {
    v.split_whitespace().find(|s| s.starts_with('[')).map(|s| s.trim_matches(['[', ']']))
}

/// (irq, device) of the NVMe and network interrupts in /proc/interrupts text.
fn device_irqs(interrupts: &str) -> Vec<(u32, String)> {
    let device = |name: &str| {
        name.starts_with("nvme")
            || ["eth", "ens", "enp", "eno", "mlx", "ice", "i40e", "ixgbe", "bnxt"].iter().any(|p| name.starts_with(p))
    };
    interrupts
        .lines()
        .filter_map(|line| {
            let (irq, rest) = line.trim_start().split_once(':')?;
            let irq: u32 = irq.parse().ok()?;
            let name = rest.split_whitespace().last()?;
            device(name).then(|| (irq, name.to_string()))
        })
        .collect()
}

/// (major, minor) of the device holding `dir`.
fn device_of(dir: &Path) -> Result<(u32, u32), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let dev = meta.dev();
    Ok((libc::major(dev), libc::minor(dev)))
}

/// Whether this process can set up an io_uring: one tiny ring, closed at once.
fn io_uring_probe() -> Finding {
    const CHECK: &str = "io_uring_probe";
    let why = "glommio's shards need io_uring; without it Keel cannot start";
    // SAFETY: io_uring_setup writes only into `params`, which lives in this frame; the
    // descriptor it returns is closed right away.
    let fd = unsafe {
        let mut params = [0u8; 120];
        libc::syscall(libc::SYS_io_uring_setup, 4u32, params.as_mut_ptr())
    };
    if fd >= 0 {
        // SAFETY: `fd` is the descriptor io_uring_setup just returned, owned by no one else.
        unsafe { libc::close(fd as i32) };
        return Finding::new(CHECK, "a 4-entry ring set up", "works", Status::Ok, why);
    }
    let err = std::io::Error::last_os_error();
    let reason = match err.raw_os_error() {
        Some(libc::ENOSYS) => "the kernel has no io_uring (ENOSYS)",
        Some(libc::EPERM) => "refused (EPERM): io_uring_disabled, a seccomp filter or the container runtime",
        Some(libc::ENOMEM) => "ENOMEM: the memlock limit is too low for even one ring",
        _ => "refused",
    };
    Finding::new(CHECK, format!("{reason}: {err}"), "works", Status::Advice, why)
}

fn memlock() -> Finding {
    const CHECK: &str = "memlock";
    // Three rings per shard with registered buffers: what `keel serve` asks for.
    let wanted: u64 = 512 << 20;
    let why = "glommio registers each shard's I/O buffers with its rings; below the limit it silently falls back to slower paths";
    // SAFETY: getrlimit writes only into `lim`.
    let lim = unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim);
        lim
    };
    let show =
        |v: libc::rlim_t| if v == libc::RLIM_INFINITY { "unlimited".to_string() } else { format!("{} MiB", v >> 20) };
    let current = format!("soft {}, hard {}", show(lim.rlim_cur), show(lim.rlim_max));
    if lim.rlim_cur == libc::RLIM_INFINITY
        || lim.rlim_cur >= wanted
        || lim.rlim_max == libc::RLIM_INFINITY
        || lim.rlim_max >= wanted
    {
        // `keel serve` raises the soft limit up to the hard one itself.
        Finding::new(CHECK, current, "512 MiB or unlimited", Status::Ok, why)
    } else {
        Finding::new(
            CHECK,
            current,
            "512 MiB or unlimited (LimitMEMLOCK=infinity in the service unit)",
            Status::Advice,
            why,
        )
    }
}

/// Writes every fix of the findings that need one; each finding says what happened.
pub fn apply(findings: &mut [Finding]) {
    for f in findings.iter_mut().filter(|f| f.status == Status::Change) {
        let mut done = Vec::new();
        for (path, value) in &f.fix {
            match std::fs::write(path, value) {
                Ok(()) => done.push(format!("wrote {value} to {}", path.display())),
                Err(e) => done.push(format!("cannot write {}: {e}", path.display())),
            }
        }
        f.applied = Some(if done.is_empty() { "nothing to write".to_string() } else { done.join("; ") });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_with(files: &[(&str, &str)]) -> (tempfile::TempDir, Host) {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = dir.path().join(path.trim_start_matches('/'));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let host = Host { root: dir.path().to_path_buf(), data_dir: None, shard_cpus: vec![1] };
        (dir, host)
    }

    #[test]
    fn findings_from_the_files_and_na_when_absent() {
        let (_dir, host) = host_with(&[
            ("/sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never\n"),
            ("/proc/sys/vm/swappiness", "60\n"),
            ("/sys/devices/system/cpu/online", "0-1\n"),
            ("/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "powersave\n"),
            ("/sys/devices/system/cpu/isolated", "\n"),
            (
                "/proc/interrupts",
                "           CPU0 CPU1\n 24:  5  6  PCI-MSI  nvme0q1\n 25: 1 1 PCI-MSI eth0-rx\n 9: 0 0 acpi\n",
            ),
            ("/proc/irq/24/smp_affinity_list", "0-1\n"),
            ("/proc/irq/25/smp_affinity_list", "0\n"),
        ]);
        let mut findings = host.check();
        let by = |name: &str| findings.iter().find(|f| f.check == name).unwrap().clone();
        assert_eq!(
            (by("transparent_hugepages").current.as_str(), by("transparent_hugepages").status),
            ("always", Status::Change)
        );
        assert_eq!(by("swappiness").status, Status::Change);
        assert_eq!(by("cpu_governor").current, "powersave");
        assert_eq!(by("isolated_cores").status, Status::Advice);
        let irq = by("irq_affinity");
        assert_eq!((irq.status, irq.fix.len()), (Status::Change, 1), "{irq:?}");
        assert!(irq.current.contains("24(nvme0q1)"), "{}", irq.current);
        assert_eq!(by("disk_scheduler").status, Status::NotApplicable);
        apply(&mut findings);
        let swappiness = std::fs::read_to_string(host.path("/proc/sys/vm/swappiness")).unwrap();
        assert_eq!(swappiness, "1");
        assert_eq!(std::fs::read_to_string(host.path("/proc/irq/24/smp_affinity_list")).unwrap(), "0");
    }

    #[test]
    fn an_empty_root_gives_na_never_a_failure() {
        let (_dir, host) = host_with(&[]);
        let findings = host.check();
        for name in ["cpu_governor", "irq_affinity", "transparent_hugepages", "swappiness", "disk_nomerges"] {
            let f = findings.iter().find(|f| f.check == name).unwrap();
            assert_eq!(f.status, Status::NotApplicable, "{f:?}");
            assert!(!f.why.is_empty());
        }
    }

    #[test]
    fn bracketed_choice() {
        assert_eq!(selected("none [mq-deadline] kyber"), Some("mq-deadline"));
        assert_eq!(selected("none"), None);
    }
}
