"""Bounces and complaints that relay services post: Amazon SES (through SNS), Postmark, Mailgun
and SendGrid webhooks.

Each request is verified before anything is read from it (a bad or missing signature is 403
and changes nothing); each event is then matched and recorded as a bounce message is
(``bouncebox.record_relay_event``), so a retry or a replay of an event is recorded once.
A relay's route answers 404 while its secret is unset. Log lines name the relay and what was
done, never an address.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..bouncebox import record_relay_event
from ..bounces.relays import (
    PayloadError,
    RelayEvent,
    mailgun_events,
    mailgun_ok,
    parse_mailgun,
    postmark_events,
    postmark_ok,
    sendgrid_events,
    sendgrid_key,
    sendgrid_ok,
)
from ..bounces.sns import CONFIRMATION, NOTIFICATION, ses_events, sns_message, sns_ok
from .context import WebContext, context_of
from .sns import SnsUnreachable

log = logging.getLogger("syndicate.web")

SENDGRID_SIGNATURE = "X-Twilio-Email-Event-Webhook-Signature"
SENDGRID_TIMESTAMP = "X-Twilio-Email-Event-Webhook-Timestamp"

Verified = Callable[[WebContext, Request, bytes], list[RelayEvent] | None]
"""A relay's events in a request, or None when the request is not the relay's own; raises
404 while the relay's secret is unset, ``PayloadError`` for a body that is no payload."""


def _postmark(ctx: WebContext, request: Request, body: bytes) -> list[RelayEvent] | None:
    b = ctx.config.bounces
    if b.postmark_user is None or b.postmark_password is None:
        raise HTTPException(404)
    given = request.headers.get("authorization", "")
    if not postmark_ok(given, b.postmark_user, b.postmark_password.get_secret_value()):
        return None
    return postmark_events(body)


def _mailgun(ctx: WebContext, request: Request, body: bytes) -> list[RelayEvent] | None:
    key = ctx.config.bounces.mailgun_signing_key
    if key is None:
        raise HTTPException(404)
    try:
        payload = parse_mailgun(body)
    except PayloadError:
        return None  # its signature is inside it: unreadable is unsigned
    if not mailgun_ok(payload, key.get_secret_value(), ctx.now()):
        return None
    return mailgun_events(payload)


def _sendgrid(ctx: WebContext, request: Request, body: bytes) -> list[RelayEvent] | None:
    text = ctx.config.bounces.sendgrid_public_key
    if text is None:
        raise HTTPException(404)
    signature = request.headers.get(SENDGRID_SIGNATURE, "")
    timestamp = request.headers.get(SENDGRID_TIMESTAMP, "")
    if not sendgrid_ok(sendgrid_key(text), signature, timestamp, body):
        return None
    return sendgrid_events(body)


def _ses(ctx: WebContext, request: Request, body: bytes) -> list[RelayEvent] | None:
    """An SNS message of one of the site's topics, signed by SNS: a subscription confirmed
    (no events), a notification's events; the certificate is fetched from SNS's hosts."""
    topics = ctx.config.bounces.sns_topics
    if not topics:
        raise HTTPException(404)
    message = sns_message(body)
    if message.get("TopicArn") not in topics:
        return None
    try:
        certificate = ctx.sns.certificate(message.get("SigningCertURL", ""))
        if certificate is None or not sns_ok(message, certificate, topics):
            return None
        if message["Type"] == CONFIRMATION:
            if not ctx.sns.confirm(message.get("SubscribeURL", "")):
                return None
            log.info("SES bounce webhook: subscription to %s confirmed", message["TopicArn"])
    except SnsUnreachable as exc:
        log.warning("SES bounce webhook: %s", exc)
        raise HTTPException(503) from None  # SNS tries again
    return ses_events(message) if message["Type"] == NOTIFICATION else []


def _handle(
    relay: str, verified: Verified, ctx: WebContext, request: Request, body: bytes
) -> Response:
    try:
        events = verified(ctx, request, body)
    except PayloadError as exc:
        log.warning("%s bounce webhook: %s", relay, exc)
        return JSONResponse({"error": "not a payload of this relay"}, status_code=400)
    if events is None:
        log.warning("%s bounce webhook: refused an unverified request", relay)
        return JSONResponse({"error": "not verified"}, status_code=403)
    now = ctx.now()
    actions = []
    for event in events:
        outcome = record_relay_event(ctx.config, ctx.store, ctx.secret, event, now)
        log.info("%s bounce webhook: %s %s", relay, outcome.kind, outcome.action)
        actions.append(outcome.action)
    return JSONResponse({"actions": actions})


def hook(relay: str, verified: Verified) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint of one relay: the raw body read (signatures are over its bytes), then
    the rest in the thread pool (the store blocks)."""

    async def endpoint(request: Request) -> Response:
        body = await request.body()
        return await run_in_threadpool(_handle, relay, verified, context_of(request), request, body)

    return endpoint


HOOKS = {
    "ses": hook("SES", _ses),
    "postmark": hook("Postmark", _postmark),
    "mailgun": hook("Mailgun", _mailgun),
    "sendgrid": hook("SendGrid", _sendgrid),
}
"""Each relay's endpoint, by the last part of its path (routes.BOUNCE_HOOK)."""
