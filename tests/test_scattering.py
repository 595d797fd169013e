"""The scattering transform (pipelines/common/scattering.py) and the ScatterNet + CNN teacher.

References: a float64 numpy scattering at full resolution written here from the definitions
(no subsampling until the end, so none of the module's periodisation logic), the filters'
defining properties, and the transform's exact symmetry under a quarter turn.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpkd_audit.pipelines.common.scattering import (
    Scattering2d,
    morlet_filter_bank,
    scattering_output_shape,
)
from dpkd_audit.pipelines.common.teacher import TeacherConfig, build_teacher


def _full_resolution(image: np.ndarray, scales: int, angles: int) -> np.ndarray:
    """Every convolution at the padded image's full resolution (float64), then subsampled."""
    step = 2**scales
    pad = [(step, step + (-side) % step) for side in image.shape]
    padded = np.pad(image.astype(np.float64), pad, mode="reflect")
    psi, phi = morlet_filter_bank(padded.shape, scales, angles)

    def conv(u: np.ndarray, filt: np.ndarray) -> np.ndarray:
        return np.fft.ifft2(np.fft.fft2(u) * filt)

    def low(u: np.ndarray) -> np.ndarray:
        out = conv(u, phi).real[::step, ::step]
        rows, cols = (-(-side // step) for side in image.shape)
        return out[pad[0][0] // step:pad[0][0] // step + rows,
                   pad[1][0] // step:pad[1][0] // step + cols]

    zeroth = [low(padded)]
    first, second = [], []
    for j1 in range(scales):
        for t1 in range(angles):
            u1 = np.abs(conv(padded, psi[j1, t1]))
            first.append(low(u1))
    for j1 in range(scales):
        for t1 in range(angles):
            u1 = np.abs(conv(padded, psi[j1, t1]))
            for j2 in range(j1 + 1, scales):
                for t2 in range(angles):
                    second.append(low(np.abs(conv(u1, psi[j2, t2]))))
    return np.stack(zeroth + first + second)


def _digit_like(seed: int, shape: tuple[int, int] = (28, 28)) -> np.ndarray:
    """A smooth random image in [0, 1] (strokes, not white noise, like the data)."""
    rng = np.random.default_rng(seed)
    small = rng.random((shape[0] // 4 + 1, shape[1] // 4 + 1))
    big = np.kron(small, np.ones((4, 4)))[:shape[0], :shape[1]]
    return (big > 0.6).astype(np.float64) * rng.random(shape) ** 0.2


def test_filters_are_zero_mean_wavelets_and_a_unit_low_pass() -> None:
    psi, phi = morlet_filter_bank((36, 36), 2, 8)
    assert psi.shape == (2, 8, 36, 36) and phi.shape == (36, 36)
    np.testing.assert_allclose(psi[..., 0, 0], 0.0, atol=1e-12)  # Morlet: zero mean
    assert phi[0, 0] == pytest.approx(1.0, abs=1e-9)  # Gaussian of unit mass
    # angles t and t + L/2 are a quarter turn apart on a square grid: their filters are the
    # same filter rotated by 90 degrees (frequency (u, v) -> (v, -u))
    rotated = np.rot90(psi[:, :4], k=1, axes=(-2, -1))
    rotated = np.roll(rotated, 1, axis=-2)  # index 0 stays the zero frequency
    np.testing.assert_allclose(np.abs(rotated).max(), np.abs(psi[:, 4:]).max(), rtol=1e-9)


@pytest.mark.parametrize(("shape", "scales", "angles"), [((28, 28), 2, 8), ((8, 8), 2, 8),
                                                          ((16, 12), 2, 4), ((28, 28), 3, 4)])
def test_the_cascade_equals_a_full_resolution_reference(shape, scales, angles) -> None:
    image = _digit_like(1, shape)
    ours = Scattering2d(shape, scales=scales, angles=angles)(
        torch.from_numpy(image).float()[None, None])[0].double().numpy()
    reference = _full_resolution(image, scales, angles)
    assert ours.shape == reference.shape == scattering_output_shape(shape, scales, angles)
    # subsampling before the last low-pass aliases a little: measured relative errors per
    # order are < 3e-7 (order 0), 0.006-0.013 (order 1) and 0.007-0.013 (order 2) on these
    # images; a wrong filter, scale, order or padding is off by 0.4 or more
    orders = (slice(0, 1), slice(1, 1 + scales * angles), slice(1 + scales * angles, None))
    for order, tolerance in zip(orders, (1e-5, 0.03, 0.03), strict=True):
        error = np.linalg.norm(ours[order] - reference[order]) / np.linalg.norm(reference[order])
        assert error < tolerance


def test_a_constant_image_has_only_its_mean() -> None:
    x = torch.full((2, 1, 28, 28), 0.3)
    out = Scattering2d((28, 28))(x)
    torch.testing.assert_close(out[:, 0], torch.full((2, 7, 7), 0.3), atol=1e-5, rtol=0)
    assert float(out[:, 1:].abs().max()) < 1e-5


def test_a_transposed_image_has_its_angles_mirrored() -> None:
    """Swapping the axes maps the direction at angle theta_t = (L/2 - 1 - t) pi / L to
    pi/2 - theta_t, i.e. angle index t to (2 - t) mod 8 for L = 8 (angles are modulo pi:
    |x * psi| is the same for a real image at theta and theta + pi), and keeps the sampling
    grid: each map is transposed and the angles permuted, exactly up to rounding."""
    image = torch.from_numpy(_digit_like(2)).double().float()[None, None]
    transform = Scattering2d((28, 28))
    out = transform(image)[0]
    swapped = transform(image.transpose(-2, -1))[0]
    mirror = [(2 - t) % 8 for t in range(8)]
    torch.testing.assert_close(swapped[0], out[0].T, atol=1e-6, rtol=1e-5)
    first = out[1:17].reshape(2, 8, 7, 7)
    first_swapped = swapped[1:17].reshape(2, 8, 7, 7)
    torch.testing.assert_close(first_swapped, first[:, mirror].transpose(-2, -1), atol=1e-6,
                               rtol=1e-4)
    second = out[17:].reshape(8, 8, 7, 7)
    second_swapped = swapped[17:].reshape(8, 8, 7, 7)
    torch.testing.assert_close(second_swapped, second[mirror][:, mirror].transpose(-2, -1),
                               atol=1e-6, rtol=1e-4)


def test_gradients_flow_to_the_image() -> None:
    x = torch.rand(3, 1, 28, 28, requires_grad=True)
    Scattering2d((28, 28))(x).square().sum().backward()
    assert x.grad is not None and bool(torch.isfinite(x.grad).all())
    assert float(x.grad.abs().sum()) > 0


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="image_shape must be at least 4x4"):
        Scattering2d((3, 28))
    with pytest.raises(ValueError, match=r"x must have shape \(n, 1, 28, 28\)"):
        Scattering2d((28, 28))(torch.rand(2, 28, 28))
    with pytest.raises(ValueError, match="at least 8x8"):
        build_teacher(TeacherConfig(architecture="scatter-cnn"), (6, 6), 10,
                      generator=torch.Generator())


def test_scatter_cnn_trains_under_dp_sgd_on_its_precomputed_features() -> None:
    """The DP-SGD loop computes the fixed frontend once and trains the rest: the returned
    model (frontend included) gives the accuracy the run reports, on the images."""
    from sklearn.datasets import load_digits

    from dpkd_audit import Ledger
    from dpkd_audit.accountants.dp_sgd import DpSgdAccountant
    from dpkd_audit.pipelines.common.dp_teacher import (
        DpSgdConfig,
        plan_dp_sgd,
        train_dp_teacher,
    )

    digits = load_digits()
    images = np.clip(digits.images * 16, 0, 255).astype(np.uint8)
    labels = digits.target
    config = DpSgdConfig(epochs=4, batch_size=64, learning_rate=4.0, momentum=0.9,
                         max_grad_norm=0.1)
    plan = plan_dp_sgd(config, dataset_size=1500, target_epsilon=8.0)
    ledger = Ledger(epsilon=8.0, delta=config.delta, accountant=DpSgdAccountant.RDP.make())
    result = train_dp_teacher(images[:1500], labels[:1500], num_classes=10,
                              test_images=images[1500:], test_labels=labels[1500:],
                              teacher=TeacherConfig(architecture="scatter-cnn"), config=config,
                              plan=plan, ledger=ledger, seed=0, device="cpu", progress=False)
    assert len(ledger.charges()) == 1
    model = result.model
    assert not model.training and hasattr(model, "frontend")
    x = torch.from_numpy(images[1500:]).float().div(255.0).unsqueeze(1)
    with torch.inference_mode():
        accuracy = float((model(x).argmax(1) == torch.from_numpy(labels[1500:])).float().mean())
    assert accuracy == pytest.approx(result.test_accuracy, abs=1e-9)
    assert accuracy > 0.5  # chance is 0.1; measured 0.73 at this seed
    # the frontend is free because nothing of the private data reaches it: after DP-SGD on
    # the records it is the freshly built transform, bit for bit, on any image
    probe = torch.rand(5, 1, 8, 8, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        torch.testing.assert_close(model.frontend(probe), Scattering2d((8, 8))(probe),
                                   rtol=0, atol=0)
    assert not any(True for _ in model.frontend.parameters())


def test_the_statistics_release_is_planned_for_the_vector_a_scatternet_releases() -> None:
    """The plan charges the statistics release for d coordinates known from the architecture
    before training; with a fixed frontend, d must be what the trained model releases (the
    image per pixel, then each conv input per channel), or the charge would be for another
    mechanism."""
    from dpkd_audit.pipelines.common.dp_statistics import (
        StatisticsConfig,
        statistics_coordinates,
        statistics_layers,
    )

    config = StatisticsConfig()
    for shape in ((8, 8), (28, 28)):
        teacher = TeacherConfig(architecture="scatter-cnn")
        model = build_teacher(teacher, shape, 10, generator=torch.Generator().manual_seed(0))
        planned = statistics_coordinates(config, teacher, shape)
        assert planned == statistics_coordinates(config, model, shape)
        layers = statistics_layers(model)
        assert layers[0] is model.frontend and len(layers) == 3
        # pixels of the image (means and squares), 81 + 16 channels, one clip weight
        assert planned == 2 * (shape[0] * shape[1] + 81 + 16) + 1


def test_the_student_on_cached_frontend_features_is_the_student_on_images(monkeypatch) -> None:
    """A student that starts from a ScatterNet model and sees fixed images trains on the
    frontend's output computed once: bit for bit the model the image path trains."""
    from dpkd_audit.pipelines.dgd import student as dgd_student
    from dpkd_audit.pipelines.dgd.student import TnarConfig, train_tnar_student

    base = build_teacher(TeacherConfig(architecture="scatter-cnn"), (28, 28), 10,
                         generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    labelled, labels = torch.rand(40, 1, 28, 28, generator=g), np.arange(40) % 10
    soft = torch.rand(50, 1, 28, 28, generator=g)
    targets = torch.softmax(torch.randn(50, 10, generator=g), 1)
    test, test_labels = torch.rand(30, 1, 28, 28, generator=g), np.arange(30) % 10
    config = TnarConfig(width=4, steps=20, batch_size=16, unlabelled_batch_size=16,
                        tangent_weight=0.0, normal_weight=0.0, entropy_weight=0.0)

    def train():
        return train_tnar_student(labelled, labels, codes=None, vae=None, num_classes=10,
                                  config=config, test_images=test, test_labels=test_labels,
                                  seed=0, soft_images=soft, soft_targets=targets,
                                  distillation_weight=1.0, initial_model=base, progress=False)

    calls = []
    real = dgd_student.frontend_features
    monkeypatch.setattr(dgd_student, "frontend_features",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    cached = train()
    assert calls  # the cached path ran
    monkeypatch.setattr(dgd_student, "fixed_frontend", lambda model: None)
    plain = train()
    for p, q in zip(cached.model.parameters(), plain.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    assert cached.curve == plain.curve
    assert hasattr(cached.model, "frontend")  # the returned student takes images


def test_the_staged_student_from_a_scatternet_teacher_pools_frontend_features(monkeypatch):
    """DP-DFD's sound student from its DP teacher: the pool holds the frontend's output, and
    the stages train bit for bit the model the image path trains."""
    from dpkd_audit.pipelines.common import distill
    from dpkd_audit.pipelines.common.distill import DistillConfig, StagedStudent

    teacher = build_teacher(TeacherConfig(architecture="scatter-cnn"), (28, 28), 10,
                            generator=torch.Generator().manual_seed(0)).eval()
    g = torch.Generator().manual_seed(2)
    images = torch.rand(30, 1, 28, 28, generator=g)
    targets = torch.softmax(torch.randn(30, 10, generator=g), 1)
    config = DistillConfig(width=4, steps_per_stage=3, batch_size=8, loss="kl")

    def train():
        student = StagedStudent(config=config, image_shape=(28, 28), num_classes=10, stages=2,
                                seed=0, device="cpu", initial_model=teacher)
        for half in (images[:15], images[15:]):
            student.add(half, targets[:15])
            student.train_stage()
        return student

    cached = train()
    assert cached._images[0].shape == (30, 81, 7, 7)  # features, not images
    monkeypatch.setattr(distill, "fixed_frontend", lambda model: None)
    plain = train()
    assert plain._images[0].shape == (30, 1, 28, 28)
    for p, q in zip(cached.model.parameters(), plain.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    torch.testing.assert_close(cached.probabilities(images), plain.probabilities(images))
    for p, q in zip(teacher.parameters(), cached.model.parameters(), strict=True):
        assert not torch.equal(p, q)  # trained a copy; the teacher is unchanged
    with pytest.raises(ValueError, match=r"initial_model must be a torch\.nn\.Module"):
        StagedStudent(config=config, image_shape=(28, 28), num_classes=10, stages=1, seed=0,
                      device="cpu", initial_model="teacher")
