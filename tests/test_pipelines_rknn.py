"""Reverse k-NN pipeline: config, public-only representation, releases, end to end, sweep."""

from __future__ import annotations

import dataclasses
import importlib
import json

import numpy as np
import pytest
from scipy import stats

from dpkd_audit import __version__
from dpkd_audit._shuffle_math import numerical_epsilon
from dpkd_audit.data import Dataset, load_dataset, rknn_splits
from dpkd_audit.errors import BudgetExceededError
from dpkd_audit.events import ShuffledHistogramDpEvent, ShuffledLocalDpEvent
from dpkd_audit.ledger import Ledger
from dpkd_audit.pipelines.common.student import StudentConfig
from dpkd_audit.pipelines.rknn import (
    PREPARED_STAGES,
    LoadedSplits,
    ReleaseMode,
    RknnConfig,
    build_mechanisms,
    check_configs,
    ledger_for,
    prepare,
    release_counts,
    release_rng,
    run,
    shuffle_local_epsilon,
    splits_key,
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
    # Seconds mean what they mean for a run of its own: every stage the result depends on,
    # the shared ones (measured once) included in each row and named in shared_stages.
    single = run(configs[0], ledger=ledger_for(configs[0]), rng=release_rng(configs[0]))
    stages = [*PREPARED_STAGES, "release", "labels", "student", "total"]
    assert list(single.seconds) == stages and single.shared_stages == ()
    for result in results:
        record = result.to_record()
        assert list(record["seconds"]) == stages
        assert record["seconds"]["total"] == pytest.approx(
            sum(v for k, v in record["seconds"].items() if k != "total"), abs=0.01)
        assert record["shared_stages"] == list(PREPARED_STAGES)
        assert {record["seconds"][k] for k in PREPARED_STAGES} == {
            results[0].seconds[k] for k in PREPARED_STAGES}  # one measurement, in every row


def test_sweep_shares_only_the_data_across_seeds(monkeypatch):
    import sys

    # the package re-exports the function ``sweep``, which shadows the module's name
    sweep_module = sys.modules["dpkd_audit.pipelines.rknn.sweep"]
    prepared_seeds = []
    real_prepare = sweep_module.prepare

    def counting_prepare(config, **kwargs):
        prepared_seeds.append(config.seed)
        return real_prepare(config, **kwargs)

    monkeypatch.setattr(sweep_module, "prepare", counting_prepare)
    configs = sweep_configs(digits_config(), epsilons=[1.0], modes=["central"], seeds=[0, 1])
    results = list(sweep(configs))
    assert [r.shared_stages for r in results] == [("data",), ("data",)]
    assert results[0].seconds["data"] == results[1].seconds["data"]
    # the representation is fitted (and timed) once per seed, not shared: no timing compared
    assert prepared_seeds == [0, 1]


def test_sweep_refuses_checked_splits_of_other_configs():
    checked = check_configs([digits_config()])
    other = digits_config(split_seed=1)
    with pytest.raises(ValueError, match="checked must hold the splits of every config"):
        next(sweep([other], checked=checked))


def test_run_loads_the_data_once_and_names_each_stage_once(monkeypatch, capsys):
    loads = []
    original = run_module.load_dataset

    def counting(*args, **kwargs):
        loads.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(run_module, "load_dataset", counting)
    config = digits_config()
    result = run(config, ledger=ledger_for(config), rng=release_rng(config), progress=True)
    err = capsys.readouterr().err
    assert len(loads) == 1
    for stage in result.seconds:
        if stage != "total":
            assert err.count(f"[dpkd] {stage} ...") == 1, (stage, err)
    # Splits loaded beforehand (as `dpkd run` does through check_configs) are not reloaded.
    checked = check_configs([config], progress=True)
    assert len(loads) == 2 and capsys.readouterr().err.count("[dpkd] data ...") == 1
    result = run(config, ledger=ledger_for(config), rng=release_rng(config),
                 splits=checked[splits_key(config)], progress=True)
    assert len(loads) == 2 and "[dpkd] data" not in capsys.readouterr().err
    assert result.seconds["data"] == round(checked[splits_key(config)].seconds, 3)


def test_run_refuses_splits_of_another_config():
    config = digits_config()
    splits = rknn_splits(load_dataset("digits"), seed=1)
    with pytest.raises(ValueError, match=r"split seed 0 .*got dataset 'digits', seed 1"):
        run(config, ledger=ledger_for(config), rng=release_rng(config), splits=splits)
    with pytest.raises(ValueError, match="splits must be a Splits, a LoadedSplits or None"):
        run(config, ledger=ledger_for(config), rng=release_rng(config), splits="digits")
    with pytest.raises(ValueError, match="seconds must be a finite number >= 0; got -1"):
        LoadedSplits(splits=splits, seconds=-1)


def test_record_carries_provenance():
    config = digits_config()
    record = run(config, ledger=ledger_for(config), rng=release_rng(config)).to_record()
    prov = record["provenance"]
    assert prov["package"] == "dpkd-audit" and prov["package_version"] == __version__
    assert set(prov["versions"]) >= {"numpy", "torch", "scikit-learn"}
    assert prov["versions"]["numpy"] == np.__version__
    assert any(name.startswith("faiss") for name in prov["versions"])
    assert prov["created_utc"].endswith("Z") and "environment" not in record
    assert json.loads(json.dumps(record, allow_nan=False)) == record
