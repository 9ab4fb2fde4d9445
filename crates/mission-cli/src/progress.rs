//! Progress bars for transfers (bytes, files, rate and ETA) and status lines for waits, drawn
//! only on a terminal.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use indicatif::{ProgressBar, ProgressStyle};
use mission_client::TransferObserver;

/// A [`TransferObserver`] drawing one progress bar on stderr.
pub struct TransferBar {
    bar: ProgressBar,
    files_total: AtomicU64,
    files_done: AtomicU64,
}

impl TransferBar {
    /// A bar labelled `verb` ("upload", "download") when stderr is a terminal; `None` otherwise
    /// (scripts and logs get no control characters).
    pub fn for_terminal(verb: &'static str) -> Option<Arc<dyn TransferObserver>> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template(&format!(
                "{verb} {{bar:30}} {{bytes}}/{{total_bytes}} {{binary_bytes_per_sec}} ETA {{eta}} {{msg}}"
            ))
            .expect("valid template"),
        );
        Some(Arc::new(Self { bar, files_total: AtomicU64::new(0), files_done: AtomicU64::new(0) }))
    }
}

/// A spinner with a message (a job's status while waiting) when stderr is a terminal.
pub fn status_line() -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new_spinner();
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    Some(bar)
}

impl TransferObserver for TransferBar {
    fn start(&self, files: u64, bytes: u64) {
        self.files_total.store(files, Ordering::Relaxed);
        self.bar.set_length(bytes);
        self.bar.set_message(format!("0/{files} files"));
    }

    fn bytes(&self, n: u64) {
        self.bar.inc(n);
    }

    fn file_done(&self, _path: &str, _size: u64, _skipped: bool) {
        let done = self.files_done.fetch_add(1, Ordering::Relaxed) + 1;
        let total = self.files_total.load(Ordering::Relaxed);
        self.bar.set_message(format!("{done}/{total} files"));
        if done == total {
            self.bar.finish();
        }
    }
}
