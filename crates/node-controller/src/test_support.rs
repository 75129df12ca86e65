//! Helpers the unit tests share.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Writes `content` to `path` as an executable a test then runs. A child process writes it:
/// a file this test process opened for writing could be inherited by a child another test
/// thread forks at that moment, and running the file while that copy is open fails with
/// "Text file busy". The child's copy ends with the child, before this returns.
pub fn write_executable(path: &Path, content: &str) {
    let mut writer = Command::new("sh")
        .args(["-c", "cat > \"$1\" && chmod 755 \"$1\"", "sh"])
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .expect("sh runs");
    writer
        .stdin
        .take()
        .expect("piped")
        .write_all(content.as_bytes())
        .expect("written");
    assert!(
        writer.wait().expect("sh ends").success(),
        "{path:?} written"
    );
}
