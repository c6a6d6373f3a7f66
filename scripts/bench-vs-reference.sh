#!/usr/bin/env bash
# scripts/bench-vs-reference.sh — envoy-rls against the reference service
# (envoyproxy/ratelimit), both on their own local redis-server, fixed window,
# the same rule (config/bench/reference/bench.yaml: 1000/s per
# remote_address), 10,000 uniform subjects, 4 connections, in alternating
# rounds: this machine's speed drifts by ±15 % within minutes, so only runs
# made side by side compare. Prints each round's ratio and the median.
#
#   scripts/bench-vs-reference.sh [--rounds 5] [--concurrency 64] [--duration 8s] [--max-busy 0.6]
#
# JSON lines go to bench/results/vs-reference-<UTC time>/{reference,envoy-rls}.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=5 CONC=64 DURATION=8s MAX_BUSY=0.6
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --concurrency) CONC=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --max-busy) MAX_BUSY=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-vs-reference.sh: unknown argument $1" >&2; exit 1 ;;
  esac
done
DIR=bench/results/vs-reference-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$DIR"
COMMON=(--max-busy "$MAX_BUSY" --duration "$DURATION" --concurrency "$CONC" --no-plot)
for _ in $(seq 1 "$ROUNDS"); do
  scripts/bench.sh "${COMMON[@]}" --target reference --out "$DIR/reference.jsonl"
  scripts/bench.sh "${COMMON[@]}" --target envoy-rls --store redis \
    --config config/bench/reference/bench.yaml --label "envoy-rls redis" --out "$DIR/envoy-rls.jsonl"
done
# field NAME FILE: the numeric value of "NAME": in each JSON line.
field() { sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p" "$2"; }
echo "round  reference/s  envoy-rls/s  ratio | server CPU µs: reference envoy-rls | Redis CPU µs: reference envoy-rls"
paste <(field rps "$DIR/reference.jsonl") <(field rps "$DIR/envoy-rls.jsonl") \
  <(field server_cpu_us_per_decision "$DIR/reference.jsonl") <(field server_cpu_us_per_decision "$DIR/envoy-rls.jsonl") \
  <(field redis "$DIR/reference.jsonl") <(field redis "$DIR/envoy-rls.jsonl") |
  awk '{ printf "%5d  %11.0f  %11.0f  %5.2f | %35.1f %9.1f | %32.1f %9.1f\n", NR, $1, $2, $2 / $1, $3, $4, $5, $6 }' |
  tee "$DIR/summary.txt"
# The median of the ratio column (the 4th field).
sort -n -k4 "$DIR/summary.txt" | awk '{ r[NR] = $4 } END {
  m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
  printf "median throughput ratio envoy-rls / reference: %.2f over %d rounds\n", m, NR }'
echo "bench-vs-reference.sh: results in $DIR" >&2
