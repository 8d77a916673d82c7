"""Check that no tracked text speaks of how the repository was developed.

Documentation, code, comments, docstrings, file names and result files describe the project as it is: a figure
cites the command that reproduces it and the machine class, not the run, the person, the issue or the commit that
produced it. History belongs in CHANGELOG.md (per version, without run labels or issue numbers) and in git. Flagged
in every tracked text file, result folders (``benchmarks/results/``, ``tools/results/``) included:

- run labels (the word for a session's end followed by its number, spaced, hyphenated or as a name suffix) in text
  and in file or directory names;
- talk of the working session or of who measured what (a run or a measurement told in the first person, singular or
  plural);
- issue or pull-request numbers used as provenance (the word followed by a number, several numbers joined by slashes,
  a hash sign and a number): a reader has no tracker to open;
- accounts of other work on the machine (jobs or agents said to share the cores): a figure states its machine class
  and, where it matters, the load average;
- absolute paths of a development machine (a workspace folder at the root, the root user's or another user's home,
  temporary directories named by ``mkdtemp``);
- commit hashes given as provenance (``at 1a2b3c4``, ``commit 1a2b3c4``, ``(revision 1a2b3c4)``), in result files'
  Markdown too; a result's JSON may hold a machine-readable revision field (``"git_revision": ...``), which no rule
  reads, since a key and its value are not prose.

Also bare abbreviated hashes in Markdown prose, and outside result files branches as provenance and clock times in UTC
(a figure's date is in its result file).

Usage: ``python -m tools.check_repository_text`` (run by ``make lint``); exits 1 and lists every finding.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: A hexadecimal string with at least one digit and one letter: an abbreviated or full commit hash (7-40 characters).
_HEX = r"(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]"
_HASH = _HEX + "{7,40}"
#: Jobs, agents or people that share the machine, as a development account names them.
_OTHERS = r"(?:agents|jobs|users|sessions)"

#: Rules applied to every tracked text file, result folders included: (name, pattern). Whitespace may be a line break,
#: so that a phrase split over two lines of a paragraph is found too.
EVERYWHERE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("run label", re.compile(r"(?<![a-z])stop(?:[_-]|\s+)?\d+\b", re.I)),
    ("session talk", re.compile(r"\b(this|that|last|previous|earlier)\s+session\b|\bsession\s+\d+\b", re.I)),
    (
        "who measured",
        re.compile(r"\b(a\s+run|runs|measurements?)\s+of\s+mine\b|\bI\s+(measured|ran|wrote|timed|tried|found)\b"),
    ),
    (
        "who measured",
        re.compile(
            r"\bour\s+(?:own\s+)?(?:runs?|measurements?|experiments?|sweeps?|machines?|hosts?)\b"
            r"|\bwe\s+(?:measured|ran|re-?ran|timed|tried|observed|recorded|benchmarked)\b"
            r"|\bwe\s+(?:found|saw)\s+(?:that|a|an|the|\d)",
            re.I,
        ),
    ),
    (
        "issue number",
        re.compile(
            r"\b(?:issues?|tickets?|pull\s+requests?|PRs?)\s+#?\d+(?:\s*(?:/|,|&|and)\s*#?\d+)*\b"
            r"|\b(?:see|per|fix(?:es|ed)?|close[sd]?|resolve[sd]?|bug)\s+#\d+\b|\(#\d+\)|\bGH-\d+\b",
            re.I,
        ),
    ),
    (
        "other work on the machine",
        re.compile(
            rf"\b(?:shared|loaded|load)\s+(?:with|from|by)\s+(?:\d+\s+|several\s+|many\s+|the\s+)?other\s+{_OTHERS}\b"
            rf"|\bother\s+{_OTHERS}\s+(?:were\s+|was\s+|are\s+)?(?:running|using|loading|loaded|sharing)\b"
            rf"|\b(?:while|with)\s+\d+\s+other\s+{_OTHERS}\b",
            re.I,
        ),
    ),
    (
        "machine path",
        re.compile(r"(?<![\w.~/-])/(?:work|root)/|(?<![\w.~/-])/home/[A-Za-z_][\w.-]*/|(?<![\w.~/-])/tmp/tmp[a-z0-9_]{6,}"),
    ),
    ("commit as provenance", re.compile(rf"\b(?i:at|on|commit|revision|before|after|base|head)\s+`?{_HASH}\b")),
    ("commit as provenance", re.compile(r"\b(?i:commit)\s+`?[0-9a-f]{7,40}\b")),
)
#: Rules for result files only: a result names no temporary directory of the run that wrote it (it is gone).
IN_RESULTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("temporary path", re.compile(r"(?<![\w.~/-])/tmp/(?!tmp[a-z0-9_]{6,})")),
)
#: Rules for documentation and code only (result files record their date as metadata).
OUTSIDE_RESULTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("branch as provenance", re.compile(r"\b(on|of|in) branch\s+[\w./-]+")),
    ("clock time", re.compile(r"\b\d{2}:\d{2}(-\d{2}:\d{2})?\s+UTC\b")),
)
#: Rules for prose (Markdown, result files' included): a bare abbreviated commit hash, e.g. "(a1948e5)".
PROSE: tuple[tuple[str, re.Pattern[str]], ...] = (("commit hash", re.compile(rf"(?<![\w/.#-]){_HEX}{{7,10}}(?![\w/.-])")),)
#: Rules for tracked paths (file and directory names).
PATH_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("run label in a path", re.compile(r"(?<![a-z])stop[ _-]?\d+", re.I)),
    ("commit hash in a path", re.compile(rf"_{_HASH}(?=[_./]|$)")),
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
    rules = EVERYWHERE + (IN_RESULTS if in_results else OUTSIDE_RESULTS)
    if path.endswith(".md"):
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
