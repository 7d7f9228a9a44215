"""What every handler works with: the app's dependencies, built once and kept on app.state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from starlette.requests import Request

from ..config import Config
from ..model import ArticleSet
from ..state import Store

if TYPE_CHECKING:
    from .feeds import FeedFolder
    from .security import RateLimit
    from .sns import SnsClient

MessageSender = Callable[[EmailMessage], None]
"""Hands one message (a confirmation) to the mail transport; raises when it cannot."""


@dataclass(frozen=True)
class WebContext:
    """The store, the mail sender, the article source, the secret and the clock are given
    (``app.create_app``), so the app reads no environment and no real clock of its own."""

    config: Config
    store: Store
    send_message: MessageSender
    articles: Callable[[], ArticleSet]
    secret: bytes
    now: Callable[[], datetime]
    feeds: FeedFolder
    issues: Path
    """The folder of sent issues' pages: <issues>/<lang>/<issue>.html."""
    zone: ZoneInfo
    subscribe_limit: RateLimit
    """/subscribe requests per client address."""
    mail_limit: RateLimit
    """Mails /subscribe sends to one reader address."""
    sns: SnsClient
    """Amazon SNS's certificates and confirmations, for the SES webhook."""

    @property
    def languages(self) -> list[str]:
        return list(self.config.site.languages)

    @property
    def secure_cookie(self) -> bool:
        return self.config.site.base_url.startswith("https://")


def context_of(request: Request) -> WebContext:
    """The context of the app that answers ``request``."""
    found: WebContext = request.app.state.web
    return found
