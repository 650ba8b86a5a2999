"""The HTTP API's side of `mirrorwatch link pause|resume|budget` (part of the composition root: it writes the link's
control document, `kernel.link_control`, in the config's state_dir, which the link's workers on this host read):

    GET  /mirror/links/{link}/control                           the state as asked (active, paused, partly paused)
    POST /mirror/links/{link}/pause[?topic=T&topic=U][&reason=R] pause the link, or these source topics of it
    POST /mirror/links/{link}/resume[?topic=T]                   resume the link (every pause lifted), or these topics
    POST /mirror/links/{link}/budget?max_bytes_per_second=RATE   the link's bandwidth budget (1MB, 800KiB/s, bytes;
                                                                 none: no budget; config: the config's again)

A change of state needs the API's basic auth (`http.web_config_file` with `basic_auth_users`): without it every
POST is refused (403), so that an API left open on a network reads but never stops a mirror. The answer is the new
control document; the workers obey within a second (`mirrorwatch link status` and `/mirror/links/{link}` say when).
The same checks as the CLI: an unknown link is 404; a spark link, a topic the link does not mirror, a topic resumed
alone while the whole link is paused, or an oversized query is 400 with the reason, and nothing is written.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Awaitable, Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kernel.config import MirrorwatchConfig
from kernel.control_store import load_control, save_control
from kernel.errors import ConfigError, ConfigProblem
from kernel.link_control import ControlUnreadable, LinkControl
from kernel.web_config import WebConfig
from mirrorwatch.link_cli import budget_asked, checked_link

__all__ = ["control_routes"]

MAX_TOPICS = 1000  # per request
MAX_REASON = 1000  # characters


CHANGES = {  # what each POST does (the HTTP reference, docs/reference/http.md)
    "pause": "Pause the link (`?topic=` some of its topics only, `?reason=`), on every host; basic auth only.",
    "resume": "Resume the link (`?topic=` some of its topics only), on every host; basic auth only.",
    "budget": "Set the link's bandwidth budget (`?max_bytes_per_second=` a rate, `none` or `config`); basic auth only.",
}


def control_routes(config: MirrorwatchConfig, web: WebConfig | None) -> list[Route]:
    protected = web is not None and bool(web.users)
    names = {link.name: link for link in config.links}

    async def show(request: Request) -> Response:
        """The link's control as asked: paused or not (all of it or some topics), its budget, by whom and why."""
        name = request.path_params["link"]
        if name not in names:
            return _error(404, f"no link named {name!r}")
        try:
            control = await run_in_threadpool(load_control, config, names[name])
        except ControlUnreadable as exc:
            return _error(503, str(exc))
        return JSONResponse(control.as_json())

    def change(action: str) -> Callable[[Request], Awaitable[Response]]:
        async def respond(request: Request) -> Response:
            name = request.path_params["link"]
            if not protected:
                return _error(
                    403,
                    "changing a link's state needs the API's basic auth (http.web_config_file with "
                    "basic_auth_users); or use `mirrorwatch link pause|resume` with the config, on any host",
                )
            if name not in names:
                return _error(404, f"no link named {name!r}")
            topics = tuple(request.query_params.getlist("topic"))
            reason = request.query_params.get("reason", "")
            if action == "budget":  # the rate travels as the reason does, checked by the CLI's rules
                reason = request.query_params.get("max_bytes_per_second", "")
            if len(topics) > MAX_TOPICS or len(reason) > MAX_REASON:
                return _error(400, f"at most {MAX_TOPICS} topics and a reason of {MAX_REASON} characters")
            by = f"{_user(request.headers.get('authorization', ''))}@http"
            try:
                control, missed = await run_in_threadpool(_changed, config, name, topics, action, reason, by)
            except ConfigError as exc:
                return _error(400, "; ".join(p.message for p in exc.problems))
            except ControlUnreadable as exc:
                return _error(503, str(exc))
            # the target's progress topic did not take it: made on this host only (its workers elsewhere do not know)
            said = " ".join((missed or "").encode("ascii", "replace").decode().replace('"', "'").split())
            warning = {} if missed is None else {"Warning": f'199 mirrorwatch "changed on this host only: {said}"'}
            return JSONResponse(control.as_json(), headers=warning)

        respond.__doc__ = CHANGES[action]
        return respond

    return [
        Route("/mirror/links/{link}/control", show),
        Route("/mirror/links/{link}/pause", change("pause"), methods=["POST"]),
        Route("/mirror/links/{link}/resume", change("resume"), methods=["POST"]),
        Route("/mirror/links/{link}/budget", change("budget"), methods=["POST"]),
    ]


def _changed(  # noqa: PLR0917 -- the request's fields, in order
    config: MirrorwatchConfig, name: str, topics: tuple[str, ...], action: str, reason: str, by: str
) -> tuple[LinkControl, str | None]:
    """The link's control changed as asked, and why the progress topic did not take it (None: it did)."""
    spec = checked_link(config, name, topics)
    now_ms = int(time.time() * 1000)
    current = load_control(config, spec)
    try:
        if action == "budget":
            control = current.budget(budget_asked(reason), now_ms, by)  # `reason`: the rate asked
        elif action == "pause":
            control = current.pause(topics, now_ms, reason, by)
        else:
            control = current.resume(topics, now_ms, by)
    except ValueError as exc:  # a topic resumed alone in a paused link, anything of a promoted one
        raise ConfigError([ConfigProblem("link" if current.promoted else "topic", str(exc))]) from exc
    return control, save_control(config, spec, control)


def _user(authorization: str) -> str:
    """The basic-auth user of a request the API let in (its credentials were checked before the route)."""
    try:
        decoded = base64.b64decode(authorization[6:].strip(), validate=True)
    except (binascii.Error, ValueError):
        return "?"
    return decoded.partition(b":")[0].decode("utf-8", "replace")[:100] or "?"


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": True, "message": message}, status_code=status)
