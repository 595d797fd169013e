"""Data-free generator: each loss term against hand-computed values, hooks, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from dpkd_audit.pipelines.common.distill import (
    DistillConfig,
    ReleaseChannel,
    StagedStudent,
    kl_distillation_loss,
    selective_rr_forward_loss,
)
from dpkd_audit.pipelines.common.generator import (
    BnStatistics,
    DaflGenerator,
    GeneratorConfig,
    GeneratorOutput,
    GeneratorResult,
    GeneratorTrainer,
    activation_loss,
    argmax_cross_entropy,
    bn_statistics_distance,
    fit_generator,
    generator_loss,
    information_entropy_loss,
    pixel_scale_of,
)
from dpkd_audit.pipelines.common.student import build_student
from dpkd_audit.pipelines.common.teacher import (
    TeacherArchitecture,
    TeacherConfig,
    build_teacher,
    penultimate_features,
)


def test_argmax_cross_entropy_by_hand() -> None:
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    # CE to the argmax: -log softmax at the larger logit = log(1 + e^-gap)
    expected = (math.log1p(math.exp(-2.0)) + math.log1p(math.exp(-1.0))) / 2
    assert float(argmax_cross_entropy(logits)) == pytest.approx(expected, rel=1e-6)


def test_information_entropy_by_hand() -> None:
    k = 4
    assert float(information_entropy_loss(torch.zeros(3, k))) == pytest.approx(-math.log(k))
    # two confident rows of different classes: batch mean (1/2, 1/2, 0, 0) up to e^-30
    logits = torch.tensor([[30.0, 0.0, 0.0, 0.0], [0.0, 30.0, 0.0, 0.0]])
    assert float(information_entropy_loss(logits)) == pytest.approx(-math.log(2), rel=1e-6)
    # all rows of one class: the mean is one-hot, entropy 0 (the worst value)
    same = torch.tensor([[30.0, 0.0, 0.0, 0.0]] * 5)
    assert float(information_entropy_loss(same)) == pytest.approx(0.0, abs=1e-9)


def test_activation_loss_by_hand() -> None:
    assert float(activation_loss(torch.tensor([[1.0, -2.0], [3.0, 0.0]]))) == -1.5


def test_bn_statistics_distance_by_hand() -> None:
    pairs = [(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 1.0]),
              torch.tensor([0.0, 0.0]), torch.tensor([1.0, 1.0])),
             (torch.tensor([0.0]), torch.tensor([4.0]), torch.tensor([0.0]), torch.tensor([1.0]))]
    assert float(bn_statistics_distance(pairs)) == pytest.approx(math.sqrt(5) + 3.0)
    with pytest.raises(ValueError, match="no BatchNorm"):
        bn_statistics_distance([])


def test_bn_hooks_read_the_inputs_of_every_batchnorm() -> None:
    model = nn.Sequential(nn.Conv2d(1, 3, 1), nn.BatchNorm2d(3), nn.ReLU(), nn.BatchNorm2d(3))
    model.eval()
    x = torch.randn(5, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    recorder = BnStatistics(model)
    assert recorder.count == 2
    with recorder, torch.no_grad():
        model(x)
    first = model[0](x)
    mean, var, run_mean, run_var = recorder.pairs[0]
    torch.testing.assert_close(mean, first.mean(dim=(0, 2, 3)))
    torch.testing.assert_close(var, first.var(dim=(0, 2, 3), unbiased=False))
    assert run_mean is model[1].running_mean and run_var is model[1].running_var
    assert len(recorder.pairs) == 2
    with torch.no_grad():  # hooks are gone after the block
        model(x)
    assert len(recorder.pairs) == 2


def _teacher() -> nn.Module:
    return build_student((8, 8), 3, 4, generator=torch.Generator().manual_seed(1)).eval()


def test_generator_loss_is_the_weighted_sum_of_its_terms() -> None:
    teacher = _teacher()
    images = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    config = GeneratorConfig(width=8, steps=1, batch_size=6, cross_entropy_weight=0.7,
                             alpha=5.0, beta=10.0, activation_weight=0.1)
    total, terms = generator_loss(teacher, images, config, BnStatistics(teacher))
    assert set(terms) == {"cross_entropy", "information_entropy", "activation", "bn_statistics"}
    expected = (0.7 * terms["cross_entropy"] + 5.0 * terms["information_entropy"]
                + 0.1 * terms["activation"] + 10.0 * terms["bn_statistics"])
    torch.testing.assert_close(total, expected)
    logits, features = penultimate_features(teacher, images)
    torch.testing.assert_close(terms["activation"], activation_loss(features))
    torch.testing.assert_close(terms["cross_entropy"], argmax_cross_entropy(logits))


def test_fit_generator_leaves_the_teacher_unchanged_and_is_deterministic() -> None:
    teacher = _teacher()
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    config = GeneratorConfig(width=8, steps=5, batch_size=16)
    a = fit_generator(teacher, image_shape=(8, 8), num_classes=3, config=config, seed=3,
                      device="cpu", progress=False)
    for key, value in teacher.state_dict().items():
        torch.testing.assert_close(value, before[key], msg=key)  # running stats included
    assert not teacher.training
    b = fit_generator(teacher, image_shape=(8, 8), num_classes=3, config=config, seed=3,
                      device="cpu", progress=False)
    sa = a.generator.sample(10, torch.Generator().manual_seed(0))
    sb = b.generator.sample(10, torch.Generator().manual_seed(0))
    torch.testing.assert_close(sa, sb)
    assert sa.shape == (10, 1, 8, 8) and float(sa.min()) >= 0 and float(sa.max()) <= 1
    assert sum(a.class_histogram) == 1000 and a.steps == 5
    assert set(a.loss_terms) == {"cross_entropy", "information_entropy", "bn_statistics"}


def test_bn_term_needs_batchnorm() -> None:
    teacher = build_teacher(TeacherConfig(architecture=TeacherArchitecture.TANH_CNN),
                            (28, 28), 10, generator=torch.Generator().manual_seed(0)).eval()
    with pytest.raises(ValueError, match="set beta=0"):
        fit_generator(teacher, image_shape=(28, 28), num_classes=10,
                      config=GeneratorConfig(width=8, steps=1, batch_size=4), seed=0,
                      device="cpu", progress=False)
    result = fit_generator(teacher, image_shape=(28, 28), num_classes=10,
                           config=GeneratorConfig(width=8, steps=1, batch_size=4, beta=0.0,
                                                  activation_weight=0.1),
                           seed=0, device="cpu", progress=False)
    assert "activation" in result.loss_terms and "bn_statistics" not in result.loss_terms


@pytest.mark.parametrize(("field", "value", "match"), [
    ("width", 1, "width"), ("steps", 0, "steps"), ("alpha", -1.0, "alpha"),
    ("beta", math.nan, "beta"), ("learning_rate", 0.0, "learning_rate"),
    ("betas", (0.9,), "betas"), ("betas", (0.9, 1.0), "betas"), ("bn_eps", 0.0, "bn_eps"),
    ("entropy_base", 1.0, "entropy_base"), ("entropy_base", math.inf, "entropy_base"),
    ("output", "tanh", "output"), ("schedule", "linear", "schedule"),
])
def test_generator_config_refuses_bad_values(field: str, value: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        GeneratorConfig(**{field: value})


def test_generator_needs_sides_that_are_multiples_of_four() -> None:
    with pytest.raises(ValueError, match="multiples of 4"):
        fit_generator(_teacher(), image_shape=(10, 10), num_classes=3,
                      config=GeneratorConfig(width=8, steps=1, batch_size=4), seed=0,
                      device="cpu", progress=False)
    with pytest.raises(ValueError, match="n must be"):
        DaflGenerator(latent_dim=4, width=4, image_shape=(8, 8)).sample(
            1, torch.Generator())


def test_kl_distillation_loss_by_hand() -> None:
    logits = torch.tensor([[1.0, 2.0, 0.5]])
    onehot = torch.tensor([[0.0, 1.0, 0.0]])
    ce = torch.nn.functional.cross_entropy(logits, torch.tensor([1]))
    torch.testing.assert_close(kl_distillation_loss(logits, onehot), ce)  # H(onehot) = 0
    soft = torch.tensor([[0.2, 0.5, 0.3]])
    log_p = torch.log_softmax(logits, dim=1)
    expected = (soft * (soft.log() - log_p)).sum()
    torch.testing.assert_close(kl_distillation_loss(logits, soft), expected)


def test_tanh_cnn_refuses_small_images() -> None:
    with pytest.raises(ValueError, match="at least 28x28"):
        build_teacher(TeacherConfig(architecture="tanh-cnn"), (8, 8), 10,
                      generator=torch.Generator())
    with pytest.raises(ValueError, match="architecture must be one of"):
        TeacherConfig(architecture="resnet-9000")


@pytest.mark.parametrize("arch", ["vgg", "resnet18", "tanh-cnn", "scatter-cnn"])
def test_teachers_have_a_classifier_and_deterministic_weights(arch: str) -> None:
    config = TeacherConfig(architecture=arch, width=4)
    a = build_teacher(config, (28, 28), 10, generator=torch.Generator().manual_seed(5))
    b = build_teacher(config, (28, 28), 10, generator=torch.Generator().manual_seed(5))
    x = torch.rand(2, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    a.eval()
    b.eval()
    logits, features = penultimate_features(a, x)
    assert logits.shape == (2, 10) and features.shape[0] == 2
    torch.testing.assert_close(a(x), b(x))


def test_staged_student_pools_released_labels() -> None:
    student = StagedStudent(config=DistillConfig(width=4, steps_per_stage=2, batch_size=8,
                                                 loss="kl"),
                            image_shape=(8, 8), num_classes=3, stages=2, seed=0, device="cpu")
    images = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="pool is empty"):
        student.train_stage()
    student.add(images, np.array([0, 1, 2, 0, 1, 2]))
    student.add(images, np.full((6, 3), 1 / 3))
    assert student.pool_size == 12
    assert math.isfinite(student.train_stage())
    probs = student.probabilities(images)
    torch.testing.assert_close(probs.sum(dim=1), torch.ones(6))
    with pytest.raises(ValueError, match="labels must be"):
        student.add(images, np.zeros((6, 4)))


def test_forward_loss_is_the_likelihood_of_the_mechanisms_exact_law() -> None:
    from dpkd_audit.mechanisms import SelectiveRandomizedResponse

    rng = np.random.default_rng(0)
    k = 6
    for eps in (0.3, 1.0, 4.0):
        mech = SelectiveRandomizedResponse(epsilon=eps, num_classes=k)
        student = rng.dirichlet(np.full(k, 0.3), size=50)   # I of every size from 2 to k
        student /= student.sum(axis=1, keepdims=True)
        mask, keep, other = mech.release_channel(student)
        assert {int(s) for s in mask.sum(axis=1)} >= {2, 3}
        logits = torch.randn(50, k, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        p = torch.softmax(logits, dim=1).numpy()
        for i in range(50):
            # q(r) = sum_a p(a) P(r | a) from the mechanism's own exact pmf
            q = sum(p[i, a] * mech.output_pmf(a, student[i]) for a in range(k))
            for r in np.flatnonzero(mask[i]):
                loss = selective_rr_forward_loss(
                    logits[i:i + 1], torch.tensor([r]), torch.from_numpy(mask[i:i + 1]),
                    torch.tensor(keep[i:i + 1]), torch.tensor(other[i:i + 1]))
                assert float(loss) == pytest.approx(-math.log(q[r]), rel=1e-6)


def test_noise_aware_student_needs_the_channel_and_hard_labels() -> None:
    student = StagedStudent(config=DistillConfig(width=4, steps_per_stage=2, batch_size=8),
                            image_shape=(8, 8), num_classes=3, stages=1, seed=0, device="cpu")
    images = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    labels = np.array([0, 1, 2, 0])
    with pytest.raises(ValueError, match="release channel"):
        student.add(images, labels)
    with pytest.raises(ValueError, match="hard labels"):
        student.add(images, np.full((4, 3), 1 / 3))
    mask = np.ones((4, 3), dtype=bool)
    with pytest.raises(ValueError, match="channel must hold"):
        student.add(images, labels, ReleaseChannel(mask=mask[:2], keep=np.full(4, 0.5),
                                                   other=np.full(4, 0.25)))
    student.add(images, labels, ReleaseChannel(mask=mask, keep=np.full(4, 0.5),
                                               other=np.full(4, 0.25)))
    assert math.isfinite(student.train_stage())
    with pytest.raises(ValueError, match="loss must be one of"):
        DistillConfig(loss="mse")


def test_forward_loss_learns_the_teacher_where_kl_learns_the_noise() -> None:
    """Label 0 kept w.p. 0.4 among |I| = 4: forward correction recovers p_0 = 1, KL gives 0.4."""
    k = 4
    released = torch.tensor([0] * 8 + [1] * 4 + [2] * 4 + [3] * 4)  # the exact law, 20 rows
    n = released.numel()
    mask = torch.ones(n, k, dtype=torch.bool)
    keep, other = torch.full((n,), 0.4), torch.full((n,), 0.2)
    fitted = {}
    for name in ("forward", "kl"):
        logits = torch.zeros(1, k, requires_grad=True)
        optimizer = torch.optim.Adam([logits], lr=0.1)
        for _ in range(300):
            if name == "forward":
                loss = selective_rr_forward_loss(logits.expand(n, k), released, mask, keep, other)
            else:
                loss = kl_distillation_loss(logits.expand(n, k),
                                            torch.nn.functional.one_hot(released, k).float())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        fitted[name] = float(torch.softmax(logits.detach(), dim=1)[0, 0])
    # maximum likelihood: q_0 = 0.2 p_0 + 0.2 = 0.4, so p_0 = 1; KL matches the frequency 0.4
    assert fitted["forward"] > 0.95
    assert fitted["kl"] == pytest.approx(0.4, abs=0.01)


def test_statistics_config_is_checked_by_name() -> None:
    from dpkd_audit.pipelines.common.dp_statistics import StatisticsConfig

    for kwargs, match in [({"epsilon_share": 1.0}, "epsilon_share"),
                          ({"epsilon_share": -0.1}, "epsilon_share"),
                          ({"epsilon_share": math.nan}, "epsilon_share"),
                          ({"clip_norm": 0.0}, "clip_norm"),
                          ({"pixel_statistics": 1}, "pixel_statistics"),
                          ({"scale": "sum"}, "scale must be one of"),
                          ({"weight_share": 0.0}, "weight_share"),
                          ({"weight_share": 1.5}, "weight_share"),
                          ({"batch_size": 0}, "batch_size")]:
        with pytest.raises(ValueError, match=match):
            StatisticsConfig(**kwargs)


def _tiny_teacher():
    return build_teacher(TeacherConfig(width=4), (8, 8), 3,
                         generator=torch.Generator().manual_seed(0)).eval()


def _exact_sum(teacher, images, config):
    """The unnoised sum, by releasing it with a mechanism of negligible noise."""
    from dpkd_audit.ledger import Ledger
    from dpkd_audit.mechanisms import TextbookGaussian
    from dpkd_audit.pipelines.common.dp_statistics import release_feature_statistics

    mechanism = TextbookGaussian(epsilon=1e12, delta=0.5, sensitivity=config.sensitivity)
    return release_feature_statistics(teacher, images, config=config, mechanism=mechanism,
                                      ledger=Ledger(epsilon=1e12, delta=0.9),
                                      rng=np.random.default_rng(0), device=torch.device("cpu"))


def _released_sum(ref, weight):
    """The released sum vector (values, squares) times ``weight`` (n or W)."""
    second = [v + m * m for m, v in zip(ref.means, ref.variances, strict=True)]
    return torch.cat([*ref.means, *second]).double() * weight


def test_released_statistics_are_the_clipped_means_and_one_record_moves_them_by_c_over_n():
    from dpkd_audit.pipelines.common.dp_statistics import (
        StatisticsConfig,
        StatisticsScale,
        statistics_layers,
    )

    teacher = _tiny_teacher()
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(50, 8, 8), dtype=np.uint8)
    for scale in StatisticsScale:
        big = StatisticsConfig(clip_norm=1e3, scale=scale)   # no clipping: the plain means
        ref = _exact_sum(teacher, images, big)
        x = torch.from_numpy(images).float().div(255.0).unsqueeze(1).double()
        np.testing.assert_allclose(ref.means[0].numpy(), x.flatten(1).mean(0).numpy(),
                                   atol=1e-4)
        np.testing.assert_allclose(ref.variances[0].numpy(), x.flatten(1).var(0, unbiased=False)
                                   .numpy(), atol=1e-4)
        assert len(ref.means) == len(statistics_layers(teacher))
        assert ref.means[1].shape == (4,)       # per channel after the first layer
        if scale is StatisticsScale.CLIP_WEIGHTS:
            assert ref.clip_factor_mean == pytest.approx(1.0, abs=1e-6)
    # dividing by n: adding one extreme record moves the sum (n x the released means) by <= C
    small = StatisticsConfig(clip_norm=0.5, scale=StatisticsScale.RECORD_COUNT)
    assert small.sensitivity == 0.5
    extreme = np.concatenate([images, np.full((1, 8, 8), 255, dtype=np.uint8)])
    before = _exact_sum(teacher, images, small)
    after = _exact_sum(teacher, extreme, small)
    assert before.clip_factor_mean is None
    moved = float(torch.linalg.vector_norm(_released_sum(after, 51) - _released_sum(before, 50)))
    assert moved <= 0.5 * (1 + 1e-5)
    assert moved > 0.4                       # the clip binds: the record counts fully


def test_exact_statistics_are_the_plain_means_and_variances_at_every_conv_input():
    """Published DGD's ``generator_statistics='exact'``: no noise, no clipping (issue 30)."""
    from dpkd_audit.pipelines.common.dp_statistics import (
        StatisticsConfig,
        exact_feature_statistics,
        statistics_layers,
        statistics_record,
    )

    teacher = _tiny_teacher()
    images = np.random.default_rng(1).integers(0, 256, size=(37, 8, 8), dtype=np.uint8)
    config = StatisticsConfig(clip_norm=1e-3, batch_size=8)  # a clip that would bind everywhere
    ref = exact_feature_statistics(teacher, images, config=config, device=torch.device("cpu"))
    inputs: list[torch.Tensor] = []
    handles = [m.register_forward_pre_hook(lambda _m, a: inputs.append(a[0]))
               for m in statistics_layers(teacher)]
    with torch.no_grad():
        teacher(torch.from_numpy(images).float().div(255.0).unsqueeze(1))
    for h in handles:
        h.remove()
    assert len(ref.means) == len(inputs) >= 2 and ref.mechanism is None
    first = inputs[0].flatten(1).double()
    np.testing.assert_allclose(ref.means[0].numpy(), first.mean(0).numpy(), atol=1e-6)
    np.testing.assert_allclose(ref.variances[0].numpy(), first.var(0, unbiased=False).numpy(),
                               atol=1e-6)
    for i, later in enumerate(inputs[1:], start=1):
        later = later.double()
        np.testing.assert_allclose(ref.means[i].numpy(), later.mean(dim=(0, 2, 3)).numpy(),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ref.variances[i].numpy(),
                                   later.var(dim=(0, 2, 3), unbiased=False).numpy(),
                                   rtol=1e-4, atol=1e-6)
    record = statistics_record(config, None, ref)
    assert record["sampler"].endswith("not private") and record["layers"] == len(inputs)
    assert statistics_record(config, None) is None


