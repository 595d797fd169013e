"""Reverse k-NN pipeline: config, public-only representation, releases, end to end, sweep."""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest
from scipy import stats

from dpkd_audit._shuffle_math import numerical_epsilon
from dpkd_audit.data import Dataset, load_dataset, rknn_splits
from dpkd_audit.errors import BudgetExceededError
from dpkd_audit.events import ShuffledHistogramDpEvent, ShuffledLocalDpEvent
from dpkd_audit.ledger import Ledger
from dpkd_audit.pipelines.common.student import StudentConfig
from dpkd_audit.pipelines.rknn import (
    ReleaseMode,
    RknnConfig,
    build_mechanisms,
    ledger_for,
    prepare,
    release_counts,
    release_rng,
    run,
    shuffle_local_epsilon,
    sweep,
    sweep_configs,
)
from dpkd_audit.pipelines.rknn import pipeline as run_module

FAST_STUDENT = StudentConfig(epochs=2, batch_size=64, learning_rate=0.05, weight_decay=5e-4,
                             width=8)


def digits_config(**overrides) -> RknnConfig:
    values = {"dataset": "digits", "epsilon": 1.0, "clusters": 20, "student": FAST_STUDENT}
    values.update(overrides)
    return RknnConfig.small(**values)


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(("overrides", "match"), [
    ({"epsilon": 0.0}, "epsilon"),
    ({"epsilon": -1.0}, "epsilon"),
    ({"epsilon": float("nan")}, "epsilon"),
    ({"k": 5, "clusters": 4}, "k must be <= clusters=4"),
    ({"k": 0}, "k must be an integer >= 1"),
    ({"clusters": 1}, "clusters"),
    ({"dataset": "cifar"}, "dataset must be one of"),
    ({"mode": "global"}, "mode must be one of"),
    ({"mode": "central", "delta": 1e-5}, "delta must be 0"),
    ({"mode": "shuffle", "delta": 0.0}, r"delta must be in \(0, 1\)"),
    ({"mode": "shuffle-multi", "epsilon": 0.015, "k": 2}, "epsilon / k"),
    ({"simulate_local": True, "mode": "central"}, "simulate_local"),
    ({"seed": -1}, "seed"),
])
def test_config_rejects_bad_values_with_named_errors(overrides, match):
    with pytest.raises(ValueError, match=match):
        RknnConfig(**overrides)


def test_config_defaults_and_presets():
    assert RknnConfig(mode="shuffle").delta == 1e-5
    assert RknnConfig().delta == 0.0
    paper = RknnConfig.paper()
    assert paper.clusters == 40 and paper.k == 1
    assert paper.representation.kind.value == "encoder"
    assert RknnConfig.small().clusters == 100
    assert RknnConfig.small(dataset="digits").representation.kind.value == "pca"
    record = RknnConfig.small(mode="local-rr").to_dict()
    assert record["mode"] == "local-rr" and record["student"]["epochs"] >= 1


# --------------------------------------------------------------------------- public-only fit


def test_representation_fit_sees_only_public_images(monkeypatch):
    config = digits_config()
    splits = run_module.load_splits(config)
    seen = []
    original = run_module.fit_representation

    def spy(cfg, images, **kwargs):
        seen.append(np.array(images, copy=True))
        return original(cfg, images, **kwargs)

    monkeypatch.setattr(run_module, "fit_representation", spy)
    prepare(config, splits=splits)
    assert len(seen) == 1
    np.testing.assert_array_equal(seen[0], splits.public_images)
    private_rows = {row.tobytes() for row in splits.private_images}
    assert not any(row.tobytes() in private_rows for row in seen[0])


def test_queries_do_not_depend_on_private_images():
    """Replacing every private image leaves the representation and the queries unchanged."""
    config = digits_config()
    base = load_dataset("digits")
    rng = np.random.default_rng(5)
    scrambled = Dataset(
        train_images=rng.integers(0, 256, size=base.train_images.shape, dtype=np.uint8),
        train_labels=base.train_labels.copy(), test_images=base.test_images.copy(),
        test_labels=base.test_labels.copy(), name=base.name, num_classes=base.num_classes)
    a = prepare(config, splits=rknn_splits(base, seed=0))
    b = prepare(config, splits=rknn_splits(scrambled, seed=0))
    np.testing.assert_array_equal(a.queries.medoids, b.queries.medoids)
    np.testing.assert_array_equal(a.queries.features, b.queries.features)
    np.testing.assert_array_equal(a.queries.assignment, b.queries.assignment)
    assert not np.array_equal(a.neighbours, b.neighbours)  # private records are mapped


