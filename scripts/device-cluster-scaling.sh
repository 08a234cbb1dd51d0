#!/usr/bin/env bash
# The cluster's scaling on a many-core machine (16 cores, no network), in one run:
#   drumbeat bench cluster --quick --scaling
# = the standalone crawl, 1 manager with 1, 2, 4, 8 and 12 fetcher processes, 2 and 4
# managers with 8 and 12; it prints the table (pages/s, ratios, CPU per page by role,
# Redis per page). Run from the repository root with drumbeat importable (PYTHONPATH=$PWD).
# What it needs and may not find: nginx, redis-server, and drumbeat's Python dependencies;
# it says what is missing and exits 0 without running (nothing can be installed offline).
# Extra arguments go to the benchmark (e.g. --json, --configs 1m1f,1m8f, --seconds 30).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="${PYTHONPATH:-$PWD}"
PY="${PYTHON:-python3}"

missing=()
command -v "$PY" >/dev/null || missing+=("$PY")
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=("nginx (apt-get install nginx)")
command -v redis-server >/dev/null || missing+=("redis-server (apt-get install redis-server)")
if command -v "$PY" >/dev/null; then
    # The roles' imports pull in drumbeat's dependencies: the first one missing is named.
    err=$("$PY" -c 'import drumbeat.standalone, drumbeat.cluster, drumbeat.bench.cluster, drumbeat.simweb.dns' 2>&1 | tail -1)
    [ -n "$err" ] && missing+=("Python: $err (drumbeat from the repository root via PYTHONPATH=\$PWD; its dependencies: pip install . where there is network)")
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "device-cluster-scaling: SKIPPED, this machine lacks:" >&2
    printf '  - %s\n' "${missing[@]}" >&2
    exit 0
fi

# On stderr, as the loop copies below: stdout is the benchmark's alone (--json parses).
echo "cores: $(nproc); $(grep -m1 'model name' /proc/cpuinfo)" >&2
# The open-files limit: nginx and a dozen fetchers hold many connections.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
# The machine's own per-process scaling first: the cluster's growth is read against it.
"$PY" scripts/cpu-scaling.py --seconds 2 >&2 || true
exec "$PY" -m drumbeat bench cluster --quick --scaling "$@"
