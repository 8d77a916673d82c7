"""The world's language: how questions, step instructions and documents are written, and how to read them back.

Everything an agent exchanges is text. This module renders that text from templates and parses it back:

- :func:`question` / :func:`parse_question`: a lookup question (``"Who is the mentor of Mara Quell?"``) or a
  merged two-hop question (``"What is the employer of the mentor of Mara Quell?"``); :func:`tier_window_question`
  asks about a membership tier's refund window (two inputs: the carrier and the tier);
- :func:`compute_instruction` / :func:`parse_compute`: ``"Compute the sum of these revenue figures ..."``;
- :func:`reply_instruction`: the write step of a support task;
- :func:`result_notes` / :func:`parse_note`: the results found so far, as a replan request carries them;
- :func:`parse_document`: the ``(subject, relation, value)`` a rendered document states, read from its text.

The simulated workers read requests and documents through these parsers (never through the fact table), and
the environment uses the same parsers to compute hidden ground truth for the oracle and the tests.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from edo_gym.world.generator import RELATIONS, TIER_WINDOW_QUESTION

#: Operation words of compute steps, as written in instructions.
OP_WORDS: dict[str, str] = {"sum": "the sum", "max": "the highest value"}
#: Retrieval queries of compute and write steps: guidance about the operation, not about the (numeric) inputs (a
#: lookup searches with its question).
OP_QUERIES: dict[str, str] = {
    "compute": "How is the combined revenue of several stores computed?",
    "write": "How should a reply about a refund window be worded?",
}
_PLACEHOLDER = re.compile(r"\{(\d+)\}")


def _phrase(relation: str, inner: str) -> str:
    from edo_gym.world.tasks import phrase

    return phrase(relation, inner)


def question(relations: tuple[str, ...], subject: str) -> str:
    """The question a lookup step asks about ``subject`` (one relation, or two for a merged step)."""
    if len(relations) == 1:
        return RELATIONS[relations[0]].question.format(x=subject)
    inner = subject
    for rel in relations:
        inner = _phrase(rel, inner)
    return f"What is {inner}?"


def tier_window_question(carrier: str, tier: str) -> str:
    """The question about a membership tier's refund window for deliveries by a carrier (a plan step writes both as
    placeholders, ``{2}`` and ``{3}``; filled in, it is the question of that tier's window relation)."""
    return TIER_WINDOW_QUESTION.format(t=tier, x=carrier)


#: How a replan request carries one result found so far: the step's instruction, as sent, and the answer, as written.
RESULT_NOTE = "{instruction} -> {answer}"


def result_notes(results: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """The results found so far as a replan request carries them (``LLMRequest.inputs``): ``(instruction, answer)``
    pairs in the order they came, the latest answer to each instruction, each as :data:`RESULT_NOTE`."""
    latest: dict[str, str] = {}
    for instruction, answer in results:
        latest.pop(instruction, None)
        latest[instruction] = answer
    return tuple(RESULT_NOTE.format(instruction=i, answer=a) for i, a in latest.items())


def parse_note(note: str) -> tuple[str, str]:
    """``(instruction, answer)`` of a :func:`result_notes` entry (``("", note)`` for other text)."""
    instruction, _, answer = note.rpartition(" -> ")
    return instruction, answer


def compute_instruction(op: str, refs: list[str]) -> str:
    """Instruction of a compute step over upstream answers ``refs`` (placeholders such as ``{1}`` or texts)."""
    if op not in OP_WORDS:
        raise ValueError(f"unknown compute op {op!r}; allowed: {sorted(OP_WORDS)}")
    return f"Compute {OP_WORDS[op]} of these revenue figures (in thousands): {', '.join(refs)}."


REPLY_INSTRUCTION = (
    "Write a one-sentence reply telling the customer how long they have to request a refund, given the refund window: {ref}."
)


def reply_instruction(ref: str) -> str:
    return REPLY_INSTRUCTION.format(ref=ref)


def fill(template: str, values: dict[int, str]) -> str:
    """Replace ``{k}`` placeholders (1-based step ids) with ``values[k]``; unknown ids are left as written."""
    return _PLACEHOLDER.sub(lambda m: values.get(int(m.group(1)), m.group(0)), template)


def placeholders(template: str) -> list[int]:
    """The 1-based step ids a template refers to, in order of first appearance."""
    out: list[int] = []
    for m in _PLACEHOLDER.finditer(template):
        k = int(m.group(1))
        if k not in out:
            out.append(k)
    return out


# -- parsing --------------------------------------------------------------------------------------------------
def _template_regex(template: str, groups: dict[str, str]) -> re.Pattern[str]:
    out = []
    for part in re.split(r"(\{[a-z]\})", template):
        if len(part) == 3 and part[0] == "{" and part[2] == "}":
            out.append(groups[part[1]])
        else:
            out.append(re.escape(part))
    return re.compile("^" + "".join(out) + "$", re.IGNORECASE)


_QUESTION_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (_template_regex(rel.question, {"x": r"(?P<x>.+?)"}), rel.name) for rel in RELATIONS.values()
]
_DOC_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (_template_regex(t, {"s": r"(?P<s>.+?)", "v": r"(?P<v>.+?)"}), rel.name)
    for rel in RELATIONS.values()
    for t in rel.templates
]
# phrase() forms: "the mentor of X", "the March revenue of the Alder store"
_PHRASE_PATTERNS: list[tuple[re.Pattern[str], str]] = []
for _rel in RELATIONS:
    _tmpl = _phrase(_rel, "\x00")
    _pre, _, _post = _tmpl.partition("\x00")
    _PHRASE_PATTERNS.append((re.compile("^" + re.escape(_pre) + r"(?P<x>.+)" + re.escape(_post) + "$", re.IGNORECASE), _rel))
