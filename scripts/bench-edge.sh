#!/usr/bin/env bash
# Side by side on this machine, with wrk: ratelab edge (Go) and nginx with
# edge/openresty/ratelimit.lua, same script, same Redis, same connections,
# both in front of their built-in upstream; then the Go gateway with
# --limit off, to show what the limiter adds; then the Go gateway with three
# limits per request against one (ROUNDS alternating runs each, the median,
# the gateway and Redis on one core and wrk on another), and their ratio.
# Loopback only; every run is bounded by DURATION.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-50}
THREADS=${THREADS:-2}
LIMIT=${LIMIT:-1000000/1m} # high enough that every request is admitted: the full decision path
ROUNDS=${ROUNDS:-3}
SERVER_CPU=${SERVER_CPU:-0}         # the gateway
LOAD_CPU=${LOAD_CPU:-1}             # wrk
REDIS_CPU=${REDIS_CPU:-$SERVER_CPU} # Redis: with the gateway unless told
ONLY=${ONLY:-}                      # "limits": only the three-limits-against-one comparison
ALGORITHM=${ALGORITHM:-sliding-log} # of the limits compared

command -v wrk >/dev/null || { echo "bench-edge: needs wrk (apt-get install wrk)" >&2; exit 1; }
go build -o bin/ratelab ./cmd/ratelab

dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --daemonize yes --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# ready NAME LISTEN PID: waits until the gateway answers, or stops the bench
# with its log (a port taken, a bad flag) rather than load something else.
ready() {
  for _ in $(seq 200); do curl -s -o /dev/null "http://$2/" && return; kill -0 "$3" 2>/dev/null || break; sleep 0.05; done
  echo "bench-edge: $1 did not answer on $2; its log:" >&2; cat "$dir/$1.log" >&2; exit 1
}

# wrk_rps runs ratelab edge with its flags pinned to SERVER_CPU, wrk pinned to
# LOAD_CPU, and prints the requests per second.
wrk_rps() {
  local name=$1; shift
  local listen=127.0.0.1:$(freeport)
  taskset -c "$SERVER_CPU" ./bin/ratelab edge --listen "$listen" --admin "" --upstream builtin --key-by header:X-Consumer-Id \
    --redis "redis://127.0.0.1:$port" "$@" 2>"$dir/$name.log" &
  local pid=$!
  ready "$name" "$listen" "$pid"
  taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s scripts/wrk-consumers.lua "http://$listen/" >"$dir/$name.wrk"
  kill -INT "$pid"; wait "$pid" || true
  if grep -q Non-2xx "$dir/$name.wrk"; then echo "bench-edge: $name answered non-2xx: $(grep Non-2xx "$dir/$name.wrk")" >&2; fi
  awk '/Requests\/sec/ {print $2}' "$dir/$name.wrk"
}

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# limits compares the Go gateway deciding three limits per request (one
# script call, atomic) with the same gateway deciding one.
limits() {
  command -v taskset >/dev/null || { echo "bench-edge: needs taskset (util-linux)" >&2; exit 1; }
  taskset -pc "$REDIS_CPU" "$(cat "$dir/redis.pid")" >/dev/null
  local one=() three=() r
  for i in $(seq "$ROUNDS"); do
    r=$(wrk_rps "one-$i" --algorithm "$ALGORITHM" --limit 100000000/1m)
    one+=("$r")
    r=$(wrk_rps "three-$i" --algorithm "$ALGORITHM" --limit 10000000/1s --limit 100000000/1m --limit 1000000000/1h)
    three+=("$r")
  done
  local m1 m3
  m1=$(printf '%s\n' "${one[@]}" | median)
  m3=$(printf '%s\n' "${three[@]}" | median)
  echo "three limits against one ($ALGORITHM), go gateway on cpu $SERVER_CPU, Redis on cpu $REDIS_CPU, wrk -t1 -c$CONNECTIONS -d$DURATION on cpu $LOAD_CPU, median of $ROUNDS alternating runs:"
  printf '  one limit     %10s req/s   (%s)\n' "$m1" "${one[*]}"
  printf '  three limits  %10s req/s   (%s)\n' "$m3" "${three[*]}"
  awk -v a="$m3" -v b="$m1" 'BEGIN {printf "  ratio         %10.2f (target at least 0.85)\n", a/b}'
}

run() { # name, then ratelab edge flags
  local name=$1; shift
  local listen=127.0.0.1:$(freeport)
  ./bin/ratelab edge --listen "$listen" --admin "" --upstream builtin --key-by header:X-Consumer-Id \
    --redis "redis://127.0.0.1:$port" "$@" 2>"$dir/$name.log" &
  local pid=$!
  ready "$name" "$listen" "$pid"
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s scripts/wrk-consumers.lua "http://$listen/" >"$dir/$name.wrk"
  kill -INT "$pid"; wait "$pid" || true
  local rps p50 p99 non2xx
  rps=$(awk '/Requests\/sec/ {print $2}' "$dir/$name.wrk")
  p50=$(awk '$1=="50%" {print $2}' "$dir/$name.wrk")
  p99=$(awk '$1=="99%" {print $2}' "$dir/$name.wrk")
  non2xx=$(awk '/Non-2xx/ {print $NF}' "$dir/$name.wrk")
  printf '%-28s %10s req/s   p50 %8s   p99 %8s   non-2xx %s\n' "$name" "$rps" "$p50" "$p99" "${non2xx:-0}"
}

if [ "$ONLY" = limits ]; then limits; exit 0; fi
echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION, 1,000 consumers, limit $LIMIT, Redis $(redis-server --version | awk '{print $3}')"
run "go gateway" --limit "$LIMIT"
run "nginx + ratelimit.lua" --limit "$LIMIT" --engine openresty
run "go gateway, --limit off" --limit off
run "nginx, no limiter" --limit off --engine openresty
limits
