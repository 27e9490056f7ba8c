#!/usr/bin/env bash
# One device call (trees made beforehand and carried: .ab/base, .ab/cl):
#   bash scripts/ab_trees.sh .ab base cl=bench/results/gpu-20261205-decode-cluster/cluster.patch
#   then on the GPU machine: bash bench/results/gpu-20261205-decode-cluster/run.sh $OUT
# Builds both trees (sm_90a; cl with its GPU tests), runs every decode GPU test on cl, memcheck and racecheck
# of the cluster test, then rounds of `flashattn run --kv-cache` on the shapes whose tiles split on the wide
# kernel and two controls, the trees alternating (LIMIT s in all, default 300).
set -uo pipefail
OUT=$1
t0=$(date +%s)
LIMIT=${LIMIT:-330}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for t in base cl; do
  targets=(flashattn_cli); [ $t = cl ] && targets+=(flashattn_tests_gpu)
  ( cmake -S .ab/$t -B .ab/$t/build-ab -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON \
      -DFLASHATTN_CUDA_ARCHITECTURES=90a > $OUT/build-$t.log 2>&1 &&
    cmake --build .ab/$t/build-ab -j 8 --target "${targets[@]}" >> $OUT/build-$t.log 2>&1; echo "build $t rc $?" ) &
done
wait
echo "built at $(( $(date +%s) - t0 )) s"
for t in base cl; do echo "$t: spilling kernels $(grep -c '[1-9][0-9]* bytes spill stores' $OUT/build-$t.log)"; done
R=.ab/cl/build-ab
timeout 150 $R/tests/flashattn_tests_gpu --gtest_filter='*DecodeGpu*:DecodeHeuristic.*:Fa3Forward.AutoPicksFa3WhereItRuns' > $OUT/tests.log 2>&1
echo "tests rc $? at $(( $(date +%s) - t0 )) s"
grep -E '^\[  (PASSED|FAILED) |^\[  FAILED|clusters fit' $OUT/tests.log | head -12
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 86 $R/tests/flashattn_tests_gpu \
    --gtest_filter='DecodeGpuKernels.ClusterMergeMatchesTheReference' > $OUT/$tool.log 2>&1
  echo "$tool rc $? at $(( $(date +%s) - t0 )) s"; grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$tool.log | head -1
done
nvcc -O2 -arch=sm_90a -o /tmp/cluster_fit bench/results/gpu-20261205-decode-cluster/cluster_fit.cu && /tmp/cluster_fit | tee $OUT/cluster_fit.txt
# "d batch seqlen_q cache heads heads_kv page | tree:splits ..." (splits 0: the heuristic)
SHAPES=("128 1 1 32768 32 8 0|base:0 base:14 cl:14 cl:12" "128 1 1 32768 32 8 16|base:0 cl:14"
        "128 2 1 16384 32 8 0|base:0 base:7 cl:7" "128 4 1 8192 32 8 0|base:0 base:3 cl:3"
        "128 8 1 8192 32 8 0|base:0 cl:0")
: > $OUT/probe.jsonl
for round in 1 2 3 4 5 6 7 8 9 10; do
  [ $(( $(date +%s) - t0 )) -gt $(( LIMIT - 25 )) ] && break
  for s in "${SHAPES[@]}"; do
    read -r d b sq n h hk pg <<< "${s%%|*}"
    read -r -a vars <<< "${s#*|}"
    # alternate the order of the variants from round to round
    [ $(( round % 2 )) -eq 0 ] && vars=($(printf '%s\n' "${vars[@]}" | tac))
    for v in "${vars[@]}"; do
      t=${v%%:*}; sp=${v#*:}
      j=$(timeout 20 .ab/$t/build-ab/flashattn run --kv-cache --backend cuda --no-check-indices --head-dim $d --batch $b \
            --seqlen-q $sq --cache-len $n --heads $h --heads-kv $hk --page-size $pg --splits $sp --warmup-ms 200 --json 2>/dev/null | tail -n 1)
      echo "{\"round\": $round, \"tree\": \"$v\", \"run\": ${j:-null}}" >> $OUT/probe.jsonl
    done
  done
done
python3 - $OUT/probe.jsonl <<'PY' | tee $OUT/probe.txt
import json, statistics, sys
by = {}
for l in open(sys.argv[1]):
    r = json.loads(l); j = r["run"]
    if not j: continue
    p = j["problem"]
    key = (p["head_dim"], p["batch"], p["seqlen_q"], p["capacity"], p["heads"], p["heads_kv"], p["page_size"])
    by.setdefault(key, {}).setdefault(r["tree"], []).append((j["forward"]["ms"], j["pass"], j["kernel"], j["forward"]["gbps"]))
for key, t in by.items():
    print(f"d {key[0]} b {key[1]} sq {key[2]} keys {key[3]} h {key[4]}/{key[5]} page {key[6]}:")
    ref = statistics.median(x[0] for x in t["base:0"]) if "base:0" in t else 0
    for v, xs in t.items():
        med = statistics.median(x[0] for x in xs)
        ok = all(x[1] for x in xs)
        print(f"  {v:8s} {med*1e3:7.1f} us  {statistics.median(x[3] for x in xs)/1e3:5.2f} TB/s  vs base:0 {ref/med:.3f}  "
              f"rounds {len(xs)}  checks {'pass' if ok else 'FAIL'}  {xs[0][2]}")
PY
echo "done at $(( $(date +%s) - t0 )) s"
