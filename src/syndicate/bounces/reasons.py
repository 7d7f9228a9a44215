"""Why a delivery failed, in the taxonomy bounce specialists use (sisimai's reasons), from the
remote server's words and the DSN status; whether that makes it a hard bounce (no I/O).

A hard bounce is one that will fail again however often it is sent: the address or its domain
does not exist, has moved, or accepts no mail. Everything else (a full mailbox, a filter, a
block list, a policy, a timeout, ...) is soft: it may pass another day.
"""

from __future__ import annotations

import re

HARD_REASONS = frozenset({"userunknown", "hostunknown", "hasmoved", "notaccept"})
"""The reasons that make a permanent failure a hard bounce."""

UNDEFINED = "undefined"
_LONGEST = 6000
"""Characters of a report read for its reason: what follows is boilerplate or quoted mail."""

# The remote server's words (lower case), most specific first: the first that matches decides.
# (A status of 5.1.1 beside "mailbox full" is a full mailbox: servers pick codes loosely.)
_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "networkerror",
        (
            r"not found, try again",  # Postfix: the name server did not answer
            r"malformed or unexpected name server reply",
        ),
    ),
    (
        "hasmoved",
        (
            r"\bhas (?:been )?moved\b",
            r"address (?:has )?changed",
            r"moved permanently",
        ),
    ),
    (
        "rejected",
        (
            r"sender (?:address )?(?:rejected|denied|refused|invalid|unknown|verify)",
            r"domain of sender",
            r"envelope sender",
            r"bad sender",
            r"invalid sender",
            r"sender domain",
            r"provide a valid from",
        ),
    ),
    (
        "mailboxfull",
        (
            r"mail ?box (?:is )?(?:full|over)",
            r"over ?quota",
            r"quota (?:exceeded|full)",
            r"exceeded (?:its |the |his |her )?(?:storage|quota|disk)",
            r"full mailbox",
            r"insufficient (?:disk )?(?:space|storage)",
            r"not enough (?:storage|space)",
            r"(?:user|account|inbox|storage) is (?:full|over)",
            r"mailbox size limit",
            r"disk quota",
            r"too much mail",
            r"\bfull\b.{0,20}\bmailbox",
        ),
    ),
    (
        "mesgtoobig",
        (
            r"message (?:is )?too (?:big|large)",
            r"message size (?:exceeds|too)",
            r"(?:exceeds|over) (?:the )?(?:maximum )?(?:message |allowed )?size",
            r"size limit exceeded",
            r"message length exceeds",
        ),
    ),
    (
        "exceedlimit",
        (
            r"exceeds? (?:the )?(?:local )?limit",
            r"limit exceeded",
        ),
    ),
    (
        "suspend",
        (
            r"(?:account|mail ?box|user|address|recipient)\b.{0,40}?(?: has been| is| was)? "
            r"(?:disabled|suspended|inactive|deactivated|frozen|closed|locked|expired|terminated)",
            r"(?:disabled|suspended|inactive|deactivated|closed) (?:account|mail ?box|user)",
            r"not active",
        ),
    ),
    (
        "notaccept",
        (
            r"(?:does not|doesn't|do not|will not) accept (?:any )?(?:e-?)?mail",
            r"null mx",
            r"accepts no mail",
            r"no mail (?:is )?accepted",
            r"system not accepting network messages",
        ),
    ),
    (
        "hostunknown",
        (
            r"host (?:or domain name )?not found",
            r"unknown host",
            r"host unknown",
            r"domain (?:name )?(?:not found|does not exist|unknown)",
            r"unknown domain",
            r"no such domain",
            r"unrouteable (?:mail )?domain",
            r"nxdomain",
            r"name or service not known",
            r"no (?:mx|dns) (?:or a )?record",
            r"hostname lookup failed",
            r"domain (?:is )?(?:invalid|not valid)",
            r"invalid domain",
            r"host \S+ not found",
            r"domain (?:is )?not reachable",
            r"unrouteable address",
            r"(?<![@\w.-])[a-z0-9-]+(?:\.[a-z0-9-]+)+ does not exist",
        ),
    ),
    (
        "mailererror",
        (
            r"mailer error",
            r"command (?:died|failed|output)",
            r"pipe to",
            r"exit (?:status|code)",
            r"procmail",
            r"local delivery failed",
            r"program .{0,40}failed",
            r"unknown mailer",
        ),
    ),
    (
        "userunknown",
        (
            r"user ?unknown",
            r"unknown (?:user|recipient|mailbox|local[- ]?part|address|alias)",
            r"no such (?:user|mailbox|recipient|address|account|person|local user)",
            r"(?:user|mailbox|recipient|address|account|alias)(?: name| \S+)? "
            r"(?:does not|doesn't|did not|not|no longer) exists?",
            r"does not exist",
            r"invalid (?:recipient|mailbox|address|user|e-?mail)",
            r"not a valid (?:mailbox|user|recipient|address)",
            r"mailbox (?:not found|unavailable|does not exist|not exist)",
            r"(?:user|recipient|address|account|mailbox) not found",
            r"addressee unknown",
            r"no mailbox here",
            r"not our customer",
            r"unknown or illegal",
            r"user not (?:listed|known)",
            r"recipient (?:address )?rejected: (?:user unknown|unknown|undeliverable|invalid)",
            r"no valid recipients",
            r"non-?existent",
            r"account is unavailable",
            r"bad (?:destination|recipient)",
            r"not listed in (?:domino|the)",
            r"(?:user|recipient) (?:is )?not (?:here|local|on this)",
            r"recipient address rejected(?:\.|: access denied)",
            r"invalid final delivery",
            r"^address rejected",
            r"this user doesn't have",
            r"no such user",
            r"wasn't found",
            r"inactive user",
            r"unknown account",
        ),
    ),
    (
        "norelaying",
        (
            r"relay(?:ing)? (?:access )?(?:denied|not (?:permitted|allowed)|prohibited)",
            r"not permitted to relay",
            r"(?:unable|not allowed|cannot) (?:to )?relay",
            r"we do not relay",
            r"no relaying",
        ),
    ),
    (
        "requireptr",
        (
            r"reverse (?:dns|lookup|hostname)",
            r"ptr record",
            r"\bno ptr\b",
            r"\brdns\b",
            r"cannot find your (?:reverse )?hostname",
            r"(?:no|missing) reverse",
            r"does not resolve",
            r"dns ptr",
        ),
    ),
    (
        "authfailure",
        (
            r"\bspf\b",
            r"\bdmarc\b",
            r"\bdkim\b",
            r"unauthenticated (?:e-?)?mail",
            r"sender policy framework",
            r"not (?:properly )?authenticated",
            r"authentication (?:check )?failure",
        ),
    ),
    (
        "failedstarttls",
        (
            r"starttls",
            r"\btls\b.{0,30}(?:fail|required|error)",
        ),
    ),
    (
        "securityerror",
        (
            r"authentication (?:required|failed)",
            r"must (?:be )?authenticate",
            r"encryption required",
            r"certificate",
            r"smtp auth",
            r"not authorized to send",
            r"security (?:policy|error)",
        ),
    ),
    (
        "toomanyconn",
        (
            r"too many (?:connections|concurrent|simultaneous|sessions|hosts)",
            r"connection (?:count|limit)",
        ),
    ),
    (
        "speeding",
        (
            r"rate limit",
            r"too many (?:messages|mails|emails|recipients)",
            r"(?:sending|message) rate",
            r"throttl",
            r"too fast",
            r"exceeded .{0,30}rate",
        ),
    ),
    (
        "badreputation",
        (r"reputation",),
    ),
    (
        "virusdetected",
        (
            r"virus",
            r"malware",
            r"infected",
            r"\bworm\b",
            r"dangerous (?:content|attachment)",
        ),
    ),
    (
        "spamdetected",
        (
            r"\bspam",
            r"junk ?mail",
            r"unsolicited",
            r"bulk (?:e-?)?mail",
            r"looks like",
            r"detected as",
            r"scored as",
            r"content (?:was )?rejected",
        ),
    ),
    (
        "blocked",
        (
            r"block ?list",
            r"blacklist",
            r"black list",
            r"\blisted (?:on|in|at|by)",
            r"spamhaus",
            r"spamcop",
            r"dnsbl",
            r"\brbl\b",
            r"\bip\b.{0,40}(?:blocked|rejected|banned|denied|not allowed)",
            r"(?:blocked|banned)",
            r"connection refused",
            r"access denied",
            r"client host rejected",
            r"refused to talk",
            r"not allowed to send",
        ),
    ),
    (
        "policyviolation",
        (
            r"polic(?:y|ies)",
            r"violat",
            r"prohibited",
            r"not allowed",
            r"not permitted",
            r"denied by",
        ),
    ),
    (
        "rejected",
        (
            r"mail from",
            r"return path",
            r"sender .{0,40}(?:not (?:allowed|accepted)|rejected)",
        ),
    ),
    (
        "filtered",
        (
            r"filter",
            r"refused by (?:the )?recipient",
            r"rejected by (?:the )?recipient",
            r"not (?:on|in) (?:the )?(?:allow|white)",
            r"not accepting",
            r"does not accept",
            r"recipient .{0,30}rejected",
            r"refused",
        ),
    ),
    (
        "syntaxerror",
        (
            r"syntax error",
            r"command (?:not recognized|unrecognized)",
            r"bad sequence",
            r"unrecognized command",
        ),
    ),
    (
        "notcompliantrfc",
        (
            r"rfc ?5322",
            r"rfc ?2822",
            r"rfc ?822",
            r"(?:multiple|duplicate) (?:from|to|subject|date|message-id)",
            r"not (?:rfc|standard)[- ]?compliant",
            r"header (?:is )?(?:invalid|malformed|too long)",
        ),
    ),
    (
        "contenterror",
        (
            r"content error",
            r"malformed",
            r"invalid (?:content|message|character)",
            r"8-?bit",
        ),
    ),
    (
        "systemfull",
        (
            r"system (?:is )?full",
            r"insufficient system storage",
            r"out of disk",
            r"disk (?:is )?full",
        ),
    ),
    (
        "expired",
        (
            r"retry (?:time(?:out)?|period) (?:exceeded|expired)",
            r"delivery (?:time|period) (?:expired|exceeded)",
            r"could not be delivered (?:for|within) \d+",
            r"cannot send message for \d+",
            r"message (?:has )?expired",
            r"too long in (?:the )?queue",
            r"time ?out exceeded",
            r"giving up",
            r"queue time",
            r"was not delivered within",
            r"has not been delivered for",
            r"(?:no|without) success .{0,20}after",
            r"for more than \d+ (?:hours|days)",
            r"lifetime exceeded",
            r"(?:tried|trying) for \d+",
            r"delivery attempts? (?:will continue|expired)",
            r"retry limit",
        ),
    ),
    (
        "systemerror",
        (
            r"system error",
            r"internal (?:server )?error",
            r"server error",
            r"temporary (?:local )?(?:problem|failure)",
            r"local error",
            r"configuration error",
            r"mail loop",
            r"loops? back",
            r"too many hops",
            r"loop detected",
            r"routing loop",
            r"i/o error",
            r"service (?:not available|unavailable)",
            r"server busy",
            r"resources",
        ),
    ),
    (
        "networkerror",
        (
            r"connection (?:timed out|refused|reset|closed|lost|dropped)",
            r"timed out",
            r"could not connect",
            r"unable to connect",
            r"network (?:error|unreachable|is unreachable)",
            r"no route to host",
            r"host unreachable",
            r"dns (?:error|failure|lookup|problem)",
            r"lost connection",
            r"broken pipe",
            r"deferred",
            r"temporary dns",
            r"while talking to",
            r"no (?:answer|response) from",
            r"unreachable",
        ),
    ),
)
# Matched against lower-cased text: three times faster than re.IGNORECASE.
_PATTERNS = tuple((reason, re.compile("|".join(words), re.S)) for reason, words in _WORDS)

