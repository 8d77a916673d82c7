"""``tools/check_repository_text.py``: no tracked text speaks of how the repository was developed."""

from __future__ import annotations

import shutil

import pytest

from tools.check_repository_text import check, check_path, check_text, tracked_files


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to list the tracked files")
def test_no_tracked_file_speaks_of_how_it_was_developed():
    findings = check(tracked_files())
    assert not findings, "\n".join(findings[:50])


# The examples are assembled from fragments, so that this file's own text holds none of the phrases it checks for.
STOP, SESSION, MINE, SCRATCH = "st" + "op", "sess" + "ion", "mi" + "ne", "/work/" + "scratch"
RUN_HASH, COMMIT_HASH, OTHER_HASH = "1a4" + "df85", "a9d" + "be13", "a19" + "48e5"


@pytest.mark.parametrize(
    "text",
    [
        f"Measured in {STOP} 36 on a quiet machine.",
        f"see benchmarks/results/env_throughput_{STOP}29/",
        f"As this {SESSION}'s run showed, the ratio is 0.35.",
        f"a run of {MINE} took 3 min",
        "I " + "measured 0.16x CartPole",
        f"the command was python x.py --out-dir {SCRATCH}/s36/et",
        f"the env code at {RUN_HASH} is faster",
        f"recorded on commit {COMMIT_HASH}",
        "between 03:49-03:51 " + "UTC",
        f"searches per 20,000 steps ({OTHER_HASH}), against 10-30",
        f"a run label split over lines, {STOP}\n36, is found too",
    ],
)
def test_development_talk_is_found(text):
    assert check_text("docs/example.md", text)


@pytest.mark.parametrize(
    "text",
    [
        "python benchmarks/env_throughput.py --cold-repeats 3 (2-core x86-64 CPU)",
        f"the digest starts with {COMMIT_HASH}f00c1e2d4",
        "the suite goes on after an interruption or in a later session",
        "early stopping after 3 evaluations",
    ],
)
def test_ordinary_text_is_not_flagged(text):
    assert not check_text("docs/example.md", text)


def test_result_files_may_record_their_revision_but_not_run_labels():
    assert not check_text("benchmarks/results/x.md", "Revision 9fa8e086dcdfdcc2fb44c4a564a2b6a39b4da43f.")
    assert check_text("benchmarks/results/x.md", f"Command: `python x.py --out-dir benchmarks/results/x_{STOP}29`")


def test_paths_with_run_labels_or_commit_suffixes_are_found():
    assert check_path(f"benchmarks/results/train_throughput_{STOP}36/a.json")
    assert check_path("benchmarks/results/env_throughput_" + "e96" + "88c7.md")
    assert not check_path("benchmarks/results/env_throughput.md")
