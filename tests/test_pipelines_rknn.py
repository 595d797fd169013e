"""Reverse k-NN pipeline: config, public-only representation, releases, end to end, sweep."""

from __future__ import annotations

import dataclasses
import importlib
import json

import numpy as np
import pytest
from scipy import stats

from dpkd_audit import __version__
from dpkd_audit._math.shuffle import numerical_epsilon
from dpkd_audit.data import Dataset, load_dataset, rknn_splits
from dpkd_audit.errors import BudgetExceededError
from dpkd_audit.events import ShuffledHistogramDpEvent, ShuffledLocalDpEvent
from dpkd_audit.ledger import Ledger
from dpkd_audit.pipelines.common.manifold import ManifoldConfig
from dpkd_audit.pipelines.common.representations import (
    RepresentationConfig,
    fit_representation,
)
from dpkd_audit.pipelines.common.student import StudentConfig
from dpkd_audit.pipelines.purity import cluster_purity
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
from dpkd_audit.pipelines.rknn.queries import select_queries

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
    ({"self_training_rounds": -1}, "self_training_rounds"),
    ({"self_training_rounds": 0.5}, "self_training_rounds"),
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
    small = RknnConfig.small()
    assert small.clusters == 10 and small.representation.kind.value == "umap"
    assert small.self_training_rounds == 1 and small.student.width == 32
    assert RknnConfig.small(dataset="digits").self_training_rounds == 0
    assert RknnConfig().self_training_rounds == 0 and RknnConfig.paper().self_training_rounds == 0
    assert RknnConfig.small(dataset="fashion-mnist", mode="central", epsilon=0.01).clusters == 40
    assert RknnConfig.small(dataset="fashion-mnist", mode="central", epsilon=0.1).clusters == 100
    assert RknnConfig.small(dataset="fashion-mnist", mode="local-collision").clusters == 10
    assert RknnConfig.small(dataset="fashion-mnist", clusters=7).clusters == 7
    # hand-made features get purer with s: their own s, not UMAP's
    hog = RepresentationConfig(kind="hog-pca")
    assert RknnConfig.small(representation=hog, epsilon=0.1).clusters == 100
    assert RknnConfig.small(representation=hog, epsilon=0.01).clusters == 40
    assert RknnConfig.small(representation=hog, mode="local-rr").clusters == 10
    with pytest.raises(ValueError, match="min_dist must be in"):
        ManifoldConfig(min_dist=1.5)


@pytest.mark.parametrize(("field", "value", "match"), [
    ("components", 0, "components"), ("neighbors", 1, "neighbors"),
    ("min_dist", -0.1, "min_dist"), ("map_neighbors", 0, "map_neighbors"),
    ("pixel_weight", -1.0, "pixel_weight"), ("pixel_weight", float("nan"), "pixel_weight")])
def test_bad_manifold_settings_name_the_parameter(field, value, match):
    with pytest.raises(ValueError, match=match):
        ManifoldConfig(**{field: value})


def test_select_queries_refuses_bad_restarts_and_iterations():
    features = np.random.default_rng(0).random((50, 3)).astype(np.float32)
    with pytest.raises(ValueError, match="restarts"):
        select_queries(features, 5, seed=0, restarts=0)
    with pytest.raises(ValueError, match="iterations"):
        select_queries(features, 5, seed=0, iterations=0)


def test_umap_needs_more_public_images_than_its_neighbours():
    config = digits_config(representation=RepresentationConfig(kind="umap"), public_size=25,
                           clusters=5)
    with pytest.raises(ValueError, match="more public images than its 30 neighbours"):
        run_module.load_splits(config)
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


def _scrambled(base: Dataset, seed: int, keep: int = 0) -> Dataset:
    """``base`` with every private (train) record after the first ``keep`` replaced."""
    rng = np.random.default_rng(seed)
    images = base.train_images.copy()
    images[keep:] = rng.integers(0, 256, size=images[keep:].shape, dtype=np.uint8)
    labels = base.train_labels.copy()
    labels[keep:] = rng.integers(0, base.num_classes, size=labels[keep:].shape)
    return Dataset(train_images=images, train_labels=labels,
                   test_images=base.test_images.copy(), test_labels=base.test_labels.copy(),
                   name=base.name, num_classes=base.num_classes)


@pytest.mark.parametrize(("kind", "pixel_weight"), [
    ("pca", 0.0), ("hog", 0.0), ("hog-pca", 0.0), ("umap", 0.0), ("umap", 0.5)])
