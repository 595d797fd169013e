"""Tests of dpkd_audit.data: idx reader, dataset discovery/loading, rknn splits.

No test reads /work/shared or any system dataset: idx files are generated in tmp_path and the
system search locations are replaced by empty ones. Nothing here is statistical (no
false-failure rate to state): every check is exact and deterministic.
"""

from __future__ import annotations

import gzip
import hashlib
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkd_audit import data
from dpkd_audit.data import (
    DATA_DIR_ENV,
    IDX_FILES,
    SYSTEM_DATA_DIRS,
    Dataset,
    DatasetName,
    DatasetNotFoundError,
    dataset_search_dirs,
    load_dataset,
    read_idx_images,
    read_idx_labels,
    rknn_splits,
)
from dpkd_audit.data.datasets import _load_digits

# ---------------------------------------------------------------------------- helpers


def idx_content(array: np.ndarray, magic: int | None = None) -> bytes:
    array = np.asarray(array, dtype=np.uint8)
    if magic is None:
        magic = 0x0800 | array.ndim
    return struct.pack(f">I{array.ndim}I", magic, *array.shape) + array.tobytes()


def write(path: Path, content: bytes, *, gz: bool) -> Path:
    path.write_bytes(gzip.compress(content) if gz else content)
    return path


def md5(content: bytes) -> str:
    return hashlib.md5(content).hexdigest()


def fake_dataset_files(directory: Path, *, seed: int, gz: bool, n_train: int = 12,
                       n_test: int = 10, size: int = 4) -> dict[str, bytes]:
    """Write a tiny MNIST-format dataset; return uncompressed contents by file stem."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train_images": rng.integers(0, 256, (n_train, size, size)),
        "train_labels": rng.integers(0, 10, n_train),
        "test_images": rng.integers(0, 256, (n_test, size, size)),
        "test_labels": rng.integers(0, 10, n_test),
    }
    directory.mkdir(parents=True, exist_ok=True)
    contents = {}
    for role, stem in IDX_FILES.items():
        content = idx_content(arrays[role])
        name = stem + (".gz" if gz else "")
        write(directory / name, content, gz=gz)
        contents[stem] = content
    return contents


@pytest.fixture(autouse=True)
def no_system_data(monkeypatch):
    """Isolate every test from the machine: no env variable, no system dataset directories."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    for name in list(SYSTEM_DATA_DIRS):
        monkeypatch.setitem(SYSTEM_DATA_DIRS, name, ())


# ---------------------------------------------------------------------------- idx reader


@pytest.mark.parametrize("gz", [False, True])
def test_idx_round_trip(tmp_path, gz):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (5, 3, 7)).astype(np.uint8)
    labels = rng.integers(0, 10, 5)
    # Names deliberately lie about compression: detection is by magic bytes only.
    pi = write(tmp_path / "images.gz", idx_content(images), gz=gz)
    pl = write(tmp_path / "labels.raw", idx_content(labels), gz=gz)
    got_i, got_l = read_idx_images(pi), read_idx_labels(pl)
    assert got_i.dtype == np.uint8 and got_i.shape == (5, 3, 7)
    assert got_l.dtype == np.int64 and got_l.shape == (5,)
    np.testing.assert_array_equal(got_i, images)
    np.testing.assert_array_equal(got_l, labels)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 6), h=st.integers(1, 5), w=st.integers(1, 5), gz=st.booleans(),
       seed=st.integers(0, 2**16))
def test_idx_round_trip_property(tmp_path_factory, n, h, w, gz, seed):
    images = np.random.default_rng(seed).integers(0, 256, (n, h, w)).astype(np.uint8)
    path = write(tmp_path_factory.mktemp("p") / "x", idx_content(images), gz=gz)
    np.testing.assert_array_equal(read_idx_images(path), images)


def test_idx_md5_of_uncompressed_content(tmp_path):
    labels = np.arange(10)
    content = idx_content(labels)
    for gz in (False, True):
        path = write(tmp_path / f"l{gz}", content, gz=gz)
        np.testing.assert_array_equal(read_idx_labels(path, expected_md5=md5(content)), labels)
        np.testing.assert_array_equal(
            read_idx_labels(path, expected_md5=md5(content).upper()), labels)