# --------------------------------------------------------------------------- releases


def _votes(n: int, s: int, k: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    neighbours = np.argsort(rng.random((n, s)), axis=1)[:, :k].astype(np.int64)
    labels = (neighbours[:, 0] % classes + (rng.random(n) < 0.2)) % classes
    return neighbours, labels.astype(np.int64)


@pytest.mark.parametrize("mode", [m.value for m in ReleaseMode])
@pytest.mark.parametrize("k", [1, 2])
def test_release_charges_the_planned_events_and_estimates_counts(mode, k):
    s, classes, n = 6, 3, 3000
    neighbours, labels = _votes(n, s, k, classes, seed=1)
    config = RknnConfig(dataset="digits", epsilon=2.0, mode=mode, clusters=s, k=k)
    ledger = ledger_for(config)
    out = release_counts(neighbours, labels, config=config, num_classes=classes, ledger=ledger,
                         rng=np.random.default_rng(2))
    charges = ledger.charges()
    planned = [m.event for m in build_mechanisms(config, num_private=n, num_classes=classes)]
    assert [c.event for c in charges] == planned == list(out.events)
    assert float(ledger.spent().epsilon) <= config.epsilon * (1 + 1e-9)
    assert out.true_counts.sum() == n * k
    # Estimates are unbiased with a known spread; 6 sigma of the worst cell (false-failure
    # probability < 1e-8 per cell).
    error = np.abs(out.estimated - out.true_counts).max()
    assert error < 6 * _release_sd(config, n, classes), (mode, error)


def _release_sd(config: RknnConfig, n: int, classes: int) -> float:
    (mech, *rest) = build_mechanisms(config, num_private=n, num_classes=classes)
    mode = config.mode
    if mode is ReleaseMode.CENTRAL:
        return np.sqrt(2) * mech.scale
    if mode is ReleaseMode.LOCAL_RR:
        return np.sqrt(n * mech.estimator_variance_per_client)
    if mode is ReleaseMode.LOCAL_COLLISION:
        return np.sqrt(n * mech.estimator_variance_per_client(False))
    if mode is ReleaseMode.SHUFFLE:
        return np.sqrt(n * mech.local.estimator_variance_per_client(False))
    return np.sqrt((1 + len(rest)) * mech.noise_variance)


def test_refused_release_draws_nothing_and_records_nothing():
    neighbours, labels = _votes(500, 5, 1, 2, seed=3)
    config = RknnConfig(dataset="digits", epsilon=1.0, clusters=5)
    ledger = Ledger(epsilon=0.5)
    rng = np.random.default_rng(4)
    state = rng.bit_generator.state
    with pytest.raises(BudgetExceededError):
        release_counts(neighbours, labels, config=config, num_classes=2, ledger=ledger, rng=rng)
    assert ledger.charges() == [] and rng.bit_generator.state == state


def test_shuffle_local_epsilon_is_the_largest_that_meets_the_target():
    for eps, n, delta in [(0.1, 60_000, 1e-5), (1.0, 60_000, 1e-5), (0.5, 2_000, 1e-6)]:
        eps0 = shuffle_local_epsilon(eps, n, delta)
        assert eps0 > eps  # shuffling amplifies here
        assert numerical_epsilon(eps0, n, delta) <= eps
        assert numerical_epsilon(eps0 * (1 + 1e-6), n, delta) > eps * (1 - 1e-9)
    # A single user: no amplification, only the slack that delta itself buys.
    assert 0.3 <= shuffle_local_epsilon(0.3, 1, 1e-5) < 0.3001


def test_shuffle_modes_use_the_shuffle_model_events():
    config = RknnConfig(dataset="digits", epsilon=0.5, mode="shuffle", clusters=10, k=2)
    (mech,) = build_mechanisms(config, num_private=10_000, num_classes=10)
    assert isinstance(mech.event, ShuffledLocalDpEvent) and mech.amplified
    assert mech.epsilon <= 0.5 < mech.local_epsilon
    multi = dataclasses.replace(config, mode="shuffle-multi")
    mechs = build_mechanisms(multi, num_private=10_000, num_classes=10)
    assert len(mechs) == 2
    assert all(isinstance(m.event, ShuffledHistogramDpEvent) for m in mechs)
    assert sum(m.epsilon for m in mechs) == pytest.approx(0.5)
    assert sum(m.delta for m in mechs) == pytest.approx(1e-5)


def test_simulated_local_rr_has_the_law_of_the_real_clients():
    """The aggregate simulator against the per-client randomizer: two-sample KS per cell.

    200 releases each; 4 cells tested at level 1e-3 each (false-failure rate < 0.4%).
    """
    s, classes, n = 2, 2, 400
    neighbours, labels = _votes(n, s, 1, classes, seed=7)
    real = RknnConfig(dataset="digits", epsilon=1.0, mode="local-rr", clusters=s)
    simulated = dataclasses.replace(real, simulate_local=True)
    samples = {}
    for name, config in (("real", real), ("sim", simulated)):
        rng = np.random.default_rng(11)
        samples[name] = np.stack([
            release_counts(neighbours, labels, config=config, num_classes=classes,
                           ledger=ledger_for(config), rng=rng).estimated.ravel()
            for _ in range(200)])
    for cell in range(s * classes):
        assert stats.ks_2samp(samples["real"][:, cell], samples["sim"][:, cell]).pvalue > 1e-3


# --------------------------------------------------------------------------- end to end


def test_run_checks_budget_before_any_work(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("prepare must not run when the budget cannot pay")

    monkeypatch.setattr(run_module, "prepare", fail)
    with pytest.raises(BudgetExceededError):
        run(digits_config(epsilon=1.0), ledger=Ledger(epsilon=0.5),
            rng=np.random.default_rng(0))


def test_run_rejects_too_many_clusters_before_any_work():
    with pytest.raises(ValueError, match="clusters must be <= the public set size 298"):
        run(digits_config(clusters=299), ledger=Ledger(epsilon=1.0),
            rng=np.random.default_rng(0))


def test_central_run_end_to_end_on_digits():
    config = digits_config(clusters=40, epsilon=2.0,
                           student=dataclasses.replace(FAST_STUDENT, epochs=15))
    ledger = ledger_for(config)
    result = run(config, ledger=ledger, rng=release_rng(config))
    record = result.to_record(command="test")
    assert record["method"] == "rknn" and record["mode"] == "central"
    assert record["epsilon_published"] == record["epsilon_record_level"] == 2.0
    assert len(record["charges"]) == 1 and len(ledger.charges()) == 1
    assert record["sizes"] == {"private": 1200, "public": 298, "student_test": 299}
    # Measured with these seeds: label accuracy 0.94, clean 0.94; the student trains on
    # 298 images for 15 epochs. Thresholds far below, far above chance (0.1).
    assert record["label_accuracy_without_noise"] > 0.85
    assert record["label_accuracy"] > 0.8
    assert record["test_accuracy"] > 0.5
    assert record["test_accuracy"] == record["test_accuracy_per_epoch"][-1]
    assert set(record["seconds"]) >= {"representation", "queries", "release", "student",
                                      "total"}


@pytest.mark.parametrize("mode", ["local-rr", "local-collision", "shuffle", "shuffle-multi"])
def test_other_modes_run_end_to_end(mode):
    config = digits_config(mode=mode, epsilon=4.0)
    result = run(config, ledger=ledger_for(config), rng=release_rng(config))
    assert 0.0 <= result.test_accuracy <= 1.0
    assert result.epsilon_record_level <= 4.0 * (1 + 1e-9)
    if mode != "shuffle-multi":
        assert result.local_epsilon is not None


def test_run_is_reproducible_for_a_seed():
    config = digits_config()
    a = run(config, ledger=ledger_for(config), rng=release_rng(config))
    b = run(config, ledger=ledger_for(config), rng=release_rng(config))
    assert a.label_accuracy == b.label_accuracy and a.test_accuracy == b.test_accuracy


def test_sweep_prepares_once_per_seed(monkeypatch):
    calls = []
    original = run_module.prepare

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    sweep_module = importlib.import_module("dpkd_audit.pipelines.rknn.sweep")
    monkeypatch.setattr(sweep_module, "prepare", counting)
    configs = sweep_configs(digits_config(), epsilons=[0.5, 2.0],
                            modes=["central", "shuffle"], seeds=[0])
    results = list(sweep(configs))
    assert len(calls) == 1 and len(results) == 4
    assert [(r.config.mode.value, r.config.epsilon) for r in results] == [
        ("central", 0.5), ("central", 2.0), ("shuffle", 0.5), ("shuffle", 2.0)]
    assert results[2].delta == 1e-5 and results[0].delta == 0.0
