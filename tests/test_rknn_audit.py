"""End-to-end audit of reverse k-NN's release path (digits, through the real pipeline code).

False-failure rates: the power test audits a claim of epsilon 2 with 1,000 runs per side and
asks for a bound above half the claim (1.0): over audit seeds 0-9 the bound was 1.19-1.78
(mean 1.50, standard deviation 0.19: z ~ 2.6, a false failure well under 1%; seed 0, the
test's, gives 1.45). At epsilon 1 the same power took 3,000 runs (bound 0.61 at seed 0) and
three times as long. The validity side (bound <= claim) fails for a correct pipeline with
probability <= 5% by the bound's construction, here at one fixed seed.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpkd_audit.audit import audit_sampler
from dpkd_audit.cli.main import main
from dpkd_audit.pipelines.rknn import RknnConfig, ledger_for, prepare, release_counts
from dpkd_audit.pipelines.rknn.audit import (
    audit_release,
    choose_canary,
    release_path_sampler,
)

CONFIG = RknnConfig.small(dataset="digits", mode="central", epsilon=1.0, clusters=10)
#: The power test's claim (see the module docstring).
POWER_CONFIG = RknnConfig.small(dataset="digits", mode="central", epsilon=2.0, clusters=10)


@pytest.fixture(scope="module")
def prepared():
    return prepare(CONFIG)


def test_audit_of_the_release_path_has_power_and_holds_the_claim():
    result = audit_release(POWER_CONFIG, runs=1000, seed=0)
    assert POWER_CONFIG.epsilon / 2 < result.audit.epsilon_lower <= POWER_CONFIG.epsilon
    assert result.audit.attack.value == "coordinate"
    assert not result.audit.violation
    assert result.scores[True].shape == (1000,) and result.scores[False].shape == (1000,)
    # the canary's votes moved: its score is 2 per query larger on x on average
    gap = result.scores[True].mean() - result.scores[False].mean()
    assert 1.5 < gap < 2.5
    record = result.to_record(command="test")
    assert record["neighbouring"].startswith("replace-one")
    assert record["epsilon_lower"] == result.audit.epsilon_lower
    json.dumps(record, allow_nan=False)


def test_a_release_path_that_leaks_exact_counts_is_flagged(prepared):
    """Positive control: the same path plus one extra output, the exact counts (the
    evaluator-only diagnostics a careless record could carry): the audit must see it."""
    canary = choose_canary(prepared, num_classes=10, seed=0)
    honest = release_path_sampler(CONFIG, prepared, canary)
    labels = prepared.splits.private_labels

    def leaky(in_x, n, rng):
        out = honest(in_x, n, rng)
        lab = labels.copy()
        lab[canary.index] = canary.label_x if in_x else canary.label_x_prime
        exact = release_counts(prepared.neighbours, lab, config=CONFIG, num_classes=10,
                               ledger=ledger_for(CONFIG), rng=rng).true_counts
        return np.hstack([out, np.tile(exact.ravel().astype(float), (n, 1))])

    res = audit_sampler(leaky, True, False, epsilon=1.0, n=200,
                        rng=np.random.default_rng(1))
    assert res.violation and res.epsilon_lower > 3.0


def test_sampler_runs_the_pipeline_release(prepared):
    """Each row is one run: the released counts, their noisy argmax and the label accuracy."""
    canary = choose_canary(prepared, num_classes=10, seed=5)
    assert canary.label_x == prepared.splits.private_labels[canary.index]
    assert canary.label_x_prime != canary.label_x
    sampler = release_path_sampler(CONFIG, prepared, canary)
    rows = sampler(True, 3, np.random.default_rng(0))
    s = CONFIG.clusters
    assert rows.shape == (3, s * 10 + s + 1)
    counts = rows[:, :s * 10].reshape(3, s, 10)
    assert np.all(counts == np.round(counts))  # exact discrete Laplace by default
    for row, c in zip(rows, counts, strict=True):
        labels = row[s * 10:s * 10 + s].astype(np.int64)  # a noisy argmax (random ties)
        assert np.array_equal(c[np.arange(s), labels], c.max(axis=1))
        assert 0.0 <= row[-1] <= 1.0
    # same seed, same rows: the runs are reproducible
    again = release_path_sampler(CONFIG, prepared, canary)(True, 3, np.random.default_rng(0))
    assert np.array_equal(rows, again)


@pytest.mark.parametrize("runs", [0, 39, 2.5])
def test_audit_release_rejects_too_few_runs(runs):
    with pytest.raises(ValueError, match="runs"):
        audit_release(CONFIG, runs=runs)


def test_audit_release_rejects_a_foreign_config():
    with pytest.raises(ValueError, match="RknnConfig"):
        audit_release({"epsilon": 1.0}, runs=100)


def test_cli_audit_run_writes_record_and_plot(tmp_path, capsys):
    out = tmp_path / "audit"
    code = main(["audit-run", "rknn", "--dataset", "digits", "--clusters", "10", "--epsilon",
                 "1", "--runs", "100", "--out", str(out), "--quiet"])
    assert code == 0
    record = json.loads((out / "audit.json").read_text())
    assert record["pipeline"] == "rknn" and record["runs_per_side"] == 100
    assert record["epsilon_lower"] <= 1.0 and record["verdict"] in ("consistent", "inconclusive")
    hist = record["score_histogram"]
    assert sum(hist["x"]) == 100 and sum(hist["x_prime"]) == 100
    assert len(hist["edges"]) == len(hist["x"]) + 1
    assert record["command"].startswith("dpkd audit-run rknn")
    assert record["provenance"]["package_version"]
    assert (out / "audit.png").stat().st_size > 10_000


@pytest.mark.parametrize("argv, message", [
    (["--runs", "10"], "--runs must be >= 40"),
    (["--runs", "0"], "--runs"),
    (["--epsilon", "0"], "--epsilon"),
    (["--confidence", "1"], "--confidence"),
])
def test_cli_audit_run_bad_input(tmp_path, capsys, argv, message):
    out = tmp_path / "never"
    try:
        code = main(["audit-run", "rknn", "--dataset", "digits", "--out", str(out), "--quiet",
                     *argv])
    except SystemExit as exc:  # argparse type errors
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_cli_audit_run_unknown_pipeline(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["audit-run", "nope", "--out", "x"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