@pytest.mark.parametrize("gz", [False, True])
def test_idx_md5_mismatch(tmp_path, gz):
    path = write(tmp_path / "labels", idx_content(np.arange(10)), gz=gz)
    with pytest.raises(ValueError, match=r"labels.*md5.*expected 0{32}"):
        read_idx_labels(path, expected_md5="0" * 32)


@pytest.mark.parametrize("bad", ["abc", "g" * 32, 123, "0" * 33])
def test_idx_rejects_malformed_md5_parameter(tmp_path, bad):
    path = write(tmp_path / "labels", idx_content(np.arange(3)), gz=False)
    with pytest.raises(ValueError, match="expected_md5"):
        read_idx_labels(path, expected_md5=bad)


@pytest.mark.parametrize("gz", [False, True])
def test_idx_bad_magic(tmp_path, gz):
    images = np.zeros((2, 3, 3))
    path = write(tmp_path / "imgs", idx_content(images), gz=gz)
    with pytest.raises(ValueError, match=r"imgs.*bad idx magic number 2051.*expected 2049"):
        read_idx_labels(path)
    path = write(tmp_path / "lbls", idx_content(np.zeros(4)), gz=gz)
    with pytest.raises(ValueError, match=r"lbls.*bad idx magic number 2049.*expected 2051"):
        read_idx_images(path)
    # Right number of dimensions but wrong dtype code (0x0D = float).
    path = write(tmp_path / "floats", idx_content(images, magic=0x0D03), gz=gz)
    with pytest.raises(ValueError, match=r"floats.*bad idx magic"):
        read_idx_images(path)


@pytest.mark.parametrize("gz", [False, True])
def test_idx_truncated_and_trailing(tmp_path, gz):
    content = idx_content(np.ones((3, 4, 4)))
    path = write(tmp_path / "short", content[:-1], gz=gz)
    with pytest.raises(ValueError, match=r"short.*truncated.*\(3, 4, 4\).*48.*found 47"):
        read_idx_images(path)
    path = write(tmp_path / "long", content + b"\0", gz=gz)
    with pytest.raises(ValueError, match=r"long.*trailing data"):
        read_idx_images(path)
    path = write(tmp_path / "header", content[:10], gz=gz)
    with pytest.raises(ValueError, match=r"header.*too short.*10 bytes.*16"):
        read_idx_images(path)


def test_idx_wrong_dims(tmp_path):
    # Header says 5 labels, data holds 3.
    path = write(tmp_path / "lab", struct.pack(">II", 2049, 5) + bytes(3), gz=True)
    with pytest.raises(ValueError, match=r"lab.*truncated.*\(5,\).*5.*found 3"):
        read_idx_labels(path)
    path = write(tmp_path / "zero", struct.pack(">IIII", 2051, 2, 0, 4), gz=False)
    with pytest.raises(ValueError, match=r"zero.*dimensions must be >= 1"):
        read_idx_images(path)


def test_idx_corrupt_gzip(tmp_path):
    blob = gzip.compress(idx_content(np.arange(100)))
    path = tmp_path / "broken.gz"
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ValueError, match=r"broken\.gz.*corrupt gzip"):
        read_idx_labels(path)


def test_idx_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_idx_labels(tmp_path / "nope")


# ---------------------------------------------------------------------------- datasets


def test_dataset_name_parse():
    assert DatasetName.parse("Fashion_MNIST") is DatasetName.FASHION_MNIST
    assert DatasetName.parse(DatasetName.MNIST) is DatasetName.MNIST
    assert DatasetName("digits") is DatasetName.DIGITS
    for bad in ("cifar10", 3, None):
        with pytest.raises(ValueError, match=r"name must be one of .*'fashion-mnist'"):
            DatasetName.parse(bad)
    with pytest.raises(ValueError, match="name must be one of"):
        load_dataset("svhn")


