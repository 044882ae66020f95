#!/usr/bin/env bash
# Side by side on this machine, with wrk: ratelab edge (Go) and nginx with
# edge/openresty/ratelimit.lua, same script, same Redis, same connections,
# both in front of their built-in upstream; then the Go gateway with
# --limit off, to show what the limiter adds. Loopback only; every run is
# bounded by DURATION.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-50}
THREADS=${THREADS:-2}
LIMIT=${LIMIT:-1000000/1m} # high enough that every request is admitted: the full decision path

command -v wrk >/dev/null || { echo "bench-edge: needs wrk (apt-get install wrk)" >&2; exit 1; }
go build -o bin/ratelab ./cmd/ratelab

dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --daemonize yes --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done

run() { # name, then ratelab edge flags
  local name=$1; shift
  local listen=127.0.0.1:18090
  ./bin/ratelab edge --listen "$listen" --admin "" --upstream builtin --key-by header:X-Consumer-Id \
    --redis "redis://127.0.0.1:$port" "$@" 2>"$dir/$name.log" &
  local pid=$!
  for _ in $(seq 200); do curl -s -o /dev/null "http://$listen/" && break; sleep 0.05; done
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s scripts/wrk-consumers.lua "http://$listen/" >"$dir/$name.wrk"
  kill -INT "$pid"; wait "$pid" || true
  local rps p50 p99 non2xx
  rps=$(awk '/Requests\/sec/ {print $2}' "$dir/$name.wrk")
  p50=$(awk '$1=="50%" {print $2}' "$dir/$name.wrk")
  p99=$(awk '$1=="99%" {print $2}' "$dir/$name.wrk")
  non2xx=$(awk '/Non-2xx/ {print $NF}' "$dir/$name.wrk")
  printf '%-28s %10s req/s   p50 %8s   p99 %8s   non-2xx %s\n' "$name" "$rps" "$p50" "$p99" "${non2xx:-0}"
}

echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION, 1,000 consumers, limit $LIMIT, Redis $(redis-server --version | awk '{print $3}')"
run "go gateway" --limit "$LIMIT"
run "nginx + ratelimit.lua" --limit "$LIMIT" --engine openresty
run "go gateway, --limit off" --limit off
run "nginx, no limiter" --limit off --engine openresty
