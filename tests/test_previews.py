"""Digests by hand: the `digest` command, every variant into outbox/preview, `check` on catalogs."""

from __future__ import annotations

import email
import email.policy
import json
import re
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from syndicate.cli import main
from syndicate.config import Config, load_config
from syndicate.model import ArticleSet
from syndicate.previews import digest_variants, write_previews
from syndicate.reader import read_articles
from tests.conftest import ARTICLES

CONFIG = """
[site]
base_url = "https://news.example.org"

[email]
sender = "Syndicate <digest@news.example.org>"
preview_to = "editor@news.example.org"
list_id = "digest.news.example.org"
unsubscribe_mailto = "unsubscribe@news.example.org"
"""

ITALIAN = """
[site]
languages = ["en", "nl", "de", "it"]
{fallback}

[languages.it]
name = "Italiano"
date_line = ["Aggiornato il"]
takeaways = ["Punti chiave"]
references = ["Riferimenti"]
audiences = {{ cost = ["Per i team di ottimizzazione dei costi"] }}
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG, "utf-8")
    return path


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_digest_command_writes_html_text_and_a_complete_message(
    config_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    code, stdout, _ = run(
        "digest", "--config", str(config_file), "--articles", str(ARTICLES),
        "--lang", "nl", "--audience", "strategy", "--audience", "cost", "--out", str(out),
    )  # fmt: skip
    assert code == 0
    names = ["nl-cost+strategy.html", "nl-cost+strategy.txt", "nl-cost+strategy.eml"]
    assert stdout.split() == [str(out / name) for name in names]
    assert sorted(p.name for p in out.iterdir()) == sorted(names)  # no temporary files left

    msg = email.message_from_bytes((out / names[2]).read_bytes(), policy=email.policy.default)
    assert msg["To"] == "editor@news.example.org"
    assert msg["From"] == "Syndicate <digest@news.example.org>"
    assert msg["Subject"] == (
        "Belangrijkste conclusies voor kostenoptimalisatieteams en voor strategische planning: "
        "1 nieuw artikel"
    )
    assert msg["Message-ID"].startswith("<preview.nl-cost+strategy.")
    assert msg["Date"] and msg["MIME-Version"] == "1.0"
    assert msg["List-Id"] == "<digest.news.example.org>"
    unsubscribe = "https://news.example.org/u/PREVIEW-ONLY-NOT-A-READER-TOKEN"
    assert " ".join(msg["List-Unsubscribe"].split()) == (
        f"<{unsubscribe}>, <mailto:unsubscribe@news.example.org>"
    )
    assert msg["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    text, page = msg.iter_parts()
    assert text.get_content().replace("\r\n", "\n") == (out / names[1]).read_text("utf-8")
    assert page.get_content().replace("\r\n", "\n") == (out / names[0]).read_text("utf-8")
    assert unsubscribe in text.get_content()


def test_nothing_new_writes_nothing_and_says_so(config_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stdout, _ = run(
        "digest", "--config", str(config_file), "--articles", str(ARTICLES),
        "--lang", "en", "--audience", "cost", "--since", "2025-12-12", "--out", str(out),
    )  # fmt: skip
    assert code == 0
    assert stdout.strip() == "nothing new for en / cost since 2025-12-12: no digest written"
    assert not out.exists()


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--lang", "it", "'it' is not published"),
        ("--audience", "marketing", "unknown audience 'marketing'"),
        ("--since", "12/01/2025", "does not match the format"),
    ],
)
def test_digest_command_rejects_bad_options(
    config_file: Path, option: str, value: str, message: str
) -> None:
    options = {"--lang": "en", "--audience": "cost", option: value}
    args = [a for pair in options.items() for a in pair]
    code, _, stderr = run("digest", "--config", str(config_file), *args)
    assert code == 2 and message in stderr


def test_default_output_is_the_preview_folder_of_the_outbox(config_file: Path) -> None:
    code, stdout, _ = run(
        "digest", "--config", str(config_file), "--articles", str(ARTICLES),
        "--lang", "de", "--audience", "cost",
    )  # fmt: skip
    assert code == 0
    assert stdout.split()[0] == str(config_file.parent / "outbox" / "preview" / "de-cost.html")


def test_every_variant_is_previewed(config: Config, tmp_path: Path, now: datetime) -> None:
    found = read_articles(ARTICLES, config.profiles)
    out = tmp_path / "preview"
    paths, failures = write_previews(config, found, out, now=now)
    assert failures == []
    variants = digest_variants(config)
    assert len(variants) == 3 * 6
    assert len(paths) == 3 * len(variants) == len(set(paths))
    assert sorted(paths) == sorted(out.iterdir())
    for lang, audiences in variants:
        key = f"{lang}-{'+'.join(sorted(audiences))}"
        assert (out / f"{key}.eml").read_bytes().startswith(b"From: ")


def test_run_once_writes_the_previews(config_file: Path) -> None:
    code, _, stderr = run(
        "run", "--once", "--config", str(config_file), "--articles", str(ARTICLES)
    )
    preview = config_file.parent / "outbox" / "preview"
    assert code == 0
    [line] = [line for line in stderr.splitlines() if "job=previews" in line]
    assert "outcome=ok" in line and "files=54 failed=0" in line
    assert f"previews in {preview}" in stderr
    assert len(list(preview.glob("*.eml"))) == 18


def test_check_names_a_missing_catalog_for_mail_and_web(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(ITALIAN.format(fallback=""), "utf-8")
    code, _, stderr = run("check", "--config", str(path), "--articles", str(ARTICLES))
    assert code == 1
    catalog = tmp_path / "locales" / "it" / "LC_MESSAGES" / "messages.po"
    [mail] = [line for line in stderr.splitlines() if " mail messages " in line]
    [web] = [line for line in stderr.splitlines() if " web messages " in line]
    assert mail.startswith(f"{catalog}: error: no catalog for 'it' (syndicate locale init it")
    assert web.startswith(f"{catalog}: warning: no catalog for 'it'")
    assert re.search(r": (\d+) of \1 mail messages untranslated", mail)
    assert re.search(r": (\d+) of \1 web messages untranslated", web)
    assert "digests are refused" in mail and "pages are in en throughout" in web

    path.write_text(ITALIAN.format(fallback='fallback_language = "en"'), "utf-8")
    code, stdout, _ = run("check", "--json", "--config", str(path), "--articles", str(ARTICLES))
    problems = [p for p in json.loads(stdout)["problems"] if "catalog" in p["message"]]
    assert [p["severity"] for p in problems] == ["warning", "warning"]
    assert "digests are in en throughout" in problems[0]["message"]
    assert code == 0


def test_a_failing_variant_does_not_stop_the_others(tmp_path: Path, now: datetime) -> None:
    path = tmp_path / "config.toml"
    path.write_text(ITALIAN.format(fallback=""), "utf-8")
    config = load_config(path, env={})
    seeds = read_articles(ARTICLES, config.profiles)
    assert not seeds.problems
    italian = (replace(a, lang="it") for a in seeds if a.lang == "en")
    both = ArticleSet((*seeds.articles, *italian))
    paths, failures = write_previews(config, both, tmp_path / "preview", now=now)
    assert len(paths) == 54
    assert [key for key, _ in failures] == [
        f"it-{key}" for key in ("architects", "cost", "procurement", "strategy", "ecosystem")
    ] + ["it-architects+cost+ecosystem+procurement+strategy"]
    assert all("cannot render 'it' digests: its catalog lacks" in why for _, why in failures)
    assert len(list((tmp_path / "preview").glob("*.eml"))) == 18
