#!/usr/bin/env bash
# Second device call (~360 s): base and pf only, built without tests (scripts/ab_build.sh), then
# scripts/fa3_probe.sh rounds until LIMIT seconds from the start. Trees as run.sh makes them, carried (.ab).
# Writes probe.txt and logs.tar.gz (the builds) into $1. (scripts/fa3_candidate.sh with FA3_CANDIDATE_TESTED=0
# now does the same, with the ptxas and SASS summary.)
set -uo pipefail
t0=$(date +%s)
mkdir -p "$1/logs"
bash scripts/ab_build.sh "$1/logs" flashattn_cli .ab/base .ab/pf
echo "built in $(( $(date +%s) - t0 )) s"
FA3_PROBE_SHAPES="256:1024:full 256:2048:full 256:4096:causal 256:8192:causal" FA3_PROBE_ROUNDS=${ROUNDS:-12} \
  FA3_PROBE_UNTIL=$(( t0 + ${LIMIT:-330} )) bash scripts/fa3_probe.sh "$1/probe.txt" base=.ab/base pf=.ab/pf
tar -czf "$1/logs.tar.gz" -C "$1" logs && rm -rf "$1/logs"
echo "done after $(( $(date +%s) - t0 )) s"
