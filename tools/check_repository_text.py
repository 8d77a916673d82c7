"""Check that no tracked text speaks of how the repository was developed.

Documentation, code, comments, docstrings, file names and result files describe the project as it is: a figure
cites the command that reproduces it and the machine class, not the run, the person or the commit that produced it.
History belongs in CHANGELOG.md (without run labels) and in git. Flagged:

- run labels (the word for a session's end followed by its number, spaced, hyphenated or as a name suffix) in text
  and in file or directory names;
- talk of the working session or of who measured what (first-person accounts of runs and measurements);
- scratch paths of a development machine (``/work/scratch/...``) in recorded commands;
- commit hashes given as provenance (``at 1a2b3c4``, ``commit 1a2b3c4``) outside result files, whose ``revision`` field
  the benchmark scripts write as machine metadata, like the date;
- clock times in UTC outside result files (a figure's date is in its result file).

Usage: ``python tools/check_repository_text.py`` (run by ``make lint``); exits 1 and lists every finding.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: Rules applied to every tracked text file: (name, pattern). Whitespace may be a line break, so that a phrase split
#: over two lines of a paragraph is found too.
EVERYWHERE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("run label", re.compile(r"(?<![a-z])stop(?:[_-]|\s+)?\d+\b", re.I)),
    ("session talk", re.compile(r"\b(this|that|last|previous|earlier)\s+session\b|\bsession\s+\d+\b", re.I)),
    (
        "who measured",
        re.compile(r"\b(a\s+run|runs|measurements?)\s+of\s+mine\b|\bI\s+(measured|ran|wrote|timed|tried|found)\b"),
    ),
    ("scratch path", re.compile(r"/work/scratch/|/work/main/")),
)
#: Rules for documentation and code only (result files record their revision and date as metadata).
OUTSIDE_RESULTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "commit as provenance",
        re.compile(r"\b(at|on|commit|revision|before|after)\s+`?(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"),
    ),
    ("commit as provenance", re.compile(r"\bcommit\s+`?[0-9a-f]{7,40}\b")),
    ("branch as provenance", re.compile(r"\b(on|of|in) branch\s+[\w./-]+")),
    ("clock time", re.compile(r"\b\d{2}:\d{2}(-\d{2}:\d{2})?\s+UTC\b")),
)
#: Rules for prose (Markdown outside result files): a bare abbreviated commit hash, e.g. "(a1948e5)".
PROSE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("commit hash", re.compile(r"(?<![\w/.#-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,10}(?![\w/.-])")),
)
#: Rules for tracked paths (file and directory names).
PATH_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("run label in a path", re.compile(r"(?<![a-z])stop[ _-]?\d+", re.I)),
    ("commit hash in a path", re.compile(r"_(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?=[_./]|$)")),
)
RESULT_DIRS = ("benchmarks/results/", "tools/results/")
BINARY_SUFFIXES = (".png", ".jpg", ".gif", ".zip", ".gz", ".sqlite", ".sqlite3", ".gguf", ".so", ".pt", ".npy", ".npz")
#: Files allowed to hold the patterns: this checker and its test spell them out.
ALLOWED = {"tools/check_repository_text.py", "tests/tools/test_check_repository_text.py"}


def tracked_files(repo: Path = REPO) -> list[str]:
    """Paths of the files git tracks in ``repo`` (relative, ``/``-separated)."""
    proc = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, text=True, check=True)
    return [p for p in proc.stdout.split("\0") if p]


def check_text(path: str, text: str) -> list[str]:
    """Findings in one file's ``text``, each as ``path:line: rule: excerpt``."""
    in_results = path.startswith(RESULT_DIRS)
    rules = EVERYWHERE if in_results else EVERYWHERE + OUTSIDE_RESULTS
    if path.endswith(".md") and not in_results:
        rules += PROSE
    findings = []
    for name, pattern in rules:
        for match in pattern.finditer(text):
            number = text.count("\n", 0, match.start()) + 1
            excerpt = " ".join(text[max(match.start() - 40, 0) : match.end() + 40].split())
            findings.append(f"{path}:{number}: {name}: ...{excerpt}...")
    return findings


def check_path(path: str) -> list[str]:
    """Findings in a tracked path's own name."""
    return [f"{path}: {name}" for name, pattern in PATH_RULES if pattern.search(path)]


def check(paths: Iterable[str], repo: Path = REPO) -> list[str]:
    """Every finding in ``paths`` (relative to ``repo``): their names, then the text of each text file."""
    findings: list[str] = []
    for path in paths:
        if path in ALLOWED:
            continue
        findings += check_path(path)
        if path.endswith(BINARY_SUFFIXES):
            continue
        try:
            data = (repo / path).read_bytes()
        except FileNotFoundError:  # deleted in the working tree, not yet in the index
            continue
        if b"\0" in data[:8192]:
            continue
        findings += check_text(path, data.decode("utf-8", errors="replace"))
    return findings


def main() -> int:
    findings = check(tracked_files())
    for finding in findings:
        print(finding)
    if findings:
        print(
            f"{len(findings)} finding(s): the repository must not speak of how it was developed (see this script's docstring)"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