def test_clip_weights_keep_the_scale_where_the_clip_binds_and_move_by_at_most_the_sensitivity():
    """Issue 30: a clip below every record's norm shrank the released statistics (digits ~7x)."""
    from dpkd_audit.pipelines.common.dp_statistics import StatisticsConfig, StatisticsScale

    teacher = _tiny_teacher()
    rng = np.random.default_rng(4)
    images = rng.integers(100, 200, size=(60, 8, 8), dtype=np.uint8)   # similar norms
    plain_ref = _exact_sum(teacher, images, StatisticsConfig(clip_norm=1e3))
    weighted = StatisticsConfig(clip_norm=0.5)
    assert weighted.scale is StatisticsScale.CLIP_WEIGHTS
    assert weighted.sensitivity == pytest.approx(0.5 * math.sqrt(1 + 0.25 ** 2))
    ref = _exact_sum(teacher, images, weighted)
    counted = _exact_sum(teacher, images, StatisticsConfig(
        clip_norm=0.5, scale=StatisticsScale.RECORD_COUNT))
    assert ref.clip_factor_mean < 0.2         # the clip binds on every record
    for got, want, shrunk in zip(ref.means, plain_ref.means, counted.means, strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0.05, atol=1e-3)
        assert float(shrunk.abs().max()) < 0.2 * float(want.abs().max())
    for got, want in zip(ref.variances, plain_ref.variances, strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0.2, atol=2e-3)
    # the released vector (sums and r C x the clip factors) moves by <= sqrt(1 + r^2) C
    extreme = np.concatenate([images, np.full((1, 8, 8), 255, dtype=np.uint8)])
    after = _exact_sum(teacher, extreme, weighted)
    def full(r, n):
        w = r.clip_factor_mean * n
        return torch.cat([_released_sum(r, w),
                          torch.tensor([0.25 * 0.5 * w], dtype=torch.float64)])
    moved = float(torch.linalg.vector_norm(full(after, 61) - full(ref, 60)))
    assert 0.5 < moved <= weighted.sensitivity * (1 + 1e-5)


