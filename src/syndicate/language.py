"""Language identification: py3langid's bundled model, offline, for the reader's cross-check.

The model ships compressed; unpacking it costs most of a second and about 100 MiB at its peak.
So the part our languages need is unpacked once into a per-user cache and mapped from there
on later runs: the tokenizer's table is read straight from the mapped file (only the pages a
sample touches are loaded) and the weights are those of the configured languages only.
NumPy is imported by the functions that use it: the date line alone tells the language of
most files, and the import would cost every start 40 ms.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

from .files import staged_folder

_FILES = ("nextmove", "rowbase", "output", "weights", "priors")
EVERY = ("every",)
"""The languages argument that stands for every language the model knows."""


def cache_folder() -> Path | None:
    """Where unpacked models are kept: ``$SYNDICATE_CACHE``, else the XDG cache folder; None
    for a process with no home (a service account, say), which unpacks the model each run."""
    if os.environ.get("SYNDICATE_CACHE"):
        return Path(os.environ["SYNDICATE_CACHE"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "syndicate"
    try:
        return Path.home() / ".cache" / "syndicate"
    except RuntimeError:
        return None


class LanguageModel:
    """py3langid's model restricted to ``langs``: same features, weights and calibration as
    ``LanguageIdentifier.classify``, with only the few weights a short sample needs gathered
    per call instead of the library's work over the full model."""

    def __init__(self, langs: tuple[str, ...], arrays: dict[str, Any]) -> None:
        self.langs = langs
        # Views of the mapped files: they index at C speed and give ints, and only the pages
        # a sample's lookups touch are ever read into memory.
        self.nextmove = memoryview(arrays["nextmove"])
        self.rowbase = memoryview(arrays["rowbase"])
        self.output = memoryview(arrays["output"])
        self.weights = arrays["weights"]
        self.priors = arrays["priors"]

    @classmethod
    def load(cls, langs: tuple[str, ...], folder: Path | None = None) -> LanguageModel:
        """The model for ``langs`` (those py3langid knows), unpacked into ``folder`` once."""
        import numpy as np

        folder = folder if folder is not None else cache_folder()
        if folder is None:
            return cls(*_unpack(langs))
        where = folder / f"langid-{version('py3langid')}-{'-'.join(sorted(langs))}"
        try:
            known = tuple((where / "langs.txt").read_text("utf-8").split())
            arrays = {f: np.load(where / f"{f}.npy", mmap_mode="r") for f in _FILES}
        except (OSError, ValueError):
            known, arrays = _unpack(langs)
            _save(where, known, arrays)
        return cls(known, arrays)

    def classify(self, text: str) -> tuple[str, float] | None:
        """The most likely language and its probability, or None for text without features."""
        ranked = self.ranked(text)
        return ranked[0] if ranked else None

    def ranked(self, text: str) -> list[tuple[str, float]]:
        """Every language with its probability, the most likely first; empty for text without
        features."""
        import numpy as np

        data = text.encode()
        nextmove, rowbase = self.nextmove, self.rowbase
        states = []
        state = 0
        for byte in data:
            state = nextmove[rowbase[state] + byte]
            states.append(state)
        counts = Counter(map(self.output.__getitem__, states))
        counts.pop(-1, None)  # states that complete no feature
        if not counts:
            return []
        keys = np.fromiter(counts, dtype=np.intp, count=len(counts))
        found = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
        scores = (self.priors + np.log1p(found) @ self.weights[keys]).tolist()
        # The model's own calibration: temperature sqrt(bytes), then softmax.
        scale = 1.0 / math.sqrt(len(data))
        best = max(scores)
        likeness = [math.exp((score - best) * scale) for score in scores]
        total = sum(likeness)
        order = sorted(range(len(scores)), key=scores.__getitem__, reverse=True)
        return [(self.langs[i], likeness[i] / total) for i in order]


def _unpack(langs: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, Any]]:
    import numpy as np
    from py3langid.langid import MODEL_DIR, MODEL_FILE
    from py3langid.modelio import load_model

    ptc, pc, classes, nextmove, rows, output = load_model(MODEL_DIR / MODEL_FILE)
    chosen = [index for index, lang in enumerate(classes) if lang in langs or langs == EVERY]
    arrays = {
        "nextmove": np.frombuffer(nextmove, dtype=np.int32),
        "rowbase": np.asarray(rows, dtype=np.int64) << 8,
        "output": np.asarray(output, dtype=np.int32),
        "weights": np.ascontiguousarray(ptc[:, chosen], dtype=np.float64),
        "priors": np.asarray(pc[chosen], dtype=np.float64),
    }
    return tuple(classes[index] for index in chosen), arrays


def _save(where: Path, langs: tuple[str, ...], arrays: dict[str, Any]) -> None:
    """Write the unpacked model beside its final name, then rename: a reader never sees half
    of it. A cache that cannot be written only costs the next run the unpacking again."""
    import numpy as np

    try:
        with staged_folder(where) as tmp:
            for name, array in arrays.items():
                np.save(tmp / f"{name}.npy", array)
            (tmp / "langs.txt").write_text(" ".join(langs), "utf-8")
    except OSError:
        pass  # the disk is full, or another process renamed first: either way, go on


@cache
def _model(langs: tuple[str, ...]) -> LanguageModel | None:
    model = LanguageModel.load(langs)
    return model if len(model.langs) >= 2 else None


# The commonest characters whose two forms differ, Simplified then Traditional, pair by pair:
# which forms a Chinese text uses tells its script.
_SIMPLIFIED = (
    "这们个为说时会对国发经过现还进长问开关实应该从动电数据"
    "网络业产务资费价节点与单无处争础设计规划较买卖购术标准"
)
_TRADITIONAL = (
    "這們個為說時會對國發經過現還進長問開關實應該從動電數據"
    "網絡業產務資費價節點與單無處爭礎設計規劃較買賣購術標準"
)


def written_language(lang: str, text: str) -> str:
    """``lang`` as the model gives it, with the script where the model cannot tell it: Chinese
    in Traditional characters is "zh-Hant" (Taiwan's, Hong Kong's), in Simplified "zh"."""
    if lang != "zh":
        return lang
    traditional = sum(map(text.count, _TRADITIONAL))
    return "zh-Hant" if traditional > sum(map(text.count, _SIMPLIFIED)) else lang


def identify(text: str, langs: tuple[str, ...]) -> tuple[str, float] | None:
    """The model's guess among ``langs`` (those it knows; ``EVERY``: all of them), or None if
    it cannot tell."""
    model = _model(tuple(sorted(langs)))
    return model.classify(text) if model is not None and text.strip() else None


def likeliest(text: str, langs: tuple[str, ...], sure: float, most: int) -> list[str]:
    """The fewest of the model's likeliest languages among ``langs`` whose probabilities
    together reach ``sure``, the likeliest first; empty if that takes more than ``most``.
    Close languages (Indonesian and Malay, say) share the model's confidence: their texts
    differ in few words, and something else, a date's month name, can tell them apart."""
    model = _model(tuple(sorted(langs)))
    if model is None or not text.strip():
        return []
    chosen, mass = [], 0.0
    for lang, probability in model.ranked(text)[:most]:
        chosen.append(lang)
        mass += probability
        if mass >= sure:
            return chosen
    return []
