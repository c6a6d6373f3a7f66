#!/usr/bin/env bash
# tools/scripts/bench.sh — one load run per concurrency, on this machine only.
#
# Builds bin/rls-load, bin/rls-floor and bin/rls-plot, starts the server on a
# free loopback port, runs rls-load once per concurrency with -server-pid,
# appends one JSON line per run to a results file, stops the server by PID
# and draws the plot next to the results.
#
# Run it from anywhere; paths are relative to the repository root. The load
# tools build from the tools module (tools/go.mod), envoy-rls from the
# service module.
#
#   tools/scripts/bench.sh                                   # the do-nothing gRPC floor
#   tools/scripts/bench.sh --target envoy-rls --store memory
#   tools/scripts/bench.sh --target envoy-rls --store redis  # starts its own redis-server
#   tools/scripts/bench.sh --target reference               # envoyproxy/ratelimit on its own redis-server
#   tools/scripts/bench.sh --target ceiling                 # envoy-rls, Redis, a do-nothing Lua program
#   tools/scripts/bench.sh --target ceiling-state           # the same, with an MGET and a SET PX per key
#   tools/scripts/bench.sh --target envoy-rls --store redis --mode rlqs  # RLQS: a fleet of simulated proxies (rlqs-load)
#
# Options (defaults in brackets):
#   --target floor|envoy-rls|reference|ceiling|ceiling-state  [floor]
#                             reference: the reference service
#                             (envoyproxy/ratelimit, built once into
#                             bin/ratelimit-reference by
#                             tools/scripts/ensure-reference.sh) on Redis, stats off
#                             (DISABLE_STATS=true: its best case), its other
#                             settings at their defaults
#                             ceiling: envoy-rls on Redis built from a
#                             temporary copy of this tree whose batch program
#                             (script and function library) is
#                             tools/ceiling/rate-batch-v2.lua (one TIME,
#                             every key ALLOWED, nothing stored) into
#                             bin/envoy-rls-ceiling: the most any Lua program
#                             could give here. Fixed-window rules only; never
#                             a rate limiter
#                             ceiling-state: the same from
#                             tools/ceiling/rate-batch-v2-state.lua, which
#                             also MGETs its keys and SETs (PX) each, into
#                             bin/envoy-rls-ceiling-state: the most a
#                             program that keeps its state in Redis could give
#   --store memory|redis      [memory]  envoy-rls only
#   --config DIR|FILE         [tools/config/bench/fixed-window.yaml; reference
#                             and ceiling: tools/config/bench/reference]
#                             the rule files, which must match the load's
#                             --domain and --descriptors (rls-load warns
#                             when no answer carried a limit); the reference
#                             gets copies of the *.yaml files under its
#                             runtime directory
#   --server-args "ARGS"      extra envoy-rls flags (floor: rls-floor's tuning
#                             flags, e.g. "-stream-workers 64")
#   --concurrency "LIST"      [16 64 256]
#   --connections N           [4]
#   --duration D              [10s] measured phase per run
#   --warmup D                [2s]
#   --subjects N              [10000]
#   --dist uniform|zipf       [uniform]
#   --domain D                [bench]
#   --descriptors SPEC        [remote_address]  (see rls-load -h)
#   --hits N                  [0: unset]
#   --label TEXT              [floor | envoy-rls <store>]
#   --out FILE.jsonl          [bench/results/<label>-<UTC time>.jsonl]
#   --no-plot                 skip the PNG
#   --mode rls|rlqs           [rls]  rlqs (envoy-rls only): one rlqs-load run
#                             per --fleet, instead of rls-load per concurrency;
#                             --config defaults to tools/config/bench/rlqs.yaml,
#                             --duration, --warmup, --domain, --label, --out
#                             and --max-busy apply, the other load options do not
#   --fleet "LIST"            [20x500]  rlqs: PROXIESxBUCKETS per run
#   --interval D              [1s]  rlqs: the proxies' reporting interval
#   --rate R                  [1]  rlqs: requests per second per bucket per proxy
#   --probes N                [5]  rlqs: new buckets whose first assignment is timed
#   --disjoint                rlqs: each proxy its own buckets, not the same ones
#   --tick D                  [1s]  rlqs: the server's --rlqs-tick (told to both)
#   --max-busy X              before each run, wait (≤ 10 min) until the machine
#                             has used less than X cores over 3 s (the idle server
#                             included): other work on the 2 cores skews every
#                             figure; each JSON line records other_cpu_cores, what
#                             other processes used during that run
#
# Everything listens on 127.0.0.1 and every run is bounded by --duration.
set -euo pipefail
cd "$(dirname "$0")/../.."