def test_statistics_release_is_charged_before_it_exists_and_refused_without_budget():

    from dpkd_audit.errors import BudgetExceededError
    from dpkd_audit.events import DiscreteGaussianVectorDpEvent
    from dpkd_audit.ledger import Ledger
    from dpkd_audit.pipelines.common.dp_statistics import (
        StatisticsConfig,
        release_feature_statistics,
        statistics_coordinates,
        statistics_mechanism,
    )

    teacher = _tiny_teacher()
    images = np.random.default_rng(1).integers(0, 256, size=(20, 8, 8), dtype=np.uint8)
    config = StatisticsConfig(clip_norm=2.0)
    coordinates = statistics_coordinates(config, teacher, (8, 8))
    assert coordinates == statistics_coordinates(config, TeacherConfig(width=4), (8, 8))
    mechanism = statistics_mechanism(config, target_epsilon=5.0, delta=1e-5,
                                     coordinates=coordinates)
    assert mechanism.epsilon == pytest.approx(0.5)
    ledger = Ledger(epsilon=0.4, delta=1e-5)   # cannot pay 0.5
    rng = np.random.default_rng(2)
    state = rng.bit_generator.state
    with pytest.raises(BudgetExceededError):
        release_feature_statistics(teacher, images, config=config, mechanism=mechanism,
                                   ledger=ledger, rng=rng, device=torch.device("cpu"))
    assert ledger.charges() == [] and rng.bit_generator.state == state
    ledger = Ledger(epsilon=1.0, delta=1e-5)
    ref = release_feature_statistics(teacher, images, config=config, mechanism=mechanism,
                                     ledger=ledger, rng=rng, device=torch.device("cpu"))
    (charge,) = ledger.charges()
    assert charge.event == mechanism.event  # float-safe: the discrete Gaussian's zCDP event
    assert isinstance(charge.event, DiscreteGaussianVectorDpEvent)
    assert all(bool((v >= 0).all()) for v in ref.variances)
    with pytest.raises(ValueError, match="calibrated for"):  # a release of another length
        release_feature_statistics(teacher, images, config=config, ledger=ledger, rng=rng,
                                   mechanism=statistics_mechanism(
                                       config, target_epsilon=5.0, delta=1e-5,
                                       coordinates=coordinates - 1),
                                   device=torch.device("cpu"))
    with pytest.raises(ValueError, match="sensitivity"):
        release_feature_statistics(teacher, images, config=StatisticsConfig(clip_norm=3.0),
                                   mechanism=mechanism, ledger=ledger, rng=rng,
                                   device=torch.device("cpu"))
    with pytest.raises(ValueError, match="disabled"):
        statistics_mechanism(StatisticsConfig(epsilon_share=0.0), target_epsilon=1.0,
                             delta=1e-5, coordinates=10)


