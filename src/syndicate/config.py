"""config.toml → a frozen, validated ``Config``.

Every key has a default, so the project runs with no file at all. Every problem in a file is
reported at once, one ``key: message`` line each. Secrets and server URLs may come from
``SYNDICATE_*`` environment variables and are never required in the file. Relative paths are
resolved against the config file's folder.
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from datetime import time
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from .errors import ConfigError
from .model import AUDIENCES

ENV_CONFIG = "SYNDICATE_CONFIG"
DEFAULT_CONFIG = "config.toml"


def _check_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"not an absolute http(s) URL: {value!r}")
    return value.rstrip("/")


def _check_zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown IANA time zone {value!r}") from None
    return value


def _check_network(value: str) -> str:
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError(f"not an IP address or network: {value!r}") from None
    return value


HttpUrl = Annotated[str, AfterValidator(_check_url)]
TimeZone = Annotated[str, AfterValidator(_check_zone)]
Network = Annotated[str, AfterValidator(_check_network)]


def _check_audience(value: str) -> str:
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", value):
        raise ValueError(
            f"audience id {value!r}: lowercase letters, digits, '-' and '_' only (it names "
            "feed files and page addresses, and '+' and ';' join several ids)"
        )
    return value


AudienceId = Annotated[str, AfterValidator(_check_audience)]
"""An IP address or network (``192.0.2.7``, ``2001:db8::/32``)."""
LangCode = Annotated[str, Field(pattern=r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$")]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SeoFields(Section):
    """The labels of the SEO tail's fields: [languages.<code>.seo_fields]."""

    title: list[str] = []
    """Labels of the SEO title line; add the ones your editors write."""
    description: list[str] = []
    """Labels of the SEO description line (the meta description)."""
    excerpt: list[str] = []
    """Labels of the excerpt line."""
    primary_slug: list[str] = []
    """Labels of the primary URL slug: the key that joins an article's translations."""
    alt_slugs: list[str] = []
    """Labels of alternative slugs (matched as a prefix: "Alt 1", "Alt 2", ...)."""


class LanguageProfile(Section):
    """The words one language uses, so that reading and rendering it needs no code."""

    name: str
    """The language's own name, shown to readers ("Nederlands")."""
    date_line: list[str]
    """Words before the date on the article's date line ("Updated on")."""
    takeaways: list[str]
    """Headings that open the key-takeaways section."""
    references: list[str]
    """Headings that open the reference list."""
    seo: list[str] = []
    """Headings that open the SEO tail (the tail may also start without one)."""
    seo_fields: SeoFields = SeoFields()
    """Labels of the SEO tail's fields, per field."""
    audiences: dict[AudienceId, list[str]]
    """Per audience id, the labels that open its takeaways line (without the colon); a new id
    adds an audience."""
    audience_names: dict[str, str] = {}
    """Per audience id, the name digests and pages use in headings."""
    title: str = ""
    """The site's title in this language (unset: site.title): feeds, pages and mails."""
    description: str = ""
    """The site's description in this language (unset: site.description): the feeds'
    subtitle."""

    def widened(self, other: LanguageProfile) -> LanguageProfile:
        """This profile with ``other``'s words added after its own: one language's articles
        by several writers name their date line, headings, labels and fields differently."""

        def union(mine: list[str], theirs: list[str]) -> list[str]:
            return list(dict.fromkeys([*mine, *theirs]))

        lists = ("date_line", "takeaways", "references", "seo")
        fields = {
            f: union(getattr(self.seo_fields, f), getattr(other.seo_fields, f))
            for f in SeoFields.model_fields
        }
        audiences = {
            a: union(self.audiences.get(a, []), other.audiences.get(a, []))
            for a in {**self.audiences, **other.audiences}
        }
        return self.model_copy(
            update={
                **{key: union(getattr(self, key), getattr(other, key)) for key in lists},
                "seo_fields": SeoFields(**fields),
                "audiences": audiences,
            }
        )

    def aligned(self, audiences: Sequence[str]) -> LanguageProfile:
        """This profile with its labels, in their order, given to ``audiences``: those of the
        same article in a language of known labels. A profile read from an article's structure
        can tell its labels only by their place and their likeness to other languages' words;
        with fewer lines than audiences, a translation says which are there."""
        labels = list(self.audiences.values())
        if len(labels) != len(audiences) or list(self.audiences) == list(audiences):
            return self
        return self.model_copy(update={"audiences": dict(zip(audiences, labels, strict=True))})

    @field_validator("date_line", "takeaways", "references")
    @classmethod
    def _not_empty(cls, value: list[str]) -> list[str]:
        if not value or not all(v.strip() for v in value):
            raise ValueError("needs at least one non-empty phrase")
        return value


