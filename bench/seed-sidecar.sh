#!/usr/bin/env bash
# The runbook's sidecar loop ("labeled lab commands, not production scrape
# config"), kept as written except: the cgroup file and the Redis port are
# arguments, and the loop is bounded so a benchmark can time it.
# usage: seed-sidecar.sh <cgroup memory.current file> <redis port> [iterations=10] [sleep seconds=1]
set -u
CG_FILE=${1:?usage: seed-sidecar.sh <cgroup memory.current file> <redis port> [iterations] [sleep]}
PORT=${2:?redis port}
ITERATIONS=${3:-10}
SLEEP=${4:-1}

i=0
while [ "$i" -lt "$ITERATIONS" ]; do
  date --iso-8601=seconds
  awk '/some/ {print "psi_mem_some", $0}' /proc/pressure/memory
  grep -E '^(si|so)' <(vmstat 1 2 | tail -1 | awk '{print "si", $7, "so", $8}')
  cat "$CG_FILE"
  redis-cli -p "$PORT" LPUSH_SENTINEL >/dev/null 2>&1 || redis-cli -p "$PORT" LLEN jobs
  sleep "$SLEEP"
  i=$((i + 1))
done
