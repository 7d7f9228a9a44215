"""The editor's test copies of held issues (``email.approval``): one mail per language, whatever
the number of variants held, that lists each with its subject and the commands that approve
or reject it, and links to its preview: the HTML a reader would see, with links that act on
no reader, served by the site (``/preview/<token>``) while the issue is held. Sent through
the readers' mailer, outside the ledger.

The previews are linked, not attached: an HTML attachment is what phishing mail carries, so
filters score it and some strip it, and the copy grew by a whole page with each variant. The
server that answers the link is the one every reader's unsubscribe link needs anyway."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from email import policy
from email.message import EmailMessage
from email.utils import format_datetime

from ..config import Config
from ..state import Issue
from ..tokens import preview_link, secret_key
from .messages import envelope_sender, sender_domain
from .transports import Mailer


def approval_copy(
    config: Config, lang: str, held: Sequence[Issue], now: datetime, secret: bytes
) -> bytes:
    """The test copy of the issues of ``lang`` held by one send: for each, its subject, the
    link to its preview (a token of ``secret``, issued ``now``) and the commands."""
    message = EmailMessage()
    message["From"] = config.email.sender
    message["To"] = config.email.preview_to
    first = held[0].subject + (f" (and {len(held) - 1} more)" if len(held) > 1 else "")
    message["Subject"] = f"Held for approval ({lang}): {first}"
    message["Date"] = format_datetime(now)
    ids = ".".join(str(issue.id) for issue in held)
    message["Message-ID"] = f"<approval.{lang}.{ids}@{sender_domain(config.email.sender)}>"
    message["Auto-Submitted"] = "auto-generated"
    days = config.email.approval_expires_days
    lines = [
        f"{len(held)} issue(s) in '{lang}' wait for your approval. Each link shows the issue as "
        f"its readers will see it, while it is held (at most {days} day(s)).",
    ]
    for issue in held:
        lines += [
            "",
            f"Issue {issue.id} ({issue.key}): {issue.subject}",
            f"  preview: {preview_link(config, secret, issue.id, issued=now)}",
            f"  syndicate send approve {issue.id}   (or: syndicate send reject {issue.id})",
        ]
    message.set_content("\n".join(lines) + "\n", cte="quoted-printable")
    return message.as_bytes(policy=policy.SMTP)


def test_copies(
    config: Config, mailer: Mailer, held: Iterable[Issue], now: datetime
) -> dict[int, str]:
    """Send one test copy per language of the ``held`` issues to ``email.preview_to``; issue id
    → how it went, for the report. A copy that fails leaves its issues held all the same."""
    by_lang: dict[str, list[Issue]] = {}
    for issue in held:
        by_lang.setdefault(issue.lang, []).append(issue)
    to = config.email.preview_to
    outcome: dict[int, str] = {}
    for lang, issues in by_lang.items():
        try:
            data = approval_copy(config, lang, issues, now, secret_key(config))
            transport = mailer.open()
            try:
                transport.send(
                    config.email.return_path or envelope_sender(config.email.sender), to, data
                )
            finally:
                transport.close()
            said = f"test copy sent to {to} (one for '{lang}': {len(issues)} variant(s))"
        except Exception as exc:  # a courtesy: the issues stay held either way
            said = f"test copy to {to} not sent: {str(exc) or type(exc).__name__}"
        outcome.update(dict.fromkeys((i.id for i in issues), said))
    return outcome
