//! `keel tune disk`: what the data directory's disk sustains with the I/O Keel does
//! (O_DIRECT through io_uring, glommio's DMA files, as the shards' log writers), like
//! Seastar's iotune. Sequential write and read bandwidth with large blocks and random
//! 4 KiB write and read IOPS, each at several queue depths, on a scratch file in the
//! data directory; the best of each goes to `io-properties.yaml`, which `keel serve
//! --io-properties` reads (see `IoProperties`).
//!
//! One executor, unpinned: the probe measures the disk, not a core. The scratch file
//! is written whole with plain writes first, so glommio's first DMA file is a
//! non-empty one (its polled-I/O probe reads block 0; see DESIGN "ground truths").

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use glommio::io::{DmaFile, OpenOptions};
use glommio::{LocalExecutorBuilder, Placement};
use serde::{Deserialize, Serialize};

/// Large-block size of the sequential passes.
pub const SEQUENTIAL_BLOCK_BYTES: usize = 128 << 10;
/// Block size of the random passes.
pub const RANDOM_BLOCK_BYTES: usize = 4 << 10;
pub const SEQUENTIAL_DEPTHS: [usize; 3] = [1, 4, 16];
pub const RANDOM_DEPTHS: [usize; 4] = [1, 4, 16, 64];

/// What the probe calls after each pass, for progress output.
pub type OnPass = Rc<dyn Fn(&Pass)>;

#[derive(Clone)]
pub struct ProbeOptions {
    pub data_dir: PathBuf,
    /// Scratch file size: every sequential pass covers it once.
    pub file_bytes: u64,
    /// Length of each random pass.
    pub random_time: Duration,
    /// Called after each pass with its name and figure, for progress output.
    pub on_pass: Option<OnPass>,
}

/// One measured pass.
#[derive(Debug, Clone, Serialize)]
pub struct Pass {
    pub workload: &'static str,
    pub block_bytes: usize,
    pub queue_depth: usize,
    pub bytes_per_second: u64,
    pub iops: u64,
}

/// What `io-properties.yaml` holds: Seastar's field names, one entry per disk, plus
/// every pass for the record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct IoProperties {
    pub disks: Vec<DiskProperties>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DiskProperties {
    pub mountpoint: String,
    pub read_iops: u64,
    pub read_bandwidth: u64,
    pub write_iops: u64,
    pub write_bandwidth: u64,
}

impl IoProperties {
    pub fn load(path: &Path) -> Result<IoProperties, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let props: IoProperties =
            serde_yaml::from_str(&text).map_err(|e| format!("parsing {}: {e}", path.display()))?;
        match props.disks.first() {
            None => Err(format!("{}: no disk in `disks`", path.display())),
            Some(d) if d.write_bandwidth == 0 || d.read_bandwidth == 0 => {
                Err(format!("{}: {}: bandwidths must be positive", path.display(), d.mountpoint))
            }
            Some(_) => Ok(props),
        }
    }

    /// The entry whose mount point holds `dir` (the longest such), else the first.
    pub fn for_dir(&self, dir: &Path) -> &DiskProperties {
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        self.disks
            .iter()
            .filter(|d| dir.starts_with(&d.mountpoint))
            .max_by_key(|d| d.mountpoint.len())
            .unwrap_or(&self.disks[0])
    }
}

/// Runs every pass; returns them and the properties they give.
pub fn probe(options: ProbeOptions) -> Result<(Vec<Pass>, IoProperties), String> {
    let scratch = options.data_dir.join(".keel-iotune.tmp");
    prepare(&scratch, options.file_bytes)?;
    let mountpoint = mount_point(&options.data_dir);
    // On this thread: the probe is all the process does meanwhile.
    let result = LocalExecutorBuilder::new(Placement::Unbound)
        .name("keel-iotune")
        .make()
        .map_err(|e| format!("starting the probe's executor: {e}"))
        .map(|executor| executor.run(run_passes(&scratch, &options)));
    let _ = std::fs::remove_file(&scratch);
    let passes = result??;
    let best = |workload: &str, f: fn(&Pass) -> u64| {
        passes.iter().filter(|p| p.workload == workload).map(f).max().unwrap_or(0)
    };
    let disk = DiskProperties {
        mountpoint,
        read_iops: best("random_read", |p| p.iops),
        read_bandwidth: best("sequential_read", |p| p.bytes_per_second),
        write_iops: best("random_write", |p| p.iops),
        write_bandwidth: best("sequential_write", |p| p.bytes_per_second),
    };
    Ok((passes, IoProperties { disks: vec![disk] }))
}

/// Writes the scratch file whole with plain writes (so reads never hit a hole and
/// glommio's first file is not empty).
fn prepare(path: &Path, bytes: u64) -> Result<(), String> {
    use std::io::Write;
    let err = |e: std::io::Error| format!("preparing {}: {e}", path.display());
    let mut f = std::fs::File::create(path).map_err(err)?;
    let chunk = vec![0x5au8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n]).map_err(err)?;
        left -= n as u64;
    }
    f.sync_all().map_err(err)
}

