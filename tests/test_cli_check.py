"""`syndicate check`: the table, the JSON contract, exit codes and overrides."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from syndicate.cli import main
from tests.conftest import ARTICLES

SLUG = "amazon-trainium3-aws-nvidia-ai-chip-competition"


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """Runs in an empty folder, so only what a test passes counts."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SYNDICATE_CONFIG", raising=False)
    return CliRunner()


def test_table_lists_every_article(runner: CliRunner) -> None:
    result = runner.invoke(main, ["check", "--articles", str(ARTICLES)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if SLUG in line]
    assert len(rows) == 3
    assert [row.split("│")[1].strip() for row in rows] == ["de", "en", "nl"]
    en = next(row for row in rows if "│ en " in row)
    assert "Amazon's Trainium3 throws down the gauntlet in the AI chip wars" in en
    assert "2025-12-11" in en
    assert "architects:3 cost:3 procurement:3 strategy:3 ecosystem:3" in en
    assert en.split("│")[-2].strip() == "11"
    assert "0 error(s), 0 warning(s)" in result.stderr


def test_json_is_one_document_with_the_contract(runner: CliRunner) -> None:
    result = runner.invoke(main, ["check", "--json", "--articles", str(ARTICLES)])
    assert result.exit_code == 0
    document = json.loads(result.stdout)  # the whole of stdout is one JSON document
    assert set(document) == {"articles", "problems", "unpublished", "unpublished_languages"}
    assert document["unpublished"] == [] and document["unpublished_languages"] == {}
    assert document["problems"] == []
    assert [(a["slug"], a["lang"]) for a in document["articles"]] == [
        (SLUG, "de"),
        (SLUG, "en"),
        (SLUG, "nl"),
    ]
    en = document["articles"][1]
    assert set(en) == {
        "file",
        "lang",
        "slug",
        "title",
        "updated",
        "summary",
        "audiences",
        "references",
        "alt_slugs",
    }
    assert Path(en["file"]).name == "003_f25c1f93821d1bd3.txt"
    assert en["updated"] == "2025-12-11"
    assert en["summary"].startswith("December 2025 Update:")
    assert list(en["audiences"]) == ["architects", "cost", "procurement", "strategy", "ecosystem"]
    assert en["audiences"]["cost"][2] == (
        "Trade-off: requires Neuron SDK adoption and potential code rewrites; "
        "migration effort must justify savings"
    )
    assert en["references"][0] == {
        "n": 1,
        "text": 'Amazon. "Trainium3 UltraServers now available: Enabling customers to train and '
        'deploy AI models faster at lower cost." About Amazon, December 2, 2025.',
        "url": "https://www.aboutamazon.com/news/aws/trainium-3-ultraserver-faster-ai-training-lower-cost",
    }
    assert en["references"][1] == {
        "n": 2,
        "text": 'Amazon. "Trainium3 UltraServers now available."',
        "url": None,
    }
    assert en["alt_slugs"] == [
        "aws-trainium3-ultraserver-ai-accelerator-2025",
        "trainium3-vs-nvidia-gpu-enterprise-ai-costs",
        "amazon-ai-chip-trainium3-anthropic-production",
    ]


def test_a_file_error_exits_1_and_the_rest_is_still_read(
    runner: CliRunner, articles_dir: Path
) -> None:
    (articles_dir / "broken.txt").write_bytes(b"Title\n\nno date here\n\nsummary\n")
    shutil.copy(ARTICLES / "003_f25c1f93821d1bd3.txt", articles_dir / "warn.txt")
    text = (articles_dir / "warn.txt").read_text("utf-8")
    (articles_dir / "warn.txt").write_text(
        text.replace("URL Slugs: - Primary: amazon-trainium3-aws-nvidia-ai-chip-competition", ""),
        "utf-8",
    )
    result = runner.invoke(main, ["check", "--json", "--articles", str(articles_dir)])
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert len(document["articles"]) == 4
    broken = [p for p in document["problems"] if p["file"].endswith("broken.txt")]
    assert broken == [
        {
            "file": str(articles_dir / "broken.txt"),
            "line": 3,
            "severity": "error",
            "message": "unknown language: no configured language profile (en, nl, de) "
            "matches its date line or headings",
        }
    ]
    warned = [p for p in document["problems"] if p["file"].endswith("warn.txt")]
    assert [(p["line"], p["severity"]) for p in warned] == [(1, "warning")]


def test_warnings_alone_exit_0_and_are_printed(runner: CliRunner, articles_dir: Path) -> None:
    path = articles_dir / "003_f25c1f93821d1bd3.txt"
    path.write_text(path.read_text("utf-8").replace("For procurement teams", "For buyers"))
    result = runner.invoke(main, ["check", "--articles", str(articles_dir)])
    assert result.exit_code == 0
    assert f"{path}:63: warning: unknown audience label 'For buyers'" in result.stderr
    assert "0 error(s), 1 warning(s)" in result.stderr


def test_articles_folder_from_the_config_file(runner: CliRunner, tmp_path: Path) -> None:
    shutil.copytree(ARTICLES, tmp_path / "site" / "texts")
    (tmp_path / "site" / "config.toml").write_text('[site]\narticles = "texts"\n')
    result = runner.invoke(main, ["check", "--json", "--config", "site/config.toml"])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["articles"]) == 3
    result = runner.invoke(main, ["check", "--json"], env={"SYNDICATE_CONFIG": "site/config.toml"})
    assert len(json.loads(result.stdout)["articles"]) == 3


