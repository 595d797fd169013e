"""The limits of the integer flags of ``dpkd run``, ``dpkd sweep`` and ``dpkd audit-run``.

A size reaches torch or numpy as an allocation: ``dpkd audit-run dpdfd --canaries 10**12`` asked
for 4 TB after loading the data, ``dpkd run dpdfd --stage-size 10**12`` after training the
teacher and the generator. :func:`check_size_flags` runs right after parsing, before any data
is loaded or anything is written, and refuses every integer flag above its limit (stated once,
in :mod:`dpkd_audit.pipelines.limits`, and checked by the configs as well) with one line naming
the flag, the limit and what it protects. Lower bounds stay with the flags' types and the
configs; limits that depend on the data (clusters within the public split, canaries within half
of the private split) are checked when the data is loaded, before any training.

``tests/test_cli_hostile_inputs.py`` checks that every integer flag of these commands is in
:func:`size_flags`, so that a new flag cannot come without a limit.
"""

from __future__ import annotations

import argparse

__all__ = ["LIMITED_COMMANDS", "MAX_AUDIT_RUNS", "check_size_flags", "size_flags"]

#: The commands whose integer flags :func:`check_size_flags` bounds.
LIMITED_COMMANDS: frozenset[str] = frozenset({"run", "sweep", "audit-run"})

#: Most runs per side `dpkd audit-run rknn` accepts (50 x its default).
MAX_AUDIT_RUNS = 1_000_000

_SEED = "a seed of numpy and torch"
_EPOCHS = "epochs of one training"
_STEPS = "optimisation steps of one training"


def size_flags() -> dict[str, tuple[str, int, str]]:
    """Integer flag (its ``dest``) -> (the flag, its largest value, what the limit protects).

    A flag taking a comma-separated list (``--seeds``, ``dpkd sweep dgd --queries``) is bounded
    in each of its values. Built on call: :mod:`dpkd_audit.pipelines.limits` is imported by the
    commands that run pipelines only (``dpkd budget`` and ``dpkd audit`` never load the
    pipelines package).
    """
    from dpkd_audit.pipelines import limits as lim

    return {
        "seed": ("--seed", lim.MAX_SEED, _SEED),
        "seeds": ("--seeds", lim.MAX_SEED, _SEED),
        "split_seed": ("--split-seed", lim.MAX_SEED, _SEED),
        "audit_seed": ("--audit-seed", lim.MAX_SEED, _SEED),
        "clusters": ("--clusters", lim.MAX_CLUSTERS,
                     "k-means queries; at most the public split too"),
        "k": ("--k", lim.MAX_CLUSTERS, "nearest queries per record; at most --clusters too"),
        "public_size": ("--public-size", lim.MAX_PUBLIC_SIZE, "at most the test split too"),
        "student_epochs": ("--student-epochs", lim.MAX_EPOCHS, _EPOCHS),
        "encoder_epochs": ("--encoder-epochs", lim.MAX_EPOCHS, _EPOCHS),
        "teacher_epochs": ("--teacher-epochs", lim.MAX_EPOCHS, _EPOCHS),
        "self_training_rounds": ("--self-training-rounds", lim.MAX_ROUNDS,
                                 "rounds of self-training"),
        "stages": ("--stages", lim.MAX_STAGES, "stages of one run"),
        "stage_size": ("--stage-size", lim.MAX_STAGE_SIZE,
                       "a stage's synthetic images are held at once"),
        "generator_steps": ("--generator-steps", lim.MAX_STEPS, _STEPS),
        "ensemble_steps": ("--ensemble-steps", lim.MAX_STEPS, _STEPS),
        "student_steps": ("--student-steps", lim.MAX_STEPS, _STEPS),
        "teachers": ("--teachers", lim.MAX_TEACHERS, "teachers trained as one batched model"),
        "synthetic": ("--synthetic", lim.MAX_SYNTHETIC, "the synthetic set is held at once"),
        "queries": ("--queries", lim.MAX_QUERIES, "each queries one synthetic image"),
        "canaries": ("--canaries", lim.MAX_CANARIES,
                     "canaries of one run; mislabeled ones at most half the private split too"),
        "guesses": ("--guesses", lim.MAX_CANARIES, "at most --canaries"),
        "guesses_out": ("--guesses-out", lim.MAX_CANARIES, "at most --canaries"),
        "runs": ("--runs", MAX_AUDIT_RUNS, "each run is a whole release path and its outputs "
                                           "are kept for the bound: the default 20,000 take "
                                           "minutes"),
    }


def _shown(value: int) -> str:
    """``value`` with thousands separators, cut to 40 characters (a flag may hold 4,300 digits)."""
    text = f"{value:,}"
    return text if len(text) <= 40 else text[:37] + "..."


def check_size_flags(args: argparse.Namespace) -> None:
    """Refuse any integer flag of ``run`` / ``sweep`` / ``audit-run`` above its limit.

    Raises:
        ValueError: ``"--FLAG must be at most LIMIT (WHY); got VALUE"`` for the first one.
    """
    if getattr(args, "command", None) not in LIMITED_COMMANDS:
        return
    for dest, (flag, maximum, why) in size_flags().items():
        value = getattr(args, dest, None)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, int) and not isinstance(item, bool) and item > maximum:
                raise ValueError(f"{flag} must be at most {maximum:,} ({why}); got "
                                 f"{_shown(item)}")
