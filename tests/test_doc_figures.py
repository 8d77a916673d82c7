"""Every figure the README and the docs quote is read from a result file that the same section names.

A document is split into sections at its Markdown headings (``#`` to ``####``). A section names its result files by
linking them (``[result](../benchmarks/results/x.md)``), by writing their path or file name
(``benchmarks/results/x.json``, ``env_throughput.md``) or in a ``<!-- source: path, path -->`` comment. Every figure
of the section's prose and tables must occur in the text of one of those files:

- a figure is a decimal number (``0.157``, ``+1.276``, ``22.0``), a number with thousands separators (``5,031``), a
  percentage (``24%``, ``17-41%``) or, in a table row, any number; both ends of a range (``0.400-0.434``) count;
- signs and thousands separators are ignored; the file may print the value with the same number of decimals or with
  more that round to it (``0.15712`` matches ``0.157``; a JSON float, printed at full precision, also matches the
  same value with trailing zeros); a percentage may also be a fraction in the file (``0.24`` for ``24%``);
- skipped: fenced code blocks, inline code spans, link targets, HTML comments, headings, quoted examples
  (``"$978,000"``), version strings (``3.11.7``), scientific notation (settings such as learning rates), numbers
  glued to letters (``EDO-v0``, ``300k``, ``SmolLM2-135M``), machine classes (``2-core x86-64``), integers in prose,
  the settings in ``SETTINGS`` and a table right below a ``<!-- settings: where they are declared -->`` comment
  (budgets, not measurements).

A section that quotes figures but names no result file fails, and so does a named result file that does not exist.
Each figure that is a timing (a number of seconds, milliseconds, microseconds, hours or steps per second) must sit in
a section that names the load it was measured under (``load average``, an idle machine): absolute times on a shared
machine move with the load, ratios measured in the same run (``0.157x``) do not.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, InvalidOperation
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESULT_DIRS = ("benchmarks/results", "tools/results")


def documents(root: Path = REPO) -> list[Path]:
    """The README, every page of ``docs/`` and the READMEs of ``benchmarks/`` and ``tools/``."""
    candidates = [
        root / "README.md",
        *sorted((root / "docs").glob("*.md")),
        root / "benchmarks/README.md",
        root / "tools/README.md",
    ]
    return [path for path in candidates if path.is_file()]


#: Numbers that are settings of an env, a command or a study, not measurements: (pattern, reason). The pattern is
#: matched on the raw text (code spans included, so that it can name the setting); its named groups (or the whole
#: match when it has none) are left out of the check.
SETTINGS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"planner error rate (?P<v>\d\.\d+)|error_rate` \((?P<v2>\d\.\d+)"),
        "the registered ids' planner error rates (edo_gym's registration), a setting of each id",
    ),
    (re.compile(r"Python (?P<v>3\.\d+)\+"), "the lowest Python version the package installs on"),
    (re.compile(r">= (?P<v>0\.\d+) \(`entity_link_threshold`\)"), "EDOConfig's entity-linking threshold, a setting"),
    (re.compile(r"(?P<v>3,000) for EDO-v0\)"), "EDO-v0's token budget, a setting of the id"),
    (
        re.compile(r"(?P<v>2,000)(?=\s(?:recorded\s)?(?:`\w+`\s)?episodes)"),
        "the warm start's dataset size (TrainConfig's default), a setting",
    ),
    (re.compile(r"one call and\s(?P<v>0\.6) s through"), "the latency the greedy router is charged per decision, a setting"),
    (re.compile(r"target(?: of| >=)? (?P<v>\d\.\d+x?)\b"), "a benchmark's target, set in its script, not measured"),
    (re.compile(r"ent_coef`? (?P<v>0\.\d+)\b"), "an entropy coefficient: a setting"),
)
#: An HTML comment that marks the table right below it as settings (budgets, sizes), not measurements; it must say
#: where they are declared, e.g. ``<!-- settings: the budgets each study declares (benchmarks/study_*.py) -->``.
_SETTINGS_TABLE = re.compile(r"<!--\s*settings:\s*\S[^>]*-->[ \t]*\n(?:[ \t]*\|[^\n]*(?:\n|$))+")
#: Quoted text is an example of what a reply or a user may write ("$978,000", "4 weeks"), not a figure.
_QUOTED = re.compile(r'"[^"\n]*"|\u201c[^\u201d\n]*\u201d')

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\n[ \t]*\n).)+?\1", re.S)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_LINK_TARGET = re.compile(r"\]\([^)\s]*\)")
_URL = re.compile(r"<?https?://[^\s)>]+>?")
_VERSION = re.compile(r"(?<![\w.])v?\d+(?:\.\d+){2,}(?![\w.]|\.\d)")
_SCIENTIFIC = re.compile(r"(?<![\w.])\d+(?:\.\d+)?e[-+]?\d+\b", re.I)
#: Names with a dash before a number: a machine class, not a figure.
_IDENTIFIER = re.compile(r"\bx86[-_]64\b|\b\d+-core\b")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{3,}")
#: A figure: an optional sign, digits with thousands separators or an optional decimal part, an optional percent
#: sign or ratio suffix; never part of a word, an identifier or a longer dotted number.
_FIGURE = re.compile(
    r"(?<![\w.])(?P<sign>[+\-\u2212])?(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
    r"(?P<suffix>\s?%|x(?![\w]))?(?![\w]|\.\d|,\d{3})"
)
#: An integer directly before a percentage range's dash ("17-41%"): a percentage too.
_PERCENT_RANGE_START = re.compile(r"^\s?-\s?\d+(?:\.\d+)?\s?%")
#: A number of any form in a result file: with thousands separators in Markdown, in scientific notation in JSON
#: (whose numbers never have separators, so that a compact list such as ``[5,100,200]`` stays three numbers).
_FILE_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\d)|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_JSON_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_RESULT_PATH = re.compile(r"(?:\.\./)*(?:benchmarks|tools)/results/[\w./-]*?[\w-]\.(?:md|json)\b")
_FILE_NAME = re.compile(r"(?<![\w/.-])[\w-]+\.(?:md|json)\b")
#: A timing: a figure followed by a unit of time or a rate per second.
_TIME_UNIT = re.compile(
    r"^\s?(?:s|ms|us|µs|min|minutes?|h|hours?|run-hours|node-hours|core-hours|seconds?)\b|^\s?(?:steps|episodes|tokens)/s\b"
)
_LOAD = re.compile(r"load average|idle (?:machine|cores)|on \d+ idle|nothing else (?:ran|runs)", re.I)


@dataclass
class Figure:
    """One figure of a section: its text as printed, its value, its decimals, the line it is on."""

    text: str
    value: Decimal
    decimals: int
    percent: bool
    timing: bool
    line: int


@dataclass
class Section:
    """The text under one heading, fenced code removed, with the result files it names."""

    heading: str
    first_line: int
    text: str = ""
    line_numbers: list[int] = field(default_factory=list)
    sources: list[Path] = field(default_factory=list)
    missing_sources: list[str] = field(default_factory=list)


def split_sections(text: str) -> list[Section]:
    """Split a Markdown document at its ``#``..``####`` headings; fenced code blocks are dropped, deeper headings kept
    as lines whose numbers are skipped."""
    sections = [Section(heading="(before the first heading)", first_line=1)]
    lines: list[list[tuple[int, str]]] = [[]]
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        opening = _FENCE.match(line)
        if fence is not None:
            if opening and opening.group(1) == fence:
                fence = None
            continue
        if opening:
            fence = opening.group(1)
            continue
        heading = _HEADING.match(line)
        if heading and len(heading.group(1)) <= 4:
            sections.append(Section(heading=heading.group(2), first_line=number))
            lines.append([])
            continue
        lines[-1].append((number, "" if heading else line))
    for section, body in zip(sections, lines, strict=True):
        section.text = "\n".join(line for _, line in body)
        section.line_numbers = [number for number, _ in body]
    return [section for section in sections if section.text.strip()]


def _resolve(name: str, document: Path, root: Path) -> list[Path]:
    """The result files a path or a bare file name in ``document`` stands for (none when it is no result file)."""
    if "/" in name:
        stripped = re.sub(r"^(?:\.\./)+", "", name)
        for candidate in (root / stripped, (document.parent / name).resolve()):
            if candidate.is_file():
                return [candidate]
        return []
    return sorted(path for folder in RESULT_DIRS for path in (root / folder).rglob(name) if path.is_file())


def find_sources(section: Section, document: Path, root: Path) -> None:
    """Fill ``section.sources`` with the result files the section names, ``section.missing_sources`` with the result
    paths it names that do not exist."""
    found: list[Path] = []
    for match in _RESULT_PATH.finditer(section.text):
        resolved = _resolve(match.group(0), document, root)
        if resolved:
            found += resolved
        else:
            section.missing_sources.append(match.group(0))
    for match in _FILE_NAME.finditer(section.text):
        if match.group(0) != "README.md":  # a folder's README describes results, it holds none
            found += _resolve(match.group(0), document, root)
    for link in re.finditer(r"\]\(([^)\s#]+\.(?:md|json))", section.text):
        target = (document.parent / link.group(1)).resolve()
        if target.is_file() and any(target.is_relative_to((root / folder).resolve()) for folder in RESULT_DIRS):
            found.append(target)
    section.sources = list(dict.fromkeys(found))


def _mask(text: str, spans: list[tuple[int, int]]) -> str:
    chars = list(text)
    for start, end in spans:
        for index in range(start, end):
            if chars[index] != "\n":
                chars[index] = " "
    return "".join(chars)


def _setting_spans(text: str) -> list[tuple[int, int]]:
    spans = []
    for pattern, _reason in SETTINGS:
        for match in pattern.finditer(text):
            groups = [name for name, value in match.groupdict().items() if value is not None]
            spans += [match.span(name) for name in groups] if groups else [match.span()]
    return spans


def extract_figures(section: Section) -> list[Figure]:
    """The figures of a section's prose and tables (see the module's docstring for what counts and what is skipped)."""
    text = section.text
    skipped = _setting_spans(text)
    for pattern in (_SETTINGS_TABLE, _CODE_SPAN, _COMMENT, _LINK_TARGET, _URL, _VERSION, _SCIENTIFIC, _IDENTIFIER):
        skipped += [match.span() for match in pattern.finditer(text)]
    masked = _mask(text, skipped)
    # quotes are paired outside code only (a code span may hold a lone quote)
    masked = _mask(masked, [match.span() for match in _QUOTED.finditer(masked)])
    figures = []
    offset = 0
    for index, line in enumerate(masked.split("\n")):
        original = text[offset : offset + len(line)]
        offset += len(line) + 1
        if _TABLE_SEPARATOR.match(original):
            continue
        in_table = original.lstrip().startswith("|")
        for match in _FIGURE.finditer(line):
            number, suffix = match.group("num"), (match.group("suffix") or "").strip()
            after = line[match.end() :]
            percent = suffix == "%" or (not suffix and bool(_PERCENT_RANGE_START.match(after)))
            if "." not in number and "," not in number and not percent and not in_table:
                continue
            plain = number.replace(",", "")
            figures.append(
                Figure(
                    text=match.group(0).strip(),
                    value=Decimal(plain),
                    decimals=len(plain.split(".")[1]) if "." in plain else 0,
                    percent=percent,
                    timing=suffix != "x" and bool(_TIME_UNIT.match(after)),
                    line=section.line_numbers[index],
                )
            )
    return figures


@cache
def file_numbers(path: Path) -> tuple[frozenset[tuple[Decimal, int]], bool]:
    """Every number in a result file's text as (value, decimals printed), and whether it is JSON (whose floats are
    printed at full precision, so a value with fewer decimals is exact)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    numbers = set()
    for match in (_JSON_NUMBER if path.suffix == ".json" else _FILE_NUMBER).finditer(text):
        plain = match.group(0).replace(",", "")
        try:
            value = Decimal(plain)
        except InvalidOperation:
            continue
        mantissa = re.split(r"[eE]", plain)[0]
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        if "e" in plain.lower():
            decimals = max(decimals - int(re.split(r"[eE]", plain)[1]), 0)
        numbers.add((value, decimals))
    return frozenset(numbers), path.suffix == ".json"


