#!/usr/bin/env bash
# One device call for two prepared experiments (trees made beforehand, carried: .ab/base, .ab/pf, .ab/split):
#   bash scripts/ab_trees.sh .ab base split=bench/results/h100-20261205-fa3-tail-split/tail-split.patch \
#     pf=bench/results/h100-20261205-decode-prefetch/prefetch.patch+bench/results/h100-20261205-decode-prefetch/prefetch-knob.patch
#   then on the GPU machine: bash bench/results/h100-20261205-decode-prefetch/run-both.sh $OUT
# 1. the decode A/B base against pf (fa3_ab.sh, FA3_AB_BENCH=decode, two passes, cuDNN), no tests;
# 2. the prefetch count through FLASHATTN_DECODE_PREFETCH on pf's CLI beside base's, one pass;
# 3. the fa3 sweep A/B base against split with the fa3 GPU tests on split (fa3_ab.sh, two passes);
# 4. what time is left: the last-wave probe (waves.sh) on base and split, then the decode GPU tests on pf.
# Writes OUT/decode/{ab.json,ab.log,raw.tar.gz}, OUT/fa3/{ab.json,ab.log,raw.tar.gz}, OUT/extra.tar.gz
# (knob runs, waves, decode tests, the steps' console) : 7 files.
set -uo pipefail
OUT=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SPLIT=$HERE/../h100-20261205-fa3-tail-split
X=$(mktemp -d)
t0=$(date +%s)
left() { echo $(( ${LIMIT:-570} - ($(date +%s) - t0) )); }
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
FA3_AB_BENCH=decode FA3_AB_COMMIT="base = ${AB_BASE:-9f5f180}; pf = base + prefetch.patch + prefetch-knob.patch" \
  FA3_AB_PASSES=2 timeout 200 bash scripts/fa3_ab.sh $OUT/decode base=.ab/base pf=.ab/pf
echo "decode A/B rc $? at $(( $(date +%s) - t0 )) s"
for r in p1 p4 p0 p8; do
  [ $(left) -gt 330 ] || { echo "knob: stopped before $r"; break; }
  FLASHATTN_DECODE_PREFETCH=${r#p} timeout 60 .ab/pf/build-ab/flashattn bench --gpu --decode --json $X/knob-$r.json \
    > $X/knob-$r.txt 2>&1 || echo "knob $r rc $?"
  grep -E "^ *1 +32768|^ *1 +131072" $X/knob-$r.txt | sed "s/^/$r /"
done
echo "knob done at $(( $(date +%s) - t0 )) s"
FA3_AB_COMMIT="base = ${AB_BASE:-9f5f180}; split = base + tail-split.patch" FA3_AB_TESTS=split FA3_AB_PASSES=2 \
  timeout $(( $(left) - 10 )) bash scripts/fa3_ab.sh $OUT/fa3 base=.ab/base split=.ab/split
echo "fa3 A/B rc $? at $(( $(date +%s) - t0 )) s"
if [ $(left) -gt 120 ]; then
  timeout $(( $(left) - 40 )) bash "$SPLIT/waves.sh" $X base=.ab/base/build-ab/flashattn split=.ab/split/build-ab/flashattn
  echo "waves at $(( $(date +%s) - t0 )) s"
fi
if [ $(left) -gt 60 ]; then
  (cmake --build .ab/pf/build-ab -j 16 --target flashattn_tests_gpu > $X/pf-tests-build.log 2>&1 &&
   timeout $(( $(left) - 15 )) .ab/pf/build-ab/tests/flashattn_tests_gpu --gtest_filter='*DecodeGpu*' > $X/pf-decode-tests.log 2>&1)
  echo "pf decode tests rc $? at $(( $(date +%s) - t0 )) s"; tail -n 3 $X/pf-decode-tests.log
fi
echo "total $(( $(date +%s) - t0 )) s"
} 2>&1 | tee $X/console.txt | grep -vE "^\s*$" | tail -n 60
tar -czf $OUT/extra.tar.gz -C $X .