# The status's subject and detail where they say one thing only (RFC 3463, RFC 7505, M3AAWG).
_STATUSES = {
    "1.1": "userunknown",
    "1.0": "userunknown",
    "1.2": "hostunknown",
    "1.3": "userunknown",
    "1.4": "userunknown",
    "1.6": "hasmoved",
    "1.7": "rejected",
    "1.8": "rejected",
    "1.10": "notaccept",
    "3.2": "notaccept",
    "2.0": "filtered",
    "2.1": "suspend",
    "2.2": "mailboxfull",
    "2.3": "exceedlimit",
    "2.4": "systemerror",
    "3.1": "systemfull",
    "3.4": "mesgtoobig",
    "4.1": "networkerror",
    "4.2": "networkerror",
    "4.3": "systemerror",
    "4.4": "hostunknown",
    "4.6": "networkerror",
    "4.7": "expired",
    "5.0": "syntaxerror",
    "5.1": "syntaxerror",
    "5.2": "syntaxerror",
    "6.0": "contenterror",
    "7.0": "securityerror",
    "7.1": "policyviolation",
    "7.7": "contenterror",
    "7.23": "authfailure",
    "7.24": "authfailure",
    "7.25": "requireptr",
    "7.26": "authfailure",
    "7.27": "notaccept",
}

