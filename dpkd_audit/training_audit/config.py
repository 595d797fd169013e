"""How to audit a user's DP-SGD training (:class:`AuditConfig`)."""

from __future__ import annotations

import dataclasses

from dpkd_audit import _validate
from dpkd_audit.audit.training import MIN_CANARIES, resolve_guesses
from dpkd_audit.training_audit.canaries import CanaryPlacement

__all__ = ["IN_ONLY_FROM", "AuditConfig"]

#: Canaries from which the default guesses are "in" only (1% of the canaries): with many
#: canaries the "in" guesses on the top scores are far surer than "out" guesses (the pipelines'
#: 100,000-canary audits: 991 of 1,000 right).
IN_ONLY_FROM = 10_000


@dataclasses.dataclass(frozen=True, kw_only=True)
class AuditConfig:
    """How to audit a user's DP-SGD training.

    Attributes:
        canaries: m, the number of gradient canaries (>= 2).
        seed: Seed of the canaries' inclusion and participation (their own generator).
        guesses: "In" guesses on the highest scores (with ``guesses_out``), or the guesses on
            each side (alone). Default: 1% of the canaries "in" only from 10,000 canaries, else
            5% on each side (:func:`~dpkd_audit.audit.training.default_guesses`). Fixed before
            training, as the bound requires.
        guesses_out: "Out" guesses on the lowest scores.
        confidence: Confidence of the bounds, in (0, 1).
        delta: The delta of every epsilon, in (0, 1).
        epochs: Planned epochs, for the sampler check's epsilons before training (``None``:
            the check names the mismatches without their epsilon).
        strict: Refuse (:class:`~dpkd_audit.training_audit.sampler_check.
            SamplerMismatchError`) instead of warning when the accountant does not match the
            sampler.
        placement: Where the canaries' coordinates are: ``dedicated`` (default: their own
            tensor) or ``model`` (coordinates of the model's own parameters, where real
            gradients add to the readings; needs at least ``canaries`` parameters).
        crowd: With fixed-size batches (shuffled or sequential), place the worst-case crowd of
            Chua et al. 2024 on the canaries' coordinates (see
            :mod:`~dpkd_audit.training_audit.participation`); ``False``: canaries alone.
        name: What was trained (the record's ``pipeline``).
        dataset: The data it was trained on (the record's ``dataset``).
    """

    canaries: int = 100_000
    seed: int = 0
    guesses: int | None = None
    guesses_out: int | None = None
    confidence: float = 0.95
    delta: float = 1e-5
    epochs: int | None = None
    strict: bool = False
    placement: CanaryPlacement = CanaryPlacement.DEDICATED
    crowd: bool = True
    name: str = "dp-sgd training"
    dataset: str = "unnamed"

    def __post_init__(self) -> None:
        _validate.check_int("canaries", self.canaries, minimum=MIN_CANARIES)
        _validate.check_int("seed", self.seed, minimum=0)
        _validate.check_probability("confidence", self.confidence, open_low=True,
                                    open_high=True)
        _validate.check_delta(self.delta, allow_zero=False)
        if self.epochs is not None:
            _validate.check_int("epochs", self.epochs, minimum=1)
        try:
            object.__setattr__(self, "placement", CanaryPlacement(self.placement))
        except ValueError:
            allowed = ", ".join(p.value for p in CanaryPlacement)
            raise ValueError(f"placement must be one of {allowed}; got "
                             f"{self.placement!r}") from None
        for name in ("strict", "crowd"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False; got {getattr(self, name)!r}")
        for name in ("name", "dataset"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string; got "
                                 f"{getattr(self, name)!r}")
        self.guess_counts()  # refuses guesses that do not fit, before any work

    def guess_counts(self) -> tuple[int, int]:
        """``(guesses_in, guesses_out)``, checked against the canaries."""
        if self.guesses is None and self.guesses_out is None and self.canaries >= IN_ONLY_FROM:
            return self.canaries // 100, 0
        return resolve_guesses(self.canaries, self.guesses, self.guesses_out)
