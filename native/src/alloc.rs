//! Large buffers (a block's message bytes, its offsets) straight from the kernel, and back to it when freed.
//!
//! glibc's malloc raises its mmap threshold to the size of each large block freed, so after the first block
//! the scan's 16 MiB buffers came from the heap, and freed ones stayed in the process: a 5 GB capture peaked
//! 340 MiB higher than with the polars path (2470 against 2129 MiB; with `MALLOC_MMAP_THRESHOLD_` fixed, 2187).
//! This allocator serves only this library's allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr;

/// Allocations of at least this many bytes are mapped pages of their own.
const LARGE: usize = 1 << 20;
const PAGE: usize = 4096;

pub struct LargeByMmap;

fn is_large(size: usize, align: usize) -> bool {
    size >= LARGE && align <= PAGE
}

unsafe impl GlobalAlloc for LargeByMmap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !is_large(layout.size(), layout.align()) {
            return System.alloc(layout);
        }
        let mapped = libc::mmap(
            ptr::null_mut(),
            layout.size(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if mapped == libc::MAP_FAILED {
            ptr::null_mut()
        } else {
            mapped as *mut u8
        }
    }

    unsafe fn dealloc(&self, at: *mut u8, layout: Layout) {
        if is_large(layout.size(), layout.align()) {
            libc::munmap(at as *mut libc::c_void, layout.size());
        } else {
            System.dealloc(at, layout);
        }
    }

    unsafe fn realloc(&self, at: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (was, will) = (is_large(layout.size(), layout.align()), is_large(new_size, layout.align()));
        if !was && !will {
            return System.realloc(at, layout, new_size);
        }
        if was && will {
            let moved = libc::mremap(at as *mut libc::c_void, layout.size(), new_size, libc::MREMAP_MAYMOVE);
            return if moved == libc::MAP_FAILED { ptr::null_mut() } else { moved as *mut u8 };
        }
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        let moved = self.alloc(new_layout);
        if !moved.is_null() {
            ptr::copy_nonoverlapping(at, moved, layout.size().min(new_size));
            self.dealloc(at, layout);
        }
        moved
    }
}
