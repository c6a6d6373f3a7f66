#!/usr/bin/env bash
# tools/scripts/bench-standard.sh — the standard load set, back to back,
# one concurrency at a time:
# the gRPC floor, the reference service (envoyproxy/ratelimit, fixed window on
# Redis: tools/scripts/ensure-reference.sh builds it once; --no-reference skips it),
# then envoy-rls on the memory store and on the Redis store for each
# algorithm (tools/config/bench/*.yaml), at 16/64/256 concurrent calls,
# 4 connections, 10,000 uniform subjects. All JSON lines go to one directory
# under bench/results/; the plots are redrawn into docs/img/:
#
#   docs/img/perf-redis.png   floor + reference + Redis store, one line per algorithm
#   docs/img/perf-memory.png  floor + memory store, one line per algorithm
#
#   tools/scripts/bench-standard.sh [--duration 10s] [--max-busy 0.6] [--concurrency "16 64 256"] [--no-reference]
#
# Every run records other_cpu_cores: discard rounds where it is not ≈ 0.
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=10s MAX_BUSY=0.6 CONCURRENCY="16 64 256" REFERENCE=1
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION=$2; shift 2 ;;
    --max-busy) MAX_BUSY=$2; shift 2 ;;
    --concurrency) CONCURRENCY=$2; shift 2 ;;
    --no-reference) REFERENCE=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-standard.sh: unknown argument $1" >&2; exit 1 ;;
  esac
done
DIR=bench/results/standard-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$DIR" docs/img
COMMON=(--max-busy "$MAX_BUSY" --duration "$DURATION" --no-plot)
# Concurrency is the outer loop: this machine's speed drifts by up to 2x
# within minutes, so every configuration of one concurrency runs within a
# couple of minutes of the floor it is compared with (a round ordered by
# configuration once put the floor and the Redis runs 6 minutes and a 2x
# speed change apart).
for c in $CONCURRENCY; do
  tools/scripts/bench.sh "${COMMON[@]}" --concurrency "$c" --out "$DIR/floor.jsonl"
  if [ "$REFERENCE" = 1 ]; then
    tools/scripts/bench.sh "${COMMON[@]}" --concurrency "$c" --target reference --label "reference fixed-window" --out "$DIR/reference.jsonl"
  fi
  for store in memory redis; do
    for alg in fixed-window token-bucket sliding-window; do
      tools/scripts/bench.sh "${COMMON[@]}" --concurrency "$c" --target envoy-rls --store "$store" \
        --config "tools/config/bench/$alg.yaml" --label "$store $alg" --out "$DIR/$store-$alg.jsonl"
    done
  done
done
for store in memory redis; do
  others=("$DIR/floor.jsonl")
  if [ "$store" = redis ] && [ -f "$DIR/reference.jsonl" ]; then others+=("$DIR/reference.jsonl"); fi
  bin/rls-plot -o "docs/img/perf-$store.png" \
    -title "envoy-rls, $store store, 4 connections: throughput and p99" \
    "${others[@]}" "$DIR/$store-"*.jsonl
done
echo "bench-standard.sh: results in $DIR; plots docs/img/perf-memory.png docs/img/perf-redis.png" >&2
