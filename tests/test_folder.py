"""The article folder (reader/folder.py): which files are read, in which order, by which
processes, and what a folder being edited while it is read leaves out."""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from syndicate.cli import main
from syndicate.config import Config
from syndicate.model import Diagnostic, Severity
from syndicate.reader import article_files, read_articles, read_index
from syndicate.reader import folder as reader_folder
from tests.conftest import ARTICLES
from tests.test_parse import SEEDS


def test_read_articles_reads_the_bundled_set(config: Config) -> None:
    found = read_articles(ARTICLES, config.profiles)
    assert found.problems == ()
    assert sorted(a.key for a in found) == [
        (lang, "amazon-trainium3-aws-nvidia-ai-chip-competition") for lang in ("de", "en", "nl")
    ]


def test_duplicate_language_and_slug_and_bad_files_are_skipped(
    config: Config, articles_dir: Path
) -> None:
    shutil.copy(SEEDS["en"], articles_dir / "zz-copy.txt")
    (articles_dir / "broken.txt").write_bytes(b"\xc3\x28")  # not UTF-8
    (articles_dir / "empty.txt").write_bytes(b"")
    found = read_articles(articles_dir, config.profiles)
    assert sorted(a.lang for a in found) == ["de", "en", "nl"]
    first = found.get("en", "amazon-trainium3-aws-nvidia-ai-chip-competition")
    assert first is not None and first.source.endswith("003_f25c1f93821d1bd3.txt")
    assert [(Path(p.file).name, p.line, str(p.severity)) for p in found.problems] == [
        ("broken.txt", 1, "error"),
        ("empty.txt", None, "error"),
        ("zz-copy.txt", 1, "error"),
    ]
    assert found.problems[2].message == (
        f"duplicate article: {articles_dir / '003_f25c1f93821d1bd3.txt'} already has "
        "language 'en' and slug 'amazon-trainium3-aws-nvidia-ai-chip-competition'"
    )
    assert found.has_errors


def test_missing_folder_is_one_error(config: Config, tmp_path: Path) -> None:
    found = read_articles(tmp_path / "nope", config.profiles)
    assert len(found) == 0
    assert [p.message for p in found.problems] == ["article folder not found"]


