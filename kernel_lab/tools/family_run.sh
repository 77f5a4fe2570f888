#!/bin/bash
# The family bench on the H200 (kernel_lab/results/family_bench_h200.md says how it was run), from the repository
# root, where .device/fm holds FlashMLA's source (9edee0c, with its build.sh) and .device/peers the wheels of
# sglang 0.4.7 and pydantic (carried: the machine has no network). Runs in the background (setsid) and writes
# /tmp/fb/{family_bench.json,family_bench.md,run.log}; DEADLINE: seconds of bench after which no new problem starts;
# arguments go to the bench (e.g. --no-families --heads 32,64 for the uniform grid the first run did not reach).
set -u
mkdir -p /tmp/fb
{
  echo "start $(date -u +%T)"
  python3 -m pip install -q --no-index --no-deps --target /tmp/peers .device/peers/*.whl
  cp -r .device/fm /tmp/fm && (cd /tmp/fm && MAX_JOBS=8 bash build.sh >/tmp/fb/fm_build.log 2>&1) \
    && echo "flashmla built $(date -u +%T)" || echo "flashmla build FAILED (see fm_build.log)"
  PYTHONPATH=$PWD:/tmp/fm:/tmp/peers PYTHONUNBUFFERED=1 python3 -m kernel_lab.tools.family_bench --out /tmp/fb \
    --deadline "${DEADLINE:-540}" "$@" --setup "$(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader); FlashMLA 9edee0c built there by its build.sh (sm90a, bf16); sglang 0.4.7 from its wheel (--no-deps); commit ${COMMIT:-?}"
  rc=$?; echo "done $(date -u +%T) rc=$rc"
} >/tmp/fb/run.log 2>&1
