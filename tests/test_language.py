"""The language model: the same answers as py3langid's own classifier, unpacked once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from py3langid.langid import MODEL_FILE, LanguageIdentifier

from syndicate.language import EVERY, LanguageModel, cache_folder, likeliest, written_language
from tests.conftest import ARTICLES, TRANSLATED

LANGS = ("de", "en", "nl")
SAMPLES = [
    "The chip delivers five times more tokens per megawatt than earlier generations.",
    "De chip levert vijf keer meer tokens per megawatt dan eerdere generaties.",
    "Der Chip liefert fünfmal mehr Tokens pro Megawatt als frühere Generationen.",
    "Trainium3 UltraServer 144 HBM3e 362 PFLOPS",
    *(path.read_text("utf-8")[600:900] for path in sorted(ARTICLES.iterdir())),
]


@pytest.fixture(scope="module")
def library() -> LanguageIdentifier:
    found = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    found.set_languages(LANGS)
    return found


def test_answers_as_py3langid_does(tmp_path: Path, library: LanguageIdentifier) -> None:
    model = LanguageModel.load(LANGS, tmp_path)
    for text in SAMPLES:
        found = model.classify(text)
        assert found is not None, text
        lang, probability = found
        expected_lang, expected = library.classify(text)
        assert lang == expected_lang, text
        assert probability == pytest.approx(float(expected), abs=1e-4), text


def test_ranks_every_language_as_py3langid_does(tmp_path: Path) -> None:
    library = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    model = LanguageModel.load(EVERY, tmp_path)
    for text in SAMPLES:
        ranked = model.ranked(text)
        expected = sorted(library.rank(text), key=lambda pair: -pair[1])
        assert [lang for lang, _ in ranked[:3]] == [lang for lang, _ in expected[:3]], text
        assert sum(p for _, p in ranked) == pytest.approx(1.0)


def test_close_languages_are_named_together() -> None:
    """The Malay translation reads to the model as Indonesian as much as Malay: the likeliest
    languages are both, the first never alone (its date line tells them apart, in the reader)."""
    for name in ("ms-trainium3.txt", "id-trainium3.txt"):
        body = " ".join((TRANSLATED / name).read_text("utf-8").split("\n\n")[2:8])[:1000]
        found = likeliest(body, EVERY, 0.9, 3)
        assert set(found) == {"id", "ms"}, name
        assert likeliest(body, EVERY, 0.9, 1) == [], name


def test_unpacked_once_then_mapped(tmp_path: Path) -> None:
    first = LanguageModel.load(LANGS, tmp_path)
    (folder,) = tmp_path.iterdir()
    assert (folder / "langs.txt").read_text("utf-8") == "de en nl"
    again = LanguageModel.load(LANGS, tmp_path)
    assert isinstance(again.weights, np.memmap)
    assert [again.classify(t) for t in SAMPLES] == [first.classify(t) for t in SAMPLES]


def test_a_cache_that_cannot_be_written_costs_only_time(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    model = LanguageModel.load(LANGS, blocked)
    found = model.classify(SAMPLES[1])
    assert found is not None and found[0] == "nl"
    assert blocked.read_text() == ""


def test_a_damaged_cache_is_unpacked_again(tmp_path: Path) -> None:
    LanguageModel.load(LANGS, tmp_path)
    (folder,) = tmp_path.iterdir()
    (folder / "weights.npy").write_bytes(b"garbage")
    found = LanguageModel.load(LANGS, tmp_path).classify(SAMPLES[2])
    assert found is not None and found[0] == "de"
    assert isinstance(LanguageModel.load(LANGS, tmp_path).weights, np.memmap)


def test_languages_the_model_does_not_know_are_left_out(tmp_path: Path) -> None:
    assert LanguageModel.load(("en", "nl", "xx"), tmp_path).langs == ("en", "nl")


def test_the_cache_folder_follows_the_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SYNDICATE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_folder() == tmp_path / "syndicate"
    monkeypatch.setenv("SYNDICATE_CACHE", str(tmp_path / "own"))
    assert cache_folder() == tmp_path / "own"
    monkeypatch.delenv("SYNDICATE_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME")

    def homeless() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", homeless)
    assert cache_folder() is None  # the model is then unpacked on each run, and still works


def test_chinese_in_traditional_characters_is_zh_hant() -> None:
    """The model knows one Chinese: which forms of the characters whose two scripts differ a
    text uses tells Taiwan's and Hong Kong's Chinese ("zh-Hant") from the mainland's ("zh")."""
    assert written_language("zh", "這些資料中心的電力價格與規劃") == "zh-Hant"
    assert written_language("zh", "这些数据中心的电力价格与规划") == "zh"
    assert written_language("zh", "中心") == "zh"  # no form of either script of its own
    assert written_language("ja", "這些資料中心") == "ja"