async fn run_passes(scratch: &Path, options: &ProbeOptions) -> Result<Vec<Pass>, String> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .dma_open(scratch)
        .await
        .map_err(|e| format!("opening {}: {e}", scratch.display()))?;
    let file = Rc::new(file);
    let mut passes = Vec::new();
    let mut record = |pass: Pass| {
        if let Some(report) = &options.on_pass {
            report(&pass);
        }
        passes.push(pass);
    };
    let blocks = (options.file_bytes / SEQUENTIAL_BLOCK_BYTES as u64).max(1);
    for write in [true, false] {
        for depth in SEQUENTIAL_DEPTHS {
            let next = Rc::new(Cell::new(0u64));
            let started = Instant::now();
            let done = run_workers(&file, depth, write, SEQUENTIAL_BLOCK_BYTES, move || {
                let i = next.get();
                next.set(i + 1);
                (i < blocks).then_some(i * SEQUENTIAL_BLOCK_BYTES as u64)
            })
            .await?;
            record(figures(
                if write { "sequential_write" } else { "sequential_read" },
                SEQUENTIAL_BLOCK_BYTES,
                depth,
                done,
                started,
            ));
        }
    }
    let pages = (options.file_bytes / RANDOM_BLOCK_BYTES as u64).max(1);
    for write in [true, false] {
        for depth in RANDOM_DEPTHS {
            let started = Instant::now();
            let until = started + options.random_time;
            let state = Rc::new(Cell::new(0x9e37_79b9_7f4a_7c15u64 ^ depth as u64));
            let done = run_workers(&file, depth, write, RANDOM_BLOCK_BYTES, move || {
                // xorshift64: a cheap, seeded spread over the file's pages.
                let mut x = state.get();
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                state.set(x);
                (Instant::now() < until).then_some((x % pages) * RANDOM_BLOCK_BYTES as u64)
            })
            .await?;
            record(figures(
                if write { "random_write" } else { "random_read" },
                RANDOM_BLOCK_BYTES,
                depth,
                done,
                started,
            ));
        }
    }
    file.fdatasync().await.map_err(|e| format!("fdatasync: {e}"))?;
    Ok(passes)
}

fn figures(workload: &'static str, block_bytes: usize, queue_depth: usize, ops: u64, started: Instant) -> Pass {
    let seconds = started.elapsed().as_secs_f64().max(1e-6);
    Pass {
        workload,
        block_bytes,
        queue_depth,
        bytes_per_second: (ops as f64 * block_bytes as f64 / seconds) as u64,
        iops: (ops as f64 / seconds) as u64,
    }
}

/// `depth` tasks each doing one I/O at a time at the positions `next` hands out, until
/// it hands out none; returns the I/Os done.
async fn run_workers(
    file: &Rc<DmaFile>,
    depth: usize,
    write: bool,
    block_bytes: usize,
    next: impl FnMut() -> Option<u64> + 'static,
) -> Result<u64, String> {
    let next = Rc::new(std::cell::RefCell::new(next));
    let tasks: Vec<_> = (0..depth)
        .map(|_| {
            let (file, next) = (file.clone(), next.clone());
            glommio::spawn_local(async move {
                let mut done = 0u64;
                loop {
                    let pos = (next.borrow_mut())();
                    let Some(pos) = pos else { return Ok(done) };
                    if write {
                        let mut buf = file.alloc_dma_buffer(block_bytes);
                        buf.as_bytes_mut().fill(0xa5);
                        file.write_at(buf, pos).await.map_err(|e| format!("write at {pos}: {e}"))?;
                    } else {
                        let read =
                            file.read_at_aligned(pos, block_bytes).await.map_err(|e| format!("read at {pos}: {e}"))?;
                        if read.len() != block_bytes {
                            return Err(format!("short read at {pos}: {} bytes", read.len()));
                        }
                    }
                    done += 1;
                }
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await?;
    }
    Ok(total)
}

/// The mount point holding `dir`, from /proc/self/mountinfo (the longest prefix).
fn mount_point(dir: &Path) -> String {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| dir.starts_with(m))
        .max_by_key(|m| m.len())
        .unwrap_or("/")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_round_trip_and_pick_the_mount() {
        let props = IoProperties {
            disks: vec![
                DiskProperties {
                    mountpoint: "/".into(),
                    read_iops: 1,
                    read_bandwidth: 2,
                    write_iops: 3,
                    write_bandwidth: 4,
                },
                DiskProperties {
                    mountpoint: "/nonexistent-mount".into(),
                    read_iops: 5,
                    read_bandwidth: 6,
                    write_iops: 7,
                    write_bandwidth: 8,
                },
            ],
        };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("io-properties.yaml");
        std::fs::write(&file, serde_yaml::to_string(&props).unwrap()).unwrap();
        let loaded = IoProperties::load(&file).unwrap();
        assert_eq!(loaded, props);
        assert_eq!(loaded.for_dir(Path::new("/nonexistent-mount/x")).write_bandwidth, 8);
        assert_eq!(loaded.for_dir(dir.path()).write_bandwidth, 4);
        std::fs::write(&file, "disks: []\n").unwrap();
        assert!(IoProperties::load(&file).unwrap_err().contains("no disk"));
    }

    #[test]
    fn a_small_probe_measures_every_pass() {
        let dir = tempfile::tempdir().unwrap();
        let options = ProbeOptions {
            data_dir: dir.path().to_path_buf(),
            file_bytes: 8 << 20,
            random_time: Duration::from_millis(50),
            on_pass: None,
        };
        let (passes, props) = probe(options).unwrap();
        assert_eq!(passes.len(), 2 * SEQUENTIAL_DEPTHS.len() + 2 * RANDOM_DEPTHS.len());
        assert!(passes.iter().all(|p| p.iops > 0), "{passes:?}");
        let disk = &props.disks[0];
        assert!(disk.write_bandwidth > 0 && disk.read_bandwidth > 0 && disk.read_iops > 0 && disk.write_iops > 0);
        assert!(!dir.path().join(".keel-iotune.tmp").exists());
    }
}
