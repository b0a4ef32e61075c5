"""Starts one local server for the tests and stops it when our stdin closes.

    python serve.py ministack|ministack-full|moto|moto-iam|mosquitto PORT

mosquitto reads three optional variables: MOSQUITTO_PASSWORD_FILE (a
mosquitto_passwd file; anonymous clients are still allowed, wrong passwords
are refused), MOSQUITTO_TLS_DIR (ca.crt, server.crt, server.key: the
listener speaks TLS only) and MOSQUITTO_MAX_PACKET_SIZE (bytes: the broker
disconnects a client that sends a bigger packet).

The Rust test harness keeps the write end of our stdin open for as long as the
test process lives; when it exits (or crashes), stdin hits EOF and the server
is terminated, so no server outlives its tests. Prints "ready" once the port
accepts connections from the server it started; a port already taken by
another process is refused before anything starts ("port N is taken"), and a
server that exits once started (mosquitto: "Address already in use") is
reported with its exit code and the end of its log, never as ready. The
server's log and configuration live in a temporary folder of this process,
removed however it ends (stdin closed, a failure, Ctrl-C): nothing is left
in the temporary directory.
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import stdin_guard

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.environ.get("TOOLS_DIR") or os.path.join(HERE, "..", "..", ".tools")


def port_taken(port):
    """Why 127.0.0.1:`port` cannot be listened on, or None when it can. With
    SO_REUSEADDR, as servers bind: a port in TIME_WAIT is free, one that a
    process listens on is not."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(1)
        return None
    except OSError as e:
        return e.strerror or str(e)
    finally:
        s.close()


def log_tail(path, lines=20):
    """The last `lines` lines of the server's log, for a message."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def main():
    kind, port = sys.argv[1], int(sys.argv[2])
    work = tempfile.mkdtemp(prefix=f"ac-{kind}-{port}-")
    try:
        serve(kind, port, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def serve(kind, port, work):
    """Starts `kind` on `port` with its log and configuration in `work`;
    returns once stdin closed and the server stopped."""
    env = dict(os.environ)
    log = open(os.path.join(work, f"{kind}.log"), "wb")
    if kind == "ministack":
        env.update(GATEWAY_PORT=str(port), SERVICES="s3,cloudwatch", BIND_HOST="127.0.0.1",
                   LOG_LEVEL="WARNING", S3_PERSIST="0")
        cmd = [os.path.join(TOOLS, "ministack", "bin", "ministack")]
    elif kind == "ministack-full":
        # Every service, the SAM transform (its `full` extra) and Lambda
        # functions run as local processes: AWS_ENDPOINT_URL is what
        # ministack hands a function so that its SDK calls come back here.
        # MINISTACK_SERVICES narrows the services (default: all of them).
        env.update(GATEWAY_PORT=str(port), BIND_HOST="127.0.0.1", LOG_LEVEL=env.get("MINISTACK_LOG_LEVEL", "INFO"),
                   S3_PERSIST="0", AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}")
        if env.get("MINISTACK_SERVICES"):
            env["SERVICES"] = env["MINISTACK_SERVICES"]
        else:
            env.pop("SERVICES", None)
        cmd = [os.path.join(TOOLS, "ministack-full", "bin", "ministack")]
    elif kind == "moto":
        cmd = [os.path.join(TOOLS, "py", "bin", "moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    elif kind == "moto-iam":
        # moto enforcing IAM: the first MOTO_IAM_SETUP_CALLS requests (default
        # 8: creating the user, its policy and access key) are not checked;
        # every later one is authorised against the caller's policies.
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = env.get("MOTO_IAM_SETUP_CALLS", "8")
        cmd = [os.path.join(TOOLS, "py", "bin", "moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    elif kind == "mosquitto":
        conf = os.path.join(work, "mosquitto.conf")
        with open(conf, "w") as f:
            f.write(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
            # A packet limit of the broker's own (bytes): a client sending a
            # bigger packet is disconnected.
            limit = os.environ.get("MOSQUITTO_MAX_PACKET_SIZE")
            if limit:
                f.write(f"max_packet_size {int(limit)}\n")
            pw = os.environ.get("MOSQUITTO_PASSWORD_FILE")
            if pw:
                f.write(f"password_file {pw}\n")
            # TLS on the listener: a directory holding ca.crt, server.crt, server.key (PEM).
            tls = os.environ.get("MOSQUITTO_TLS_DIR")
            if tls:
                for key, name in (("cafile", "ca.crt"), ("certfile", "server.crt"), ("keyfile", "server.key")):
                    f.write(f"{key} {os.path.join(tls, name)}\n")
        exe = "/usr/sbin/mosquitto" if os.path.exists("/usr/sbin/mosquitto") else "mosquitto"
        cmd = [exe, "-c", conf]
    else:
        sys.exit(f"unknown server kind {kind}")
    taken = port_taken(port)
    if taken:
        sys.exit(f"{kind}: port {port} is taken ({taken}); not started")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 60
    while True:
        if proc.poll() is not None:
            sys.exit(f"{kind} exited with {proc.returncode}; its log:\n{log_tail(log.name)}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if time.time() > deadline:
                stdin_guard.stop_group(proc, grace=5)
                sys.exit(f"{kind} did not listen on {port} within 60 s; its log:\n{log_tail(log.name)}")
            time.sleep(0.1)
    # Something answered; it must be our server, still running (a server
    # that could not bind exits, while the port's owner answers).
    time.sleep(0.3)
    if proc.poll() is not None:
        sys.exit(f"{kind} exited with {proc.returncode} after the port answered "
                 f"(another process holds {port}?); its log:\n{log_tail(log.name)}")
    print("ready", flush=True)
    try:
        stdin_guard.wait_for_close()
    finally:
        stdin_guard.stop_group(proc, grace=5)


if __name__ == "__main__":
    main()