# What a reason's status is when the report gives none.
_INFERRED = {
    "userunknown": "5.1.1",
    "hostunknown": "5.1.2",
    "hasmoved": "5.1.6",
    "notaccept": "5.1.10",
    "mailboxfull": "5.2.2",
    "mesgtoobig": "5.3.4",
    "exceedlimit": "5.2.3",
    "suspend": "5.2.1",
    "expired": "4.4.7",
    "networkerror": "4.4.1",
    "toomanyconn": "4.3.2",
    "speeding": "4.7.0",
    "systemfull": "4.3.1",
    "norelaying": "5.7.1",
    "requireptr": "5.7.25",
    "authfailure": "5.7.26",
    "securityerror": "5.7.0",
    "blocked": "5.7.1",
    "spamdetected": "5.7.1",
    "virusdetected": "5.7.1",
    "policyviolation": "5.7.1",
    "rejected": "5.1.8",
    "syntaxerror": "5.5.2",
    "contenterror": "5.6.0",
    "notcompliantrfc": "5.6.0",
}


# The SMTP command the remote server refused, where the report says (Exim, Postfix, sendmail,
# qmail, sendmail V5, transcripts): the last one named before the refusal. A reply that opens
# with the recipient's address and a colon answers the RCPT TO that named it (``550 <a@b>: ...``,
# Postfix's form).
_COMMAND = re.compile(
    r"(?P<HELO>(?:after|in reply to|>>>) (?:helo|ehlo)\b|my name was rejected"
    r"|remote protocol error)"
    r"|(?P<MAIL>(?:after|in reply to|>>>) mail from)"
    r"|(?P<RCPT>(?:after|in reply to|>>>|our|smtp:)\s*rcpt\b|\brcpt to: ?<|\brcpt_to\b"
    r"|rcpt (?:to )?(?:command|response)|does not like recipient|\b[45]\d\d:? <[^<>\s]+@[^<>\s]+>:)"
    r"|(?P<DATA>(?:after|in reply to) (?:the )?(?:end of )?data\b|final data\b"
    r"|smtp command data\b|>>> data\b)",
    re.I,
)

