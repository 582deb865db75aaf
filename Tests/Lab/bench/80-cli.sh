#!/bin/bash
# timeout: 600
# The CLI and the daemon as the package installs them (make bench builds them statically,
# as make deb does: PEERLINK_STATIC_BIN): one binary, peerlinkd, with peerlink a link to it.
#   cli.peerlinkd_bytes        the stripped binary's size (the package installs this file once)
#   cli.status_ms / cli.status_socat_baseline_ms / cli.status_ratio
#                              `peerlink --json status` against the same request written
#                              with socat, N (50) each, in turn (cli_bench.py; target <= 1.5)
#   cli.daemon_idle_cpu_ms, cli.daemon_idle_wakeups, cli.daemon_idle_rss_mb
#                              the daemon left alone for IDLE seconds (60) after start-up:
#                              CPU time used, times its threads were scheduled (the third
#                              field of /proc/PID/task/TID/schedstat: each thread's count at
#                              the end less its count at the start, 0 for a thread born
#                              meanwhile; a thread that ended meanwhile is not counted),
#                              resident memory (targets: CPU ~0, no wakeups when nothing happens)
# No timing assertions: it fails only when a measurement could not be made.
. "$LAB_DIR/lib.sh"
N=${BENCH_CLI_N:-50}
IDLE=${BENCH_IDLE_SECONDS:-60}
[ -x "${PEERLINK_STATIC_BIN:-}/peerlinkd" ] \
    || fail "PEERLINK_STATIC_BIN=${PEERLINK_STATIC_BIN:-<unset>} has no peerlinkd (make bench builds it; or build with swift build -c release --static-swift-stdlib)"
command -v socat >/dev/null || fail "socat is not installed in the guest (make deps-lab)"

# The installed shape, in the guest's own tmpfs: stripped, with the link.
BIN=/tmp/peerlink-static
rm -rf "$BIN" && mkdir -p "$BIN"
strip -o "$BIN/peerlinkd" "$PEERLINK_STATIC_BIN/peerlinkd" || fail "strip failed"
ln -s peerlinkd "$BIN/peerlink"
echo "bench cli.peerlinkd_bytes=$(stat -c %s "$BIN/peerlinkd")"
export PEERLINK_BIN=$BIN

start_peerlinkd a hci0
pid=${PEERLINKD_PID[a]}

# Idle first, before any client has talked to it beyond start_peerlinkd's status poll.
sleep 5
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
# "TID COUNT" per thread.
scheduled() { local t; for t in /proc/"$pid"/task/*; do echo "${t##*/} $(awk '{print $3}' "$t/schedstat" 2>/dev/null)"; done; }
t0=$(ticks); scheduled >"$LAB_OUT/sched0"
sleep "$IDLE"
t1=$(ticks); scheduled >"$LAB_OUT/sched1"
wakeups=$(awk 'NR == FNR {before[$1] = $2; next} {n += $2 - ($1 in before ? before[$1] : 0)} END {print n + 0}' "$LAB_OUT/sched0" "$LAB_OUT/sched1")
rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
kill -0 "$pid" || fail "peerlinkd exited while idle"
echo "bench cli.daemon_idle_cpu_ms=$(( (t1 - t0) * 10 ))"
echo "bench cli.daemon_idle_wakeups=$wakeups"
echo "bench cli.daemon_idle_rss_mb=$(awk -v k="$rss" 'BEGIN {printf "%.1f", k / 1024}')"
note "idle for $IDLE s: $(( (t1 - t0) * 10 )) ms CPU, scheduled $wakeups times; threads before / after: $(wc -l <"$LAB_OUT/sched0") / $(wc -l <"$LAB_OUT/sched1")"

"$PY3" "$LAB_DIR/bench/cli_bench.py" "$BIN/peerlink" "$(pl_socket a)" cli "$N" || fail "cli_bench failed"
