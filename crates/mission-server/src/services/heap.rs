//! Handing freed heap memory back to the system.
//!
//! glibc's allocator keeps what a program frees in its arenas for reuse and returns memory to the
//! system only from the top of the main heap. After work that allocates and frees a lot at once
//! (a job array of 100,000 elements goes through full job records and their batch writes, 5,000
//! at a time) the server's resident memory would stay at that work's peak, though the queue
//! itself keeps a hundred-odd bytes per job.

/// Gives the pages no allocation uses back to the system (a no-op where the C library is not
/// glibc). Costs a walk of the allocator's free lists: call it after large work, not per request.
pub fn release_free_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers; it only rearranges glibc's own free lists, under
    // their locks, and is safe to call from any thread at any time.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}