class Site(Section):
    """Who publishes what, and where: [site]."""

    title: str = "Syndicate"
    """Publisher name: the title of the feeds, pages and emails."""
    description: str | dict[LangCode, str] = ""
    """What the site publishes, one sentence: the feeds' subtitle. One text for every
    language, or a table of one per language code (unset: the title)."""
    base_url: HttpUrl = "http://127.0.0.1:8080"
    """Public root URL, http(s): every link in feeds, pages and emails is built from it, so
    set it to where readers reach the site."""
    article_url: str = "{base_url}/{lang}/{slug}/"
    """Template of an article's URL from {base_url}, {lang} and {slug}: change it when the
    articles live at other addresses (an existing site's)."""
    author: str = "Syndicate editors"
    """Author named in the feeds."""
    author_email: str | None = None
    """Author's e-mail address named in the feeds (unset: none is named)."""
    timezone: TimeZone = "Europe/Amsterdam"
    """IANA time zone of the publisher: article dates, the schedule's times, the send times."""
    publish_time: time = time(9, 0)
    """Time of day (HH:MM:SS, in site.timezone) an article's date line stands for: the time
    of its feed entry."""
    languages: list[LangCode] = ["en", "nl", "de"]
    """Language codes read and published, in display order; each needs a profile (built in,
    or a [languages.<code>] block)."""
    articles: Path = Path("articles")
    """Folder of the article files."""
    locales: Path = Path("locales")
    """Folder of the publisher's own catalogs, <locales>/<lang>/LC_MESSAGES/messages.po: they add
    languages and override the built-in sentences, read again when they change."""
    templates: Path | None = None
    """Folder whose email/ and web/ files replace the built-in templates of the same name
    (unset: the built-in ones alone)."""
    fallback_language: LangCode | None = None
    """Language of the whole interface (mail and web) for a language whose catalog is
    incomplete; unset, its digests are refused and its pages are in English."""
    max_article_bytes: int = Field(2_000_000, ge=1)
    """Size in bytes above which an article file is not read (a diagnostic names it): a guard
    against a stray large file in the folder."""
    page_size: int = Field(50, ge=1, le=10_000)
    """Articles per page of a language's index; the older ones are on /<lang>/page/2/ and
    on, linked with rel="next" and "prev"."""

    @model_validator(mode="after")
    def _described_languages(self) -> Site:
        if isinstance(self.description, dict):
            unknown = sorted(set(self.description) - set(self.languages))
            if unknown:
                raise ValueError(
                    f"description names {', '.join(unknown)}, not one of site.languages "
                    f"({', '.join(self.languages)})"
                )
        return self

    @field_validator("article_url")
    @classmethod
    def _template(cls, value: str) -> str:
        unknown = set(re.findall(r"{(\w*)}", value)) - {"base_url", "lang", "slug"}
        if unknown:
            raise ValueError(
                f"unknown placeholder(s) {', '.join(sorted(unknown))} (known: base_url, lang, slug)"
            )
        return value