def test_a_private_records_neighbours_depend_on_that_record_alone(kind, pixel_weight):
    """The 2k sensitivity needs each record's votes to be a function of that record only.

    Replacing every other private record leaves the first 50 records' features (up to float
    rounding) and k nearest queries unchanged; a representation that recentred private
    features with the private mean (or any statistic of the private set, however small its
    weight) fails this.
    """
    config = digits_config(k=2, representation=RepresentationConfig(
        kind=kind, components=20, manifold=ManifoldConfig(neighbors=10,
                                                          pixel_weight=pixel_weight)))
    base = load_dataset("digits")
    features = []
    original = run_module.fit_representation

    def spy(*args, **kwargs):
        fitted = original(*args, **kwargs)
        inner = fitted.transform

        class Spy:
            def transform(self, images):
                out = inner(images)
                if len(images) == base.n_train:  # the private set
                    features.append(out)
                return out

        return Spy()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_module, "fit_representation", spy)
        a = prepare(config, splits=rknn_splits(base, seed=0))
        b = prepare(config, splits=rknn_splits(_scrambled(base, 6, keep=50), seed=0))
    np.testing.assert_allclose(features[0][:50], features[1][:50], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(a.neighbours[:50], b.neighbours[:50])
    assert not np.array_equal(a.neighbours[50:], b.neighbours[50:])


def test_umap_map_is_record_wise_and_keeps_public_points_in_place():
    """Each image's embedding is a function of that image and the public data alone (UMAP's
    own batch transform is not); a public image maps to its own fitted embedding."""
    base = load_dataset("digits")
    splits = rknn_splits(base, seed=0)
    rep = fit_representation(RepresentationConfig(kind="umap", components=20,
                                                  manifold=ManifoldConfig(neighbors=10)),
                             splits.public_images, seed=0)
    private = splits.private_images[:300]
    together = rep.transform(private)
    alone = np.concatenate([rep.transform(private[i:i + 1]) for i in range(0, 300, 37)])
    # equal up to float rounding (BLAS blocks a batch's matrix product differently)
    np.testing.assert_allclose(together[::37], alone, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rep.transform(splits.public_images), rep.embedding, atol=1e-3)
    # the UMAP clusters of the digits are purer than the PCA-20 ones at s = 10
    pca = fit_representation(RepresentationConfig(kind="pca", components=20, deskew=False),
                             splits.public_images, seed=0)
    purity = {name: cluster_purity(select_queries(r.transform(splits.public_images), 10,
                                                  seed=0).assignment, splits.public_labels, 10)
              for name, r in (("umap", rep), ("pca", pca))}
    # seed 0 gives 0.862 under umap-learn 0.5.11 and 0.819 under 0.5.12 (which dropped fastmath
    # and parallelised its k-NN smoothing); seeds 0-3 span 0.82-0.87 (0.5.12) and 0.86-0.89
    # (0.5.11); PCA-20 gives 0.785 under both. The floor keeps a margin under either release.
    assert purity["umap"] > purity["pca"] + 0.02 and purity["umap"] > 0.80, purity


def test_the_record_wise_test_fails_for_a_recentred_representation(monkeypatch):
    """The test above can fail: private features recentred by their own mean break it."""
    config = digits_config(representation=RepresentationConfig(kind="pca", components=20))
    original = run_module.fit_representation

    class Recentred:
        def __init__(self, inner):
            self.inner = inner

        def transform(self, images):
            x = self.inner.transform(images)
            return x - x.mean(axis=0) if len(images) > 400 else x  # the private set only

    monkeypatch.setattr(run_module, "fit_representation",
                        lambda *args, **kwargs: Recentred(original(*args, **kwargs)))
    base = load_dataset("digits")
    a = prepare(config, splits=rknn_splits(base, seed=0))
    b = prepare(config, splits=rknn_splits(_scrambled(base, 6, keep=50), seed=0))
    assert not np.array_equal(a.neighbours[:50], b.neighbours[:50])


def _run_with_release(config, splits, estimated=None):
    """Run ``config`` on ``splits`` with the release's noise drawn from its own generator;
    with ``estimated``, the noisy counts are replaced by those (the private counts are not)."""
    released = {}

    def release(neighbours, labels, **kwargs):
        kwargs["rng"] = np.random.default_rng(99)
        out = release_counts(neighbours, labels, **kwargs)
        if estimated is not None:
            out = dataclasses.replace(out, estimated=estimated.copy())
        released["out"] = out
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_module, "release_counts", release)
        result = run(config, ledger=ledger_for(config), rng=np.random.default_rng(3),
                     splits=splits)
    return result, released["out"]


