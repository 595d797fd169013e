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
            stdout, stderr = process.communicate(timeout=420)
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
    result = _run(out, "--archive", str(archive), "--total", "300", cwd=cwd)
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
    ckpt = f"--checkpoint-dir {tmp_path}/gpu-15/checkpoints --checkpoint-every 60"
    assert fast["dgd"]["command"] == (
        f"echo dpkd sweep dgd --dataset mnist --data-dir {data} --preset paper --modes published "
        f"--queries 1300,27 --device cuda --out {tmp_path}/gpu-15/dgd-mnist-paper --quiet {ckpt}")
    assert "fit" in fast["dgd"]["note"]
    assert fast["dpdfd"]["command"].endswith(
        "--preset paper --epsilons 1,10 --teacher-epochs 3 --device cuda "
        f"--out {tmp_path}/gpu-15/dpdfd-mnist-paper --quiet {ckpt}")
    assert "--preset paper --epsilons 0.1 --device cuda" in fast["rknn"]["command"]
    # 3,000 steps x 179 ms do not fit 200 - 145 s (--device cpu: env.json skips torch)
    slow = _gpu_commands(tmp_path, 179.0, "--stages", "dgd", "--device", "cpu")
    assert slow["dgd"]["command"].endswith(
        f"--device cpu --out {tmp_path}/gpu-179/dgd-mnist-paper --quiet --checkpoint-dir "
        f"{tmp_path}/gpu-179/checkpoints --checkpoint-every 60 --ensemble-steps 300")
    assert "--ensemble-steps 300" in slow["dgd"]["note"]
    # issue 30's Fashion-MNIST points: the same sweeps on the other dataset, folders named for it
    fashion = _gpu_commands(tmp_path, 16.0, "--stages", "dgd,dpdfd", "--dataset", "fashion-mnist")
    assert fashion["dgd"]["command"] == (
        f"echo dpkd sweep dgd --dataset fashion-mnist --data-dir {data} --preset paper "
        "--modes published --queries 1300,27 --device cuda "
        f"--out {tmp_path}/gpu-16/dgd-fashion-mnist-paper --quiet "
        f"--checkpoint-dir {tmp_path}/gpu-16/checkpoints --checkpoint-every 60")
    assert fashion["dpdfd"]["command"] == (
        f"echo dpkd sweep dpdfd --dataset fashion-mnist --data-dir {data} --preset paper "
        "--epsilons 1,10 --teacher-epochs 3 --device cuda "
        f"--out {tmp_path}/gpu-16/dpdfd-fashion-mnist-paper --quiet "
        f"--checkpoint-dir {tmp_path}/gpu-16/checkpoints --checkpoint-every 60")
    env = json.loads((tmp_path / "gpu-16" / "env.json").read_text())
    assert env["dataset"] == "fashion-mnist" and env["stages"] == ["dgd", "dpdfd"]


