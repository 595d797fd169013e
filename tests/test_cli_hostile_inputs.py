"""Hostile command-line input (issue 65): one line on stderr and exit status 2, before any work.

- ``dpkd budget --plan FILE``: every field of the plan file is checked by type and range (a
  boolean is not a number), the file read only if it is a regular file of at most 1 MiB, its
  JSON nested at most 64 deep;
- the integer size flags of ``dpkd run`` / ``sweep`` / ``audit-run`` are bounded before any data
  is loaded (``--stage-size 10**12`` used to fail after training the teacher and generator);
- an empty path (``--out ''``, ``dpkd results ''``) is refused by name, never read as ".".

The special files (``/dev/zero``, a FIFO) run in a child interpreter with a memory limit and a
timeout, so that a regression fails the test instead of hanging or swapping the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from dpkd_audit.cli.main import build_parser, main

# Runs main(argv) for each argv in a fresh interpreter: its exit status, its stderr and whether
# torch (any pipeline work) was imported by then.
_PROBE = """
import json, sys
from dpkd_audit.cli.main import main
results = []
for argv in json.loads(sys.argv[1]):
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    sys.stderr.write("\\0")
    results.append([code, "torch" in sys.modules])
print(json.dumps(results))
"""


def _limit_memory() -> None:  # pragma: no cover - runs in the child
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))


def _cli(argvs: list[list[str]], *, cwd: Path | None = None,
         timeout: float = 60) -> list[tuple[int, str, bool]]:
    """``(exit status, stderr, torch imported)`` of each ``dpkd ARGV``, in a child with 2 GiB."""
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argvs)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          preexec_fn=_limit_memory)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.splitlines()[-1])
    errors = done.stderr.split("\0")
    return [(code, err, torch) for (code, torch), err in zip(results, errors, strict=False)]


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# ------------------------------------------------------------------ dpkd budget --plan FILE
def _plan(tmp_path: Path, release: dict | str) -> str:
    path = tmp_path / "plan.json"
    text = release if isinstance(release, str) else json.dumps({"releases": [release]})
    path.write_text(text, encoding="utf-8")
    return str(path)


LAPLACE = {"mechanism": "laplace", "queries": 3}


@pytest.mark.parametrize(("release", "field", "got"), [
    ({**LAPLACE, "epsilon": 0}, "epsilon", "got 0"),  # was ZeroDivisionError
    ({**LAPLACE, "epsilon": "abc"}, "epsilon", "got a string, 'abc'"),  # was TypeError
    ({**LAPLACE, "epsilon": [1]}, "epsilon", "got a list"),
    ({**LAPLACE, "epsilon": {}}, "epsilon", "got an object"),
    ({**LAPLACE, "epsilon": True}, "epsilon", "got a boolean, true"),  # was read as 1.0
    ({**LAPLACE, "epsilon": 1e-320}, "epsilon", "got 1e-320"),  # 1 / epsilon overflows
    ({**LAPLACE, "noise": False}, "noise", "got a boolean, false"),
    ({"mechanism": "laplace", "noise": 1, "queries": True}, "queries", "got a boolean"),
    ({"mechanism": "laplace", "noise": 1, "queries": 2.5}, "queries", "got 2.5"),
    ({"mechanism": "laplace", "noise": 1, "queries": "3"}, "queries", "got a string"),
    ({"mechanism": "laplace-noisy-max", "noise": 1, "queries": 3, "classes": 1}, "classes",
     "got 1"),
    ({"mechanism": "subsampled-gaussian", "noise": 1, "queries": 3,
      "sampling_probability": True}, "sampling_probability", "got a boolean"),
    ({"mechanism": "shuffle", "noise": 1, "queries": 3, "users": [5]}, "users", "got a list"),
    ({"mechanism": ["laplace"], "noise": 1, "queries": 3}, "mechanism", "got ['laplace']"),
])
def test_plan_fields_are_checked_by_type_and_range(tmp_path, capsys, release, field, got):
    path = _plan(tmp_path, release)
    assert main(["budget", "--plan", path]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"--plan {path}, releases[0]: {field} must be" in line, line
    assert got in line.rsplit("; ", 1)[-1], line


def test_a_boolean_is_never_a_number_in_a_plan(tmp_path, capsys):
    path = _plan(tmp_path, {**LAPLACE, "epsilon": True})
    assert main(["budget", "--plan", path]) == 2  # not the budget of epsilon 1.0
    assert "epsilon must be a finite number" in capsys.readouterr().err


@pytest.mark.parametrize("text", ['{"releases": ' + "[" * 100_000 + "]" * 100_000 + "}",
                                  '{"releases": [' + "[" * 70 + "]" * 70 + "]}"])
def test_plan_nested_too_deep_is_refused(tmp_path, capsys, text):
    assert main(["budget", "--plan", _plan(tmp_path, text)]) == 2  # was RecursionError
    assert "nested deeper than 64 levels" in _one_line(capsys.readouterr().err)


def test_plan_with_too_many_releases_is_refused(tmp_path, capsys):
    from dpkd_audit.cli.plan_file import MAX_PLAN_RELEASES

    text = json.dumps({"releases": [{"mechanism": "laplace", "noise": 1, "queries": 1}]
                       * (MAX_PLAN_RELEASES + 1)})
    assert main(["budget", "--plan", _plan(tmp_path, text)]) == 2
    assert f"at most {MAX_PLAN_RELEASES:,} releases" in _one_line(capsys.readouterr().err)


def test_plan_larger_than_the_cap_is_refused_unread(tmp_path, capsys):
    from dpkd_audit.cli.plan_file import MAX_PLAN_BYTES

    path = tmp_path / "big.json"
    with path.open("wb") as fh:
        fh.truncate(MAX_PLAN_BYTES + 1)  # sparse: nothing to read if the size is checked first
    assert main(["budget", "--plan", str(path)]) == 2
    assert f"more than the {MAX_PLAN_BYTES:,} accepted" in _one_line(capsys.readouterr().err)


def test_plan_that_is_not_a_regular_file_is_refused(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop.name)
    argvs = [["budget", "--plan", "/dev/zero"], ["budget", "--plan", "/dev/full"],
             ["budget", "--plan", str(fifo)], ["budget", "--plan", str(loop)],
             ["budget", "--plan", str(tmp_path)]]
    expected = ["is a character device", "is a character device", "is a FIFO",
                "Too many levels of symbolic links", "is a directory"]
    for (code, err, _), cause in zip(_cli(argvs, timeout=30), expected, strict=True):
        assert code == 2 and cause in _one_line(err) and "--plan" in err, err


def test_a_valid_plan_still_composes(tmp_path, capsys):
    path = _plan(tmp_path, json.dumps({"releases": [
        {"mechanism": "Laplace", "epsilon": 0.5, "queries": 4},
        {"mechanism": "gaussian", "noise": 5, "queries": 10, "classes": 10}]}))
    assert main(["budget", "--plan", path, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["noise"] for r in out["releases"]] == [2.0, 5]


# ------------------------------------------------------------------ sizes that reach torch
SIZES = [
    (["run", "dpdfd", "--stage-size", "1000000000000"], "--stage-size must be at most 100,000"),
    (["audit-run", "dpdfd", "--mode", "sound", "--dataset", "digits", "--epsilon", "4",
      "--canaries", "1000000000000"], "--canaries must be at most 10,000,000"),
    (["run", "dgd", "--synthetic", "1000000000000"], "--synthetic must be at most 1,000,000"),
    (["run", "dgd", "--teachers", "100000000"], "--teachers must be at most 10,000"),
    (["run", "rknn", "--clusters", "1000000000000"], "--clusters must be at most 100,000"),
    (["run", "rknn", "--student-epochs", "1000000000"], "--student-epochs must be at most"),
    (["run", "dpdfd", "--seed", str(2**70)], "--seed must be at most 4,294,967,295"),
    (["sweep", "dgd", "--queries", "27,1000000000000"], "--queries must be at most 999,998"),
    (["sweep", "rknn", "--epsilons", "1", "--seeds", "0,99999999999"], "--seeds must be at"),
    (["audit-run", "rknn", "--runs", "1000000000000"], "--runs must be at most 1,000,000"),
]


def test_size_flags_are_refused_before_any_work(tmp_path):
    """Each refused by its flag and limit, before torch (any pipeline) is even imported."""
    argvs = [[*argv, "--out", str(tmp_path / f"out{i}"), "--quiet"]
             for i, (argv, _) in enumerate(SIZES)]
    for (code, err, torch), (argv, message) in zip(_cli(argvs), SIZES, strict=True):
        assert code == 2, (argv, err)
        assert message in _one_line(err), (argv, err)
        assert not torch, argv
    assert list(tmp_path.iterdir()) == []


def _integer_flags(parser: argparse.ArgumentParser, path: str = ""):
    """(command path, option, dest) of every integer-valued flag under ``parser``."""
    from dpkd_audit.cli.dgd import _query_list
    from dpkd_audit.cli.sweeps import _int_list

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _integer_flags(sub, f"{path} {name}".strip())
            continue
        kind = action.type
        integer = kind is int or kind in (_int_list, _query_list) or (
            callable(kind) and getattr(kind, "__qualname__", "").startswith("int_at_least"))
        if integer:
            yield path, (action.option_strings or [action.dest])[0], action.dest


def test_every_integer_flag_of_the_pipeline_commands_has_a_limit():
    from dpkd_audit.cli.limits import LIMITED_COMMANDS, size_flags

    limits = size_flags()
    flags = [(path, option, dest) for path, option, dest in _integer_flags(build_parser())
             if path.split(" ")[0] in LIMITED_COMMANDS]
    assert len(flags) > 40  # run, sweep and audit-run of three methods
    missing = [(path, option) for path, option, dest in flags if dest not in limits]
    assert missing == []
    for path, option, dest in flags:
        assert limits[dest][0] == option, (path, option)


def test_the_library_refuses_the_same_sizes():
    from dpkd_audit.pipelines import limits
    from dpkd_audit.pipelines.dgd import DgdConfig
    from dpkd_audit.pipelines.dpdfd import DpdfdConfig
    from dpkd_audit.pipelines.rknn import RknnConfig
    from dpkd_audit.training_audit import canaries

    assert canaries.MAX_CANARIES == limits.MAX_CANARIES
    with pytest.raises(ValueError, match="stage_size must be an integer >= 2 and <= 100000"):
        DpdfdConfig(stage_size=10**12)
    with pytest.raises(ValueError, match="synthetic must be"):
        DgdConfig.small(dataset="digits", mode="published", queries=27, synthetic=10**12)
    with pytest.raises(ValueError, match="clusters must be"):
        RknnConfig(epsilon=1.0, clusters=10**12)
    with pytest.raises(ValueError, match="seed must be"):
        RknnConfig(epsilon=1.0, seed=2**70)
    with pytest.raises(ValueError, match="count must be"):
        canaries.GradientCanaries(count=10**12)


# ------------------------------------------------------------------ empty paths
@pytest.mark.parametrize(("argv", "flag"), [
    (["results", ""], "PATH"),
    (["report", "records.jsonl", "--out", ""], "--out"),
    (["report", "", "--out", "o"], "RECORDS"),
    (["run", "rknn", "--out", ""], "--out"),
    (["sweep", "rknn", "--epsilons", "1", "--out", ""], "--out"),
    (["run", "dpdfd", "--out", "o", "--data-dir", ""], "--data-dir"),
    (["budget", "--plan", ""], "--plan"),
    (["ledger", ""], "PATH"),
    (["audit", "Laplace", "--plot", ""], "--plot"),
    (["demo", "--ledger", ""], "--ledger"),
])
def test_an_empty_path_is_refused_by_name(tmp_path, capsys, monkeypatch, argv, flag):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "records.jsonl").write_text("")
    assert main(argv) == 2
    assert f"{flag} is an empty path" in _one_line(capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records.jsonl"]  # nothing written


# ------------------------------------------------------------------ --resume reads records too
def test_resume_reads_its_results_file_as_input(tmp_path):
    from dpkd_audit.cli.sweeps import _done_keys, _record_key

    path = tmp_path / "results.jsonl"
    path.write_text('{"mode": "central", "epsilon": 1, "seed": 0}\n{"mode": "central"}\n')
    with pytest.raises(ValueError, match=r"results\.jsonl:2: --resume cannot tell which run"):
        _done_keys(path, _record_key)  # was: KeyError
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(ValueError, match="is a FIFO"):  # was: waited on forever
        _done_keys(path, _record_key)
