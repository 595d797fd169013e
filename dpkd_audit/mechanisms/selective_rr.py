"""DP-DFD's selective randomized response: label randomization restricted by the student's prior.

Zhu et al., "Private knowledge transfer via data-free distillation" (DP-DFD), Algorithm 1,
function R(y_s, y_t, t). The teacher's label of one synthetic example is randomized over a
candidate set I chosen from the *student's* current prediction y_s, which is public (the student
has only ever seen previously released labels and synthetic data):

1. I = {classes c : y_s[c] > t}; if |I| < 2, I = the student's top two classes (line 5-7).
   The threshold defaults to t = 1/(2 k) (**Decision** in NOTES.md; the paper leaves t free).
2. If the teacher label a = argmax(y_t) is in I: return a with probability
   e^eps / (e^eps + |I| - 1), and every other member of I with probability
   1 / (e^eps + |I| - 1) (lines 8-9: k-ary randomized response over I, Warner 1965).
3. Otherwise return a uniform member of I (lines 10-11).

Ties among the student's top classes are broken towards the smaller index (a deterministic
function of the public y_s, so privacy is unaffected).

**Privacy unit.** The guarantee protects the teacher label of one synthetic example (label DP, as
the paper argues); it is *not* a record-level guarantee for the teacher's training data: the
teacher (and the generator fitted to it) saw the private data without noise, and Q labels from
the same teacher compose to Q * eps (NOTES.md, "DP-DFD").
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit.events import SelectiveRandomizedResponseDpEvent
from dpkd_audit.mechanisms.base import Mechanism, Norm, Sensitivity

if TYPE_CHECKING:  # pragma: no cover
    from dpkd_audit.ledger import Ledger

__all__ = ["SelectiveRandomizedResponse", "check_probability_vectors"]

#: Tolerance on the sum of a probability vector.
_SUM_TOLERANCE = 1e-6


def check_probability_vectors(probs: Any, num_classes: int, *, name: str = "student_probs",
                              ndim: int = 1) -> np.ndarray:
    """Validate probability vectors: finite, non-negative, summing to 1 within 1e-6.

    Args:
        probs: One vector (``ndim=1``, shape ``(num_classes,)``) or one per row (``ndim=2``,
            shape ``(m, num_classes)``).
        num_classes: Number of classes k.
        name: Parameter name used in error messages.
        ndim: 1 or 2.

    Returns:
        The vectors as a float64 array.
    """
    shape_text = "(num_classes,)" if ndim == 1 else "(m, num_classes)"
    # Real numbers of a numeric dtype only (no strings, booleans, complex numbers, objects).
    arr = _validate.as_real_array(probs, name)
    if arr.ndim != ndim or arr.shape[-1] != num_classes or (ndim == 2 and arr.shape[0] < 1):
        raise ValueError(f"{name} must have shape {shape_text} with num_classes={num_classes}"
                         f"{' and m >= 1' if ndim == 2 else ''}; got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    if np.any(arr < 0):
        raise ValueError(f"{name} must be non-negative; got minimum {arr.min()!r}")
    sums = arr.sum(axis=-1)
    worst = float(np.max(np.abs(sums - 1.0)))
    if worst > _SUM_TOLERANCE:
        raise ValueError(f"{name} must sum to 1 (within {_SUM_TOLERANCE:g}) along the class "
                         f"axis; got a sum off by {worst!r}")
    return arr


def _check_labels(labels: Any, num_classes: int, m: int) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.dtype.kind not in "iu" or arr.shape != (m,):
        raise ValueError(f"teacher_labels must be an integer array of shape (m,) = ({m},) "
                         f"matching student_probs; got dtype {arr.dtype}, shape {arr.shape}")
    if np.any(arr < 0) or np.any(arr >= num_classes):
        raise ValueError(f"teacher_labels must be integers in [0, {num_classes - 1}]; got "
                         f"values in [{arr.min()}, {arr.max()}]")
    return arr.astype(np.int64)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SelectiveRandomizedResponse(Mechanism):
    """DP-DFD selective randomized response (Algorithm 1): epsilon-DP per released label.

    Input: ``(teacher_label, student_probs)``, where ``teacher_label`` = argmax of the teacher's
    output (an int in [0, k)) is private and ``student_probs`` (a probability vector of length k)
    is public. Output: one label (int) in I.

    Proof of epsilon-DP with respect to the teacher label (neighbours: two teacher labels a != b
    with the same public ``student_probs``, hence the same I, |I| = m >= 2). Let
    E = e^eps + m - 1. Every output lies in I, for both labels.

    - a, b both in I: P[o | a] is e^eps/E (o = a) or 1/E (o != a), likewise for b, so
      P[o | a] / P[o | b] is in {e^eps, 1, e^-eps}: bounded by e^eps, with equality at o = a.
    - a in I, b not in I: P[o | b] = 1/m. P[o | a]/P[o | b] <= m e^eps / E <= e^eps since
      m <= E (as e^eps >= 1); and P[o | b]/P[o | a] <= E/m <= e^eps since
      e^eps + m - 1 <= m e^eps iff (m - 1)(e^eps - 1) >= 0.
    - a, b both outside I: both outputs are uniform on I; ratio 1.

    So the max ratio is <= e^eps in every case (Dwork-Roth 2014, Definition 2.4), and = e^eps
    exactly when both labels are in I (what :meth:`neighbours` returns).

    Floating point (documented and verified): the true label is kept when
    ``rng.random() < P_keep`` with P_keep a multiple of 2^-53 rounded *down* from
    e^eps / (e^eps + m - 1) (by at most 2^-49 in all, float error included), so P_keep is
    exactly realised and never above the ideal; every other choice is an exact uniform integer
    draw. Then P_keep / P_other <= e^eps, P_keep m <= e^eps and 1/(m P_other) <= e^eps hold
    for every eps (P_other >= the ideal one, also for huge eps where the ideal keep rounds to
    1), and the three other ratios are <= 1 as long as the ideal keep - other,
    (e^eps - 1)/(e^eps + m - 1) >= 2^-48 (twice the rounding), which holds for all m <= k when
    it holds at m = k: the constructor requires it (eps >= about 2^-48 k).

    Attributes:
        epsilon: Claimed epsilon of one released label (a normal double, at least about
            2^-48 num_classes).
        num_classes: Number of classes k (2 <= k <= 10^8).
        threshold: The threshold t of Algorithm 1, in (0, 1); default 1/(2 k).
    """

    reference: ClassVar[str] = "Zhu et al. (DP-DFD), Algorithm 1; Warner 1965"

    epsilon: float
    num_classes: int
    threshold: float | None = None

    def __post_init__(self) -> None:
        eps = _validate.check_epsilon_range(self.epsilon)
        object.__setattr__(self, "epsilon", eps)
        k = _validate.check_size("num_classes", self.num_classes, minimum=2)
        object.__setattr__(self, "num_classes", k)
        gap = math.expm1(eps) / (math.expm1(eps) + k) if eps < 700 else 1.0
        if gap < 2.0**-47:  # 2^-48 with a factor 2 for the rounding of this test itself
            raise ValueError(
                f"epsilon must be >= about {2.0**-47 * k:.3g} for selective randomized response "
                f"with num_classes={k} (below, the 2^-53 resolution of the sampler's coin "
                f"cannot realise the claim); got {eps!r}")
        t = 1.0 / (2 * k) if self.threshold is None else self.threshold
        object.__setattr__(self, "threshold",
                           _validate.check_probability("threshold", t, open_low=True,
                                                       open_high=True))

    @property
    def sensitivity(self) -> Sensitivity:
        return Sensitivity(value=1, norm=Norm.RECORDS)

    @property
    def event(self) -> _dp.DpEvent:
        return SelectiveRandomizedResponseDpEvent(epsilon=self.epsilon,
                                                  num_classes=self.num_classes)

    # ------------------------------------------------------------------ the candidate set I
    def selected_classes(self, student_probs: Any) -> np.ndarray:
        """The candidate set I as a boolean mask (Algorithm 1, lines 5-7).

        Args:
            student_probs: One probability vector ``(k,)`` or one per row ``(m, k)``.

        Returns:
            A boolean array of the same shape; every row has at least two True entries.
        """
        arr = np.asarray(student_probs)
        probs = check_probability_vectors(student_probs, self.num_classes,
                                          ndim=2 if arr.ndim == 2 else 1)
        return self._selected(probs)

    def _selected(self, probs: np.ndarray) -> np.ndarray:
        mask = probs > self.threshold
        small = mask.sum(axis=-1) < 2
        if np.any(small):
            flat_probs = np.atleast_2d(probs)
            flat_mask = np.atleast_2d(mask).copy()
            rows = np.flatnonzero(np.atleast_1d(small))
            # Top two by probability; stable sort of -p breaks ties towards the smaller index.
            top2 = np.argsort(-flat_probs[rows], axis=1, kind="stable")[:, :2]
            flat_mask[rows] = False
            flat_mask[rows[:, None], top2] = True
            mask = flat_mask.reshape(mask.shape)
        return mask

    def _keep_probability(self, size: np.ndarray | int) -> np.ndarray | float:
        """e^eps / (e^eps + m - 1), written as 1 / (1 + (m - 1) e^-eps) (no overflow)."""
        return 1.0 / (1.0 + (np.asarray(size) - 1.0) * math.exp(-self.epsilon))

    def _keep_threshold(self, size: np.ndarray | int) -> np.ndarray:
        """The sampler's keep probability: a multiple of 2^-53 <= the ideal keep (see above).

        ``rng.random() < t`` has probability exactly t for t on the 2^-53 grid.
        """
        keep = np.asarray(self._keep_probability(size), dtype=np.float64) * (1.0 - 2.0**-50)
        return np.minimum(np.floor(keep * 2.0**53), 2.0**53 - 1.0) * 2.0**-53

    # ------------------------------------------------------------------ exact distribution
    def output_pmf(self, teacher_label: Any, student_probs: Any) -> np.ndarray:
        """The exact distribution of the released label (Algorithm 1, lines 8-11).

        Returns:
            A float array of length ``num_classes``: zero outside I.
        """
        label, probs = self._check_value((teacher_label, student_probs))
        mask = self._selected(probs)
        size = int(mask.sum())
        pmf = np.zeros(self.num_classes)
        if mask[label]:
            keep = float(self._keep_probability(size))
            other = math.exp(-self.epsilon) * keep  # 1 / (e^eps + m - 1)
            pmf[mask] = other
            pmf[label] = keep
        else:
            pmf[mask] = 1.0 / size
        return pmf

    def release_channel(self, student_probs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The law of each row's release given its teacher label, in compact form.

        For row i with candidate set I_i (mask), ``keep_i`` = e^eps / (e^eps + |I_i| - 1) and
        ``other_i`` = 1 / (e^eps + |I_i| - 1): a teacher label a in I_i is released as a with
        probability ``keep_i`` and as each other member of I_i with ``other_i``; a label outside
        I_i as each member with 1 / |I_i| (Algorithm 1, lines 8-11; :meth:`output_pmf` row by
        row). Everything here is a function of the public student probabilities, so a learner
        may use it to undo the label noise (forward correction, Patrini et al. CVPR 2017).

        Args:
            student_probs: ``(m, k)`` probability vectors (the ones the labels were drawn with).

        Returns:
            ``(mask, keep, other)``: bool ``(m, k)``, float64 ``(m,)`` and ``(m,)``.
        """
        probs = check_probability_vectors(student_probs, self.num_classes, ndim=2)
        mask = self._selected(probs)
        keep = np.asarray(self._keep_probability(mask.sum(axis=1)), dtype=np.float64)
        return mask, keep, keep * math.exp(-self.epsilon)

    # ------------------------------------------------------------------ mechanism contract
    def _check_value(self, value: Any) -> tuple[int, np.ndarray]:
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            raise ValueError("value must be a pair (teacher_label, student_probs); got "
                             f"{type(value).__name__}")
        label_in, probs_in = value
        if isinstance(label_in, np.ndarray) and label_in.ndim == 0:
            label_in = label_in.item()
        label = _validate.check_int("teacher_label", label_in, minimum=0,
                                    maximum=self.num_classes - 1)
        probs = check_probability_vectors(probs_in, self.num_classes)
        return label, probs

    def _sample(self, value: tuple[int, np.ndarray], n: int, rng: np.random.Generator,
                ) -> np.ndarray:
        label, probs = value
        members = np.flatnonzero(self._selected(probs))
        if label in members:
            others = members[members != label]
            keep = rng.random(n) < self._keep_threshold(members.size)
            pick = others[rng.integers(0, others.size, size=n)]
            return np.where(keep, label, pick).astype(np.int64)
        return members[rng.integers(0, members.size, size=n)].astype(np.int64)

    def randomize_batch(self, teacher_labels: Any, student_probs: Any, *,
                        rng: np.random.Generator, ledger: Ledger | None = None,
                        label: str | None = None) -> np.ndarray:
        """One independent release per row, vectorised (no Python loop over rows).

        The inputs are validated completely before anything is charged; with a ``ledger``,
        ``SelfComposedDpEvent(event, m)`` (one selective-RR release per row) is then charged,
        and nothing is drawn if the ledger refuses (``BudgetExceededError``), as in
        :meth:`release`.

        Args:
            teacher_labels: ``(m,)`` integer labels in [0, k).
            student_probs: ``(m, k)`` probability vectors (public).
            rng: Source of randomness.
            ledger: Charged with the ``m`` releases before any label is drawn.
            label: The charge's description (default: the mechanism's label and ``m``).

        Returns:
            ``(m,)`` int64 released labels.
        """
        rng = _validate.check_generator(rng)
        probs = check_probability_vectors(student_probs, self.num_classes, ndim=2)
        labels = _check_labels(teacher_labels, self.num_classes, probs.shape[0])
        if ledger is not None:
            ledger.charge(_dp.SelfComposedDpEvent(self.event, int(labels.size)),
                          label=label or f"{self.label} x {labels.size}")
        mask = self._selected(probs)
        m = labels.size
        rows = np.arange(m)
        size = mask.sum(axis=1)
        in_set = mask[rows, labels]
        keep = in_set & (rng.random(m) < self._keep_threshold(size))
        # Candidates when the label is not kept: I minus the label (label in I), else I.
        candidates = mask.copy()
        candidates[rows[in_set], labels[in_set]] = False
        count = candidates.sum(axis=1)  # m - 1 >= 1 or m >= 2
        rank = rng.integers(0, count)
        pick = np.argmax(np.cumsum(candidates, axis=1) > rank[:, None], axis=1)
        return np.where(keep, labels, pick).astype(np.int64)

    def neighbours(self) -> tuple[tuple[int, np.ndarray], tuple[int, np.ndarray]]:
        """Teacher labels 0 and 1 with student probs (1/2, 1/2, 0, ..., 0), so I = {0, 1}.

        Both labels are in I, where the ratio e^eps is attained (see the class docstring), and
        |I| = 2 makes the distinguishing output (label 0) as likely as possible:
        e^eps / (e^eps + 1) versus 1 / (e^eps + 1).
        """
        probs = np.zeros(self.num_classes)
        probs[:2] = 0.5
        return (0, probs), (1, probs.copy())
