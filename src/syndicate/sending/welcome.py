"""The welcome mail: a reader who has just confirmed gets, in their language, their group's
latest issue at once, or the newest key takeaways when the group has had none yet
(``email.welcome``). Built here, sent by the caller (the web side, like a confirmation)."""

from __future__ import annotations

from datetime import date, datetime
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import cast
from zoneinfo import ZoneInfo

from ..compose import compose_message
from ..config import Config
from ..digest import audience_order, select_digest
from ..model import ArticleSet, Digest, DigestItem
from ..render import render_welcome
from ..routes import issues_url
from ..state import Store, Subscriber
from ..tokens import PREFERENCES, UNSUBSCRIBE, reader_link
from .issuing import last_day_out
from .messages import sender_domain, view_url


def welcome_digest(
    config: Config, store: Store, articles: ArticleSet, reader: Subscriber, now: datetime
) -> tuple[Digest, date | None, str] | None:
    """What a new reader's welcome lists, the day of the issue it repeats (None: the newest
    takeaways) and the page to view it at; None when there is nothing to show yet."""
    lang, chosen = reader.lang, audience_order(reader.audiences)
    latest = store.issues.latest_issue(lang, chosen)
    if latest is not None:
        carried = set(store.issues.issue_article_keys(latest.id))
        items = [
            DigestItem(article, takeaways)
            for article in articles.in_language(lang)
            if article.key in carried
            and (takeaways := tuple(t for a in chosen if (t := article.takeaways_for(a))))
        ]
        if items:
            day = latest.created_at.astimezone(ZoneInfo(config.site.timezone)).date()
            return Digest(lang, chosen, tuple(items)), day, view_url(config, latest)
    newest = select_digest(
        articles, lang, chosen, limit=config.email.max_articles, until=last_day_out(config, now)
    )
    return None if newest is None else (newest, None, issues_url(config, lang))


def welcome_message(
    config: Config,
    store: Store,
    articles: ArticleSet,
    reader: Subscriber,
    now: datetime,
    secret: bytes,
) -> EmailMessage | None:
    """The welcome mail of ``reader`` with their own links, or None when there is nothing to
    show yet. Raises RenderError when it cannot be rendered."""
    found = welcome_digest(config, store, articles, reader, now)
    if found is None:
        return None
    digest, issued, view = found
    domain = sender_domain(config.email.sender)
    data = compose_message(
        render_welcome(digest, config, issued),
        to=reader.email,
        sender=config.email.sender,
        # per reader and confirmation: one who comes back is welcomed again, not deduplicated
        message_id=f"<welcome.{reader.id}.{int(now.timestamp())}@{domain}>",
        date=now,
        list_id=config.email.list_id,
        unsubscribe_url=reader_link(config, secret, UNSUBSCRIBE, reader.id, issued=now),
        unsubscribe_mailto=config.email.unsubscribe_mailto,
        preferences_url=reader_link(config, secret, PREFERENCES, reader.id, issued=now),
        view_url=view,
        reply_to=config.email.reply_to,
    )
    # The web side hands single messages to its sender as EmailMessage values.
    return cast(EmailMessage, message_from_bytes(data, policy=policy.default))
