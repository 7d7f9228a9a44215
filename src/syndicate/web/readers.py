"""Subscribing, and the links in readers' mail: confirm, unsubscribe, preferences.

Each handler is a sync function of the request and its form, run in Starlette's thread pool
(``form_endpoint`` reads the form on the event loop first): the store, the templates and the
mail transport block. Reader data never reaches the log: lines name subscriber ids, not
addresses.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from email.message import EmailMessage
from email.utils import parseaddr
from functools import cache, wraps
from zoneinfo import available_timezones

from email_validator import EmailNotValidError, validate_email
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ..compose import compose_note
from ..render import render_note
from ..state import Subscriber
from ..subscribers import mask_email
from ..tokens import CONFIRM, PREFERENCES, UNSUBSCRIBE, read_token, reader_link
from .context import WebContext, context_of
from .pages import CONFIRM_DAYS, index_page, negotiate, notice, page
from .security import csrf_ok, same_origin

log = logging.getLogger("syndicate.web")

CONFIRM_MAX_AGE = timedelta(days=CONFIRM_DAYS)
"""How long a confirmation link works. Unsubscribe and preference links do not expire."""

FormHandler = Callable[[Request, FormData | None], Response]


def form_endpoint(handler: FormHandler) -> Callable[[Request], Awaitable[Response]]:
    """The ASGI endpoint of ``handler``: a POST's form read, then ``handler`` in the thread
    pool (None for the form of a GET)."""

    @wraps(handler)
    async def endpoint(request: Request) -> Response:
        form = await request.form() if request.method == "POST" else None
        return await run_in_threadpool(handler, request, form)

    return endpoint


def reader_note(
    ctx: WebContext, lang: str, to: str, url: str, *, known: bool, now: datetime
) -> EmailMessage:
    """The double opt-in mail, or (``known``) the note to an address that is already active."""
    config = ctx.config
    rendered = render_note(
        config, lang, "subscribed" if known else "confirm", link=url, days=CONFIRM_DAYS
    )
    domain = parseaddr(config.email.sender)[1].rpartition("@")[2] or "localhost"
    return compose_note(
        rendered,
        to=to,
        sender=config.email.sender,
        message_id=f"<{secrets.token_hex(16)}@{domain}>",
        date=now,
        reply_to=config.email.reply_to,
    )


def _sent(ctx: WebContext, message: EmailMessage) -> bool:
    try:
        ctx.send_message(message)
    except Exception as exc:  # the transport's failure must not become a 500 page
        log.error("could not send a confirmation mail: %s", type(exc).__name__)
        return False
    return True


def _welcome(ctx: WebContext, reader: Subscriber) -> None:
    """The welcome mail of a reader who has just confirmed; its failure is logged, and the
    confirmation stands."""
    from ..sending.welcome import welcome_message

    try:
        message = welcome_message(
            ctx.config, ctx.store, ctx.articles(), reader, ctx.now(), ctx.secret
        )
        if message is not None:
            ctx.send_message(message)
            log.info("reader %d welcomed", reader.id)
    except Exception as exc:  # neither a template nor the transport may undo the confirmation
        log.error("could not send a welcome mail: %s", type(exc).__name__)


def reader_lang(ctx: WebContext, reader: Subscriber) -> str:
    return reader.lang if reader.lang in ctx.config.languages else ctx.languages[0]


def subscribe(request: Request, form: FormData | None) -> Response:
    """POST /subscribe: limits and CSRF first, then the form, then one mail."""
    ctx, moment = context_of(request), context_of(request).now()
    form = form if form is not None else FormData()
    chosen = form.get("lang")
    lang = (
        chosen if isinstance(chosen, str) and chosen in ctx.languages else negotiate(ctx, request)
    )
    client = request.client.host if request.client else "-"
    if not ctx.subscribe_limit.allow(client, moment):
        log.warning("subscribe rate limit reached")
        limited = notice(request, lang, "too_many", 429)
        limited.headers["Retry-After"] = "60"
        return limited
    # The form is on the public pages, the same for every visitor: no token of theirs.
    if not (same_origin(ctx.config.site.base_url, request) or csrf_ok(ctx.secret, request, form)):
        return notice(request, lang, "form_expired", 400)
    raw = str(form.get("email", "")).strip()
    audiences = [a for a in ctx.config.audiences if a in form.getlist("audiences")]
    try:
        email = validate_email(raw, check_deliverability=False).normalized
    except EmailNotValidError:
        return index_page(request, lang, 400, email=raw, audiences=audiences, error="invalid_email")
    if not audiences:
        return index_page(request, lang, 400, email=raw, error="no_audience")
    if not ctx.mail_limit.allow(email.casefold(), moment):
        # The page a sent mail gets: the visitor learns nothing about the address.
        log.warning("subscribe mail limit reached for one address")
        return notice(request, lang, "check_inbox")
    if not _sent(ctx, _subscription_mail(ctx, email, lang, audiences, moment)):
        return notice(request, lang, "send_failed", 503)
    return notice(request, lang, "check_inbox")


def _subscription_mail(
    ctx: WebContext, email: str, lang: str, audiences: list[str], moment: datetime
) -> EmailMessage:
    """A new (or still pending) reader's confirmation mail; for an active one, a note to the
    owner instead, and nothing changed: the page after it is the same either way."""
    known = ctx.store.subscribers.subscriber(email)
    if known is not None and known.status == "active":
        url = reader_link(ctx.config, ctx.secret, PREFERENCES, known.id, issued=moment)
        return reader_note(ctx, reader_lang(ctx, known), email, url, known=True, now=moment)
    reader = ctx.store.subscribers.add_subscriber(
        email, lang, audiences, status="pending", consent_source=f"web form ({lang})", now=moment
    )
    log.info("reader %d pending confirmation", reader.id)
    url = reader_link(ctx.config, ctx.secret, CONFIRM, reader.id, issued=moment)
    return reader_note(ctx, lang, email, url, known=False, now=moment)


def reader_of(request: Request, purpose: str) -> Subscriber | None:
    """The reader a token link of ``purpose`` names, if the token is genuine and current."""
    ctx = context_of(request)
    max_age = CONFIRM_MAX_AGE if purpose == CONFIRM else None
    token = request.path_params["token"]
    found = read_token(ctx.secret, purpose, token, max_age, now=ctx.now())
    return None if found is None else ctx.store.subscribers.subscriber_by_id(found)


def invalid_link(request: Request) -> HTMLResponse:
    """One plain page for every bad token: forged, altered, expired, misused or stale."""
    lang = negotiate(context_of(request), request)
    return notice(request, lang, "invalid_link", 404, token_page=True)


def manage_link(ctx: WebContext, reader: Subscriber) -> str:
    return reader_link(ctx.config, ctx.secret, PREFERENCES, reader.id, issued=ctx.now())


def confirm(request: Request, form: FormData | None) -> Response:
    """GET shows a button (mail scanners open links on their own); the POST activates."""
    ctx, reader = context_of(request), reader_of(request, CONFIRM)
    if reader is None:
        return invalid_link(request)
    lang = reader_lang(ctx, reader)
    if form is None:
        address = mask_email(reader.email)
        return notice(request, lang, "confirm", token_page=True, address=address)
    if not csrf_ok(ctx.secret, request, form):
        return notice(request, lang, "form_expired", 400, token_page=True)
    if reader.status != "active":
        ctx.store.subscribers.set_status(reader.id, "active", ctx.now())
        log.info("reader %d confirmed", reader.id)
        if ctx.config.email.welcome:
            _welcome(ctx, reader)
    return notice(request, lang, "confirmed", token_page=True, manage=manage_link(ctx, reader))


def unsubscribe(request: Request, form: FormData | None) -> Response:
    """GET asks; the POST unsubscribes, RFC 8058's one-click POST included."""
    ctx, reader = context_of(request), reader_of(request, UNSUBSCRIBE)
    if reader is None:
        return invalid_link(request)
    lang = reader_lang(ctx, reader)
    address = mask_email(reader.email)
    if form is None:
        return notice(request, lang, "unsubscribe", token_page=True, address=address)
    # RFC 8058: the mail client's one-click POST carries no cookie; the token is the proof.
    one_click = form.get("List-Unsubscribe") == "One-Click"
    if not one_click and not csrf_ok(ctx.secret, request, form):
        return notice(request, lang, "form_expired", 400, token_page=True)
    if reader.status != "unsubscribed":
        ctx.store.subscribers.set_status(reader.id, "unsubscribed", ctx.now())
        log.info("reader %d unsubscribed%s", reader.id, " (one-click)" if one_click else "")
    manage = manage_link(ctx, reader)
    return notice(request, lang, "unsubscribed", token_page=True, manage=manage, address=address)


