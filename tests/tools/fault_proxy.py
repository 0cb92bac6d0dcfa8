"""An HTTP proxy that injects the failures object storage shows, for tests.

    python tests/tools/fault_proxy.py --upstream http://127.0.0.1:9000 --port 0 \\
        --status-503 0.1 --cut 0.01 --latency-ms 20

Forwards each request (method, path, headers, body) to the upstream server
over a kept-alive connection and relays the answer, except that, at random
with the given rates, it answers 503 SlowDown itself (with Retry-After: 0)
or sends the upstream's headers and only half the body before closing the
connection, or (--stall) sends headers and half the body and then nothing
for --stall-seconds, holding the connection open (listings never stall).
--latency-ms delays every request before it is forwarded.
Faults are transient, as object storage's are: with --max-in-a-row K, a path
that was faulted K times in a row is answered as it is on its next request
(its draw still taken, so the sequence of draws stays the seed's). Without
it a seeded sequence that happens to cluster its faults can fail one object
more times than any client retries, which no test means to test.
Prints "port N" on its first line, and on SIGTERM/SIGINT a JSON line of
what it did: {"requests": .., "503": .., "cut": .., "stall": .., "max_in_flight": ..}
(the most requests it held at once: how many the client had in flight).
"""
import argparse
import http.client
import http.server
import json
import random
import signal
import sys
import threading
import time
import urllib.parse

HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--status-503", type=float, default=0.0, dest="p503")
    ap.add_argument("--cut", type=float, default=0.0)
    ap.add_argument("--stall", type=float, default=0.0)
    ap.add_argument("--stall-seconds", type=float, default=30.0)
    ap.add_argument("--latency-ms", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-in-a-row", type=int, default=0, dest="max_in_a_row",
                    help="at most this many faults in a row for one path (0: no limit)")
    args = ap.parse_args()
    up = urllib.parse.urlsplit(args.upstream)
    rng = random.Random(args.seed)
    lock = threading.Lock()
    counts = {"requests": 0, "503": 0, "cut": 0, "stall": 0, "max_in_flight": 0}
    in_flight = [0]
    in_a_row = {}  # path -> faults in a row
    local = threading.local()

    def upstream():
        if getattr(local, "conn", None) is None:
            local.conn = http.client.HTTPConnection(up.hostname, up.port, timeout=30)
        return local.conn

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def forward(self):
            with lock:
                in_flight[0] += 1
                counts["max_in_flight"] = max(counts["max_in_flight"], in_flight[0])
            try:
                self._forward()
            finally:
                with lock:
                    in_flight[0] -= 1

        def _forward(self):
            with lock:
                counts["requests"] += 1
                draw = rng.random()
                faulty = draw < args.p503 + args.cut + args.stall
                if faulty and args.max_in_a_row and in_a_row.get(self.path, 0) >= args.max_in_a_row:
                    draw, faulty = 1.0, False
                in_a_row[self.path] = in_a_row.get(self.path, 0) + 1 if faulty else 0
            if args.latency_ms:
                time.sleep(args.latency_ms / 1000)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if draw < args.p503:
                with lock:
                    counts["503"] += 1
                msg = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
                self.send_response(503)
                self.send_header("Retry-After", "0")
                self.send_header("Content-Length", str(len(msg)))
                self.end_headers()
                self.wfile.write(msg)
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            for attempt in range(2):
                try:
                    conn = upstream()
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    break
                except (http.client.HTTPException, OSError):
                    local.conn = None
                    if attempt:
                        raise
            cut = draw < args.p503 + args.cut and len(data) > 1
            stall = (not cut and draw < args.p503 + args.cut + args.stall and len(data) > 1
                     and "list-type" not in self.path)
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if cut or stall:
                with lock:
                    counts["cut" if cut else "stall"] += 1
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                if stall:
                    time.sleep(args.stall_seconds)
                self.close_connection = True
                return
            self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = forward

    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"port {server.server_address[1]}", flush=True)

    def stop(*_):
        with lock:
            print(json.dumps(counts), flush=True)
        threading.Thread(target=server.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
