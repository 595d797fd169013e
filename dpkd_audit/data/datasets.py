"""Image classification datasets: sklearn's bundled digits, MNIST and Fashion-MNIST (numpy only).

* ``DIGITS`` (the embedded default, needs no files): scikit-learn's ``load_digits`` (1,797
  8x8 images, UCI "Optical Recognition of Handwritten Digits"), pixel values 0..16 rescaled to
  ``uint8`` 0..255 by ``rint(v * 255 / 16)``. **Decision** (fixed, deterministic split in
  sklearn's order): ``train`` = the first :data:`DIGITS_TRAIN_SIZE` = 1,200 images (the
  "private" set of the reverse k-NN scheme), ``test`` = the remaining 597 (permuted by
  :func:`dpkd_audit.data.splits.rknn_splits` into public / student test).
* ``MNIST`` (LeCun et al. 1998) and ``FASHION_MNIST`` (Xiao, Rasul, Vollgraf 2017,
  arXiv:1708.07747): the four canonical idx files (``train-images-idx3-ubyte``,
  ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, each
  optionally ``.gz``), verified by the md5 of their *uncompressed* content.

Where the idx files are looked for (first directory holding all four wins):

1. ``data_dir`` if given: ``data_dir/<subdir>`` then ``data_dir`` itself (``<subdir>`` is
   ``mnist`` or ``fashion-mnist``). An explicit ``data_dir`` is searched alone.
2. otherwise the environment variable ``DPKD_DATA_DIR`` (same two forms), then the system
   location (Fashion-MNIST only: ``/usr/share/datasets/fashion-mnist``, where the Debian
   package ``dataset-fashion-mnist`` installs it).

Missing files raise :class:`DatasetNotFoundError` (a ``FileNotFoundError``) naming the dataset,
the missing files in each directory searched, and how to fix it.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpkd_audit._validate import check_int
from dpkd_audit.data.idx import read_idx_images, read_idx_labels

__all__ = [
    "DATA_DIR_ENV",
    "DIGITS_TRAIN_SIZE",
    "FASHION_MNIST_MD5",
    "IDX_FILES",
    "MNIST_MD5",
    "SYSTEM_DATA_DIRS",
    "Dataset",
    "DatasetName",
    "DatasetNotFoundError",
    "dataset_search_dirs",
    "load_dataset",
]

#: Environment variable naming a directory that holds the datasets.
DATA_DIR_ENV = "DPKD_DATA_DIR"

#: Number of sklearn digits (in sklearn's order) used as the train split; the rest is test.
DIGITS_TRAIN_SIZE = 1200

#: The four idx files of MNIST-format datasets, by role (uncompressed names; ``.gz`` optional).
IDX_FILES: Mapping[str, str] = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}

#: md5 of the *uncompressed* MNIST files. Obtained once by
#: ``gunzip -c <file>.gz | md5sum`` on the four canonical .gz files of /work/shared/data/mnist,
#: whose .gz md5s (f68b3c2d..., d53e105e..., 9fb629c4..., ec29112d...) match torchvision and
#: the original MNIST page (see data/README.md there).
MNIST_MD5: Mapping[str, str] = {
    "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
}

#: md5 of the *uncompressed* Fashion-MNIST files (table of data/README.md; Debian rewrote the
#: gzip headers, so the official .gz md5s do not apply to the packaged files).
FASHION_MNIST_MD5: Mapping[str, str] = {
    "train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
    "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
    "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
    "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
}


class DatasetName(enum.StrEnum):
    """The datasets :func:`load_dataset` knows; the value is the CLI spelling."""

    DIGITS = "digits"
    MNIST = "mnist"
    FASHION_MNIST = "fashion-mnist"

    @classmethod
    def parse(cls, value: DatasetName | str) -> DatasetName:
        """Return the member for ``value`` (a member, or its value such as ``"fashion-mnist"``).

        Raises:
            ValueError: Naming ``name``, the allowed values and the value received.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            key = value.strip().lower().replace("_", "-")
            for member in cls:
                if key == member.value:
                    return member
        allowed = ", ".join(repr(m.value) for m in cls)
        raise ValueError(f"name must be one of {allowed}; got {value!r}")


#: Per-dataset subfolder name under ``data_dir`` / ``DPKD_DATA_DIR``.
_SUBDIRS: Mapping[DatasetName, str] = {
    DatasetName.MNIST: "mnist",
    DatasetName.FASHION_MNIST: "fashion-mnist",
}

