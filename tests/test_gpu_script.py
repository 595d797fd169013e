"""``benchmarks/gpu/paper.sh``: the one-window device script, run on the CPU (``--tiny``).

The tiny run goes through the same stages, commands and code path as the GPU run (digits, a few
steps): its records, the stage log, the archive and the report are checked here, and so are a
stage that fails or times out (logged, the later stages still run) and the GPU command lines
(with the CLI replaced by ``echo``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu" / "paper.sh"
STAGES = ["env", "ensemble", "dgd", "dpdfd", "rknn", "report"]
SWEEPS = {"dgd": 2, "dpdfd": 2, "rknn": 1}  # records per sweep folder

pytestmark = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in ("bash", "timeout", "tar")),
    reason="needs bash, GNU timeout and tar")


def _run(out: Path, *args: str, cwd: Path, env: dict[str, str] | None = None,
         tiny: bool = True) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PAPER_SH_")}
    base.pop("DPKD", None)
    path = [str(ROOT), *filter(None, [base.get("PYTHONPATH")])]
    base.update(PYTHON=sys.executable, PYTHONPATH=os.pathsep.join(path), **(env or {}))
    command = ["bash", str(SCRIPT), *(["--tiny"] if tiny else []), "--out", str(out), *args]
    # its own session, so that a test timeout stops the stage running under it too
    with subprocess.Popen(command, cwd=cwd, env=base, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            _kill_session(process.pid)
            raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _kill_session(session: int) -> None:
    """SIGKILL every process of ``session`` (``timeout`` puts each stage in a group of its own)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:  # the fields after "pid (comm)": state ppid pgrp session
            with contextlib.suppress(OSError):
                os.kill(int(stat.parent.name), signal.SIGKILL)


def _stages(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "stages.jsonl").read_text().splitlines()]


def _records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One ``--tiny`` run (from a folder outside the repository), archive inside DIR."""
    cwd = tmp_path_factory.mktemp("cwd")
    out = tmp_path_factory.mktemp("paper") / "run"
    archive = out / "a.tar.gz"
    result = _run(out, "--archive", str(archive), "--total", "150", cwd=cwd)
    assert result.returncode == 0, result.stderr[-4000:]
    return out, archive


@pytest.mark.slow
def test_every_stage_ran_and_succeeded(tiny: tuple[Path, Path]) -> None:
    out, _ = tiny
    stages = _stages(out)
    assert [s["stage"] for s in stages] == STAGES
    for stage in stages:
        assert stage["exit_status"] == 0, stage
        assert stage["timed_out"] is False
        assert isinstance(stage["timeout_s"], int) and stage["timeout_s"] > 0
        assert 0 <= stage["seconds"] < stage["timeout_s"]
        assert stage["command"]
    by_name = {s["stage"]: s for s in stages}
    assert "--tiny" not in by_name["dgd"]["command"]
    assert "--preset paper" in by_name["dgd"]["command"]
    assert "--device cpu" in by_name["ensemble"]["command"]
    assert (out / by_name["rknn"]["stdout"]).is_file()


@pytest.mark.slow
def test_sweeps_ran_the_paper_preset(tiny: tuple[Path, Path]) -> None:
    out, _ = tiny
    for method, count in SWEEPS.items():
        records = _records(out / f"{method}-digits-paper")
        assert len(records) == count, method
        for record in records:
            assert record["method"] == method
            assert record["dataset"] == "digits"
            assert record["preset"] == record["config"]["preset"] == "paper"
    assert sorted(r["queries"] for r in _records(out / "dgd-digits-paper")) == [27, 1300]
    assert sorted(r["epsilon"] for r in _records(out / "dpdfd-digits-paper")) == [1, 10]
    assert [r["epsilon"] for r in _records(out / "rknn-digits-paper")] == [0.1]


@pytest.mark.slow
def test_env_and_ensemble_variants(tiny: tuple[Path, Path]) -> None:
    out, _ = tiny
    env = json.loads((out / "env.json").read_text())
    for key in ("python", "torch", "git_commit", "hostname", "nproc", "date", "plan"):
        assert env[key], key
    assert env["tiny"] is True and env["device"] == "cpu"
    variants = json.loads((out / "ensemble-variants.json").read_text())
    assert variants["teachers"] == 4
    assert any(k.endswith("_ms_per_step") for k in variants)


@pytest.mark.slow
def test_archive_and_overview(tiny: tuple[Path, Path]) -> None:
    out, archive = tiny
    assert (out / "overview" / "index.html").is_file()
    assert "digits" in (out / "overview" / "report.md").read_text()
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        wanted = {"stages.jsonl", "env.json", "ensemble-variants.json", "overview/report.md",
                  *(f"{m}-digits-paper/results.jsonl" for m in SWEEPS)}
        assert {f"run/{name}" for name in wanted} <= names
        assert not any(name.endswith((".tar.gz", ".partial")) for name in names)
        stages = tar.extractfile("run/stages.jsonl")
        assert stages is not None
        assert stages.read().decode() == (out / "stages.jsonl").read_text()  # the last stage in


@pytest.mark.slow  # reuses the tiny run's records (its 40 s fixture)
def test_failed_and_timed_out_stages_do_not_stop_the_later_ones(
        tiny: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "again"
    for method in SWEEPS:  # the report reads the tiny run's records
        shutil.copytree(tiny[0] / f"{method}-digits-paper", out / f"{method}-digits-paper")
    result = _run(out, "--stages", "ensemble,dgd,report", cwd=tmp_path,
                  env={"PAPER_SH_TIMEOUT_ensemble": "1", "PAPER_SH_FAIL_STAGE": "dgd"})
    assert result.returncode == 1, result.stderr[-4000:]
    stages = {s["stage"]: s for s in _stages(out)}
    assert list(stages) == ["env", "ensemble", "dgd", "report"]
    assert stages["ensemble"]["timed_out"] is True
    assert stages["ensemble"]["exit_status"] == 124
    assert stages["dgd"]["exit_status"] == 1 and stages["dgd"]["timed_out"] is False
    assert stages["dgd"]["command"] == "false"
    assert "PAPER_SH_FAIL_STAGE" in stages["dgd"]["note"]
    assert stages["report"]["exit_status"] == 0
    assert (out / "overview" / "report.md").is_file()
    assert len(_records(out / "dgd-digits-paper")) == 2  # untouched by the failed stage


def _gpu_commands(tmp_path: Path, ms_per_step: float, *args: str) -> dict[str, dict]:
    """The non-tiny command lines, the CLI replaced by ``echo`` and stage 1's JSON given."""
    out = tmp_path / f"gpu-{ms_per_step:g}"
    out.mkdir()
    timing = {"auto_kernel": "im2col", "auto_timings_ms": {"grouped": 179.0, "im2col": ms_per_step}}
    (out / "ensemble-variants.json").write_text(json.dumps(timing))
    result = _run(out, "--data-dir", str(tmp_path / "data"), *args, cwd=tmp_path,
                  env={"DPKD": "echo dpkd"}, tiny=False)
    assert result.returncode == 0, result.stderr[-4000:]
    return {s["stage"]: s for s in _stages(out)}


