"""The held issues' previews the editor's approval copy links to (``/preview/<token>``): the
issue's HTML as its readers will see it, with the preview's links that act on no reader.
A page only while the issue is held, and only for a genuine, unexpired token of PREVIEW;
never cached, never indexed, and no Referer carries the token away."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ..sending.messages import preview_page, restore_rendered
from ..tokens import PREVIEW, preview_max_age, read_token
from .context import context_of
from .readers import invalid_link
from .security import ISSUE_HEADERS, TOKEN_HEADERS

PREVIEW_HEADERS = {**ISSUE_HEADERS, **TOKEN_HEADERS}
"""The newsletter's own HTML (its images may live elsewhere), as a token page."""


def held_preview(request: Request) -> Response:
    """GET /preview/<token>: the held issue's preview; the invalid-link page (404) for a bad
    or expired token, and once the issue is approved, rejected or expired."""
    ctx = context_of(request)
    token = request.path_params["token"]
    max_age = preview_max_age(ctx.config)
    issue_id = read_token(ctx.secret, PREVIEW, token, max_age, now=ctx.now())
    issue = None if issue_id is None else ctx.store.issues.issue(issue_id)
    if issue is None or issue.state != "held":
        return invalid_link(request)
    page = preview_page(restore_rendered(issue), ctx.config)
    return HTMLResponse(page, headers=PREVIEW_HEADERS)
