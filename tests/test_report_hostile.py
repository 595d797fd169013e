"""``dpkd report`` on hostile folders and records (issue 65): refused in one line, or bounded.

- only regular files are read, at most ``MAX_RECORD_FILE_BYTES`` each: a FIFO named
  ``results.jsonl`` used to hang, a symlink to ``/dev/zero`` to exhaust memory, a symlink to
  itself to raise ``RuntimeError``;
- every field a report reads is checked on load (``"seconds": []`` and lists where numbers
  belong used to be ``TypeError`` tracebacks), the message naming file, line and field;
- a string from a record reaches a figure or a table cut to 80 characters (a 20 MB dataset name
  ran 4.6 minutes at 7.8 GB, then died in matplotlib);
- JSON nested just above the depth limit is refused, at the limit it loads.

Special files run in a child interpreter with a memory limit and a timeout, so that a
regression fails the test instead of hanging or swapping the machine.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpkd_audit.cli.main import main
from dpkd_audit.reports import collect as collect_module
from dpkd_audit.reports.collect import RecordKind, collect
from dpkd_audit.reports.safe_json import clip, load_json, safe_file_part

_PROBE = """
import json, sys
from dpkd_audit.cli.main import main
try:
    code = main(json.loads(sys.argv[1]))
except SystemExit as exc:
    code = exc.code