# What a server says only after looking the address up in its own directory: the address is
# gone whatever the SMTP command (Domino, Notes, Exchange, Gmail, Yahoo, Verizon, mail.local).
_LOOKED_UP = re.compile(
    r"not listed in|invalid final delivery|no valid recipients|doesn't have an? \S+ account"
    r"|invalid recipient|mailbox unavailable|unknown user:|unknown recipient"
    r"|address (?:couldn't|could not) be found|address not found"
)


def command_of(text: str) -> str:
    """``HELO``, ``MAIL``, ``RCPT`` or ``DATA``: the SMTP command ``text`` says was refused,
    or empty."""
    found = [m.lastgroup for m in _COMMAND.finditer(text, 0, _LONGEST)]
    return found[-1] or "" if found else ""


def reason_of(status: str, words: str, context: str = "", command: str = "") -> str:
    """The reason for a failure with DSN ``status`` (may be empty), the server's ``words`` for
    it and the rest of the report's text (``context``, read when the words say nothing), and
    the SMTP ``command`` refused if known (else read from the words or the context)."""
    reason = _from_words(words) or _from_words(context) or _from_status(status)
    command = command or command_of(words) or command_of(context)
    if reason in HARD_REASONS and command == "HELO":
        return "blocked"  # our own host name was refused
    if reason in HARD_REASONS and command == "MAIL":
        return "rejected"  # the sender's address or domain was refused, not the reader's
    if reason == "userunknown":
        return _unknown_user(status, command, (words or context)[:_LONGEST].lower())
    return reason


