"""A fork server for the tests' short Python helpers (archive.py, hostile.py).

    python forkserver.py SOCKET_PATH

Each of those helpers imports boto3 and pyarrow (about half a second of CPU)
to do a few milliseconds of work, and the suite runs hundreds of them. This
server imports them once, listens on the Unix socket SOCKET_PATH, prints
"ready", and for each connection forks a child that runs one helper as if
it were `python tests/support/SCRIPT ARGS...`, its stdin the request's, and
answers with its exit code, stdout and stderr. The child starts from the
server's imports, not from scratch; nothing else is shared (each child is
a process of its own; the server holds no thread, so nothing is forked
mid-lock). It stops when its own stdin closes (stdin_guard), as every test
helper does.

Request: one JSON object, then the client shuts down its write half:
    {"script": "archive.py", "args": [...], "stdin": "..." or null}
Answer: one JSON object, then the connection closes:
    {"code": 0, "stdout": "...", "stderr": "..."}

tests/support/servers.py starts it beside the servers and hands its path
to the tests as TEST_PY_FORKSERVER (tests/suite/common's `support_py`);
without it the tests spawn each helper as before.
"""
import io
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import traceback

# What the helpers import, once (the reason for this server).
import boto3  # noqa: F401
import botocore.config  # noqa: F401
import pyarrow  # noqa: F401
import pyarrow.parquet  # noqa: F401
# pyarrow imports pandas on a table's first conversion (Table.from_pylist):
# ~0.4 s of CPU (2 s without a bytecode cache) each child would pay again.
import pandas  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))
# The helpers a request may name: short, one-shot, stdin and stdout only.
SCRIPTS = {"archive.py", "hostile.py"}


def read_all(conn):
    chunks = []
    while True:
        b = conn.recv(65536)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def leave(code=0):
    """The helpers end with os._exit (past pyarrow's and boto3's shutdown
    hooks); here that ends the helper's run, not this child, which still
    has to answer."""
    raise SystemExit(code)


def child(conn):
    """Runs one request in this (forked) process, answers, exits."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    exit_now, os._exit = os._exit, leave
    code, out, err = 1, io.StringIO(), io.StringIO()
    try:
        req = json.loads(read_all(conn))
        script = req["script"]
        if script not in SCRIPTS:
            raise ValueError(f"forkserver: {script} is not one of {sorted(SCRIPTS)}")
        sys.argv = [os.path.join(HERE, script)] + list(req["args"])
        sys.stdin = io.StringIO(req.get("stdin") or "")
        sys.stdout, sys.stderr = out, err
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
            code = 0
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=err)
                code = 1
    except BaseException:
        traceback.print_exc(file=err)
        code = 1
    try:
        sys.stdout.flush()
        conn.sendall(json.dumps({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}).encode())
        conn.close()
    finally:
        exit_now(0)


def main():
    path = sys.argv[1]
    if os.path.exists(path):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(128)
    # Children are reaped by the kernel: the server never waits on them.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ, "accept")
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
    print("ready", flush=True)
    try:
        while True:
            for key, _ in sel.select():
                if key.data == "stdin":
                    # Our stdin closed (or a line arrived): stop, as stdin_guard's helpers do.
                    if not os.read(sys.stdin.fileno(), 4096):
                        return
                    continue
                conn, _ = srv.accept()
                if os.fork() == 0:
                    sel.close()
                    srv.close()
                    child(conn)
                conn.close()
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


if __name__ == "__main__":
    main()