#: System-wide locations searched last (when no ``data_dir`` is given). A plain dict, so tests
#: can substitute it.
SYSTEM_DATA_DIRS: dict[DatasetName, tuple[Path, ...]] = {
    DatasetName.MNIST: (),
    DatasetName.FASHION_MNIST: (Path("/usr/share/datasets/fashion-mnist"),),
}

_BUILTIN_MD5: Mapping[DatasetName, Mapping[str, str]] = {
    DatasetName.MNIST: MNIST_MD5,
    DatasetName.FASHION_MNIST: FASHION_MNIST_MD5,
}

_FIX_HINT: Mapping[DatasetName, str] = {
    DatasetName.MNIST: (
        "put the four idx files (optionally .gz) in a directory and pass it with --data-dir "
        f"(data_dir=...) or set {DATA_DIR_ENV}; a 'mnist/' subfolder of it is also searched"
    ),
    DatasetName.FASHION_MNIST: (
        "run `apt-get update && apt-get install -y dataset-fashion-mnist` (installs to "
        "/usr/share/datasets/fashion-mnist), or put the four idx files (optionally .gz) in a "
        f"directory and pass it with --data-dir (data_dir=...) or set {DATA_DIR_ENV}; a "
        "'fashion-mnist/' subfolder of it is also searched"
    ),
}


class DatasetNotFoundError(FileNotFoundError):
    """The idx files of a dataset were not found in any of the directories searched."""


