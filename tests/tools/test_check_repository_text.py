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
LABEL, SITTING, OWN, SCRATCH = "st" + "op", "sess" + "ion", "mi" + "ne", "/wo" + "rk/" + "scratch"
RUN_HASH, COMMIT_HASH, OTHER_HASH = "1a4" + "df85", "a9d" + "be13", "a19" + "48e5"
FULL_HASH = "9fa8e086dcdfdcc2fb44c4a564a2b6a3" + "9b4da43f"
ISSUE, OUR, WE, OTHER = "iss" + "ue", "o" + "ur", "w" + "e", "oth" + "er"


@pytest.mark.parametrize(
    "text",
    [
        f"Measured in {LABEL} 36 on a quiet machine.",
        f"see benchmarks/results/env_throughput_{LABEL}29/",
        f"As this {SITTING}'s run showed, the ratio is 0.35.",
        f"a run of {OWN} took 3 min",
        "I " + "measured 0.16x CartPole",
        f"the command was python x.py --out-dir {SCRATCH}/s36/et",
        f"the env code at {RUN_HASH} is faster",
        f"recorded on commit {COMMIT_HASH}",
        "between 03:49-03:51 " + "UTC",
        f"searches per 20,000 steps ({OTHER_HASH}), against 10-30",
        f"a run label split over lines, {LABEL}\n36, is found too",
        # issue and pull-request numbers as provenance
        f"the ratio ({ISSUE} 12's target)",
        f"fixes of {ISSUE}s 11/12",
        f"as {ISSUE} 10, 11 and 12 asked",
        f"### Speed ({ISSUE} #12)",
        "see #12 for the discussion",
        "- faster resets (#12)",
        # first-person accounts of runs
        f"submitting at once on EDO-v0 in {OUR} runs",
        f"{OUR} measurements show 0.4x",
        f"{WE[0].upper() + WE[1:]} measured 0.16x CartPole",
        f"{WE} found that the filter helps",
        # accounts of other work on the machine
        f"on 2 cores shared with {OTHER} jobs",
        f"while 4 {OTHER} agents were using the same 2 cores",
        f"under load from {OTHER} jobs",
        f"the same 2 cores, which {OTHER} jobs loaded too",
        f"at load average 5.4 ({OTHER} jobs running)",
        # absolute paths of a development machine
        "Local cache searched: `/" + "root/.cache/huggingface/hub`",
        "python x.py --out-dir /" + "work/main/runs",
        "the file in /" + "home/alice/edo/results.json",
        '"output_dir": "/' + 'tmp/tmpi_gupkvm"',
        # commit hashes as provenance
        f"Revision {FULL_HASH}. Command: `python x.py`",
        f"Command: `python x.py` (revision {FULL_HASH}).",
        f"Base {COMMIT_HASH}, head {RUN_HASH}",
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
        # "issue" and "#" in their ordinary senses
        f"a known {ISSUE} with chromadb's HNSW build",
        f"{ISSUE}s of this kind are retried",
        "## Results\n\n### 0.3.0",
        "TASK #0: What is the mentor of Elsa Novak?",
        'COLOURS = {"default": "#202020", "hit": "#707070"}',
        # "our", "we" and "other" in ordinary senses
        f"leave the process-wide registry as {WE} found it",
        f"{OUR} observation holds the plan; the policy reads it",
        f"{OTHER} jobs on the machine move wall time more than CPU time",
        f"a cache shared with {OTHER} processes",
        # paths that name no machine
        "python benchmarks/run_suite.py --smoke --out-dir /" + "tmp/bench --dry-run",
        "the Hugging Face cache, ~/.cache/huggingface/hub by default",
        "benchmarks/results/records/study_horizon/h8-grpo-s0.json",
    ],
)
def test_ordinary_text_is_not_flagged(text):
    assert not check_text("docs/example.md", text)


def test_result_files_record_no_revision_or_machine_path_in_their_text():
    assert check_text("benchmarks/results/x.md", f"Revision {FULL_HASH}.")
    assert check_text("tools/results/x.md", f"AMD EPYC, 2 cores; revision {FULL_HASH}")
    assert check_text("tools/results/x.md", f"the arms differ in one change ({OTHER_HASH})")
    assert check_text("benchmarks/results/x.md", f"Command: `python x.py --out-dir benchmarks/results/x_{LABEL}29`")
    assert check_text("benchmarks/results/x.json", '"output_dir": "/' + 'tmp/edo-run"')
    assert check_text("tools/results/x.json", f'"machine": "AMD EPYC, 2 cores shared with {OTHER} jobs"')


def test_result_json_may_keep_a_machine_readable_revision_field():
    assert not check_text("benchmarks/results/records/x/a.json", f'{{"provenance": {{"git_revision": "{FULL_HASH}+dirty"}}}}')
    assert not check_text("tools/results/x.json", f'{{"revision": "{FULL_HASH}"}}')


def test_paths_with_run_labels_or_commit_suffixes_are_found():
    assert check_path(f"benchmarks/results/train_throughput_{LABEL}36/a.json")
    assert check_path("benchmarks/results/env_throughput_" + "e96" + "88c7.md")
    assert not check_path("benchmarks/results/env_throughput.md")
