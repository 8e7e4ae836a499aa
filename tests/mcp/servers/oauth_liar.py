"""A protected MCP endpoint whose authorization metadata is wrong in one way
(stdlib only): the client must refuse it before registering or asking for a
token.

    python oauth_liar.py MODE

MODE: pkce-lie (AS metadata without S256), wrong-resource (the resource
metadata names another origin), wrong-issuer (the AS metadata names another
issuer), malformed-challenge (an unterminated WWW-Authenticate). Prints
`PORT <n>`, then `HIT <path>` for every request to /register, /token or
/authorize.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE = sys.argv[1]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def base(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def send_json(self, status, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def hit(self):
        path = self.path.split("?")[0]
        if path in ("/register", "/token", "/authorize"):
            print(f"HIT {path}", flush=True)
            self.send_json(400, {"error": "invalid_request"})
            return True
        return False

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        if self.hit():
            return
        b = self.base()
        challenge = f'Bearer resource_metadata="{b}/.well-known/oauth-protected-resource/mcp", scope="notes"'
        if MODE == "malformed-challenge":
            challenge = f'Bearer resource_metadata="{b}/.well-known/oauth-protected-resource/mcp'
        self.send_json(401, {"error": "invalid_token"}, [("www-authenticate", challenge)])

    def do_GET(self):
        if self.hit():
            return
        b = self.base()
        if self.path.startswith("/.well-known/oauth-protected-resource"):
            resource = "https://elsewhere.example/mcp" if MODE == "wrong-resource" else f"{b}/mcp"
            return self.send_json(200, {"resource": resource, "authorization_servers": [b]})
        if self.path.startswith("/.well-known/oauth-authorization-server"):
            meta = {
                "issuer": "https://attacker.example" if MODE == "wrong-issuer" else b,
                "authorization_endpoint": f"{b}/authorize",
                "token_endpoint": f"{b}/token",
                "registration_endpoint": f"{b}/register",
                "response_types_supported": ["code"],
                "code_challenge_methods_supported": ["plain"] if MODE == "pkce-lie" else ["S256"],
            }
            return self.send_json(200, meta)
        self.send_json(404, {"error": "not found"})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"PORT {server.server_address[1]}", flush=True)
server.serve_forever()
