#!/usr/bin/env bash
# Second call: the same trees (.ab/base, .ab/no_softmax carried), the SM clock and power sampled by nvidia-smi
# (every 20 ms) during each timed run, so that the probe's gain can be split into clock and schedule.
#   bash bench/results/h200-20261206-fa3-ceiling/run2.sh $OUT
set -uo pipefail
OUT=$1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for t in base no_softmax; do
  ( cmake -S .ab/$t -B .ab/$t/build-ab -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
      -DFLASHATTN_CUDA_ARCHITECTURES=90a > $OUT/build-$t.log 2>&1 &&
    cmake --build .ab/$t/build-ab -j 8 --target flashattn_cli >> $OUT/build-$t.log 2>&1; echo "build $t rc $?" ) &
done
wait
echo "built at $(( $(date +%s) - t0 )) s"
: > $OUT/clock.txt
for round in 1 2 3; do
  order=(base no_softmax); [ $(( round % 2 )) -eq 0 ] && order=(no_softmax base)
  for d in 128 64; do
    for t in "${order[@]}"; do
      [ $(( $(date +%s) - t0 )) -gt ${LIMIT:-230} ] && break 3
      nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 20 > $OUT/smi.csv &
      smi=$!
      j=$(timeout 30 .ab/$t/build-ab/flashattn run --backend cuda --algo fa3 --head-dim $d --heads $((2048 / d)) \
            --batch 2 --seqlen-q 8192 --warmup-ms 300 --repeat 300 --json 2>/dev/null)
      kill $smi; wait $smi 2>/dev/null
      python3 - "$j" "$round" "$t" "$d" $OUT/smi.csv <<'PY' | tee -a $OUT/clock.txt
import json, statistics, sys
j = json.loads(sys.argv[1]); rows = []
for line in open(sys.argv[5]):
    try: c, p = (float(x) for x in line.split(","))
    except ValueError: continue
    rows.append((c, p))
busy = [r for r in rows if r[1] > 300] or rows
print("round %s tree %-10s d %s N 8192: %.1f TFLOP/s  SM clock median %.0f MHz (%d busy samples of %d)  power median %.0f W"
      % (sys.argv[2], sys.argv[3], sys.argv[4], j["forward"]["tflops"], statistics.median(r[0] for r in busy),
         len(busy), len(rows), statistics.median(r[1] for r in busy)))
PY
    done
  done
done
echo "done at $(( $(date +%s) - t0 )) s"
