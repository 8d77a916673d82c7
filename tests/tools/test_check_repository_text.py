"""``tools/check_repository_text.py``: no tracked text speaks of how the repository was developed."""

from __future__ import annotations

import shutil

import pytest

from tools.check_repository_text import check, check_path, check_text, tracked_files


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to list the tracked files")
def test_no_tracked_file_speaks_of_how_it_was_developed():
    findings = check(tracked_files())
    assert not findings, "\n".join(findings[:50])


@pytest.mark.parametrize(
    "text",
    [
        "Measured in stop 36 on a quiet machine.",
        "see benchmarks/results/env_throughput_stop29/",
        "As this session's run showed, the ratio is 0.35.",
        "a run of mine took 3 min",
        "I measured 0.16x CartPole",
        "the command was python x.py --out-dir /work/scratch/s36/et",
        "the env code at 1a4df85 is faster",
        "recorded on commit a9dbe13",
        "between 03:49-03:51 UTC",
        "searches per 20,000 steps (a1948e5), against 10-30",
        "a run label split over lines, stop\n36, is found too",
    ],
)
def test_development_talk_is_found(text):
    assert check_text("docs/example.md", text)


@pytest.mark.parametrize(
    "text",
    [
        "python benchmarks/env_throughput.py --cold-repeats 3 (2-core x86-64 CPU)",
        "the digest starts with a9dbe13f00c1e2d4",
        "the suite goes on after an interruption or in a later session",
        "early stopping after 3 evaluations",
    ],
)
def test_ordinary_text_is_not_flagged(text):
    assert not check_text("docs/example.md", text)


def test_result_files_may_record_their_revision_but_not_run_labels():
    assert not check_text("benchmarks/results/x.md", "Revision 9fa8e086dcdfdcc2fb44c4a564a2b6a39b4da43f.")
    assert check_text("benchmarks/results/x.md", "Command: `python x.py --out-dir benchmarks/results/x_stop29`")


def test_paths_with_run_labels_or_commit_suffixes_are_found():
    assert check_path("benchmarks/results/train_throughput_stop36/a.json")
    assert check_path("benchmarks/results/env_throughput_e9688c7.md")
    assert not check_path("benchmarks/results/env_throughput.md")
