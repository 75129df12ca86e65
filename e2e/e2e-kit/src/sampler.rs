//! A check run on a thread of its own about twice a second while a test changes something
//! underneath, keeping every failure it saw: what a wait for the end state cannot tell.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often [`Sampler`] runs its check.
const EVERY: Duration = Duration::from_millis(500);

/// What a [`Sampler`] saw.
#[derive(Debug, Default)]
pub struct Samples {
    /// How many times the check ran.
    pub taken: usize,
    /// What it found wrong, in order.
    pub failed: Vec<String>,
}

/// Runs a check until stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    task: std::thread::JoinHandle<Samples>,
}

impl Sampler {
    /// Starts running `check`, which returns what it found wrong (nothing: all well).
    pub fn start(mut check: impl FnMut() -> Vec<String> + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let task = std::thread::spawn(move || {
            let mut samples = Samples::default();
            while !stopped.load(Ordering::Relaxed) {
                samples.failed.extend(check());
                samples.taken += 1;
                std::thread::sleep(EVERY);
            }
            samples
        });
        Self { stop, task }
    }

    /// Stops after the check under way and says what it saw.
    pub fn stop(self) -> Samples {
        self.stop.store(true, Ordering::Relaxed);
        self.task.join().expect("the sampler's check panicked")
    }
}
