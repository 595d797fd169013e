"""Features of vector and record outputs that keep their discrete part beside the continuous one.

An output such as ``(index, noisy value)``, or a vector holding ``NaN`` where a query got no
answer, mixes a discrete part (which index, which positions are answered) with a continuous one.
Hashing whole rows makes every outcome unique, and treating every column as a number hides the
discrete structure from a linear score. :class:`FeatureSpec` is fitted once on the selection
samples and then maps any batch to

- the raw columns (``NaN`` read as 0) and per-output summaries,
- a missing-value indicator for every column that holds ``NaN`` or infinities,
- a one-hot code of every column with few distinct values (a discrete column), and the products
  of those indicators with the continuous columns (so that a linear score can threshold the
  value *given* the index),
- for integer outputs over few levels, how many coordinates take each level (what a shuffled
  output carries; Balle-Bell-Gascon-Nissim, CRYPTO 2019, Section 2),

and gives the *discrete projection* of an output (its missing-value pattern and discrete
columns) as a key for the histogram attack. Every map is a fixed function of one output once
the spec is fitted (on the selection samples only), so events built on it are fixed events of
the output space, which the validity of the bound needs.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dpkd_audit.audit.outputs import OutputKind, Outputs, _row_hash

__all__ = ["FeatureSpec", "flat_columns"]

#: Above this many coordinates per output, only summary features are used.
MAX_RAW_FEATURES = 1024
#: Columns are inspected for a discrete part only up to this many coordinates per output.
MAX_INSPECTED_COLUMNS = 64
#: A column with at most this many distinct finite values (each seen 4 times on average) is
#: discrete.
MAX_DISCRETE_LEVELS = 16
#: Integer outputs over at most this many levels also get level-count features.
MAX_COUNT_LEVELS = 64
#: Most interaction features (discrete indicator x continuous column).
MAX_INTERACTIONS = 256


def flat_columns(outputs: Outputs) -> np.ndarray:
    """The outputs as a float64 matrix, one row per output (record fields side by side)."""
    data = outputs.data
    if outputs.kind is OutputKind.STRUCTURED:
        cols = [np.asarray(data[field]).reshape(len(data), -1).astype(np.float64)
                for field in data.dtype.names or ()]
        return np.concatenate(cols, axis=1)
    return data.reshape(len(data), -1).astype(np.float64)


@dataclasses.dataclass(frozen=True, eq=False)
class FeatureSpec:
    """Which features to build, fitted on the selection samples.

    Attributes:
        width: Coordinates per output.
        missing: Columns that held a non-finite value (NaN: no answer).
        discrete: ``(column, levels)`` of the columns with few distinct finite values.
        continuous: The other inspected columns.
        levels: Integer levels counted per output (``None``: none).
    """

    width: int
    missing: np.ndarray
    discrete: tuple[tuple[int, np.ndarray], ...]
    continuous: np.ndarray
    levels: np.ndarray | None

    @classmethod
    def fit(cls, *batches: Outputs) -> FeatureSpec:
        """Fit on selection batches (of one kind and shape)."""
        flats = [flat_columns(b) for b in batches]
        flat = np.concatenate(flats)
        width = flat.shape[1]
        finite = np.isfinite(flat)
        missing = np.flatnonzero(~finite.all(axis=0)) if width <= MAX_INSPECTED_COLUMNS \
            else np.array([], dtype=np.int64)
        discrete: list[tuple[int, np.ndarray]] = []
        continuous: list[int] = []
        if 1 < width <= MAX_INSPECTED_COLUMNS:
            for j in range(width):
                values = np.unique(flat[finite[:, j], j])
                # few values, each repeated (on average at least 4 times)
                if 0 < values.size <= min(MAX_DISCRETE_LEVELS, len(flat) // 4):
                    discrete.append((j, values))
                elif values.size:
                    continuous.append(j)
        levels = None
        first = batches[0]
        if first.kind is OutputKind.ARRAY and first.data.dtype.kind in "biu":
            values = np.unique(np.concatenate([b.data.ravel() for b in batches]))
            if 1 < values.size <= MAX_COUNT_LEVELS:
                levels = values
        return cls(width=width, missing=missing, discrete=tuple(discrete),
                   continuous=np.asarray(continuous, dtype=np.int64), levels=levels)

    def transform(self, outputs: Outputs) -> np.ndarray:
        """The feature matrix of a batch (float64, one row per output)."""
        flat = flat_columns(outputs)
        finite = np.isfinite(flat)
        clean = np.where(finite, flat, 0.0)
        parts = []
        if clean.shape[1] <= MAX_RAW_FEATURES:
            parts.append(clean)
        if clean.shape[1] > 1:
            parts.append(np.stack([clean.sum(axis=1), clean.mean(axis=1), clean.std(axis=1),
                                   clean.min(axis=1), clean.max(axis=1)], axis=1))
        if self.missing.size:
            parts.append((~finite[:, self.missing]).astype(np.float64))
        budget = MAX_INTERACTIONS
        for j, values in self.discrete:
            onehot = (clean[:, j, None] == values[None, :]).astype(np.float64)
            parts.append(onehot)
            cont = self.continuous[: max(0, budget // max(values.size, 1))]
            if cont.size:
                parts.append((onehot[:, :, None] * clean[:, None, cont]).reshape(len(clean), -1))
                budget -= values.size * cont.size
        if self.levels is not None:
            ints = outputs.data.reshape(len(outputs), -1)
            parts.append(np.stack([(ints == lev).sum(axis=1) for lev in self.levels],
                                  axis=1).astype(np.float64))
        return np.concatenate(parts, axis=1)

    @property
    def has_discrete_part(self) -> bool:
        """Whether outputs have a discrete part beside a continuous one (worth projecting)."""
        return bool(self.missing.size or (self.discrete and self.continuous.size))

    def discrete_keys(self, outputs: Outputs) -> np.ndarray:
        """int64 keys of the discrete projection: missing-value pattern and discrete columns."""
        flat = flat_columns(outputs)
        cols = [(~np.isfinite(flat[:, self.missing])).astype(np.float64)]
        cols += [np.where(np.isfinite(flat[:, [j]]), flat[:, [j]], np.nan)
                 for j, _ in self.discrete]
        stacked = np.ascontiguousarray(np.concatenate(cols, axis=1))
        stacked[np.isnan(stacked)] = np.nan  # one NaN bit pattern
        return _row_hash(stacked)