def _rounds_to(value: Decimal, decimals: int, target: Decimal) -> bool:
    quantum = Decimal(1).scaleb(-decimals)
    return any(value.quantize(quantum, rounding=mode) == target for mode in (ROUND_HALF_UP, ROUND_HALF_EVEN))


def occurs_in(figure: Figure, path: Path) -> bool:
    """Whether ``figure`` is printed in ``path``, at its precision or at a higher one that rounds to it."""
    numbers, exact_floats = file_numbers(path)
    for value, decimals in numbers:
        # a percentage may be printed as one or kept as a fraction (0.24 for 24%), with two decimals fewer
        candidates = [(value, decimals), (value * 100, decimals - 2)] if figure.percent else [(value, decimals)]
        for candidate, places in candidates:
            if places >= figure.decimals and _rounds_to(candidate, figure.decimals, figure.value):
                return True
            if exact_floats and places < figure.decimals and candidate == figure.value:
                return True
    return False


def check_document(document: Path, root: Path = REPO) -> list[str]:
    """Every disagreement of ``document`` with its result files, one message each."""
    relative = document.relative_to(root)
    problems = []
    for section in split_sections(document.read_text(encoding="utf-8")):
        find_sources(section, document, root)
        where = f"{relative}, section {section.heading!r} (line {section.first_line})"
        for missing in section.missing_sources:
            problems.append(f"{where}: names the result file {missing}, which does not exist")
        figures = extract_figures(section)
        searched = ", ".join(str(path.relative_to(root)) for path in section.sources)
        timings = [figure for figure in figures if figure.timing]
        if timings and not _LOAD.search(_mask(section.text, [m.span() for m in _COMMENT.finditer(section.text)])):
            shown = ", ".join(f"{figure.text} (line {figure.line})" for figure in timings)
            problems.append(f"{where}: timings {shown} name no load average (or quote a ratio measured in the same run)")
        for figure in figures:
            if not section.sources:
                problems.append(f"{where}: figure {figure.text} (line {figure.line}) names no result file")
            elif not any(occurs_in(figure, path) for path in section.sources):
                problems.append(
                    f"{where}: figure {figure.text} (line {figure.line}) is in none of the files searched: {searched}"
                )
    return problems


