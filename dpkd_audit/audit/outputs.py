"""What a sampler returned: validation, kind of output, discrete keys and bit-level features.

The auditors accept any sampler ``f(x, n, rng)`` returning ``n`` outputs stacked on axis 0: a 1-D
array of scalars, an ``(n, ...)`` array of vectors (numeric or structured), or a sequence of
hashable discrete values (ints, tuples, strings, dicts). This module turns such a batch into the
representations the attacks work on; every map here is a fixed function of one output, so any
event defined through it is a fixed event of the output space (what the validity of the bound
needs).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from typing import Any, NamedTuple

import numpy as np

__all__ = ["ArrayValue", "DictValue", "OutputKind", "Outputs", "as_object", "conform",
           "float_bit_keys", "leaf_view", "leaf_width", "prepare_outputs", "structure_keys"]


class OutputKind(enum.Enum):
    """The kind of one output, read off a batch."""

    #: One real number per output (1-D float array).
    SCALAR_FLOAT = "scalar float"
    #: One integer (or bool) per output (1-D integer array).
    SCALAR_INT = "scalar int"
    #: A numeric array per output (``(n, ...)`` array, ``...`` non-empty).
    ARRAY = "array"
    #: A structured (record) numpy scalar per output.
    STRUCTURED = "structured"
    #: Any other hashable value per output (tuples, strings, ...).
    OBJECT = "object"


@dataclasses.dataclass(frozen=True, eq=False)
class Outputs:
    """A validated batch of outputs.

    Attributes:
        kind: The kind of one output.
        data: The batch: a numeric/structured ndarray stacked on axis 0, or an object array of
            hashable keys (``OutputKind.OBJECT``).
    """

    kind: OutputKind
    data: np.ndarray

    def __len__(self) -> int:
        return int(self.data.shape[0])

    @property
    def item_shape(self) -> tuple[int, ...]:
        """Shape of one output (``()`` for scalars)."""
        return tuple(self.data.shape[1:])

    def signature(self) -> tuple[Any, ...]:
        """What must agree between two batches of the same sampler (kind, dtype kind, shape)."""
        if self.kind is OutputKind.OBJECT:
            return (self.kind,)
        if self.kind is OutputKind.STRUCTURED:
            return (self.kind, self.data.dtype, self.item_shape)
        return (self.kind, self.data.dtype.kind == "f", self.item_shape)


class ArrayValue(NamedTuple):
    """A numpy array inside an object output, as a hashable value (its dtype, shape, bytes)."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes


class DictValue(NamedTuple):
    """A dict inside an output, as a hashable value: its ``(key, value)`` items sorted by key.

    A release as a dict (a sparse histogram ``{bin: noisy count}``, named statistics) is read
    as its sorted items: equal dicts give equal values whatever their insertion order, the keys
    present are its structure and the values its numbers (:func:`leaf_view`).
    """

    items: tuple[tuple[Any, Any], ...]


def _item_order(item: tuple[Any, Any]) -> tuple[str, Any]:
    return type(item[0]).__name__, item[0]