def test_feature_statistics_pair_the_batch_with_the_reference():
    from dpkd_audit.pipelines.common.dp_statistics import FeatureStatistics, StatisticsConfig

    teacher = _tiny_teacher()
    images = np.random.default_rng(3).integers(0, 256, size=(30, 8, 8), dtype=np.uint8)
    ref = _exact_sum(teacher, images, StatisticsConfig(clip_norm=1e3))
    term = FeatureStatistics(teacher, ref)
    x = torch.from_numpy(images).float().div(255.0).unsqueeze(1)
    with torch.no_grad(), term:
        teacher(x)
    assert term.count == len(term.pairs) == len(ref.means)
    # the same images: batch statistics equal the reference, distance ~ 0
    assert float(bn_statistics_distance(term.pairs)) < 1e-2
    with torch.no_grad(), term:
        teacher(torch.rand(30, 1, 8, 8, generator=torch.Generator().manual_seed(0)))
    assert float(bn_statistics_distance(term.pairs)) > 0.1


# ------------------------------------------------------------------ DAFL's recipe (issue 30)


def test_information_entropy_in_base_ten_is_the_natural_one_over_ln_ten() -> None:
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.3, 0.1]])
    natural = information_entropy_loss(logits)
    assert float(information_entropy_loss(logits, 10.0)) == pytest.approx(
        float(natural) / math.log(10.0), rel=1e-6)
    mean = torch.softmax(logits, dim=1).mean(dim=0)
    assert float(information_entropy_loss(logits, 10.0)) == pytest.approx(
        float((mean * torch.log10(mean)).sum()), rel=1e-6)


