"""DGD: batched ensemble, shards, TNAR geometry, VAE loss, charges, accounting, bad input.

Everything runs on the embedded 8x8 digits with tiny models (seconds on 2 cores).
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from dpkd_audit.accountants.advanced import dgd_published_epsilon
from dpkd_audit.data import load_dataset
from dpkd_audit.errors import BudgetExceededError
from dpkd_audit.ledger import Ledger
from dpkd_audit.mechanisms import LaplaceNoisyMax
from dpkd_audit.pipelines.common.dp_statistics import StatisticsConfig
from dpkd_audit.pipelines.common.dp_teacher import DpSgdConfig
from dpkd_audit.pipelines.common.ensemble import (
    EnsembleConfig,
    TeacherEnsemble,
    draw_minibatches,
    shard_of_records,
    teacher_slice,
    train_ensemble,
)
from dpkd_audit.pipelines.common.generator import GeneratorConfig, GeneratorOutput
from dpkd_audit.pipelines.common.student import StudentConfig, augment_batch
from dpkd_audit.pipelines.common.teacher import TeacherConfig
from dpkd_audit.pipelines.common.tnar import (
    adversarial_direction,
    decoder_jacobian,
    entropy_regularization,
    tangent_basis,
)
from dpkd_audit.pipelines.common.vae import ConvVae, VaeConfig, vae_loss
from dpkd_audit.pipelines.dgd import (
    DgdConfig,
    DgdMode,
    LabelFilter,
    QuerySelection,
    TnarConfig,
    check_run,
    kept_labels,
    label_rng,
    ledger_for,
    run,
    select_queries,
    sweep,
    sweep_configs,
)
from dpkd_audit.pipelines.dgd.config import PAPER_QUERIES
from dpkd_audit.pipelines.dgd.pipeline import preparation_key
from dpkd_audit.pipelines.dgd.student import soft_cross_entropy, train_tnar_student


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def tiny(**overrides):
    """A DGD config on digits that runs in a few seconds."""
    values = dict(
        dataset="digits", queries=40, synthetic=300,
        ensemble=EnsembleConfig(num_teachers=10, widths=(4, 8), steps=20, batch_size=16,
                                learning_rate=3e-3),
        generator=GeneratorConfig(width=8, steps=10, batch_size=32, beta=0.0,
                                  activation_weight=0.1), generator_statistics="none",
        sound_generator=GeneratorConfig(width=8, steps=10, batch_size=32, beta=10.0,
                                        activation_weight=0.1),
        vae=VaeConfig(width=4, steps=10, batch_size=32),
        student=TnarConfig(width=4, steps=6, batch_size=16, unlabelled_batch_size=8),
        sound_student=TnarConfig(width=4, steps=6, batch_size=16, unlabelled_batch_size=8,
                                 tangent_weight=0.0, normal_weight=0.0, entropy_weight=0.0),
        baseline=TeacherConfig(architecture="vgg", width=4, training=StudentConfig(
            epochs=1, batch_size=64, learning_rate=0.1, label_smoothing=0.0, augment=False)),
        dp_sgd=DpSgdConfig(epochs=1, batch_size=128, learning_rate=0.5))
    values.update(overrides)
    return DgdConfig.small(**values)


# --------------------------------------------------------------------------- ensemble


@pytest.mark.parametrize(("kernel", "augment"), [("loop", False), ("grouped", False),
                                                 ("im2col", False), ("loop", True),
                                                 ("grouped", True)])
def test_batched_ensemble_equals_per_teacher_training(digits, kernel, augment):
    """Every kernel + summed losses train each teacher as its own run would (augmented too)."""
    n, steps, b = 4, 3, 8
    images, labels = digits.train_images[:200], digits.train_labels[:200]
    shards = shard_of_records(images, n, key=b"k" * 16)
    config = EnsembleConfig(num_teachers=n, widths=(3, 5), steps=steps, batch_size=b,
                            learning_rate=1e-2, augment=augment)
    batched = train_ensemble(images, labels, shards, num_classes=10, config=config,
                             test_images=images[:10], test_labels=labels[:10], seed=7,
                             device="cpu", progress=False, kernel=kernel).ensemble
    assert batched.kernel.value == kernel
    # the reference: the same initial weights and draws, one model and one Adam per teacher
    generator = torch.Generator().manual_seed(7)
    initial = TeacherEnsemble(num_teachers=n, widths=(3, 5), image_shape=(8, 8),
                              num_classes=10, generator=generator)
    sizes = np.bincount(shards, minlength=n)
    order = torch.from_numpy(np.argsort(shards, kind="stable"))
    offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(sizes)[:-1]]))
    singles = [teacher_slice(initial, t) for t in range(n)]
    optimizers = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in singles]
    schedules = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: max(0.0, 1.0 - s / steps))
                 for o in optimizers]
    x_all = torch.from_numpy(np.array(images)).float().div(255.0)
    y_all = torch.from_numpy(labels.astype(np.int64))
    for _ in range(steps):
        index = draw_minibatches(generator, order, offsets, torch.from_numpy(sizes), b)
        x = x_all[index]
        if augment:  # one draw for all teachers' images, after the mini-batches' draw
            x = augment_batch(x.reshape(n * b, 1, 8, 8), generator,
                              StudentConfig()).reshape(n, b, 8, 8)
        for t, (model, opt, sched) in enumerate(zip(singles, optimizers, schedules,
                                                    strict=True)):
            logits = model(x[t].unsqueeze(1))[:, 0]
            loss = torch.nn.functional.cross_entropy(logits, y_all[index[t]])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    for t in range(n):
        got = teacher_slice(batched, t)
        for (name, a), (_, ref) in zip(got.named_parameters(), singles[t].named_parameters(),
                                       strict=True):
            assert torch.allclose(a, ref, atol=2e-5, rtol=1e-4), (t, name,
                                                                   float((a - ref).abs().max()))
        # and the weights moved: the comparison is not between two untrained nets
        assert not torch.allclose(got.head, teacher_slice(initial, t).head)


def test_shards_are_disjoint_and_survive_add_remove(digits):
    images = digits.train_images
    shards = shard_of_records(images, 25, key=b"s" * 32)
    assert shards.shape == (images.shape[0],) and set(np.unique(shards)) <= set(range(25))
    members = [set(np.flatnonzero(shards == t)) for t in range(25)]
    assert sum(len(m) for m in members) == images.shape[0]
    assert set().union(*members) == set(range(images.shape[0]))
    # removing record 0 changes no other record's teacher
    assert np.array_equal(shard_of_records(images[1:], 25, key=b"s" * 32), shards[1:])
    # a different key gives a different partition
    assert not np.array_equal(shard_of_records(images, 25, key=b"t" * 32), shards)


# --------------------------------------------------------------------------- VAE and TNAR


def test_vae_loss_by_hand():
    x = torch.tensor([[[[0.0, 1.0], [1.0, 0.0]]]]).repeat(2, 1, 1, 1)
    recon = torch.full_like(x, 0.25)
    mu = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    logvar = torch.tensor([[0.0, math.log(4.0)], [0.0, 0.0]])
    loss, terms = vae_loss(x, recon, mu, logvar)
    bce = -(2 * math.log(0.75) + 2 * math.log(0.25))           # per image, summed over pixels
    kl = (-0.5 * (1 + 0 - 1 - 1) - 0.5 * (1 + math.log(4.0) - 0 - 4)
          - 0.5 * (1 - 0 - 1) - 0.5 * (1 - 4 - 1)) / 2
    assert terms["reconstruction"].item() == pytest.approx(bce, rel=1e-5)
    assert terms["kl"].item() == pytest.approx(kl, rel=1e-5)
    assert loss.item() == pytest.approx(bce + kl, rel=1e-5)


@pytest.fixture(scope="module")
def decoder_setup():
    torch.manual_seed(0)  # not used by the code under test; keeps nothing else random
    vae = ConvVae(image_shape=(8, 8), latent_dim=3, width=4,
                  generator=torch.Generator().manual_seed(1)).double().eval()
    z = torch.randn(5, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    return vae, z


def test_decoder_jacobian_matches_finite_differences(decoder_setup):
    vae, z = decoder_setup
    jacobian = decoder_jacobian(vae.decode, z)
    assert jacobian.shape == (5, 64, 3)
    h = 1e-6
    for k in range(3):
        step = torch.zeros_like(z)
        step[:, k] = h
        numeric = (vae.decode(z + step) - vae.decode(z - step)).reshape(5, -1) / (2 * h)
        assert torch.allclose(jacobian[:, :, k], numeric, atol=1e-7, rtol=1e-5)


def test_tangent_direction_lies_in_the_decoder_column_space(decoder_setup):
    vae, z = decoder_setup
    student = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)).double()
    x = vae.decode(z)
    logits = student(x)
    basis = tangent_basis(vae.decode, z)
    jacobian = decoder_jacobian(vae.decode, z)
    tangent = adversarial_direction(student, x, logits, basis, tangent=True, xi=1e-3,
                                    generator=torch.Generator().manual_seed(3))
    normal = adversarial_direction(student, x, logits, basis, tangent=False, xi=1e-3,
                                   generator=torch.Generator().manual_seed(3))
    flat_t, flat_n = tangent.reshape(5, -1, 1), normal.reshape(5, -1, 1)
    assert torch.allclose(flat_t.norm(dim=1), torch.ones(5, 1, dtype=torch.float64))
    # tangent = J c for some c (least-squares residual ~ 0) ...
    coefficients = torch.linalg.lstsq(jacobian, flat_t).solution
    assert (jacobian @ coefficients - flat_t).norm(dim=1).max() < 1e-8
    # ... and the normal direction is orthogonal to every column of J
    assert (jacobian.transpose(1, 2) @ flat_n).abs().max() < 1e-8
    # a random direction is neither (the checks can fail)
    rand = torch.randn(5, 64, 1, generator=torch.Generator().manual_seed(4),
                       dtype=torch.float64)
    assert (jacobian @ torch.linalg.lstsq(jacobian, rand).solution - rand).norm(dim=1).min() \
        > 0.1


def test_tangent_direction_is_adversarial(decoder_setup):
    """The power step finds the tangent direction that changes the prediction most.

    "Changes" is what the power step maximises: the KL of the predictions for a small step
    (its second-order regime), whose Hessian in x for a linear student W is
    W^T (diag(p) - p p^T) W; its top eigenvector within col(J) is computed exactly. With
    enough iterations the found direction reaches it (and beats random tangent directions);
    with one iteration it need not (which is why the count matters). The student's weights
    come from a seeded generator, not torch's global state.
    """
    vae, z = decoder_setup
    weights = torch.Generator().manual_seed(4)
    student = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)).double()
    with torch.no_grad():
        student[1].weight.copy_(torch.randn(10, 64, generator=weights, dtype=torch.float64) / 8)
        student[1].bias.copy_(torch.randn(10, generator=weights, dtype=torch.float64))
    x = vae.decode(z)
    logits = student(x).detach()
    basis = tangent_basis(vae.decode, z)
    p = torch.softmax(logits, dim=1)

    def change(d):
        q = torch.log_softmax(student(x + 1e-2 * d), dim=1)
        return (p * (p.log() - q)).sum(dim=1)

    w = student[1].weight.detach()
    top = []
    for i in range(x.shape[0]):
        hessian = w.T @ (torch.diag(p[i]) - torch.outer(p[i], p[i])) @ w
        q_basis, _ = torch.linalg.qr(basis[i])
        _, vectors = torch.linalg.eigh(q_basis.T @ hessian @ q_basis)
        top.append((q_basis @ vectors[:, -1]).reshape(x.shape[1:]))
    best = change(torch.stack(top))
    found = adversarial_direction(student, x, logits, basis, tangent=True, xi=1e-3,
                                  generator=torch.Generator().manual_seed(5),
                                  power_iterations=30)
    assert torch.all(change(found) >= 0.99 * best)
    assert torch.all(change(found) <= best * (1 + 1e-3))
    for seed in range(6, 9):
        probe = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed),
                            dtype=torch.float64)
        random_tangent = (basis @ (basis.transpose(1, 2) @ probe.reshape(5, -1, 1))).reshape(
            x.shape)
        random_tangent = random_tangent / random_tangent.reshape(5, -1).norm(dim=1).view(
            5, 1, 1, 1)
        assert torch.all(change(found) >= change(random_tangent))
    one_step = adversarial_direction(student, x, logits, basis, tangent=True, xi=1e-3,
                                     generator=torch.Generator().manual_seed(5))
    assert float((change(one_step) / best).min()) < 0.99


def test_soft_cross_entropy_by_hand_and_its_gradient_is_the_kl():
    logits = torch.tensor([[1.0, 0.0, -1.0], [0.5, 0.5, 2.0]], requires_grad=True)
    targets = torch.tensor([[0.7, 0.2, 0.1], [0.0, 0.0, 1.0]])
    p = torch.softmax(logits.detach(), dim=1)
    expected = -(targets * p.log()).sum(dim=1).mean()
    value = soft_cross_entropy(logits, targets)
    assert float(value) == pytest.approx(float(expected), rel=1e-6)
    value.backward()
    # d/dlogits of mean KL(t || softmax) is (softmax - t) / batch
    assert torch.allclose(logits.grad, (p - targets) / 2, atol=1e-6)


def test_distillation_without_soft_images_is_refused():
    with pytest.raises(ValueError, match="soft_images and soft_targets"):
        train_tnar_student(torch.zeros(4, 1, 8, 8), np.zeros(4, dtype=np.int64), codes=None,
                           vae=None, num_classes=10, config=TnarConfig(
                               width=2, steps=1, batch_size=2, tangent_weight=0.0,
                               normal_weight=0.0, entropy_weight=0.0),
                           test_images=torch.zeros(2, 1, 8, 8),
                           test_labels=np.zeros(2, dtype=np.int64), seed=0,
                           distillation_weight=1.0, progress=False)


def test_kept_labels_are_those_the_baseline_agrees_with():
    labels = np.array([3, 1, 4, 1, 5])
    baseline = np.array([3, 2, 4, 0, 5])
    assert kept_labels(labels, baseline, LabelFilter.BASELINE_AGREEMENT).tolist() == [0, 2, 4]
    assert kept_labels(labels, baseline, LabelFilter.NONE).tolist() == [0, 1, 2, 3, 4]
    assert kept_labels(labels, baseline + 10, LabelFilter.BASELINE_AGREEMENT).size == 0
    assert kept_labels(labels, baseline, "none").tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="one length"):
        kept_labels(labels, baseline[:4], LabelFilter.NONE)
    with pytest.raises(ValueError, match="label_filter"):
        kept_labels(labels, baseline, "agree")


def test_student_without_labels_distils_and_without_either_is_refused():
    config = TnarConfig(width=2, steps=2, batch_size=2, unlabelled_batch_size=2,
                        tangent_weight=0.0, normal_weight=0.0, entropy_weight=0.0)
    common = {"codes": None, "vae": None, "num_classes": 3, "config": config,
              "test_images": torch.zeros(2, 1, 8, 8), "test_labels": np.zeros(2, dtype=np.int64),
              "seed": 0, "progress": False}
    soft = torch.softmax(torch.randn(5, 3, generator=torch.Generator().manual_seed(0)), 1)
    result = train_tnar_student(torch.zeros(0, 1, 8, 8), np.zeros(0, dtype=np.int64),
                                soft_images=torch.rand(5, 1, 8, 8), soft_targets=soft,
                                distillation_weight=1.0, **common)
    assert set(result.loss_terms) == {"distillation"}
    with pytest.raises(ValueError, match="labelled images or a distillation term"):
        train_tnar_student(torch.zeros(0, 1, 8, 8), np.zeros(0, dtype=np.int64), **common)
    with pytest.raises(ValueError, match="one entry per labelled image"):
        train_tnar_student(torch.zeros(3, 1, 8, 8), np.zeros(2, dtype=np.int64), **common)


def test_entropy_regularization_by_hand():
    logits = torch.log(torch.tensor([[0.5, 0.5], [1.0, 1e-30]]))
    assert entropy_regularization(logits).item() == pytest.approx(math.log(2) / 2, rel=1e-5)


# --------------------------------------------------------------------------- pipeline


def test_published_run_charges_every_query_before_its_label(digits, monkeypatch):
    config = tiny()
    ledger = ledger_for(config)
    seen: list[int] = []
    original = LaplaceNoisyMax.aggregate

    def watched(self, vote_matrix, *, rng):
        queries = sum(1 for c in ledger.charges() if c.label.startswith("LNMax query"))
        seen.append(queries)
        return original(self, vote_matrix, rng=rng)

    monkeypatch.setattr(LaplaceNoisyMax, "aggregate", watched)
    result = run(config, ledger=ledger, rng=label_rng(config), progress=False)
    assert seen == list(range(1, config.queries + 1))
    charges = ledger.charges()
    assert charges[0].event.__class__.__name__ == "NonPrivateDpEvent"
    assert len(charges) == 1 + config.queries
    record = result.to_record()
    assert record["charges"][1]["count"] == config.queries
    eps0 = 2.0 / config.noise_scale
    assert record["epsilon"] == record["epsilon_published"] == pytest.approx(
        dgd_published_epsilon(eps0, config.queries, config.delta))
    assert record["epsilon_record_level"] is None and "non-private" in \
        record["record_level_reason"]
    assert 0 < record["epsilon_queries_pld"] <= record["epsilon_queries_rdp"]
    assert record["epsilon_data_dependent"] is not None
    assert record["queries"] == config.queries and record["teachers"] == 10
    # the paper's student and generator: no statistics, no distillation from the baseline
    assert record["statistics"] is None and record["distillation_weight"] == 0.0
    assert "distillation" not in record["student_loss"]
    assert "dp_feature_statistics" not in record["generator"]["loss_terms"]


def test_published_generator_with_exact_statistics_is_a_named_departure(digits):
    """``generator_statistics='exact'``: the generator matches the private data's statistics
    through the published baseline (issue 30); the record says they are not private, the
    record-level epsilon stays infinite, sweeps share the stage, sound runs ignore it."""
    generator = GeneratorConfig(width=8, steps=10, batch_size=32, beta=10.0,
                                activation_weight=0.1)
    config = tiny(generator=generator, generator_statistics="exact")
    configs = sweep_configs(config, modes=["published"], seeds=[0], queries=[10, 20])
    results = list(sweep(configs))
    record = results[0].to_record()
    assert record["config"]["generator_statistics"] == "exact"
    assert record["statistics"]["sampler"].endswith("not private")
    assert "exact_feature_statistics" in record["generator"]["loss_terms"]
    assert "dp_feature_statistics" not in record["generator"]["loss_terms"]
    assert record["epsilon_record_level"] is None
    assert all("statistics" in r.shared_stages for r in results)
    assert "statistics" in record["seconds"]
    sound = dataclasses.replace(config, mode="sound", epsilon=3.0, queries=None)
    assert sound.active_generator_statistics.value == "none"
    assert preparation_key(config) != preparation_key(
        tiny(generator=dataclasses.replace(generator, beta=0.0), generator_statistics="none"))


def test_latent_code_perturbation_needs_the_student_on_reconstructions():
    """The released noisy codes protect the synthetic images only if the student reads
    nothing but their reconstructions."""
    with pytest.raises(ValueError, match="unlabelled_input='reconstruction'"):
        tiny(latent_epsilon=0.5)


def test_latent_code_perturbation_is_charged_per_synthetic_image_not_per_record(digits):
    config = tiny(latent_epsilon=0.5, student=TnarConfig(
        width=4, steps=6, batch_size=16, unlabelled_batch_size=8,
        unlabelled_input="reconstruction"))
    ledger = ledger_for(config)
    result = run(config, ledger=ledger, rng=label_rng(config), progress=False)
    record = result.to_record()
    eps0 = 2.0 / config.noise_scale
    assert record["epsilon_published"] == pytest.approx(
        dgd_published_epsilon(eps0, config.queries, config.delta) + 0.5)
    assert record["epsilon_latent"] == 0.5 and "synthetic image" in record["latent_unit"]
    assert [c["label"] for c in record["latent_charges"]] == [
        record["latent_charges"][0]["label"]]
    assert record["latent_charges"][0]["label"].startswith(
        f"latent codes of {config.synthetic - config.queries} synthetic images")
    # the record-level ledger holds the non-private step and the queries only
    assert len(ledger.charges()) == 1 + config.queries
    baseline = run(tiny(), ledger=ledger_for(tiny()), rng=label_rng(tiny()), progress=False)
    assert baseline.to_record()["epsilon_latent"] is None
    assert baseline.to_record()["latent_charges"] == []


def test_confident_selection_is_class_balanced_and_most_confident():
    rng = torch.Generator().manual_seed(0)
    probabilities = torch.softmax(3 * torch.randn(500, 4, generator=rng), dim=1)
    probabilities[:, 3] = 0.0            # class 3 is never predicted: its share goes elsewhere
    probabilities = probabilities / probabilities.sum(1, keepdim=True)
    assert select_queries(probabilities, 7, QuerySelection.FIRST).tolist() == list(range(7))
    chosen = select_queries(probabilities, 42, QuerySelection.CONFIDENT)
    assert len(chosen) == len(set(chosen.tolist())) == 42
    confidence, predicted = probabilities.max(1)
    counts = np.bincount(predicted[chosen].numpy(), minlength=4)
    assert counts[3] == 0 and counts[:3].min() >= 11          # quotas 11, 11, 10 (+10 refill)
    for k in range(3):
        members = torch.nonzero(predicted == k).flatten().numpy()
        picked = np.intersect1d(members, chosen)
        rest = np.setdiff1d(members, chosen)
        assert confidence[picked].min() >= confidence[rest].max()
    with pytest.raises(ValueError, match="queries"):
        select_queries(probabilities, 501, QuerySelection.CONFIDENT)


def test_sound_run_record_level_epsilon_is_the_ledgers(digits):
    config = tiny(mode="sound", epsilon=8.0, queries=None)
    ledger = ledger_for(config)
    plan = check_run(config, ledger, num_private=digits.n_train, num_classes=10,
                     image_shape=digits.image_shape)
    assert plan.queries >= 1 and plan.dp_sgd is not None
    result = run(config, ledger=ledger, rng=label_rng(config), progress=False)
    record = result.to_record()
    spent = float(ledger.spent().epsilon)
    assert record["epsilon_record_level"] == pytest.approx(spent)
    assert spent <= 8.0 + 1e-9
    # the float-safe statistics release has no 1-D PLD: it enters the PLD through its zCDP
    # bound (its declared pair used the whole delta: the figure was inf), below RDP
    pld = record["epsilon_record_level_pld"]
    assert pld is not None and 0 < pld <= spent * (1 + 1e-9)
    assert plan.dp_sgd.epsilon_pld <= plan.dp_sgd.epsilon_rdp <= 8.0
    # the DP-SGD baseline first, then the feature statistics, then the queries
    labels = [c.label for c in ledger.charges()]
    assert labels[0].startswith("DP-SGD")
    assert labels[1].startswith("feature statistics through the DP baseline")
    assert all(x.startswith("LNMax") for x in labels[2:])
    assert len(labels) == 2 + plan.queries
    assert record["statistics"]["epsilon"] == pytest.approx(0.1 * 8.0)
    assert record["distillation_weight"] == 1.0 and "distillation" in record["student_loss"]
    # the digits' sound student starts from the DP baseline (its weights: post-processing)
    assert record["student_init"] == "baseline"
    # the student trains on the released labels that agree with the DP baseline only
    assert record["label_filter"] == "baseline-agreement"
    assert record["labels_used"] == round(record["label_baseline_agreement"] * plan.queries)
    # the sound student: no TNAR terms by default (the published one keeps the paper's)
    assert "tangent" not in record["student_loss"]
    assert record["config"]["sound_student"]["tangent_weight"] == 0.0
    assert record["config"]["student"]["tangent_weight"] == 1.0
    assert record["epsilon_queries_rdp"] <= 0.5 * 8.0 + 1e-9
    # figures of the teachers without noise are withheld from a sound record
    assert record["teacher_accuracy_mean"] is None
    assert record["epsilon_data_dependent"] is None and record["withheld"]


def test_sound_run_never_fits_a_model_without_noise(digits, monkeypatch):
    """Everything after the DP baseline is post-processing only if no step reads the private
    data without noise: the non-private fit and the BatchNorm running statistics are never
    used in sound mode."""
    from dpkd_audit.pipelines.common import generator
    from dpkd_audit.pipelines.dgd import pipeline

    def refuse(*args, **kwargs):
        raise AssertionError("a non-private step ran in sound mode")

    monkeypatch.setattr(pipeline, "fit_source", refuse)
    monkeypatch.setattr(pipeline, "exact_feature_statistics", refuse)
    monkeypatch.setattr(generator.BnStatistics, "__init__", refuse)
    config = tiny(mode="sound", epsilon=8.0, queries=None)
    result = run(config, ledger=ledger_for(config), rng=label_rng(config), progress=False)
    assert result.epsilon_record_level <= 8.0 + 1e-9
    # a sound point of a sweep whose published base reads exact statistics (issue 30) ignores
    # them: its generator matches only the statistics released with noise
    published = tiny(generator=GeneratorConfig(width=8, steps=10, batch_size=32, beta=10.0,
                                               activation_weight=0.1),
                     generator_statistics="exact")
    sound = dataclasses.replace(published, mode="sound", epsilon=8.0, queries=None)
    result = run(sound, ledger=ledger_for(sound), rng=label_rng(sound), progress=False)
    assert result.epsilon_record_level <= 8.0 + 1e-9


def test_published_refused_by_a_finite_ledger_before_any_work(digits):
    config = tiny()
    ledger = Ledger(epsilon=100.0, delta=1e-5)
    with pytest.raises(BudgetExceededError, match="finite budget"):
        run(config, ledger=ledger, rng=label_rng(config), progress=False)
    assert ledger.charges() == []


@pytest.mark.parametrize("overrides, match", [
    ({"queries": 0}, "queries"),
    ({"queries": -3}, "queries"),
    ({"mode": "sound", "epsilon": 0.0}, "epsilon"),
    ({"mode": "sound", "epsilon": -1.0}, "epsilon"),
    ({"mode": "sound", "epsilon": math.inf}, "epsilon"),
    ({"epsilon": 3.0}, "epsilon applies to mode='sound'"),
    ({"queries": 400, "synthetic": 300}, "synthetic"),
    ({"noise_scale": 0.0}, "noise_scale"),
    ({"distillation_weight": -1.0}, "distillation_weight"),
    ({"latent_epsilon": 0.0}, "latent_epsilon"),
    ({"distillation_weight": math.nan}, "distillation_weight"),
    ({"mode": "sound", "epsilon": 3.0, "label_filter": "agree"}, "label_filter"),
    ({"mode": "sound", "epsilon": 3.0, "distillation_weight": 0.0}, "label_filter='none'"),
    ({"statistics": StatisticsConfig(epsilon_share=0.0)}, "sound_generator.beta > 0 needs"),
    ({"generator": GeneratorConfig(beta=10.0), "generator_statistics": "none"},
     "must be > 0 exactly when generator_statistics='exact'"),
    ({"generator": GeneratorConfig(beta=0.0), "generator_statistics": "exact"},
     "must be > 0 exactly when generator_statistics='exact'"),
    ({"generator_statistics": "noisy"}, "generator_statistics must be one of"),
])
def test_bad_config_is_refused(overrides, match):
    with pytest.raises(ValueError, match=match):
        tiny(**overrides)


def test_teachers_that_do_not_divide_the_data_are_refused_before_any_work(digits):
    config = tiny(ensemble=EnsembleConfig(num_teachers=400, widths=(4, 8), steps=2))
    ledger = ledger_for(config)
    with pytest.raises(ValueError, match="do not divide"):
        run(config, ledger=ledger, rng=label_rng(config), progress=False)
    assert ledger.charges() == []
    # on average enough records, but a hash shard left empty is refused too
    config = tiny(ensemble=EnsembleConfig(num_teachers=600, widths=(4, 8), steps=2),
                  min_shard=1)
    with pytest.raises(ValueError, match="empty"):
        run(config, ledger=ledger, rng=label_rng(config), progress=False)
    assert ledger.charges() == []


def test_sound_queries_that_exhaust_the_budget_are_refused(digits):
    config = tiny(mode="sound", epsilon=1.0, queries=500, synthetic=600)
    ledger = ledger_for(config)
    with pytest.raises(ValueError, match="--queries"):
        check_run(config, ledger, num_private=digits.n_train, num_classes=10,
                  image_shape=digits.image_shape)
    assert ledger.charges() == []


def test_sweep_shares_stages_across_query_counts(digits):
    configs = sweep_configs(tiny(), modes=["published"], seeds=[0], queries=[10, 20])
    results = list(sweep(configs))
    assert [r.queries for r in results] == [10, 20]
    assert all("ensemble" in r.shared_stages and "vae" in r.shared_stages for r in results)
    assert results[0].epsilon_published < results[1].epsilon_published


def test_paper_settings():
    assert PAPER_QUERIES == (27, 400, 750, 1300)
    config = DgdConfig.small()
    assert config.ensemble.num_teachers == 250 and config.noise_scale == 40.0
    assert config.queries == 1300 and config.vae.latent_dim == 32
    assert config.generator.alpha == 5.0 and config.generator.activation_weight == 0.1
    # the small preset's departure: exact statistics (weight 10); the paper's generator on request
    assert config.generator_statistics.value == "exact" and config.generator.beta == 10.0
    assert DgdConfig.small(generator_statistics="none").generator.beta == 0.0
    assert DgdConfig.small(mode="sound", epsilon=1.0).active_generator_statistics.value == "none"
    assert DgdConfig.paper().generator_statistics.value == "none"
    assert DgdConfig.small(mode="sound", epsilon=1.0).queries is None
    assert DgdConfig.paper().ensemble.widths == (64, 128)
    paper_generator = DgdConfig.paper().generator
    assert (paper_generator.width, paper_generator.batch_size, paper_generator.steps) \
        == (128, 512, 4000)
    assert paper_generator.output is GeneratorOutput.STANDARDISED
    assert paper_generator.learning_rate == 0.2 and paper_generator.bn_eps == 0.8
    assert dataclasses.replace(config, mode=DgdMode.SOUND, epsilon=2.0).epsilon == 2.0
    # the small preset's measured departures: class balance, a VGG baseline on the 28x28 sets
    assert config.student.balance_weight == 0.1 and DgdConfig.paper().student.balance_weight == 0
    baseline = DgdConfig.small(dataset="mnist").baseline
    assert (baseline.architecture.value, baseline.width, baseline.training.epochs) \
        == ("vgg", 16, 2)
    for name in ("digits", "fashion-mnist"):
        assert DgdConfig.small(dataset=name).baseline.architecture.value == "dgd-cnn"
    # and augmented teachers for MNIST's published runs only
    teachers = DgdConfig.small(dataset="mnist").ensemble
    assert (teachers.augment, teachers.steps, teachers.widths) == (True, 600, (8, 16))
    sound = DgdConfig.small(dataset="mnist", mode="sound", epsilon=1.0).ensemble
    assert (sound.augment, sound.steps) == (False, 300)
    for name in ("digits", "fashion-mnist"):
        assert not DgdConfig.small(dataset=name).ensemble.augment
    assert not DgdConfig.paper().ensemble.augment
    # sound students start from the DP baseline on every dataset; published students never do
    for name in ("digits", "mnist", "fashion-mnist"):
        sound_config = DgdConfig.small(dataset=name, mode="sound", epsilon=1.0)
        assert sound_config.active_student_init.value == "baseline"
    assert DgdConfig.paper(mode="sound", epsilon=1.0).active_student_init.value == "baseline"
    assert DgdConfig.small(mode="sound", epsilon=1.0,
                           student_init="scratch").active_student_init.value == "scratch"
    assert DgdConfig.small(dataset="digits").active_student_init.value == "scratch"
    with pytest.raises(ValueError, match="student_init"):
        DgdConfig.small(student_init="teacher")


def test_small_preset_query_share_and_digits_perturbations():
    """Sound MNIST / Fashion-MNIST give the queries 0.1 of the budget; digits and paper 0.5."""
    for name in ("mnist", "fashion-mnist"):
        config = DgdConfig.small(dataset=name, mode="sound", epsilon=1.0)
        assert config.query_share == 0.1
        plan = check_run(config, ledger_for(config), num_private=60000, num_classes=10,
                         image_shape=(28, 28))
        wide = dataclasses.replace(config, query_share=0.5)
        wide_plan = check_run(wide, ledger_for(wide), num_private=60000, num_classes=10,
                              image_shape=(28, 28))
        # fewer queries, less DP-SGD noise for the same record-level target
        assert 1 <= plan.queries < wide_plan.queries
        assert plan.dp_sgd.noise_multiplier < wide_plan.dp_sgd.noise_multiplier
        assert DgdConfig.small(dataset=name, mode="sound", epsilon=1.0,
                               query_share=0.3).query_share == 0.3
        student = DgdConfig.small(dataset=name).student
        assert (student.tangent_epsilon, student.normal_epsilon) == (2.0, 1.0)
    assert DgdConfig.small(dataset="digits", mode="sound", epsilon=1.0).query_share == 0.5
    assert DgdConfig.paper(mode="sound", epsilon=1.0).query_share == 0.5
    digits = DgdConfig.small(dataset="digits").student
    assert (digits.tangent_epsilon, digits.normal_epsilon) == (0.571, 0.286)


# --------------------------------------------------------------------------- CLI

_TINY_CLI = ("--teachers", "10", "--ensemble-steps", "5", "--generator-steps", "3",
             "--student-steps", "3", "--synthetic", "200", "--quiet")


def test_cli_run_writes_a_record(tmp_path, capsys):
    from dpkd_audit.cli.main import main

    out = tmp_path / "out"
    assert main(["run", "dgd", "--queries", "12", *_TINY_CLI, "--ensemble-augment",
                 "--out", str(out)]) == 0
    record = json.loads((out / "result.json").read_text())
    assert record["config"]["ensemble"]["augment"] is True
    assert record["method"] == "dgd" and record["queries"] == 12
    assert record["epsilon_record_level"] is None
    assert record["command"].startswith("dpkd run dgd")
    assert "inf (not DP at record level)" in capsys.readouterr().out
    # the small preset's published generator: exact statistics (a named departure)
    assert record["config"]["generator_statistics"] == "exact"
    assert "exact_feature_statistics" in record["generator"]["loss_terms"]
    paper = tmp_path / "paper"
    assert main(["run", "dgd", "--queries", "12", "--generator-statistics", "none", *_TINY_CLI,
                 "--out", str(paper)]) == 0
    record = json.loads((paper / "result.json").read_text())
    assert record["config"]["generator_statistics"] == "none"
    assert record["config"]["generator"]["beta"] == 0.0 and record["statistics"] is None
    assert record["config"]["student"]["balance_weight"] == 0.1
    without = tmp_path / "without"
    assert main(["run", "dgd", "--queries", "12", "--balance-weight", "0",
                 "--labelled-loss", "generalized-cross-entropy",
                 "--unlabelled-terms", "random-feature", *_TINY_CLI,
                 "--out", str(without)]) == 0
    record = json.loads((without / "result.json").read_text())
    assert record["config"]["student"]["balance_weight"] == 0.0
    assert "balance" not in record["student_loss"]
    assert record["config"]["student"]["labelled_loss"] == "generalized-cross-entropy"
    assert "generalized_cross_entropy" in record["student_loss"]
    assert "cross_entropy" not in record["student_loss"]
    assert record["config"]["student"]["unlabelled_terms"] == "random-feature"


def test_cli_sound_run_without_statistics_or_distillation(tmp_path):
    from dpkd_audit.cli.main import main

    out = tmp_path / "out"
    assert main(["run", "dgd", "--mode", "sound", "--epsilon", "8", "--statistics-share", "0",
                 "--distillation-weight", "0", "--student-init", "scratch", *_TINY_CLI,
                 "--dp-architecture", "vgg", "--out", str(out)]) == 0
    record = json.loads((out / "result.json").read_text())
    assert record["config"]["dp_baseline"]["architecture"] == "vgg"
    assert record["student_init"] == "scratch"
    assert record["statistics"] is None and record["distillation_weight"] == 0.0
    assert record["label_filter"] == "none" and record["labels_used"] == record["queries"]
    assert not any(c["label"].startswith("feature statistics") for c in record["charges"])
    assert record["config"]["sound_generator"]["beta"] == 0.0
    assert record["epsilon_record_level"] <= 8.0


@pytest.mark.parametrize(("extra", "message"), [
    (("--queries", "0"), "must be an integer >= 1"),
    (("--mode", "sound"), "--mode sound needs --epsilon"),
    (("--mode", "sound", "--epsilon", "0"), "must be a finite number > 0"),
    (("--mode", "published", "--epsilon", "2"), "--epsilon applies to --mode sound"),
    (("--teachers", "400", "--queries", "12"), "do not divide"),
    (("--queries", "199"), "synthetic must be >= queries + 2"),
    (("--mode", "sound", "--epsilon", "1", "--queries", "150"), "--queries"),
    (("--queries", "12", "--distillation-weight", "1"),
     "--distillation-weight applies to sound runs only"),
    (("--queries", "12", "--label-filter", "none"),
     "--label-filter applies to sound runs only"),
    (("--queries", "12", "--student-init", "baseline"),
     "--student-init applies to sound runs only"),
    (("--mode", "sound", "--epsilon", "5", "--student-init", "teacher"), "invalid choice"),
    (("--queries", "12", "--statistics-share", "0.1"),
     "--statistics-share applies to sound runs only"),
    (("--queries", "12", "--dp-architecture", "vgg"),
     "--dp-architecture applies to sound runs only"),
    (("--mode", "sound", "--epsilon", "5", "--dp-architecture", "scatternet"), "invalid choice"),
    (("--mode", "sound", "--epsilon", "5", "--distillation-weight", "-1"),
     "must be a finite number >= 0"),
    (("--mode", "sound", "--epsilon", "5", "--statistics-share", "1"), "must be a number in"),
    (("--mode", "sound", "--epsilon", "5", "--generator-statistics", "exact"),
     "--generator-statistics applies to published runs only"),
    (("--queries", "12", "--generator-statistics", "noisy"), "invalid choice"),
    (("--mode", "sound", "--epsilon", "5", "--labelled-loss", "generalized-cross-entropy"),
     "--labelled-loss applies to the published student only"),
    (("--mode", "sound", "--epsilon", "5", "--balance-weight", "0",
      "--unlabelled-input", "reconstruction"),
     "--balance-weight, --unlabelled-input apply to the published student only"),
    (("--queries", "12", "--labelled-loss", "mae"), "invalid choice"),
    (("--mode", "sound", "--epsilon", "5", "--unlabelled-terms", "random-feature"),
     "--unlabelled-terms applies to the published student only"),
])
def test_cli_bad_input_fails_before_any_work(tmp_path, capsys, extra, message):
    from dpkd_audit.cli.main import main

    code = None
    out = tmp_path / "out"
    try:
        code = main(["run", "dgd", *_TINY_CLI, "--out", str(out), *extra])
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_cli_sweep_over_queries_resumes(tmp_path, capsys):
    from dpkd_audit.cli.main import main

    out = tmp_path / "sweep"
    argv = ["sweep", "dgd", "--queries", "8,16", *_TINY_CLI, "--out", str(out)]
    assert main(argv) == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["queries"] for r in records] == [8, 16]
    assert all("vae" in r["shared_stages"] for r in records)
    assert (out / "accuracy.png").stat().st_size > 0
    assert "What epsilon means here" in (out / "README.md").read_text()
    assert main([*argv, "--resume"]) == 0  # nothing left to run
    assert len((out / "results.jsonl").read_text().splitlines()) == 2


@pytest.mark.parametrize("mode", ["published", "sound"])
def test_sweep_plan_is_exactly_what_a_run_charges(mode):
    """dpkd sweep --ledger charges the plan up front: it must equal the run's own charges."""
    from event_helpers import flat_events

    from dpkd_audit.pipelines.dgd.sweep import check_configs, planned_run_events

    config = tiny(mode="sound", epsilon=8.0, queries=None) if mode == "sound" else tiny()
    planned = planned_run_events(config, check_configs([config]))
    ledger = ledger_for(config)
    run(config, ledger=ledger, rng=label_rng(config), progress=False)
    assert flat_events(planned) == flat_events(c.event for c in ledger.charges())


@pytest.mark.parametrize("mode", ["published", "sound"])
def test_seeded_cpu_runs_are_bit_reproducible(tmp_path, mode):
    """Two runs of one seeded config give the same record (seconds and provenance aside), and
    so does a third whose loops continue from the checkpoints of the second."""
    from dpkd_audit.pipelines.common.checkpoint import Checkpoints

    config = tiny(mode=mode, **({"epsilon": 8.0, "queries": None} if mode == "sound" else {}))

    def record():
        result = run(config, ledger=ledger_for(config), rng=label_rng(config), progress=False)
        return {k: v for k, v in result.to_record().items()
                if k not in ("seconds", "provenance")}

    first = record()
    with Checkpoints(tmp_path) as checkpoints:
        second = record()
        third = record()
    assert first == second == third
    assert {stage for stage, _, _ in checkpoints.resumed} >= {"ensemble", "generator"}
