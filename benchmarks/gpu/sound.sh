#!/usr/bin/env bash
# benchmarks/gpu/sound.sh: the committed sound sweeps (reports/dgd/{mnist-sound,
# mnist-sound-seed1,fashion-mnist-sound}, reports/dpdfd/{mnist-sound,fashion-mnist-sound}) again,
# all five at once on one GPU, in ONE device window (issue 32: the float-safe statistics release
# changed every sound run). Same commands and presets as the committed CPU records, plus
# --device. Run from the repository root:
#
#   bash benchmarks/gpu/sound.sh --out DIR --data-dir .gpudata --archive "$OUT/sound.tar.gz"
#
# On the device machine, first `rm -rf .git && cp -r .gitcopy .git` (a copy of the repository's
# .git, carried as `.gitcopy`: the device tool does not carry .git, and the device's own checkout
# metadata is the session's starting commit, so records would name that commit, dirty:
# reports/gpu/h100-2026-11-27c). Carry [".whl-sound", ".gpudata", ".gitcopy"]; .whl-sound holds
# the dp-accounting and opacus wheels of benchmarks/gpu/prepare.sh, .gpudata mnist/ and
# fashion-mnist/ (the idx .gz files): ~60 MB with the tree, under the 64 MiB a call carries.
#
# CPU dry run of the same commands on the embedded digits, a few steps each (~1-2 minutes):
#
#   bash benchmarks/gpu/sound.sh --tiny --out /tmp/sound-tiny
#
# Options:
#   --out DIR        work folder (required; must not hold a stages.jsonl)
#   --data-dir D     holds mnist/ and fashion-mnist/ (the idx .gz files); default .gpudata
#   --device DEV     torch device of every sweep (default cuda; --tiny forces cpu)
#   --timeout S      each sweep's timeout in seconds (default 480); a sweep appends its
#                    results.jsonl run by run, so a sweep cut by it keeps the runs it finished
#   --threads N      OMP/MKL threads per sweep (default 3: five sweeps on 16 cores)
#   --archive FILE   tar.gz of DIR, re-made when the sweeps end (the device returns few files)
#   --only LIST      comma-separated sweep names to run (default: all five, below)
#   --tiny           digits, cpu, step-count overrides: a dry run of the script's code path
# Records under DIR: env.json (python, torch, device, nvidia-smi -L, git commit, options),
# stages.jsonl (one line per sweep: name, command, exit status, seconds, timed_out),
# logs/<name>.{stdout,stderr}, and each sweep's folder <name>/ (sweep.json, results.jsonl,
# plots). Exit status 0 when every sweep ran to its end, 1 otherwise, 2 for bad options.
set -euo pipefail

die() { echo "sound.sh: $*" >&2; exit 2; }
OUT="" DATA_DIR="" DEVICE=cuda TIMEOUT=480 THREADS=3 ARCHIVE="" ONLY="" TINY=0
while (($#)); do
  case $1 in
    --tiny) TINY=1; shift ;;
    --out|--data-dir|--device|--timeout|--threads|--archive|--only)
      (($# >= 2)) || die "$1 needs a value"
      case $1 in
        --out) OUT=$2 ;; --data-dir) DATA_DIR=$2 ;; --device) DEVICE=$2 ;;
        --timeout) TIMEOUT=$2 ;; --threads) THREADS=$2 ;; --archive) ARCHIVE=$2 ;;
        --only) ONLY=$2 ;;
      esac
      shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[[ -n $OUT ]] || die "--out DIR is required"