def test_pixel_scale_is_the_mean_and_standard_deviation_of_all_pixels() -> None:
    images = np.random.default_rng(0).integers(0, 256, size=(7, 4, 4), dtype=np.uint8)
    mean, std = pixel_scale_of(images)
    values = images.astype(np.float64) / 255.0
    assert mean == pytest.approx(values.mean(), rel=1e-12)
    assert std == pytest.approx(values.std(), rel=1e-12)
    with pytest.raises(ValueError, match="uint8"):
        pixel_scale_of(images.astype(np.float32))
    with pytest.raises(ValueError, match="constant"):
        pixel_scale_of(np.zeros((2, 4, 4), dtype=np.uint8))


def test_standardised_output_has_the_pixel_scale_and_samples_are_clipped() -> None:
    """DAFL's tanh + BatchNorm(affine=False): each batch standardised, then mapped back."""
    generator = DaflGenerator(latent_dim=6, width=8, image_shape=(8, 8),
                              output=GeneratorOutput.STANDARDISED, bn_eps=0.8,
                              pixel_scale=(0.13, 0.31))
    images = generator(torch.randn(64, 6, generator=torch.Generator().manual_seed(0)))
    assert float(images.mean()) == pytest.approx(0.13, abs=1e-5)
    # BatchNorm divides by sqrt(var + 1e-5): the std falls short of 0.31 by that factor only
    with torch.no_grad():
        z = torch.randn(64, 6, generator=torch.Generator().manual_seed(0))
        x = generator.linear(z).view(64, 8, 2, 2)
        raw = torch.tanh(generator.block2(generator.block1(generator.bn0(x))))
    shrink = math.sqrt(float(raw.var(unbiased=False)) / (float(raw.var(unbiased=False)) + 1e-5))
    assert float(images.std(unbiased=False)) == pytest.approx(0.31 * shrink, rel=1e-4)
    assert float(images.min()) < 0.0   # training sees them unclipped, as DAFL does
    sample = generator.sample(64, torch.Generator().manual_seed(0))
    assert float(sample.min()) >= 0.0 and float(sample.max()) <= 1.0
    assert generator.block1[2].eps == 0.8 and generator.bn0.eps == 1e-5
    squashed = DaflGenerator(latent_dim=6, width=8, image_shape=(8, 8))
    assert squashed.standardise is None