@pytest.mark.parametrize(("mode", "rounds"), [("central", 0), ("central", 1),
                                              ("local-collision", 0), ("shuffle-multi", 0)])
def test_the_released_record_is_a_function_of_the_release_and_public_data(mode, rounds):
    """Other private data with the same noisy counts gives the same record, field by field.

    Run 1 on the private set; run 2 on a private set where every record is replaced, its
    noisy counts swapped for run 1's (its exact counts stay its own). Every record field
    except timing and provenance must be equal: nothing in the record may read the exact
    private counts, labels or images except through the release. The evaluator-only
    diagnostics, which do, must differ (so the test can fail).
    """
    config = digits_config(mode=mode, epsilon=2.0, self_training_rounds=rounds)
    base = load_dataset("digits")
    first, release_1 = _run_with_release(config, rknn_splits(base, seed=0))
    second, release_2 = _run_with_release(config, rknn_splits(_scrambled(base, 7), seed=0),
                                          estimated=release_1.estimated)
    assert not np.array_equal(release_1.true_counts, release_2.true_counts)
    a, b = first.to_record(command="x"), second.to_record(command="x")
    assert set(a) == set(b)
    for key in sorted(set(a) - {"seconds", "provenance"}):
        assert a[key] == b[key], key
    assert first.to_evaluator_record() != second.to_evaluator_record()
    assert "label_accuracy_without_noise" not in a and "query_accuracy" not in a
    assert len(a["test_accuracy_per_round"]) == rounds + 1
    assert (a["self_trained_label_accuracy"] is None) == (rounds == 0)


def test_cluster_purity_by_hand_and_errors():
    assignment = np.array([0, 0, 0, 1, 1, 2])
    labels = np.array([1, 1, 2, 0, 0, 2])
    assert cluster_purity(assignment, labels, 3) == pytest.approx(5 / 6)
    with pytest.raises(ValueError, match="labels integers in"):
        cluster_purity(assignment, labels, 2)
    with pytest.raises(ValueError, match="equal non-empty"):
        cluster_purity(assignment[:2], labels, 3)


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


@pytest.mark.parametrize("k", [1, 3])
def test_central_noise_has_the_scale_the_epsilon_demands(k):
    """Independent of the mechanism's own scale: eps-DP for L1 sensitivity 2k needs Laplace
    noise of scale 2k / eps, standard deviation sqrt(2) * 2k / eps (the discrete Laplace's is
    within 1% of it at these scales). 4,000 noise draws: the sample standard deviation has a
    relative spread of about 1.8% (Laplace kurtosis 6), so the allowed 8% is 4.4 sigma
    (false-failure rate about 1e-5; seeded, so the outcome is fixed); a sensitivity of k
    instead of 2k is 50% off."""
    s, classes, n, eps = 20, 10, 2000, 0.5
    neighbours, labels = _votes(n, s, k, classes, seed=12)
    config = RknnConfig(dataset="digits", epsilon=eps, mode="central", clusters=s, k=k)
    rng = np.random.default_rng(13)
    noise = np.concatenate([
        (lambda out: (out.estimated - out.true_counts).ravel())(release_counts(
            neighbours, labels, config=config, num_classes=classes, ledger=ledger_for(config),
            rng=rng)) for _ in range(20)])
    expected = np.sqrt(2) * 2 * k / eps
    assert abs(noise.std() / expected - 1) < 0.08, (noise.std(), expected)
    assert abs(noise.mean()) < 4 * expected / np.sqrt(noise.size)


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
    assert record["cluster_purity"] > 0.85
    assert record["label_accuracy"] > 0.8
    assert record["test_accuracy"] > 0.5
    assert record["test_accuracy"] == record["test_accuracy_per_epoch"][-1]
    assert set(record["seconds"]) >= {"representation", "queries", "release", "student",
                                      "total"}


@pytest.mark.parametrize("mode", ["local-rr", "local-collision", "shuffle", "shuffle-multi"])
def test_other_modes_run_end_to_end(mode):
    config = digits_config(mode=mode, epsilon=4.0)
    result = run(config, ledger=ledger_for(config), rng=release_rng(config))
    # far above chance (0.1): at eps = 4 the noise barely moves 1,200 records' votes
    assert result.label_accuracy > 0.6 and result.cluster_purity >= result.label_accuracy
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
