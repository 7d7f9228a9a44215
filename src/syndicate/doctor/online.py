"""``doctor --online``: whether ``site.base_url`` answers, where every link of a digest (the
one-click unsubscribe's POST among them) goes. One GET, only when asked: the one outbound
HTTP besides the WebSub pings."""

from __future__ import annotations

import urllib.error
import urllib.request

from .. import __version__


def base_url_problem(url: str, timeout: float = 10.0) -> str | None:
    """What is wrong with ``url`` as a reader's client sees it, or None when it answers."""
    request = urllib.request.Request(url, headers={"User-Agent": f"syndicate/{__version__}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"site.base_url {url} cannot be reached ({reason})"
    if status >= 400:
        return f"site.base_url {url} answers {status}"
    return None
