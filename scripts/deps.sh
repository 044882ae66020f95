#!/usr/bin/env bash
# Installs what ratelab's tests need when it is missing: redis-server,
# redis-sentinel, nginx with the lua module and lua-resty-redis for the
# OpenResty module, and Chromium, in which the HTML report's test opens the
# page.
# As root on Debian or Ubuntu it uses apt-get; otherwise it says what to
# install. Without them the tests that need them are skipped, except under
# CI (CI=true), where they fail.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
# redis-sentinel for the failover drill and the Sentinel tests.
if [ "${1:-all}" != redis ]; then
  command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
fi
# `deps.sh redis` checks redis-server alone (for make demo); `deps.sh bench`
# also wrk (for make bench).
if [ "${1:-all}" = bench ]; then
  command -v wrk >/dev/null 2>&1 || missing+=(wrk)
fi
if [ "${1:-all}" != redis ] && ! command -v openresty >/dev/null 2>&1; then
  command -v nginx >/dev/null 2>&1 || missing+=(nginx)
  [ -e /usr/lib/nginx/modules/ngx_http_lua_module.so ] || missing+=(libnginx-mod-http-lua)
  [ -e /usr/share/lua/5.1/nginx/redis.lua ] || [ -e /usr/share/lua/5.1/resty/redis.lua ] || missing+=(lua-nginx-redis)
fi
if [ "${1:-all}" = all ]; then
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  exit 0
fi

echo "missing: ${missing[*]}; install it (on Debian: sudo apt-get install ${missing[*]})" >&2
case "${CI:-}" in
  ""|false|0) echo "continuing: tests that need it will be skipped" >&2 ;;
  *) exit 1 ;;
esac
