"""An OAuth-protected MCP server written with the PyPI `mcp` package (2.3).

One origin serves both the MCP endpoint (`/mcp`, Streamable HTTP) and the
authorization server the SDK builds from a provider (`/authorize`, `/token`,
`/register`, RFC 8414 and RFC 9728 metadata). The provider approves every
authorization at once — the redirect to the client's redirect URI is the
`/authorize` answer — so a scripted browser only has to follow it.

    python oauth.py [--ttl SECONDS] [--no-pkce-advertised]

Binds 127.0.0.1 on a free port and prints `PORT <n>` as its first stdout
line; every token it issues or refreshes is logged to stdout as
`ISSUED <kind>` (never the token itself).
"""

import argparse
import asyncio
import secrets
import socket
import time

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthToken


class AutoApprove:
    """An authorization server that says yes, keeping everything in memory."""

    def __init__(self, ttl: int):
        self.ttl = ttl
        self.clients = {}
        self.codes = {}
        self.access = {}
        self.refresh = {}

    async def get_client(self, client_id):
        return self.clients.get(client_id)

    async def register_client(self, info):
        self.clients[info.client_id] = info

    async def authorize(self, client, params):
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client, code):
        return self.codes.get(code)

    async def exchange_authorization_code(self, client, code):
        del self.codes[code.code]
        return self.issue("code", client.client_id, code.scopes, code.resource)

    async def load_refresh_token(self, client, token):
        return self.refresh.get(token)

    async def exchange_refresh_token(self, client, token, scopes):
        del self.refresh[token.token]
        return self.issue("refresh", client.client_id, scopes or token.scopes, token.resource)

    async def load_access_token(self, token):
        t = self.access.get(token)
        if t is not None and t.expires_at is not None and t.expires_at < time.time():
            return None
        return t

    async def revoke_token(self, token):
        self.access.pop(getattr(token, "token", None), None)

    def issue(self, kind, client_id, scopes, resource):
        at, rt = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        expires = int(time.time()) + self.ttl
        self.access[at] = AccessToken(
            token=at, client_id=client_id, scopes=scopes, expires_at=expires, resource=resource
        )
        self.refresh[rt] = RefreshToken(token=rt, client_id=client_id, scopes=scopes, resource=resource)
        print(f"ISSUED {kind}", flush=True)
        return OAuthToken(
            access_token=at,
            token_type="Bearer",
            expires_in=self.ttl,
            refresh_token=rt,
            scope=" ".join(scopes) if scopes else None,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ttl", type=int, default=3600)
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    mcp = MCPServer(
        "oauth-test",
        auth_server_provider=AutoApprove(args.ttl),
        auth=AuthSettings(
            issuer_url=base,
            resource_server_url=f"{base}/mcp",
            validate_token_resource=True,
            client_registration_options=ClientRegistrationOptions(enabled=True, valid_scopes=["notes"], default_scopes=["notes"]),
            required_scopes=["notes"],
        ),
    )

    @mcp.tool()
    def whoami() -> str:
        """Says who is asking (proves the call got through)."""
        return "an authorized client"

    import uvicorn

    app = mcp.streamable_http_app()
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