def _hashable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ArrayValue(value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        items = [(_hashable(k), _hashable(v)) for k, v in value.items()]
        try:
            items.sort(key=_item_order)
        except TypeError:  # keys of one type that do not compare: by their text
            items.sort(key=lambda item: (type(item[0]).__name__, repr(item[0])))
        return DictValue(tuple(items))
    try:
        hash(value)
    except TypeError as exc:
        raise ValueError(f"sampler outputs must be numbers, arrays or hashable values; got an "
                         f"unhashable {type(value).__name__}") from exc
    return value


def prepare_outputs(raw: Any, n: int, *, name: str = "sampler") -> Outputs:
    """Validate a batch returned by a sampler and classify it.

    Args:
        raw: What the sampler returned.
        n: How many outputs were asked for.
        name: Name used in error messages.

    Returns:
        The validated :class:`Outputs`.

    Raises:
        ValueError: If the batch does not hold exactly ``n`` outputs stacked on axis 0, or holds
            complex numbers or unhashable values (dicts are read as their sorted items,
            :class:`DictValue`).
    """
    arr: np.ndarray | None = None
    if isinstance(raw, np.ndarray):
        arr = raw
    elif not isinstance(raw, str | bytes):
        try:
            length = len(raw)
        except TypeError as exc:
            raise ValueError(f"{name} must return a sequence of {n} outputs; got "
                             f"{type(raw).__name__}") from exc
        if length != n:
            raise ValueError(f"{name} must return exactly n={n} outputs; got {length}")
        first = next(iter(raw), None)
        # Tuples and lists of numbers (e.g. ``(index, noisy value)``) become a numeric array
        # (about 2 x 10^6 ten-element tuples per second) instead of opaque hashable keys, so
        # that their discrete and continuous parts can both be attacked.
        if isinstance(first, int | float | np.number | np.bool_ | bool | np.ndarray | list
                      | tuple):
            try:
                candidate = np.asarray(raw)
            except (TypeError, ValueError):
                candidate = None
            if candidate is not None and candidate.dtype.kind in "biuf":
                arr = candidate
        if arr is None:
            keys = np.empty(n, dtype=object)
            keys[:] = [_hashable(v) for v in raw]
            return Outputs(OutputKind.OBJECT, keys)
    else:
        raise ValueError(f"{name} must return a sequence of {n} outputs; got a string")
    if arr.ndim == 0 or arr.shape[0] != n:
        raise ValueError(f"{name} must return exactly n={n} outputs stacked on axis 0; got an "
                         f"array of shape {arr.shape}")
    if arr.dtype.names is not None:
        if arr.ndim != 1:
            raise ValueError(f"{name} must return structured outputs as a 1-D array; got shape "
                             f"{arr.shape}")
        return Outputs(OutputKind.STRUCTURED, np.ascontiguousarray(arr))
    if arr.dtype.kind == "c":
        raise ValueError(f"{name} must return real outputs; got dtype {arr.dtype}")
    if arr.dtype.kind == "O":
        keys = np.empty(n, dtype=object)
        keys[:] = [_hashable(v) for v in arr]
        return Outputs(OutputKind.OBJECT, keys)
    if arr.dtype.kind not in "biuf":
        keys = np.empty(n, dtype=object)
        keys[:] = [_hashable(v) for v in arr]
        return Outputs(OutputKind.OBJECT, keys)
    if arr.ndim == 1:
        kind = OutputKind.SCALAR_FLOAT if arr.dtype.kind == "f" else OutputKind.SCALAR_INT
        return Outputs(kind, arr)
    return Outputs(OutputKind.ARRAY, np.ascontiguousarray(arr))


def as_object(outputs: Outputs) -> Outputs:
    """The same outputs as hashable objects (numbers as Python numbers, rows as tuples).

    For a sampler whose outputs are numbers but *sometimes* another value (a rare
    ``('debug', x)`` record beside plain floats): a batch without the rare value is a numeric
    array, a batch with it is an object batch, and the two are read on one footing as objects.
    A fixed function of each output, so events defined on it stay fixed events.
    """
    if outputs.kind is OutputKind.OBJECT:
        return outputs
    keys = np.empty(len(outputs), dtype=object)
    keys[:] = [_hashable(v) for v in outputs.data.tolist()]
    return Outputs(OutputKind.OBJECT, keys)


def conform(batch: Outputs, reference: Outputs) -> tuple[Outputs, np.ndarray | None]:
    """``batch`` read as outputs of ``reference``'s kind, and which of its outputs fit.

    - An object reference: the batch as objects (:func:`as_object`); every output fits.
    - A numeric reference and an object batch (a rare non-numeric output appeared after the
      event was chosen on numbers): the outputs that are numbers of the reference's shape are
      kept, the others replaced by zeros and marked as not fitting; an event chosen on numbers
      counts none of them (it is the fixed event "a number, and in S").

    Returns:
        ``(batch, fits)``; ``fits`` is ``None`` when every output fits.

    Raises:
        ValueError: If two numeric batches differ in kind, dtype kind or shape.
    """
    if reference.kind is OutputKind.OBJECT:
        return as_object(batch), None
    if batch.kind is OutputKind.OBJECT:
        shape = reference.item_shape
        data = np.zeros((len(batch), *shape), dtype=reference.data.dtype)
        fits = np.zeros(len(batch), dtype=bool)
        for i, value in enumerate(batch.data):
            if isinstance(value, str | bytes | ArrayValue | DictValue):
                continue
            try:
                row = np.asarray(value, dtype=reference.data.dtype)
            except (TypeError, ValueError, OverflowError):
                continue
            if row.shape == shape:
                data[i] = row
                fits[i] = True
        return Outputs(reference.kind, data), fits
    if batch.signature() != reference.signature():
        raise ValueError(
            f"sampler must return outputs of one kind and shape for both inputs and every call; "
            f"got {reference.kind.value} {reference.item_shape} and {batch.kind.value} "
            f"{batch.item_shape}")
    return batch, None


# --------------------------------------------------------------------------- discrete keys

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(h: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser (Steele, Lea, Flood, OOPSLA 2014); wraps modulo 2^64 on purpose."""
    with np.errstate(over="ignore"):
        h = (h ^ (h >> np.uint64(30))) * _M1
        h = (h ^ (h >> np.uint64(27))) * _M2
        return h ^ (h >> np.uint64(31))


def _row_hash(rows: np.ndarray) -> np.ndarray:
    """A 64-bit hash of the bytes of each row (vectorised over rows, looped over 8-byte words).

    A hash collision merges two outcomes into one key: the events built on keys are still fixed
    events of the output space, so collisions can only cost power, never validity.
    """
    n = rows.shape[0]
    raw = np.ascontiguousarray(rows).view(np.uint8).reshape(n, -1)
    width = raw.shape[1]
    pad = (-width) % 8
    if pad:
        raw = np.concatenate([raw, np.zeros((n, pad), dtype=np.uint8)], axis=1)
    words = raw.view(np.uint64)
    h = np.full(n, np.uint64(width), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(words.shape[1]):
            h = _mix(h + _GOLDEN + words[:, j])
    return h.view(np.int64)


class KeyCoder:
    """Maps outputs to int64 keys, consistently across the batches of one audit.

    Scalars keep their value (integers) or their bit pattern (floats); arrays and records are
    hashed (:func:`_row_hash`); other hashable values are numbered in order of first appearance
    (the numbering is shared by every batch coded by the same coder, so a key names the same
    outcome on the selection and on the bounding part).
    """

    def __init__(self) -> None:
        self._codes: dict[Any, int] = {}

    def keys(self, outputs: Outputs) -> np.ndarray:
        """int64 keys of a batch."""
        data = outputs.data
        if outputs.kind is OutputKind.SCALAR_INT:
            if data.dtype == np.uint64:
                return data.view(np.int64)
            return data.astype(np.int64, copy=False)
        if outputs.kind is OutputKind.SCALAR_FLOAT:
            return data.astype(np.float64).view(np.int64)
        if outputs.kind is OutputKind.OBJECT:
            return np.fromiter((self._codes.setdefault(v, len(self._codes)) for v in data),
                               dtype=np.int64, count=len(data))
        return _row_hash(data)


#: A number written in a string: optional sign, digits with an optional fraction (or a
#: fraction alone), optional exponent (``"0.734"``, ``"-3"``, ``"1e-05"``).
NUMBER_IN_TEXT = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def _is_integer_text(token: str) -> bool:
    return "." not in token and "e" not in token and "E" not in token


def _masked_text(text: str) -> str:
    """``text`` with its real-number tokens (a fraction or an exponent) replaced by ``#``.

    ``"k:0.734"`` becomes ``"k:#"`` (its template recurs when the value does not); integer
    tokens (``"count=12"``) are discrete values and stay.
    """
    return NUMBER_IN_TEXT.sub(lambda m: m.group(0) if _is_integer_text(m.group(0)) else "#",
                              text)


def _skeleton(value: Any, discrete: bool) -> Any:
    """The structure of one object output: types and lengths, and its discrete values if asked.

    Real numbers (and float arrays) become their type alone; integers, booleans, strings and
    integer arrays keep their value when ``discrete`` (else their type), a string with its
    real-number tokens masked (:func:`_masked_text`); tuples keep their length and the
    skeletons of their items; dicts keep their keys (which fields or bins are present) and the
    skeletons of their values.
    """
    if isinstance(value, ArrayValue):
        kind = np.dtype(value.dtype).kind
        if discrete and kind in "biuUSa":
            return value
        return ("array", value.dtype, value.shape)
    if isinstance(value, DictValue):
        return ("dict", *((_skeleton(k, True), _skeleton(v, discrete)) for k, v in value.items))
    if isinstance(value, tuple):
        return (len(value), *(_skeleton(v, discrete) for v in value))
    if isinstance(value, str):
        return _masked_text(value) if discrete else "str"
    if isinstance(value, bool | int | bytes) or value is None:
        return value if discrete else type(value).__name__
    if isinstance(value, float):
        return "float"
    return type(value).__name__


def structure_keys(outputs: Outputs, *, discrete: bool,
                   codes: dict[Any, int]) -> np.ndarray:
    """int64 keys of the structure of object outputs (see :func:`_skeleton`).

    A data-dependent length (a ragged list, a sparse vector's answers) or a discrete part
    (the string of a ``(str, float)`` tuple) makes every whole output unique, so the histogram
    attack on whole outputs counts nothing; their structure recurs. Each key is a fixed
    function of one output, numbered through ``codes`` (shared by every batch of one event,
    so a key names the same structure on the selection and on the bounding part).

    Args:
        outputs: A batch of ``OutputKind.OBJECT`` outputs.
        discrete: Keep the discrete values (else types and lengths only).
        codes: The numbering, updated in place.
    """
    return np.fromiter((codes.setdefault(_skeleton(v, discrete), len(codes))
                        for v in outputs.data), dtype=np.int64, count=len(outputs))


#: Most numbers per object output read by :func:`leaf_view` (the rest are cut).
MAX_LEAVES = 64


def _leaves(value: Any, out: list[float]) -> None:
    """Append the numbers of one object output, depth first (NaN for any other leaf).

    A string contributes the numbers written in it (:data:`NUMBER_IN_TEXT`; ``"k:0.734"``
    gives 0.734), or one NaN when it holds none; a dict its keys and values in key order.
    """
    if isinstance(value, ArrayValue):  # a NamedTuple: before the tuples
        dtype = np.dtype(value.dtype)
        if dtype.kind in "biuf":
            out.extend(np.frombuffer(value.data, dtype=dtype).astype(np.float64).tolist())
        else:
            out.append(math.nan)
    elif isinstance(value, tuple):
        for item in value:
            _leaves(item, out)
    elif isinstance(value, bool | int | float):
        try:
            out.append(float(value))
        except OverflowError:  # an int beyond the doubles
            out.append(math.inf if value > 0 else -math.inf)
    elif isinstance(value, str):
        tokens = NUMBER_IN_TEXT.findall(value)
        if tokens:
            out.extend(float(t) for t in tokens)
        else:
            out.append(math.nan)
    else:
        out.append(math.nan)


def leaf_width(*batches: Outputs) -> int:
    """Columns of :func:`leaf_view` for these (selection) batches of object outputs.

    The most numbers any output holds (capped at :data:`MAX_LEAVES`); 0 when no output holds a
    number (strings only, say), where the view would add nothing.
    """
    width = 0
    numeric = False
    for batch in batches:
        for value in batch.data:
            leaves: list[float] = []
            _leaves(value, leaves)
            width = max(width, len(leaves))
            numeric = numeric or any(not math.isnan(v) for v in leaves)
    return min(width, MAX_LEAVES) if numeric else 0


def leaf_view(outputs: Outputs, width: int) -> Outputs:
    """Object outputs as numeric vectors: their numbers in order, NaN-padded, and their count.

    Column ``j < width`` holds an output's ``j``-th number (depth first through tuples, lists,
    dicts and arrays, and the numbers written in strings; NaN past its end and for other
    leaves), column ``width`` how many
    leaves it has. A ragged list of answers or ``(index, value)`` tuples becomes a vector whose
    missing values say which answers exist, so the vector attacks (coordinate, classifier,
    float bits, the discrete projection) read its values as well as its length. A fixed
    function of one output once ``width`` is fixed (by :func:`leaf_width` on the selection
    samples), so events built on it are fixed events.
    """
    rows = np.full((len(outputs), width + 1), np.nan)
    for j, value in enumerate(outputs.data):
        leaves: list[float] = []
        _leaves(value, leaves)
        k = min(len(leaves), width)
        rows[j, :k] = leaves[:k]
        rows[j, width] = len(leaves)
    return Outputs(OutputKind.ARRAY, rows)


def describe_keys(wanted: np.ndarray, keys: np.ndarray, outputs: Outputs) -> list[str]:
    """Short texts of the outcomes with keys ``wanted``, from an output of ``outputs`` with each.

    Args:
        wanted: Keys to describe.
        keys: The keys of ``outputs``.
        outputs: A batch in which each wanted key occurs.
    """
    texts = []
    for key in wanted:
        where = np.flatnonzero(keys == key)
        texts.append(_short_repr(outputs.data[where[0]]) if where.size else f"<key {key}>")
    return texts


def _short_repr(value: Any, limit: int = 60) -> str:
    if isinstance(value, np.ndarray):
        text = np.array2string(value.ravel(), threshold=8, edgeitems=3, separator=",")
        if value.ndim > 1:
            text = f"{text} (shape {value.shape})"
    elif isinstance(value, np.floating):
        text = repr(float(value))
    elif isinstance(value, np.generic):
        text = repr(value.item())
    else:
        text = repr(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- float bits

#: Cap on the trailing-zero count of the significand used by :func:`float_bit_keys`.
TRAILING_CAP = 12
#: Number of low significand bits used by the low-bits pattern of :func:`float_bit_keys`.
LOW_BITS = 3


def _float_layout(dtype: np.dtype) -> tuple[type, int, int]:
    if dtype == np.float32:
        return np.uint32, 23, 8
    return np.uint64, 52, 11


def float_bit_keys(values: np.ndarray, *, low_bits: bool) -> np.ndarray:
    """Bit-level keys of floating-point outputs: sign, binade and the low significand bits.

    Mironov, "On significance of the least significant bits for differential privacy", CCS
    2012, Section 3: a textbook floating-point Laplace ``x + b ln(U)`` reaches, inside a binade,
    only a sparse, input-dependent subset of the doubles (the rounding grid of ``x + noise``
    depends on ``x``), so the position of an output on the grid of its binade separates the
    inputs. The key is ``(sign, unbiased exponent, pattern)`` where ``pattern`` is the number of
    trailing zero bits of the significand capped at :data:`TRAILING_CAP` (how coarse a grid
    ``2^-k`` the value lies on; ``low_bits=False``), or the :data:`LOW_BITS` lowest significand
    bits (``low_bits=True``). NaNs and infinities get the maximal exponent like in IEEE 754.

    Args:
        values: A 1-D float array (float64, float32 or float16 read as float64).
        low_bits: Use the lowest significand bits instead of the trailing-zero count.

    Returns:
        int64 keys (a bijection of the triple).
    """
    if values.dtype not in (np.float32, np.float64):
        values = values.astype(np.float64)
    utype, mant_bits, exp_bits = _float_layout(values.dtype)
    bits = values.view(utype).astype(np.uint64)
    mantissa = bits & np.uint64((1 << mant_bits) - 1)
    exponent = ((bits >> np.uint64(mant_bits)) & np.uint64((1 << exp_bits) - 1)).astype(np.int64)
    sign = (bits >> np.uint64(mant_bits + exp_bits)).astype(np.int64)
    if low_bits:
        pattern = (mantissa & np.uint64((1 << LOW_BITS) - 1)).astype(np.int64)
    else:
        pattern = np.full(values.shape, TRAILING_CAP, dtype=np.int64)
        remaining = mantissa.copy()
        found = np.zeros(values.shape, dtype=bool)
        for k in range(TRAILING_CAP):
            low = (remaining & np.uint64(1)).astype(bool) & ~found
            pattern[low] = k
            found |= low
            remaining >>= np.uint64(1)
    return (sign << 20) | (exponent << 5) | pattern


def describe_float_key(key: int, *, low_bits: bool, dtype: np.dtype) -> str:
    """Readable text of a key of :func:`float_bit_keys`."""
    exp_bits = _float_layout(dtype)[2]
    sign = "-" if (key >> 20) & 1 else "+"
    exponent = (key >> 5) & ((1 << exp_bits) - 1)
    pattern = key & 31
    bias = (1 << (exp_bits - 1)) - 1
    if exponent == 0:
        where = f"{sign}subnormal"
    elif exponent == (1 << exp_bits) - 1:
        where = f"{sign}inf/nan"
    else:
        where = f"{sign}[2^{exponent - bias}, 2^{exponent - bias + 1})"
    if low_bits:
        return f"{where} low bits {pattern:0{LOW_BITS}b}"
    if pattern >= TRAILING_CAP:
        return f"{where} >= {TRAILING_CAP} trailing zero bits"
    return f"{where} {pattern} trailing zero bits"
