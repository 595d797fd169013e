"""DGD's published student (issue 30): where its unlabelled terms act, and that it learns.

The paper's student used to collapse to one class: its TNAR and entropy terms acted on VAE
reconstructions, which the student could tell from the labelled raw images. These tests fail
if the terms go back to reconstructions by default, if the student collapses on the embedded
digits, or if the unlabelled terms make it worse than cross-entropy alone beyond noise.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from digits_helpers import single_thread

from dpkd_audit.pipelines.common.student import build_student
from dpkd_audit.pipelines.common.tnar import (
    class_balance_regularization,
    frozen_batch_statistics,
    random_feature_regularization,
)
from dpkd_audit.pipelines.common.vae import ConvVae
from dpkd_audit.pipelines.dgd import DgdConfig, TnarConfig, run
from dpkd_audit.pipelines.dgd.pipeline import (
    check_run,
    label_rng,
    ledger_for,
    load_data,
    prepare,
)
from dpkd_audit.pipelines.dgd.student import (
    LabelledLoss,
    UnlabelledInput,
    UnlabelledTerms,
    generalized_cross_entropy,
    train_tnar_student,
)


def test_unlabelled_terms_act_on_the_synthetic_images_by_default() -> None:
    assert TnarConfig().unlabelled_input is UnlabelledInput.SYNTHETIC
    assert DgdConfig.small(dataset="digits").student.unlabelled_input \
        is UnlabelledInput.SYNTHETIC
    with pytest.raises(ValueError, match="unlabelled_input must be one of"):
        TnarConfig(unlabelled_input="decoded")


def test_synthetic_input_needs_the_unlabelled_images_with_their_codes() -> None:
    vae = ConvVae(image_shape=(8, 8), latent_dim=3, width=4,
                  generator=torch.Generator().manual_seed(0))
    images = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    codes = torch.zeros(6, 3)
    common = dict(vae=vae, num_classes=3, test_images=images, test_labels=np.zeros(6, int),
                  seed=0, progress=False)
    config = TnarConfig(width=2, steps=2, batch_size=4, unlabelled_batch_size=4)
    with pytest.raises(ValueError, match="unlabelled"):
        train_tnar_student(images, np.zeros(6, int), codes=codes, config=config, **common)
    with pytest.raises(ValueError, match="same count"):
        train_tnar_student(images, np.zeros(6, int), codes=codes, unlabelled=images[:4],
                           config=config, **common)
    trained = train_tnar_student(images, np.zeros(6, int), codes=codes, unlabelled=images,
                                 config=config, **common)
    assert set(trained.loss_terms) == {"cross_entropy", "tangent", "normal", "entropy"}
    on_reconstructions = dataclasses.replace(config, unlabelled_input="reconstruction")
    train_tnar_student(images, np.zeros(6, int), codes=codes, config=on_reconstructions,
                       **common)


def test_rampup_follows_the_sigmoid_shape_and_reaches_one() -> None:
    config = TnarConfig(steps=100, rampup=0.4)
    assert config.unlabelled_scale(0) == pytest.approx(math.exp(-5.0))
    assert config.unlabelled_scale(20) == pytest.approx(math.exp(-5.0 * 0.25))
    assert config.unlabelled_scale(40) == 1.0 and config.unlabelled_scale(99) == 1.0
    assert TnarConfig(steps=10).unlabelled_scale(0) == 1.0
    with pytest.raises(ValueError, match="rampup"):
        TnarConfig(rampup=1.5)


def test_class_balance_term_by_hand_and_in_the_student() -> None:
    """sum_c p_c ln p_c of the batch-mean softmax: -ln k when balanced, 0 when collapsed."""
    two = torch.log(torch.tensor([[0.9, 0.1], [0.1, 0.9]]))
    assert class_balance_regularization(two).item() == pytest.approx(-math.log(2), rel=1e-6)
    skewed = torch.log(torch.tensor([[0.9, 0.1], [0.5, 0.5]]))  # mean (0.7, 0.3)
    assert class_balance_regularization(skewed).item() == pytest.approx(
        0.7 * math.log(0.7) + 0.3 * math.log(0.3), rel=1e-6)
    collapsed = torch.tensor([[60.0, 0.0, 0.0], [60.0, 0.0, 0.0]])
    assert abs(class_balance_regularization(collapsed).item()) < 1e-12
    with pytest.raises(ValueError, match="balance_weight"):
        TnarConfig(balance_weight=-0.1)
    assert TnarConfig().balance_weight == 0.0  # DGD has no such term
    assert TnarConfig(tangent_weight=0.0, normal_weight=0.0, entropy_weight=0.0,
                      balance_weight=0.5).regularized
    vae = ConvVae(image_shape=(8, 8), latent_dim=3, width=4,
                  generator=torch.Generator().manual_seed(0))
    images = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    config = TnarConfig(width=2, steps=2, batch_size=4, unlabelled_batch_size=4,
                        balance_weight=0.1)
    trained = train_tnar_student(images, np.zeros(6, int), codes=torch.zeros(6, 3), vae=vae,
                                 unlabelled=images, num_classes=3, config=config,
                                 test_images=images, test_labels=np.zeros(6, int), seed=0,
                                 progress=False)
    assert set(trained.loss_terms) == {"cross_entropy", "tangent", "normal", "entropy",
                                       "balance"}
    assert -math.log(3) - 1e-6 <= trained.loss_terms["balance"] <= 0.0


def test_generalized_cross_entropy_by_hand_its_limits_and_in_the_student() -> None:
    """(1 - p_y^q) / q (Zhang and Sabuncu 2018, Eq. 6): by hand, -> cross-entropy as q -> 0,
    the mean absolute error 1 - p_y at q = 1, finite at extreme logits, and its gradient the
    cross-entropy's times p_y^q."""
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    labels = torch.tensor([0, 2])
    p = torch.softmax(logits, dim=1)[torch.arange(2), labels]
    for q in (0.3, 0.7):
        by_hand = float(((1 - p ** q) / q).mean())
        assert generalized_cross_entropy(logits, labels, q).item() == pytest.approx(
            by_hand, rel=1e-12)
    assert generalized_cross_entropy(logits, labels, 1.0).item() == pytest.approx(
        float((1 - p).mean()), rel=1e-12)
    cross_entropy = torch.nn.functional.cross_entropy(logits, labels).item()
    assert generalized_cross_entropy(logits, labels, 1e-9).item() == pytest.approx(
        cross_entropy, rel=1e-6)
    extreme = torch.tensor([[1e4, -1e4, 0.0]], dtype=torch.float64, requires_grad=True)
    value = generalized_cross_entropy(extreme, torch.tensor([1]), 0.7)
    value.backward()
    assert value.item() == pytest.approx(1 / 0.7) and torch.isfinite(extreme.grad).all()
    weighted = logits.clone().requires_grad_(True)
    generalized_cross_entropy(weighted[:1], labels[:1], 0.7).backward()
    plain = logits.clone().requires_grad_(True)
    torch.nn.functional.cross_entropy(plain[:1], labels[:1]).backward()
    torch.testing.assert_close(weighted.grad[0], plain.grad[0] * p[0] ** 0.7)
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"gce_q must be a real number in \(0, 1\]"):
            TnarConfig(gce_q=bad)
    with pytest.raises(ValueError, match="labelled_loss"):
        TnarConfig(labelled_loss="mae")
    assert TnarConfig().labelled_loss is LabelledLoss.CROSS_ENTROPY  # the paper's
    vae = ConvVae(image_shape=(8, 8), latent_dim=3, width=4,
                  generator=torch.Generator().manual_seed(0))
    images = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    config = TnarConfig(width=2, steps=2, batch_size=4, unlabelled_batch_size=4,
                        labelled_loss="generalized-cross-entropy", gce_q=0.5)
    trained = train_tnar_student(images, np.zeros(6, int), codes=torch.zeros(6, 3), vae=vae,
                                 unlabelled=images, num_classes=3, config=config,
                                 test_images=images, test_labels=np.zeros(6, int), seed=0,
                                 progress=False)
    assert set(trained.loss_terms) == {"generalized_cross_entropy", "tangent", "normal",
                                       "entropy"}
    assert 0.0 <= trained.loss_terms["generalized_cross_entropy"] <= 1 / 0.5


