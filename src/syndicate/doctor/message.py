"""The message check: a sample digest per language, composed as ``syndicate digest`` composes
one (every article of the language, up to email.max_articles), signed as a send signs it, then
read as a receiver reads it: the HTML under Gmail's 102 KB clip, the one-click unsubscribe
headers, List-Id, a plain-text part, the DKIM signature verifying against DNS; SpamAssassin's
score and rules when ``spamassassin`` is installed (local tests only: nothing asked online)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from email import message_from_bytes, policy
from email.message import EmailMessage

from ..config import Config
from ..errors import SyndicateError
from ..model import ArticleSet
from ..render import render_digest
from ..sending.issuing import next_digest
from ..sending.messages import dkim_signer, preview_files
from ..signing import DkimSigner
from .records import tags
from .report import Check, failed, passed, warned
from .resolver import Lookups

CLIP_BYTES = 102 * 1024
"""Gmail shows an HTML part larger than this clipped, behind a link."""
SPAM_FAIL = 5.0
"""SpamAssassin's own threshold: a score this high is spam."""
SPAM_WARN = 1.0
RULE_WARN = 0.5
MUST_SIGN = frozenset({"from", "subject", "list-unsubscribe", "list-unsubscribe-post"})
"""Headers a signature must cover: a one-click unsubscribe whose link could be swapped is not
trusted (RFC 8058 section 4)."""


@dataclass(frozen=True)
class SpamReport:
    score: float
    rules: dict[str, float]
    """Each rule that hit, with its points."""


_STATUS = re.compile(r"score=(-?\d+(?:\.\d+)?)")
_RULE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s+([A-Z0-9_]+)\s", re.MULTILINE)


def spamassassin(message: bytes, timeout: float = 60.0) -> SpamReport | None:
    """SpamAssassin's verdict on ``message`` with its local tests only (``-L``: no DNS
    blocklists, no Razor): None when it is not installed."""
    program = shutil.which("spamassassin")
    if program is None:
        return None
    done = subprocess.run(
        [program, "-L", "-t"], input=message, capture_output=True, timeout=timeout, check=False
    )
    output = done.stdout.decode("utf-8", "replace")
    if "X-Spam-Status:" not in output:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise SyndicateError(f"{program} gave no verdict ({said[-1] if said else done.returncode})")
    return parse_spam_report(output)


def parse_spam_report(output: str) -> SpamReport:
    """``spamassassin -t``'s output: the X-Spam-Status score, the rules of its report."""
    head = output.split("\n\n", 1)[0]
    status = re.search(r"^X-Spam-Status:.*?(?=^\S)", head + "\nX", re.MULTILINE | re.DOTALL)
    found = _STATUS.search(status[0] if status else "")
    report = output.rpartition("Content analysis details:")[2]
    rules = {name: float(points) for points, name in _RULE.findall(report)}
    return SpamReport(float(found[1]) if found else sum(rules.values()), rules)


def sample_message(
    config: Config, articles: ArticleSet, lang: str, now: datetime, signer: DkimSigner | None
) -> bytes | None:
    """A digest of every audience in ``lang``, composed and signed as it would be sent; None
    when the language has no article."""
    digest = next_digest(config, articles, lang, config.audiences, now=now, since=date.min)
    if digest is None:
        return None
    rendered = render_digest(digest, config)
    message = preview_files(rendered, config, now=now)[".eml"]
    return signer.sign(message, now=now) if signer else message


def _text_part(parsed: EmailMessage) -> bool:
    return any(part.get_content_type() == "text/plain" for part in parsed.walk())


def _html_size(parsed: EmailMessage) -> int:
    html = parsed.get_body(("html",))
    return len(html.get_content().encode()) if html is not None else 0


def message_problems(message: bytes) -> list[str]:
    """What a receiver would hold against the message's structure and headers."""
    parsed = message_from_bytes(message, policy=policy.default)
    assert isinstance(parsed, EmailMessage)
    problems = []
    size = _html_size(parsed)
    if size >= CLIP_BYTES:
        problems.append(f"HTML of {size // 1024} KB: Gmail clips it at 102 KB")
    links = re.findall(r"<([^>]+)>", str(parsed.get("List-Unsubscribe", "")))
    https = [link for link in links if link.startswith("https://")]
    if not https:
        problems.append("List-Unsubscribe has no https:// link (one-click needs one: RFC 8058)")
    if str(parsed.get("List-Unsubscribe-Post", "")) != "List-Unsubscribe=One-Click":
        problems.append("no List-Unsubscribe-Post: List-Unsubscribe=One-Click")
    if not parsed.get("List-Id"):
        problems.append("no List-Id")
    if not _text_part(parsed):
        problems.append("no plain-text part")
    return problems


