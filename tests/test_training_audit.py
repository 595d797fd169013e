"""Audits of users' own Opacus trainings: the attach, the sampler check, the participation.

Statistical checks use fixed seeds. The validity game (Steinke's bound on simulated canary
readings at a known epsilon) allows its nominal 5% of exceedances plus three binomial standard
deviations: a correct analysis fails it with probability below 0.2%; the deliberately wrong
claim (the noise halved) must be refuted in most repetitions.
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn
from torch.utils.data import (
    DataLoader,
    IterableDataset,
    TensorDataset,
    WeightedRandomSampler,
)

from dpkd_audit.accountants.dp_sgd import DpSgdSchedule, poisson_epsilon
from dpkd_audit.accountants.dp_sgd_sampling import DpSgdSampling, sampling_epsilon
from dpkd_audit.audit.training import canary_inclusion, one_run_bound
from dpkd_audit.training_audit import (
    AuditConfig,
    MismatchKind,
    OpacusAudit,
    SamplerKind,
    SamplerMismatchError,
    SamplerMismatchWarning,
    check_sampler,
)
from dpkd_audit.training_audit.participation import (
    AllocationParticipation,
    PoissonParticipation,
    poisson_step_log_ratio,
)


def _data(n: int = 650, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 8, 8, generator=g)
    y = (x.mean(dim=(1, 2, 3)) > 0).long()
    return TensorDataset(x, y)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.fc = nn.Linear(4 * 6 * 6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.relu(self.conv(x)).flatten(1))


def _train(model, optimizer, loader, epochs: int = 1) -> None:
    """The loop as Opacus's examples write it, unchanged."""
    criterion = nn.CrossEntropyLoss()
    for _ in range(epochs):
        model.train()
        for data, target in loader:
            optimizer.zero_grad()
            loss = criterion(model(data), target)
            loss.backward()
            optimizer.step()


def _private(audit: OpacusAudit | None, loader: DataLoader, *, sigma: float = 1.0,
             poisson: bool = True, seed: int = 0):
    from opacus import PrivacyEngine

    torch.manual_seed(seed)
    model = _Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    engine = PrivacyEngine()
    kwargs = dict(module=model, optimizer=optimizer, data_loader=loader,
                  noise_multiplier=sigma, max_grad_norm=1.0, poisson_sampling=poisson,
                  noise_generator=torch.Generator().manual_seed(seed + 1))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Secure RNG turned off")
        if audit is None:
            model, optimizer, loader = engine.make_private(**kwargs)
        else:
            model, optimizer, loader = audit.make_private(engine, **kwargs)
    return engine, model, optimizer, loader


def _quiet_train(*args, **kwargs) -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook")
        _train(*args, **kwargs)


# --------------------------------------------------------------------------- the attach

def test_correct_poisson_setup_gets_no_message_and_a_record(tmp_path):
    audit = OpacusAudit(canaries=400, epochs=2, name="toy", dataset="noise")
    with warnings.catch_warnings():
        warnings.simplefilter("error", SamplerMismatchWarning)
        engine, model, optimizer, loader = _private(audit, DataLoader(_data(), batch_size=64))
        assert audit.report is not None and audit.report.ok
        assert audit.report.sampler is SamplerKind.POISSON
        _quiet_train(model, optimizer, loader, epochs=2)
        result = audit.finish(test_accuracy=0.5)
    assert result.steps == 22 and result.mismatches == ()  # 2 epochs of ceil(650 / 64)
    assert result.epsilon_opacus == pytest.approx(engine.get_epsilon(1e-5))
    assert result.bound.canaries == 400 and result.bound.guesses == 40
    # the optimizer is as before: the canaries' group and hooks are gone
    assert len(optimizer.param_groups) == 1 and "add_noise" not in optimizer.__dict__
    path = result.save(tmp_path / "audit")
    record = json.loads(path.read_text())
    from dpkd_audit.reports.collect import RecordKind, _classify

    assert _classify(record, "audit.json") is RecordKind.PIPELINE_AUDIT
    assert record["mode"] == "dp-sgd (poisson sampling)" and record["mismatches"] == []
    assert record["correct_check"] == record["correct"]
    assert record["provenance"]["package"] == "dpkd-audit"
    assert set(record["verdicts"]) == {"steinke", "fdp", "gaussian", "independent"}
    # the training keeps working after the audit is detached
    _quiet_train(model, optimizer, loader, epochs=1)