def test_article_files_are_every_visible_file_in_path_order(tmp_path: Path) -> None:
    for name in ("b.txt", "a-c", "a/b", "a/z/deep.md", ".hidden", ".git/x", "a/.skip/y", "c/.z"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    (tmp_path / "link.txt").symlink_to(tmp_path / "b.txt")
    (tmp_path / "linked-dir").symlink_to(tmp_path / "a", target_is_directory=True)
    found = [str(p.relative_to(tmp_path)) for p in article_files(tmp_path)]
    # As paths order: part by part, so "a/b" comes before "a-c" ('-' sorts before '/').
    assert found == ["a/b", "a/z/deep.md", "a-c", "b.txt", "link.txt"]


def test_worker_processes_read_as_this_process_does(
    config: Config, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch
) -> None:
    """Same articles, same problems, same order; a duplicate is still caught across batches,
    whichever process read them."""
    monkeypatch.setattr(reader_folder, "_BATCH", 4)
    for number in range(30):
        for lang, path in SEEDS.items():
            text = path.read_text("utf-8").replace(
                "amazon-trainium3-aws-nvidia-ai-chip-competition", f"chips-{number % 25}"
            )
            (tmp_path / f"{number:02d}-{lang}.txt").write_text(text, "utf-8")
    (tmp_path / "broken.txt").write_bytes(b"\xff\xfe not text")
    alone = read_articles(tmp_path, config.profiles, bodies=False, processes=1)
    with caplog.at_level("WARNING", logger="syndicate.reader"):
        shared = read_articles(tmp_path, config.profiles, bodies=False, processes=2)
    assert caplog.records == []  # the workers did the reading
    assert shared.articles == alone.articles and len(alone) == 75
    assert shared.problems == alone.problems
    assert sum("duplicate article" in p.message for p in alone.problems) == 15

    # A process with threads (the scheduler, the web server) starts its workers from a fork
    # server instead of forking itself; the reading is the same.
    found: list = []
    with caplog.at_level("WARNING", logger="syndicate.reader"):
        thread = threading.Thread(
            target=lambda: found.append(
                read_articles(tmp_path, config.profiles, bodies=False, processes=2)
            )
        )
        thread.start()
        thread.join(60)
    assert caplog.records == []
    assert found[0].articles == alone.articles and found[0].problems == alone.problems


def test_bodies_read_without_their_blocks_keep_everything_else(
    config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``syndicate check`` reads every body for its problems but keeps none: in this process
    and in the workers, the articles are the full readings without their blocks, and the
    problems the same, a body's own (a footnote mark with no reference) included."""
    monkeypatch.setattr(reader_folder, "_BATCH", 2)
    for lang, path in SEEDS.items():
        paras = path.read_text("utf-8").split("\n\n")
        paras[4] += " more⁹⁹"  # a body paragraph
        for number in range(3):
            text = "\n\n".join(paras).replace("chip-competition", f"chip-{number}")
            (tmp_path / f"{number}-{lang}.txt").write_text(text, "utf-8")
    whole = read_articles(tmp_path, config.profiles, processes=1)
    assert any("99" in p.message for p in whole.problems)
    for processes in (1, 2):
        found = read_articles(tmp_path, config.profiles, blocks=False, processes=processes)
        assert found.problems == whole.problems
        assert all(a.blocks == () for a in found) and all(a.blocks for a in whole)
        assert [a.references for a in found] == [a.references for a in whole]
        assert [a.takeaways for a in found] == [a.takeaways for a in whole]


def problems_of(found: object) -> dict[str, tuple[Severity, str]]:
    """Each diagnostic by the name of its file (a test folder has one per file)."""
    return {Path(p.file).name: (p.severity, p.message) for p in found.problems}  # type: ignore[attr-defined]


def seeded(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for path in SEEDS.values():
        shutil.copy(path, folder / path.name)
    return folder


def test_links_that_lead_nowhere_in_a_loop_or_outside_and_pipes_are_one_diagnostic_each(
    config: Config, tmp_path: Path
) -> None:
    folder = seeded(tmp_path / "articles")
    (folder / "loop-a.txt").symlink_to(folder / "loop-b.txt")
    (folder / "loop-b.txt").symlink_to(folder / "loop-a.txt")
    (folder / "self.txt").symlink_to(folder / "self.txt")
    (folder / "dangling.txt").symlink_to(folder / "gone.txt")
    outside = seeded(tmp_path / "elsewhere")
    (folder / "outside.txt").symlink_to(outside / SEEDS["en"].name)
    (folder / "outside-dir").symlink_to(outside, target_is_directory=True)
    (folder / "inside.txt").symlink_to(folder / SEEDS["de"].name)  # a second name: duplicate
    os.mkfifo(folder / "pipe.txt")  # reading it would wait for a writer forever
    found = read_articles(folder, config.profiles)
    assert len(found) == 3
    problems = problems_of(found)
    assert problems["loop-a.txt"] == (Severity.ERROR, "symbolic link loop: not read")
    assert problems["loop-b.txt"] == (Severity.ERROR, "symbolic link loop: not read")
    assert problems["self.txt"] == (Severity.ERROR, "symbolic link loop: not read")
    assert problems["dangling.txt"] == (
        Severity.ERROR,
        f"symbolic link to {str(folder / 'gone.txt')!r}, which does not exist: not read",
    )
    for name, target in (("outside.txt", outside / SEEDS["en"].name), ("outside-dir", outside)):
        assert problems[name] == (
            Severity.WARNING,
            f"symbolic link leads outside the article folder (to {target}): not followed",
        )
    assert "duplicate article" in problems["inside.txt"][1]
    assert problems["pipe.txt"] == (
        Severity.WARNING,
        "not a regular file (a pipe, socket or device): left out",
    )
    assert len(found.problems) == 8


def test_a_file_removed_mid_scan_is_left_out_with_a_warning(config: Config, tmp_path: Path) -> None:
    folder = seeded(tmp_path / "articles")
    (folder / "sub").mkdir()
    (folder / "sub" / "draft.txt").write_text("draft")
    doomed = [folder / SEEDS["nl"].name, folder / "sub"]

    def listed(path: str) -> None:  # an editor removes the file and the folder just now
        if Path(path) in doomed:
            target = Path(path)
            shutil.rmtree(target) if target.is_dir() else target.unlink()

    problems: list = []
    files = reader_folder.scan(folder, problems, listed=listed)
    assert [Path(p).name for p in files] == [SEEDS["de"].name, SEEDS["en"].name]
    message = "removed or renamed while the articles were read: left out"
    assert sorted((Path(p.file).name, p.severity, p.message) for p in problems) == [
        (SEEDS["nl"].name, Severity.WARNING, message),
        ("sub", Severity.WARNING, message),
    ]


def test_a_file_gone_or_turned_folder_by_the_time_it_is_read(
    config: Config, tmp_path: Path
) -> None:
    folder = seeded(tmp_path / "articles")
    paths = list(reader_folder.scan(folder))
    Path(paths[0]).unlink()  # removed between the scan and the read
    Path(paths[1]).unlink()
    Path(paths[1]).mkdir()  # a folder where a file was expected
    readings = {Path(p).name: r for p, r, _ in read_index(paths, config.profiles, known={})}
    gone, folder_instead, kept = (readings[Path(p).name] for p in paths)
    message = "removed or renamed while the articles were read: left out"
    assert gone == (None, [Diagnostic(paths[0], None, Severity.WARNING, message)])
    message = "a folder where an article file was expected: not read"
    assert folder_instead == (None, [Diagnostic(paths[1], None, Severity.ERROR, message)])
    assert kept[0] is not None and kept[1] == []


def test_an_unreadable_file_is_an_error_and_the_rest_is_read(tmp_path: Path) -> None:
    folder = seeded(tmp_path / "articles")
    secret = folder / "secret.txt"
    shutil.copy(SEEDS["en"], secret)
    secret.chmod(0)
    command = [sys.executable, "-m", "syndicate", "check", "--json", "--articles", str(folder)]
    if os.geteuid() == 0:  # root reads anything: run without the capabilities that allow it
        command = ["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search"]
        command += [sys.executable, "-m", "syndicate", "check", "--json", "--articles", str(folder)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    document = json.loads(result.stdout)
    assert result.returncode == 1, result.stderr
    assert len(document["articles"]) == 3
    assert document["problems"] == [
        {"file": str(secret), "line": None, "severity": "error",
         "message": "cannot read: Permission denied"}
    ]  # fmt: skip


def test_files_over_the_size_limit_and_overlong_titles_are_skipped(
    config: Config, tmp_path: Path
) -> None:
    folder = seeded(tmp_path / "articles")
    text = SEEDS["en"].read_text("utf-8")
    (folder / "huge.txt").write_text(text.replace("amazon-trainium3", "huge") + "x" * 3_000_000)
    (folder / "long-title.txt").write_text(
        "A" * 301 + text[text.index("\n") :].replace("amazon-trainium3", "long"), "utf-8"
    )
    found = read_articles(folder, config.profiles, max_bytes=2_000_000)
    assert len(found) == 3
    problems = problems_of(found)
    size = (folder / "huge.txt").stat().st_size
    assert problems["huge.txt"] == (
        Severity.ERROR,
        f"{size:,} bytes, over site.max_article_bytes (2,000,000): not read",
    )
    assert problems["long-title.txt"] == (
        Severity.ERROR,
        "title is 301 characters long, over 300: not published (is a blank line missing after it?)",
    )
    assert len(found.problems) == 2


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; only its exit status is left


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
@pytest.mark.parametrize("command", ["build", "check"])
def test_killing_a_build_leaves_no_reader_processes(tmp_path: Path, command: str) -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: the set is read in one process")
    folder = tmp_path / "articles"
    folder.mkdir()
    for number in range(4000):
        seed = list(SEEDS.values())[number % 3]
        (folder / f"{number:05d}-{seed.name}").write_bytes(seed.read_bytes())
    build = subprocess.Popen(
        [sys.executable, "-m", "syndicate", command, "--articles", str(folder)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers: set[int] = set()
    try:
        while not workers and build.poll() is None:  # until the reader processes are started
            workers = _children(build.pid)
        assert workers, "the set was read before its reader processes could be seen"
    finally:
        build.kill()  # SIGKILL: no handler runs, nothing is cleaned up
        build.wait()
    survivors = set(workers)
    for _ in range(3000):  # they end as soon as the kernel delivers their parent's death
        survivors = {pid for pid in survivors if _alive(pid)}
        if not survivors:
            break
        threading.Event().wait(0.01)
    assert not survivors


def _recording_collection(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether the cycle collector was on as each file was parsed (in this process)."""
    seen: list[bool] = []
    parse = reader_folder.parse_article

    def recorded(*args, **kwargs):
        seen.append(gc.isenabled())
        return parse(*args, **kwargs)

    monkeypatch.setattr(reader_folder, "parse_article", recorded)
    return seen


def test_reading_leaves_the_process_switches_alone(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader also runs on the scheduler's threads and in the web server: it turns
    neither the cycle collector nor the start method of processes."""
    seen = _recording_collection(monkeypatch)
    method = multiprocessing.get_start_method(allow_none=True)
    assert gc.isenabled()
    found = read_articles(ARTICLES, config.profiles, processes=1)
    assert len(found) == 3 and seen == [True, True, True]
    assert gc.isenabled() and multiprocessing.get_start_method(allow_none=True) == method


@pytest.mark.parametrize(
    "command",
    [
        ["check"],
        ["build"],
        ["digest", "--lang", "en", "--audience", "architects", "--since", "2020-01-01"],
    ],
    ids=["check", "build", "digest"],
)
def test_check_build_and_digest_read_without_cycle_collection_and_restore_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """The commands that own their process choose for it while they run, and leave it as
    they found it (under a test runner, the process goes on)."""
    shutil.copytree(ARTICLES, tmp_path / "articles")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SYNDICATE_CONFIG", raising=False)
    seen = _recording_collection(monkeypatch)
    method = multiprocessing.get_start_method(allow_none=True)
    result = CliRunner().invoke(main, command, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert seen == [False, False, False]
    assert gc.isenabled() and multiprocessing.get_start_method(allow_none=True) == method