def test_bad_options_are_refused(tmp_path: Path) -> None:
    for args in (["--budget-scale", "fast"], ["--stages", "dgd,nope"], ["--bogus"],
                 ["--dataset", "cifar10"], ["--checkpoint-every", "0"],
                 ["--archive-checkpoint-mb", "-1"], ["--resume"]):
        result = _run(tmp_path / "bad", *args, cwd=tmp_path)
        assert result.returncode == 2, args
        assert "paper.sh:" in result.stderr
    result = subprocess.run(["bash", str(SCRIPT), "--tiny"], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 2 and "--out DIR is required" in result.stderr


def test_a_later_window_resumes_with_the_first_windows_sweeps(tmp_path: Path) -> None:
    """--resume: done stages skipped, the rest with --resume, another sweep refused by name."""
    first = _gpu_commands(tmp_path, 179.0, "--stages", "dgd,dpdfd", "--device", "cpu")
    out = tmp_path / "gpu-179"
    assert "--ensemble-steps 300" in first["dgd"]["command"]
    lines = _stages(out)  # the echo 'ran' every stage: mark dgd and dpdfd as cut short
    for line in lines:
        if line["stage"] in ("dgd", "dpdfd"):
            line.update(exit_status=124, timed_out=True)
    (out / "stages.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    # the next window has more time (another auto step count) and other --dpdfd-teacher-epochs
    (out / "ensemble-variants.json").write_text(json.dumps({"auto_timings_ms": {"im2col": 1.0}}))
    result = _run(out, "--data-dir", str(tmp_path / "data"), "--stages", "dgd,dpdfd",
                  "--device", "cpu", "--resume", "--dpdfd-teacher-epochs", "5", cwd=tmp_path,
                  env={"DPKD": "echo dpkd"}, tiny=False)
    assert result.returncode == 1, result.stderr[-4000:]
    later = [line for line in _stages(out) if line["window"] == 2]
    assert [line["stage"] for line in later] == ["env", "dgd", "dpdfd"]
    dgd, dpdfd = later[1], later[2]
    assert dgd["exit_status"] == 0 and dgd["command"].endswith(
        "--checkpoint-every 60 --resume --ensemble-steps 300")  # the first window's count
    assert "as in the earlier window" in dgd["note"]
    assert dgd["stdout"] == "logs/dgd.w2.stdout" and (out / "logs" / "dgd.w2.stdout").is_file()
    assert dpdfd["exit_status"] is None and "--teacher-epochs 3" in dpdfd["note"]
    assert "refused: an earlier window ran another sweep" in dpdfd["note"]
    assert (out / "env-window-2.json").is_file()
    # a third window with the first window's options runs dpdfd; dgd is done
    result = _run(out, "--data-dir", str(tmp_path / "data"), "--stages", "dgd,dpdfd",
                  "--device", "cpu", "--resume", cwd=tmp_path, env={"DPKD": "echo dpkd"},
                  tiny=False)
    assert result.returncode == 0, result.stderr[-4000:]
    third = [line["stage"] for line in _stages(out) if line["window"] == 3]
    assert third == ["env", "dpdfd"]
    assert "dgd: succeeded in an earlier window, skipped" in result.stderr


def test_the_unchanged_paper_presets_over_two_windows(tmp_path: Path) -> None:
    """The header's recipe: DGD alone in window 1, the rest in window 2, each given the call."""
    out, data = tmp_path / "paper", str(tmp_path / "data")
    common = ["--data-dir", data, "--device", "cpu", "--total", "575"]
    result = _run(out, *common, "--stages", "dgd", "--dgd-ensemble-steps", "paper",
                  "--stage-timeout", "dgd=545", cwd=tmp_path, env={"DPKD": "echo dpkd"},
                  tiny=False)
    assert result.returncode == 0, result.stderr[-4000:]
    first = {line["stage"]: line for line in _stages(out)}
    assert sorted(first) == ["dgd", "env"]
    assert first["dgd"]["timeout_s"] == 545
    assert "--ensemble-steps" not in first["dgd"]["command"]  # the preset's 3,000
    assert first["dgd"]["note"] == (
        "the paper preset's 3000 ensemble steps (--dgd-ensemble-steps paper)")
    result = _run(out, *common, "--resume", "--stages", "dpdfd,rknn,report",
                  "--dpdfd-teacher-epochs", "paper", "--stage-timeout", "dpdfd=450",
                  "--stage-timeout", "rknn=100", cwd=tmp_path, env={"DPKD": "echo dpkd"},
                  tiny=False)
    second = {line["stage"]: line for line in _stages(out) if line["window"] == 2}
    assert sorted(second) == ["dpdfd", "env", "report", "rknn"]
    assert second["dpdfd"]["exit_status"] == 0 and second["dpdfd"]["timeout_s"] == 450
    assert "--teacher-epochs" not in second["dpdfd"]["command"]  # the preset's 10
    assert "--resume" in second["dpdfd"]["command"] and second["rknn"]["timeout_s"] == 100
    # the echo wrote no results.jsonl: the report stage refuses to read the committed reports/
    assert second["report"]["exit_status"] != 0 and result.returncode == 1
    for bad in ("dgd=0", "nope=5", "dgd", "dgd=1.5"):
        refused = _run(tmp_path / "bad", "--stage-timeout", bad, cwd=tmp_path)
        assert refused.returncode == 2 and "--stage-timeout must be STAGE=S" in refused.stderr
        assert not (tmp_path / "bad").exists()  # refused before any work


@pytest.mark.slow  # reuses the tiny run's records (its 40 s fixture)
def test_a_resumed_tiny_run_continues_from_its_checkpoints(
        tiny: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "run"
    shutil.copytree(tiny[0], out)
    assert sorted(p.name.split("-")[0] for p in (out / "checkpoints").glob("*.pt")) == [
        "baseline", "ensemble", "generator", "generator", "student", "teacher"]
    lines = _stages(out)
    for line in lines:  # as if the dgd stage had been cut after its first run
        if line["stage"] == "dgd":
            line["exit_status"] = 124
    (out / "stages.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    records = (out / "dgd-digits-paper" / "results.jsonl").read_text().splitlines()
    (out / "dgd-digits-paper" / "results.jsonl").write_text(records[0] + "\n")
    result = _run(out, "--resume", "--archive", str(tmp_path / "b.tar.gz"),
                  "--checkpoint-archive", str(tmp_path / "c.tar"), "--archive-checkpoint-mb",
                  "7", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    assert [s["stage"] for s in _stages(out) if s["window"] == 2] == ["env", "dgd", "report"]
    again = _records(out / "dgd-digits-paper")
    cut = json.loads(records[1])
    assert len(again) == 2 and again[1]["queries"] == cut["queries"]
    assert again[1]["test_accuracy"] == cut["test_accuracy"]  # bit-identical on the CPU
    assert {loop["stage"] for loop in again[1]["resumed_loops"]} == {"ensemble", "baseline",
                                                                     "generator"}
    assert "resumed at step" in (out / "logs" / "dgd.w2.stderr").read_text()
    with tarfile.open(tmp_path / "b.tar.gz") as tar:  # records only: no checkpoint
        assert not any(name.endswith(".pt") for name in tar.getnames())
        assert "run/checkpoints/left-out.txt" in tar.getnames()
    with tarfile.open(tmp_path / "c.tar") as tar:  # the checkpoints within 7 MiB
        carried = {Path(m.name).name: m.size for m in tar.getmembers()}
    assert carried and sum(carried.values()) <= 7 * 2**20
    left_out = (out / "checkpoints" / "left-out.txt").read_text().splitlines()
    assert len(carried) + len(left_out) == 6
    assert all("over --archive-checkpoint-mb 7" in line for line in left_out)