TARGET=floor STORE=memory CONFIG="" SERVER_ARGS=""
CONCURRENCY="16 64 256" CONNECTIONS=4 DURATION=10s WARMUP=2s
SUBJECTS=10000 DIST=uniform DOMAIN=bench DESCRIPTORS=remote_address HITS=0
LABEL="" OUT="" PLOT=1 MAX_BUSY=""
MODE=rls FLEET=20x500 INTERVAL=1s RATE=1 PROBES=5 DISJOINT="" TICK=1s

die() { echo "bench.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --target) TARGET=$2; shift 2 ;;
    --store) STORE=$2; shift 2 ;;
    --config) CONFIG=$2; shift 2 ;;
    --server-args) SERVER_ARGS=$2; shift 2 ;;
    --concurrency) CONCURRENCY=$2; shift 2 ;;
    --connections) CONNECTIONS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --subjects) SUBJECTS=$2; shift 2 ;;
    --dist) DIST=$2; shift 2 ;;
    --domain) DOMAIN=$2; shift 2 ;;
    --descriptors) DESCRIPTORS=$2; shift 2 ;;
    --hits) HITS=$2; shift 2 ;;
    --label) LABEL=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --no-plot) PLOT=0; shift ;;
    --max-busy) MAX_BUSY=$2; shift 2 ;;
    --mode) MODE=$2; shift 2 ;;
    --fleet) FLEET=$2; shift 2 ;;
    --interval) INTERVAL=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --probes) PROBES=$2; shift 2 ;;
    --disjoint) DISJOINT=-disjoint; shift ;;
    --tick) TICK=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (try --help)" ;;
  esac
done
case "$TARGET" in floor|envoy-rls|reference|ceiling|ceiling-state) ;; *) die "--target must be floor, envoy-rls, reference, ceiling or ceiling-state" ;; esac
case "$MODE" in
  rls) ;;
  rlqs)
    [ "$TARGET" = envoy-rls ] || die "--mode rlqs needs --target envoy-rls"
    [ -n "$CONFIG" ] || CONFIG=tools/config/bench/rlqs.yaml
    PLOT=0
    SERVER_ARGS="--rlqs-tick $TICK $SERVER_ARGS"
    ;;
  *) die "--mode must be rls or rlqs" ;;
esac
# The ceiling targets: the stub each builds in place of the batch program.
STUB=""
case "$TARGET" in
  ceiling) STUB=tools/ceiling/rate-batch-v2.lua ;;
  ceiling-state) STUB=tools/ceiling/rate-batch-v2-state.lua ;;
esac
if [ "$TARGET" = reference ] || [ -n "$STUB" ]; then
  STORE=redis
  [ -n "$CONFIG" ] || CONFIG=tools/config/bench/reference
fi
[ -n "$CONFIG" ] || CONFIG=tools/config/bench/fixed-window.yaml
case "$STORE" in memory|redis) ;; *) die "--store must be memory or redis" ;; esac
if [ -z "$LABEL" ]; then
  case "$TARGET" in
    floor) LABEL=floor ;;
    reference) LABEL=reference ;;
    ceiling|ceiling-state) LABEL=$TARGET ;;
    *) LABEL="envoy-rls $STORE" ;;
  esac
  [ "$MODE" = rls ] || LABEL="$LABEL $MODE"
fi
if [ -z "$OUT" ]; then
  OUT="bench/results/$(echo "$LABEL" | tr -c 'A-Za-z0-9._-' '-' | sed 's/-*$//')-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
fi
mkdir -p "$(dirname "$OUT")"
GO=${GO:-go}

echo "bench.sh: building bin/rls-load bin/rlqs-load bin/rls-floor bin/rls-plot" >&2
mkdir -p bin
for tool in rls-load rlqs-load rls-floor rls-plot; do
  $GO -C tools build -trimpath -o "$PWD/bin/$tool" "./cmd/$tool"
done
if [ "$TARGET" = envoy-rls ]; then
  [ -d cmd/envoy-rls ] || die "cmd/envoy-rls does not exist yet"
  $GO build -trimpath -o bin/envoy-rls ./cmd/envoy-rls || die "bin/envoy-rls does not build yet"
