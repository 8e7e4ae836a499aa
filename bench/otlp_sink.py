#!/usr/bin/env python3
"""A loopback OTLP/HTTP receiver for the tracing-on overhead rows: accepts every
`POST /v1/traces` and `/v1/metrics` (protobuf), answers an empty export response,
and counts what it got. Stdlib only.

    python3 bench/otlp_sink.py --port-file PATH     # prints nothing; writes its port
    GET /__stats                                    # {"requests": N, "bytes": N}
"""
import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

stats = {"requests": 0, "bytes": 0}
lock = threading.Lock()


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 (http.server's name)
        n = int(self.headers.get("content-length") or 0)
        self.rfile.read(n)
        with lock:
            stats["requests"] += 1
            stats["bytes"] += n
        # An empty Export*ServiceResponse: zero protobuf bytes.
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self):  # noqa: N802
        body = json.dumps(stats).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    args = ap.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Sink)
    if args.port_file:
        with open(args.port_file, "w") as f:
            f.write(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