_COMPUTE = re.compile(r"^Compute (?P<op>the sum|the highest value) of these revenue figures \(in thousands\): (?P<refs>.*)\.$")
_REPLY = re.compile("^" + re.escape(REPLY_INSTRUCTION).replace(re.escape("{ref}"), "(?P<ref>.*)") + "$")


@lru_cache(maxsize=100_000)
def parse_question(text: str) -> tuple[tuple[str, ...], str] | None:
    """``(relations, subject)`` of a lookup question written by :func:`question`, or ``None``."""
    text = text.strip()
    for pattern, rel in _QUESTION_PATTERNS:
        m = pattern.match(text)
        if m:
            return (rel,), m.group("x")
    if text.startswith("What is ") and text.endswith("?"):
        chain = _parse_phrase_chain(text[len("What is ") : -1])
        if chain is not None and len(chain[0]) >= 2:
            return chain
    return None


def parse_noun_phrase(text: str) -> tuple[tuple[str, ...], str] | None:
    """``(relations, subject)`` of a noun phrase written with :func:`edo_gym.world.tasks.phrase`, innermost relation
    first (``"the employer of the mentor of Mara Quell"`` -> ``(("mentor", "employer"), "Mara Quell")``), or ``None``."""
    return _parse_phrase_chain(text.strip())


def _parse_phrase_chain(text: str, depth: int = 0) -> tuple[tuple[str, ...], str] | None:
    if depth > 4:
        return None
    for pattern, rel in _PHRASE_PATTERNS:
        m = pattern.match(text)
        if m:
            inner = m.group("x")
            deeper = _parse_phrase_chain(inner, depth + 1)
            if deeper is not None:
                return deeper[0] + (rel,), deeper[1]
            return (rel,), inner
    return None


def parse_compute(text: str) -> tuple[str, tuple[str, ...]] | None:
    """``(op, input texts)`` of a compute instruction, or ``None``."""
    m = _COMPUTE.match(text.strip())
    if not m:
        return None
    op = "sum" if m.group("op") == "the sum" else "max"
    refs = tuple(r.strip() for r in m.group("refs").split(", ")) if m.group("refs").strip() else ()
    return op, refs


def parse_reply(text: str) -> str | None:
    """The refund-window text a reply instruction carries, or ``None``."""
    m = _REPLY.match(text.strip())
    return m.group("ref") if m else None


def parse_document(text: str) -> tuple[str, str, str] | None:
    """``(subject, relation, value)`` stated by a document's text, or ``None`` when no template matches."""
    for pattern, rel in _DOC_PATTERNS:
        m = pattern.match(text)
        if m:
            return m.group("s"), rel, m.group("v")
    return None
