"""The message check: a sample digest per language from the bundled articles, composed and
signed as a send does it, read back as a receiver: headers, text part, size, DKIM verifying
against a real DNS server, and SpamAssassin (Debian's package, local tests only)."""

from __future__ import annotations

from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path

import pytest

from syndicate.config import parse_config
from syndicate.doctor.message import (
    check_messages,
    dkim_problem,
    message_problems,
    parse_spam_report,
    sample_message,
    spamassassin,
)
from syndicate.doctor.records import dkim_record, txt_record
from syndicate.doctor.resolver import Lookups
from syndicate.reader import read_articles
from syndicate.sending.messages import dkim_signer

from .conftest import ARTICLES, missing_real_part
from .test_doctor_dns import key_pem

NOW = datetime(2025, 12, 15, 8, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def key():
    return key_pem(2048)


def site(root: Path, pem: bytes | None, base_url: str = "https://news.example.org"):
    email: dict[str, object] = {"sender": "News <digest@example.org>"}
    if pem is not None:
        (root / "dkim.pem").write_bytes(pem)
        email.update(dkim_selector="news", dkim_key_file="dkim.pem")
    data = {"site": {"base_url": base_url}, "email": email}
    return parse_config(data, root=root, source="(test)", env={})


@pytest.fixture(scope="module")
def articles():
    config = parse_config({}, root=ARTICLES.parent, source="(test)", env={})
    return read_articles(ARTICLES, config.profiles)


def no_spamassassin(message: bytes) -> None:
    return None


def test_every_language_passes_with_its_key_published(tmp_path, dns_server, key, articles):
    zone, address = dns_server
    zone.publish(txt_record("news._domainkey.example.org", dkim_record(key[1])))
    config = site(tmp_path, key[0])
    checks = check_messages(config, articles, Lookups(address), NOW, spam=no_spamassassin)
    assert [c.detail[:4] for c in checks] == ["[en]", "[nl]", "[de]"]
    assert all(c.severity == "ok" for c in checks), checks
    assert all("DKIM verifies" in c.detail for c in checks)


def test_a_key_that_is_not_published_fails_dkim(tmp_path, dns_server, key, articles):
    zone, address = dns_server
    zone.publish(txt_record("news._domainkey.example.org", dkim_record(key_pem(2048)[1])))
    config = site(tmp_path, key[0])
    checks = check_messages(config, articles, Lookups(address), NOW, spam=no_spamassassin)
    assert all(not c.ok and "DKIM signature does not verify" in c.detail for c in checks)
    assert all("publish the key" in c.fix for c in checks)


def test_an_http_base_url_has_no_one_click_link(tmp_path, dns_server, articles):
    _, address = dns_server
    config = site(tmp_path, None, base_url="http://news.example.org")
    checks = check_messages(config, articles, Lookups(address), NOW, spam=no_spamassassin)
    assert all(not c.ok and "no https:// link" in c.detail for c in checks)
    assert all("site.base_url" in c.fix for c in checks)


def test_a_message_missing_its_list_headers_text_part_and_over_the_clip_is_named():
    message = EmailMessage()
    message["From"] = "digest@example.org"
    message.set_content("<p>" + "x" * 110 * 1024 + "</p>", subtype="html")
    problems = message_problems(message.as_bytes())
    assert [p.split(" ")[0] for p in problems] == ["HTML", "List-Unsubscribe", "no", "no", "no"]
    assert "clips it at 102 KB" in problems[0]


def test_spamassassins_report_is_read():
    output = (
        "X-Spam-Status: No, score=0.7 required=5.0 tests=HTML_FONT_LOW_CONTRAST,\n"
        "\tHTML_MESSAGE autolearn=no\n\nbody\n"
        "Content analysis details:   (0.7 points, 5.0 required)\n\n"
        " pts rule name              description\n"
        "---- ---------------------- ----------------------------------\n"
        " 0.7 HTML_FONT_LOW_CONTRAST BODY: HTML font color similar or identical\n"
        "                            to background\n"
        " 0.0 HTML_MESSAGE           BODY: HTML included in message\n"
    )
    report = parse_spam_report(output)
    assert report.score == 0.7
    assert report.rules == {"HTML_FONT_LOW_CONTRAST": 0.7, "HTML_MESSAGE": 0.0}


def test_a_sample_digest_scores_low_with_spamassassin(tmp_path, key, articles):
    config = site(tmp_path, key[0])
    signer = dkim_signer(config)
    reports = {}
    for lang in config.site.languages:
        message = sample_message(config, articles, lang, NOW, signer)
        assert message is not None
        report = spamassassin(message)
        if report is None:
            missing_real_part("spamassassin is not installed (Debian's spamassassin)")
        reports[lang] = report
    for lang, report in reports.items():
        assert report.score <= 1.0, (lang, report)
        assert all(points <= 0.5 for points in report.rules.values()), (lang, report)


def test_a_signature_that_leaves_out_the_unsubscribe_headers_is_named(
    tmp_path, dns_server, key, articles
):
    import dkim

    zone, address = dns_server
    zone.publish(txt_record("news._domainkey.example.org", dkim_record(key[1])))
    config = site(tmp_path, None)
    message = sample_message(config, articles, "en", NOW, None)
    assert message is not None
    signature = dkim.sign(
        message, b"news", b"example.org", key[0], include_headers=[b"from", b"subject"]
    )
    problem = dkim_problem(signature + message, Lookups(address))
    assert problem == "the DKIM signature leaves out list-unsubscribe, list-unsubscribe-post"


def test_online_asks_whether_site_base_url_answers(tmp_path, store, article_set, clock, articles):
    from syndicate.web.app import create_app

    from .websites import SECRET, base_url_of, listening_socket, running

    listener = listening_socket()
    base_url = base_url_of(listener)
    served = parse_config({"site": {"base_url": base_url}}, root=tmp_path, source="(t)", env={})
    app = create_app(
        served, store=store, send_message=print, articles=lambda: article_set, secret=SECRET,
        now=clock,
    )  # fmt: skip

    def asked(url: str) -> str:
        config = site(tmp_path, None, base_url=url)
        [en, *_] = check_messages(
            config, articles, Lookups("127.0.0.1:9"), NOW, spam=no_spamassassin, online=True
        )
        return en.detail

    with running(app, listener):
        assert "site.base_url" not in asked(base_url + "/")
        assert f"site.base_url {base_url}/nowhere answers 404" in asked(base_url + "/nowhere/")
    assert f"site.base_url {base_url} cannot be reached" in asked(base_url + "/")


def test_a_spamassassin_that_gives_no_verdict_is_an_error_not_a_pass(tmp_path, monkeypatch):
    from syndicate.errors import SyndicateError

    (tmp_path / "spamassassin").symlink_to("/bin/false")  # runs, says nothing, exits 1
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SyndicateError, match="gave no verdict"):
        spamassassin(b"Subject: x\r\n\r\nbody\r\n")