def test_digits_loads_without_files(tmp_path):
    ds = load_dataset(DatasetName.DIGITS, data_dir=tmp_path / "ignored")
    assert ds.name is DatasetName.DIGITS and ds.num_classes == 10
    assert ds.train_images.shape == (data.DIGITS_TRAIN_SIZE, 8, 8)
    assert ds.test_images.shape == (1797 - data.DIGITS_TRAIN_SIZE, 8, 8)
    assert ds.train_images.dtype == np.uint8 and ds.train_labels.dtype == np.int64
    assert ds.train_images.min() == 0 and ds.train_images.max() == 255
    assert set(np.unique(np.concatenate([ds.train_labels, ds.test_labels]))) == set(range(10))
    # Rescaling is rint(v * 255 / 16) of sklearn's values, in sklearn's order.
    from sklearn.datasets import load_digits
    raw = load_digits()
    np.testing.assert_array_equal(ds.test_images[0],
                                  np.rint(raw.images[data.DIGITS_TRAIN_SIZE] * 255 / 16))
    np.testing.assert_array_equal(ds.test_labels, raw.target[data.DIGITS_TRAIN_SIZE:])
    assert not ds.train_images.flags.writeable  # frozen content


def test_data_package_does_not_import_torch():
    code = "import sys, dpkd_audit.data; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


def test_missing_files_message(tmp_path):
    (tmp_path / "mnist").mkdir()
    (tmp_path / "mnist" / "train-images-idx3-ubyte.gz").write_bytes(b"")
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("mnist", data_dir=tmp_path)
    msg = str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    assert "'mnist'" in msg
    assert str(tmp_path / "mnist") in msg and f"{tmp_path}:" in msg
    # The subfolder lacks three files (not the one present); all four named as needed.
    sub_line = next(line for line in msg.splitlines() if str(tmp_path / "mnist") in line)
    assert "train-images-idx3-ubyte" not in sub_line
    for stem in ("train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        assert stem in sub_line
    assert "--data-dir" in msg and DATA_DIR_ENV in msg


def test_missing_fashion_mentions_apt_and_every_dir(tmp_path, monkeypatch):
    env_dir, sys_dir = tmp_path / "env", tmp_path / "system"
    monkeypatch.setenv(DATA_DIR_ENV, str(env_dir))
    monkeypatch.setitem(SYSTEM_DATA_DIRS, DatasetName.FASHION_MNIST, (sys_dir,))
    assert dataset_search_dirs("fashion-mnist") == [env_dir / "fashion-mnist", env_dir, sys_dir]
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("fashion-mnist")
    msg = str(info.value)
    for d in (env_dir / "fashion-mnist", env_dir, sys_dir):
        assert f"{d}: does not exist" in msg
    assert "apt-get install -y dataset-fashion-mnist" in msg and "'fashion-mnist'" in msg


def test_missing_without_any_directory():
    with pytest.raises(DatasetNotFoundError, match=rf"no data_dir given, {DATA_DIR_ENV} not set"):
        load_dataset("mnist")


@pytest.mark.parametrize("layout", ["subfolder", "flat"])
@pytest.mark.parametrize("gz", [False, True])
def test_env_discovery_with_given_md5s(tmp_path, monkeypatch, layout, gz):
    target = tmp_path / "fashion-mnist" if layout == "subfolder" else tmp_path
    contents = fake_dataset_files(target, seed=1, gz=gz)
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    md5s = {stem: md5(c) for stem, c in contents.items()}
    ds = load_dataset("fashion-mnist", md5s=md5s)
    assert ds.name is DatasetName.FASHION_MNIST
    assert ds.train_images.shape == (12, 4, 4) and ds.test_labels.shape == (10,)
    expected = np.frombuffer(contents["t10k-images-idx3-ubyte"][16:], np.uint8)
    np.testing.assert_array_equal(ds.test_images.ravel(), expected)


def test_builtin_md5s_reject_fake_files_and_verify_false_skips(tmp_path):
    fake_dataset_files(tmp_path / "mnist", seed=2, gz=True)
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte.*md5.*6bbc9ace"):
        load_dataset("mnist", data_dir=tmp_path)
    ds = load_dataset("mnist", data_dir=tmp_path, verify=False)
    assert ds.n_train == 12 and ds.n_test == 10 and ds.image_shape == (4, 4)


def test_explicit_data_dir_wins_over_env(tmp_path, monkeypatch):
    fake_dataset_files(tmp_path / "env", seed=3, gz=False)
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "env"))
    (tmp_path / "explicit").mkdir()
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("mnist", data_dir=tmp_path / "explicit", verify=False)
    assert str(tmp_path / "env") not in str(info.value)
    assert load_dataset("mnist", verify=False).n_train == 12


