"""How the console is started (by `mirrorwatch console` and the demo): Streamlit serving console.py headless."""

from __future__ import annotations

import sys
from pathlib import Path

from kernel.errors import require_extra

__all__ = ["CONSOLE_SCRIPT", "api_url_for", "console_command"]

CONSOLE_SCRIPT = Path(__file__).with_name("console.py")


def api_url_for(host: str, port: int, *, tls: bool = False) -> str:
    """The URL a local client reaches an API listening on host:port at (all-interfaces becomes loopback)."""
    reachable = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    return f"{'https' if tls else 'http'}://{reachable}:{port}"


def console_command(
    api: str,
    *,
    port: int,
    address: str = "127.0.0.1",
    prometheus: str | None = None,
    api_user: str | None = None,
    api_ca_file: str | None = None,
) -> list[str]:
    """The console's command line; its refresh interval comes from MIRRORWATCH_CONSOLE_REFRESH (seconds, default 5).
    With `prometheus`, it charts ranges and shows alerts from that Prometheus. With `api_user`, it sends that user's
    basic-auth credentials (the password from MIRRORWATCH_API_PASSWORD in its environment, never on a command
    line); with `api_ca_file`, it trusts that CA for an https API."""
    require_extra("streamlit", "console", "the console")
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(CONSOLE_SCRIPT),
        "--server.headless=true",
        f"--server.port={port}",
        f"--server.address={address}",
        "--browser.gatherUsageStats=false",
        "--server.fileWatcherType=none",
        "--client.toolbarMode=viewer",  # an operator's console: no Deploy button, no developer menu
        "--",
        "--api",
        api,
        *(("--prometheus", prometheus) if prometheus else ()),
        *(("--api-user", api_user) if api_user else ()),
        *(("--api-ca-file", api_ca_file) if api_ca_file else ()),
    ]