@pytest.mark.parametrize("document", documents(), ids=lambda path: str(path.relative_to(REPO)))
def test_every_figure_is_read_from_a_result_file_the_section_names(document: Path) -> None:
    problems = check_document(document)
    assert not problems, (
        f"{len(problems)} figure(s) of {document.relative_to(REPO)} disagree with their sources:\n" + "\n".join(problems)
    )


def _write(root: Path, relative: str, text: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_the_check_accepts_figures_its_sources_hold_and_rounded_ones(tmp_path: Path) -> None:
    _write(tmp_path, "benchmarks/results/x.md", "success 0.15712, return +1.276, 5031 steps/s at load average 5.4; 0.24 hit\n")
    _write(tmp_path, "benchmarks/results/y.json", json.dumps({"ratio": 0.5, "cold_s": 21.97}))
    doc = _write(
        tmp_path,
        "docs/page.md",
        '# Page\n\nNo figures here, `--lr 1.5` in code, EDO-v0 and 300k steps, version 3.11.7, a reply such as "$978,000".\n\n'
        "## Results\n\n[result](../benchmarks/results/x.md): success 0.157, return -1.276, 5,031 steps/s (load average\n"
        "5.4), 24% hit; `y.json` has 0.50 and a cold start of 22.0 s.\n\n"
        "| measure | value |\n|---|---|\n| steps/s | 5031 |\n\n"
        "<!-- settings: the budgets the study declares -->\n| tier | steps |\n|---|---|\n| quick | 12,000 |\n",
    )
    assert check_document(doc, root=tmp_path) == []


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ("[result](../benchmarks/results/x.md): success 0.158.", "figure 0.158 (line 3) is in none of the files searched"),
        ("success 0.157, from nowhere.", "figure 0.157 (line 3) names no result file"),
        ("[result](../benchmarks/results/gone.md) says 0.157.", "names the result file ../benchmarks/results/gone.md"),
        ("<!-- source: benchmarks/results/x.md -->\n| a | 7 |", "figure 7 (line 4) is in none of the files searched"),
        ("[result](../benchmarks/results/x.md): 12% of steps.", "figure 12% (line 3) is in none of the files searched"),
        ("[result](../benchmarks/results/x.md): cold start 2.5 s.", "timings 2.5 (line 3) name no load average"),
        ("[result](../benchmarks/results/x.md)\n\n| tier | steps |\n|---|---|\n| quick | 12,000 |", "figure 12,000 (line 7)"),
    ],
)
def test_the_check_flags_a_figure_its_sources_do_not_hold(tmp_path: Path, section: str, expected: str) -> None:
    _write(tmp_path, "benchmarks/results/x.md", "success 0.15712, 2.5 s at some load, 0.24 hit, a | 8 |\n")
    doc = _write(tmp_path, "docs/page.md", f"## Results\n\n{section}\n")
    problems = check_document(doc, root=tmp_path)
    assert any(expected in problem and "docs/page.md, section 'Results'" in problem for problem in problems), problems
