"""Record-level one-run audits of whole pipelines with mislabeled canary records (digits)."""

from __future__ import annotations

import json
import math
import types

import numpy as np
import pytest
import torch

from dpkd_audit.audit import training
from dpkd_audit.cli.main import main
from dpkd_audit.data import load_dataset
from dpkd_audit.pipelines.common import record_audit
from dpkd_audit.pipelines.common.loading import LoadedData
from dpkd_audit.pipelines.common.record_audit import audit_record_level, student_scores
from dpkd_audit.training_audit.canaries import RecordCanaries


def test_record_canaries_relabel_the_inserted_and_remove_the_others():
    data = load_dataset("digits")
    canaries = RecordCanaries(count=40, seed=3)
    changed, images, true_labels, wrong = canaries.insert(data)
    indices, wrong_again = canaries.choose(data.train_labels, data.num_classes)
    assert np.array_equal(wrong, wrong_again) and np.unique(indices).size == 40
    assert np.all(wrong != true_labels) and np.all((wrong >= 0) & (wrong < 10))
    assert np.array_equal(true_labels, data.train_labels[indices])
    inc = canaries.included
    assert changed.train_images.shape[0] == data.train_images.shape[0] - int((~inc).sum())
    # an inserted canary is present with its wrong label; a left-out one is gone
    keep = np.ones(data.train_labels.size, dtype=bool)
    keep[indices[~inc]] = False
    position = np.cumsum(keep) - 1
    for j, idx in enumerate(indices):
        if inc[j]:
            assert changed.train_labels[position[idx]] == wrong[j]
            assert np.array_equal(changed.train_images[position[idx]], images[j])
    assert np.array_equal(changed.test_images, data.test_images)
    with pytest.raises(ValueError, match="at most half"):
        RecordCanaries(count=data.train_labels.size, seed=0).insert(data)


@pytest.mark.parametrize("kwargs, name", [({"count": 1}, "count"), ({"count": 3, "seed": -2},
                                                                    "seed")])
def test_record_canaries_reject_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        RecordCanaries(**kwargs)


def test_student_scores_are_the_log_ratio_of_the_two_labels():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        model[1].weight.copy_(torch.randn(10, 64, generator=g))
    images = np.random.default_rng(0).integers(0, 256, size=(5, 8, 8), dtype=np.uint8)
    true = np.array([0, 1, 2, 3, 4])
    wrong = np.array([9, 8, 7, 6, 5])
    scores = student_scores(model, images, true, wrong)
    x = torch.from_numpy(images).float().div(255.0).unsqueeze(1)
    logp = torch.log_softmax(model(x), dim=1).detach().numpy()
    assert np.allclose(scores, logp[np.arange(5), wrong] - logp[np.arange(5), true],
                       atol=1e-6)


def _fake_pipeline(runs: list[int]):
    """A pipeline module stand-in: ``run`` returns a fixed linear student (no training)."""
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    with torch.no_grad():
        model[1].weight.copy_(torch.randn(10, 64, generator=torch.Generator().manual_seed(0)))

    def run(config, *, ledger, rng, device, data, progress):
        runs.append(1)
        return types.SimpleNamespace(
            to_record=lambda: {"delta": 1e-5}, epsilon_published=1.0,
            epsilon_record_level=math.inf, student=model, test_accuracy=0.5)

    return types.SimpleNamespace(run=run, ledger_for=lambda config: None,
                                 label_rng=lambda config: None)


@pytest.mark.parametrize("kwargs, sides", [
    ({"guesses": 10}, (10, 10)),  # guesses alone: each side, as before
    ({"guesses": 30, "guesses_out": 0}, (30, 0)),  # "in" only
    ({"guesses": 0, "guesses_out": 25}, (0, 25)),  # "out" only
    ({"guesses": 60, "guesses_out": 40}, (60, 40)),  # every canary guessed
])
def test_record_level_audit_passes_both_guess_counts(monkeypatch, kwargs, sides):
    seen, runs = [], []

    def bound(*args, **kw):
        seen.append((kw["guesses_in"], kw["guesses_out"]))
        return training.one_run_bound(*args, **kw)

    monkeypatch.setattr(record_audit, "one_run_bound", bound)
    data = LoadedData(dataset=load_dataset("digits"), seconds=0.0)
    result = audit_record_level(_fake_pipeline(runs), None, data=data,
                                canaries=RecordCanaries(count=100, seed=3), **kwargs)
    assert runs == [1] and seen == [sides]
    record = result.to_record()
    assert (record["guesses_in"], record["guesses_out"], record["guesses"]) == (*sides,
                                                                                sum(sides))
    order = np.argsort(-result.scores, kind="stable")
    inc = result.included
    assert record["correct"] == (int(np.count_nonzero(inc[order[:sides[0]]]))
                                 + int(np.count_nonzero(~inc[order[100 - sides[1]:]])))


@pytest.mark.parametrize("kwargs, message", [
    ({"guesses": 51}, r"guesses must be an integer in \[1, 50\]"),  # as before
    ({"guesses": 60, "guesses_out": 41}, r"guesses_out must be an integer in \[0, 40\]"),
    ({"guesses": 0, "guesses_out": 0}, "must not both be 0"),
    ({"guesses": None, "guesses_out": 5}, "guesses must be an integer"),
])
def test_record_level_audit_refuses_bad_counts_before_the_run(kwargs, message):
    runs = []
    data = LoadedData(dataset=load_dataset("digits"), seconds=0.0)
    with pytest.raises(ValueError, match=message):
        audit_record_level(_fake_pipeline(runs), None, data=data,
                           canaries=RecordCanaries(count=100, seed=3), **kwargs)
    assert runs == []


def test_cli_audit_run_published_dpdfd_through_the_student(tmp_path):
    out = tmp_path / "pub"
    # a short run (the record's fields, not the bound's power, are checked here): 2 teacher
    # epochs, 40 generator steps and 5 stages instead of the small preset's 10, 200 and 20
    code = main(["audit-run", "dpdfd", "--mode", "published", "--epsilon", "1", "--canaries",
                 "100", "--teacher-epochs", "2", "--generator-steps", "40", "--stages", "5",
                 "--out", str(out), "--quiet"])
    assert code in (0, 1)  # 1 would be an empirical refutation of the published claim
    record = json.loads((out / "audit.json").read_text())
    assert record["stage"] == "whole pipeline (released student)"
    assert record["epsilon_claimed"] == record["epsilon_published"] == 1.0
    assert record["epsilon_record_level"] is None  # infinite: a non-private step exists
    assert "not evidence of privacy" in record["claim_note"]
    assert record["canaries"] == 100 and record["guesses"] == 10
    assert record["guesses_in"] == record["guesses_out"] == 5
    assert sum(record["score_histogram"]["x"]) == record["included"]
    assert record["verdict"] == ("violation" if code == 1 else record["verdict"])
    assert record["config"]["stages"] == 5
