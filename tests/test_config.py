"""config.toml: defaults, one line per problem naming its key, secrets from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from syndicate.config import load_config, parse_config
from syndicate.errors import ConfigError


def write(folder: Path, text: str, name: str = "config.toml") -> Path:
    path = folder / name
    path.write_text(text, "utf-8")
    return path


def problems_of(path: Path, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(path, env=env or {})
    assert caught.value.exit_code == 2
    return caught.value.problems


def test_every_problem_is_reported_at_once_one_line_each(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[site]
titel = "typo"
timezone = "Mars/Olympus"
base_url = "ftp:/nope"
[feeds]
max_entries = "many"
[smtp]
rate = -1
[bogus]
x = 1
""",
    )
    assert problems_of(path) == [
        "site.base_url: not an absolute http(s) URL: 'ftp:/nope'",
        "site.timezone: unknown IANA time zone 'Mars/Olympus'",
        "site.titel: unknown key",
        "feeds.max_entries: Input should be a valid integer, unable to parse string as an integer",
        "smtp.rate: Input should be greater than 0",
        "bogus: unknown key",
    ]


def test_toml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, '[site]\ntitle = "Syndicate"\nbase_url = "http://x\n')
    (problem,) = problems_of(path)
    assert problem.startswith("line 3, column ")


def test_error_message_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[site]\nport = 1\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert str(caught.value) == f"invalid configuration in {path}:\n  site.port: unknown key"


def test_a_key_an_earlier_release_read_names_the_key_that_replaced_it(tmp_path: Path) -> None:
    path = write(tmp_path, '[languages.nl]\nfeed_title = "Analyse"\nfeed_subtitle = "Kort"\n')
    assert problems_of(path) == [
        "languages.nl.feed_title: unknown key (renamed: languages.nl.title)",
        "languages.nl.feed_subtitle: unknown key (renamed: languages.nl.description)",
    ]


def test_a_language_block_is_validated_like_the_rest(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[site]\nlanguages = ["en", "it"]\n[languages.it]\nname = "Italiano"\n'
        'date_line = []\ntakeaways = ["Punti chiave"]\n',
    )
    assert problems_of(path) == [
        "languages.it.date_line: needs at least one non-empty phrase",
        "languages.it.references: Field required",
        "languages.it.audiences: Field required",
    ]


def test_an_audience_id_that_would_break_a_file_name_or_an_address_is_refused(
    tmp_path: Path,
) -> None:
    """An id names feed files (feeds/<lang>/<id>.atom.xml) and page addresses, and '+' and
    ';' join several ids: each of these is refused, with the key it is under."""
    for bad in ("data center", "ops/infra", "a+b", "a;b", "Ops", "50%", "x?y", "#x", ""):
        block = (
            '[site]\nlanguages = ["en", "it"]\n[languages.it]\nname = "Italiano"\n'
            'date_line = ["Aggiornato"]\ntakeaways = ["Punti chiave"]\n'
            f'references = ["Fonti"]\n[languages.it.audiences]\n"{bad}" = ["Per voi"]\n'
        )
        (problem,) = problems_of(write(tmp_path, block))
        assert problem.startswith(f"languages.it.audiences.{bad}: audience id {bad!r}: lowercase")
    good = write(tmp_path, block.replace(f'"{bad}"', '"data-centre_2"'))
    assert "data-centre_2" in load_config(good, env={}).audiences


def test_the_interface_folders_and_the_fallback_language(tmp_path: Path) -> None:
    path = write(tmp_path, '[site]\nfallback_language = "de"\ntemplates = "layout"\n')
    config = load_config(path, env={})
    assert config.fallback_language == "de"
    assert config.path(config.site.locales) == tmp_path / "locales"
    assert config.path(config.site.templates) == tmp_path / "layout"
    assert load_config(write(tmp_path, "[site]\n"), env={}).fallback_language is None
    # The older key says the same as fallback_language = "en".
    old = load_config(write(tmp_path, "[email]\nenglish_fallback = true\n"), env={})
    assert old.fallback_language == "en"
    assert problems_of(write(tmp_path, '[site]\nfallback_language = "xx"\n')) == [
        "site.fallback_language 'xx' has no language profile"
    ]