def test_random_feature_terms_by_hand_and_in_the_student() -> None:
    """DGD's Eq. 6 as printed: ||phi(x) - phi(x + eps n)||^2 with n a random unit direction in
    the tangent space (or its complement): equal to the same computation by hand, n drawn from
    the same generator state; 0 as eps -> 0; BatchNorm running statistics untouched."""
    model = build_student((8, 8), 3, 2, generator=torch.Generator().manual_seed(0))
    x = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    basis, _ = torch.linalg.qr(torch.randn(4, 64, 3, generator=torch.Generator().manual_seed(2)))
    for tangent in (True, False):
        running = {k: v.clone() for k, v in model.state_dict().items() if "running" in k}
        value = random_feature_regularization(model, x, basis, tangent=tangent, epsilon=0.7,
                                              generator=torch.Generator().manual_seed(3))
        assert all(torch.equal(model.state_dict()[k], v) for k, v in running.items())
        start = torch.randn(x.shape, generator=torch.Generator().manual_seed(3)).reshape(4, 64, 1)
        along = basis @ (basis.transpose(1, 2) @ start)
        n = (along if tangent else start - along).reshape(4, -1)
        n = (n / n.norm(dim=1, keepdim=True)).reshape(x.shape)
        with torch.no_grad(), frozen_batch_statistics(model):  # batch statistics, as there
            by_hand = ((model.backbone_features(x) - model.backbone_features(x + 0.7 * n)) ** 2
                       ).sum(dim=1).mean()
        assert value.item() == pytest.approx(by_hand.item(), rel=1e-5)
        assert value.item() > 0 and value.requires_grad
        tiny = random_feature_regularization(model, x, basis, tangent=tangent, epsilon=1e-9,
                                             generator=torch.Generator().manual_seed(3))
        assert tiny.item() < 1e-10
    with pytest.raises(ValueError, match="backbone_features"):
        random_feature_regularization(torch.nn.Flatten(), x, basis, tangent=True, epsilon=1.0,
                                      generator=torch.Generator())
    with pytest.raises(ValueError, match="unlabelled_terms"):
        TnarConfig(unlabelled_terms="adversarial")
    assert TnarConfig().unlabelled_terms is UnlabelledTerms.ADVERSARIAL_KL
    vae = ConvVae(image_shape=(8, 8), latent_dim=3, width=4,
                  generator=torch.Generator().manual_seed(0))
    config = TnarConfig(width=2, steps=2, batch_size=4, unlabelled_batch_size=4,
                        unlabelled_terms="random-feature")
    images = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    trained = train_tnar_student(images, np.zeros(6, int), codes=torch.zeros(6, 3), vae=vae,
                                 unlabelled=images, num_classes=3, config=config,
                                 test_images=images, test_labels=np.zeros(6, int), seed=0,
                                 progress=False)
    assert set(trained.loss_terms) == {"cross_entropy", "tangent", "normal", "entropy"}
    assert trained.loss_terms["tangent"] > 0 and trained.loss_terms["normal"] > 0
    with pytest.raises(ValueError, match="backbone_features"):  # before any training
        train_tnar_student(images, np.zeros(6, int), codes=torch.zeros(6, 3), vae=vae,
                           unlabelled=images, num_classes=3, config=config,
                           test_images=images, test_labels=np.zeros(6, int), seed=0,
                           initial_model=torch.nn.Sequential(torch.nn.Flatten(),
                                                             torch.nn.Linear(64, 3)),
                           progress=False)


