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

// SAFETY: every block is either the system allocator's (small, or aligned past a page) or a private anonymous
// mapping of its own (large): `alloc` returns memory of at least `layout.size()` bytes aligned to `layout.align()`
// (mappings are page-aligned and `is_large` requires `align <= PAGE`) or null on failure, and a block is given back
// to whichever made it, since `is_large` of the same layout decides both ways; no block is shared between calls.
unsafe impl GlobalAlloc for LargeByMmap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !is_large(layout.size(), layout.align()) {
            // SAFETY: the caller's contract for `alloc` (a non-zero size) is passed on unchanged.
            return unsafe { System.alloc(layout) };
        }
        // SAFETY: a new private anonymous mapping: no address hint, no file; it touches no existing memory.
        let mapped = unsafe { libc::mmap(
            ptr::null_mut(),
            layout.size(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        ) };
        if mapped == libc::MAP_FAILED {
            ptr::null_mut()
        } else {
            mapped as *mut u8
        }
    }

    unsafe fn dealloc(&self, at: *mut u8, layout: Layout) {
        if is_large(layout.size(), layout.align()) {
            // SAFETY: `at` was mapped by `alloc` (or `realloc`) with this layout's size (the caller's contract:
            // the same layout it was allocated with), and is unmapped once.
            unsafe { libc::munmap(at as *mut libc::c_void, layout.size()) };
        } else {
            // SAFETY: `at` came from `System` with this layout (small layouts never go to mmap).
            unsafe { System.dealloc(at, layout) };
        }
    }

    unsafe fn realloc(&self, at: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (was, will) = (is_large(layout.size(), layout.align()), is_large(new_size, layout.align()));
        if !was && !will {
            // SAFETY: `at` came from `System` with `layout`, and the new size stays small: System keeps it.
            return unsafe { System.realloc(at, layout, new_size) };
        }
        if was && will {
            // SAFETY: `at` is a mapping of `layout.size()` bytes made here; mremap keeps its contents, may move it
            // (the old address is then unmapped by the kernel) and returns a page-aligned mapping of `new_size`.
            let moved = unsafe { libc::mremap(at as *mut libc::c_void, layout.size(), new_size, libc::MREMAP_MAYMOVE) };
            return if moved == libc::MAP_FAILED { ptr::null_mut() } else { moved as *mut u8 };
        }
        // SAFETY: `realloc`'s contract: `new_size`, rounded up to `layout.align()`, does not overflow isize, and the
        // alignment is the valid one of `layout`.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: `new_layout` has a non-zero size (realloc's contract).
        let moved = unsafe { self.alloc(new_layout) };
        if !moved.is_null() {
            // SAFETY: the old block is valid for `layout.size()` bytes and the new one for `new_size`, so copying the
            // smaller count stays inside both, which are distinct blocks; the old block is then freed with the
            // layout it was allocated with.
            unsafe {
                ptr::copy_nonoverlapping(at, moved, layout.size().min(new_size));
                self.dealloc(at, layout);
            }
        }
        moved
    }
}
