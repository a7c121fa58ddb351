//! Host tuning for Keel's shards: which CPUs to pin to, how `--memory` is split per
//! shard, and the memlock limit glommio's io_uring rings need. Runs on the main thread
//! before any executor starts; it never touches the data path.
//!
//! `keel tune` lives here too: [`host`] checks (and with `--apply` sets) what on the
//! host matters to the shards, [`disk`] measures the data disk and writes the
//! `io-properties.yaml` that `keel serve --io-properties` reads.

pub mod disk;
pub mod host;

/// CPUs this process may run on (its affinity mask), in ascending order.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `set` is a plain bitmask owned by this frame; sched_getaffinity writes at
    // most size_of::<cpu_set_t>() bytes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return (0..std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)).collect();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// Picks `smp` CPUs to pin shards to: the first `smp` allowed CPUs, or of `cpuset`
/// ("0-3,6") when given, which must lie within the allowed ones. Several brokers on
/// one host each take their own cores this way (as `taskset` would).
pub fn pick_cpus(smp: usize, cpuset: Option<&str>) -> Result<Vec<usize>, String> {
    let allowed = allowed_cpus();
    let cpus = match cpuset {
        None => allowed,
        Some(list) => {
            let set = parse_cpuset(list)?;
            if let Some(c) = set.iter().find(|c| !allowed.contains(c)) {
                return Err(format!("--cpuset {list}: cpu {c} is not one this process may use ({allowed:?})"));
            }
            set
        }
    };
    if smp == 0 || smp > cpus.len() {
        return Err(format!("--smp {smp} asks for more cores than the {} available ({cpus:?})", cpus.len()));
    }
    Ok(cpus[..smp].to_vec())
}

/// "0-3,6" as [0, 1, 2, 3, 6]: sorted, without duplicates.
pub fn parse_cpuset(list: &str) -> Result<Vec<usize>, String> {
    let bad = || format!("--cpuset {list:?}: expected a list such as 0-3,6");
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let (lo, hi): (usize, usize) = (lo.trim().parse().map_err(|_| bad())?, hi.trim().parse().map_err(|_| bad())?);
        if lo > hi || hi >= libc::CPU_SETSIZE as usize {
            return Err(bad());
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Raises RLIMIT_MEMLOCK so each executor's registered io_uring buffers fit; glommio
/// silently falls back to slower paths when they do not. Returns the limit in force.
pub fn raise_memlock(bytes: u64) -> u64 {
    // SAFETY: getrlimit/setrlimit read and write the struct we pass, nothing else.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim);
        if lim.rlim_cur != libc::RLIM_INFINITY && lim.rlim_cur < bytes {
            let want = libc::rlimit { rlim_cur: bytes, rlim_max: lim.rlim_max.max(bytes) };
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &want) != 0 {
                tracing::warn!(limit = lim.rlim_cur, wanted = bytes, "could not raise RLIMIT_MEMLOCK");
            }
            libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim);
        }
        lim.rlim_cur
    }
}

/// io_uring buffer memory per shard that fits `memlock_bytes` across `shards` shards
/// of three rings each, with 1 MiB of headroom, in 64 KiB steps, at most `max`.
pub fn io_memory_per_shard(memlock_bytes: u64, shards: usize, max: usize) -> usize {
    let usable = memlock_bytes.saturating_sub(1 << 20) / (3 * shards.max(1) as u64);
    ((usable as usize).min(max) / (64 << 10)) * (64 << 10)
}

/// Parses sizes like `2G`, `512M`, `64k` or a plain byte count.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = s[i..].to_ascii_lowercase();
            let mult = match unit.trim_end_matches(['b', 'i']) {
                "" => 1,
                "k" => 1 << 10,
                "m" => 1 << 20,
                "g" => 1 << 30,
                "t" => 1u64 << 40,
                _ => return Err(format!("unknown size unit in {s:?}")),
            };
            (&s[..i], mult)
        }
        None => (s, 1),
    };
    num.trim().parse::<u64>().map(|n| n * mult).map_err(|_| format!("invalid size {s:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn sizes() {
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("100").unwrap(), 100);
        assert!(parse_size("12Q").is_err());
    }
    #[test]
    fn io_memory_fits_memlock() {
        assert_eq!(io_memory_per_shard(u64::MAX, 2, 8 << 20), 8 << 20);
        let m = io_memory_per_shard(8 << 20, 2, 8 << 20);
        assert!(m * 3 * 2 <= 7 << 20 && m > 0);
    }
    #[test]
    fn cpus() {
        assert!(!allowed_cpus().is_empty());
        assert!(pick_cpus(0, None).is_err());
        assert_eq!(pick_cpus(1, None).unwrap().len(), 1);
        let last = *allowed_cpus().last().unwrap();
        assert_eq!(pick_cpus(1, Some(&last.to_string())).unwrap(), vec![last]);
        assert!(pick_cpus(1, Some("100000")).is_err());
        assert_eq!(parse_cpuset("3,0-2, 2").unwrap(), vec![0, 1, 2, 3]);
        for bad in ["", "a", "2-1", "1-", "-1"] {
            assert!(parse_cpuset(bad).is_err(), "{bad}");
        }
    }
}
