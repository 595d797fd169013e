"""A dataset loaded once for a pipeline run or sweep, timed as the ``data`` stage."""

from __future__ import annotations

import dataclasses
import os

from dpkd_audit.data import Dataset, DatasetName, load_dataset
from dpkd_audit.pipelines.common.progress import StageTimer

__all__ = ["LoadedData", "load_generative_data"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoadedData:
    """A dataset loaded once (``seconds``: the ``data`` stage)."""

    dataset: Dataset = dataclasses.field(repr=False)
    seconds: float


def load_generative_data(dataset: DatasetName, *, method: str,
                         data_dir: str | os.PathLike | None = None,
                         progress: bool = False) -> LoadedData:
    """Load ``dataset`` for a pipeline with a DAFL generator (image sides multiples of 4).

    Raises:
        DatasetNotFoundError: If the files are missing.
        ValueError: If the images are not a multiple of 4 on each side (the generator's
            upsampling), naming ``method``.
    """
    timer = StageTimer(verbose=progress)
    with timer.stage("data"):
        loaded = load_dataset(dataset, data_dir=data_dir)
    if any(side % 4 for side in loaded.image_shape):
        raise ValueError(f"dataset {DatasetName(dataset).value!r} has {loaded.image_shape} "
                         f"images; {method}'s generator needs sides that are multiples of 4")
    return LoadedData(dataset=loaded, seconds=timer.seconds["data"])
