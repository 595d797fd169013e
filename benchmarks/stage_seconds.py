"""Per-stage wall-clock seconds of every committed sweep, and the slowest stages (issue 37).

Reads ``reports/<method>/<sweep>/results.jsonl`` (the records' ``seconds``: one entry per
pipeline stage). A stage that several runs of a sweep share (DGD's ensemble, generator and VAE;
the records list them in ``shared_stages`` or repeat the same figure) is counted once per
sweep. Prints one Markdown row per sweep (each stage's slowest single execution, slowest first;
stages under a second left out; the sweep's total) and then the slowest single stages across
the project, with the device each ran on.

Usage:
    python benchmarks/stage_seconds.py [--reports reports] [--top 3]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def sweep_stages(path: Path) -> tuple[dict[str, tuple[float, float]], set[str], int]:
    """Stage -> (its slowest single execution, its seconds summed over the sweep), devices, runs.

    A stage the runs share is one execution (the sum counts it once).
    """
    per_run: list[dict[str, float]] = []
    shared: set[str] = set()
    devices: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record: dict[str, Any] = json.loads(line)
        seconds = record.get("seconds") or {}
        per_run.append({k: float(v) for k, v in seconds.items()
                        if k != "total" and isinstance(v, int | float)})
        shared.update(record.get("shared_stages") or [])
        if record.get("device"):
            devices.add(str(record["device"]))
    stages: dict[str, tuple[float, float]] = {}
    for name in {k for run in per_run for k in run}:
        values = [run[name] for run in per_run if name in run]
        # a shared stage is the same work reported by every run that used it: count it once
        once = name in shared or len(set(values)) == 1 < len(values)
        stages[name] = (max(values), max(values) if once else sum(values))
    return stages, devices, len(per_run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reports", default="reports")
    parser.add_argument("--top", type=int, default=3)
    args = parser.parse_args()
    everything: list[tuple[float, str, str, str]] = []
    print("| sweep | runs | device | stages: slowest single run, slowest first (s) | "
          "sweep total (s) |")
    print("|---|---:|---|---|---:|")
    for path in sorted(Path(args.reports).glob("*/*/results.jsonl")):
        sweep = f"{path.parent.parent.name}/{path.parent.name}"
        stages, devices, runs = sweep_stages(path)
        if not stages:
            continue
        device = ", ".join(sorted(devices)) or "-"
        ordered = sorted(stages.items(), key=lambda kv: -kv[1][0])
        cells = ", ".join(f"{name} {single:.0f}" for name, (single, _) in ordered
                          if single >= 1)
        total = sum(summed for _, summed in stages.values())
        print(f"| {sweep} | {runs} | {device} | {cells} | {total:.0f} |")
        everything.extend((single, sweep, name, device) for name, (single, _) in ordered)
    everything.sort(reverse=True)
    print(f"\nThe {args.top} slowest single stages across the committed sweeps:")
    for seconds, sweep, name, device in everything[:args.top]:
        print(f"  {seconds:8.1f} s  {name:<14} {sweep}  ({device})")


if __name__ == "__main__":
    main()
