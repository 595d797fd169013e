"""Does the accountant match the sampler the code runs? A check before the first DP-SGD step.

Opacus's accountants (RDP, PRV, GDP) all assume Poisson subsampling at ``q = 1 /
len(data_loader)`` for ``len(data_loader)`` steps per epoch, and its optimizer divides the noisy
sum by ``expected_batch_size = int(len(dataset) * q)``. :func:`check_sampler` reads the loader
(its batch sampler, inner sampler, batch size, ``drop_last``), the optimizer and the engine, and
says which sampling runs, which normaliser, and which accountant matches. Each mismatch found in
DP-SGD code of 2024-2026 gets one message naming it and the epsilon of what actually runs (a
valid upper bound, :mod:`~dpkd_audit.accountants.dp_sgd_sampling`):

- shuffled or sequential fixed-size batches accounted as Poisson (``make_private(...,
  poisson_sampling=False)``; Chua et al. ICML 2024; Annamalai, Balle, Hayes, De Cristofaro,
  "To shuffle or not to shuffle", NDSS 2026);
- a ``WeightedRandomSampler`` that ``make_private`` silently replaces by Poisson sampling at
  ``q = 1 / ceil(num_samples / B)`` (Opacus issue #813), or that runs, with replacement, under
  a Poisson accountant (``poisson_sampling=False``);
- a normaliser (and a sampling rate) computed from the private N that changes between N and a
  neighbour N +- 1 (Opacus issues #571 and #819): the add/remove-one guarantee fails for such a
  dataset;
- any other sampler, which no accountant here matches.

A correct Poisson set-up gets no message.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import warnings
from typing import Any

from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit.accountants.dp_sgd import DpSgdAccountant, DpSgdSchedule, dp_sgd_epsilon
from dpkd_audit.accountants.dp_sgd_sampling import (
    DpSgdSampling,
    SamplingBound,
    sampling_epsilon,
    with_replacement_epsilon,
)

__all__ = ["Mismatch", "MismatchKind", "SamplerKind", "SamplerMismatchError", "SamplerReport",
           "check_sampler", "schedule_for"]


class SamplerKind(enum.Enum):
    """What draws the batches."""

    #: Opacus's ``DPDataLoader``: every record independently with probability q.
    POISSON = "poisson"
    #: A ``BatchSampler`` over a ``RandomSampler`` (or ``SubsetRandomSampler``): a fresh
    #: permutation each epoch cut into batches of B.
    SHUFFLE = "shuffle"
    #: A ``BatchSampler`` over a ``SequentialSampler``: the same batches every epoch.
    SEQUENTIAL = "sequential"
    #: A ``BatchSampler`` over a ``WeightedRandomSampler`` with replacement (or a
    #: ``RandomSampler(replacement=True)``): B independent weighted draws per step.
    WEIGHTED = "weighted"
    #: Anything else: no accountant here matches it.
    OTHER = "other"

    @property
    def sampling(self) -> DpSgdSampling | None:
        """The :class:`DpSgdSampling` whose bound covers this sampler (``None``: none)."""
        return {SamplerKind.POISSON: DpSgdSampling.POISSON,
                SamplerKind.SHUFFLE: DpSgdSampling.SHUFFLE,
                SamplerKind.SEQUENTIAL: DpSgdSampling.SEQUENTIAL}.get(self)


class MismatchKind(enum.Enum):
    """The ways an accountant and the code's sampler disagree."""

    SHUFFLED_AS_POISSON = "shuffled-batches-accounted-as-poisson"
    SEQUENTIAL_AS_POISSON = "sequential-batches-accounted-as-poisson"
    WEIGHTED_SAMPLER_REPLACED = "weighted-sampler-replaced-by-poisson"
    WEIGHTED_AS_POISSON = "weighted-sampling-accounted-as-poisson"
    NORMALISER_DEPENDS_ON_N = "normaliser-changes-with-dataset-size"
    UNKNOWN_SAMPLER = "unknown-sampler"
    FIXED_BATCHES_IN_THE_LOOP = "fixed-size-batches-under-a-poisson-accountant"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Mismatch:
    """One disagreement between the accountant and what runs.

    Attributes:
        kind: Which.
        message: One paragraph: what runs, what is accounted, the epsilon of what runs.
        epsilon_runs: A valid upper bound on the epsilon of what runs at the report's delta
            (``None`` when no bound is known, or the number of epochs is not).
        relation: The neighbouring relation ``epsilon_runs`` holds under.
    """

    kind: MismatchKind
    message: str
    epsilon_runs: float | None = None
    relation: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly record."""
        out = dataclasses.asdict(self)
        out["kind"] = self.kind.value
        return out


class SamplerMismatchError(ValueError):
    """Raised under ``strict`` when the accountant does not match the sampler that runs."""

    def __init__(self, report: SamplerReport) -> None:
        super().__init__(report.message())
        self.report = report


@dataclasses.dataclass(frozen=True, kw_only=True)
class SamplerReport:
    """What the sampler check read and found.

    Attributes:
        sampler: The sampler that draws the batches.
        dataset_size: N, ``len(data_loader.dataset)`` (or the subset's size).
        batch_size: B of a fixed-size batch sampler (``None`` for Poisson).
        drop_last: The batch sampler's ``drop_last`` (``None`` for Poisson).
        steps_per_epoch: ``len(data_loader)``.
        sample_rate: q, the rate the accountant uses (Opacus: 1 / ``len(data_loader)``).
        expected_batch_size: The optimizer's normaliser (``None`` without an optimizer).
        normaliser_from_n: Whether the normaliser equals ``int(N q)`` (Opacus's formula from
            the private N).
        normaliser_neighbours: The normaliser and q at N - 1, N, N + 1 where they can be
            computed (``None`` otherwise): ``{"N-1": [normaliser, q], ...}``.
        accountant: The engine's accountant (``rdp``, ``prv``, ``gdp``; ``None`` without an
            engine). Every Opacus accountant assumes Poisson sampling.
        matching_accountant: Which accountant matches what runs.
        noise_multiplier: sigma (from the optimizer).
        epochs: The planned epochs (``None`` if not given).
        delta: The delta of the epsilons.
        epsilon_claimed: What the engine's accountant reports for the planned epochs (``None``
            without an engine or epochs).
        bound: The bound of the sampler that runs (``None`` when none is known or without
            epochs).
        mismatches: What disagrees (empty: the accountant matches).
    """

    sampler: SamplerKind
    dataset_size: int
    batch_size: int | None
    drop_last: bool | None
    steps_per_epoch: int
    sample_rate: float
    expected_batch_size: float | None
    normaliser_from_n: bool | None
    normaliser_neighbours: dict[str, list[float]] | None
    accountant: str | None
    matching_accountant: str
    noise_multiplier: float | None
    epochs: int | None
    delta: float
    epsilon_claimed: float | None
    bound: SamplingBound | None
    mismatches: tuple[Mismatch, ...] = ()

    @property
    def ok(self) -> bool:
        """No mismatch."""
        return not self.mismatches

    def message(self) -> str:
        """The mismatches, one paragraph each (empty when none)."""
        return "\n".join(f"[{m.kind.value}] {m.message}" for m in self.mismatches)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly record."""
        out = dataclasses.asdict(self)
        out["sampler"] = self.sampler.value
        out["bound"] = None if self.bound is None else self.bound.to_dict()
        out["mismatches"] = [m.to_dict() for m in self.mismatches]
        if out["epsilon_claimed"] is not None and not math.isfinite(out["epsilon_claimed"]):
            out["epsilon_claimed"] = None
        return out


