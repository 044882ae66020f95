#!/usr/bin/env bash
# Installs what ratelab's tests need when it is missing: redis-server.
# As root on Debian or Ubuntu it uses apt-get; otherwise it says what to
# install. Without redis-server the tests that need one are skipped, except
# under CI (CI=true), where they fail.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
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