[[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "--timeout must be whole seconds >= 1; got $TIMEOUT"
[[ $THREADS =~ ^[1-9][0-9]*$ ]] || die "--threads must be an integer >= 1; got $THREADS"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
abspath() { if [[ $1 == /* ]]; then echo "$1"; else echo "$PWD/$1"; fi; }
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
[[ ! -e $OUT/stages.jsonl ]] || die "$OUT/stages.jsonl exists: use a fresh --out folder"
[[ -z $ARCHIVE ]] || ARCHIVE=$(abspath "$ARCHIVE")
DATA_DIR=$(abspath "${DATA_DIR:-$ROOT/.gpudata}")
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
read -r -a DPKD <<< "${DPKD:-$PY -m dpkd_audit.cli.main}"
mkdir -p "$OUT/logs"

# name | method | dataset | the committed command's sweep arguments
SWEEPS=(
  "dgd-mnist-sound|dgd|mnist|--modes sound --epsilons 1,3,10"
  "dgd-mnist-sound-seed1|dgd|mnist|--modes sound --epsilons 1,3,10 --seeds 1"
  "dgd-fashion-mnist-sound|dgd|fashion-mnist|--modes sound --epsilons 1,3,10"
  "dpdfd-mnist-sound|dpdfd|mnist|--modes sound --epsilons 1,3,10"
  "dpdfd-fashion-mnist-sound|dpdfd|fashion-mnist|--modes sound --epsilons 1,10"
)
if ((TINY)); then DEVICE=cpu; fi

"$PY" - "$OUT/env.json" "$DEVICE" "$TIMEOUT" "$THREADS" "$TINY" "$DATA_DIR" <<'EOF'
import json, os, platform, subprocess, sys, time
out, device, timeout, threads, tiny, data_dir = sys.argv[1:]
def run(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as exc:  # noqa: BLE001 - a record of what failed, not a crash
        return f"unavailable: {exc}"
env = {"python": sys.version.split()[0], "platform": platform.platform(), "nproc": os.cpu_count(),
       "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
       "git_commit": run("git", "rev-parse", "HEAD"), "git_status": run("git", "status", "--short"),
       "nvidia_smi": run("nvidia-smi", "-L"), "device": device, "timeout_s": int(timeout),
       "threads": int(threads), "tiny": tiny == "1", "data_dir": data_dir}
if device.startswith("cuda"):
    import torch
    env["torch"] = torch.__version__
    env["cuda_device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
json.dump(env, open(out, "w"), indent=1)
EOF

run_sweep() {
  local name=$1 method=$2 dataset=$3 args=$4
  local -a cmd extra=()
  if ((TINY)); then
    dataset=digits
    if [[ $method == dgd ]]; then
      extra=(--teachers 4 --ensemble-steps 2 --generator-steps 2 --student-steps 2 --synthetic 300)
    else
      extra=(--stages 2 --stage-size 16 --teacher-epochs 1 --generator-steps 2)
    fi
  else
    extra=(--data-dir "$DATA_DIR/$dataset")
  fi
  # shellcheck disable=SC2206  # the sweep arguments are whitespace-separated words
  cmd=("${DPKD[@]}" sweep "$method" --dataset "$dataset" "${extra[@]}" $args --device "$DEVICE"
       --out "$OUT/$name" --quiet)
  local start end rc=0
  start=$(date +%s.%N)
  OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS timeout --signal=INT --kill-after=10 \
    "$TIMEOUT" "${cmd[@]}" > "$OUT/logs/$name.stdout" 2> "$OUT/logs/$name.stderr" || rc=$?
  end=$(date +%s.%N)
  "$PY" - "$OUT/stages.jsonl" "$name" "$rc" "$start" "$end" "$TIMEOUT" "${cmd[*]}" <<'EOF'
import json, sys
path, name, rc, start, end, timeout, command = sys.argv[1:]
rc = int(rc)
line = {"stage": name, "command": command, "exit_status": rc,
        "seconds": round(float(end) - float(start), 3), "timeout_s": int(timeout),
        "timed_out": rc in (124, 137) or rc == 130}
with open(path, "a") as f:
    f.write(json.dumps(line) + "\n")
EOF
  return "$rc"
}

pids=()
for spec in "${SWEEPS[@]}"; do
  IFS='|' read -r name method dataset args <<< "$spec"
  [[ -z $ONLY || ",$ONLY," == *",$name,"* ]] || continue
  run_sweep "$name" "$method" "$dataset" "$args" & pids+=($!)
done
FAILED=0
for pid in "${pids[@]}"; do wait "$pid" || FAILED=1; done
if [[ -n $ARCHIVE ]]; then
  tar -czf "$ARCHIVE.tmp" -C "$(dirname "$OUT")" "$(basename "$OUT")" && mv "$ARCHIVE.tmp" "$ARCHIVE"
fi
cat "$OUT/stages.jsonl"
exit "$FAILED"