def test_pixel_scale_is_needed_by_the_standardised_output_only() -> None:
    teacher = build_student((8, 8), 3, 4).eval()
    standardised = GeneratorConfig(width=8, steps=2, batch_size=8, beta=0.0,
                                   output="standardised")
    with pytest.raises(ValueError, match="pixel_scale"):
        GeneratorTrainer(teacher, image_shape=(8, 8), num_classes=3, config=standardised,
                         seed=0, device="cpu")
    with pytest.raises(ValueError, match="pixel_scale"):
        GeneratorTrainer(teacher, image_shape=(8, 8), num_classes=3, config=standardised,
                         seed=0, device="cpu", pixel_scale=(0.0, 0.3))
    with pytest.raises(ValueError, match="pixel_scale"):
        GeneratorTrainer(teacher, image_shape=(8, 8), num_classes=3,
                         config=GeneratorConfig(width=8, steps=2, batch_size=8, beta=0.0),
                         seed=0, device="cpu", pixel_scale=(0.1, 0.3))
    trainer = GeneratorTrainer(teacher, image_shape=(8, 8), num_classes=3, config=standardised,
                               seed=0, device="cpu", pixel_scale=(0.1, 0.3))
    trainer.train(2)
    assert trainer.generator.pixel_scale == (0.1, 0.3)


