"""Fuzzing every ``dpkd`` subcommand: user input gives a result or one clear error line.

Hypothesis draws flag values from the awkward corners (zero, negative, NaN, infinities,
subnormals, 2**63, huge counts, strings, paths into missing or non-directory folders). Every
call must return 0, or 2 with a single ``dpkd CMD: error: ...`` line (argparse's own usage
errors exit 2 as well), never raise, and finish within a bound. ``derandomize=True`` makes the
examples the same on every run.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpkd_audit.cli.main import main

#: Seconds one command may take (the slowest drawn budget plans solve with PLD).
LIMIT = 60.0

NUMBERS = st.sampled_from(["0", "-1", "nan", "inf", "-inf", "1e-320", "1e-300", "1e300",
                           "9223372036854775808", "1e20", "abc", "", "0.5", "3", "40", "1e-5",
                           "100000000000000000000"])
COUNTS = st.sampled_from(["0", "-3", "1", "7", "1000", "9223372036854775808", "1.5", "x",
                          "100000000000000000000"])
SETTINGS = settings(derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def run(argv, capsys):
    start = time.perf_counter()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: usage error, exit status 2
        code = exc.code
        assert code == 2, argv
    elapsed = time.perf_counter() - start
    captured = capsys.readouterr()
    assert code in ((0, 1, 2) if argv[0] == "audit" else (0, 2)), (argv, code)
    assert "Traceback" not in captured.err, (argv, captured.err)
    if code == 2 and captured.err.startswith("dpkd "):
        lines = [line for line in captured.err.splitlines() if line.strip()]
        assert len(lines) == 1 and ": error: " in lines[0], (argv, captured.err)
    assert elapsed < LIMIT, (argv, elapsed)
    return code, captured


@SETTINGS
@given(kind=st.sampled_from(["laplace", "laplace-noisy-max", "gaussian", "subsampled-gaussian",
                             "randomized-response", "shuffle", "dp-sgd", "nope"]),
       noise=st.none() | NUMBERS, queries=st.none() | COUNTS, delta=st.none() | NUMBERS,
       target=st.none() | NUMBERS, extra=st.sampled_from([
           [], ["--users", "10000"], ["--users", "9223372036854775808"],
           ["--sampling-probability", "0.01"], ["--sampling-probability", "2"],
           ["--dataset-size", "6000", "--batch-size", "64"], ["--classes", "1"],
           ["--dataset-size", "10", "--batch-size", "64"]]))
def test_budget(capsys, kind, noise, queries, delta, target, extra):
    argv = ["budget", kind]
    count_flag = "--epochs" if kind == "dp-sgd" else "--queries"
    for flag, value in (("--noise", noise), (count_flag, queries), ("--delta", delta),
                        ("--target-epsilon", target)):
        if value is not None:
            argv += [flag, value]
    run([*argv, *extra, "--json"], capsys)


@SETTINGS
@given(epsilon=NUMBERS, clusters=COUNTS, k=COUNTS, budget=st.none() | NUMBERS)
def test_demo(capsys, epsilon, clusters, k, budget):
    argv = ["demo", "--epsilon", epsilon, "--clusters", clusters, "--k", k]
    if budget is not None:
        argv += ["--budget", budget]
    run([*argv, "--json"], capsys)


@SETTINGS
@given(mechanism=st.sampled_from(["Laplace", "DiscreteLaplace", "RandomizedResponse",
                                  "HalfNoiseLaplace", "NoSuchMechanism"]),
       epsilon=st.none() | NUMBERS, samples=st.none() | COUNTS,
       confidence=st.none() | NUMBERS)
def test_audit(capsys, mechanism, epsilon, samples, confidence):
    argv = ["audit", mechanism]
    for flag, value in (("--epsilon", epsilon), ("--samples", samples),
                        ("--confidence", confidence)):
        if value is not None:
            argv += [flag, value]
    if samples is None or samples in ("1000", "7", "1"):
        argv += ["--samples", "2000"]  # keep valid audits cheap
    run([*argv, "--json"], capsys)


@SETTINGS
@given(dataset=st.sampled_from(["digits", "mnist", "nope"]), epsilon=NUMBERS,
       clusters=COUNTS, k=COUNTS, mode=st.sampled_from(["central", "local-rr", "bogus"]),
       broken=st.sampled_from(["epsilon", "clusters", "k", "dataset", "out", "ledger"]))
def test_run_rknn_refuses_bad_input_before_work(capsys, tmp_path, dataset, epsilon, clusters,
                                                k, mode, broken):
    # One field at least is invalid, so that no example trains a model.
    values = {"epsilon": epsilon, "clusters": clusters, "k": k, "dataset": dataset}
    bad = {"epsilon": "-1", "clusters": "0", "k": "0", "dataset": "nope"}
    if broken in bad:
        values[broken] = bad[broken]
    (tmp_path / "file").write_text("x")
    out = str(tmp_path / "file" / "sub") if broken == "out" else str(tmp_path / "out")
    argv = ["run", "rknn", "--dataset", values["dataset"], "--epsilon", values["epsilon"],
            "--clusters", values["clusters"], "--k", values["k"], "--mode", mode, "--out", out,
            "--data-dir", str(tmp_path)]
    if broken == "ledger":
        argv += ["--ledger", str(tmp_path / "missing" / "ledger.sqlite")]
        argv[argv.index("--epsilon") + 1] = "1"
        argv[argv.index("--dataset") + 1] = "digits"
    code, _ = run(argv, capsys)
    assert code == 2


@pytest.mark.parametrize("argv", [
    ["ledger", "/nonexistent/ledger.sqlite"],
    ["ledger", "/"],
    ["mechanisms", "--json"],
    ["audit", "--all", "--plot", "/nonexistent_dir/x.png"],
    ["demo", "--ledger", "/nonexistent_dir/l.sqlite"],
    ["sweep", "rknn", "--dataset", "digits", "--epsilons", "1,-2", "--out", "/dev/null"],
])
def test_paths_and_fixed_cases(capsys, argv):
    code, _ = run(argv, capsys)
    assert code == (0 if argv[0] == "mechanisms" else 2)


def test_audit_plot_into_a_missing_folder_creates_nothing(capsys, tmp_path):
    target = tmp_path / "missing" / "x.png"
    code, captured = run(["audit", "Laplace", "--samples", "2000", "--plot", str(target)],
                         capsys)
    assert code == 2 and "--plot" in captured.err
    assert not (tmp_path / "missing").exists()


def test_an_os_error_mid_command_is_one_line(capsys, monkeypatch):
    """A disk that fills up during a command: exit 2 and one line naming the cause and file."""
    import dpkd_audit.cli.main as cli_main

    def full_disk(args):
        raise OSError(28, "No space left on device", "/data/out/record.json")

    monkeypatch.setattr(cli_main, "_cmd_mechanisms", full_disk)
    code, captured = run(["mechanisms"], capsys)
    assert code == 2
    assert "No space left on device" in captured.err and "record.json" in captured.err


@pytest.mark.parametrize("flag", ["--plot", "--ledger"])
def test_unwritable_output_paths_are_refused_before_work(capsys, monkeypatch, tmp_path, flag):
    """Root ignores permission bits, so the refusal of os.access is simulated."""
    import os

    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: (
        False if str(path).startswith(str(tmp_path)) else real_access(path, mode)))
    argv = (["audit", "Laplace", "--samples", "2000", "--plot", str(tmp_path / "x.png")]
            if flag == "--plot" else ["demo", "--ledger", str(tmp_path / "l.sqlite")])
    code, captured = run(argv, capsys)
    assert code == 2 and flag in captured.err and "not writable" in captured.err
    assert list(tmp_path.iterdir()) == []


#: Epsilon lists with at least one refused point (the later points too: "1,-1"), so that no
#: example trains a model.
BAD_EPSILONS = st.sampled_from(["", ",", "nan", "-1", "0", "a,b", "1e-320", "0.5,abc", "1,-1",
                                "1,1e-320", "inf", "1e-310"])


@SETTINGS
@given(epsilons=BAD_EPSILONS,
       modes=st.sampled_from(["central", "local-rr", "", "bogus", "central,,local-rr"]),
       seeds=st.sampled_from(["0", "0,1", "", "-1", "x", "1.5", "99999999999999999999999"]),
       clusters=st.one_of(st.just("10"), COUNTS))
def test_sweep_rknn_refuses_bad_input_before_writing_anything(capsys, tmp_path, epsilons,
                                                              modes, seeds, clusters):
    out = tmp_path / "sweep"
    argv = ["sweep", "rknn", "--dataset", "digits", "--epsilons", epsilons, "--modes", modes,
            "--seeds", seeds, "--clusters", clusters, "--out", str(out), "--quiet"]
    code, _ = run(argv, capsys)
    assert code == 2
    assert not out.exists()


@SETTINGS
@given(last=st.sampled_from(["0", "-1", "5", "x", "9223372036854775808"]),
       kind=st.sampled_from(["missing", "dir", "empty", "text", "ledger", "fifo"]))
def test_ledger_command_on_any_path(capsys, tmp_path_factory, last, kind):
    import os

    from dpkd_audit import Ledger

    folder = tmp_path_factory.mktemp("ledger")
    path = folder / "l.sqlite"
    if kind == "dir":
        path.mkdir()
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("not a ledger\n" * 10)
    elif kind == "ledger":
        Ledger(epsilon=1.0, path=path).close()
    elif kind == "fifo":
        os.mkfifo(path)
    code, captured = run(["ledger", str(path), "--last", last], capsys)
    valid = kind == "ledger" and last in ("0", "5", "9223372036854775808")
    assert code == (0 if valid else 2), captured.err


@SETTINGS
@given(epsilon=NUMBERS, label_epsilon=st.none() | NUMBERS, stages=COUNTS, stage_size=COUNTS,
       share=st.none() | NUMBERS, mode=st.sampled_from(["published", "sound", "bogus"]),
       dataset=st.sampled_from(["digits", "mnist", "nope"]),
       broken=st.sampled_from(["epsilon", "stages", "stage_size", "dataset", "out", "ledger",
                               "label_epsilon", "share"]))
def test_run_dpdfd_refuses_bad_input_before_work(capsys, tmp_path, epsilon, label_epsilon,
                                                 stages, stage_size, share, mode, dataset,
                                                 broken):
    # One field at least is invalid, so that no example trains a model.
    values = {"epsilon": epsilon, "stages": stages, "stage_size": stage_size,
              "dataset": dataset, "label_epsilon": label_epsilon, "share": share}
    bad = {"epsilon": "-1", "stages": "0", "stage_size": "1", "dataset": "nope",
           "label_epsilon": "0", "share": "1"}
    if broken in bad:
        values[broken] = bad[broken]
    (tmp_path / "file").write_text("x")
    out = str(tmp_path / "file" / "sub") if broken == "out" else str(tmp_path / "out")
    argv = ["run", "dpdfd", "--dataset", values["dataset"], "--mode", mode,
            "--epsilon", values["epsilon"], "--stages", values["stages"],
            "--stage-size", values["stage_size"], "--out", out, "--data-dir", str(tmp_path),
            "--quiet"]
    for flag, key in (("--label-epsilon", "label_epsilon"), ("--statistics-share", "share")):
        if values[key] is not None:
            argv += [flag, values[key]]
    if broken == "ledger":
        argv += ["--ledger", str(tmp_path / "missing" / "ledger.sqlite")]
    code, _ = run(argv, capsys)
    assert code == 2
    assert not (tmp_path / "out").exists()
