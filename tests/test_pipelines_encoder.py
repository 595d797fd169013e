"""Contrastive encoder fitted on public images only (dpkd_audit.pipelines.common.encoder)."""

from __future__ import annotations

import dataclasses
import functools
import sys

import numpy as np
import pytest
import torch

from dpkd_audit.data import load_dataset
from dpkd_audit.pipelines.common.encoder import (
    EncoderConfig,
    FeatureLayer,
    FittedEncoder,
    deskew_images,
    fit_encoder,
)

CPU = torch.device("cpu")
#: Small and fast: a couple of seconds on 2 CPU cores for a few hundred 8x8 digits.
TINY = EncoderConfig(width=8, projection_dim=16, epochs=2, batch_size=64, warmup_epochs=0)


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """One intra-op thread: tiny convolutions gain nothing from more, and on a busy machine
    OpenMP barriers between descheduled threads make them many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.cache
def _digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    ds = load_dataset("digits")
    return ds.train_images, ds.train_labels, ds.test_images, ds.test_labels


@functools.cache
def _tiny_fit(seed: int) -> FittedEncoder:
    return fit_encoder(_digits()[0][:300], config=TINY, seed=seed, device=CPU, progress=False)


def test_transform_shape_dtype_and_unit_norm():
    enc = _tiny_fit(0)
    assert enc.num_fitted == 300
    assert enc.image_shape == (8, 8)
    assert enc.feature_dim == 4 * TINY.width == TINY.feature_dim
    assert len(enc.losses) == TINY.epochs and all(np.isfinite(enc.losses))
    out = enc.transform(_digits()[2][:50])
    assert out.shape == (50, enc.feature_dim)
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert enc.transform(_digits()[2][:0]).shape == (0, enc.feature_dim)


def test_transform_batch_size_does_not_change_features():
    enc = _tiny_fit(0)
    images = _digits()[2][:37]
    np.testing.assert_allclose(enc.transform(images, batch_size=5), enc.transform(images),
                               atol=1e-5)


def test_same_seed_is_deterministic_and_other_seed_differs():
    images = _digits()[2][:40]
    again = fit_encoder(_digits()[0][:300], config=TINY, seed=0, device=CPU, progress=False)
    np.testing.assert_array_equal(_tiny_fit(0).transform(images), again.transform(images))
    assert _tiny_fit(0).losses == again.losses
    assert not np.allclose(_tiny_fit(0).transform(images), _tiny_fit(1).transform(images),
                           atol=1e-3)


def test_global_rng_untouched():
    torch_state = torch.random.get_rng_state()
    numpy_state = np.random.get_state()[1].copy()
    fit_encoder(_digits()[0][:64], config=TINY, seed=3, device=CPU, progress=False)
    assert torch.equal(torch.random.get_rng_state(), torch_state)
    np.testing.assert_array_equal(np.random.get_state()[1], numpy_state)


def test_projection_features_with_every_augmentation_enabled():
    config = dataclasses.replace(TINY, features=FeatureLayer.PROJECTION, erase_probability=1.0,
                                 thickness_probability=1.0, elastic_strength=0.1,
                                 deskew=False, epochs=1)
    enc = fit_encoder(_digits()[0][:128], config=config, seed=0, device=CPU, progress=False)
    assert enc.feature_dim == TINY.projection_dim == config.feature_dim
    out = enc.transform(_digits()[2][:9])
    assert out.shape == (9, TINY.projection_dim)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert EncoderConfig(features="projection").features is FeatureLayer.PROJECTION


@pytest.mark.parametrize("terminal", [True, False])
def test_progress_bar_on_stderr_only_for_a_terminal(capsys, monkeypatch, terminal):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal)
    config = dataclasses.replace(TINY, epochs=1)
    fit_encoder(_digits()[0][:64], config=config, seed=0, device=CPU, progress=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert ("encoder" in captured.err) is terminal  # redirected stderr: no bar at all


def test_batch_size_is_clamped_to_the_number_of_images():
    config = dataclasses.replace(TINY, batch_size=512, epochs=1, warmup_epochs=5)
    enc = fit_encoder(_digits()[0][:10], config=config, seed=0, device=CPU, progress=False)
    assert enc.num_fitted == 10
    assert len(enc.losses) == 1 and np.isfinite(enc.losses[0])
    assert np.isfinite(enc.transform(_digits()[0][:3])).all()


def test_works_on_28x28_images():
    rng = np.random.default_rng(0)
    images = (rng.random((32, 28, 28)) < 0.15).astype(np.uint8) * 255
    config = dataclasses.replace(TINY, epochs=1, batch_size=16)
    enc = fit_encoder(images, config=config, seed=0, device=CPU, progress=False)
    assert enc.image_shape == (28, 28)
    assert enc.transform(images[:4]).shape == (4, enc.feature_dim)
    with pytest.raises(ValueError, match=r"images must have shape \(n, 28, 28\)"):
        enc.transform(_digits()[0][:4])


@pytest.mark.parametrize(("images", "match"), [
    (np.zeros((10, 8, 8), dtype=np.float32), "uint8"),
    (np.zeros((10, 64), dtype=np.uint8), r"shape \(n, h, w\)"),
    (np.zeros((10, 3, 8), dtype=np.uint8), "h, w >= 4"),
    (np.zeros((1, 8, 8), dtype=np.uint8), "at least 2 images"),
    ([[[0] * 8] * 8] * 4, "numpy array"),
])
def test_fit_rejects_bad_images(images, match):
    with pytest.raises(ValueError, match=match):
        fit_encoder(images, config=TINY, seed=0, device=CPU, progress=False)


def test_fit_and_transform_reject_bad_arguments():
    images = _digits()[0][:20]
    with pytest.raises(ValueError, match="seed"):
        fit_encoder(images, config=TINY, seed=-1, device=CPU, progress=False)
    with pytest.raises(ValueError, match="config must be an EncoderConfig"):
        fit_encoder(images, config={"epochs": 1}, seed=0, device=CPU, progress=False)
    with pytest.raises(ValueError, match="device"):
        fit_encoder(images, config=TINY, seed=0, device=3, progress=False)
    enc = _tiny_fit(0)
    with pytest.raises(ValueError, match="batch_size"):
        enc.transform(images, batch_size=0)
    with pytest.raises(ValueError, match="uint8"):
        enc.transform(images.astype(np.float64))


@pytest.mark.parametrize(("field", "value", "match"), [
    ("width", 0, r"width must be an integer >= 1"),
    ("epochs", 0, "epochs"),
    ("epochs", 2.0, "epochs"),
    ("batch_size", 1, r"batch_size must be an integer >= 2"),
    ("learning_rate", 0.0, "learning_rate"),
    ("temperature", -0.1, "temperature"),
    ("weight_decay", -1.0, "weight_decay"),
    ("warmup_epochs", -1, "warmup_epochs"),
    ("rotation_degrees", 200.0, "rotation_degrees"),
    ("shift_fraction", 0.6, "shift_fraction"),
    ("erase_probability", 1.5, "erase_probability"),
    ("scale_range", (1.2, 0.8), "scale_range"),
    ("scale_range", (0.0, 1.0), "scale_range"),
    ("scale_range", 1.0, "scale_range"),
    ("contrast_range", (0.5, float("nan")), "contrast_range"),
    ("deskew", "yes", "deskew"),
    ("features", "head", "features must be one of"),
])
def test_config_validation(field, value, match):
    with pytest.raises(ValueError, match=match):
        EncoderConfig(**{field: value})


def test_presets():
    gpu = EncoderConfig.gpu()
    assert gpu.epochs > EncoderConfig().epochs and gpu.width >= EncoderConfig().width
    assert EncoderConfig().feature_dim == 4 * EncoderConfig().width


def test_deskew_straightens_a_slanted_bar_and_centres_it():
    image = np.zeros((1, 28, 28), dtype=np.uint8)
    for row in range(4, 24):  # a bar leaning right: column grows by 0.5 per row
        col = 6 + row // 2
        image[0, row, col:col + 2] = 255
    out = deskew_images(image)[0]
    rows = np.arange(28)
    mass = out.sum(axis=1)
    inked = mass > 0.5
    centroid_cols = (out @ np.arange(28))[inked] / mass[inked]

    def slope(cols: np.ndarray) -> float:
        return float(np.polyfit(rows[inked], cols, 1)[0])

    before = image[0].astype(float)
    before_cols = (before @ np.arange(28))[inked] / before.sum(axis=1)[inked]
    assert slope(before_cols) == pytest.approx(0.5, abs=0.05)
    assert abs(slope(centroid_cols)) < 0.05
    total = out.sum()
    assert (out.sum(axis=0) @ np.arange(28)) / total == pytest.approx(13.5, abs=0.3)
    assert (out.sum(axis=1) @ np.arange(28)) / total == pytest.approx(13.5, abs=0.3)
    # Blank images stay blank (identity map), values stay in [0, 1].
    blank = deskew_images(np.zeros((2, 8, 8), dtype=np.uint8))
    assert blank.shape == (2, 8, 8) and not blank.any()
    assert 0.0 <= out.min() and out.max() <= 1.0


def _kmeans_purity(features: np.ndarray, labels: np.ndarray, clusters: int) -> float:
    from sklearn.cluster import KMeans

    assign = KMeans(clusters, n_init=3, random_state=0).fit_predict(features)
    counts = np.zeros((clusters, 10))
    np.add.at(counts, (assign, labels), 1)
    return float(counts.max(axis=1).sum() / len(labels))


def test_embedding_clusters_held_out_digits_better_than_an_untrained_network():
    # Fit on the 1,200 train digits, k-means (20 clusters) on the 597 held-out test digits.
    # Measured (seeds 0, 1, 2): purity 0.896, 0.940, 0.911 against 0.796, 0.804, 0.776 for the
    # same network untrained (raw pixels: 0.920); about 2 s of CPU.
    train, _, test, test_labels = _digits()
    config = EncoderConfig(width=16, epochs=20, batch_size=128, warmup_epochs=1)
    trained = fit_encoder(train, config=config, seed=0, device=CPU, progress=False)
    untrained = fit_encoder(train, config=dataclasses.replace(config, epochs=1,
                                                              learning_rate=1e-9),
                            seed=0, device=CPU, progress=False)
    purity = _kmeans_purity(trained.transform(test), test_labels, 20)
    baseline = _kmeans_purity(untrained.transform(test), test_labels, 20)
    assert purity >= baseline + 0.05, (purity, baseline)
    assert purity >= 0.85, purity


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_fit_and_transform():
    enc = fit_encoder(_digits()[0][:300], config=TINY, seed=0, device=torch.device("cuda"),
                      progress=False)
    out = enc.transform(_digits()[2][:50])
    assert out.shape == (50, enc.feature_dim) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