def preferences(request: Request, form: FormData | None) -> Response:
    """GET shows the reader's language and audiences; the POST changes them."""
    ctx, reader = context_of(request), reader_of(request, PREFERENCES)
    if reader is None:
        return invalid_link(request)
    saved = False
    if form is not None:
        if not csrf_ok(ctx.secret, request, form):
            return notice(request, reader_lang(ctx, reader), "form_expired", 400, token_page=True)
        changed = _changed_preferences(ctx, reader, form)
        reader, saved = changed or reader, changed is not None
    unsubscribe_url = reader_link(ctx.config, ctx.secret, UNSUBSCRIBE, reader.id, issued=ctx.now())
    return page(
        request,
        "preferences.html",
        reader_lang(ctx, reader),
        token_page=True,
        reader=reader,
        address=mask_email(reader.email),
        saved=saved,
        zones=_zone_names(ctx.config.site.timezone),
        reader_zone=reader.timezone or ctx.config.site.timezone,
        unsubscribe=unsubscribe_url,
    )


@cache
def _zone_names(site_zone: str) -> tuple[str, ...]:
    """The time zones a reader may pick, sorted (read from the system once)."""
    return tuple(sorted(available_timezones() | {site_zone}))


def _changed_preferences(ctx: WebContext, reader: Subscriber, form: FormData) -> Subscriber | None:
    """The reader with the form's language, audiences and time zone saved; None when the form
    names no published language or no audience (nothing is saved then)."""
    chosen = form.get("lang")
    audiences = [a for a in ctx.config.audiences if a in form.getlist("audiences")]
    if not (isinstance(chosen, str) and chosen in ctx.languages and audiences):
        return None
    site_zone = ctx.config.site.timezone
    zone = form.get("timezone")
    if not (isinstance(zone, str) and zone in _zone_names(site_zone)):
        zone = None  # a forged one changes nothing
    changed = ctx.store.subscribers.add_subscriber(
        reader.email,
        chosen,
        audiences,
        status=reader.status,
        consent_source=reader.consent_source,
        now=ctx.now(),
        timezone=None if zone == (reader.timezone or site_zone) else zone,
    )
    log.info("reader %d changed preferences", changed.id)
    return changed