def test_bad_config_exits_2_with_one_line_per_key(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[site]\ntimezone = "Nowhere/City"\ncolour = 1\n')
    result = runner.invoke(main, ["check", "--articles", str(ARTICLES)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "syndicate: invalid configuration in config.toml:",
        "  site.timezone: unknown IANA time zone 'Nowhere/City'",
        "  site.colour: unknown key",
    ]


def test_missing_articles_folder_is_a_usage_error(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(main, ["check", "--json", "--articles", str(tmp_path / "none")])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == f"syndicate: {tmp_path / 'none'}: article folder not found\n"


def test_summary_is_one_line_of_counts(runner: CliRunner, articles_dir: Path) -> None:
    path = articles_dir / "003_f25c1f93821d1bd3.txt"
    path.write_text(path.read_text("utf-8").replace("For procurement teams", "For buyers"))
    result = runner.invoke(main, ["check", "--summary", "--articles", str(articles_dir)])
    assert result.exit_code == 0
    assert result.stdout == "3 article(s) (de 1, en 1, nl 1), 0 error(s), 1 warning(s)\n"
    assert f"{path}:63: warning: unknown audience label 'For buyers'" in result.stderr


def test_settings_that_do_not_do_what_they_seem_to_are_warnings_naming_their_keys(
    runner: CliRunner, tmp_path: Path
) -> None:
    (tmp_path / "config.toml").write_text(
        "[smtp]\ntimeout = 30\nusername = 'news'\n"
        "[send]\nmax_connections = 4\n"
        "[schedule]\nstop_timeout_seconds = 20\n"
    )
    result = runner.invoke(main, ["check", "--articles", str(ARTICLES)])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("config.toml: ")]
    assert warnings == [
        "config.toml: warning: schedule.stop_timeout_seconds (20) is not above smtp.timeout "
        "(30): a stop may cut a message on the wire, and leave its delivery uncertain",
        "config.toml: warning: send.max_connections is for the procrastinate engine: with "
        'send.engine = "local" a send opens smtp.pool_size (4) connections',
        "config.toml: warning: smtp.username and smtp.password are unused without smtp.url: "
        "mail goes to the Maildir in the outbox",
    ]
    assert "0 error(s), 3 warning(s)" in result.stderr