def test_no_file_means_built_in_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(env={})
    assert config.root == tmp_path
    assert config.site.languages == ["en", "nl", "de"]
    assert set(config.profiles) == {"en", "nl", "de"}


def test_explicit_path_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    assert problems_of(tmp_path / "nope.toml") == [
        "file not found (run without --config for the defaults)"
    ]


def test_syndicate_config_env_and_relative_paths(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = write(
        elsewhere,
        '[site]\narticles = "texts"\n[feeds]\nout = "public"\n'
        '[state]\ndatabase = "sqlite:///state/s.db"\n[email]\noutbox = "mail"\n',
        name="site.toml",
    )
    config = load_config(env={"SYNDICATE_CONFIG": str(path)})
    assert config.root == elsewhere
    assert config.path(config.site.articles) == elsewhere / "texts"
    assert config.path(config.feeds.out) == elsewhere / "public"
    assert config.path(config.email.outbox) == elsewhere / "mail"
    assert config.database_url == f"sqlite:///{elsewhere / 'state' / 's.db'}"
    # An explicit --config wins over the environment.
    other = write(tmp_path, '[site]\ntitle = "Other"\n')
    assert load_config(other, env={"SYNDICATE_CONFIG": str(path)}).site.title == "Other"


def test_secrets_come_from_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "[smtp]\npool_size = 2\n")
    env = {
        "SYNDICATE_SMTP_PASSWORD": "s3cret",
        "SYNDICATE_SECRET_KEY": "signing-key",
        "SYNDICATE_SMTP_URL": "smtps://mail.example.com:465",
        "SYNDICATE_DATABASE_URL": "postgresql+psycopg://u@db/x",
    }
    config = load_config(path, env=env)
    assert config.smtp.password is not None
    assert config.smtp.password.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(config)
    assert config.web.secret_key is not None
    assert config.web.secret_key.get_secret_value() == "signing-key"
    assert config.smtp.url == "smtps://mail.example.com:465"
    assert config.database_url == "postgresql+psycopg://u@db/x"
    plain = load_config(path, env={})
    assert plain.smtp.password is None and plain.web.secret_key is None


def test_parse_config_rejects_a_non_table_languages_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"languages": 3}, root=tmp_path, source="x", env={})
    assert caught.value.problems == ["languages: must be a table of [languages.<code>] blocks"]


def test_the_digest_window_keys_are_checked(tmp_path: Path) -> None:
    path = write(tmp_path, "[email]\nmax_articles = 0\nfirst_window_days = -3\n")
    assert problems_of(path) == [
        "email.max_articles: Input should be greater than or equal to 1",
        "email.first_window_days: Input should be greater than or equal to 1",
    ]
    good = write(tmp_path, "[email]\nmax_articles = 25\nfirst_window_days = 30\n", "ok.toml")
    email = load_config(good, env={}).email
    assert (email.max_articles, email.first_window_days) == (25, 30)
    default = parse_config({}, root=tmp_path, source="(defaults)", env={}).email
    assert (default.max_articles, default.first_window_days) == (10, None)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "[send]\nheartbeat_seconds = 60\n",
            "send.stalled_seconds (30) must be above send.heartbeat_seconds (60): a live worker "
            "would be taken as dead between two of its heartbeats",
        ),
        (
            "[send]\nheartbeat_seconds = 15\nstalled_seconds = 15\n",
            "send.stalled_seconds (15) must be above send.heartbeat_seconds (15): a live worker "
            "would be taken as dead between two of its heartbeats",
        ),
        (
            "[smtp]\nrate = 20\n[send]\nmin_rate = 25\n",
            "send.min_rate (25) must not be above smtp.rate (20): slow-down replies cut the rate "
            "from smtp.rate down, never to above it",
        ),
        (
            '[email]\ndkim_key_file = "dkim.pem"\n',
            "email.dkim_key_file set without email.dkim_selector: DKIM signing needs "
            "email.dkim_selector and email.dkim_key_file (nothing would be signed)",
        ),
        (
            '[email]\ndkim_selector = "s1"\ndkim_domain = "example.org"\n',
            "email.dkim_selector and email.dkim_domain set without email.dkim_key_file: DKIM "
            "signing needs email.dkim_selector and email.dkim_key_file (nothing would be signed)",
        ),
        (
            '[[schedule.digests]]\nname = "weekly"\nlanguages = ["nl", "fr"]\n',
            "schedule.digests 'weekly': languages names fr, not one of site.languages (en, nl, de)",
        ),
        (
            '[site]\nfallback_language = "de"\n[email]\nenglish_fallback = true\n',
            'email.english_fallback (deprecated: "en") contradicts site.fallback_language '
            "('de'): drop email.english_fallback",
        ),
    ],
)
def test_keys_that_contradict_each_other_are_one_line_naming_them(
    tmp_path: Path, text: str, problem: str
) -> None:
    assert problems_of(write(tmp_path, text)) == [problem]


