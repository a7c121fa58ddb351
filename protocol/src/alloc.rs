//! A global allocator that makes hostile element counts harmless.
//!
//! `kafka-protocol` sizes a `Vec` from an array's element count before decoding any
//! element. That count comes off the wire, so a 20-byte request can ask for hundreds of
//! gigabytes; an allocation the system refuses aborts the process (it is not a panic
//! that could be caught). With this allocator, every allocation of a gigabyte or more is
//! an anonymous `MAP_NORESERVE` mapping: the kernel reserves address space only, pages
//! are backed when touched, and the decoder then fails on the missing bytes and frees
//! the mapping. No legitimate Keel allocation comes near that size (requests are capped
//! at `request_bytes_max`), so normal allocations go to mimalloc: its per-thread heaps
//! suit one executor per core, and with glibc's allocator malloc and free took about a
//! fifth of the broker's CPU under keyed traffic over 1,000 partitions.

use std::alloc::{GlobalAlloc, Layout};

use mimalloc::MiMalloc;

/// Allocations at least this large are lazily mapped.
pub const LAZY_BYTES_MIN: usize = 1 << 30;
const PAGE: usize = 4096;

pub struct GuardedAllocator;

fn is_lazy(size: usize, align: usize) -> bool {
    size >= LAZY_BYTES_MIN && align <= PAGE
}

// SAFETY: every pointer handed out is either from `MiMalloc` (and returned to it) or
// from `mmap` of exactly `layout.size()` bytes (and returned with `munmap` of the same
// size); `is_lazy` decides which, from the layout alone, the same way on every call.
unsafe impl GlobalAlloc for GuardedAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !is_lazy(layout.size(), layout.align()) {
            return MiMalloc.alloc(layout);
        }
        let p = libc::mmap(
            std::ptr::null_mut(),
            layout.size(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            std::ptr::null_mut()
        } else {
            p as *mut u8
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_lazy(layout.size(), layout.align()) {
            // Anonymous mappings are zero-filled.
            self.alloc(layout)
        } else {
            MiMalloc.alloc_zeroed(layout)
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_lazy(layout.size(), layout.align()) {
            libc::munmap(ptr as *mut libc::c_void, layout.size());
        } else {
            MiMalloc.dealloc(ptr, layout)
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !is_lazy(layout.size(), layout.align()) && !is_lazy(new_size, layout.align()) {
            return MiMalloc.realloc(ptr, layout, new_size);
        }
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        let new = self.alloc(new_layout);
        if !new.is_null() {
            std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
            self.dealloc(ptr, layout);
        }
        new
    }
}

/// `mi_option_purge_delay` in mimalloc 3's `mimalloc.h` (the Rust bindings leave it
/// out); `purge_delay_is_the_option_we_mean` checks it against its default.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps the allocator's calls into the kernel short enough not to stall a shard,
/// which makes them on its own thread. Call once, before the shards start.
/// - Transparent huge pages off for the process: mimalloc asks for them, and the first
///   touch of a huge page zeroes 2 MiB inside one page fault (14 ms on a virtual
///   machine's fresh memory, where the fault-in of 4 KiB pages comes in pieces too
///   small to matter); defragmenting memory for one can take longer still.
/// - Freed memory kept for reuse rather than handed back: mimalloc returns free ranges
///   a second after they were freed, in one `madvise` per range on whichever thread
///   allocates next, and after a 1 GiB topic's buffers were dropped that call took
///   30 ms. A shard's memory is bounded by `--memory`, so the process stays at the
///   resident size it reached, as a server that reserves its memory up front does.
///
/// Returns whether the kernel took the first setting (the second cannot fail).
pub fn avoid_reactor_stalls() -> bool {
    // SAFETY: `mi_option_set` stores one integer option; mimalloc reads it when it
    // next decides whether to purge. `prctl` reads only its integer arguments.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1);
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purge_delay_is_the_option_we_mean() {
        // mimalloc 3 purges after 1,000 ms unless told otherwise; no other option
        // defaults to that.
        // SAFETY: reads one integer option.
        assert_eq!(unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) }, 1000);
    }

    #[test]
    fn huge_allocations_are_reserved_not_backed() {
        let a = GuardedAllocator;
        let layout = Layout::from_size_align(400 << 30, 8).unwrap();
        // SAFETY: the layout is non-zero; the pointer is written once and freed with
        // the same layout.
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null(), "400 GiB of address space");
            *p = 7;
            let q = a.realloc(p, layout, 2 << 30);
            assert_eq!(*q, 7);
            a.dealloc(q, Layout::from_size_align(2 << 30, 8).unwrap());
            let small = Layout::from_size_align(64, 8).unwrap();
            let s = a.alloc(small);
            let s = a.realloc(s, small, 1 << 30);
            assert!(!s.is_null());
            a.dealloc(s, Layout::from_size_align(1 << 30, 8).unwrap());
        }
    }
}
