//! The one way a test runs a helper process (an S3 server, a broker, the
//! fault proxy, a Lambda runtime or function, Home Assistant): started
//! with its stdin and stdout piped, ready when its first line says so, and
//! stopped by closing its stdin. The helper scripts stop what they started
//! on that EOF (tests/support/stdin_guard.py), so nothing outlives its
//! test: the stdin is closed when the value drops, and by the kernel when
//! the test process exits or crashes (a server in a `static` is never
//! dropped).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::Mutex;

/// A helper process held by its stdin (see the module's doc). Shareable
/// between a binary's tests (`Sync`), so that one can sit in a `static`.
pub struct Supervised {
    stdin: Mutex<Option<ChildStdin>>,
    stdout: Mutex<BufReader<ChildStdout>>,
    child: Mutex<Child>,
}

impl Supervised {
    /// Spawns `cmd` with stdin and stdout piped (stderr stays the test's);
    /// panics naming `what` when it cannot be spawned. The caller then
    /// reads its ready line ([`Supervised::read_line`]).
    pub fn spawn(mut cmd: Command, what: &str) -> Supervised {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what} ({e})"));
        Supervised {
            stdin: Mutex::new(child.stdin.take()),
            stdout: Mutex::new(BufReader::new(child.stdout.take().unwrap())),
            child: Mutex::new(child),
        }
    }

    /// The next line the helper printed, with its line end; empty once its
    /// stdout is closed.
    pub fn read_line(&self) -> String {
        let mut line = String::new();
        self.stdout.lock().unwrap().read_line(&mut line).unwrap();
        line
    }

    /// The helper's process id.
    pub fn pid(&self) -> u32 {
        self.child.lock().unwrap().id()
    }

    /// Whether the helper's stdin is still held open.
    pub fn holds_stdin(&self) -> bool {
        self.stdin.lock().unwrap().is_some()
    }

    /// Closes the helper's stdin, first writing `last` as a line when
    /// given: the helper's signal to stop. Nothing when already closed.
    pub fn close_stdin(&self, last: Option<&str>) {
        let stdin = self.stdin.lock().unwrap().take();
        if let (Some(mut stdin), Some(line)) = (stdin, last) {
            let _ = writeln!(stdin, "{line}");
        }
    }

    /// Waits for the helper to exit (its stdin closed first).
    pub fn stop(&self) -> Option<ExitStatus> {
        self.close_stdin(None);
        self.child.lock().unwrap().wait().ok()
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop();
    }
}
