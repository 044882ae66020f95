#!/usr/bin/env bash
# What a decision costs, in CPU time rather than requests per second (which
# other work on the machine disturbs more): ratelab edge --upstream builtin
# --key-by header:X-Consumer-Id under wrk -t2 -cCONNECTIONS with 1,000
# consumers (scripts/wrk-consumers.lua) and limits every request passes, at
# the default --redis-batch, for each of:
#   off           --limit off: the gateway alone
#   <algorithm>   one limit of each algorithm
#   three         three sliding-log limits on every request
#   nginx         the openresty engine (nginx + ratelimit.lua), one sliding-log limit
# and prints, as medians of ROUNDS alternating rounds:
#   the gateway's CPU per request (utime + stime of its processes, from
#   /proc/PID/stat, over the requests wrk completed), and what the limiter adds
#   over off; Redis's CPU per decision, over the requests: its process's
#   (used_cpu_user + used_cpu_sys in INFO cpu: commands, scripts, reading and
#   writing the network) and its scripts' (the usec of EVAL and EVALSHA in
#   INFO commandstats, reset before each run: a script's usec already holds
#   those of the commands it calls, which commandstats counts again under
#   their own names, so summing every command would count them twice);
#   requests/s.
# Redis and the gateway share SERVER_CPU, wrk runs on LOAD_CPU; each figure is
# a process's own CPU time, so sharing a core does not add to it. Loopback
# only; every run is bounded by DURATION. bench-rls.sh gives the rate limit
# service's CPU per call beside envoyproxy/ratelimit's.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-5s}
CONNECTIONS=${CONNECTIONS:-50}
ROUNDS=${ROUNDS:-3}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
REDIS_CPU=${REDIS_CPU:-$SERVER_CPU}
LIMIT=${LIMIT:-1000000/1m} # high enough that every request is admitted: the full decision path
REDIS_TIMEOUT=${REDIS_TIMEOUT:-2s}
CONFIGS=${CONFIGS:-off sliding-log fixed-window gcra token-bucket sliding-counter three nginx}

for tool in wrk taskset curl redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "bench-cost: needs $tool" >&2; exit 1; }
done
go build -o bin/ratelab ./cmd/ratelab

dir=$(mktemp -d)
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(freeport)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --daemonize yes --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
taskset -pc "$REDIS_CPU" "$(cat "$dir/redis.pid")" >/dev/null

# flags CONFIG: ratelab edge's flags for it.
flags() {
  case $1 in
  off) echo "--limit off" ;;
  three) echo "--algorithm sliding-log --limit 10000000/1s --limit 100000000/1m --limit 1000000000/1h" ;;
  nginx) echo "--engine openresty --algorithm sliding-log --limit $LIMIT" ;;
  *) echo "--algorithm $1 --limit $LIMIT" ;;
  esac
}

# tree PID: PID and every process under it (nginx's master and workers).
tree() {
  local c
  echo "$1"
  for c in $(pgrep -P "$1" || true); do tree "$c"; done
}
# ticks PID: the CPU clock ticks of PID and every process under it.
ticks() {
  local total=0 p
  for p in $(tree "$1"); do
    if [ -r "/proc/$p/stat" ]; then total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat"))); fi
  done
  echo "$total"
}
# script_usec: the usec of the scripts run since the last CONFIG RESETSTAT.
script_usec() {
  redis-cli -p "$port" info commandstats | tr -d '\r' | awk -F'[:=,]' '/^cmdstat_(eval|evalsha|eval_ro|evalsha_ro):/ {s += $5} END {printf "%d", s}'
}
# redis_cpu_usec: Redis's process CPU time so far, user and system, in µs.
redis_cpu_usec() {
  redis-cli -p "$port" info cpu | tr -d '\r' | awk -F: '$1 == "used_cpu_user" || $1 == "used_cpu_sys" {s += $2} END {printf "%d", s * 1e6}'
}