def _readonly(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


@dataclass(frozen=True, kw_only=True, eq=False)
class Dataset:
    """An image classification dataset with a fixed train/test split.

    The arrays are made read-only (copy them for a writable version), so that index-based
    splits taken from a dataset stay valid.

    Attributes:
        train_images: ``uint8`` array ``(n_train, h, w)``.
        train_labels: ``int64`` array ``(n_train,)`` with values in ``[0, num_classes)``.
        test_images: ``uint8`` array ``(n_test, h, w)``.
        test_labels: ``int64`` array ``(n_test,)`` with values in ``[0, num_classes)``.
        name: Which dataset this is.
        num_classes: Number of classes.
    """

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    name: DatasetName
    num_classes: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", DatasetName.parse(self.name))
        check_int("num_classes", self.num_classes, minimum=2)
        for part in ("train", "test"):
            images = np.asarray(getattr(self, f"{part}_images"))
            labels = np.asarray(getattr(self, f"{part}_labels"))
            if images.dtype != np.uint8 or images.ndim != 3:
                raise ValueError(
                    f"{part}_images must be a uint8 array of shape (n, h, w); got dtype "
                    f"{images.dtype} and shape {images.shape}"
                )
            if labels.dtype != np.int64 or labels.shape != images.shape[:1]:
                raise ValueError(
                    f"{part}_labels must be an int64 array of shape ({images.shape[0]},); got "
                    f"dtype {labels.dtype} and shape {labels.shape}"
                )
            if labels.size and (labels.min() < 0 or labels.max() >= self.num_classes):
                raise ValueError(
                    f"{part}_labels must lie in [0, {self.num_classes}); got values in "
                    f"[{labels.min()}, {labels.max()}]"
                )
            object.__setattr__(self, f"{part}_images", _readonly(images))
            object.__setattr__(self, f"{part}_labels", _readonly(labels))
        if self.train_images.shape[1:] != self.test_images.shape[1:]:
            raise ValueError(
                "train_images and test_images must have the same image shape; got "
                f"{self.train_images.shape[1:]} and {self.test_images.shape[1:]}"
            )

    @property
    def image_shape(self) -> tuple[int, int]:
        """``(h, w)`` of every image."""
        h, w = self.train_images.shape[1:]
        return int(h), int(w)

    @property
    def n_train(self) -> int:
        """Number of training images."""
        return int(self.train_images.shape[0])

    @property
    def n_test(self) -> int:
        """Number of test images."""
        return int(self.test_images.shape[0])

    def __repr__(self) -> str:
        return (f"Dataset(name={self.name.value!r}, num_classes={self.num_classes}, "
                f"train={self.train_images.shape}, test={self.test_images.shape})")


def _load_digits() -> Dataset:
    from sklearn.datasets import load_digits  # lazy: sklearn is slow to import

    digits = load_digits()
    # Values are integers 0..16 (UCI optdigits); rint(v*255/16) maps 0->0, 16->255.
    images = np.rint(digits.images * (255.0 / 16.0)).astype(np.uint8)
    labels = np.asarray(digits.target, dtype=np.int64)
    cut = DIGITS_TRAIN_SIZE
    return Dataset(train_images=images[:cut].copy(), train_labels=labels[:cut].copy(),
                   test_images=images[cut:].copy(), test_labels=labels[cut:].copy(),
                   name=DatasetName.DIGITS, num_classes=10)


def dataset_search_dirs(name: DatasetName | str, *,
                        data_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """Return, in order, the directories :func:`load_dataset` searches for ``name``.

    Args:
        name: ``MNIST`` or ``FASHION_MNIST`` (``DIGITS`` needs no files: empty list).
        data_dir: Explicit directory; when given, only it (and its per-dataset subfolder) is
            searched.
    """
    name = DatasetName.parse(name)
    if name is DatasetName.DIGITS:
        return []
    sub = _SUBDIRS[name]
    dirs: list[Path] = []
    if data_dir is not None:
        base = Path(data_dir)
        return [base / sub, base]
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        base = Path(env)
        dirs += [base / sub, base]
    dirs += list(SYSTEM_DATA_DIRS.get(name, ()))
    return dirs


def _find_file(directory: Path, stem: str) -> Path | None:
    for candidate in (directory / stem, directory / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _locate(name: DatasetName, dirs: list[Path]) -> dict[str, Path]:
    report = []
    for directory in dirs:
        found = {role: _find_file(directory, stem) for role, stem in IDX_FILES.items()}
        missing = [IDX_FILES[role] for role, path in found.items() if path is None]
        if not missing:
            return {role: path for role, path in found.items() if path is not None}
        state = "does not exist" if not directory.is_dir() else "missing " + ", ".join(missing)
        report.append(f"  {directory}: {state}")
    files = ", ".join(f"{stem}[.gz]" for stem in IDX_FILES.values())
    where = "\n".join(report) if report else (
        f"  (no directory to search: no data_dir given, {DATA_DIR_ENV} not set)")
    raise DatasetNotFoundError(
        f"dataset {name.value!r} not found: need the files {files} in one directory. "
        f"Searched:\n{where}\nFix: {_FIX_HINT[name]}."
    )


def load_dataset(name: DatasetName | str, *, data_dir: str | os.PathLike[str] | None = None,
                 verify: bool = True, md5s: Mapping[str, str] | None = None) -> Dataset:
    """Load a dataset with its fixed train/test split.

    Args:
        name: A :class:`DatasetName` or its value (``"digits"``, ``"mnist"``,
            ``"fashion-mnist"``).
        data_dir: Directory holding the idx files (or a ``mnist/`` / ``fashion-mnist/``
            subfolder with them); see the module docstring for the search order. Ignored for
            ``DIGITS``.
        verify: Check the md5 of every uncompressed idx file (default). ``False`` skips it
            explicitly (for hand-made or test files).
        md5s: Expected uncompressed md5s by file name (keys from :data:`IDX_FILES` values,
            e.g. ``"train-images-idx3-ubyte"``), replacing the built-in tables
            (:data:`MNIST_MD5`, :data:`FASHION_MNIST_MD5`) for the files it names.

    Returns:
        The :class:`Dataset` (10 classes for all three).

    Raises:
        ValueError: On an unknown ``name``, an unknown key in ``md5s``, or a damaged file (bad
            magic, size, gzip stream or md5; the message names the file).
        DatasetNotFoundError: (a ``FileNotFoundError``) if the files are not found; the message
            names the dataset, the missing files per directory searched and the fix.
    """
    name = DatasetName.parse(name)
    if not isinstance(verify, bool):
        raise ValueError(f"verify must be a bool; got {verify!r}")
    known = set(IDX_FILES.values())
    if md5s is not None:
        unknown = sorted(set(md5s) - known)
        if unknown:
            raise ValueError(
                f"md5s keys must be among {sorted(known)}; got unknown keys {unknown}")
    if name is DatasetName.DIGITS:
        return _load_digits()
    paths = _locate(name, dataset_search_dirs(name, data_dir=data_dir))
    table = dict(_BUILTIN_MD5[name])
    if md5s is not None:
        table.update(md5s)

    def expected(role: str) -> str | None:
        return table[IDX_FILES[role]] if verify else None

    arrays = {
        role: (read_idx_images if role.endswith("images") else read_idx_labels)(
            path, expected_md5=expected(role))
        for role, path in paths.items()
    }
    for part in ("train", "test"):
        n_img, n_lab = arrays[f"{part}_images"].shape[0], arrays[f"{part}_labels"].shape[0]
        if n_img != n_lab:
            raise ValueError(
                f"{paths[part + '_images']} holds {n_img} images but "
                f"{paths[part + '_labels']} holds {n_lab} labels"
            )
    return Dataset(**arrays, name=name, num_classes=10)