def test_the_first_step_is_the_unaudited_step_and_readings_are_the_rows():
    """The canaries' group comes last, so step 1 noises the model as without the audit; with
    tiny noise every reading is the canary's row (1 or 0) in units of C."""
    data = _data()
    after = []
    for audited in (False, True):
        audit = OpacusAudit(canaries=300, seed=3) if audited else None
        _, model, optimizer, loader = _private(audit, DataLoader(data, batch_size=64),
                                               sigma=1e-6)
        x, y = next(iter(loader))
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        if audited:
            seen = []
            original = audit._read

            def spy(opt, original=original, seen=seen, audit=audit):
                original(opt)
                tap = audit._tap.grad.double().numpy()
                seen.append(tap * opt.expected_batch_size / 1.0)
            audit._read = spy
            picked_rows = []
            rows = audit._participation.rows

            def spy_rows(rows=rows, picked_rows=picked_rows):
                picked, weights = rows()
                picked_rows.append(picked)
                return picked, weights
            audit._participation.rows = spy_rows
        optimizer.step()
        after.append([p.detach().clone() for p in model.parameters()])
        if audited:
            expected = np.zeros(300)
            expected[picked_rows[0]] = 1.0
            np.testing.assert_allclose(seen[0], expected, atol=1e-4)
            assert picked_rows[0].size > 0
    for a, b in zip(*after, strict=True):
        assert torch.equal(a, b)


def test_shuffled_batches_are_caught_and_audited_with_the_crowd():
    # 650 records in shuffled batches of 32 (21 steps per epoch), sigma 1, 3 epochs: Opacus
    # reports 2.8; the slot of fixed-size batches shows (lower bound 7.4) and 100,000 canaries
    # read as independent runs refute the claim (measured 3.6 in simulation)
    audit = OpacusAudit(canaries=100_000, epochs=3)
    loader = DataLoader(_data(), batch_size=32, shuffle=True)
    with pytest.warns(SamplerMismatchWarning, match="shuffled-batches-accounted-as-poisson"):
        engine, model, optimizer, loader = _private(audit, loader, sigma=1.0, poisson=False)
    (mismatch,) = audit.report.mismatches
    expected = sampling_epsilon(DpSgdSchedule(dataset_size=650, batch_size=32),
                                sampling=DpSgdSampling.SHUFFLE, noise_multiplier=1.0,
                                epochs=3, delta=1e-5)
    assert mismatch.epsilon_runs == pytest.approx(expected.epsilon)
    assert f"{expected.epsilon_lower:.4g}" in mismatch.message
    _quiet_train(model, optimizer, loader, epochs=3)
    result = audit.finish()
    assert result.participation == "allocation" and result.steps == 63
    claim = engine.get_epsilon(1e-5)
    assert result.epsilon_claimed == pytest.approx(claim)
    assert claim < result.independent.epsilon_lower <= result.sampler_bound.epsilon
    verdicts = result.verdicts()["independent"]
    assert verdicts["claim"] == "violation" and verdicts["sampler_bound"] != "violation"


def test_sequential_batches_are_named():
    report = _report(DataLoader(_data(), batch_size=64, shuffle=False), poisson=False)
    assert [m.kind for m in report.mismatches] == [MismatchKind.SEQUENTIAL_AS_POISSON]
    assert report.bound is not None and report.bound.tight


def _report(loader: DataLoader, *, poisson: bool, epochs: int = 2):
    audit = OpacusAudit(canaries=10, epochs=epochs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplerMismatchWarning)
        _private(audit, loader, poisson=poisson)
    return audit.report


def test_weighted_sampler_replaced_by_opacus_is_caught():
    # Opacus issue #813: num_samples=128, batch 16 -> q = 1/8 over all 650 records
    data = _data()
    sampler = WeightedRandomSampler(torch.ones(650), num_samples=128, replacement=True)
    report = _report(DataLoader(data, batch_size=16, sampler=sampler), poisson=True)
    kinds = [m.kind for m in report.mismatches]
    assert MismatchKind.WEIGHTED_SAMPLER_REPLACED in kinds
    replaced = report.mismatches[kinds.index(MismatchKind.WEIGHTED_SAMPLER_REPLACED)]
    assert report.sample_rate == pytest.approx(1 / 8)
    assert "#813" in replaced.message and "(5 x B/N" in replaced.message  # 650/8 / 16
    assert replaced.epsilon_runs == pytest.approx(report.epsilon_claimed)


def test_weighted_sampling_with_replacement_gets_its_bound():
    weights = torch.ones(650)
    weights[0] = 5.0  # one record drawn 5 times as often
    sampler = WeightedRandomSampler(weights, num_samples=650, replacement=True)
    report = _report(DataLoader(_data(), batch_size=64, sampler=sampler), poisson=False)
    (mismatch,) = report.mismatches
    assert mismatch.kind is MismatchKind.WEIGHTED_AS_POISSON
    assert math.isfinite(mismatch.epsilon_runs) and mismatch.epsilon_runs > 0
    assert "largest share 0.00765" in mismatch.message