def test_load_dataset_parameter_validation(tmp_path):
    with pytest.raises(ValueError, match="md5s keys"):
        load_dataset("mnist", data_dir=tmp_path, md5s={"train-images.gz": "0" * 32})
    with pytest.raises(ValueError, match="verify must be a bool"):
        load_dataset("mnist", data_dir=tmp_path, verify="no")


def test_mismatched_counts_and_bad_labels(tmp_path):
    contents = fake_dataset_files(tmp_path, seed=4, gz=False)
    write(tmp_path / "t10k-labels-idx1-ubyte", idx_content(np.zeros(9)), gz=False)
    with pytest.raises(ValueError, match=r"10 images but .*t10k-labels-idx1-ubyte holds 9"):
        load_dataset("mnist", data_dir=tmp_path, verify=False)
    write(tmp_path / "t10k-labels-idx1-ubyte", contents["t10k-labels-idx1-ubyte"][:8]
          + bytes([0] * 9 + [10]), gz=False)
    with pytest.raises(ValueError, match=r"test_labels must lie in \[0, 10\)"):
        load_dataset("mnist", data_dir=tmp_path, verify=False)


def test_dataset_constructor_validation():
    good = {"train_images": np.zeros((3, 2, 2), np.uint8), "train_labels": np.zeros(3, np.int64),
            "test_images": np.zeros((2, 2, 2), np.uint8), "test_labels": np.ones(2, np.int64),
            "name": "digits", "num_classes": 10}
    assert Dataset(**good).name is DatasetName.DIGITS
    cases = [
        ({"train_images": np.zeros((3, 2, 2), np.float32)}, "train_images"),
        ({"test_images": np.zeros((2, 4), np.uint8)}, "test_images"),
        ({"train_labels": np.zeros(4, np.int64)}, "train_labels"),
        ({"test_labels": np.full(2, -1, np.int64)}, "test_labels"),
        ({"test_images": np.zeros((2, 3, 2), np.uint8)}, "same image shape"),
        ({"num_classes": 1}, "num_classes"),
        ({"num_classes": 2.0}, "num_classes"),
        ({"name": "cifar10"}, "name"),
    ]
    for change, needle in cases:
        with pytest.raises(ValueError, match=needle):
            Dataset(**{**good, **change})


# ---------------------------------------------------------------------------- splits


@pytest.fixture(scope="module")
def digits():
    return _load_digits()


