"""DP-SGD plans as Opacus users write them: dataset size, batch size, epochs, noise multiplier.

A DP-SGD run with Poisson sampling is ``steps`` compositions of the Poisson-subsampled Gaussian
mechanism (Abadi et al. CCS 2016; Mironov-Talwar-Zhang 2019 for its RDP, Zhu-Dong-Wang 2022 for
its PLD), under the add/remove-one neighbouring relation (Opacus's convention): the event is
``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), steps)``.

The schedule follows Opacus exactly, so that a plan here and ``PrivacyEngine.make_private`` /
``make_private_with_epsilon`` on a ``DataLoader(batch_size=B)`` over N records account for the
same run: Opacus samples each record with probability ``q = 1 / len(data_loader)`` and runs
``len(data_loader)`` steps per epoch, where ``len(data_loader) = ceil(N / B)`` (the loader's
``drop_last=False`` default). When B divides N this is the usual q = B / N. (dp_accounting's
``compute_dp_sgd_privacy`` uses q = B / N and ceil(epochs N / B) steps instead; the two agree
when B divides N.)

Functions here evaluate or invert a plan with the package's RDP or PLD accountant; the
inverses never exceed the target (see :mod:`dpkd_audit.accountants.calibration`).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit.accountants import calibration
from dpkd_audit.accountants.base import (
    Accountant,
    Epsilon,
    NeighboringRelation,
    UnsupportedEventError,
)

__all__ = [
    "DpSgdAccountant",
    "DpSgdSchedule",
    "calibrate_dp_sgd_noise",
    "dp_sgd_epsilon",
    "max_dp_sgd_epochs",
    "poisson_epsilon",
]


class DpSgdAccountant(enum.Enum):
    """Which accountant evaluates a DP-SGD plan (both under add/remove-one neighbours)."""

    RDP = "rdp"
    PLD = "pld"

    def make(self) -> Accountant:
        """A fresh accountant of this kind under ``ADD_OR_REMOVE_ONE``."""
        from dpkd_audit.accountants.pld.accountant import PLDAccountant
        from dpkd_audit.accountants.rdp.accountant import RDPAccountant

        relation = NeighboringRelation.ADD_OR_REMOVE_ONE
        if self is DpSgdAccountant.RDP:
            return RDPAccountant(neighboring_relation=relation)
        return PLDAccountant(neighboring_relation=relation)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DpSgdSchedule:
    """The sampling schedule of a DP-SGD run (Opacus's convention; see the module docstring).

    Attributes:
        dataset_size: Number of private records N (an integer >= 1).
        batch_size: Expected batch size B (an integer in [1, N]).
    """

    dataset_size: int
    batch_size: int

    def __post_init__(self) -> None:
        _validate.check_int("dataset_size", self.dataset_size, minimum=1)
        _validate.check_int("batch_size", self.batch_size, minimum=1,
                            maximum=self.dataset_size)

    @property
    def steps_per_epoch(self) -> int:
        """``len(data_loader)`` = ceil(N / B)."""
        return -(-self.dataset_size // self.batch_size)

    @property
    def sampling_probability(self) -> float:
        """Poisson rate q = 1 / steps_per_epoch (= B / N when B divides N)."""
        return 1.0 / self.steps_per_epoch

    def steps(self, epochs: int) -> int:
        """Number of noisy steps in ``epochs`` epochs."""
        epochs = _validate.check_int("epochs", epochs, minimum=1)
        return epochs * self.steps_per_epoch

    def step_event(self, noise_multiplier: float) -> _dp.DpEvent:
        """The event of one step: Poisson sampling at q, then the Gaussian mechanism."""
        noise_multiplier = _validate.check_positive("noise_multiplier", noise_multiplier)
        return _dp.PoissonSampledDpEvent(self.sampling_probability,
                                         _dp.GaussianDpEvent(noise_multiplier))

    def event(self, noise_multiplier: float, epochs: int) -> _dp.DpEvent:
        """The whole run: ``steps(epochs)`` compositions of :meth:`step_event`."""
        return _dp.SelfComposedDpEvent(self.step_event(noise_multiplier), self.steps(epochs))


def _check_accountant(accountant: DpSgdAccountant) -> DpSgdAccountant:
    if not isinstance(accountant, DpSgdAccountant):
        raise ValueError("accountant must be a DpSgdAccountant (RDP or PLD); got "
                         f"{accountant!r}")
    return accountant


def dp_sgd_epsilon(schedule: DpSgdSchedule, *, noise_multiplier: float, epochs: int,
                   delta: float, accountant: DpSgdAccountant = DpSgdAccountant.RDP) -> Epsilon:
    """Epsilon of a DP-SGD run at ``delta``.

    Args:
        schedule: Dataset and batch size.
        noise_multiplier: sigma = noise std / clipping norm (> 0).
        epochs: Number of epochs (an integer >= 1).
        delta: Target delta, in (0, 1).
        accountant: RDP (default, Opacus's classic accountant) or PLD.

    Returns:
        The epsilon, labelled with the accountant's method (an upper bound).
    """
    delta = _validate.check_delta(delta, allow_zero=False)
    event = schedule.event(noise_multiplier, epochs)
    return _check_accountant(accountant).make().compose(event).get_epsilon(delta)


def poisson_epsilon(sampling_probability: float, noise_multiplier: float, steps: int,
                    delta: float) -> Epsilon:
    """Epsilon at ``delta`` of ``steps`` Poisson-subsampled Gaussian steps (add/remove-one).

    The smaller of the PLD and the RDP figures (both upper bounds; PLD is the tighter one
    except at deltas below its truncated tail mass, where it returns inf, and at noise below
    0.01, which it refuses; RDP answers there). For a rate and a step count read off a run
    rather than planned from N and B.
    """
    q = _validate.check_probability("sampling_probability", sampling_probability,
                                    open_low=True)
    sigma = _validate.check_positive("noise_multiplier", noise_multiplier)
    steps = _validate.check_int("steps", steps, minimum=1)
    delta = _validate.check_delta(delta, allow_zero=False)
    event = _dp.PoissonSampledDpEvent(q, _dp.GaussianDpEvent(sigma))
    figures = []
    for kind in DpSgdAccountant:
        try:
            figures.append(kind.make().compose(event, steps).get_epsilon(delta))
        except UnsupportedEventError:  # PLD refuses sigma < 0.01 (too costly); RDP answers
            continue
    return min(figures, key=float)


def calibrate_dp_sgd_noise(schedule: DpSgdSchedule, *, epochs: int, target_epsilon: float,
                           delta: float,
                           accountant: DpSgdAccountant = DpSgdAccountant.RDP,
                           rtol: float = 1e-6, also: Sequence[_dp.DpEvent] = ()) -> float:
    """Smallest noise multiplier (to ``rtol``) whose run is ``target_epsilon``-DP at ``delta``.

    Args:
        schedule: Dataset and batch size.
        epochs: Number of epochs (an integer >= 1).
        target_epsilon: The budget (> 0).
        delta: Target delta, in (0, 1).
        accountant: RDP (default) or PLD.
        rtol: Relative width of the final bracket.
        also: Other releases on the same data that the budget must cover too (composed with
            the DP-SGD run, e.g. DGD's label queries or a statistics release); their cost is
            fixed, the DP-SGD noise takes what is left.

    Returns:
        sigma with ``dp_sgd_epsilon(schedule, noise_multiplier=sigma, ...) <= target_epsilon``.

    Note:
        Opacus's ``RDPAccountant`` reads such a sigma slightly *above* the target: it
        evaluates RDP only at its fixed orders (1.1 to 10.9 by 0.1, then 12 to 63), while this
        accountant also optimises the order between grid points, so its epsilon for the same
        run is lower. Measured (opacus 1.6, delta 1e-5, the same sampling rate, 1 / steps per
        epoch): target 3 at N = 60,000, B = 256, 15 epochs -> sigma 0.773399, Opacus 3.000198
        (6.6e-5 relative); target 9 at N = 1,200, B = 64, 10 epochs -> Opacus 9.00385
        (4.3e-4). Both are valid upper bounds. For a sigma that meets the target under
        Opacus's figure too, calibrate to ``target_epsilon * (1 - 1e-3)`` or use Opacus's own
        ``get_noise_multiplier`` (its sigma is at least this one).

    Raises:
        calibration.CalibrationError: If no sigma up to 1e4 meets the target.
    """
    target_epsilon = _validate.check_epsilon(target_epsilon, "target_epsilon")
    delta = _validate.check_delta(delta, allow_zero=False)
    steps = schedule.steps(epochs)
    accountant = _check_accountant(accountant)

    also = tuple(also)
    base = accountant.make()
    for event in also:  # refuses an event the accountant cannot handle, before the search
        base.compose(event)

    def build(sigma: float) -> Accountant:
        composed = accountant.make()
        for event in also:
            composed.compose(event)
        return composed.compose(schedule.step_event(sigma), steps)

    return calibration.calibrate_noise(build, target_epsilon=target_epsilon, target_delta=delta,
                                       lower=1e-2, upper=1e4, rtol=rtol)


def max_dp_sgd_epochs(schedule: DpSgdSchedule, *, noise_multiplier: float,
                      target_epsilon: float, delta: float,
                      accountant: DpSgdAccountant = DpSgdAccountant.RDP,
                      max_epochs: int = 10**6) -> int:
    """Largest number of whole epochs (0 if none) that fits ``target_epsilon`` at ``delta``."""
    target_epsilon = _validate.check_epsilon(target_epsilon, "target_epsilon")
    delta = _validate.check_delta(delta, allow_zero=False)
    event = schedule.step_event(noise_multiplier)
    accountant = _check_accountant(accountant)

    def build(epochs: int) -> Accountant:
        return accountant.make().compose(event, epochs * schedule.steps_per_epoch)

    return calibration.max_queries(build, target_epsilon=target_epsilon, target_delta=delta,
                                   upper=max_epochs)
