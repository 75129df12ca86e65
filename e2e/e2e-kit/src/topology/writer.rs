//! What a background writer shares with its tasks: when to stop, and how many writes a
//! replica has acknowledged so far.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// The stop flag and the count of acknowledged writes of a background writer.
#[derive(Clone, Default)]
pub struct WriterCount {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
}

impl WriterCount {
    /// Whether the writer was asked to stop.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Asks the writer to stop.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Counts one more acknowledged write.
    pub fn add_acked(&self) {
        self.acked.fetch_add(1, Ordering::Relaxed);
    }

    /// Acknowledged writes so far.
    pub fn acked(&self) -> usize {
        self.acked.load(Ordering::Relaxed)
    }

    /// Waits until `more` further writes have been acknowledged.
    pub async fn progressed(&self, more: usize, timeout: Duration) -> Result<()> {
        let target = self.acked() + more;
        let started = Instant::now();
        while self.acked() < target {
            if started.elapsed() > timeout {
                bail!(
                    "the writer acknowledged {} of {more} more writes in {timeout:?}",
                    self.acked() + more - target
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }
}
