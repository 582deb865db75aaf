#!/bin/bash
# make bench, on the host: `peerlink --json status` against socat, as 80-cli does in the
# lab guest (Tests/Lab/bench/cli_bench.py), with the statically built binary make bench
# made (the package's shape: peerlink a link to peerlinkd). The daemon runs unprivileged on
# a private D-Bus session bus (no BlueZ there: status answers all the same).
#
#   scripts/cli-bench-host.sh STATIC_BIN_DIR OUT_LOG
#
# Writes the bench lines to OUT_LOG (where summary.py finds them) and to standard output.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
STATIC=${1:?static bin dir}; OUT=${2:?output log}
command -v socat >/dev/null || { echo "cli-bench-host: socat is missing: run scripts/install-deps.sh --lab (as root)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/peerlink-cli-bench.XXXXXX")
bus_pid= daemon_pid=
cleanup() {
    [ -z "$daemon_pid" ] || kill "$daemon_pid" 2>/dev/null || true
    [ -z "$bus_pid" ] || kill "$bus_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
strip -o "$work/peerlinkd" "$STATIC/peerlinkd"
ln -s peerlinkd "$work/peerlink"
read -r address bus_pid < <(dbus-daemon --session --fork --print-address=1 --print-pid=1 | paste -s -d ' ')
"$work/peerlinkd" --bus "$address" --socket "$work/control.sock" --state-dir "$work/state" --config /dev/null \
    </dev/null >"$work/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do
    [ -S "$work/control.sock" ] && break
    kill -0 "$daemon_pid" 2>/dev/null || { echo "cli-bench-host: peerlinkd exited: $(tail -n 5 "$work/daemon.log")" >&2; exit 1; }
    sleep 0.1
done
mkdir -p "$(dirname "$OUT")"
{
    echo "bench cli_host.peerlinkd_bytes=$(stat -c %s "$work/peerlinkd")"
    /usr/bin/python3 "$REPO/Tests/Lab/bench/cli_bench.py" "$work/peerlink" "$work/control.sock" cli_host "${BENCH_CLI_N:-50}"
} | tee "$OUT"
