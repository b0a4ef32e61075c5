"""Ties a test helper's life to its standard input.

The Rust tests hold the write end of a helper's stdin for as long as they
need the helper; when they close it, or the test process dies, stdin hits
EOF. Each helper script (serve.py, guard.py, hass.py, faultproxy.py) waits
here for that EOF and then stops what it started, so nothing outlives its
test. Imported by path: each script runs as `python tests/support/NAME.py`,
so this directory is first on sys.path whatever the venv.
"""
import os
import signal
import subprocess
import sys
import threading


def wait_for_close(stop_line=None):
    """Blocks until stdin closes or, with `stop_line`, a line equal to it
    (surrounding whitespace ignored) arrives."""
    for line in sys.stdin:
        if stop_line is not None and line.strip() == stop_line:
            return


def stop_group(proc, grace):
    """SIGTERM to the process group `proc` leads (started with
    start_new_session), SIGKILL after `grace` seconds. A group already gone
    is not an error."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def stop_group_on_close(proc, grace, stop_line=None, background=False):
    """Waits for stdin to close (or `stop_line`), then stops `proc`'s group
    (`stop_group`). With `background`, waits on a daemon thread and returns
    at once."""
    def watch():
        wait_for_close(stop_line)
        stop_group(proc, grace)

    if background:
        threading.Thread(target=watch, daemon=True).start()
    else:
        watch()