def test_normaliser_that_changes_with_n_is_caught_and_a_safe_size_is_not():
    # N = 640 = 10 x 64: N + 1 needs 11 batches, so q and the normaliser change
    report = _report(DataLoader(_data(640), batch_size=64), poisson=True)
    (mismatch,) = report.mismatches
    assert mismatch.kind is MismatchKind.NORMALISER_DEPENDS_ON_N
    assert mismatch.relation == "replace-one" and mismatch.epsilon_runs > 0
    assert "#571" in mismatch.message
    assert report.normaliser_from_n is True
    assert _report(DataLoader(_data(650), batch_size=64), poisson=True).ok


def test_unknown_sampler_is_named():
    class EveryOther:
        def __init__(self, n: int) -> None:
            self.n = n

        def __iter__(self):
            for start in range(0, self.n, 64):
                yield list(range(start, min(start + 64, self.n), 2))

        def __len__(self) -> int:
            return -(-self.n // 64)

    loader = DataLoader(_data(650), batch_sampler=EveryOther(650))
    report = check_sampler(loader, epochs=1)
    assert report.sampler is SamplerKind.OTHER
    assert [m.kind for m in report.mismatches] == [MismatchKind.UNKNOWN_SAMPLER]


def test_a_loop_over_the_original_loader_is_caught_at_finish():
    audit = OpacusAudit(canaries=50)
    original = DataLoader(_data(650), batch_size=25, drop_last=True)
    _, model, optimizer, _ = _private(audit, original)
    with pytest.warns(SamplerMismatchWarning, match="fixed-size-batches-under-a-poisson"):
        _quiet_train(model, optimizer, original, epochs=1)  # the wrong loader
        result = audit.finish()
    assert [m.kind for m in result.runtime_mismatches] == [
        MismatchKind.FIXED_BATCHES_IN_THE_LOOP]


def test_strict_refuses_a_mismatch_before_training():
    audit = OpacusAudit(canaries=10, strict=True)
    with pytest.raises(SamplerMismatchError, match="shuffled-batches-accounted-as-poisson"):
        _private(audit, DataLoader(_data(650), batch_size=64, shuffle=True), poisson=False)


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("kwargs, match", [
    ({"canaries": 0}, "canaries"),
    ({"canaries": 10, "guesses": 11, "guesses_out": 0}, "guesses"),
    ({"canaries": 10, "guesses": 6}, "guesses"),
    ({"delta": 0.0}, "delta"),
    ({"placement": "bias"}, "placement"),
    ({"name": ""}, "name"),
])
def test_bad_config_is_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AuditConfig(**kwargs)


def test_bad_set_ups_are_refused_before_training():
    from opacus import PrivacyEngine

    too_many = OpacusAudit(canaries=10_000, placement="model")
    with pytest.raises(ValueError, match="outnumber"):
        _private(too_many, DataLoader(_data(650), batch_size=64))

    class Stream(IterableDataset):
        def __iter__(self):
            yield from _data(10)

    with pytest.raises(ValueError, match="IterableDataset"):
        OpacusAudit(canaries=10).make_private(
            PrivacyEngine(), module=_Net(), optimizer=torch.optim.SGD(_Net().parameters(), 0.1),
            data_loader=DataLoader(Stream(), batch_size=2), noise_multiplier=1.0,
            max_grad_norm=1.0)
    with pytest.raises(ValueError, match="ghost"):
        OpacusAudit(canaries=10).make_private(
            PrivacyEngine(), module=_Net(), optimizer=torch.optim.SGD(_Net().parameters(), 0.1),
            data_loader=DataLoader(_data(650), batch_size=64), noise_multiplier=1.0,
            max_grad_norm=1.0, grad_sample_mode="ghost")
    plain = torch.optim.SGD(_Net().parameters(), 0.1)
    with pytest.raises(ValueError, match="DPOptimizer"):
        OpacusAudit(canaries=10).attach(None, plain, DataLoader(_data(650), batch_size=64))
    audit = OpacusAudit(canaries=10)
    _private(audit, DataLoader(_data(650), batch_size=64))
    with pytest.raises(ValueError, match="no optimizer step"):
        audit.finish()
    with pytest.raises(ValueError, match="one training only"):
        _private(audit, DataLoader(_data(650), batch_size=64))


# --------------------------------------------------------------------------- participation

def test_allocation_rows_one_slot_per_epoch_with_the_crowd():
    included = canary_inclusion(500, seed=1)
    part = AllocationParticipation(included, steps_per_epoch=7, seed=1, fixed=False, crowd=True,
                                   noise_multiplier=1.0)
    seen = np.zeros((3, 500))
    for epoch in range(3):
        for _ in range(7):
            picked, weights = part.rows()
            seen[epoch, picked] += weights
    # every canary once per epoch: 2 when inserted, 1 (the missing crowd member) when not
    np.testing.assert_array_equal(seen, np.where(included, 2.0, 1.0)[None, :].repeat(3, 0))
    fixed = AllocationParticipation(included, steps_per_epoch=7, seed=1, fixed=True,
                                    crowd=False, noise_multiplier=1.0)
    slots = []
    for _ in range(3):
        slot = np.full(500, -1)
        for s in range(7):
            picked, _ = fixed.rows()
            slot[picked] = s
        slots.append(slot)
    assert np.array_equal(slots[0], slots[1]) and np.array_equal(slots[1], slots[2])
    assert np.all((slots[0] >= 0) == included)


@pytest.mark.parametrize("crowd", [False, True])
def test_allocation_scores_are_the_mixture_likelihood_ratio(crowd):
    sigma, t, m = 0.9, 5, 40
    included = canary_inclusion(m, seed=2)
    part = AllocationParticipation(included, steps_per_epoch=t, seed=2, fixed=False,
                                   crowd=crowd, noise_multiplier=sigma)
    rng = np.random.default_rng(5)
    ys = []
    for _ in range(2 * t + 3):  # two epochs and a cut-short third
        picked, weights = part.rows()
        y = rng.normal(0, sigma, m)
        y[picked] += weights
        ys.append(y)
        part.score_step(y)
    y = np.array(ys)

    def epoch_llr(block: np.ndarray) -> np.ndarray:
        unseen = t - block.shape[0]
        if crowd:
            num = np.exp((2 * block - 2) / sigma**2).sum(0) + unseen
            den = np.exp((block - 0.5) / sigma**2).sum(0) + unseen
        else:
            num = np.exp((block - 0.5) / sigma**2).sum(0) + unseen
            den = t
        return np.log(num) - np.log(den)

    expected = epoch_llr(y[:t]) + epoch_llr(y[t:2 * t]) + epoch_llr(y[2 * t:])
    np.testing.assert_allclose(part.scores(), expected, rtol=1e-10)


def test_poisson_participation_is_the_pipelines_stream_and_fast_is_the_same_law():
    included = canary_inclusion(100, seed=7)
    part = PoissonParticipation(included, sampling_probability=0.3, seed=7)
    rng = np.random.default_rng([7, 0xCA4A, 4])
    for _ in range(3):
        assert np.array_equal(part.draw(), np.flatnonzero(included & (rng.random(100) < 0.3)))
    # fast: each inserted canary joins with probability q, independently (marginals and the
    # pairwise joint within 6 standard errors over 20,000 steps)
    fast = PoissonParticipation(included, sampling_probability=0.3, seed=7, fast=True)
    steps = 20_000
    joined = np.zeros((steps, 100), dtype=bool)
    for t in range(steps):
        joined[t, fast.draw()] = True
    assert not joined[:, ~included].any()
    rate = joined[:, included].mean(axis=0)
    se = math.sqrt(0.3 * 0.7 / steps)
    assert np.all(np.abs(rate - 0.3) < 6 * se)
    a, b = np.flatnonzero(included)[:2]
    both = (joined[:, a] & joined[:, b]).mean()
    assert abs(both - 0.09) < 6 * math.sqrt(0.09 * 0.91 / steps)


def test_one_run_validity_game_and_a_wrong_claim():
    """Steinke's bound on simulated Poisson canary readings at a known epsilon.

    100 games: the bound exceeds the true epsilon (PLD of the same mechanism, 4.38) at most
    at the nominal 5% (+3 SD); a claim made for four times the noise (0.93) is refuted in
    most games (measured: the bound's 10th percentile 1.32).
    """
    sigma, q, steps, m, delta = 1.0, 1.0, 1, 2000, 1e-5
    truth = float(poisson_epsilon(q, sigma, steps, delta))
    wrong = float(poisson_epsilon(q, 4 * sigma, steps, delta))
    rng = np.random.default_rng(11)
    above, refuted = 0, 0
    games = 100
    for _ in range(games):
        included = rng.random(m) < 0.5
        joined = included[None, :] & (rng.random((steps, m)) < q)
        y = joined + rng.normal(0, sigma, (steps, m))
        scores = poisson_step_log_ratio(y, q, sigma).sum(axis=0)
        bound = one_run_bound(scores, included, epsilon=truth, delta=delta, guesses_in=100,
                              guesses_out=0)
        above += bound.epsilon_lower > truth
        refuted += bound.epsilon_lower > wrong
    assert above <= 0.05 * games + 3 * math.sqrt(0.05 * 0.95 * games)
    assert refuted >= 0.8 * games


# --------------------------------------------------------------------------- the real client

def test_opacus_mnist_example_loop_audited_on_digits(tmp_path):
    """benchmarks/opacus_mnist_audit.py: Opacus's example loop with the three attach lines."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "opacus_mnist_audit.py"
    spec = importlib.util.spec_from_file_location("opacus_mnist_audit", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    threads = torch.get_num_threads()
    try:
        summary = module.main(["--dataset", "digits", "--epochs", "2", "--canaries", "3000",
                               "--compare", "--quiet", "--threads", "1", "--out",
                               str(tmp_path / "out")])
    finally:
        torch.set_num_threads(threads)
    result = summary["result"]
    assert result.report.ok and result.steps == 2 * 19  # digits: 1,200 train, ceil(1200 / 64)
    plain, audited = summary["runs"]
    assert plain["noise_multiplier"] == audited["noise_multiplier"] == 1.0
    assert plain["epsilon_opacus"] == pytest.approx(audited["epsilon_opacus"])
    record = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert record["pipeline"] == "opacus mnist example (batch 64, 2 epochs)"
    assert record["dataset"] == "digits"
    assert record["seconds"] == {"train": round(audited["seconds_training"], 3)}
    assert record["command"].startswith("python benchmarks/opacus_mnist_audit.py --dataset")
    assert json.loads((tmp_path / "out" / "compare.json").read_text())["time_ratio"] > 0


def test_independent_coordinates_validity_game_and_a_wrong_analysis():
    """The canaries read as independent runs, on simulated Poisson readings at a known epsilon.

    200 games: the many-run bound (threshold chosen on half of each side, Clopper-Pearson on
    the rest) exceeds the true epsilon at most at the nominal 5% (+3 SD, false failure below
    0.2%). The deliberately wrong analysis - a scorer that peeks at which canaries were
    inserted (one standard deviation of the scores added to theirs), as a buggy scorer reading
    ``included`` would - exceeds it in most games (measured: 40 of 40), so the game can fail.
    """
    from dpkd_audit.audit.training import many_run_bound

    sigma, q, steps, m, delta = 8.0, 1.0, 1, 2000, 1e-5  # true epsilon 0.434
    truth = float(poisson_epsilon(q, sigma, steps, delta))
    rng = np.random.default_rng(21)
    games, right, wrong = 200, 0, 0
    for game in range(games):
        included = rng.random(m) < 0.5
        joined = included[None, :] & (rng.random((steps, m)) < q)
        scores = poisson_step_log_ratio(joined + rng.normal(0, sigma, (steps, m)), q,
                                        sigma).sum(axis=0)
        peeked = scores + scores.std() * included
        for values, count in ((scores, "right"), (peeked, "wrong")):
            bound = many_run_bound(values[included], values[~included], epsilon=truth,
                                   delta=delta, rng=np.random.default_rng(game))
            if bound.epsilon_lower > truth:
                right += count == "right"
                wrong += count == "wrong"
    limit = 0.05 * games + 3 * math.sqrt(0.05 * 0.95 * games)
    assert right <= limit
    assert wrong > games / 2


def test_model_placement_adds_rows_to_the_models_own_coordinates():
    audit = OpacusAudit(canaries=300, placement="model")  # of the model's 330 parameters
    _, model, optimizer, loader = _private(audit, DataLoader(_data(), batch_size=64),
                                           sigma=1e-6)
    x, y = next(iter(loader))
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    picked_rows = []
    rows = audit._participation.rows

    def spy_rows():
        picked, weights = rows()
        picked_rows.append(picked)
        return picked, weights
    audit._participation.rows = spy_rows
    optimizer.step()
    assert picked_rows[0].size > 0
    # with tiny noise, a picked canary's coordinate reads its row (1) plus the real gradient
    # there; the readings of every canary went into its score
    assert np.count_nonzero(audit._scores) == 300
    _quiet_train(model, optimizer, loader, epochs=1)
    result = audit.finish()
    assert result.independent is None  # real gradients tie model coordinates together
    assert result.to_record()["canary_placement"] == "model"
