#!/usr/bin/env bash
# benchmarks/gpu/prepare.sh: fill the two folders a device run of benchmarks/gpu/paper.sh carries.
#
#   bash benchmarks/gpu/prepare.sh [MNIST_DIR [FASHION_DIR]]
#       (defaults ../shared/data/mnist and /usr/share/datasets/fashion-mnist)
#
# .whl/           wheels of the dependencies the device image lacks (dp-accounting, faiss-cpu,
#                 opacus, umap-learn, pynndescent), at the versions installed here, for CPython
#                 3.12 on x86-64 Linux (the device's python3); pip download, no dependencies
# .gpudata/mnist  the four MNIST idx .gz files
# .gpudata/fashion-mnist  the four Fashion-MNIST idx .gz files, when FASHION_DIR holds them
#                 (the Debian package dataset-fashion-mnist; paper.sh --dataset fashion-mnist)
# Both are added to .git/info/exclude (ignored paths travel only when `carry` names them).
# Then call the device tool's run with carry [".whl", ".gpudata/mnist"] (or
# ".gpudata/fashion-mnist": one dataset per call, both are over the device's 64 MiB with the
# tree and wheels) and the command in benchmarks/README.md ("gpu/paper.sh").
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MNIST=${1:-$ROOT/../shared/data/mnist}
FASHION=${2:-/usr/share/datasets/fashion-mnist}
cd "$ROOT"
PY=${PYTHON:-python3}
[[ -d .git ]] || { echo "prepare.sh: run it in a git checkout" >&2; exit 2; }
ls "$MNIST"/train-images-idx3-ubyte* >/dev/null 2>&1 \
  || { echo "prepare.sh: no MNIST idx files in $MNIST" >&2; exit 2; }
mkdir -p .git/info
for ignored in /.whl/ /.gpudata/; do
  grep -qxF "$ignored" .git/info/exclude 2>/dev/null || echo "$ignored" >> .git/info/exclude
done
mkdir -p .whl .gpudata/mnist
cp "$MNIST"/*-ubyte* .gpudata/mnist/
if ls "$FASHION"/train-images-idx3-ubyte* >/dev/null 2>&1; then
  mkdir -p .gpudata/fashion-mnist
  cp "$FASHION"/*-ubyte* .gpudata/fashion-mnist/
fi
mapfile -t PINS < <("$PY" - <<'EOF'
from importlib.metadata import version
for name in ("dp-accounting", "faiss-cpu", "opacus", "umap-learn", "pynndescent"):
    print(f"{name}=={version(name)}")
EOF
)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d .whl "${PINS[@]}"
echo "prepared: ${PINS[*]}; $(ls .gpudata/mnist | wc -l) MNIST files;" \
  "$(ls .gpudata/fashion-mnist 2>/dev/null | wc -l) Fashion-MNIST files;" \
  "$(du -sh .whl .gpudata | tr '\n' ' ')"
