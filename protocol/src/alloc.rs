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

#[cfg(test)]
mod tests {
    use super::*;

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