def test_gpu_command_lines(tmp_path: Path) -> None:
    fast = _gpu_commands(tmp_path, 15.0, "--stages", "dgd,dpdfd,rknn")
    data = tmp_path / "data"
    assert fast["dgd"]["command"] == (
        f"echo dpkd sweep dgd --dataset mnist --data-dir {data} --preset paper --modes published "
        f"--queries 1300,27 --device cuda --out {tmp_path}/gpu-15/dgd-mnist-paper --quiet")
    assert "fit" in fast["dgd"]["note"]
    assert fast["dpdfd"]["command"].endswith(
        "--preset paper --epsilons 1,10 --teacher-epochs 3 --device cuda "
        f"--out {tmp_path}/gpu-15/dpdfd-mnist-paper --quiet")
    assert "--preset paper --epsilons 0.1 --device cuda" in fast["rknn"]["command"]
    # 3,000 steps x 179 ms do not fit 200 - 145 s (--device cpu: env.json skips torch)
    slow = _gpu_commands(tmp_path, 179.0, "--stages", "dgd", "--device", "cpu")
    assert slow["dgd"]["command"].endswith("--device cpu --out "
                                           f"{tmp_path}/gpu-179/dgd-mnist-paper --quiet "
                                           "--ensemble-steps 300")
    assert "--ensemble-steps 300" in slow["dgd"]["note"]
    # issue 30's Fashion-MNIST points: the same sweeps on the other dataset, folders named for it
    fashion = _gpu_commands(tmp_path, 16.0, "--stages", "dgd,dpdfd", "--dataset", "fashion-mnist")
    assert fashion["dgd"]["command"] == (
        f"echo dpkd sweep dgd --dataset fashion-mnist --data-dir {data} --preset paper "
        "--modes published --queries 1300,27 --device cuda "
        f"--out {tmp_path}/gpu-16/dgd-fashion-mnist-paper --quiet")
    assert fashion["dpdfd"]["command"] == (
        f"echo dpkd sweep dpdfd --dataset fashion-mnist --data-dir {data} --preset paper "
        "--epsilons 1,10 --teacher-epochs 3 --device cuda "
        f"--out {tmp_path}/gpu-16/dpdfd-fashion-mnist-paper --quiet")
    env = json.loads((tmp_path / "gpu-16" / "env.json").read_text())
    assert env["dataset"] == "fashion-mnist" and env["stages"] == ["dgd", "dpdfd"]


def test_bad_options_are_refused(tmp_path: Path) -> None:
    for args in (["--budget-scale", "fast"], ["--stages", "dgd,nope"], ["--bogus"],
                 ["--dataset", "cifar10"]):
        result = _run(tmp_path / "bad", *args, cwd=tmp_path)
        assert result.returncode == 2, args
        assert "paper.sh:" in result.stderr
    result = subprocess.run(["bash", str(SCRIPT), "--tiny"], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 2 and "--out DIR is required" in result.stderr
