#!/usr/bin/env bash
# What batching (ratelab edge --redis-batch) buys, in one run on this machine,
# the gateway (and nginx) pinned to SERVER_CPU, Redis to REDIS_CPU, wrk and
# bench http to LOAD_CPU; ROUNDS alternating rounds, medians:
#   (a) the Go gateway limited (default --redis-batch) over --limit off, wrk
#       -c CONNECTIONS, 1,000 consumers, a limit every request is under;
#   (b) the Go gateway limited over nginx + ratelimit.lua limited;
#   (c) idle: bench http's open model, 1 connection at 100 requests/s, p50
#       and p99 of the default --redis-batch over --redis-batch 1, each over
#       every round's requests at once (ratelab report merge: a p99 of one
#       round's 2,000 requests turns on whether the machine stalled 20 of
#       them), beside each round's;
#   (d) Redis round trips per decision at CONNECTIONS, from the gateway's
#       metrics, beside Redis's own INFO counts (evalsha calls, reads).
# ONLY=sweep runs the sweep that chose the default instead: the Go gateway
# limited with --redis-batch N for each N of BATCHES; ONLY=idle runs (c) alone.
# Loopback only; every run is bounded by DURATION (IDLE_DURATION for (c)).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
IDLE_DURATION=${IDLE_DURATION:-20s}
CONNECTIONS=${CONNECTIONS:-50}
LIMIT=${LIMIT:-1000000/1m} # high enough that every request is admitted: the full decision path
REDIS_TIMEOUT=${REDIS_TIMEOUT:-2s} # long enough that a loaded machine does not turn decisions into fail-open admissions
ROUNDS=${ROUNDS:-3}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
REDIS_CPU=${REDIS_CPU:-$SERVER_CPU}
BATCHES=${BATCHES:-1 4 8 16 32 64}
ONLY=${ONLY:-} # sweep, or idle: (c) alone

for tool in wrk taskset curl jq redis-server; do
  command -v "$tool" >/dev/null || { echo "bench-batch: needs $tool" >&2; exit 1; }
done
go build -o bin/ratelab ./cmd/ratelab

dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --daemonize yes --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
taskset -pc "$REDIS_CPU" "$(cat "$dir/redis.pid")" >/dev/null
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
listen=127.0.0.1:$(freeport)
admin=127.0.0.1:$(freeport)

# start NAME FLAGS...: ratelab edge on SERVER_CPU, until it answers.
start() {
  local name=$1; shift
  taskset -c "$SERVER_CPU" ./bin/ratelab edge --listen "$listen" --upstream builtin --key-by header:X-Consumer-Id \
    --redis "redis://127.0.0.1:$port" --redis-timeout "$REDIS_TIMEOUT" "$@" 2>"$dir/$name.log" &
  pid=$!
  for _ in $(seq 200); do curl -s -o /dev/null "http://$listen/" && return; sleep 0.05; done
  echo "bench-batch: $name did not answer; its log:" >&2; cat "$dir/$name.log" >&2; exit 1
}
stop() { kill -INT "$pid"; wait "$pid" || true; }

# counts: the gateway's round trips, batches and decisions in them (0 0 0
# without metrics), then Redis's evalsha calls and reads from clients.
counts() {
  local m
  m=$(curl -s "http://$admin/metrics" 2>/dev/null || true)
  awk '$1=="ratelab_edge_redis_round_trips_total" {rt=$2} $1=="ratelab_edge_redis_batch_decisions_count" {b=$2}
       $1=="ratelab_edge_redis_batch_decisions_sum" {d=$2} END {printf "%d %d %d ", rt, b, d}' <<<"$m"
  redis-cli -p "$port" info commandstats | tr -d '\r' | awk -F'[:=,]' '$1=="cmdstat_evalsha" {e=$3} END {printf "%d ", e}'
  redis-cli -p "$port" info stats | tr -d '\r' | awk -F: '$1=="total_reads_processed" {printf "%d ", $2}'
  # CPU time in ms, the gateway's and Redis's.
  awk -v hz="$(getconf CLK_TCK)" '{printf "%d ", ($14 + $15) * 1000 / hz}' "/proc/$pid/stat"
  redis-cli -p "$port" info cpu | tr -d '\r' | awk -F: '$1=="used_cpu_sys" || $1=="used_cpu_user" {s+=$2} END {printf "%d\n", s*1000}'
}

