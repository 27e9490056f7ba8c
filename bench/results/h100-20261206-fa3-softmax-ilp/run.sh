#!/usr/bin/env bash
# One device call, two A/Bs (trees made beforehand by scripts/ab_trees.sh at 9a773ff and carried as .ab):
#   fa3 (fa3 GPU tests and `flashattn check` on the changed tree): the softmax's block sum and block max in four independent chains per row half (sum-max-chains.patch)
#     against the shipped kernel: the per-block timeline (timeline.patch) of tl_base, tl_no_exp2 and
#     tl_chains at d 128 and d 64, N 8192; `flashattn check` on the changed tree; scripts/fa3_probe.sh rounds.
#   decode: the split merge's ticket (bench/results/h100-20261206-decode-ticket/: its trees, tests and probe).
#   F=bench/results/h200-20261206-fa3-ceiling; D=bench/results/h100-20261206-fa3-softmax-ilp
#   T=bench/results/h100-20261206-decode-ticket
#   AB_COMMIT=9a773ff bash scripts/ab_trees.sh .ab tl_base=$F/timeline.patch \
#     tl_no_exp2=$F/no-exp2.patch+$F/timeline.patch tl_chains=$D/sum-max-chains.patch+$F/timeline.patch \
#     base chains=$D/sum-max-chains.patch dbase acqrel=$T/ticket-acq-rel.patch onefence=$T/ticket-one-fence.patch
#   then on the GPU machine: bash bench/results/h100-20261206-fa3-softmax-ilp/run.sh $OUT
set -uo pipefail
OUT=$1
t0=$(date +%s)
T=bench/results/h100-20261206-decode-ticket
mkdir -p $OUT/fa3 $OUT/decode
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
# The three sets of trees build at once (16 cores: 2 jobs per tree).
JOBS=2 bash scripts/ab_build.sh $OUT/fa3 flashattn_cli .ab/tl_base .ab/tl_no_exp2 .ab/tl_chains .ab/base &
JOBS=2 bash scripts/ab_build.sh $OUT/fa3 "flashattn_cli flashattn_tests_gpu" .ab/chains &
JOBS=2 bash scripts/ab_build.sh $OUT/decode "flashattn_cli flashattn_tests_gpu" .ab/dbase .ab/acqrel .ab/onefence &
wait
echo "built at $(( $(date +%s) - t0 )) s"
bash scripts/fa3_timeline.sh $OUT/fa3 tl_base=.ab/tl_base tl_no_exp2=.ab/tl_no_exp2 tl_chains=.ab/tl_chains
cp $OUT/fa3/timeline-summary.txt $OUT/
timeout 120 .ab/chains/build-ab/flashattn check --backend cuda --algo fa3 > $OUT/fa3/check-chains.txt 2>&1
echo "check chains rc $?: $(tail -n 1 $OUT/fa3/check-chains.txt)"
timeout 150 .ab/chains/build-ab/tests/flashattn_tests_gpu --gtest_filter='*Fa3*' > $OUT/fa3/tests-chains.log 2>&1
echo "tests chains rc $?: $(grep -E '^\[  (PASSED|FAILED)' $OUT/fa3/tests-chains.log | tr '\n' ' ')"
for t in acqrel onefence; do
  timeout 150 .ab/$t/build-ab/tests/flashattn_tests_gpu --gtest_filter='*DecodeGpu*:*KvCache*Gpu*' > $OUT/decode/tests-$t.log 2>&1
  echo "tests $t rc $?: $(grep -E '^\[  (PASSED|FAILED)' $OUT/decode/tests-$t.log | tr '\n' ' ')"
done
echo "tests done at $(( $(date +%s) - t0 )) s"
FA3_AB_COMMIT='base = 9a773ff; chains = 9a773ff + sum-max-chains.patch' \
  FA3_PROBE_SHAPES="128:8192:full 128:2048:full 128:8192:causal 64:8192:full" FA3_PROBE_ROUNDS=6 \
  FA3_PROBE_UNTIL=$(( t0 + ${FA3_UNTIL:-400} )) \
  bash scripts/fa3_probe.sh $OUT/probe-chains.txt base=.ab/base chains=.ab/chains
echo "fa3 probe done at $(( $(date +%s) - t0 )) s"
FA3_AB_COMMIT='dbase = 9a773ff; acqrel = 9a773ff + ticket-acq-rel.patch; onefence = 9a773ff + ticket-one-fence.patch' \
  DECODE_PROBE_CASES="1x32768|--batch 1 --cache-len 32768;1x131072|--batch 1 --cache-len 131072;4x8192|--batch 4 --cache-len 8192" \
  DECODE_PROBE_UNTIL=$(( t0 + ${LIMIT:-560} )) bash scripts/decode_probe.sh $OUT/decode dbase=.ab/dbase acqrel=.ab/acqrel onefence=.ab/onefence
cp $OUT/decode/probe.txt $OUT/probe-decode.txt 2>/dev/null
tar -czf $OUT/all.tar.gz -C $OUT fa3 decode && rm -rf $OUT/fa3 $OUT/decode
echo "done at $(( $(date +%s) - t0 )) s"
