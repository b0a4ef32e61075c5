"""Runs a command with the test servers started once for all of it.

    python servers.py ministack moto -- cargo nextest run ...

Starts each named kind (serve.py's kinds: ministack, moto, mosquitto, ...)
on a free 127.0.0.1 port, hands the ports to the command as
TEST_PORT_MINISTACK, TEST_PORT_MOTO, ... (tests/suite/common's
`shared_port`); the kind `forkserver` is tests/support/forkserver.py on a
Unix socket, handed over as TEST_PY_FORKSERVER. It runs the command, stops the servers and exits with the
command's exit code. Every test process of the run shares these servers,
each test in a bucket of its own, instead of starting a server per test
process. A server that does not start is retried on another port, three
times at most; then the command is not run (exit 1). At the end it prints
the machine's CPU seconds over the command (/proc/stat: user, system, idle)
and each server's share (its processes and the children they waited for;
the fork server's helpers are reaped by the kernel, so not counted), so a
slow suite shows where its CPU went. It leaves the temporary directory as it
found it (each server removes its own folder; this script the socket's).
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(kind):
    """serve.py `kind` on a free port: (port, its process), once it said ready."""
    for _ in range(3):
        port = free_port()
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "serve.py"), kind, str(port)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if proc.stdout.readline().strip() == "ready":
            return port, proc
        proc.stdin.close()
        proc.wait()
    sys.exit(f"servers.py: {kind} did not start (see serve.py's message above)")


def start_forkserver(path):
    """forkserver.py on the Unix socket `path`, once it said ready."""
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "forkserver.py"), path],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "ready":
        sys.exit("servers.py: forkserver.py did not start (see its message above)")
    return proc


def machine_cpu():
    """Seconds of user (nice included), system and idle CPU since boot, all cores."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    return (f[0] + f[1]) / tick, f[2] / tick, f[3] / tick


def cpu_seconds(pid):
    """User + system CPU of `pid` and its live descendants, with the children
    each has reaped (/proc/PID/stat fields 14-17), in seconds."""
    ticks, stack = 0, [pid]
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            children.setdefault(int(fields[1]), []).append((int(entry), fields))
    own = {}
    for ps in children.values():
        for p, fields in ps:
            own[p] = sum(int(f) for f in fields[11:15])
    while stack:
        p = stack.pop()
        ticks += own.get(p, 0)
        stack += [c for c, _ in children.get(p, [])]
    return ticks / os.sysconf("SC_CLK_TCK")


def main():
    args = sys.argv[1:]
    if "--" not in args:
        sys.exit(__doc__)
    split = args.index("--")
    kinds, command = args[:split], args[split + 1:]
    env = dict(os.environ)
    servers = []
    # The fork server's socket; removed at the end, as serve.py removes its own folders.
    sockets = tempfile.mkdtemp(prefix="ac-fork-")
    t0 = time.monotonic()
    try:
        for kind in kinds:
            if kind == "forkserver":
                path = os.path.join(sockets, "forkserver.sock")
                servers.append((kind, start_forkserver(path)))
                env["TEST_PY_FORKSERVER"] = path
                continue
            port, proc = start(kind)
            servers.append((kind, proc))
            env[f"TEST_PORT_{kind.upper().replace('-', '_')}"] = str(port)
            print(f"servers.py: {kind} on 127.0.0.1:{port}", file=sys.stderr)
        print(f"servers.py: started in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
        before = machine_cpu()
        code = subprocess.call(command, env=env)
        user, system, idle = (b - a for a, b in zip(before, machine_cpu()))
        used = [f"{kind} {cpu_seconds(proc.pid):.0f} s" for kind, proc in servers]
        print(f"servers.py: the machine's CPU over the command: user {user:.0f} s, system "
              f"{system:.0f} s, idle {idle:.0f} s; of it the servers': {', '.join(used)}",
              file=sys.stderr)
    finally:
        for kind, proc in servers:
            proc.stdin.close()
        for kind, proc in servers:
            proc.wait()
        shutil.rmtree(sockets, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
