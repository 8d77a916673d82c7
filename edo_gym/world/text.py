"""Answer text: normalisation, grading, fuzzy entity linking and format drift.

Grading must let a real LLM pass: :func:`normalize` strips what a model wraps an answer in (case, punctuation,
articles, whitespace, ``"The answer is ..."``, ``"Answer:"``, hedges such as ``"probably ... I think"``), and
:func:`answers_match` also accepts the aliases the world lists for an entity (``"Quell, Mara"`` for
``"Mara Quell"``). A near-miss entity (``"Mara Quill"``) does not match. Written replies are scored by token F1
(:func:`token_f1`) against the gold reply.

Downstream parsing of an upstream answer is *fuzzy entity linking* (:class:`EntityLinker`): the closest known
entity name above a similarity threshold, so that a reply in a drifted format can still be used by the next
worker, and a reply naming the wrong entity propagates as a real error would.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

ABSTAIN_TEXT = "I don't know."
_SPACE = re.compile(r"\s+")
_WRAPPERS = re.compile(
    r"^(?:(?:the\s+)?(?:final\s+)?answer\s+is|(?:final\s+)?answer\s*[:\-]|result\s*[:\-]|it\s+is|it's|that\s+is|"
    r"i\s+think|i\s+believe|probably|most\s+likely|likely)\s*[:,\-]?\s*",
    re.IGNORECASE,
)
_TRAILERS = re.compile(r"(?:,?\s*(?:i\s+think|i\s+believe|probably|if\s+i\s+recall\s+correctly))+\s*$", re.IGNORECASE)
_PUNCT = re.compile(r"[\"'`*_()\[\]{}!?.;:,]+")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b", re.IGNORECASE)
_TOKEN = re.compile(r"[a-z0-9]+")
_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)?")

#: Drift styles a worker may answer in. All but ``abbreviated`` are undone by :func:`normalize` or an alias.
DRIFTS: tuple[str, ...] = ("upper", "prefix", "trailing_period", "sentence", "reordered", "hedged", "abbreviated")


@lru_cache(maxsize=200_000)
def normalize(text: str) -> str:
    """Canonical form for grading and parsing: wrappers, hedges, punctuation and articles removed, lower case."""
    text = text.strip()
    for _ in range(3):  # "Answer: probably X" peels in two rounds
        stripped = _WRAPPERS.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    text = _TRAILERS.sub("", text)
    text = _PUNCT.sub(" ", text.replace("'s ", " "))
    text = _ARTICLES.sub(" ", text)
    return _SPACE.sub(" ", text).strip().lower()


def tokens(text: str) -> list[str]:
    """Lower-case alphanumeric tokens of ``text``."""
    return _TOKEN.findall(text.lower())


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD-style token F1 between two texts after normalisation (1.0 for two empty texts)."""
    p, g = tokens(normalize(prediction)), tokens(normalize(gold))
    if not p and not g:
        return 1.0
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def answers_match(answer: str, gold: str, aliases: Iterable[str] = ()) -> bool:
    """``answer`` names ``gold`` (or one of its ``aliases``) after normalisation; no fuzzy matching."""
    norm = normalize(answer)
    if not norm:
        return False
    if norm == normalize(gold):
        return True
    return any(norm == normalize(a) for a in aliases)


def first_number(text: str) -> int | None:
    """The first integer written in ``text`` (``"1,234"`` -> 1234), or ``None``."""
    m = _NUMBER.search(text.replace(",", ""))
    if m is None:
        return None
    try:
        return int(float(m.group()))
    except ValueError:
        return None


@lru_cache(maxsize=200_000)
def similarity(a: str, b: str) -> float:
    """Character similarity of two normalised strings in [0, 1] (``difflib`` ratio)."""
    if a == b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


class EntityLinker:
    """Links free text to the closest known entity name (fuzzy, thresholded).

    :param names: canonical entity names.
    :param aliases: extra surface forms, mapping alias -> canonical name.
    :param threshold: minimum :func:`similarity` of the normalised text to a name for a fuzzy link.
    """

    def __init__(self, names: Iterable[str], aliases: dict[str, str] | None = None, threshold: float = 0.85) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"entity linking threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold
        self.exact: dict[str, str] = {}
        for name in names:
            self.exact.setdefault(normalize(name), name)
        for alias, name in (aliases or {}).items():
            self.exact.setdefault(normalize(alias), name)
        self._keys = sorted(self.exact)
        self._by_first: dict[str, list[str]] = {}
        for key in self._keys:
            self._by_first.setdefault(key[:1], []).append(key)

    def link(self, text: str) -> str | None:
        """The canonical entity ``text`` names, or ``None`` when nothing is similar enough."""
        norm = normalize(text)
        name = self.exact.get(norm)
        if name is None and norm:
            # candidates sharing the first character (a drift never changes it), then the best ratio above threshold
            best, best_score = None, self.threshold
            for key in self._by_first.get(norm[:1], ()):
                if abs(len(key) - len(norm)) > max(3, len(norm) // 4):
                    continue
                score = similarity(norm, key)
                if score >= best_score:
                    best, best_score = key, score
            name = self.exact[best] if best is not None else None
        return name


def drift(text: str, style: str) -> str:
    """``text`` written in drifted format ``style`` (one of ``DRIFTS``)."""
    if style == "upper":
        return text.upper()
    if style == "prefix":
        return f"Answer: {text}"
    if style == "trailing_period":
        return f"{text}."
    if style == "sentence":
        return f"The answer is {text}."
    if style == "reordered":
        words = text.split()
        return f"{words[-1]}, {' '.join(words[:-1])}" if len(words) > 1 else text
    if style == "hedged":
        return f"probably {text}, I think"
    if style == "abbreviated":
        words = text.split()
        return f"{words[0][0]}. {' '.join(words[1:])}" if len(words) > 1 else text[: max(1, len(text) - 2)]
    raise ValueError(f"unknown drift style {style!r}; allowed: {list(DRIFTS)}")
