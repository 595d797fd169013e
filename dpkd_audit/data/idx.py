"""Reader for the idx file format of MNIST and Fashion-MNIST (numpy only).

Format (LeCun, Cortes, Burges, "The MNIST database of handwritten digits", file-format section
of the original MNIST page; the same layout is used by Fashion-MNIST, Xiao et al. 2017,
arXiv:1708.07747): a big-endian header ``0x00 0x00 <dtype> <ndim>`` (read as one unsigned 32-bit
integer, the *magic number*), then ``ndim`` big-endian unsigned 32-bit dimension sizes, then the
data in C order. Labels are ``idx1`` with unsigned bytes (magic ``0x00000801`` = 2049), images
are ``idx3`` with unsigned bytes (magic ``0x00000803`` = 2051): count, rows, columns.

Files may be gzip-compressed or not; compression is detected from the gzip magic bytes
``1f 8b`` (RFC 1952, section 2.3.1), never from the file name. The optional md5 check is on the
*uncompressed* content, because re-packaged archives (e.g. Debian's Fashion-MNIST) rewrite the
gzip header and so change the md5 of the ``.gz`` file while the data stay identical.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import re
import zlib
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "IDX1_UBYTE_MAGIC",
    "IDX3_UBYTE_MAGIC",
    "MAX_IDX_BYTES",
    "idx_bytes",
    "md5_hex",
    "read_idx_images",
    "read_idx_labels",
]

#: Magic number of an idx1 file of unsigned bytes (labels).
IDX1_UBYTE_MAGIC = 2049
#: Magic number of an idx3 file of unsigned bytes (images).
IDX3_UBYTE_MAGIC = 2051

_GZIP_MAGIC = b"\x1f\x8b"
_MD5_RE = re.compile(r"[0-9a-fA-F]{32}")


def md5_hex(content: bytes) -> str:
    """Return the lower-case hexadecimal md5 digest of ``content`` (integrity check only)."""
    return hashlib.md5(content, usedforsecurity=False).hexdigest()


def _check_md5_param(expected_md5: str | None) -> str | None:
    if expected_md5 is None:
        return None
    if not isinstance(expected_md5, str) or not _MD5_RE.fullmatch(expected_md5):
        raise ValueError(
            "expected_md5 must be None or a string of 32 hexadecimal digits; "
            f"got {expected_md5!r}"
        )
    return expected_md5.lower()


#: Largest idx file (header + data, uncompressed) the reader accepts: 1 GiB (MNIST's training
#: images are 47 MB). The size is read from the header before any data is decompressed.
MAX_IDX_BYTES = 1 << 30

# Bytes per element of each idx dtype code (the third byte of the magic number).
_ITEM_SIZE = {0x08: 1, 0x09: 1, 0x0B: 2, 0x0C: 4, 0x0D: 4, 0x0E: 8}


def idx_bytes(path: str | os.PathLike[str], *, expected_md5: str | None = None) -> bytes:
    """Return the uncompressed content of an idx file, gunzipping it if it is gzip-compressed.

    The header is read first and only the size it declares (plus one byte, to detect trailing
    data) is read or decompressed, so a gzip stream that inflates to gigabytes is refused
    without inflating it.

    Args:
        path: The file (``.gz`` or not; the gzip magic bytes decide, not the name).
        expected_md5: If given, the md5 (32 hex digits) the *uncompressed* content must have.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If the file cannot be read (naming it and the cause), the gzip stream is
            corrupt, the header declares more than ``MAX_IDX_BYTES``, or the md5 differs from
            ``expected_md5`` (the message names the file, the expected and the computed digest).
    """
    expected = _check_md5_param(expected_md5)
    path = Path(path)
    try:
        with path.open("rb") as raw:
            compressed = raw.read(2) == _GZIP_MAGIC
            raw.seek(0)
            stream = gzip.GzipFile(fileobj=raw) if compressed else raw
            content = _read_declared(stream, path)
    except FileNotFoundError:
        raise
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ValueError(f"{path}: corrupt gzip stream ({exc})") from exc
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    if expected is not None:
        actual = md5_hex(content)
        if actual != expected:
            raise ValueError(
                f"{path}: md5 of the uncompressed content is {actual}, expected {expected} "
                "(file damaged, truncated or not the expected dataset file)"
            )
    return content


def _read_declared(stream: Any, path: Path) -> bytes:
    """The header and at most the data it declares plus one byte (see :func:`idx_bytes`)."""
    head = stream.read(4)
    if len(head) < 4:
        return head
    ndim, item = head[3], _ITEM_SIZE.get(head[2], 1)
    dims = stream.read(4 * ndim)
    if len(dims) < 4 * ndim:
        return head + dims
    size = item * math.prod(int.from_bytes(dims[4 * i:4 * i + 4], "big") for i in range(ndim))
    if 4 + 4 * ndim + size > MAX_IDX_BYTES:
        raise ValueError(f"{path}: the idx header declares {size} data bytes, more than the "
                         f"{MAX_IDX_BYTES} this reader accepts (not an MNIST-style file?)")
    return head + dims + stream.read(size + 1)


def _parse(content: bytes, path: Path, magic: int, kind: str) -> np.ndarray:
    ndim = magic & 0xFF
    header_len = 4 + 4 * ndim
    if len(content) >= 4:
        found = int.from_bytes(content[:4], "big")
        if found != magic:
            raise ValueError(
                f"{path}: bad idx magic number {found} (0x{found:08x}); expected {magic} "
                f"(0x{magic:08x}) for {kind}"
            )
    if len(content) < header_len:
        raise ValueError(
            f"{path}: too short for an {kind} idx header: {len(content)} bytes, "
            f"need at least {header_len}"
        )
    dims = tuple(int(d) for d in np.frombuffer(content, dtype=">u4", count=ndim, offset=4))
    if ndim == 3 and (dims[1] == 0 or dims[2] == 0):
        raise ValueError(f"{path}: image dimensions must be >= 1; got {dims[1]}x{dims[2]}")
    expected_len = int(np.prod(dims, dtype=np.int64))
    actual_len = len(content) - header_len
    if actual_len != expected_len:
        what = "truncated" if actual_len < expected_len else "has trailing data"
        raise ValueError(
            f"{path}: {what}: header dimensions {dims} need {expected_len} data bytes, "
            f"found {actual_len}"
        )
    return np.frombuffer(content, dtype=np.uint8, offset=header_len).reshape(dims).copy()


def read_idx_labels(path: str | os.PathLike[str], *,
                    expected_md5: str | None = None) -> np.ndarray:
    """Read an idx1 label file (magic 2049) into an ``int64`` array of shape ``(n,)``.

    Args:
        path: The file, gzip-compressed or not.
        expected_md5: Optional md5 of the uncompressed file (see :func:`idx_bytes`).

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: Naming the file, on a bad magic number, a size that does not match the
            header, a corrupt gzip stream or an md5 mismatch.
    """
    path = Path(path)
    content = idx_bytes(path, expected_md5=expected_md5)
    return _parse(content, path, IDX1_UBYTE_MAGIC, "labels (idx1, unsigned byte)").astype(
        np.int64)


def read_idx_images(path: str | os.PathLike[str], *,
                    expected_md5: str | None = None) -> np.ndarray:
    """Read an idx3 image file (magic 2051) into a ``uint8`` array of shape ``(n, rows, cols)``.

    Args:
        path: The file, gzip-compressed or not.
        expected_md5: Optional md5 of the uncompressed file (see :func:`idx_bytes`).

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: Naming the file, on a bad magic number, a size that does not match the
            header, a corrupt gzip stream or an md5 mismatch.
    """
    path = Path(path)
    content = idx_bytes(path, expected_md5=expected_md5)
    return _parse(content, path, IDX3_UBYTE_MAGIC, "images (idx3, unsigned byte)")