def test_rknn_splits_structure(digits):
    s = rknn_splits(digits, seed=7)
    n_test = digits.n_test
    assert s.public_indices.size == n_test // 2
    assert s.student_test_indices.size == n_test - n_test // 2
    assert np.intersect1d(s.public_indices, s.student_test_indices).size == 0
    np.testing.assert_array_equal(
        np.sort(np.concatenate([s.public_indices, s.student_test_indices])), np.arange(n_test))
    np.testing.assert_array_equal(s.private_indices, np.arange(digits.n_train))
    np.testing.assert_array_equal(s.private_labels, digits.train_labels)
    np.testing.assert_array_equal(s.public_images, digits.test_images[s.public_indices])
    np.testing.assert_array_equal(s.public_labels, digits.test_labels[s.public_indices])
    np.testing.assert_array_equal(s.student_test_labels,
                                  digits.test_labels[s.student_test_indices])
    assert s.student_test_images.shape == (s.student_test_indices.size, 8, 8)
    assert s.private_images.shape == digits.train_images.shape
    # Exactly the permutation of numpy's default_rng(seed) (NOTES.md scheme).
    perm = np.random.default_rng(7).permutation(n_test)
    np.testing.assert_array_equal(s.public_indices, perm[: n_test // 2])
    assert not s.public_indices.flags.writeable


def test_rknn_splits_deterministic_and_seed_dependent(digits):
    a, b, c = (rknn_splits(digits, seed=s) for s in (0, 0, 1))
    np.testing.assert_array_equal(a.public_indices, b.public_indices)
    np.testing.assert_array_equal(a.student_test_indices, b.student_test_indices)
    assert not np.array_equal(a.public_indices, c.public_indices)
    assert not np.array_equal(np.sort(a.public_indices), np.sort(c.public_indices))


@given(seed=st.integers(0, 2**32), public_size=st.integers(1, 596))
@settings(max_examples=30, deadline=None)
def test_rknn_splits_public_size_property(digits, seed, public_size):
    s = rknn_splits(digits, seed=seed, public_size=public_size)
    assert s.public_indices.size == public_size
    both = np.concatenate([s.public_indices, s.student_test_indices])
    assert np.unique(both).size == digits.n_test == both.size


def test_rknn_splits_validation(digits):
    for bad in (-1, 1.5, None, True):
        with pytest.raises(ValueError, match="seed"):
            rknn_splits(digits, seed=bad)
    for bad in (0, digits.n_test, -3, 2.0):
        with pytest.raises(ValueError, match="public_size"):
            rknn_splits(digits, seed=0, public_size=bad)
    with pytest.raises(ValueError, match="dataset"):
        rknn_splits("digits", seed=0)


def test_splits_constructor_validation(digits):
    s = rknn_splits(digits, seed=0)
    base = {"dataset": digits, "seed": 0, "private_indices": s.private_indices,
            "public_indices": s.public_indices, "student_test_indices": s.student_test_indices}
    cases = [
        ({"public_indices": np.array([0, 1]), "student_test_indices": np.array([1, 2])},
         "disjoint"),
        ({"public_indices": np.array([0, digits.n_test])}, "public_indices"),
        ({"private_indices": np.array([0, 0])}, "private_indices"),
        ({"student_test_indices": np.array([0.5])}, "student_test_indices"),
        ({"seed": -2}, "seed"),
    ]
    for change, needle in cases:
        with pytest.raises(ValueError, match=needle):
            data.Splits(**{**base, **change})


def test_idx_empty_and_tiny_files(tmp_path):
    for content in (b"", b"\x00\x00\x08"):
        path = write(tmp_path / f"tiny{len(content)}", content, gz=False)
        with pytest.raises(ValueError, match=r"tiny.*too short"):
            read_idx_labels(path)


def test_idx_gzip_bomb_is_refused_without_inflating(tmp_path):
    import tracemalloc

    # A header declaring 5 labels, followed by 200 MB of zeros that compress to ~200 KB.
    path = tmp_path / "bomb.gz"
    with gzip.open(path, "wb") as fh:
        fh.write(struct.pack(">II", 2049, 5))
        block = bytes(1 << 20)
        for _ in range(200):
            fh.write(block)
    tracemalloc.start()
    with pytest.raises(ValueError, match=r"bomb\.gz.*trailing data"):
        read_idx_labels(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 10 * (1 << 20)  # never inflated past the declared size


def test_idx_header_beyond_the_size_limit(tmp_path):
    from dpkd_audit.data.idx import MAX_IDX_BYTES

    path = write(tmp_path / "huge", struct.pack(">IIII", 2051, 60000, 28000, 28000), gz=True)
    with pytest.raises(ValueError, match=rf"huge.*more than the {MAX_IDX_BYTES}"):
        read_idx_images(path)


def test_idx_unreadable_path_names_the_file(tmp_path):
    folder = tmp_path / "adir"
    folder.mkdir()
    with pytest.raises(ValueError, match=r"adir.*cannot be read"):
        read_idx_labels(folder)
