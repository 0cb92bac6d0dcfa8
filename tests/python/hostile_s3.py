"""A small S3 server on loopback that misbehaves on purpose.

    python hostile_s3.py MODE FOLDER LOG

serves FOLDER (CLASS/IMAGE files) as bucket "bkt" under the prefix "train/",
path-style, printing "port N" once listening; every request's path is
appended to LOG. MODE picks the misbehaviour (see MODES)."""
import os
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.sax.saxutils import escape

MODES = {
    "plain": "a well-behaved server",
    "ignore-range-endless": "answers every GET 200, the object and then zeros without end",
    "overlong-206": "answers 206 with more bytes than asked for",
    "dotdot": "lists a key with '..' segments (train/c0/../../other/x.jpg)",
    "same-token": "every page of a class listing is truncated with the same token",
    "short-key": "lists a key shorter than the prefix asked for",
    "quadratic": "a 3 MB listing of '&amp' without ';' and unclosed <Contents>",
    "trickle": "listings trickle 2 bytes a second, forever",
    "retry-after": "listings are 503 with Retry-After: 3600",
    "hang": "never answers a listing",
    "aws-headers": "as AWS S3: a signed request without x-amz-content-sha256 (a GET's: the "
                   "SHA-256 of nothing) is refused, 400 InvalidRequest",
}
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

MODE, ROOT, LOG = sys.argv[1], sys.argv[2], sys.argv[3]
OBJECTS = {}
for top, _, files in os.walk(ROOT):
    for name in files:
        path = os.path.join(top, name)
        with open(path, "rb") as f:
            OBJECTS["train/" + os.path.relpath(path, ROOT)] = f.read()
if MODE == "dotdot":
    DOTDOT = "train/" + sorted(os.listdir(ROOT))[0] + "/../../other/x.jpg"
    OBJECTS[DOTDOT] = OBJECTS[sorted(OBJECTS)[0]]
    OBJECTS["other/x.jpg"] = b"this is another key, never to be read"


def listing(prefix, delimiter, token):
    keys = sorted(k for k in OBJECTS if k.startswith(prefix))
    body = ["<?xml version='1.0' encoding='UTF-8'?><ListBucketResult>"]
    if delimiter:
        folders = sorted({prefix + k[len(prefix):].split("/", 1)[0] + "/" for k in keys
                          if "/" in k[len(prefix):]})
        body += [f"<CommonPrefixes><Prefix>{escape(f)}</Prefix></CommonPrefixes>" for f in folders]
        body.append("<IsTruncated>false</IsTruncated>")
    elif MODE == "short-key":
        body.append("<Contents><Key>t</Key><Size>3</Size></Contents><IsTruncated>false</IsTruncated>")
    elif MODE == "quadratic":
        body.append("<Contents><Key>" + "&amp" * 400000 + "<Contents>" * 100000)
    else:
        body += [f"<Contents><Key>{escape(k)}</Key><Size>{len(OBJECTS[k])}</Size>"
                 f"<ETag>\"e{len(OBJECTS[k])}\"</ETag></Contents>" for k in keys]
        if MODE == "same-token":
            body.append("<IsTruncated>true</IsTruncated><NextContinuationToken>again</NextContinuationToken>")
        else:
            body.append("<IsTruncated>false</IsTruncated>")
    body.append("</ListBucketResult>")
    return "".join(body).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, body, extra=()):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        with open(LOG, "a") as log:
            log.write(self.path + "\n")
        if MODE == "aws-headers" and self.headers.get("Authorization"):
            sha = self.headers.get("x-amz-content-sha256")
            signed = self.headers["Authorization"].split("SignedHeaders=")[-1].split(",")[0]
            if sha != EMPTY_SHA256 or "x-amz-content-sha256" not in signed.split(";"):
                return self.send(400, b"<Error><Code>InvalidRequest</Code><Message>Missing required "
                                      b"header for this request: x-amz-content-sha256</Message></Error>")
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if url.path in ("/bkt", "/bkt/") and "list-type" in query:
            delimiter = "delimiter" in query
            if MODE == "hang":
                time.sleep(3600)
            if MODE == "retry-after" and not delimiter:
                return self.send(503, b"<Error><Code>SlowDown</Code></Error>", [("Retry-After", "3600")])
            if MODE == "trickle" and not delimiter:
                self.send_response(200)
                self.send_header("Content-Length", "100000")
                self.end_headers()
                while True:
                    self.wfile.write(b"<L")
                    self.wfile.flush()
                    time.sleep(1)
            return self.send(200, listing(query.get("prefix", [""])[0], delimiter,
                                          query.get("continuation-token", [""])[0]))
        key = url.path[len("/bkt/"):]
        if key not in OBJECTS:
            return self.send(404, b"<Error><Code>NoSuchKey</Code></Error>")
        data = OBJECTS[key]
        if MODE == "ignore-range-endless":
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                self.wfile.write(data)
                zeros = bytes(1 << 20)
                for _ in range(1500):  # 1.5 GB, unless the client stops reading
                    self.wfile.write(zeros)
            except OSError:
                pass
            self.close_connection = True
            return
        first, last = 0, len(data) - 1
        rng = self.headers.get("Range")
        if rng:
            a, b = rng.split("=")[1].split("-")
            first, last = int(a), int(b) if b else len(data) - 1
        body = data[first:last + 1]
        if MODE == "overlong-206":
            body += b"\0" * 5000
        self.send(206 if rng else 200, body,
                  [("Content-Range", f"bytes {first}-{last}/{len(data)}")] if rng else [])


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print("port", server.server_address[1], flush=True)
server.serve_forever()
