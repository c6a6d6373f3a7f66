#!/usr/bin/env bash
# tools/scripts/bench-group.sh — group commit side by side: the reference
# service (envoyproxy/ratelimit), envoy-rls with group commit off
# (--redis-group-max-keys 1: one program run per call), envoy-rls as shipped
# (group commit on; also with a token bucket, tb, or a sliding window, sw,
# instead of the fixed window), the same rule on the memory store (memory),
# the ceiling build (ceiling: group commit on, a batch program that reads and
# writes no state; bench.sh --target ceiling), the ceiling with state
# (ceiling-state: one that reads its keys and writes each, bench.sh --target
# ceiling-state) and the do-nothing gRPC floor, in alternating
# rounds (this
# machine's speed drifts: only runs made side by side compare). Each run has
# its own redis-server; the rule is the same fixed window
# (tools/config/bench/reference/bench.yaml), 10,000 uniform subjects, 4
# connections. Prints the medians and ranges of each target, per concurrency,
# and draws one plot of every target.
#
#   tools/scripts/bench-group.sh [--rounds 5] [--concurrency "64"] [--duration 6s]
#                                [--max-busy 0.6] [--targets "reference off on floor"]
#
# JSON lines go to bench/results/group-<UTC time>/<target>.jsonl, the plot
# next to them.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=5 CONC=64 DURATION=6s MAX_BUSY=0.6 TARGETS="reference off on floor"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --concurrency) CONC=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --max-busy) MAX_BUSY=$2; shift 2 ;;
    --targets) TARGETS=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-group.sh: unknown argument $1" >&2; exit 1 ;;
  esac
done
DIR=bench/results/group-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$DIR"
COMMON=(--max-busy "$MAX_BUSY" --duration "$DURATION" --warmup 1s --concurrency "$CONC" --no-plot)
RULES=tools/config/bench/reference/bench.yaml
for _ in $(seq 1 "$ROUNDS"); do
  for t in $TARGETS; do
    case "$t" in
      reference) tools/scripts/bench.sh "${COMMON[@]}" --target reference --label reference --out "$DIR/reference.jsonl" ;;
      floor) tools/scripts/bench.sh "${COMMON[@]}" --target floor --label floor --out "$DIR/floor.jsonl" ;;
      memory) tools/scripts/bench.sh "${COMMON[@]}" --target envoy-rls --store memory --config "$RULES" \
        --label "envoy-rls, memory store" --out "$DIR/memory.jsonl" ;;
      ceiling) tools/scripts/bench.sh "${COMMON[@]}" --target ceiling --config "$RULES" \
        --label "ceiling, group commit on" --out "$DIR/ceiling.jsonl" ;;
      ceiling-state) tools/scripts/bench.sh "${COMMON[@]}" --target ceiling-state --config "$RULES" \
        --label "ceiling with state, group commit on" --out "$DIR/ceiling-state.jsonl" ;;
      off) tools/scripts/bench.sh "${COMMON[@]}" --target envoy-rls --store redis --config "$RULES" \
        --server-args "--redis-group-max-keys 1" --label "envoy-rls, group commit off" --out "$DIR/off.jsonl" ;;
      on) tools/scripts/bench.sh "${COMMON[@]}" --target envoy-rls --store redis --config "$RULES" \
        --label "envoy-rls, group commit on" --out "$DIR/on.jsonl" ;;
      tb | sw)
        rules=tools/config/bench/token-bucket.yaml
        [ "$t" = tb ] || rules=tools/config/bench/sliding-window.yaml
        tools/scripts/bench.sh "${COMMON[@]}" --target envoy-rls --store redis --config "$rules" \
          --label "envoy-rls, group commit on, $(basename "$rules" .yaml)" --out "$DIR/$t.jsonl" ;;
      *) echo "bench-group.sh: unknown target $t" >&2; exit 1 ;;
    esac
  done
done
# Medians and ranges per target and concurrency.
python3 - "$DIR" $TARGETS <<'EOF' | tee "$DIR/summary.txt"
import json, statistics, sys
d, targets = sys.argv[1], sys.argv[2:]
rows = {}
for t in targets:
    for line in open(f"{d}/{t}.jsonl"):
        r = json.loads(line)
        rows.setdefault((t, r["concurrency"]), []).append(r)
def fmt(vals, spec):
    return f"{statistics.median(vals):{spec}} ({min(vals):{spec}}–{max(vals):{spec}})"
print("target | calls | runs | decisions/s | p50 ms | p99 ms | server CPU µs | Redis CPU µs | errors")
for (t, c), rs in sorted(rows.items(), key=lambda kv: (kv[0][1], targets.index(kv[0][0]))):
    redis = [r.get("aux_cpu_us_per_decision", {}).get("redis") for r in rs]
    redis = [x for x in redis if x is not None]
    print(f"{t} | {c} | {len(rs)} | {fmt([r['rps'] for r in rs], '.0f')} | {fmt([r['p50_ms'] for r in rs], '.2f')} | "
          f"{fmt([r['p99_ms'] for r in rs], '.2f')} | {fmt([r['server_cpu_us_per_decision'] for r in rs], '.1f')} | "
          f"{fmt(redis, '.1f') if redis else '-'} | {sum(r['errors_total'] for r in rs)}")
EOF
files=()
for t in $TARGETS; do files+=("$DIR/$t.jsonl"); done
bin/rls-plot -o "$DIR/group.png" -title "group commit: decisions/s and p99 vs concurrency" "${files[@]}"
echo "bench-group.sh: results, summary.txt and group.png in $DIR" >&2
