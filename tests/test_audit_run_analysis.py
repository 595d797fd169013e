"""``dpkd audit-run ... --analysis steinke|fdp|gaussian|all``: the one-run analyses side by side.

The command-line wiring is tested on the DP-DFD sound path with the DP-SGD training replaced
by a stand-in (the plan and the audited run are faked; the scores are an idealised mu-GDP
game, 1,000 canaries at mu = mu(8.6, 1e-5), fixed seed), so each test takes well under 10 s;
the real training path is exercised by tests/test_dp_sgd_audit.py, which runs the same
command with the default (all). The stand-in's claim (6) lies between the guess-based bounds
(Steinke 3.47, f-DP 5.55: 100 of 100 guesses right) and the Gaussian estimate (6.64), so the
exit status shows which analysis decides it.
"""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

from dpkd_audit.audit.one_run_fdp import gaussian_mu
from dpkd_audit.audit.training import OneRunAnalysis, one_run_analyses, one_run_bound
from dpkd_audit.cli.main import main

CLAIM = 6.0


def _bound(epsilon: float = CLAIM, delta: float = 1e-5, guesses: int = 50,
           guesses_out: int | None = None):
    rng = np.random.default_rng(34)
    included = rng.random(1000) < 0.5
    scores = gaussian_mu(8.6, 1e-5) * included + rng.standard_normal(1000)
    out = guesses if guesses_out is None else guesses_out
    bound = one_run_bound(scores, included, epsilon=epsilon, delta=delta, guesses_in=guesses,
                          guesses_out=out)
    return bound, scores, included


def test_the_enum_parses_selects_and_decides():
    assert [m.value for m in OneRunAnalysis] == ["steinke", "fdp", "gaussian", "all"]
    assert OneRunAnalysis.parse("fdp") is OneRunAnalysis.FDP
    with pytest.raises(ValueError, match=r"analysis must be one of steinke, fdp, gaussian, "
                                         r"all; got 'Steinke'"):
        OneRunAnalysis.parse("Steinke")
    assert OneRunAnalysis.ALL.selected() == (OneRunAnalysis.STEINKE, OneRunAnalysis.FDP,
                                             OneRunAnalysis.GAUSSIAN)
    assert OneRunAnalysis.GAUSSIAN.selected() == (OneRunAnalysis.GAUSSIAN,)
    assert OneRunAnalysis.ALL.deciding() is OneRunAnalysis.STEINKE
    assert OneRunAnalysis.FDP.deciding() is OneRunAnalysis.FDP


def test_one_run_analyses_side_by_side():
    bound, _, _ = _bound()
    every = one_run_analyses(bound)
    assert (every["analysis"], every["deciding"]) == ("all", "steinke")
    entries = every["analyses"]
    assert list(entries) == ["steinke", "fdp", "gaussian"]
    assert entries["steinke"]["epsilon_lower"] == bound.epsilon_lower
    assert entries["steinke"]["verdict"] == bound.verdict
    assert entries["fdp"]["epsilon_lower"] == bound.epsilon_lower_fdp
    assert entries["gaussian"]["epsilon_lower"] == bound.epsilon_lower_gaussian
    assert entries["gaussian"]["epsilon_estimate"] == bound.gaussian.epsilon_estimate
    assert "not a distribution-free bound" in entries["gaussian"]["note"]
    # the stand-in's claim separates the analyses
    assert bound.epsilon_lower < bound.epsilon_lower_fdp < CLAIM < bound.epsilon_lower_gaussian
    assert entries["gaussian"]["verdict"] == "violation"
    assert entries["steinke"]["verdict"] != "violation"
    only = one_run_analyses(bound, OneRunAnalysis.FDP)
    assert list(only["analyses"]) == ["fdp"] and only["deciding"] == "fdp"
    # delta = 0: neither f-DP nor the Gaussian fit applies
    pure, _, _ = _bound(delta=0.0)
    none = one_run_analyses(pure)["analyses"]
    assert none["fdp"] == {"epsilon_lower": None, "verdict": None, "note": none["fdp"]["note"]}
    assert none["gaussian"]["epsilon_lower"] is None
    with pytest.raises(ValueError, match="analysis"):
        one_run_analyses(bound, "all")
    json.dumps(every, allow_nan=False)


