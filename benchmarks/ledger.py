"""Ledger cost and robustness figures (issue 10), on the machine's own file system.

Run: ``python benchmarks/ledger.py [--dir DIR]``. Prints:

1. seconds per charge of a file-backed ledger (each charge one durable SQLite transaction), and
   seconds to open and fully verify a ledger of 520 charges;
2. random damage: 1-3 random bit flips anywhere in a ledger of 24 charges, 2,000 trials without
   a key and 2,000 with one; each trial is refused (``LedgerError``), or opens with exactly the
   same charges and spent epsilon; anything else (a raw error, another state) is counted as a
   failure;
3. kill -9 at random moments of a process charging in a loop, then ``Ledger.open(read_only=
   True)``: how many reopenings failed, how many kills left a hot journal, and whether every
   acknowledged charge was found;
4. (``--scaling N``, issue 33) milliseconds per charge as a ledger fills with *distinct*
   charges (each a different epsilon, the worst case for the accountant's history): in memory
   up to N, and file-backed up to N / 10, timing 200 charges at each checkpoint.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dpkd_audit import Ledger, LedgerError
from dpkd_audit.events import PureDpEvent

KEY = b"benchmark-key-0123456789abcdef"
CHILD = """
import sys
from dpkd_audit import Ledger
from dpkd_audit.events import PureDpEvent
ledger = Ledger.open(sys.argv[1])
for i in range(10**6):
    ledger.charge(PureDpEvent(1e-6), label=f"c{i}")
    print(i, flush=True)
"""


def timed_charges(folder: Path) -> None:
    path = folder / "cost.sqlite"
    ledger = Ledger(epsilon=10.0, path=path)
    start = time.perf_counter()
    for i in range(520):
        ledger.charge(PureDpEvent(1e-3), label=f"c{i}")
    per_charge = (time.perf_counter() - start) / 520
    start = time.perf_counter()
    reopened = Ledger.open(path)
    opened = time.perf_counter() - start
    assert len(reopened.charges()) == 520
    print(f"1. {per_charge * 1e3:.2f} ms per charge; open + verify 520 charges: "
          f"{opened * 1e3:.1f} ms")


def bit_flips(folder: Path, trials: int) -> None:
    rng = random.Random(0)
    for keyed in (False, True):
        key = KEY if keyed else None
        source = folder / f"flip-source-{keyed}.sqlite"
        ledger = Ledger(epsilon=10.0, path=source, key=key)
        for i in range(24):
            ledger.charge(PureDpEvent(0.01), label=f"c{i}")
        reference = [(c.seq, c.label, repr(c.event)) for c in ledger.charges()]
        spent = float(ledger.spent().epsilon)
        blob = source.read_bytes()
        refused = same = failures = 0
        for trial in range(trials):
            data = bytearray(blob)
            for _ in range(rng.randint(1, 3)):
                bit = rng.randrange(len(data) * 8)
                data[bit // 8] ^= 1 << (bit % 8)
            path = folder / f"flip-{keyed}-{trial}.sqlite"
            path.write_bytes(bytes(data))
            try:
                opened = Ledger.open(path, key=key)
                state = [(c.seq, c.label, repr(c.event)) for c in opened.charges()]
                if state == reference and float(opened.spent().epsilon) == spent:
                    same += 1
                else:
                    failures += 1
            except LedgerError:
                refused += 1
            except Exception:  # a raw error is a failure of the ledger's promise
                failures += 1
            path.unlink()
        print(f"2. {'keyed' if keyed else 'unkeyed'}: {trials} trials: {refused} refused, "
              f"{same} opened unchanged, {failures} failures")


def kills(folder: Path, trials: int) -> None:
    rng = random.Random(1)
    failures = hot = lost = 0
    for trial in range(trials):
        path = folder / f"kill-{trial}.sqlite"
        Ledger(epsilon=1e6, path=path)
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)],
                                 stdout=subprocess.PIPE, text=True)
        child.stdout.readline()  # the first charge is acknowledged
        time.sleep(rng.uniform(0.0, 0.05))
        os.kill(child.pid, signal.SIGKILL)
        acknowledged = child.stdout.read().split()
        child.wait()
        hot += Path(str(path) + "-journal").exists()
        try:
            ledger = Ledger.open(path, read_only=True)
            if len(ledger.charges()) < len(acknowledged) + 1:
                lost += 1
        except LedgerError:
            failures += 1
    print(f"3. {trials} kills: {failures} reopenings refused, {hot} left a hot journal, "
          f"{lost} lost an acknowledged charge")


def scaling(folder: Path, total: int) -> None:
    """ms per charge at checkpoints of a ledger of distinct charges (in memory, file)."""
    for where, limit in (("memory", total), ("file", total // 10)):
        ledger = Ledger(epsilon=1e9, path=None if where == "memory" else folder / "scale.sqlite")
        done, rows = 0, []
        checkpoints = sorted({c for c in (1, 1_000, 10_000, 100_000, limit) if c <= limit})
        for checkpoint in checkpoints:
            while done < checkpoint - 200:
                ledger.charge(PureDpEvent(1e-6 * (1 + done)), label=f"c{done}")
                done += 1
            start = time.perf_counter()
            for _ in range(200):
                ledger.charge(PureDpEvent(1e-6 * (1 + done)), label=f"c{done}")
                done += 1
            rows.append(f"{done:,}: {(time.perf_counter() - start) / 200 * 1e3:.3f} ms")
        ledger.close()
        print(f"scaling ({where}, distinct charges) ms per charge at " + "; ".join(rows),
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="folder for the ledger files (default: a temporary one)")
    parser.add_argument("--flips", type=int, default=2000)
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--scaling", type=int, default=0,
                        help="also time charges up to this many distinct ones (0: skip)")
    parser.add_argument("--only-scaling", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        folder = Path(tmp)
        print(f"python {sys.version.split()[0]}, folder {folder}")
        if args.scaling:
            scaling(folder, args.scaling)
        if args.only_scaling:
            return
        timed_charges(folder)
        bit_flips(folder, args.flips)
        kills(folder, args.kills)


if __name__ == "__main__":
    main()