# load NAME FLAGS...: wrk against ratelab edge FLAGS; prints requests/s,
# requests, then the differences of counts over the run.
load() {
  local name=$1; shift
  start "$name" "$@"
  local before after
  before=$(counts)
  taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s scripts/wrk-consumers.lua "http://$listen/" >"$dir/$name.wrk"
  after=$(counts)
  stop
  if grep -q Non-2xx "$dir/$name.wrk"; then echo "bench-batch: $name answered non-2xx: $(grep Non-2xx "$dir/$name.wrk")" >&2; fi
  printf '%s %s ' "$(awk '/Requests\/sec/ {print $2}' "$dir/$name.wrk")" "$(awk '/requests in/ {print $1}' "$dir/$name.wrk")"
  paste <(tr ' ' '\n' <<<"$before") <(tr ' ' '\n' <<<"$after") | awk '{printf "%d ", $2-$1} END {print ""}'
}

# idle NAME FLAGS...: bench http's open model, 1 connection at 100/s;
# prints the 2xx latency p50 and p99 in µs.
idle() {
  local name=$1; shift
  start "$name" "$@"
  taskset -c "$LOAD_CPU" ./bin/ratelab bench http "http://$listen/" --rate 100 --connections 1 --consumers 1000 \
    --duration "$IDLE_DURATION" -o json >"$dir/$name.json"
  stop
  jq -r '"\(.latency_2xx_us.p50) \(.latency_2xx_us.p99)"' "$dir/$name.json"
}

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# col FILE N: the median of column N of FILE.
col() { awk -v n="$2" '{print $n}' "$1" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a/b : 0)}'; }

echo "bench-batch: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), $(nproc) cpus, load average$(uptime | sed 's/.*load average//')"
echo "gateway and nginx on cpu $SERVER_CPU, Redis $(redis-server --version | awk '{print $3}') on cpu $REDIS_CPU, wrk and bench http on cpu $LOAD_CPU;" \
  "wrk -t1 -c$CONNECTIONS -d$DURATION, 1,000 consumers, --limit $LIMIT, --redis-timeout $REDIS_TIMEOUT; median of $ROUNDS alternating rounds"

if [ "$ONLY" = sweep ]; then
  for i in $(seq "$ROUNDS"); do
    for n in $BATCHES; do load "batch-$n" --admin "$admin" --limit "$LIMIT" --redis-batch "$n" >>"$dir/sweep-$n"; done
  done
  printf '%-14s %10s %14s %16s %s\n' "--redis-batch" "req/s" "round trips" "cpu µs/request" "(req/s of each round)"
  printf '%-14s %10s %14s %16s\n' "" "" "per decision" "gateway + Redis"
  for n in $BATCHES; do
    printf '%-14s %10s %14.3f %16.1f (%s)\n' "$n" "$(col "$dir/sweep-$n" 1)" \
      "$(awk '{print ($5 > 0 ? $3/$5 : 0)}' "$dir/sweep-$n" | median)" \
      "$(awk '{print ($8 + $9) * 1000 / $2}' "$dir/sweep-$n" | median)" "$(awk '{printf "%s ", $1}' "$dir/sweep-$n")"
  done
  echo "load average at the end$(uptime | sed 's/.*load average//')"
  exit 0
fi

# pooled NAME: the 2xx latency p50 and p99 in µs, and the requests, over
# every round of NAME at once.
pooled() {
  ./bin/ratelab report merge --as-one-run "$dir/$1"-[0-9]*.json -o json |
    jq -r '"\(.latency_2xx_us.p50) \(.latency_2xx_us.p99) \(.requests)"'
}

idle_ratios() {
  local b50 b99 bn o50 o99 on
  read -r b50 b99 bn < <(pooled idle-batched)
  read -r o50 o99 on < <(pooled idle-one)
  echo "(c) idle, 1 connection at 100/s, $ROUNDS rounds of $IDLE_DURATION, over every round's requests ($bn and $on):" \
    "default batch p50 ${b50} µs p99 ${b99} µs; --redis-batch 1 p50 ${o50} µs p99 ${o99} µs;" \
    "ratios p50 $(ratio "$b50" "$o50"), p99 $(ratio "$b99" "$o99")  (target at most 1.1)"
  echo "    each round's p50 and p99 in µs: default batch $(awk '{printf "%s/%s ", $1, $2}' "$dir/idle-batched"); --redis-batch 1 $(awk '{printf "%s/%s ", $1, $2}' "$dir/idle-one")"
}

