"""An HTTP proxy in front of a local S3 server that injects S3 faults and latency.

    python faultproxy.py LISTEN_PORT UPSTREAM_PORT

Prints "ready" when listening, stops when stdin closes (like serve.py).
Rules are set at run time with `POST /__proxy/config` (JSON, replaces the
rules) and read back with `GET /__proxy/stats`:

    {"latency_ms": 20,                      # delay before forwarding each request
     "fail_first_attempt": true,             # 503 SlowDown the first time each distinct
                                             #   (method, path, query) is seen
     "delete_key_errors": [                  # per-key errors inside a 200 DeleteObjects
        {"match": "day=19/.*parquet", "code": "AccessDenied", "times": -1}],  # -1 = always
     "deny_kinds": {"ListObjectsV2": "AccessDenied"},  # 403 with that code for every
                                             #   request of that kind (see kind())
     "hold": "^PUT /[^/?]+/_compaction_state/watermark",  # a request whose
                                             #   "METHOD /bucket/key?query" (URL-decoded)
                                             #   matches waits, before anything else,
                                             #   until the rules hold it no more
     "stall": [{"match": "^GET /[^/]+/index/", "times": 1}],  # never answered (the
                                             #   request is not forwarded; the connection
                                             #   stays open, silent, until the proxy stops)
     "fail": [{"match": "^DELETE .*/manifests/", "status": 503, "code": "", "times": -1}],
                                             #   an error answer instead of forwarding;
                                             #   code "" sends no body at all (no code, no message)
     "lose_answer": [{"match": "^PUT .*/lock.json", "times": 1}],  # forwarded (it takes
                                             #   effect), then the connection is closed
                                             #   without an answer
     "cut_body": [{"match": "^GET .*/index/", "mode": "reset", "times": 1}]}
                                             #   forwarded, the answer's headers (with the
                                             #   full Content-Length) and half its body sent,
                                             #   then "reset" (TCP RST), "truncate" (closed)
                                             #   or "stall" (silent until the proxy stops)

Every list rule is {"match": regex on "METHOD /bucket/key?query", "times": n}
(-1: always); the first rule of a kind that matches and has times left is used
(and its times counted down). Each use counts in "injected" and, by kind of rule,
in "by_rule".

A per-key error removes the key from the request forwarded upstream (so the
object really stays) and adds an <Error> entry to the response, which is what
S3 does. Stats count requests by kind, and GetObject requests by path
("gets_by_path": {"/bucket/key": n}, the path URL-decoded); "held" counts the
requests a hold rule stopped (a test waits for it, then acts, then releases).
"""
import base64
import hashlib
import http.client
import json
import re
import socket
import struct
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.etree import ElementTree as ET

import stdin_guard

NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
ET.register_namespace("", "http://s3.amazonaws.com/doc/2006-03-01/")
LOCK = threading.Lock()
RULES = {}
SEEN = set()
STATS = {"requests": 0, "by_kind": {}, "injected": 0, "gets_by_path": {}, "held": 0, "by_rule": {}}
FOREVER = 3600
UPSTREAM = None


def kind(method, path, query):
    if "delete" in query and method == "POST":
        return "DeleteObjects"
    if method == "GET" and ("list-type" in query or path.count("/") <= 1):
        return "ListObjectsV2"
    return {"GET": "GetObject", "PUT": "PutObject", "HEAD": "HeadObject", "DELETE": "DeleteObject"}.get(method, method)