# --------------------------------------------------------------------------- reading the loader

def _sampler_of(loader: Any) -> tuple[SamplerKind, int, int | None, bool | None, Any]:
    """``(kind, N, B, drop_last, inner sampler)`` read off a ``DataLoader``."""
    from opacus.utils.uniform_sampler import (
        DistributedUniformWithReplacementSampler,
        UniformWithReplacementSampler,
    )
    from torch.utils import data

    dataset = getattr(loader, "dataset", None)
    if dataset is None or not isinstance(loader, data.DataLoader):
        raise ValueError(f"data_loader must be a torch.utils.data.DataLoader; got "
                         f"{type(loader).__name__}")
    if isinstance(dataset, data.IterableDataset):
        raise ValueError("data_loader must be over a map-style dataset: Opacus cannot sample an "
                         f"IterableDataset ({type(dataset).__name__}) record by record, and no "
                         "accountant covers its batches")
    n = len(dataset)
    batches = loader.batch_sampler
    poisson = UniformWithReplacementSampler | DistributedUniformWithReplacementSampler
    if isinstance(batches, poisson):
        return SamplerKind.POISSON, n, None, None, batches
    if not isinstance(batches, data.BatchSampler):
        return SamplerKind.OTHER, n, None, None, batches
    inner = batches.sampler
    b, drop = int(batches.batch_size), bool(batches.drop_last)
    if isinstance(inner, data.SequentialSampler):
        return SamplerKind.SEQUENTIAL, n, b, drop, inner
    if isinstance(inner, data.SubsetRandomSampler):
        return SamplerKind.SHUFFLE, len(inner.indices), b, drop, inner
    if isinstance(inner, data.RandomSampler):
        kind = SamplerKind.WEIGHTED if inner.replacement else SamplerKind.SHUFFLE
        return kind, n, b, drop, inner
    if isinstance(inner, data.WeightedRandomSampler) and inner.replacement:
        return SamplerKind.WEIGHTED, n, b, drop, inner
    return SamplerKind.OTHER, n, b, drop, inner