class Feeds(Section):
    """The feed documents: [feeds]."""

    out: Path = Path("feeds")
    """Folder the feeds are written to (and served from)."""
    max_entries: int = Field(50, ge=1, le=10_000)
    """Entries per feed document; older ones go to RFC 5005 archive documents. More let a
    reader that polls seldom miss nothing; fewer make the document every poll fetches smaller."""
    archive_entries: int = Field(500, ge=1, le=100_000)
    """Entries per archive document. A reader fetches an archive once, to catch up, where it
    polls the feed: larger pages mean fewer documents to fetch, write and check."""
    hub: list[HttpUrl] = []
    """WebSub hubs announced in every feed and told after each build that changed a feed: one
    URL, or a list of them (empty: none)."""
    tag: str | None = Field(None, pattern=r"^[A-Za-z0-9.@-]+,\d{4}(-\d{2}(-\d{2})?)?$")
    """Tag-URI authority and date of every feed and entry id ("example.org,2025-01-01"); unset:
    the host of site.base_url with 2025-01-01. Keep it when the site moves, so ids never change."""

    @field_validator("hub", mode="before")
    @classmethod
    def _one_or_more_hubs(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class State(Section):
    """Where syndicate keeps what it has done: [state]."""

    database: str = "sqlite:///state/syndicate.db"
    """SQLAlchemy URL of the state database: a SQLite file needs no server; PostgreSQL
    (postgresql+psycopg://...) for workers on several machines. SYNDICATE_DATABASE_URL
    overrides it."""
    doctor_file: Path = Path("state/doctor.json")
    """The last ``syndicate doctor`` run (or send's preflight): when, for which settings, and
    its verdicts; ``send`` checks the DNS again when it is a day old or the settings changed."""


class Send(Section):
    """How deliveries are sent, by one process or by workers: [send]."""

    engine: Literal["local", "procrastinate"] = "local"
    """Who sends the deliveries: ``local``, the ``send`` process itself (its ``smtp.pool_size``
    connections); ``procrastinate``, ``syndicate worker`` processes on any number of machines,
    through jobs in the state database (PostgreSQL only; install ``syndicate[scale]``)."""
    batch_size: int = Field(500, ge=1, le=100_000)
    """Deliveries per job: a worker sends a batch of one issue (one variant) at a time;
    smaller batches spread a send over more workers sooner."""
    plan_chunk: int = Field(10_000, ge=1)
    """Readers planned per transaction, rounded up to whole batches: an issue commits with its
    first chunk of deliveries (and their jobs), then each further chunk commits on its own; a
    planning stopped between two is taken up where it stopped by the next send (and, with
    workers, by the reconciler)."""
    micro_batch: int | None = Field(None, ge=1, le=1_000)
    """Deliveries each connection claims at once (marks in flight, in one commit, with the
    outcomes of the ones before): fewer commits, but up to so many uncertain per connection
    when a sender dies. Unset: 1 with the local engine, 20 with procrastinate (where the
    database is shared by every worker)."""
    max_connections: int | None = Field(None, ge=1)
    """Connections to the relay at most, across every worker of the procrastinate engine;
    a batch waits up to smtp.timeout for a free one (unset: each batch opens smtp.pool_size)."""
    poll_seconds: float = Field(5.0, gt=0)
    """Seconds between an idle worker's looks for jobs besides being told of new ones (a job
    run again after its worker stalled is found this way)."""
    heartbeat_seconds: float = Field(10.0, gt=0)
    """Seconds between a worker's reports to the database that it is alive; keep it below
    stalled_seconds."""
    stalled_seconds: float = Field(30.0, gt=0)
    """Seconds a worker may be silent before it is taken as dead and its jobs are run again
    (the ledger keeps anything from being sent twice); must be above heartbeat_seconds."""
    min_rate: float = Field(1.0, gt=0)
    """Messages a second the relay's slow-down replies (421, 4.7.x, a 4xx about its rate)
    never push the rate below: each cuts it to 70 %, once a second at most; with the
    procrastinate engine, for every worker at once. Set, it must not be above smtp.rate (a
    lower smtp.rate is its own floor)."""
    recover_seconds: float = Field(600.0, gt=0)
    """After a cut the rate climbs back to smtp.rate by itself, linearly: by the whole of
    smtp.rate in this many seconds (so a cut to 70 % is made up in 30 % of it)."""


class Email(Section):
    """The digests' headers, previews, approval and signing: [email]."""

    sender: str = "Syndicate <digest@example.com>"
    """From header of every digest and reader note."""
    reply_to: str | None = None
    """Reply-To header, where readers' replies should go instead (unset: none)."""
    preview_to: str = "editor@example.com"
    """Recipient of digests generated by hand for review, and of approval test copies."""
    outbox: Path = Path("outbox")
    """Folder of previews and of the local Maildir used when no SMTP server is configured."""
    english_fallback: bool = False
    """Deprecated: site.fallback_language = "en" says the same."""
    max_articles: int = Field(10, ge=1, le=1000)
    """The most articles one digest lists, newest first; the rest of its window is one line
    with a link to the language's index page (fewer, when the HTML would pass its limit)."""
    first_window_days: int | None = Field(None, ge=1)
    """A group's first digest covers the articles of these last days (unset: however old;
    max_articles still caps it). Later digests hold what is new since the group's last one."""
    list_id: str = "digest.example.com"
    """List-Id header of the digests, by which mail clients file and filter them."""
    unsubscribe_mailto: str | None = None
    """Address for mailto: unsubscribe requests, beside the one-click link (unset: none)."""
    dkim_selector: str | None = None
    """DKIM selector (<selector>._domainkey in DNS); signing is on when this and dkim_key_file
    are set, and one without the other is refused."""
    dkim_domain: str | None = None
    """DKIM signing domain (unset: the sender's domain); needs dkim_selector and dkim_key_file."""
    dkim_key_file: Path | None = None
    """PEM file of the DKIM private key; needs dkim_selector."""
    return_path: str | None = None
    """Envelope sender of the digests, which bounces go back to: each delivery gets its own,
    <local>+<delivery id>.<mac>@<domain> (unset: bounces@ the sender's domain)."""
    verp: bool = True
    """Give each delivery its own envelope sender; off for a relay that sends as one address
    only (then return_path, else the sender's address, and bounces match by fallbacks)."""
    sending_ips: list[Network] = []
    """Addresses or networks (CIDR) the relay sends from, when they are not its host's own
    (a relay service): ``syndicate doctor`` checks that SPF authorises these instead."""
    approval: bool = False
    """Hold every new issue until an editor approves it (send approve); a test copy per
    language goes to preview_to, linking each held issue's preview on the site."""
    approval_expires_days: int = Field(7, ge=1)
    """Days after which a held issue is cancelled, never sent stale; its preview link stops
    working then too."""
    welcome: bool = True
    """Send a reader who has just confirmed a welcome mail in their language, with their
    group's latest issue (or the newest key takeaways when it has had none yet)."""

    @field_validator("return_path")
    @classmethod
    def _bare_address(cls, value: str | None) -> str | None:
        if value is not None:
            local, at, domain = value.rpartition("@")
            if not (at and local and domain) or "+" in local or re.search(r"[\s<>]", value):
                raise ValueError(f"not a bare address without '+' (bounces@example.org): {value!r}")
        return value


class Smtp(Section):
    """The mail server and how hard to push it: [smtp]."""

    url: str | None = None
    """Whole server as a URL (smtp://, smtp+starttls://, smtps://); SYNDICATE_SMTP_URL overrides
    it. Unset, mail goes to the Maildir in the outbox."""
    username: str | None = None
    """Login name, when the URL holds none."""
    password: SecretStr | None = None
    """Login password; better given as SYNDICATE_SMTP_PASSWORD, so it stays out of the file."""
    pool_size: int = Field(4, ge=1, le=64)
    """Persistent connections a send process (or each worker) uses at once: more send faster
    when the relay allows as many."""
    rate: float = Field(50.0, gt=0)
    """Messages per second at most, across the connections (with the procrastinate engine,
    across every worker): the relay's own limit."""
    timeout: float = Field(30.0, gt=0)
    """Seconds to wait for the server's reply (and, capped by send.max_connections, for a free
    connection); a stopping send lets each message on the wire take this long."""
    retries: int = Field(3, ge=0, le=20)
    """Retries of a temporary failure (4xx, a lost connection) within one run; what is left
    waits for the next run."""
    max_bounces: int | None = Field(None, ge=1)
    """Deprecated: bounces.hard_limit says it. Set (and bounces.hard_limit not), it stands
    for bounces.hard_limit; it no longer counts soft bounces, which follow bounces.soft_limit."""
    bounce_window_days: float | None = Field(None, gt=0)
    """Deprecated: bounces.hard_window_days says it. Set (and that key not), it stands for it."""
    retry_backoff: float = Field(1.0, ge=0)
    """Seconds before the first retry of a temporary failure; doubles with each retry."""

    @field_validator("url")
    @classmethod
    def _smtp_url(cls, value: str | None) -> str | None:
        if value is not None and urlsplit(value).scheme not in ("smtp", "smtp+starttls", "smtps"):
            raise ValueError("must start with smtp://, smtp+starttls:// or smtps://")
        return value


class Bounces(Section):
    """When bounces and complaints stop a reader's mail: [bounces]. A complaint (the reader
    reported a digest as spam) does so at once, as an unsubscribe does."""

    hard_limit: int = Field(1, ge=1)
    """Hard bounces (the address or its domain is gone: at the send or by bounce mail) after
    which a reader is marked bounced and no longer sent to."""
    hard_window_days: float = Field(90.0, gt=0)
    """Days after which a reader's hard bounces are forgotten when the next one comes (it
    counts as the first again); matters only with hard_limit above 1."""
    soft_limit: int = Field(5, ge=1)
    """Soft bounces (a full mailbox, a filter, a policy: may pass another day) after which a
    reader is marked bounced, once they also span soft_days with no delivery in between."""
    soft_days: float = Field(14.0, ge=0)
    """Days soft bounces must span, from the first of them, before they stop a reader's mail;
    a delivery that got through between two of them (sent, and no bounce names it) starts
    the count again."""
    postmark_user: str | None = None
    """User name Postmark's bounce webhook logs in with (basic auth); set with
    postmark_password, POST /hooks/bounces/postmark takes its bounces and complaints."""
    postmark_password: SecretStr | None = None
    """Password of that login; better given as SYNDICATE_POSTMARK_PASSWORD."""
    mailgun_signing_key: SecretStr | None = None
    """Mailgun's webhook signing key; set, POST /hooks/bounces/mailgun takes its failed and
    complained events. Better given as SYNDICATE_MAILGUN_SIGNING_KEY."""
    sendgrid_public_key: str | None = None
    """The verification key SendGrid shows for its signed event webhook (base64; PEM also
    does); set, POST /hooks/bounces/sendgrid takes its bounce, dropped, deferred and
    spamreport events."""
    sns_topics: list[str] = []
    """The ARNs of the Amazon SNS topics your SES bounce, complaint and delivery
    notifications go to; set, POST /hooks/bounces/ses takes their messages (each checked
    with SNS's signing certificate) and confirms their subscriptions."""
    imap_url: str | None = None
    """An IMAP mailbox of bounce mail, imaps://user@host[:port]/folder (folder: INBOX when
    left out); set, the scheduler reads it every ``every`` and ``bounces process`` without a
    path does. Messages dealt with move to the folder processed under it (a reply to
    replies; INBOX.processed or INBOX/processed, as the server writes it); none is deleted."""
    imap_password: SecretStr | None = None
    """The password of that login; better given as SYNDICATE_IMAP_PASSWORD."""
    every: str = "15m"
    """How often the scheduler reads imap_url: minutes ("15m"), hours ("1h") or days ("1d")."""

    @field_validator("imap_url")
    @classmethod
    def _imap_url(cls, value: str | None) -> str | None:
        if value is not None:
            url = urlsplit(value)
            if url.scheme != "imaps" or not url.hostname or not url.username:
                raise ValueError("must be imaps://user@host[:port][/folder] (IMAP over TLS)")
        return value

    @field_validator("every")
    @classmethod
    def _every(cls, value: str) -> str:
        every_minutes(value)
        return value

    @property
    def every_minutes(self) -> int:
        """``every`` in minutes."""
        return every_minutes(self.every)

    @field_validator("sendgrid_public_key")
    @classmethod
    def _sendgrid_key(cls, value: str | None) -> str | None:
        if value is not None:
            # here, not at the top: every command loads the config, few take webhooks
            from .bounces.relays import sendgrid_key

            try:
                sendgrid_key(value)
            except ValueError as exc:
                raise ValueError(f"not SendGrid's ECDSA public key ({exc})") from None
        return value

    @model_validator(mode="after")
    def _postmark_login(self) -> Bounces:
        if (self.postmark_user is None) != (self.postmark_password is None):
            raise ValueError("postmark_user and postmark_password go together")
        return self


_EVERY = re.compile(r"\s*(\d+)\s*([mhd])\s*")
_MINUTES = {"m": 1, "h": 60, "d": 24 * 60}


def every_minutes(value: str) -> int:
    """A period as "15m", "1h" or "1d", in minutes; ValueError says what is wrong."""
    found = _EVERY.fullmatch(value)
    if found is None or int(found[1]) == 0:
        raise ValueError(f"not a period like 15m, 2h or 1d: {value!r}")
    return int(found[1]) * _MINUTES[found[2]]


# Keys of [smtp] that [bounces] replaced: each stands for its new key when only it is set.
_DEPRECATED_BOUNCE_KEYS = {"max_bounces": "hard_limit", "bounce_window_days": "hard_window_days"}


class DigestJob(Section):
    """One digest send job: a [[schedule.digests]] table."""

    name: str
    """Stable job id: the state database knows the job by it, so keep it when times change."""
    day_of_week: str = "mon"
    """Day(s) of the week by name: mon..sun, ranges and lists (mon-fri, mon,thu)."""
    hour: int = Field(7, ge=0, le=23)
    """Hour of the send (0-23), in site.timezone, or each reader's with local_time."""
    minute: int = Field(30, ge=0, le=59)
    """Minute of the send (0-59)."""
    languages: list[LangCode] = []
    """Languages this job sends, of site.languages (empty: all)."""
    audiences: list[str] = []
    """Audiences this job sends (empty: all)."""
    local_time: bool = False
    """Send at hour:minute in each reader's own time zone (else in site.timezone): the issue
    is made when the first zone's time comes, and each zone's deliveries wait for theirs."""

    @field_validator("day_of_week")
    @classmethod
    def _days(cls, value: str) -> str:
        names = "mon|tue|wed|thu|fri|sat|sun"
        if not re.fullmatch(rf"({names})(-({names}))?(,({names})(-({names}))?)*|\*", value):
            raise ValueError("use weekday names (mon..sun), e.g. 'mon' or 'mon-fri'")
        return value


class Schedule(Section):
    """What ``syndicate run`` does when: [schedule]."""

    feeds_every_minutes: int = Field(30, ge=1)
    """Minutes between feed rebuilds: how soon a new or changed article reaches the feeds."""
    misfire_grace_seconds: int = Field(7 * 24 * 3600, ge=1)
    """Seconds a missed run may still start late (after the process was down); runs missed
    meanwhile coalesce into one, and one later than this is logged missed."""
    stop_timeout_seconds: float = Field(60.0, gt=0)
    """Seconds a running job may take to finish on SIGTERM before the process exits anyway
    (the send it leaves unfinished resumes at the next start); keep it above smtp.timeout, and
    systemd's TimeoutStopSec above it."""
    digests: list[DigestJob] = [DigestJob(name="weekly")]
    """Digest send jobs, one [[schedule.digests]] table each."""

    @field_validator("digests")
    @classmethod
    def _unique_names(cls, value: list[DigestJob]) -> list[DigestJob]:
        names = [job.name for job in value]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(
                f"job names must be unique (the job id); repeated: {', '.join(repeated)}"
            )
        return value


class Web(Section):
    """The site ``syndicate serve`` runs: [web]."""

    host: str = "127.0.0.1"
    """Address ``syndicate serve`` listens on; keep it local behind a reverse proxy."""
    port: int = Field(8080, ge=1, le=65535)
    """Port ``syndicate serve`` listens on."""
    secret_key: SecretStr | None = None
    """Key that signs reader tokens; better given as SYNDICATE_SECRET_KEY (unset: the one in
    secret_key_file)."""
    subscribe_per_minute: int = Field(10, ge=1)
    """Subscribe requests per client address and minute."""
    mails_per_address_hour: int = Field(3, ge=1)
    """Mails /subscribe sends to one reader address per hour; past that the page is the same
    and nothing is sent, so the form cannot flood someone's inbox."""
    trusted_proxies: list[Network] = []
    """Addresses or networks (CIDR) of reverse proxies whose X-Forwarded-For names the client;
    from anyone else the header is ignored, so a client cannot pick its own rate limit."""
    secret_key_file: Path = Path("state/secret_key")
    """Where a generated key is kept when no secret_key is given (created on first use)."""
    issues: Path = Field(Path("archive"), validation_alias=AliasChoices("issues", "archive"))
    """Folder of sent newsletter issues as web pages: <issues>/<lang>/<issue>.html. (Its
    key was ``archive``, which still works; the RFC 5005 archives are the feeds'.)"""


class Conflicts(ValueError):
    """Keys whose values each pass but contradict one another: one line per rule broken,
    each naming its keys (reported together, as the other problems are)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        super().__init__("; ".join(lines))


class Config(Section):
    """The whole configuration: one section per table of config.toml."""

    site: Site = Site()
    feeds: Feeds = Feeds()
    state: State = State()
    email: Email = Email()
    smtp: Smtp = Smtp()
    bounces: Bounces = Bounces()
    send: Send = Send()
    schedule: Schedule = Schedule()
    web: Web = Web()
    languages: dict[LangCode, LanguageProfile] = {}
    """Every known language: the built-in profiles merged with [languages.<code>] blocks."""
    root: Path = Path(".")
    """Folder relative paths are resolved against: the config file's folder, set by
    load_config (not a key of the file)."""

    def doubtful(self) -> list[str]:
        """Settings that hold together but do not do what they seem to: ``check`` warns of
        each, naming its keys (refusing them would break sites that work)."""
        lines = []
        if self.schedule.stop_timeout_seconds <= self.smtp.timeout:
            lines.append(
                f"schedule.stop_timeout_seconds ({self.schedule.stop_timeout_seconds:g}) is not "
                f"above smtp.timeout ({self.smtp.timeout:g}): a stop may cut a message on the "
                "wire, and leave its delivery uncertain"
            )
        if self.send.engine == "local" and self.send.max_connections is not None:
            lines.append(
                "send.max_connections is for the procrastinate engine: with send.engine = "
                f'"local" a send opens smtp.pool_size ({self.smtp.pool_size}) connections'
            )
        if self.smtp.url is None and (self.smtp.username or self.smtp.password):
            lines.append(
                "smtp.username and smtp.password are unused without smtp.url: mail goes to "
                "the Maildir in the outbox"
            )
        for old, new in _DEPRECATED_BOUNCE_KEYS.items():
            value = getattr(self.smtp, old)
            if value is None:
                continue
            if getattr(self.bounces, new) == value:
                lines.append(
                    f"smtp.{old} is deprecated: it stands for bounces.{new} ({value:g}); "
                    f"write bounces.{new} (soft bounces now follow bounces.soft_limit and "
                    "bounces.soft_days)"
                )
            else:
                lines.append(f"smtp.{old} is deprecated and ignored: bounces.{new} is set")
        return lines

    @model_validator(mode="before")
    @classmethod
    def _bounce_keys_moved(cls, data: Any) -> Any:
        """The deprecated [smtp] bounce keys stand for their [bounces] keys when those are
        not set (``doubtful`` says so)."""
        if not isinstance(data, dict):
            return data
        smtp = data.get("smtp")
        given = smtp if isinstance(smtp, dict) else {}
        if isinstance(smtp, Smtp):
            given = {k: getattr(smtp, k) for k in smtp.model_fields_set}
        moved = {
            new: given[old]
            for old, new in _DEPRECATED_BOUNCE_KEYS.items()
            if given.get(old) is not None
        }
        if not moved:
            return data
        bounces = data.get("bounces", {})
        if isinstance(bounces, Bounces):
            bounces = {k: getattr(bounces, k) for k in bounces.model_fields_set}
        if not isinstance(bounces, dict):
            return data
        return {**data, "bounces": {**moved, **bounces}}

    @model_validator(mode="after")
    def _consistent(self) -> Config:
        lines = [*self._languages_known(), *self._sending(), *self._signing()]
        if lines:
            raise Conflicts(lines)
        return self

    def _languages_known(self) -> list[str]:
        lines = []
        missing = [lang for lang in self.site.languages if lang not in self.languages]
        if missing:
            lines.append(
                f"site.languages names {', '.join(missing)} but no [languages.<code>] "
                "profile exists for it"
            )
        fallback = self.site.fallback_language
        if fallback is not None and fallback not in self.languages:
            lines.append(f"site.fallback_language {fallback!r} has no language profile")
        if self.email.english_fallback and fallback not in (None, "en"):
            lines.append(
                f'email.english_fallback (deprecated: "en") contradicts site.fallback_language '
                f"({fallback!r}): drop email.english_fallback"
            )
        for job in self.schedule.digests:
            unknown = set(job.audiences) - set(self.audiences)
            if unknown:
                lines.append(
                    f"schedule.digests {job.name!r}: unknown audience(s) "
                    f"{', '.join(sorted(unknown))} (known: {', '.join(self.audiences)})"
                )
            unpublished = [lang for lang in job.languages if lang not in self.site.languages]
            if unpublished:
                lines.append(
                    f"schedule.digests {job.name!r}: languages names {', '.join(unpublished)}, "
                    f"not one of site.languages ({', '.join(self.site.languages)})"
                )
        return lines

    def _sending(self) -> list[str]:
        send, smtp = self.send, self.smtp
        lines = []
        if send.engine == "procrastinate" and not self.state.database.startswith("postgresql"):
            lines.append(
                'send.engine = "procrastinate" needs a PostgreSQL state.database (its jobs live '
                f"in the same database as the deliveries), not {self.state.database.split(':')[0]}"
            )
        if send.stalled_seconds <= send.heartbeat_seconds:
            lines.append(
                f"send.stalled_seconds ({send.stalled_seconds:g}) must be above "
                f"send.heartbeat_seconds ({send.heartbeat_seconds:g}): a live worker would be "
                "taken as dead between two of its heartbeats"
            )
        # Left at its default, min_rate gives way to a lower smtp.rate (the rate is then its
        # own floor); set, a floor above the rate itself says two things at once.
        if "min_rate" in send.model_fields_set and send.min_rate > smtp.rate:
            lines.append(
                f"send.min_rate ({send.min_rate:g}) must not be above smtp.rate "
                f"({smtp.rate:g}): slow-down replies cut the rate from smtp.rate down, never "
                "to above it"
            )
        return lines

    def _signing(self) -> list[str]:
        email = self.email
        keys = {
            "email.dkim_selector": email.dkim_selector,
            "email.dkim_key_file": email.dkim_key_file,
            "email.dkim_domain": email.dkim_domain,
        }
        given = [key for key, value in keys.items() if value is not None]
        missing = [key for key in list(keys)[:2] if keys[key] is None]
        if given and missing:
            return [
                f"{' and '.join(given)} set without {' and '.join(missing)}: DKIM signing needs "
                "email.dkim_selector and email.dkim_key_file (nothing would be signed)"
            ]
        return []

    @property
    def audiences(self) -> tuple[str, ...]:
        """Audience ids: the standard ones, then any that a language profile adds."""
        extra = {a for p in self.languages.values() for a in p.audiences} - set(AUDIENCES)
        return AUDIENCES + tuple(sorted(extra))

    @property
    def fallback_language(self) -> str | None:
        """site.fallback_language, or English where the deprecated email.english_fallback is on."""
        if self.site.fallback_language is None and self.email.english_fallback:
            return "en"
        return self.site.fallback_language

    @property
    def profiles(self) -> dict[str, LanguageProfile]:
        """Profiles of the published languages, in configured order."""
        return {lang: self.languages[lang] for lang in self.site.languages}

    def path(self, value: Path) -> Path:
        """A configured path, resolved against the config file's folder."""
        return value if value.is_absolute() else (self.root / value)

    @property
    def database_url(self) -> str:
        """The database URL with a relative SQLite path resolved against ``root``."""
        url = self.state.database
        prefix = "sqlite:///"
        if url.startswith(prefix) and not url.startswith(prefix + "/") and url != "sqlite://":
            rest = url[len(prefix) :]
            if rest and rest != ":memory:":
                return prefix + str(self.path(Path(rest)))
        return url

    def title(self, lang: str) -> str:
        """The site's title in ``lang``: its language block's, else site.title."""
        profile = self.languages.get(lang)
        return (profile and profile.title) or self.site.title

    def description(self, lang: str) -> str:
        """The site's description in ``lang``: its language block's, else site.description
        (the text, or its entry for ``lang``), else the title."""
        profile = self.languages.get(lang)
        site = self.site.description
        shared = site if isinstance(site, str) else site.get(lang, "")
        return (profile and profile.description) or shared or self.title(lang)


def builtin_profiles() -> dict[str, Any]:
    text = resources.files("syndicate").joinpath("profiles.toml").read_text("utf-8")
    return tomllib.loads(text)


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _from_env(data: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """Environment overrides: secrets and server URLs never need to be in the file."""
    overrides = {
        "SYNDICATE_DATABASE_URL": ("state", "database"),
        "SYNDICATE_SMTP_URL": ("smtp", "url"),
        "SYNDICATE_SMTP_PASSWORD": ("smtp", "password"),
        "SYNDICATE_SECRET_KEY": ("web", "secret_key"),
        "SYNDICATE_POSTMARK_PASSWORD": ("bounces", "postmark_password"),
        "SYNDICATE_MAILGUN_SIGNING_KEY": ("bounces", "mailgun_signing_key"),
        "SYNDICATE_IMAP_PASSWORD": ("bounces", "imap_password"),
    }
    for var, (section, key) in overrides.items():
        if env.get(var):
            data = _merge(data, {section: {key: env[var]}})
    return data


_RENAMED = {
    ("languages", "feed_title"): "title",
    ("languages", "feed_subtitle"): "description",
}
"""Keys an earlier release read, by (section, key): the key that says the same now."""


def _unknown(loc: tuple[int | str, ...]) -> str:
    """The message for a key the config does not know: a hint where it was renamed."""
    renamed = _RENAMED.get((str(loc[0]), str(loc[-1]))) if loc else None
    if renamed is None:
        return "unknown key"
    return f"unknown key (renamed: {_key((*loc[:-1], renamed))})"


def _key(loc: tuple[int | str, ...]) -> str:
    """The TOML key a problem is under (pydantic marks a table's key itself as ``[key]``)."""
    return ".".join(str(part) for part in loc if part != "[key]") or "(top level)"


def parse_config(
    data: Mapping[str, Any], *, root: Path, source: str, env: Mapping[str, str] | None = None
) -> Config:
    """Validate an already-parsed TOML document (plus environment overrides) into a Config."""
    raw = _from_env(dict(data), os.environ if env is None else env)
    languages = raw.get("languages", {})
    if not isinstance(languages, Mapping):
        raise ConfigError(source, ["languages: must be a table of [languages.<code>] blocks"])
    raw["languages"] = _merge(builtin_profiles(), languages)
    raw["root"] = root
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            conflicts = err.get("ctx", {}).get("error")
            if isinstance(conflicts, Conflicts):  # each line names its own keys
                problems.extend(conflicts.lines)
                continue
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = _unknown(err["loc"])
            problems.append(f"{_key(err['loc'])}: {message}")
        raise ConfigError(source, problems) from None


def load_config(path: Path | str | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read the config file: ``path``, else $SYNDICATE_CONFIG, else ./config.toml if present.

    With no file at all the embedded defaults apply, so a fresh clone runs as it is.
    """
    env = os.environ if env is None else env
    explicit = path if path is not None else env.get(ENV_CONFIG)
    file = Path(explicit) if explicit else Path(DEFAULT_CONFIG)
    if not file.is_file():
        if explicit:
            raise ConfigError(str(file), ["file not found (run without --config for the defaults)"])
        return parse_config({}, root=Path.cwd(), source="(defaults)", env=env)
    try:
        data = tomllib.loads(file.read_text("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(
            str(file), [f"not UTF-8 text ({exc.reason} at byte {exc.start})"]
        ) from None
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"\s*\(at line (\d+), column (\d+)\)$", str(exc))
        message = str(exc)[: found.start()] if found else str(exc)
        where = f"line {found[1]}, column {found[2]}" if found else "syntax"
        raise ConfigError(str(file), [f"{where}: {message}"]) from None
    return parse_config(data, root=file.resolve().parent, source=str(file), env=env)