def test_a_student_from_an_initial_model_trains_a_copy_of_it() -> None:
    """``initial_model``: the student is a copy of it (its predictions at a vanishing learning
    rate), and the model passed in is left as it was."""
    base = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3)).eval()  # no BatchNorm
    with torch.no_grad():
        base[1].weight.copy_(torch.randn(3, 64, generator=torch.Generator().manual_seed(3)))
    before = {k: v.clone() for k, v in base.state_dict().items()}
    images = torch.rand(12, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    vae = ConvVae(image_shape=(8, 8), latent_dim=3, width=4,
                  generator=torch.Generator().manual_seed(0))
    config = TnarConfig(width=5, steps=3, batch_size=4, unlabelled_batch_size=4,
                        learning_rate=1e-30, tangent_weight=0.0, normal_weight=0.0,
                        entropy_weight=0.0)
    with torch.no_grad():
        expected = base(images).argmax(dim=1)
    trained = train_tnar_student(images, np.arange(12) % 3, codes=None, vae=vae,
                                 num_classes=3, config=config, test_images=images,
                                 test_labels=expected.numpy(), seed=0, initial_model=base,
                                 progress=False)
    assert trained.model is not base
    assert trained.test_accuracy == 1.0          # it predicts what the initial model does
    assert all(torch.equal(v, before[k]) for k, v in base.state_dict().items())
    fresh = train_tnar_student(images, np.arange(12) % 3, codes=None, vae=vae, num_classes=3,
                               config=config, test_images=images,
                               test_labels=expected.numpy(), seed=0, progress=False)
    assert fresh.model.state_dict()["features.0.weight"].shape[0] == 5  # config.width
    assert trained.model.state_dict()["1.weight"].shape == (3, 64)
    with pytest.raises(ValueError, match=r"initial_model must be a torch\.nn\.Module"):
        train_tnar_student(images, np.arange(12) % 3, codes=None, vae=vae, num_classes=3,
                           config=config, test_images=images, test_labels=expected.numpy(),
                           seed=0, initial_model=base.state_dict(), progress=False)


def test_published_student_learns_every_class_and_its_terms_do_not_hurt() -> None:
    """Digits, the small preset (25 teachers) with the teachers trained 300 steps instead of
    1,000 (the MNIST preset's count; at 1,000 the ensemble took 35 of this test's 65 s): the
    paper's student against cross-entropy alone on the same labelled images, seed 1.

    Measured at commit 5d6a2c1 (the student's 200 augmentation-free steps, its class-balance
    term at 0.1), 1 thread, seeds 0-2: paper 51.6 / 58.1 / 50.8%, without the balance term
    48.9 / 56.3 / 49.3%, cross-entropy alone 52.4 / 54.9 / 46.9%, largest class share of the
    paper's student 0.24 / 0.19 / 0.18. Earlier (an older student), at 300 steps (CPU kernel
    ``loop``), seeds 0-2: paper 25.5 / 35.5 / 38.0%,
    cross-entropy alone 23.5 / 21.4 / 22.3%, largest class share of the paper's student
    0.55 / 0.22 / 0.43; teachers 76% on average, their plurality vote 88-90%. At 1,000 steps
    (teachers 79%, plurality 91%) seed 1 gave 31.2 / 21.3% and share 0.285; earlier seeds 0-2
    gave paper 30.2 / 32.5 / 33.8%, cross-entropy 16.9 / 27.5 / 34.8%, shares 0.40 / 0.26 /
    0.38. At this size (25 teachers, 200 noisy votes) rounding in the teachers moves the
    students by several points (the ``grouped`` kernel, equal to ``loop`` within float
    rounding, gave other figures), so the bounds are set for seed 1, below its figures and
    well above a collapse. With the unlabelled terms on VAE reconstructions (the bug of issue
    30) seed 1 at 300 steps gives 12.2% with 83% of the test images in one class; before
    issue 30 the paper's student put most test images in one or two classes (13.6%)."""
    with single_thread():
        _compare_students()


def _compare_students() -> None:
    config = DgdConfig.small(dataset="digits", seed=1)
    config = dataclasses.replace(config, ensemble=dataclasses.replace(config.ensemble,
                                                                      steps=300))
    data = load_data(config)
    ledger = ledger_for(config)
    plan = check_run(config, ledger, num_private=data.dataset.n_train,
                     num_classes=data.dataset.num_classes, image_shape=data.dataset.image_shape)
    prepared = prepare(config, data=data, device="cpu", ledger=ledger, plan=plan,
                       rng=label_rng(config))
    test = torch.from_numpy(np.array(data.dataset.test_images)).float().div(255).unsqueeze(1)
    accuracy, share = {}, {}
    for name, student in (("paper", config.student),
                          ("cross_entropy", dataclasses.replace(
                              config.student, tangent_weight=0.0, normal_weight=0.0,
                              entropy_weight=0.0))):
        chosen = dataclasses.replace(config, student=student)
        result = run(chosen, ledger=ledger_for(chosen), rng=label_rng(chosen), data=data,
                     prepared=prepared, progress=False)
        with torch.no_grad():
            counts = torch.bincount(result.student(test).argmax(dim=1), minlength=10)
        accuracy[name] = result.test_accuracy
        share[name] = float(counts.max() / counts.sum())
    assert share["paper"] <= 0.30
    assert accuracy["paper"] >= 0.40
    assert accuracy["paper"] >= accuracy["cross_entropy"] - 0.05


def test_sound_student_on_the_digits_is_near_its_dp_baseline() -> None:
    """Digits, sound, eps 10, 27 queries, the small preset with the teachers trained 300 steps:
    the student (started from the DP baseline's weights, ``student_init='baseline'``) within
    10 points of the DP baseline it learns from (issue 30).

    Measured at the preset's 1,000 teacher steps, 1 thread, seeds 0-2
    (``reports/benchmarks/published-caps-cpu``): from the DP baseline 37.86 / 39.03 / 39.03%,
    from scratch 13.74 / 17.92 / 19.26%, DP baselines 45.06 / 34.67 / 38.86%; at the 300
    teacher steps here (about 20 s a run), the same seeds: 37.86 / 39.03 / 40.54% from the DP
    baseline, 13.74 / 17.92 / 17.92% from scratch (DP baselines unchanged). Seed 2: the check
    fails by 11 points with a fresh student and passes with 12 points to spare with the copy
    (float rounding on another CPU moves these runs by a few points)."""
    with single_thread():
        config = DgdConfig.small(dataset="digits", mode="sound", epsilon=10.0, queries=27,
                                 seed=2)
        config = dataclasses.replace(config, ensemble=dataclasses.replace(config.ensemble,
                                                                          steps=300))
        result = run(config, ledger=ledger_for(config), rng=label_rng(config), progress=False)
    assert result.to_record()["student_init"] == "baseline"
    assert result.test_accuracy >= result.baseline_accuracy - 0.10, (
        result.test_accuracy, result.baseline_accuracy)


def test_sound_generators_refuse_the_private_pixel_scale() -> None:
    """A standardised output is mapped by the private pixels' mean and standard deviation:
    a sound generator must not read them without noise (DGD and DP-DFD alike)."""
    from dpkd_audit.pipelines.common.generator import GeneratorConfig
    from dpkd_audit.pipelines.dpdfd import DpdfdConfig

    standardised = GeneratorConfig(beta=10.0, output="standardised")
    with pytest.raises(ValueError, match=r"sound_generator\.output"):
        DgdConfig.small(dataset="digits", mode="sound", epsilon=3.0,
                        sound_generator=standardised)
    with pytest.raises(ValueError, match=r"sound_generator\.output"):
        DpdfdConfig.small(dataset="digits", mode="sound", epsilon=3.0,
                          sound_generator=standardised)
    assert DgdConfig.small(dataset="mnist", generator_statistics="none").generator.output.value \
        == "standardised"