def take(rules, name, line):
    """The first rule of list `name` matching `line` with times left, counted
    down and in the stats; None when none."""
    for rule in rules.get(name) or []:
        if re.search(rule["match"], line) and rule.get("times", -1) != 0:
            with LOCK:
                if rule.get("times", -1) > 0:
                    rule["times"] -= 1
                STATS["injected"] += 1
                STATS["by_rule"][name] = STATS["by_rule"].get(name, 0) + 1
            return rule
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _reply(self, status, body=b"", headers=()):
        self.send_response(status)
        has_length = False
        for k, v in headers:
            self.send_header(k, v)
            has_length |= k.lower() == "content-length"
        if not has_length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self):
        global RULES
        body = self._body()
        path, _, query = self.path.partition("?")
        if path.startswith("/__proxy/"):
            if path == "/__proxy/config":
                with LOCK:
                    RULES = json.loads(body or b"{}")
                    SEEN.clear()
                return self._reply(200, b"{}")
            with LOCK:
                return self._reply(200, json.dumps(STATS).encode())
        k = kind(self.command, path, query)
        line = f"{self.command} {urllib.parse.unquote(self.path)}"
        held = False
        while True:
            with LOCK:
                hold = RULES.get("hold")
                if not hold or not re.search(hold, line):
                    break
                if not held:
                    STATS["held"] += 1
                    held = True
            time.sleep(0.01)
        with LOCK:
            rules = dict(RULES)
            STATS["requests"] += 1
            STATS["by_kind"][k] = STATS["by_kind"].get(k, 0) + 1
            if k == "GetObject":
                p = urllib.parse.unquote(path)
                STATS["gets_by_path"][p] = STATS["gets_by_path"].get(p, 0) + 1
            sig = (self.command, self.path)
            first = sig not in SEEN
            SEEN.add(sig)
        if rules.get("latency_ms"):
            time.sleep(rules["latency_ms"] / 1000.0)
        if take(rules, "stall", line):
            time.sleep(FOREVER)
            self.close_connection = True
            return
        failing = take(rules, "fail", line)
        if failing:
            status, code = failing.get("status", 503), failing.get("code", "SlowDown")
            if not code:
                return self._reply(status, b"")
            err = f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{failing.get("message", "")}</Message></Error>'.encode()
            return self._reply(status, err, [("Content-Type", "application/xml")])
        if rules.get("fail_first_attempt") and first:
            with LOCK:
                STATS["injected"] += 1
            err = b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate. (injected)</Message></Error>'
            return self._reply(503, err, [("Content-Type", "application/xml")])
        denied = (rules.get("deny_kinds") or {}).get(k)
        if denied:
            with LOCK:
                STATS["injected"] += 1
            err = f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{denied}</Code><Message>injected {denied}</Message></Error>'.encode()
            return self._reply(403, err, [("Content-Type", "application/xml")])
        headers = {k2: v for k2, v in self.headers.items() if k2.lower() not in ("host", "content-length", "transfer-encoding", "connection")}
        extra_errors = []
        if k == "DeleteObjects" and rules.get("delete_key_errors"):
            body, extra_errors = self._strip_keys(body, rules["delete_key_errors"])
            for h in list(headers):
                if h.lower().startswith("x-amz-checksum") or h.lower() in ("content-md5", "x-amz-sdk-checksum-algorithm", "x-amz-trailer", "content-encoding", "x-amz-decoded-content-length"):
                    del headers[h]
            headers["Content-MD5"] = base64.b64encode(hashlib.md5(body).digest()).decode()
        if extra_errors and not any(o.tag.replace(NS, "") == "Object" for o in ET.fromstring(body)):
            # Every key failed: nothing to forward (S3 allows no empty
            # Delete, and moto answers one with MalformedXML); S3's answer
            # is a DeleteResult of the errors alone.
            empty = b'<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></DeleteResult>'
            return self._reply(200, self._add_errors(empty, extra_errors), [("Content-Type", "application/xml")])
        conn = http.client.HTTPConnection("127.0.0.1", UPSTREAM, timeout=120)
        conn.request(self.command, self.path, body=body if body or self.command in ("PUT", "POST") else None, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        drop = ("transfer-encoding", "connection") if self.command == "HEAD" else ("content-length", "transfer-encoding", "connection")
        out_headers = [(h, v) for h, v in resp.getheaders() if h.lower() not in drop]
        if extra_errors and resp.status == 200:
            data = self._add_errors(data, extra_errors)
        conn.close()
        if take(rules, "lose_answer", line):
            # It took effect upstream; the client never hears of it.
            self.close_connection = True
            return
        cut = take(rules, "cut_body", line) if resp.status in (200, 206) and len(data) > 1 else None
        if cut:
            return self._cut(resp.status, data, out_headers, cut.get("mode", "reset"))
        self._reply(resp.status, data, out_headers)

    def _cut(self, status, data, headers, mode):
        """The answer's headers with the full Content-Length, half its body,
        then a reset, a close or silence."""
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self.close_connection = True
        if mode == "stall":
            time.sleep(FOREVER)
        elif mode == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()

    def _strip_keys(self, body, rules):
        root = ET.fromstring(body)
        errors = []
        for obj in list(root):
            if obj.tag.replace(NS, "") != "Object":
                continue
            key = obj.find(f"{NS}Key")
            key = obj.find("Key") if key is None else key
            for rule in rules:
                if re.search(rule["match"], key.text or "") and rule.get("times", -1) != 0:
                    with LOCK:
                        if rule.get("times", -1) > 0:
                            rule["times"] -= 1
                        STATS["injected"] += 1
                    errors.append((key.text, rule["code"]))
                    root.remove(obj)
                    break
        return ET.tostring(root, xml_declaration=True, encoding="UTF-8"), errors

    def _add_errors(self, data, errors):
        text = data.decode()
        extra = "".join(
            f"<Error><Key>{k}</Key><Code>{c}</Code><Message>injected {c}</Message></Error>" for k, c in errors
        )
        if "</DeleteResult>" in text:
            return text.replace("</DeleteResult>", extra + "</DeleteResult>").encode()
        return re.sub(r"<DeleteResult([^>]*)/>", lambda m: f"<DeleteResult{m.group(1)}>{extra}</DeleteResult>", text).encode()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


def main():
    global UPSTREAM
    port, UPSTREAM = int(sys.argv[1]), int(sys.argv[2])
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("ready", flush=True)
    stdin_guard.wait_for_close()
    server.shutdown()


if __name__ == "__main__":
    main()