fi
if [ -n "$STUB" ]; then
  # The tree as it is (committed or not), but the stub for the batch program.
  CEILING_SRC=$(mktemp -d)
  tar -cf - --exclude=./bin --exclude=./bench --exclude=./tools --exclude=./.git . | tar -xf - -C "$CEILING_SRC"
  cp "$STUB" "$CEILING_SRC/pkg/lua/rate-batch-v2.lua"
  # The store runs the batch program by FCALL of its function library, so
  # the stub replaces that library too (the same wrapping as pkg/lua's).
  { echo '#!lua name=envoy_rls_ceiling'
    echo 'local KEYS, ARGV'
    echo "redis.register_function{function_name='envoy_rls_ceiling_batch', callback=function(keys, args)"
    echo 'KEYS, ARGV = keys, args'
    cat "$STUB"
    echo 'end}'
  } >"$CEILING_SRC/pkg/lua/rate-batch-v2-function.lua"
  (cd "$CEILING_SRC" && $GO build -trimpath -o "$OLDPWD/bin/envoy-rls-$TARGET" ./cmd/envoy-rls) ||
    { rm -rf "$CEILING_SRC"; die "bin/envoy-rls-$TARGET does not build"; }
  rm -rf "$CEILING_SRC"
fi
if [ "$TARGET" = reference ]; then
  REFERENCE_BIN=$(tools/scripts/ensure-reference.sh) || die "could not build the reference service"
fi

WORK=$(mktemp -d)
SERVER_PID="" REDIS_PID=""
# stop_pid PID: SIGTERM, wait up to 10 s, then SIGKILL. Only PIDs we started.
stop_pid() {
  local pid=$1
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; echo "bench.sh: stopped pid $pid" >&2; return 0; }
    sleep 0.1
  done
  echo "bench.sh: pid $pid ignored SIGTERM; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  stop_pid "$SERVER_PID"
  stop_pid "$REDIS_PID"
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# free_port: a loopback TCP port nobody answers on (bash's /dev/tcp).
# The ports come from below the kernel's ephemeral range: a port there can be
# the local end of some outgoing connection (the load tool's, Redis clients'),
# which answers no connect and still cannot be bound.
EPHEMERAL_LOW=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
free_port() {
  local p
  for _ in $(seq 1 100); do
    p=$(( 10000 + (RANDOM * 32768 + RANDOM) % (EPHEMERAL_LOW - 10000) ))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  die "no free loopback port found"
}
# wait_port PORT PID NAME: until something accepts on PORT (≤ 15 s), while PID lives.
wait_port() {
  for _ in $(seq 1 150); do
    kill -0 "$2" 2>/dev/null || die "$3 exited during start-up; its log: $(cat "$WORK/$3.log")"
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  die "$3 did not listen on 127.0.0.1:$1 within 15 s"
}

GRPC_PORT=$(free_port)
ADDR="127.0.0.1:$GRPC_PORT"
AUX=()
if [ "$STORE" = redis ] && [ "$TARGET" != floor ]; then
  command -v redis-server >/dev/null || scripts/ensure-deps.sh
  REDIS_PORT=$(free_port)
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
    --dir "$WORK" >"$WORK/redis.log" 2>&1 &
  REDIS_PID=$!
  wait_port "$REDIS_PORT" "$REDIS_PID" redis
  echo "bench.sh: redis-server at 127.0.0.1:$REDIS_PORT (pid $REDIS_PID)" >&2
  AUX=(-aux-pid "redis=$REDIS_PID")
fi
case "$TARGET" in
floor)
  # shellcheck disable=SC2086 # --server-args is a list of flags
  bin/rls-floor -addr "$ADDR" $SERVER_ARGS >"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  ;;