def test_constant_schedule_keeps_the_learning_rate_and_cosine_decays_it() -> None:
    teacher = build_student((8, 8), 3, 4).eval()
    seen: dict[str, list[float]] = {}
    original = torch.optim.Adam.step

    for schedule in ("constant", "cosine", "step"):
        rates: list[float] = []

        def spy(self, *args, _rates=rates, **kwargs):
            _rates.append(self.param_groups[0]["lr"])
            assert self.param_groups[0]["betas"] == (0.9, 0.999)
            return original(self, *args, **kwargs)

        torch.optim.Adam.step = spy
        try:
            trainer = GeneratorTrainer(
                teacher, image_shape=(8, 8), num_classes=3, seed=0, device="cpu",
                config=GeneratorConfig(width=8, batch_size=8, beta=0.0, learning_rate=0.2,
                                       betas=(0.9, 0.999), schedule=schedule, decay_every=3))
            trainer.train(4)
            if schedule == "step":   # a second call goes on with the schedule
                trainer.train(3)
        finally:
            torch.optim.Adam.step = original
        seen[schedule] = rates
    assert seen["constant"] == [0.2] * 4
    assert seen["cosine"][0] == pytest.approx(0.2) and seen["cosine"][-1] < 0.2 / 2
    assert seen["step"] == pytest.approx([0.2, 0.2, 0.2, 0.02, 0.02, 0.02, 0.002])


def test_a_generator_with_one_class_is_reported_collapsed() -> None:
    def result(histogram: list[int]) -> GeneratorResult:
        return GeneratorResult(generator=None, loss_terms={}, seconds=0.0,
                               teacher_agreement=0.0, class_histogram=histogram, steps=1)

    assert result([950, 30, 20]).collapsed
    assert result([950, 30, 20]).largest_class_share == pytest.approx(0.95)
    assert not result([400, 300, 300]).collapsed
