"""The playground: ``GET /`` serves one static page (HTML, two scripts, CSS; no build step, nothing fetched elsewhere).

The page talks to the same API as any client (``GET /tasks``, ``POST /extract/{task}``; its
Review tab ``GET /review`` and the decisions). It builds every piece of text with
``textContent``, never markup, and the headers allow only the page's own scripts and style (no
inline script, no other origin), so a text or a task description holding ``<script>`` shows as
text and runs nothing.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

router = APIRouter(include_in_schema=False)
_FILES = {
    "index.html": "text/html; charset=utf-8",
    "playground.js": "text/javascript; charset=utf-8",
    "review.js": "text/javascript; charset=utf-8",
    "playground.css": "text/css; charset=utf-8",
}
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "img-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)
HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


# The page and its files hold no data: open to a browser under API keys (it sends the key typed into it).
PATHS = frozenset({"/", "/playground/playground.js", "/playground/review.js", "/playground/playground.css"})


def _static(name: str) -> Response:
    body = resources.files("extractor.server").joinpath("static", name).read_bytes()
    return Response(body, media_type=_FILES[name], headers=HEADERS)


@router.get("/")
async def page() -> Response:
    """The playground page."""
    return _static("index.html")


@router.get("/playground/playground.js")
async def script() -> Response:
    """The page's one script."""
    return _static("playground.js")


@router.get("/playground/review.js")
async def review_script() -> Response:
    """The Review tab's script (the review queue, beside the playground's own)."""
    return _static("review.js")


@router.get("/playground/playground.css")
async def style() -> Response:
    """The page's one style sheet."""
    return _static("playground.css")