def dkim_problem(message: bytes, lookups: Lookups) -> str | None:
    """Why the message's DKIM signature does not verify against DNS, or None when it does."""
    import dkim

    def ask(name: bytes, timeout: int = 5) -> bytes:
        found = lookups.txt(name.decode().rstrip("."))
        return found[0].encode() if found else b""

    try:
        if not dkim.verify(message, dnsfunc=ask):
            return "the DKIM signature does not verify against the published key"
    except dkim.DKIMException as exc:
        return f"the DKIM signature cannot be checked: {exc}"
    parsed = message_from_bytes(message, policy=policy.default)
    signed = set(tags(str(parsed.get("DKIM-Signature", ""))).get("h", "").lower().split(":"))
    unsigned = sorted(MUST_SIGN - signed)
    if unsigned:
        return f"the DKIM signature leaves out {', '.join(unsigned)}"
    return None


def check_message(
    lang: str,
    message: bytes,
    lookups: Lookups,
    signed: bool,
    spam: Callable[[bytes], SpamReport | None] = spamassassin,
    unreachable: str | None = None,
) -> Check:
    """``unreachable``: why site.base_url does not answer (``--online``), when it does not."""
    problems = message_problems(message) + ([unreachable] if unreachable else [])
    if signed:
        problems += [p for p in [dkim_problem(message, lookups)] if p]
    report = spam(message)
    said = [f"{len(message) // 1024} KB"]
    said.append(
        "DKIM verifies, From, Subject and List-Unsubscribe signed" if signed else "unsigned"
    )
    if report is not None:
        scored = sorted((n, p) for n, p in report.rules.items() if p)
        hits = ", ".join(f"{name} {points:g}" for name, points in scored)
        said.append(f"SpamAssassin {report.score + 0.0:g} ({hits or 'no rule scored'})")
        if report.score >= SPAM_FAIL:
            problems.append(f"SpamAssassin scores it {report.score:g}: spam")
    if problems:
        return failed("message", f"[{lang}] " + "; ".join(problems), _fix(problems))
    loud = {n: p for n, p in (report.rules if report else {}).items() if p > RULE_WARN}
    if report is not None and (report.score > SPAM_WARN or loud):
        return warned(
            "message",
            f"[{lang}] " + ", ".join(said),
            "mend the templates for the rules named above (spamassassin -L -t < message.eml)",
        )
    return passed("message", f"[{lang}] " + ", ".join(said))


def _fix(problems: list[str]) -> str:
    fixes = []
    text = " ".join(problems)
    if "https://" in text:
        fixes.append("set site.base_url to the https:// address readers reach")
    if "site.base_url http" in text:
        fixes.append("serve the site there (syndicate serve behind the web server)")
    if "DKIM" in text:
        fixes.append("publish the key the dkim check prints")
    if "KB" in text:
        fixes.append("lower email.max_articles")
    if "SpamAssassin" in text:
        fixes.append("mend the templates for the rules it names")
    return "; ".join(fixes) or "see templates/email/ and the [email] keys"


def check_messages(
    config: Config,
    articles: ArticleSet,
    lookups: Lookups,
    now: datetime,
    spam: Callable[[bytes], SpamReport | None] = spamassassin,
    online: bool = False,
) -> list[Check]:
    """One check per published language; ``online``: whether site.base_url answers, too."""
    checks = []
    signer = dkim_signer(config)
    unreachable = None
    if online:
        from .online import base_url_problem

        unreachable = base_url_problem(str(config.site.base_url))
    for lang in config.site.languages:
        message = sample_message(config, articles, lang, now, signer)
        if message is None:
            checks.append(warned("message", f"[{lang}] no article to compose a sample from", ""))
            continue
        signed = signer is not None
        checks.append(check_message(lang, message, lookups, signed, spam, unreachable))
    return checks