reference)
  # Its rules live in $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/config; every
  # listener on loopback; no stats sink (DISABLE_STATS), the rest default.
  mkdir -p "$WORK/runtime/ratelimit/config"
  if [ -d "$CONFIG" ]; then cp "$CONFIG"/*.yaml "$WORK/runtime/ratelimit/config/"; else cp "$CONFIG" "$WORK/runtime/ratelimit/config/"; fi
  env USE_STATSD=false DISABLE_STATS=true LOG_LEVEL=warn \
    REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$REDIS_PORT" \
    RUNTIME_ROOT="$WORK/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
    HOST=127.0.0.1 PORT="$(free_port)" GRPC_HOST=127.0.0.1 GRPC_PORT="$GRPC_PORT" \
    DEBUG_HOST=127.0.0.1 DEBUG_PORT="$(free_port)" \
    "$REFERENCE_BIN" >"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  ;;
*)
  ARGS=(serve --config "$CONFIG" --store "$STORE" --grpc-addr "$ADDR" --admin-addr "127.0.0.1:$(free_port)")
  if [ "$STORE" = redis ]; then
    # A synthetic secret for this run only.
    (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/hmac-secret")
    ARGS+=(--redis-addr "127.0.0.1:$REDIS_PORT" --hmac-secret-file "$WORK/hmac-secret")
  fi
  # shellcheck disable=SC2206 # word splitting of --server-args is intended
  ARGS+=($SERVER_ARGS)
  BIN=bin/envoy-rls
  [ -z "$STUB" ] || BIN=bin/envoy-rls-$TARGET
  "$BIN" "${ARGS[@]}" >"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  ;;
esac
wait_port "$GRPC_PORT" "$SERVER_PID" server

echo "bench.sh: $LABEL at $ADDR (pid $SERVER_PID); $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); results → $OUT" >&2
# busy_ticks: CPU ticks (1/100 s) all CPUs have been busy since boot.
busy_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
# wait_quiet: until the machine used < MAX_BUSY cores over 3 s (≤ 10 min).
wait_quiet() {
  [ -n "$MAX_BUSY" ] || return 0
  local b0 b1 cores
  for _ in $(seq 1 200); do
    b0=$(busy_ticks); sleep 3; b1=$(busy_ticks)
    cores=$(awk -v d=$((b1 - b0)) 'BEGIN { printf "%.2f", d / 300 }')
    if awk -v c="$cores" -v m="$MAX_BUSY" 'BEGIN { exit !(c < m) }'; then return 0; fi
    echo "bench.sh: the machine is busy ($cores cores ≥ $MAX_BUSY); waiting" >&2
  done
  die "the machine stayed busier than $MAX_BUSY cores for 10 minutes"
}

# A ceiling's runs go to $OUT only once Redis is seen to have run its stub.
RUNS=$OUT
[ -z "$STUB" ] || RUNS=$WORK/runs.jsonl
if [ "$MODE" = rlqs ]; then
  for f in $FLEET; do
    case "$f" in *[0-9]x[0-9]*) ;; *) die "--fleet wants PROXIESxBUCKETS, got $f" ;; esac
    wait_quiet
    bin/rlqs-load -addr "$ADDR" -proxies "${f%%x*}" -buckets "${f#*x}" -interval "$INTERVAL" \
      -rate "$RATE" -tick "$TICK" -probes "$PROBES" ${DISJOINT:+"$DISJOINT"} -duration "$DURATION" -warmup "$WARMUP" \
      -domain "$DOMAIN" -server-pid "$SERVER_PID" ${AUX[@]+"${AUX[@]}"} -label "$LABEL" | tee -a "$OUT"
  done
  CONCURRENCY=""
fi
for c in $CONCURRENCY; do
  wait_quiet
  bin/rls-load -addr "$ADDR" -concurrency "$c" -connections "$CONNECTIONS" \
    -duration "$DURATION" -warmup "$WARMUP" -subjects "$SUBJECTS" -dist "$DIST" \
    -domain "$DOMAIN" -descriptors "$DESCRIPTORS" -hits "$HITS" \
    -server-pid "$SERVER_PID" ${AUX[@]+"${AUX[@]}"} -label "$LABEL" | tee -a "$RUNS"
done

# A ceiling's figures count only if Redis ran the stub: its library and no
# other (a build that ran the real program would measure that), or none
# (the store fell back to EVALSHA, whose script is the stub too).
if [ -n "$STUB" ]; then
  LIBS=$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" FUNCTION LIST | { grep -A1 '^library_name$' || true; } |
    { grep -v -e '^library_name$' -e '^--$' || true; } | tr '\n' ' ')
  case "$LIBS" in
    "" | "envoy_rls_ceiling ") cat "$RUNS" >>"$OUT" ;;
    *) die "the $TARGET run's Redis holds the libraries '$LIBS', not only envoy_rls_ceiling: its figures are not the stub's; not written to $OUT" ;;
  esac
fi

if [ "$PLOT" = 1 ]; then
  bin/rls-plot -o "${OUT%.jsonl}.png" -title "$LABEL: throughput and p99 vs concurrency" "$OUT"
  echo "bench.sh: plot → ${OUT%.jsonl}.png" >&2
fi
