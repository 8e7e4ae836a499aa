#!/usr/bin/env python3
"""Sends one Chat Completions body N times on one keep-alive connection to a
gateway on loopback, and stops at the first answer that is not a 200: the
client of bench/gateway_profile.sh and bench/gateway_code_pages.sh.

    python3 bench/send_requests.py PORT N BODY_FILE TOKEN
"""
import http.client
import sys

port, n, body, token = int(sys.argv[1]), int(sys.argv[2]), open(sys.argv[3], "rb").read(), sys.argv[4]
c = http.client.HTTPConnection("127.0.0.1", port)
for _ in range(n):
    c.request("POST", "/v1/chat/completions", body,
              {"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    r = c.getresponse()
    data = r.read()
    assert r.status == 200, (r.status, data[:300])
