//! Progress of uploads and downloads for Python: the SDK's workers count into a [`Progress`],
//! and Python's own thread shows it (verbose lines through `print`, so they go wherever
//! `sys.stdout` goes, and a progress reporter's `update`) every tick of `block_on_ticking`.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use mission_client::{TransferObserver, TransferOptions, file_line};
use pyo3::prelude::*;

/// Counts of one transfer, and the verbose lines not yet printed.
pub struct Progress {
    /// What happened to files that were not skipped: "uploaded" or "downloaded".
    moved: &'static str,
    verbose: bool,
    files: AtomicU64,
    bytes: AtomicU64,
    files_done: AtomicU64,
    bytes_done: AtomicU64,
    lines: Mutex<Vec<String>>,
}

impl TransferObserver for Progress {
    fn start(&self, files: u64, bytes: u64) {
        self.files.store(files, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
    }

    fn bytes(&self, n: u64) {
        self.bytes_done.fetch_add(n, Ordering::Relaxed);
    }

    fn file_done(&self, path: &str, size: u64, skipped: bool) {
        self.files_done.fetch_add(1, Ordering::Relaxed);
        if self.verbose {
            self.lines.lock().expect("the line queue").push(file_line(self.moved, path, size, skipped));
        }
    }
}

/// A transfer's options and its progress, shown through `reporter` (an object with
/// `update(files_done, files, bytes_done, bytes)`) when there is one.
pub struct Shown {
    progress: Option<Arc<Progress>>,
    reporter: Option<Py<PyAny>>,
}

impl Shown {
    /// Nothing is observed when there is nothing to show, so a quiet transfer costs nothing.
    pub fn new(moved: &'static str, verbose: bool, reporter: Option<Py<PyAny>>) -> Self {
        let progress = (verbose || reporter.is_some()).then(|| {
            Arc::new(Progress {
                moved,
                verbose,
                files: AtomicU64::new(0),
                bytes: AtomicU64::new(0),
                files_done: AtomicU64::new(0),
                bytes_done: AtomicU64::new(0),
                lines: Mutex::new(Vec::new()),
            })
        });
        Self { progress, reporter }
    }

    pub fn options(&self) -> TransferOptions {
        TransferOptions {
            observer: self.progress.clone().map(|p| p as Arc<dyn TransferObserver>),
            ..Default::default()
        }
    }

    /// Prints the verbose lines so far and updates the reporter.
    pub fn show(&self, py: Python<'_>) -> PyResult<()> {
        let Some(progress) = &self.progress else { return Ok(()) };
        let lines = std::mem::take(&mut *progress.lines.lock().expect("the line queue"));
        if !lines.is_empty() {
            let print = py.import("builtins")?.getattr("print")?;
            for line in lines {
                print.call1((line,))?;
            }
        }
        if let Some(reporter) = &self.reporter {
            let counts = (
                progress.files_done.load(Ordering::Relaxed),
                progress.files.load(Ordering::Relaxed),
                progress.bytes_done.load(Ordering::Relaxed),
                progress.bytes.load(Ordering::Relaxed),
            );
            reporter.call_method1(py, "update", counts)?;
        }
        Ok(())
    }
}