def _max_share(inner: Any, n: int) -> float:
    """The largest draw probability of a with-replacement sampler (uniform: 1 / N)."""
    weights = getattr(inner, "weights", None)
    if weights is None:
        return 1.0 / n
    total = float(weights.sum())
    return float(weights.max()) / total


def _steps(n: int, b: int, drop_last: bool) -> int:
    return n // b if drop_last else -(-n // b)


def _normaliser_neighbours(n: int, b: int | None, q: float) -> dict[str, list[float]] | None:
    """Opacus's (``int(N q)``, q) at N - 1, N, N + 1.

    q = 1 / ceil(N / B) needs the loader's B; without it (a ``DPDataLoader`` whose original
    loader is unknown) q is taken as fixed and only the normaliser is followed.
    """
    if n < 2:
        return None
    out = {}
    for name, size in (("N-1", n - 1), ("N", n), ("N+1", n + 1)):
        rate = q if b is None else 1.0 / -(-size // b)
        out[name] = [float(int(size * rate)), rate]
    return out


def _opacus_epsilon(engine: Any, sigma: float, q: float, steps: int, delta: float) -> float | None:
    """What a fresh accountant of the engine's kind reports for ``steps`` steps at (sigma, q)."""
    accountant = getattr(engine, "accountant", None)
    if accountant is None or not hasattr(accountant, "history"):
        return None
    fresh = type(accountant)()
    fresh.history = [(sigma, q, steps)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return float(fresh.get_epsilon(delta))
        except (ArithmeticError, MemoryError, ValueError):  # Opacus fails at extreme noise
            return None


# --------------------------------------------------------------------------- the check

def check_sampler(data_loader: Any, optimizer: Any = None, privacy_engine: Any = None, *,
                  original_loader: Any = None, epochs: int | None = None,
                  delta: float = 1e-5) -> SamplerReport:
    """Read the loader, optimizer and engine; say which sampling runs and which accountant fits.

    Args:
        data_loader: The loader the training loop iterates (what ``make_private`` returned).
        optimizer: Opacus's ``DPOptimizer`` (for sigma and the normaliser), or ``None``.
        privacy_engine: The ``PrivacyEngine`` (for its accountant), or ``None``.
        original_loader: The loader passed to ``make_private``, when known: it reveals a
            ``WeightedRandomSampler`` that Opacus replaced, and the batch size B behind q.
        epochs: Planned epochs (for the epsilons), or ``None``.
        delta: The delta of the epsilons, in (0, 1).

    Returns:
        The :class:`SamplerReport`; its ``mismatches`` are empty for a correct Poisson set-up.

    Raises:
        ValueError: For a loader that is not a map-style ``DataLoader``, or bad ``epochs`` /
            ``delta`` (before anything is computed).
    """
    delta = _validate.check_delta(delta, allow_zero=False)
    if epochs is not None:
        epochs = _validate.check_int("epochs", epochs, minimum=1)
    kind, n, b, drop_last, inner = _sampler_of(data_loader)
    t = len(data_loader)
    if t < 1:
        raise ValueError(f"data_loader has no batches (len {t}): nothing to train on")
    q = float(inner.sample_rate) if kind is SamplerKind.POISSON else 1.0 / t
    sigma = None if optimizer is None else float(optimizer.noise_multiplier)
    normaliser = None if optimizer is None else getattr(optimizer, "expected_batch_size", None)
    normaliser = None if normaliser is None else float(normaliser)
    from_n = None if normaliser is None else normaliser == float(int(n * q))
    original_b = b
    original_kind = None
    if original_loader is not None:
        original_kind, _, original_b, _, original_inner = _sampler_of(original_loader)
    neighbours = _normaliser_neighbours(n, original_b, q)
    accountant = None
    if privacy_engine is not None and getattr(privacy_engine, "accountant", None) is not None:
        accountant = str(privacy_engine.accountant.mechanism())
    steps = None if epochs is None else epochs * t
    claimed = None
    if sigma is not None and steps is not None and privacy_engine is not None:
        claimed = _opacus_epsilon(privacy_engine, sigma, q, steps, delta)
    bound = None
    sampling = kind.sampling
    schedule = schedule_for(n, b if b is not None else original_b, t)
    if sampling is not None and sigma is not None and epochs is not None and schedule:
        bound = sampling_epsilon(schedule, sampling=sampling, noise_multiplier=sigma,
                                 epochs=epochs, delta=delta)
    mismatches = _mismatches(kind, original_kind, n, b, drop_last, t, q, sigma, epochs, delta,
                             bound, claimed, neighbours, normaliser,
                             inner if original_loader is None else original_inner,
                             original_b)
    matching = {SamplerKind.POISSON: "Poisson (Opacus's RDP / PRV / GDP accountants)",
                SamplerKind.SHUFFLE: "none with amplification: the no-amplification bound "
                                     "(dpkd budget dp-sgd --sampling shuffle)",
                SamplerKind.SEQUENTIAL: "the Gaussian composition over epochs (dpkd budget "
                                        "dp-sgd --sampling sequential)",
                SamplerKind.WEIGHTED: "a mixture-of-Gaussians PLD under public weights",
                SamplerKind.OTHER: "none known"}[kind]
    return SamplerReport(sampler=kind, dataset_size=n, batch_size=b, drop_last=drop_last,
                         steps_per_epoch=t, sample_rate=q, expected_batch_size=normaliser,
                         normaliser_from_n=from_n, normaliser_neighbours=neighbours,
                         accountant=accountant, matching_accountant=matching,
                         noise_multiplier=sigma, epochs=epochs, delta=delta,
                         epsilon_claimed=claimed, bound=bound, mismatches=tuple(mismatches))


def schedule_for(n: int, b: int | None, t: int) -> DpSgdSchedule | None:
    """A schedule of N records with ``t`` steps per epoch, as the loader runs them.

    With the batch size B known, ``DpSgdSchedule(N, B)``; without it (a ``DPDataLoader``),
    ``B = ceil(N / t)``, whose schedule has ``t`` steps per epoch in all but rare cases.
    ``None`` when the schedule's steps per epoch differ from ``t`` (``drop_last``, say).
    """
    b = -(-n // t) if b is None else b
    if not 1 <= b <= n:
        return None
    schedule = DpSgdSchedule(dataset_size=n, batch_size=b)
    return schedule if schedule.steps_per_epoch == t else None


def _fmt(value: float | None) -> str:
    return "(pass epochs for it)" if value is None else f"{value:.4g}"


def _mismatches(kind: SamplerKind, original: SamplerKind | None, n: int, b: int | None,
                drop_last: bool | None, t: int, q: float, sigma: float | None,
                epochs: int | None, delta: float, bound: SamplingBound | None,
                claimed: float | None, neighbours: dict[str, list[float]] | None,
                normaliser: float | None, inner: Any, original_b: int | None) -> list[Mismatch]:
    out = []
    claim = f"the accountant's epsilon {_fmt(claimed)}" if claimed is not None else \
        "the accountant's epsilon"
    runs = "" if epochs is None else f" over {epochs} epochs"
    if kind in (SamplerKind.SHUFFLE, SamplerKind.SEQUENTIAL):
        what = ("shuffled" if kind is SamplerKind.SHUFFLE else "sequential (the same every "
                "epoch)")
        lower = ("" if bound is None or bound.epsilon_lower is None else
                 f"; no claim below {bound.epsilon_lower:.4g} holds (lower bound, Chua et al. "
                 "2024 construction)")
        tight = "" if bound is None or bound.tight else " (only a loose bound is known)"
        out.append(Mismatch(
            kind=(MismatchKind.SHUFFLED_AS_POISSON if kind is SamplerKind.SHUFFLE
                  else MismatchKind.SEQUENTIAL_AS_POISSON),
            message=(f"the loader draws {what} fixed-size batches of {b} "
                     f"(drop_last={drop_last}; {t} steps per epoch), but the accountant "
                     f"assumes Poisson sampling at q = {q:.6g}: {claim} does not hold for "
                     f"this training. What runs{runs} is at most epsilon "
                     f"{_fmt(None if bound is None else bound.epsilon)} at delta {delta:g} "
                     f"(zero-out neighbours){tight}{lower}. Fix: make_private(..., "
                     "poisson_sampling=True) (the default), or report this bound."),
            epsilon_runs=None if bound is None else bound.epsilon,
            relation=None if bound is None else bound.relation.value))
    elif kind is SamplerKind.WEIGHTED:
        share = _max_share(inner, n)
        eps = None
        if sigma is not None and epochs is not None and b is not None:
            eps = with_replacement_epsilon(sigma, b, share, epochs * t, delta)
        out.append(Mismatch(
            kind=MismatchKind.WEIGHTED_AS_POISSON,
            message=(f"the loader draws {b} records per step with replacement from weights "
                     f"(largest share {share:.3g}, uniform would be {1 / n:.3g}), but the "
                     f"accountant assumes Poisson sampling at q = {q:.6g}: {claim} does not "
                     f"hold. What runs{runs} is at most epsilon {_fmt(eps)} at delta "
                     f"{delta:g} (zero-out neighbours, the weights taken as public constants; "
                     "weights computed from the private data are a release no bound here "
                     "covers). Fix: Poisson sampling (poisson_sampling=True) over the records "
                     "you want to weight, or report this bound."),
            epsilon_runs=eps, relation="zero-out"))
    elif kind is SamplerKind.OTHER:
        out.append(Mismatch(
            kind=MismatchKind.UNKNOWN_SAMPLER,
            message=(f"the loader's batches come from {type(inner).__name__}, which no "
                     f"accountant here matches; the accountant assumes Poisson sampling at "
                     f"q = {q:.6g}, so {claim} is unsupported. Use Opacus's DPDataLoader "
                     "(make_private(..., poisson_sampling=True)).")))
    if kind is SamplerKind.POISSON and original is SamplerKind.WEIGHTED:
        intended = None if original_b is None else original_b / n
        eps_intended = None
        if intended is not None and sigma is not None and epochs is not None:
            eps_intended = float(dp_sgd_epsilon(
                DpSgdSchedule(dataset_size=n, batch_size=original_b), noise_multiplier=sigma,
                epochs=epochs, delta=delta, accountant=DpSgdAccountant.PLD))
        ratio = "" if intended is None else f" ({q / intended:,.0f} x B/N = {intended:.3g})"
        out.append(Mismatch(
            kind=MismatchKind.WEIGHTED_SAMPLER_REPLACED,
            message=(f"make_private replaced the loader's WeightedRandomSampler by Poisson "
                     f"sampling over all {n} records at q = 1/len(loader) = {q:.6g}"
                     f"{ratio}: batches of about {n * q:,.0f} records instead of {original_b}, "
                     f"and the weights are ignored (Opacus issue #813). The accountant matches "
                     f"what runs ({claim}), but it is not the training the loader describes; "
                     f"at q = B/N it would be {_fmt(eps_intended)}. Fix: pass a "
                     "DataLoader(dataset, batch_size=B) (no sampler) to make_private."),
            epsilon_runs=claimed, relation="add/remove-one"))
    if kind is SamplerKind.POISSON and neighbours is not None:
        values = {tuple(v) for v in neighbours.values()}
        if len(values) > 1:
            eps_replace = None
            if sigma is not None and epochs is not None:
                # dp_accounting's PLD accounts Poisson subsampling under replace-one (the
                # package's own PLD accountant refuses it)
                from dp_accounting import NeighboringRelation
                from dp_accounting.pld import pld_privacy_accountant

                acc = pld_privacy_accountant.PLDAccountant(NeighboringRelation.REPLACE_ONE)
                acc.compose(_dp.PoissonSampledDpEvent(q, _dp.GaussianDpEvent(sigma)), epochs * t)
                eps_replace = float(acc.get_epsilon(delta))
            shown = ", ".join(f"{k}: normaliser {v[0]:g}, q {v[1]:.6g}"
                              for k, v in neighbours.items())
            out.append(Mismatch(
                kind=MismatchKind.NORMALISER_DEPENDS_ON_N,
                message=(f"the sampling rate and the normaliser (expected_batch_size "
                         f"{_fmt(normaliser)}) are computed from the private dataset size and "
                         f"change between neighbouring sizes ({shown}): adding or removing one "
                         f"record changes the scale of every update, so the add/remove-one "
                         f"claim does not hold for this dataset (Opacus issues #571, #819). "
                         f"Under replace-one neighbours (N fixed and public) what runs{runs} is "
                         f"at most epsilon {_fmt(eps_replace)} at delta {delta:g}. Fix: a "
                         "dataset size that is not a multiple of the batch size (nor one more), "
                         "or a normaliser and q fixed from public numbers."),
                epsilon_runs=eps_replace, relation="replace-one"))
    return out
