"""Per-stage wall-clock seconds of every committed sweep, and the slowest stages (issue 37).

Reads ``reports/<method>/<sweep>/results.jsonl`` (the records' ``seconds``: one entry per
pipeline stage). A stage that several runs of a sweep share (DGD's ensemble, generator and VAE;
the records list them in ``shared_stages`` or repeat the same figure) is counted once per
sweep: its largest value. Prints one Markdown row per sweep (stages sorted by seconds, the
sweep's total) and then the slowest stages across the project, with the device each ran on.

Usage:
    python benchmarks/stage_seconds.py [--reports reports] [--top 3]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any


def sweep_stages(path: Path) -> tuple[dict[str, float], set[str], int]:
    """Stage -> seconds for one sweep (shared stages once), the devices, the record count."""
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
    stages: dict[str, float] = defaultdict(float)
    for name in {k for run in per_run for k in run}:
        values = [run[name] for run in per_run if name in run]
        # a shared stage is the same work reported by every run that used it: count it once
        once = name in shared or len(set(values)) == 1 < len(values)
        stages[name] = max(values) if once else sum(values)
    return dict(stages), devices, len(per_run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reports", default="reports")
    parser.add_argument("--top", type=int, default=3)
    args = parser.parse_args()
    everything: list[tuple[float, str, str, str]] = []
    print("| sweep | runs | device | stages, slowest first (s) | total (s) |")
    print("|---|---:|---|---|---:|")
    for path in sorted(Path(args.reports).glob("*/*/results.jsonl")):
        sweep = f"{path.parent.parent.name}/{path.parent.name}"
        stages, devices, runs = sweep_stages(path)
        if not stages:
            continue
        device = ", ".join(sorted(devices)) or "-"
        ordered = sorted(stages.items(), key=lambda kv: -kv[1])
        cells = ", ".join(f"{name} {seconds:.0f}" for name, seconds in ordered)
        print(f"| {sweep} | {runs} | {device} | {cells} | {sum(stages.values()):.0f} |")
        everything.extend((seconds, sweep, name, device) for name, seconds in ordered)
    everything.sort(reverse=True)
    print(f"\nThe {args.top} slowest stages across the committed sweeps:")
    for seconds, sweep, name, device in everything[:args.top]:
        print(f"  {seconds:8.1f} s  {name:<14} {sweep}  ({device})")


if __name__ == "__main__":
    main()
