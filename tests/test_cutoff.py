"""A relay that cuts connections: inside the data, the message is retried until every reader
has it once; after its end (the final dot read), it is uncertain and never sent again.

Through a server with PIPELINING and one without, on SQLite and PostgreSQL, bodies of 1 KB to
150 KB. Which messages are cut is fixed (every tenth the server takes), not drawn.
"""

from __future__ import annotations

from collections import Counter
from email import policy
from email.message import EmailMessage

import pytest

from syndicate.sending.loop import deliver
from syndicate.sending.transports import LostInFlight, SmtpTransport, TemporaryFailure
from syndicate.state import Claim, Issue
from tests.sending import NOW, SENDER, add_readers, everyone, mailer, make_issue, options

READERS = 300
SIZES = (1_000, 5_000, 20_000, 60_000, 150_000)
"""Body sizes, by reader number in turn."""
RCPT = "reader0@example.com"


def sized(issue: Issue, claim: Claim) -> bytes:
    """A message with a body of 1 KB to 150 KB by reader, in lines ended by CRLF as on the
    wire (so that what the server reads is what a relay would)."""
    n = int(claim.email.removeprefix("reader").partition("@")[0])
    message = EmailMessage()
    message["From"] = SENDER
    message["To"] = claim.email
    message["Subject"] = issue.subject
    message["Message-ID"] = claim.message_id
    lines = SIZES[n % len(SIZES)] // 73
    message.set_content("".join(f"{n:05} {i:05} {'x' * 60}\n" for i in range(lines)))
    return message.as_bytes(policy=policy.SMTP)


MESSAGE = (
    f"From: {SENDER}\r\nTo: {RCPT}\r\nSubject: cut\r\nMessage-ID: <1.1@news.example.org>\r\n"
    "\r\nA message that fits the server's receive buffer.\r\n"
).encode()


def send_all(store, port: int, runs: int = 3) -> list:
    """Up to ``runs`` sends, as many as there are deliveries pending; their counts."""
    done = []
    while len(done) < runs and (not done or store.ledger.deliveries("pending")):
        done.append(deliver(store, mailer(port), sized, options(workers=3), NOW))
    return done


def test_messages_cut_inside_the_data_are_retried_until_everyone_has_one(
    store, any_smtp_server
) -> None:
    """Every tenth message's connection is cut three lines into its data: the relay never
    reads the final dot. None is uncertain; within three runs every reader has one."""
    inbox, port = any_smtp_server
    inbox.cut_every, inbox.cut_with = 10, "CUT 3"
    make_issue(store, add_readers(store, READERS))
    runs = send_all(store, port)
    assert [(c.uncertain, c.failed) for c in runs] == [(0, 0)] * len(runs), runs[0].failures
    assert inbox.counts() == everyone(READERS)
    assert len(store.ledger.deliveries("sent")) == READERS
    assert len(inbox.cut_off) == inbox.data_taken // 10 >= READERS // 10
    attempts = {d.email: d.attempts for d in store.ledger.deliveries()}
    assert all(attempts[email] >= 2 for email in inbox.cut_off)  # cut, then sent again


def test_messages_cut_after_their_end_are_uncertain_and_never_sent_twice(
    store, any_smtp_server
) -> None:
    """Every tenth message's connection is cut once the relay has read its final dot (and
    kept it), without a reply: those are uncertain, and no later run sends them again."""
    inbox, port = any_smtp_server
    inbox.cut_every, inbox.cut_with = 10, "AFTER END"
    make_issue(store, add_readers(store, READERS))
    runs = send_all(store, port)
    cut = set(inbox.cut_off)
    assert len(cut) == len(inbox.cut_off) == READERS // 10
    assert sum(c.uncertain for c in runs) == len(cut)
    uncertain = store.ledger.deliveries("uncertain")
    assert {d.email for d in uncertain} == cut
    assert all("after the end of data" in d.reply for d in uncertain)
    assert inbox.counts() == everyone(READERS)  # nobody twice, and the cut ones were kept
    assert inbox.data_taken == READERS  # none of them sent again
    for _ in range(2):
        assert deliver(store, mailer(port), sized, options(workers=3), NOW).sent == 0
    assert inbox.data_taken == READERS


def test_a_server_that_closes_with_the_end_of_data_unread_is_retried(any_smtp_server) -> None:
    """The final dot reached the server, which hung up without reading it: its kernel resets
    the connection, and that says the message was not accepted."""
    inbox, port = any_smtp_server
    inbox.script[("body", RCPT)] = ["CUT AT END"]
    transport = mailer(port).open()
    try:
        with pytest.raises(TemporaryFailure, match="reset by the server, which never read"):
            transport.send(SENDER, RCPT, MESSAGE)
    finally:
        transport.close()
    assert inbox.received == [] and inbox.cut_off == [RCPT]


def test_a_close_just_after_the_look_before_the_dot_is_retried(
    any_smtp_server, monkeypatch
) -> None:
    """The server read the body and hung up (a FIN, nothing unread) just after the sender
    looked whether it still could write the dot: the dot goes out, to a closed socket. The
    server's FIN did not acknowledge it, so it was never read."""
    inbox, port = any_smtp_server
    inbox.script[("body", RCPT)] = [f"FIN {len(MESSAGE)}"]
    monkeypatch.setattr(SmtpTransport, "_check_open", lambda self: None)  # the look, too soon

    def closed() -> None:
        assert inbox.closed.wait(10), "the server did not close"

    transport = mailer(port).open()
    try:
        with pytest.raises(TemporaryFailure, match="closed by the server before the end of data"):
            transport.send(SENDER, RCPT, MESSAGE, closed)
    finally:
        transport.close()
    assert inbox.received == [] and inbox.cut_off == [RCPT]


def test_a_server_that_read_the_end_of_data_then_closed_leaves_it_uncertain(
    any_smtp_server,
) -> None:
    """The server read the final dot (and kept the message), then hung up without a reply:
    its FIN acknowledged the dot, so the message may have been accepted."""
    inbox, port = any_smtp_server
    inbox.script[("body", RCPT)] = ["AFTER END"]
    transport = mailer(port).open()
    try:
        with pytest.raises(LostInFlight, match="after the end of data: closed by the server"):
            transport.send(SENDER, RCPT, MESSAGE)
    finally:
        transport.close()
    assert inbox.counts() == Counter({RCPT: 1})
