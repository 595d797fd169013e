"""Statistical helpers shared by the distribution tests."""

from __future__ import annotations

import numpy as np
from scipy import stats


def chi_square_pvalue(samples: np.ndarray, pmf: np.ndarray) -> float:
    """Goodness of fit of integer samples to ``pmf`` (cells with zero probability must be empty)."""
    counts = np.bincount(samples, minlength=pmf.size)
    assert counts.size == pmf.size
    support = pmf > 0
    assert counts[~support].sum() == 0, "sample outside the support"
    expected = pmf[support] / pmf[support].sum() * samples.size
    assert expected.min() >= 5, "test design: every cell needs >= 5 expected counts"
    return float(stats.chisquare(counts[support], expected).pvalue)