# run CONFIG: one run; appends "req/s requests gateway-µs/request redis-µs/request" to $dir/CONFIG.
run() {
  local name=$1 listen pid t0 t1 n
  listen=127.0.0.1:$(freeport)
  # shellcheck disable=SC2046
  taskset -c "$SERVER_CPU" ./bin/ratelab edge --listen "$listen" --admin "" --upstream builtin --key-by header:X-Consumer-Id \
    --redis "redis://127.0.0.1:$port" --redis-timeout "$REDIS_TIMEOUT" $(flags "$name") 2>"$dir/$name.log" &
  pid=$!
  for _ in $(seq 200); do curl -s -o /dev/null "http://$listen/" && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  curl -s -o /dev/null "http://$listen/" || { echo "bench-cost: $name did not answer; its log:" >&2; cat "$dir/$name.log" >&2; exit 1; }
  redis-cli -p "$port" config resetstat >/dev/null
  local c0 c1
  c0=$(redis_cpu_usec)
  t0=$(ticks "$pid")
  taskset -c "$LOAD_CPU" wrk -t2 -c"$CONNECTIONS" -d"$DURATION" -s scripts/wrk-consumers.lua "http://$listen/" >"$dir/$name.wrk"
  t1=$(ticks "$pid")
  c1=$(redis_cpu_usec)
  local usec
  usec=$(script_usec)
  kill -INT "$pid"; wait "$pid" || true
  if grep -q Non-2xx "$dir/$name.wrk"; then echo "bench-cost: $name answered non-2xx: $(grep Non-2xx "$dir/$name.wrk")" >&2; fi
  n=$(awk '/requests in/ {print $1}' "$dir/$name.wrk")
  awk -v rps="$(awk '/Requests\/sec/ {print $2}' "$dir/$name.wrk")" -v n="$n" -v t=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v u="$usec" -v c=$((c1 - c0)) \
    'BEGIN {printf "%s %d %.2f %.2f %.2f\n", rps, n, t * 1e6 / hz / n, c / n, u / n}' >>"$dir/$name"
}

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
col() { awk -v n="$2" '{print $n}' "$dir/$1" | median; }
each() { awk -v n="$2" '{printf "%s ", $n}' "$dir/$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a/b : 0)}'; }

echo "bench-cost: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), $(nproc) cpus, load average$(uptime | sed 's/.*load average//')"
echo "gateway on cpu $SERVER_CPU, Redis $(redis-server --version | awk '{sub("v=", "", $3); print $3}') on cpu $REDIS_CPU, wrk -t2 -c$CONNECTIONS -d$DURATION on cpu $LOAD_CPU;" \
  "1,000 consumers, --limit $LIMIT, default --redis-batch; median of $ROUNDS alternating rounds"
for i in $(seq "$ROUNDS"); do
  for c in $CONFIGS; do run "$c"; done
done

printf '%-16s %10s %12s %12s %12s   %s\n' "" "req/s" "gateway µs" "Redis µs" "scripts µs" \
  "(each round: gateway CPU µs/request; Redis CPU µs/decision; script µs/decision)"
for c in $CONFIGS; do
  printf '%-16s %10s %12s %12s %12s   (%s; %s; %s)\n' "$c" "$(col "$c" 1)" "$(col "$c" 3)" "$(col "$c" 4)" "$(col "$c" 5)" \
    "$(each "$c" 3)" "$(each "$c" 4)" "$(each "$c" 5)"
done
echo "Redis's CPU per decision, targets: at most 4 µs for fixed-window, gcra and token-bucket; at most 8 for sliding-log"
if [[ " $CONFIGS " == *" off "* && " $CONFIGS " == *" sliding-log "* ]]; then
  echo "the limiter's CPU in the gateway, sliding log minus off: $(awk -v a="$(col sliding-log 3)" -v b="$(col off 3)" 'BEGIN {printf "%.1f", a - b}') µs a request (target at most 6)"
  echo "requests/s, sliding log over off: $(ratio "$(col sliding-log 1)" "$(col off 1)") (target at least 0.7)"
fi
if [[ " $CONFIGS " == *" three "* && " $CONFIGS " == *" sliding-log "* ]]; then
  echo "Redis's CPU, three limits over one: $(ratio "$(col three 4)" "$(col sliding-log 4)") (target at most 2)"
fi
if [[ " $CONFIGS " == *" nginx "* && " $CONFIGS " == *" sliding-log "* ]]; then
  echo "CPU per limited request, go gateway over nginx + ratelimit.lua: $(ratio "$(col sliding-log 3)" "$(col nginx 3)") (target at most 0.6)"
fi
echo "load average at the end$(uptime | sed 's/.*load average//')"