print(json.dumps(code))
"""


def _limit_memory() -> None:  # pragma: no cover - runs in the child
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))


def _cli(argv: list[str], timeout: float = 30) -> tuple[int, str]:
    """Exit status and stderr of ``dpkd ARGV`` in a child interpreter with 2 GiB of memory."""
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv)],
                          capture_output=True, text=True, timeout=timeout,
                          preexec_fn=_limit_memory)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _result(**fields) -> dict:
    return {"method": "rknn", "dataset": "mnist", "mode": "central", "epsilon": 1.0,
            "test_accuracy": 0.9, "seed": 0, **fields}


def _mechanism_audit(**fields) -> dict:
    return {"mechanism": "Laplace", "epsilon_claimed": 1.0, "epsilon_lower": 0.5,
            "verdict": "consistent", "samples_per_side": 1000, "seconds": 1.5, **fields}


def _pipeline_audit(**fields) -> dict:
    return {"kind": "pipeline-audit", "pipeline": "dpdfd", "dataset": "digits", "mode": "sound",
            "epsilon_claimed": 4.0, "epsilon_lower": 0.1, "verdict": "inconclusive",
            "estimator": "one-run", "canaries": 100, "correct": 5, "guesses": 10,
            "seconds": {"train": 3.0}, **fields}


# ------------------------------------------------------------------ files that are not files
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_record_file_that_is_not_a_regular_file_is_refused_unread(tmp_path, kind):
    folder = tmp_path / "in"
    folder.mkdir()
    path = folder / "results.jsonl"
    if kind == "fifo":
        os.mkfifo(path)  # was: waited on forever
    else:
        path.symlink_to("/dev/zero")  # was: read until MemoryError
    start = time.perf_counter()
    code, err = _cli(["report", str(folder), "--out", str(tmp_path / "out"), "--quiet"])
    assert time.perf_counter() - start < 20
    assert code == 2
    cause = "is a FIFO" if kind == "fifo" else "is a character device"
    assert cause in _one_line(err) and "results.jsonl" in err
    assert not (tmp_path / "out").exists()


def test_a_symlink_loop_is_refused_by_name(tmp_path, capsys):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "results.jsonl").symlink_to("results.jsonl")  # was: RuntimeError
    with pytest.raises(ValueError, match=r"results\.jsonl .*Too many levels of symbolic links"):
        collect([folder])
    assert main(["report", str(folder / "results.jsonl"), "--out", str(tmp_path / "out"),
                 "--quiet"]) == 2
    assert "symbolic links" in _one_line(capsys.readouterr().err)


def test_a_record_file_above_the_size_cap_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(collect_module, "MAX_RECORD_FILE_BYTES", 100)
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(_result()) + "\n" + " " * 200, encoding="utf-8")
    with pytest.raises(ValueError, match=r"results\.jsonl has 3\d\d bytes, more than the 100"):
        collect([path])


def test_results_reads_regular_files_only(tmp_path, capsys):
    fifo = tmp_path / "results.jsonl"
    os.mkfifo(fifo)
    code, err = _cli(["results", str(fifo)])
    assert code == 2 and "is a FIFO" in _one_line(err)


# ------------------------------------------------------------------ fields of the wrong type
@pytest.mark.parametrize(("record", "field"), [
    (_mechanism_audit(seconds=[]), "seconds"),
    (_mechanism_audit(samples_per_side=[1000]), "samples_per_side"),
    (_mechanism_audit(true_epsilon=[1.0], control=True), "true_epsilon"),
    (_mechanism_audit(epsilon_estimate=[0.7]), "epsilon_estimate"),
    (_mechanism_audit(samples_per_side=True), "samples_per_side"),
    (_mechanism_audit(verdict="fine"), "verdict"),
    (_mechanism_audit(control="yes"), "control"),
    (_mechanism_audit(mechanism=["Laplace"]), "mechanism"),
    (_pipeline_audit(canaries="many"), "canaries"),
    (_pipeline_audit(seconds={"train": []}), "seconds"),
    (_pipeline_audit(epsilon_lower_fdp=[1.0]), "epsilon_lower_fdp"),
    (_pipeline_audit(dataset=7), "dataset"),
    (_pipeline_audit(canaries=None), "canaries"),
    (_result(provenance=[]), "provenance"),
    (_result(command=["dpkd"]), "command"),
    (_result(config=[1]), "config"),
    (_result(charges={"a": 1}), "charges"),
    (_result(seconds=[]), "seconds"),
])
def test_a_field_of_the_wrong_type_names_file_line_and_field(tmp_path, capsys, record, field):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps([_mechanism_audit(), record]),
                                         encoding="utf-8")
    with pytest.raises(ValueError, match=rf"results\.json:2: {field} must be "):
        collect([folder])
    assert main(["report", str(folder), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "results.json:2" in line and f"{field} must be" in line


def test_valid_audit_records_still_make_a_report(tmp_path):
    from dpkd_audit.reports.overview_render import build_report

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps([
        _mechanism_audit(), _mechanism_audit(control=True, true_epsilon=float("inf"),
                                             verdict="violation", epsilon_lower=2.5)]),
        encoding="utf-8")
    (folder / "audit.json").write_text(json.dumps(_pipeline_audit()), encoding="utf-8")
    records = collect([folder])
    assert [r.kind for r in records] == [RecordKind.PIPELINE_AUDIT, RecordKind.MECHANISM_AUDIT,
                                         RecordKind.MECHANISM_AUDIT]
    files = build_report([folder], tmp_path / "out", base=tmp_path)
    assert len(files.figures) == 2


# ------------------------------------------------------------------ strings are bounded
def test_a_long_name_reaches_figures_and_tables_cut(tmp_path):
    from dpkd_audit.reports.overview_render import build_report

    name = "d" * 5000
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "results.jsonl").write_text(
        json.dumps(_result(dataset=name, device="x" * 5000, command="y" * 5000)) + "\n",
        encoding="utf-8")
    (folder / "results.json").write_text(
        json.dumps([_mechanism_audit(mechanism="M" * 5000, attack="a" * 5000)]),
        encoding="utf-8")
    files = build_report([folder], tmp_path / "out", base=tmp_path)
    for page in (files.markdown, files.html):
        text = page.read_text(encoding="utf-8")
        assert "d" * 81 not in text and "M" * 81 not in text and "x" * 81 not in text
        assert "d" * 77 + "..." in text and "M" * 77 + "..." in text
        assert "y" * 301 not in text and "a" * 301 not in text  # free text: 300 at most
    assert all(len(p.name) < 100 for p in files.figures)


def test_a_20_mb_name_is_read_in_well_under_a_second():
    text = json.dumps(_result(dataset="d" * 20_000_000))
    start = time.perf_counter()
    record = load_json(text, "results.jsonl")  # the depth pre-check took 7 s and 2.3 GB
    assert time.perf_counter() - start < 1.0
    assert len(record["dataset"]) == 20_000_000


def test_clip_and_file_names_are_bounded():
    assert clip("abc") == "abc"
    assert clip("x" * 81) == "x" * 77 + "..." and len(clip("x" * 10**6)) == 80
    assert clip("x" * 400, 300) == "x" * 297 + "..."
    long = safe_file_part("d" * 10_000)
    assert len(long) <= 69 and long != safe_file_part("d" * 10_001)
    assert safe_file_part("mnist") == "mnist"


# ------------------------------------------------------------------ the depth limit itself
def _nested(depth: int, kind: str) -> str:
    if kind == "list":
        return "[" * depth + "]" * depth
    return '{"a": ' * (depth - 1) + "{}" + "}" * (depth - 1)


@pytest.mark.parametrize("kind", ["list", "object"])
def test_json_at_the_depth_limit_loads_and_just_above_is_refused(kind):
    """64 levels load; 65 to 100 are refused (only 100,000 levels were tested before)."""
    assert len(json.dumps(load_json(_nested(64, kind), "r.json"))) > 64
    for depth in (65, 66, 100):
        with pytest.raises(ValueError, match=r"r\.json:1: nested deeper than 64 levels"):
            load_json(_nested(depth, kind), "r.json")


def test_brackets_inside_strings_do_not_count_toward_the_depth():
    text = json.dumps({"label": "[" * 1000 + "\\\"{" * 100, "x": [[1]]})
    assert load_json(text, "r.json")["x"] == [[1]]


def test_a_record_nested_just_above_the_limit_is_refused_by_report(tmp_path, capsys):
    path = tmp_path / "results.jsonl"
    record = _result(config={"nested": json.loads(_nested(63, "list"))})  # 65 levels in all
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    assert main(["report", str(path), "--out", str(Path(tmp_path, "out")), "--quiet"]) == 2
    assert "results.jsonl:1: nested deeper than 64 levels" in _one_line(capsys.readouterr().err)
    path.write_text(json.dumps(_result(config={"nested": json.loads(_nested(62, "list"))}))
                    + "\n", encoding="utf-8")  # 64 levels: a record
    assert main(["report", str(path), "--out", str(Path(tmp_path, "out")), "--quiet"]) == 0
