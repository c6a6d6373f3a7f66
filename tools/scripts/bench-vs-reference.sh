#!/usr/bin/env bash
# tools/scripts/bench-vs-reference.sh — envoy-rls on Redis against the reference
# service (envoyproxy/ratelimit), or against the do-nothing gRPC floor
# (--against floor), or against the ceiling of any Lua program (--against
# ceiling: envoy-rls whose batch program only reads TIME; --against
# ceiling-state: one that also MGETs and SETs each key, see bench.sh), in
# alternating rounds: this machine's speed drifts by up
# to 2x within minutes, so only runs made side by side compare. Both Redis
# servers are local redis-server processes; the rule is the same fixed window
# (tools/config/bench/reference/bench.yaml: 1000/s per remote_address); 10,000
# uniform subjects, 4 connections. Prints each round's ratio and the median.
#
#   tools/scripts/bench-vs-reference.sh [--against reference|floor|ceiling|ceiling-state] [--rounds 5]
#                                 [--concurrency 64] [--duration 8s] [--max-busy 0.6]
#
# JSON lines go to bench/results/vs-<against>-<UTC time>/{<against>,envoy-rls}.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../.."
AGAINST=reference ROUNDS=5 CONC=64 DURATION=8s MAX_BUSY=0.6
while [ $# -gt 0 ]; do
  case "$1" in
    --against) AGAINST=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --concurrency) CONC=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --max-busy) MAX_BUSY=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-vs-reference.sh: unknown argument $1" >&2; exit 1 ;;
  esac
done
case "$AGAINST" in reference|floor|ceiling|ceiling-state) ;; *) echo "bench-vs-reference.sh: --against must be reference, floor, ceiling or ceiling-state" >&2; exit 1 ;; esac
DIR=bench/results/vs-$AGAINST-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$DIR"
COMMON=(--max-busy "$MAX_BUSY" --duration "$DURATION" --concurrency "$CONC" --no-plot)
for _ in $(seq 1 "$ROUNDS"); do
  tools/scripts/bench.sh "${COMMON[@]}" --target "$AGAINST" --out "$DIR/$AGAINST.jsonl"
  tools/scripts/bench.sh "${COMMON[@]}" --target envoy-rls --store redis \
    --config tools/config/bench/reference/bench.yaml --label "envoy-rls redis" --out "$DIR/envoy-rls.jsonl"
done
# field NAME FILE: the numeric value of "NAME": in each JSON line.
field() { sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p" "$2"; }
# redis FILE: the Redis CPU column, "-" for the floor (which has none).
redis() { if [ "$AGAINST" = floor ] && [ "$1" = "$DIR/floor.jsonl" ]; then field rps "$1" | sed 's/.*/-/'; else field redis "$1"; fi; }
echo "round  $AGAINST/s  envoy-rls/s  ratio | server CPU µs: $AGAINST envoy-rls | Redis CPU µs: $AGAINST envoy-rls | p99 ms: $AGAINST envoy-rls"
paste <(field rps "$DIR/$AGAINST.jsonl") <(field rps "$DIR/envoy-rls.jsonl") \
  <(field server_cpu_us_per_decision "$DIR/$AGAINST.jsonl") <(field server_cpu_us_per_decision "$DIR/envoy-rls.jsonl") \
  <(redis "$DIR/$AGAINST.jsonl") <(redis "$DIR/envoy-rls.jsonl") \
  <(field p99_ms "$DIR/$AGAINST.jsonl") <(field p99_ms "$DIR/envoy-rls.jsonl") |
  awk '{ r = ($5 == "-") ? "-" : sprintf("%.1f", $5)
         printf "%5d  %9.0f  %11.0f  %5.2f | %6.1f %6.1f | %6s %6.1f | %6.2f %6.2f\n", NR, $1, $2, $2 / $1, $3, $4, r, $6, $7, $8 }' |
  tee "$DIR/summary.txt"
# The median of the ratio column (the 4th field).
sort -n -k4 "$DIR/summary.txt" | awk -v against="$AGAINST" '{ r[NR] = $4 } END {
  m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
  printf "median throughput ratio envoy-rls / %s: %.2f over %d rounds\n", against, m, NR }'
echo "bench-vs-reference.sh: results in $DIR" >&2
