"""Dataset loaders (sklearn digits, MNIST, Fashion-MNIST) and deterministic splits (numpy only).

Example:
    >>> from dpkd_audit.data import load_dataset, rknn_splits
    >>> ds = load_dataset("digits")
    >>> splits = rknn_splits(ds, seed=0)
    >>> splits.public_images.shape[1:]
    (8, 8)
"""

from dpkd_audit.data.datasets import (
    DATA_DIR_ENV,
    DIGITS_TRAIN_SIZE,
    FASHION_MNIST_MD5,
    IDX_FILES,
    MNIST_MD5,
    SYSTEM_DATA_DIRS,
    Dataset,
    DatasetName,
    DatasetNotFoundError,
    dataset_search_dirs,
    load_dataset,
)
from dpkd_audit.data.idx import read_idx_images, read_idx_labels
from dpkd_audit.data.splits import Splits, rknn_splits

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
    "Splits",
    "dataset_search_dirs",
    "load_dataset",
    "read_idx_images",
    "read_idx_labels",
    "rknn_splits",
]