if [ "$ONLY" = idle ]; then
  for i in $(seq "$ROUNDS"); do
    idle "idle-batched-$i" --admin "" --limit "$LIMIT" >>"$dir/idle-batched"
    idle "idle-one-$i" --admin "" --limit "$LIMIT" --redis-batch 1 >>"$dir/idle-one"
  done
  idle_ratios
  echo "load average at the end$(uptime | sed 's/.*load average//')"
  exit 0
fi

for i in $(seq "$ROUNDS"); do
  load "limited-$i" --admin "$admin" --limit "$LIMIT" >>"$dir/limited"
  load "unbatched-$i" --admin "$admin" --limit "$LIMIT" --redis-batch 1 >>"$dir/unbatched"
  load "off-$i" --admin "" --limit off >>"$dir/off"
  load "nginx-$i" --admin "" --limit "$LIMIT" --engine openresty >>"$dir/nginx"
  idle "idle-batched-$i" --admin "" --limit "$LIMIT" >>"$dir/idle-batched"
  idle "idle-one-$i" --admin "" --limit "$LIMIT" --redis-batch 1 >>"$dir/idle-one"
done
limited=$(col "$dir/limited" 1) off=$(col "$dir/off" 1) nginx=$(col "$dir/nginx" 1) unbatched=$(col "$dir/unbatched" 1)
printf '%-40s %10s req/s   (%s)\n' "go gateway, limited" "$limited" "$(awk '{printf "%s ", $1}' "$dir/limited")"
printf '%-40s %10s req/s   (%s)\n' "go gateway, limited, --redis-batch 1" "$unbatched" "$(awk '{printf "%s ", $1}' "$dir/unbatched")"
printf '%-40s %10s req/s   (%s)\n' "go gateway, --limit off" "$off" "$(awk '{printf "%s ", $1}' "$dir/off")"
printf '%-40s %10s req/s   (%s)\n' "nginx + ratelimit.lua, limited" "$nginx" "$(awk '{printf "%s ", $1}' "$dir/nginx")"
echo "(a) limited / off:                    $(ratio "$limited" "$off")  (target at least 0.6; with --redis-batch 1: $(ratio "$unbatched" "$off"))"
cpu() { awk '{printf "%.1f\n", ($8 + $9) * 1000 / $2}' "$1" | median; }
echo "    on cpu time, which other work on the machine disturbs less: gateway + Redis $(cpu "$dir/off") µs a request off," \
  "$(cpu "$dir/limited") µs limited: $(ratio "$(cpu "$dir/off")" "$(cpu "$dir/limited")") ($(cpu "$dir/unbatched") µs with --redis-batch 1:" \
  "$(ratio "$(cpu "$dir/off")" "$(cpu "$dir/unbatched")"))"
gwcpu() { awk '{printf "%.1f\n", $8 * 1000 / $2}' "$1" | median; }
echo "    the gateway's cpu alone, what (a) would be were Redis on a core of its own: $(gwcpu "$dir/off") µs a request off," \
  "$(gwcpu "$dir/limited") µs limited: $(ratio "$(gwcpu "$dir/off")" "$(gwcpu "$dir/limited")") ($(gwcpu "$dir/unbatched") µs with --redis-batch 1:" \
  "$(ratio "$(gwcpu "$dir/off")" "$(gwcpu "$dir/unbatched")"))"
echo "(b) go gateway / nginx + ratelimit.lua: $(ratio "$limited" "$nginx")  (target at least 2)"
idle_ratios
# Columns of $dir/limited: req/s, requests, round trips, batches, decisions in batches, Redis evalsha calls, Redis reads,
# gateway and Redis cpu ms.
echo "(d) round trips per decision at $CONNECTIONS connections, gateway's metrics: $(awk '{printf "%.3f\n", ($5 > 0 ? $3/$5 : 0)}' "$dir/limited" | median)  (target at most 0.2)"
echo "    per round: round trips / decisions (metrics); decisions / evalsha calls (Redis); Redis reads / round trips; evalsha calls / wrk requests:"
awk '{printf "      %d / %d = %.3f;  %d / %d;  %d / %d;  %d / %d\n", $3, $5, ($5 > 0 ? $3/$5 : 0), $5, $6, $7, $3, $6, $2}' "$dir/limited"
echo "load average at the end$(uptime | sed 's/.*load average//')"