def _unknown_user(status: str, command: str, said: str) -> str:
    """ "User unknown" is the address's own fault only when said of the address: in reply to
    RCPT TO, with an address status (X.1.X), or in the words of a directory lookup. A
    filtering gateway that took the message says it after the data, and servers that
    disable a mailbox say it with X.2.1: both soft."""
    subject = status[2:4]
    if subject == "1." or _LOOKED_UP.search(said):
        return "userunknown"
    if command == "DATA":
        return "filtered"  # the address was accepted; a filter refused the message
    if command == "RCPT":
        return "userunknown"
    if subject == "2.":
        return _from_status(status)  # a mailbox status: the mailbox is there
    return "filtered"


def _from_words(words: str) -> str:
    words = words[:_LONGEST].lower()
    for reason, pattern in _PATTERNS:
        if pattern.search(words):
            return reason
    return ""


def _from_status(status: str) -> str:
    _, _, detail = status.partition(".")
    return _STATUSES.get(detail, UNDEFINED)


def inferred_status(reason: str, temporary: bool) -> str:
    """A status for a report that gives none: the reason's detail, in the class the report
    implies (a returned message is a permanent failure unless it says otherwise)."""
    return ("4" if temporary else "5") + _INFERRED.get(reason, "5.0.0")[1:]


def is_hard(reason: str, status: str) -> bool:
    """A failure for a reason that will not go away: a 4.x.x "user unknown" too (a server that
    defers everything it refuses); a domain unknown or accepting no mail only when the failure
    was permanent."""
    if reason in ("notaccept", "hostunknown") and status.startswith("4"):
        return False  # a name server that did not answer may answer tomorrow
    return reason in HARD_REASONS


_ENHANCED = re.compile(r"^\s*([245]\.\d{1,3}\.\d{1,3})\b")


def reply_reason(reply: str) -> tuple[str, bool]:
    """A server's refusal of a recipient during the send (``550 5.1.1 <a@b>: user unknown``):
    its reason, and whether that makes it a hard bounce. A reply without an enhanced status
    is read as X.0.0 of its class; one whose words say nothing known is soft."""
    code, _, words = reply.partition(" ")
    enhanced = _ENHANCED.match(words)
    status = enhanced[1] if enhanced else f"{code[:1]}.0.0" if code[:1] in ("4", "5") else ""
    reason = reason_of(status, words, command="RCPT")
    return reason, is_hard(reason, status)
