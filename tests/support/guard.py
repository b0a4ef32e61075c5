"""Runs one command for a test and stops it when our stdin closes.

    python guard.py LOG [PORT] -- CMD [ARGS...]

CMD runs in a session of its own with stdout and stderr appended to LOG. With
PORT, waits (up to 60 s) until 127.0.0.1:PORT accepts connections; then prints
"ready". The test keeps the write end of our stdin open for as long as it
needs CMD; when it closes it (or the test process dies), CMD's whole process
group is terminated, so nothing outlives its test. Exits with CMD's status if
CMD ends first.
"""
import os
import signal
import socket
import subprocess
import sys
import time

import stdin_guard


def main():
    args = sys.argv[1:]
    sep = args.index("--")
    log_path, port = args[0], (int(args[1]) if sep > 1 else None)
    cmd = args[sep + 1:]
    log = open(log_path, "wb")  # truncated: a stale log of an earlier run under the same name must not answer for this one
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    if port is not None:
        deadline = time.time() + 60
        while True:
            if proc.poll() is not None:
                sys.exit(f"{cmd[0]} exited with {proc.returncode}; see {log_path}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.time() > deadline:
                    os.killpg(proc.pid, signal.SIGKILL)
                    sys.exit(f"{cmd[0]} did not listen on {port} within 60 s; see {log_path}")
                time.sleep(0.05)
    print("ready", flush=True)
    stdin_guard.stop_group_on_close(proc, grace=5, background=True)
    sys.exit(proc.wait())


if __name__ == "__main__":
    main()
