"""Where independent pieces of work run: in this process, or as Ray tasks on a cluster.

:func:`map_unordered` runs ``fn`` on each item and yields ``(index, result)`` as each piece
finishes. The local executor runs them in order in this process; the Ray executor
(``pip install -e ".[distributed]"``) submits one task per item with the resources declared
(:class:`ExecutorConfig`), and yields in completion order. A task whose worker dies (killed,
out of memory, node lost) is retried by Ray up to ``max_retries`` times; a task that still fails,
or raises, stops the iteration with a :class:`TaskFailedError` naming the item: nothing is
dropped silently, and the results yielded before it are the caller's to keep.

No torch here (the ``audit`` layer uses it); Ray is imported only when the Ray executor is used.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from dpkd_audit import _validate

__all__ = ["ExecutorConfig", "ExecutorKind", "TaskFailedError", "apply_threads",
           "capture_threads", "map_unordered", "put", "ray_available", "resolve", "submit"]


class ExecutorKind(enum.StrEnum):
    """Where the work runs."""

    #: In this process, one item after the other.
    LOCAL = "local"
    #: Ray tasks: a local Ray instance, or the cluster at ``address``.
    RAY = "ray"


class TaskFailedError(RuntimeError):
    """A piece of work failed (after Ray's retries, for a dead worker)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExecutorConfig:
    """How to run independent pieces of work.

    Attributes:
        kind: :class:`ExecutorKind`.
        address: Ray only: the cluster to join (``"auto"``, ``"ray://host:10001"``); ``None``
            starts a local Ray instance (or reuses one this process started).
        max_retries: Ray only: how often a task whose worker died is run again (>= 0).
        num_cpus: Ray only: CPUs each task declares (> 0).
        num_gpus: Ray only: GPUs each task declares (>= 0; 1 for ``--device cuda``).
        local_cpus: Ray only, local instance: CPUs it may use (>= 1; ``None``: all).
        threads: Ray only: the OpenMP / BLAS threads of each task's worker (>= 1; ``None``:
            Ray's default, one per declared CPU). Floating-point results of multi-threaded
            kernels (k-means, distances, convolutions) can depend on the thread count, so a
            sweep that must reproduce a local run replays the local counts per library
            instead (:func:`capture_threads`, :func:`apply_threads`).
    """

    kind: ExecutorKind = ExecutorKind.LOCAL
    address: str | None = None
    max_retries: int = 2
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    local_cpus: int | None = None
    threads: int | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", ExecutorKind(self.kind))
        except ValueError:
            allowed = ", ".join(repr(k.value) for k in ExecutorKind)
            raise ValueError(f"executor must be one of {allowed}; got {self.kind!r}") from None
        _validate.check_int("max_retries", self.max_retries, minimum=0)
        _validate.check_positive("num_cpus", self.num_cpus)
        _validate.check_nonnegative("num_gpus", self.num_gpus)
        for name in ("local_cpus", "threads"):
            if getattr(self, name) is not None:
                _validate.check_int(name, getattr(self, name), minimum=1)
        if self.address is not None and self.kind is not ExecutorKind.RAY:
            raise ValueError(f"address applies to the Ray executor only; got address="
                             f"{self.address!r} with executor={self.kind.value!r}")
        if self.kind is ExecutorKind.RAY and not ray_available():
            raise ValueError("executor='ray' needs Ray: pip install -e \".[distributed]\" "
                             "(or pip install ray)")


def ray_available() -> bool:
    """Whether Ray can be imported."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


#: Seconds to wait for a Ray cluster's address to accept a connection before giving up.
CONNECT_TIMEOUT_S = 10.0


def _check_reachable(address: str) -> None:
    """Refuse, within :data:`CONNECT_TIMEOUT_S`, a ``host:port`` no Ray cluster listens on.

    ``ray.init(address=...)`` waits minutes for an address that never answers (issue 33:
    no answer in 180 s for ``127.0.0.1:1``). ``auto`` and addresses without a port are left
    to Ray.
    """
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if address == "auto" or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)),
                                 timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ValueError(f"cannot reach a Ray cluster at {address!r} within "
                         f"{CONNECT_TIMEOUT_S:g} s ({exc.strerror or exc}); start one "
                         f"(`ray start --head`) or check --address") from None


def _ensure_ray(config: ExecutorConfig) -> Any:
    import ray

    if not ray.is_initialized():
        try:
            if config.address is not None:
                _check_reachable(config.address)
                ray.init(address=config.address, logging_level="ERROR")
            else:
                ray.init(num_cpus=config.local_cpus or os.cpu_count(), include_dashboard=False,
                         logging_level="ERROR")
        except ValueError:
            raise
        except Exception as exc:  # Ray's own start-up errors: one clear line, not a traceback
            where = config.address or "a local instance"
            raise ValueError(f"Ray could not start or join {where}: {type(exc).__name__}: "
                             f"{exc}") from exc
    return ray


def check_workers(workers: int, config: ExecutorConfig) -> int:
    """``workers`` parallel parts, refused beyond the CPUs the executor offers.

    Local executor: any count (the parts run one after another). Ray: at most the CPUs of the
    local instance (``local_cpus`` or this machine's) or, with ``address``, of the cluster
    (asked after joining it). Issue 33: 1,600 workers on a 2-core machine made Ray fail at
    start-up with a raw exception.

    Raises:
        ValueError: Naming the count and the CPUs available.
    """
    workers = _validate.check_int("workers", workers, minimum=1)
    if config.kind is ExecutorKind.LOCAL:
        return workers
    if config.address is None:
        cpus = config.local_cpus or os.cpu_count() or 1
        where = "this machine's local Ray instance"
    else:
        ray = _ensure_ray(config)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        where = f"the Ray cluster at {config.address!r}"
    if workers > cpus:
        raise ValueError(f"workers must be at most the {cpus} CPUs of {where}; got {workers} "
                         f"(more parts than CPUs only queue)")
    return workers


def put(value: Any, config: ExecutorConfig) -> Any:
    """``value`` in Ray's object store (shared by every task), or ``value`` itself locally."""
    if config.kind is ExecutorKind.LOCAL:
        return value
    return _ensure_ray(config).put(value)


def _remote(fn: Callable[..., Any], config: ExecutorConfig) -> Any:
    options: dict[str, Any] = {"num_cpus": config.num_cpus, "num_gpus": config.num_gpus,
                               "max_retries": config.max_retries}
    if config.threads is not None:
        options["runtime_env"] = {"env_vars": dict.fromkeys(
            ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"),
            str(config.threads))}
    return _ensure_ray(config).remote(**options)(fn)


def capture_threads() -> tuple[tuple[str, int], ...]:
    """Thread counts of this process per native library (and torch's, numba's), to replay.

    Multi-threaded kernels (BLAS products, OpenMP k-means, faiss searches, torch) round
    differently with another thread count, and a process can hold several OpenMP and BLAS
    libraries at different counts (torch's own libgomp after ``torch.set_num_threads``, faiss's,
    numpy's and scipy's OpenBLAS): environment variables cannot reproduce that, so each library
    is named by its file and set in the worker by :func:`apply_threads`.
    """
    import sys

    from threadpoolctl import ThreadpoolController

    state = [(f"lib:{os.path.basename(lib.filepath)}", int(lib.num_threads))
             for lib in ThreadpoolController().lib_controllers]
    if "torch" in sys.modules:
        state.append(("torch", int(sys.modules["torch"].get_num_threads())))
    if "numba" in sys.modules:
        state.append(("numba", int(sys.modules["numba"].get_num_threads())))
    return tuple(state)


def apply_threads(state: tuple[tuple[str, int], ...]) -> None:
    """In a worker, after its libraries are loaded: the thread counts of :func:`capture_threads`."""
    import sys

    from threadpoolctl import ThreadpoolController

    wanted = dict(state)
    if "torch" in wanted:
        import torch

        torch.set_num_threads(wanted["torch"])
    if "numba" in wanted and "numba" in sys.modules:
        sys.modules["numba"].set_num_threads(min(wanted["numba"],
                                                 sys.modules["numba"].config.NUMBA_NUM_THREADS))
    for lib in ThreadpoolController().lib_controllers:
        count = wanted.get(f"lib:{os.path.basename(lib.filepath)}")
        if count is not None:
            lib.set_num_threads(count)


def submit(fn: Callable[..., Any], *args: Any, config: ExecutorConfig) -> Any:
    """``fn(*args)`` as a Ray task: a reference to its result (locally: the result itself).

    The result stays in the object store: pass the reference inside an item of
    :func:`map_unordered` and :func:`resolve` it in the task.
    """
    if config.kind is ExecutorKind.LOCAL:
        return fn(*args)
    return _remote(fn, config).remote(*args)


def resolve(value: Any) -> Any:
    """Inside a task: the object behind a reference from :func:`submit` (else ``value``)."""
    try:
        import ray
    except ImportError:  # pragma: no cover - only Ray makes references
        return value
    return ray.get(value) if isinstance(value, ray.ObjectRef) else value


def map_unordered(fn: Callable[..., Any], items: Sequence[Any], *, config: ExecutorConfig,
                  shared: Any = None, describe: Callable[[Any], str] = repr,
                  ) -> Iterator[tuple[int, Any]]:
    """``(i, fn(items[i], shared))`` for each item, as each finishes.

    Args:
        fn: A module-level function (Ray pickles it by reference) of ``(item, shared)``.
        items: The pieces of work.
        config: Where they run.
        shared: Passed to every call; with Ray, put it in the object store first (:func:`put`)
            so that it travels once.
        describe: Names an item in errors.

    Raises:
        TaskFailedError: When a piece raises, or its worker died more than ``max_retries``
            times; the message names it and the cause.
    """
    if config.kind is ExecutorKind.LOCAL:
        for i, item in enumerate(items):
            try:
                yield i, fn(item, shared)
            except (ValueError, TaskFailedError):
                raise
            except Exception as exc:  # the same report as a failed Ray task
                raise TaskFailedError(f"{describe(item)} failed: {type(exc).__name__}: "
                                      f"{exc}") from exc
        return
    ray = _ensure_ray(config)
    remote = _remote(fn, config)
    pending = {remote.remote(item, shared): i for i, item in enumerate(items)}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        ref = done[0]
        i = pending.pop(ref)
        try:
            result = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            for other in pending:
                ray.cancel(other)
            cause = exc.cause if getattr(exc, "cause", None) is not None else exc
            if isinstance(cause, ValueError):
                raise ValueError(f"{describe(items[i])}: {cause}") from None
            raise TaskFailedError(f"{describe(items[i])} failed: {type(cause).__name__}: "
                                  f"{cause}") from None
        except ray.exceptions.RayError as exc:  # worker died more than max_retries times
            for other in pending:
                ray.cancel(other)
            raise TaskFailedError(f"{describe(items[i])} failed after {config.max_retries} "
                                  f"retries: {type(exc).__name__}: {str(exc)[:500]}") from None
        yield i, result