@pytest.fixture
def fake_dp_sgd(monkeypatch):
    """The DP-DFD sound path with the plan and the DP-SGD run replaced (no training).

    Returns the guess counts each call of ``audit_dp_sgd`` received.
    """
    from dpkd_audit.pipelines import dpdfd
    from dpkd_audit.pipelines.common import dp_sgd_audit

    plan = types.SimpleNamespace(
        target_epsilon=10.0, noise_multiplier=1.0, steps=10,
        schedule=types.SimpleNamespace(sampling_probability=0.1, dataset_size=100))

    calls = []

    def fake_audit(data, *, guesses, guesses_out, confidence, **_):
        calls.append((guesses, guesses_out))
        bound, scores, included = _bound(guesses=guesses, guesses_out=guesses_out)
        return dp_sgd_audit.DpSgdAudit(role="teacher", plan=plan, epsilon_dp_sgd=CLAIM,
                                       bound=bound, scores=scores, included=included,
                                       canary_rows=0, test_accuracy=0.5, seconds=0.0)

    monkeypatch.setattr(dpdfd, "planned_dp_sgd", lambda *args, **kwargs: plan)
    monkeypatch.setattr(dp_sgd_audit, "audit_dp_sgd", fake_audit)
    return calls


@pytest.mark.parametrize("analysis, shown, code", [
    (None, ["steinke", "fdp", "gaussian"], 0),  # default all: Steinke's verdict decides
    ("all", ["steinke", "fdp", "gaussian"], 0),
    ("steinke", ["steinke"], 0),
    ("fdp", ["fdp"], 0),
    ("gaussian", ["gaussian"], 1),  # its estimate is above the claim
])
def test_cli_analysis_flag(tmp_path, capsys, fake_dp_sgd, analysis, shown, code):
    out = tmp_path / "audit"
    flag = [] if analysis is None else ["--analysis", analysis]
    assert main(["audit-run", "dpdfd", "--epsilon", "10", "--canaries", "1000", *flag,
                 "--out", str(out), "--quiet"]) == code
    record = json.loads((out / "audit.json").read_text())
    assert record["analysis"] == (analysis or "all")
    assert list(record["analyses"]) == shown
    assert record["deciding"] == ("steinke" if analysis in (None, "all") else analysis)
    # the guess-based figures and the Gaussian fit stay in the record's flat fields
    assert record["epsilon_lower"] < record["epsilon_lower_fdp"] < CLAIM
    assert record["epsilon_lower_gaussian"] == record["gaussian_fit"]["epsilon_lower"] > CLAIM
    text = capsys.readouterr().out
    lines = [line.split()[0] for line in text.splitlines() if line.startswith("  ")]
    assert lines == [*shown, "exit"]
    for name in shown:
        value = record["analyses"][name]["epsilon_lower"]
        assert f"{name:<9} epsilon" in text and f"{value:.4f}" in text
    assert f"exit status from {record['deciding']}" in text


@pytest.mark.parametrize("pipeline", ["dpdfd", "dgd"])
@pytest.mark.parametrize("value", ["bogus", "Steinke", ""])
def test_cli_bad_analysis_is_refused_naming_the_flag(tmp_path, capsys, pipeline, value):
    out = tmp_path / "never"
    with pytest.raises(SystemExit) as exc:  # argparse: status 2 before any work
        main(["audit-run", pipeline, "--epsilon", "3", "--analysis", value, "--out", str(out),
              "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --analysis: must be one of steinke, fdp, gaussian, all" in err
    assert repr(value) in err
    assert not out.exists()


@pytest.mark.parametrize("flags, sides", [
    ([], (50, 50)),  # today's default: 5% of --canaries on each side
    (["--guesses", "30"], (30, 30)),  # --guesses alone: each side, as before
    (["--guesses", "300", "--guesses-out", "20"], (300, 20)),
    (["--guesses", "200", "--guesses-out", "0"], (200, 0)),  # "in" guesses only
    (["--guesses-out", "0"], (50, 0)),  # the default "in" count
])
def test_cli_guesses_out_reaches_the_audit_and_the_record(tmp_path, capsys, fake_dp_sgd, flags,
                                                          sides):
    out = tmp_path / "audit"
    main(["audit-run", "dpdfd", "--epsilon", "10", "--canaries", "1000", *flags,
          "--out", str(out), "--quiet"])
    assert fake_dp_sgd == [sides]
    record = json.loads((out / "audit.json").read_text())
    assert (record["guesses_in"], record["guesses_out"]) == sides
    assert record["guesses"] == sum(sides)
    assert f"guesses right ({sides[0]} in, {sides[1]} out)" in capsys.readouterr().out
