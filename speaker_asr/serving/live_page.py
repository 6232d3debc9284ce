"""``GET /live``: one page that streams the browser's microphone to ``/v1/realtime`` and shows the
captions, their speakers and a timeline as the events come (``live_page.html`` beside this file,
shipped as package data; what it does and what it exposes to tests is said at its top).

The page is public even with ``API_KEY`` set: it holds no data, and the key is typed into it (or
given in the URL's fragment, ``/live#key=...``, which a browser never sends to the server, so it
cannot reach a log) and goes to the WebSocket in the ``openai-insecure-api-key.<key>``
subprotocol, where the live route checks it. It connects to the origin it was loaded from.

It loads nothing from elsewhere (it must work offline), which its Content-Security-Policy also
enforces: its one inline script and one inline style are allowed by their SHA-256 hashes, the
audio worklet by ``blob:``, connections only to its own origin.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
from functools import lru_cache
from importlib import resources

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

logger = logging.getLogger("server")

LIVE = "/live"
PAGE = "live_page.html"


def _hashes(html: str, tag: str) -> str:
    found = re.findall(rf"<{tag}>(.*?)</{tag}>", html, re.S)
    return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()}'"
                    for body in found)


@lru_cache(maxsize=1)
def page() -> tuple[bytes, str]:
    """The page's bytes and its Content-Security-Policy (read once)."""
    html = resources.files(__package__).joinpath(PAGE).read_text(encoding="utf-8")
    policy = (f"default-src 'none'; script-src {_hashes(html, 'script')} blob:; "
              f"style-src {_hashes(html, 'style')}; connect-src 'self'; base-uri 'none'; "
              "form-action 'none'; frame-ancestors 'none'")
    return html.encode("utf-8"), policy


async def live_page(request: Request) -> Response:
    try:
        body, policy = page()
    except OSError:  # an install without the package data
        logger.exception("the live page is missing")
        return PlainTextResponse(f"The live page is not installed ({PAGE} is missing from the speaker_asr "
                                 "package): reinstall speaker-asr.", status_code=500)
    return Response(body, media_type="text/html; charset=utf-8", headers={
        "Content-Security-Policy": policy, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer", "Permissions-Policy": "microphone=(self)"})


def routes() -> list[Route]:
    return [Route(LIVE, live_page, methods=["GET"])]
