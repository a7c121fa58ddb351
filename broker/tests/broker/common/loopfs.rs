//! An ext4 file system on a loop device, for tests that need a real device to fail
//! or fill. Needs root (to mount); callers print SKIPPED with the reason without it.

use std::path::PathBuf;
use std::process::Command;

/// `_IOR('X', 125, __u32)`: ext4's (and xfs's) "going down" ioctl.
const EXT4_IOC_SHUTDOWN: u64 = 0x8004_587D;
/// Shut down without flushing the journal: as if the drive vanished.
const EXT4_GOING_FLAGS_NOLOGFLUSH: u32 = 2;

/// A mounted ext4 file system of a given size, unmounted (and the device freed) on drop.
pub struct LoopFs {
    pub mount: PathBuf,
    _tmp: tempfile::TempDir,
}

impl LoopFs {
    pub fn create(bytes: u64) -> Result<LoopFs, String> {
        LoopFs::create_with(bytes, &[])
    }

    /// As `create`, with more `mkfs.ext4` options (`-N` for few inodes).
    pub fn create_with(bytes: u64, mkfs_options: &[&str]) -> Result<LoopFs, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("needs root to mount a loop file system".into());
        }
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        let image = tmp.path().join("disk.img");
        let mount = tmp.path().join("mnt");
        std::fs::create_dir(&mount).map_err(|e| e.to_string())?;
        std::fs::File::create(&image).and_then(|f| f.set_len(bytes)).map_err(|e| e.to_string())?;
        let mut mkfs = vec!["-q", "-F"];
        mkfs.extend_from_slice(mkfs_options);
        mkfs.push(image.to_str().unwrap());
        run("mkfs.ext4", &mkfs)?;
        run("mount", &["-o", "loop", image.to_str().unwrap(), mount.to_str().unwrap()])?;
        Ok(LoopFs { mount, _tmp: tmp })
    }

    /// Every later I/O on the file system fails with EIO (what xfstests' `godown` does).
    pub fn fail(&self) {
        let dir = std::fs::File::open(&self.mount).unwrap();
        let flags = EXT4_GOING_FLAGS_NOLOGFLUSH;
        // SAFETY: the ioctl reads one u32 through the pointer, which outlives the call.
        let rc = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&dir), EXT4_IOC_SHUTDOWN as _, &flags) };
        assert_eq!(rc, 0, "EXT4_IOC_SHUTDOWN: {}", std::io::Error::last_os_error());
    }

    /// Bytes still free for an unprivileged writer... and for root (ext4 reserves 5%).
    pub fn free_bytes(&self) -> u64 {
        let path = std::ffi::CString::new(self.mount.to_str().unwrap()).unwrap();
        // SAFETY: statvfs writes into `s`, which outlives the call; `path` is NUL-terminated.
        unsafe {
            let mut s: libc::statvfs = std::mem::zeroed();
            assert_eq!(libc::statvfs(path.as_ptr(), &mut s), 0);
            s.f_bfree * s.f_frsize
        }
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let _ = run("umount", &["-l", self.mount.to_str().unwrap()]);
    }
}

pub fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| format!("{cmd}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}