def test_every_contradiction_is_reported_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[site]\nlanguages = ["en", "xx"]\n[state]\ndatabase = "sqlite:///s.db"\n'
        '[send]\nengine = "procrastinate"\nheartbeat_seconds = 40\n[email]\ndkim_selector = "s"\n',
    )
    assert [problem.split(" ", 1)[0] for problem in problems_of(path)] == [
        "site.languages",
        "send.engine",
        "send.stalled_seconds",
        "email.dkim_selector",
    ]


def test_rules_hold_only_between_keys_as_given(tmp_path: Path) -> None:
    """A slow relay needs no send.min_rate of its own: left at its default, the floor gives way
    to a lower smtp.rate (the rate is then its own floor)."""
    slow = load_config(write(tmp_path, "[smtp]\nrate = 0.5\n"), env={})
    assert (slow.smtp.rate, slow.send.min_rate) == (0.5, 1.0)
    fine = "[smtp]\nrate = 20\n[send]\nmin_rate = 20\nheartbeat_seconds = 5\nstalled_seconds = 6\n"
    assert load_config(write(tmp_path, fine), env={}).send.stalled_seconds == 6
    signed = '[email]\ndkim_selector = "s1"\ndkim_key_file = "dkim.pem"\n'
    assert load_config(write(tmp_path, signed), env={}).email.dkim_selector == "s1"


def test_a_contradiction_is_one_line_under_the_file_on_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from syndicate.cli import main

    monkeypatch.chdir(tmp_path)
    write(tmp_path, "[send]\nheartbeat_seconds = 60\nstalled_seconds = 30\n")
    result = CliRunner().invoke(main, ["--config", "config.toml", "check"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "syndicate: invalid configuration in config.toml:",
        "  send.stalled_seconds (30) must be above send.heartbeat_seconds (60): a live worker "
        "would be taken as dead between two of its heartbeats",
    ]


def test_the_old_bounce_keys_stand_for_the_hard_limit_and_say_so(tmp_path: Path) -> None:
    default = load_config(write(tmp_path, "[bounces]\n"), env={})
    assert (default.bounces.hard_limit, default.bounces.soft_limit) == (1, 5)
    assert (default.bounces.soft_days, default.bounces.hard_window_days) == (14.0, 90.0)
    assert default.doubtful() == []
    old = load_config(write(tmp_path, "[smtp]\nmax_bounces = 3\nbounce_window_days = 30\n"), env={})
    assert (old.bounces.hard_limit, old.bounces.hard_window_days) == (3, 30.0)
    assert old.doubtful()[0].startswith(
        "smtp.max_bounces is deprecated: it stands for bounces.hard_limit (3)"
    )
    both = load_config(
        write(tmp_path, "[smtp]\nmax_bounces = 3\n[bounces]\nhard_limit = 2\n"), env={}
    )
    assert both.bounces.hard_limit == 2
    assert both.doubtful() == [
        "smtp.max_bounces is deprecated and ignored: bounces.hard_limit is set"
    ]
