#!/bin/bash
# timeout: 900
# Notification throughput, peripheral on hci0 -> central on hci1, all in one guest run and
# with the same receiver every time (notify_bench.py central: python3-dbus, AcquireNotify
# on the remote characteristic, counts packets and bytes from the first to the last):
#   ours_510 / ours_20   a control client pipelining gatt.notify (64 in flight) to peerlinkd
#   ours_510_values16    the same with the array form: 16 values a request (still 64 in flight)
#   fd_baseline_510      Python peripheral writing to the AcquireNotify fd (NotifyAcquired)
#   dbus_baseline_20     Python peripheral emitting PropertiesChanged on Value (bluezero way)
# Plus the daemon's RSS while it notifies.  No timing assertions: exit 0 when everything was
# measured, non-zero when something could not be.  BENCH_COUNT notifications a run (3000).
# BENCH_REPEAT (3): ours and the fd baseline run that many times, interleaved (ours, then the
# fd baseline, again and again), and each bench line gives the median: the emulator's speed
# drifts between runs by a third, and interleaving keeps the ratio honest.
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/bench/benchlib.sh"
require_peerlink

COUNT=${BENCH_COUNT:-3000}
REPEAT=${BENCH_REPEAT:-3}
CHR=6A3E4B28-522D-4B3B-82A9-D5E2004534FC
SVC_OURS=C4FB2349-72FE-4CA2-94D6-1F3CB16331E0
SVC_DBUS=C4FB2349-72FE-4CA2-94D6-1F3CB16331E2
bench() { py3 "$LAB_DIR/bench/notify_bench.py" "$@"; }
declare -A RATE=() BPS=() READ=()   # medians, set by bench_report
_gone() { ! kill -0 "$1" 2>/dev/null; }

# receiver NAME SVC SIZE: start the central on hci1 (scanner first, then the advertiser).
receiver() {
    rm -f "$LAB_OUT/$1.ready"
    spawn "rx-$1" bench central --adapter hci1 --service "$2" --char $CHR --count "$COUNT" --size "$3" \
        --ready-file "$LAB_OUT/$1.ready" --find-timeout 90 --run-timeout 40
    RX_PID=$SPAWN_PID
}

# subscribed NAME: the receiver has its AcquireNotify fd (0), or it exited or 100 s passed (1).
_ready_or_gone() { [ -e "$LAB_OUT/$1.ready" ] || _gone "$RX_PID"; }
subscribed() {
    wait_for 100 _ready_or_gone "$1"
    [ -e "$LAB_OUT/$1.ready" ]
}

# collect TAG: wait for the receiver's RESULT and keep its rate and bytes_per_s under the
# run's name (TAG is NAME.REPETITION); bench_report prints the medians.
collect() {
    local name=${1%.*}
    wait_log 60 "rx-$1" RESULT || fail "$1: no result from the receiver: $(tail -n 5 "$(log_of "rx-$1")")"
    local line; line=$(grep '^RESULT' "$(log_of "rx-$1")")
    note "$1: $line"
    local rate bps received
    rate=$(sed -n 's/.* rate=\([0-9.]*\).*/\1/p' <<<"$line")
    bps=$(sed -n 's/.* bytes_per_s=\([0-9]*\).*/\1/p' <<<"$line")
    received=$(sed -n 's/.*received=\([0-9]*\).*/\1/p' <<<"$line")
    [ -n "$rate" ] && [ -n "$bps" ] && [ "${received:-0}" -ge 2 ] || fail "$1: nothing measured: $line"
    [ "$received" = "$COUNT" ] || note "$1: $received of $COUNT notifications arrived (the receiver's socket holds few packets: bluetoothd drops when it is full)"
    bench_keep "$name" "$rate" "$bps" "$received"
    # it disconnects and forgets the device before exiting
    wait_for 30 _gone "$RX_PID" || { note "$1: receiver still running: stopping it"; _lab_stop_pid "$RX_PID"; }
}

# ---- ours: peerlinkd on hci0, fed by a pipelining control client -----------------------------
start_peerlinkd p hci0
expect_rc 0 pl p --json status
PID=$(printf '%s' "$RUN_OUT" | "$PY3" -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])["pid"])') \
    || fail "no pid in: $RUN_OUT"
assert_eq "$PID" "${PEERLINKD_PID[p]}" "daemon.status pid"
cat >"$LAB_OUT/app.json" <<JSON
{"name": "bench", "services": [{"uuid": "$SVC_OURS", "characteristics": [
  {"uuid": "$CHR", "flags": ["read", "notify"], "value": "bench"}]}]}
JSON
expect_rc 0 pl p gatt register "$LAB_OUT/app.json"
RSS_MAX=0
# ours_510 and ours_20 send one value a request; ours_510_values16 sends 16 a request
# (gatt.notify's values_base64).  BENCH_BATCH=1 adds ours_510_batch16 (JSON-RPC batches of
# 16 single-value requests a line; it measured the same as ours_510 in the last runs).
RUNS=${BENCH_RUNS:-"510:1:1 20:1:1 510:1:16 510:stream:1"}
[ "${BENCH_BATCH:-0}" = 1 ] && RUNS="$RUNS 510:16:1"
ours_runs() {
local rep=$1 run_ size batch values name mode rss
for run_ in $RUNS; do
    IFS=: read -r size batch values <<<"$run_"
    name=ours_$size
    mode=()
    if [ "$batch" = stream ]; then
        name=${name}_stream; batch=1; mode=(--stream)
    fi
    [ "$batch" = 1 ] || name=${name}_batch$batch
    [ "$values" = 1 ] || name=${name}_values$values
    name=$name.$rep
    note "$name: $COUNT notifications of $size bytes through peerlinkd"
    receiver "$name" $SVC_OURS "$size"
    expect_rc 0 pl p advertise start --name plbench --service $SVC_OURS
    if ! subscribed "$name"; then
        note "$name: the central did not subscribe ($(tail -n 1 "$(log_of "rx-$name")")): once more"
        _lab_stop_pid "$RX_PID"; mv "$(log_of "rx-$name")" "$LAB_OUT/rx-$name.try1.log"
        expect_rc 0 pl p advertise stop
        receiver "$name" $SVC_OURS "$size"
        expect_rc 0 pl p advertise start --name plbench --service $SVC_OURS
        subscribed "$name" || fail "$name: central not subscribed: $(tail -n 5 "$(log_of "rx-$name")")"
    fi
    wait_for 10 bash -c "'$PEERLINK_BIN/peerlink' --socket '$(pl_socket p)' --json gatt list | grep -q '\"subscribers\":[1-9]'" \
        || fail "$name: the daemon has no subscriber"
    cpu_mark peerlinkd="$PID"
    ctx0=$(_ctxsw "$PID")
    # shellcheck disable=SC2046
    run $(perf_wrap "$name") timeout --foreground 60 "$PY3" -u "$LAB_DIR/bench/notify_bench.py" client --socket "$(pl_socket p)" \
        --char $CHR --count "$COUNT" --size "$size" --window 64 --batch "$batch" --values "$values" --pid "$PID" "${mode[@]}"
    perf_report "$name" "$PID"
    note "$name: daemon context switches during the run: $(( $(_ctxsw "$PID") - ctx0 )); $(grep "^CLIENT" <<<"$RUN_OUT")"
    [ "$RUN_RC" = 0 ] || fail "$name: the control client failed (rc $RUN_RC): $RUN_OUT"
    rss=$(sed -n 's/.*rss_max_kb=\([0-9]*\).*/\1/p' <<<"$RUN_OUT")
    [ -n "$rss" ] && [ "$rss" -gt 0 ] || fail "$name: no RSS sample of pid $PID: $RUN_OUT"
    [ "$rss" -gt "$RSS_MAX" ] && RSS_MAX=$rss
    collect "$name"
    cpu_note "$name"
    expect_rc 0 pl p advertise stop
done
}

# ---- the baselines: Python peripherals on hci0 -------------------------------------------------
# baseline NAME MODE SVC SIZE
baseline() {
    local name=$1 mode=$2 svc=$3 size=$4
    note "$name: $COUNT notifications of $size bytes from a Python peripheral ($mode)"
    rm -f "$LAB_OUT/$name.go"
    receiver "$name" "$svc" "$size"
    spawn "tx-$name" bench peripheral --adapter hci0 --mode "$mode" --service "$svc" --char $CHR \
        --count "$COUNT" --size "$size" --go-file "$LAB_OUT/$name.go"
    local tx=$SPAWN_PID
    if ! subscribed "$name"; then
        note "$name: the central did not subscribe ($(tail -n 1 "$(log_of "rx-$name")")): once more"
        _lab_stop_pid "$RX_PID"; mv "$(log_of "rx-$name")" "$LAB_OUT/rx-$name.try1.log"
        receiver "$name" "$svc" "$size"
        subscribed "$name" || fail "$name: central not subscribed: $(tail -n 5 "$(log_of "rx-$name")"; tail -n 5 "$(log_of "tx-$name")")"
    fi
    wait_log 20 "tx-$name" SUBSCRIBED || fail "$name: the peripheral saw no subscription: $(tail -n 5 "$(log_of "tx-$name")")"
    cpu_mark sender="$(pgrep -P "$tx" | head -n 1)"     # the python under spawn's subshell
    touch "$LAB_OUT/$name.go"
    collect "$name"
    cpu_note "$name"
    note "$name: peripheral: $(grep '^SENT' "$(log_of "tx-$name")")"
    _lab_stop_pid "$tx"; wait "$tx" 2>/dev/null
}
# ---- interleaved: ours, then the fd baseline, REPEAT times; the D-Bus baseline once ----------
# (peerlinkd stays up between its runs, idle, its application registered; the Python
# peripherals use services of their own.)
# (Each fd-baseline run's peripheral uses a service UUID of its own, so that a central can
# never take an earlier run's service for this one's.)
for rep in $(seq "$REPEAT"); do
    note "---- repetition $rep of $REPEAT"
    ours_runs "$rep"
    baseline "fd_baseline_510.$rep" fd "C4FB2349-72FE-4CA2-94D6-1F3CB1633$((rep % 10))E1" 510
done
hwm=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$PID/status")
note "daemon pid $PID: VmRSS max sampled ${RSS_MAX} kB, VmHWM ${hwm:-?} kB"
stop_peerlinkd p || note "peerlinkd exited with status $?"
baseline dbus_baseline_20.1 dbus $SVC_DBUS 20
bench_report notify

# ---- side by side ------------------------------------------------------------------------------
# (BENCH_RUNS may leave some of ours out: their ratios are then not printed.)
"$PY3" - "${BPS[ours_510]:-}" "${BPS[fd_baseline_510]}" "${BPS[dbus_baseline_20]}" \
    "${RATE[ours_20]:-}" "${RATE[dbus_baseline_20]}" "$RSS_MAX" "${BPS[ours_510_values16]:-}" "${BPS[ours_510_stream]:-}" <<'PY' || fail "ratios"
import sys
ours, fd, dbus, ours20, dbus20, rss, values16, stream = (float(v) if v else None for v in sys.argv[1:])
if stream is not None:
    print(f"bench notify.ratio_vs_fd_bytes_stream={stream / fd:.2f}")
    print(f"bench notify.ratio_vs_dbus_rate_stream={stream / dbus:.1f}")
# What the target of 50x the D-Bus path asks of any sender here: the fd baseline's own ratio.
print(f"bench notify.fd_baseline_vs_dbus_rate={fd / dbus:.1f}")
if ours is not None:
    print(f"bench notify.ratio_vs_fd_bytes={ours / fd:.2f}")
if values16 is not None:
    print(f"bench notify.ratio_vs_fd_bytes_values16={values16 / fd:.2f}")
# Payload bytes per second: ours at 510 bytes against the D-Bus path at 20 (what each way delivers).
if ours is not None:
    print(f"bench notify.ratio_vs_dbus_rate={ours / dbus:.1f}")
if values16 is not None:
    print(f"bench notify.ratio_vs_dbus_rate_values16={values16 / dbus:.1f}")
# The same 20-byte payload on both: notifications per second.
if ours20 is not None:
    print(f"bench notify.ratio_vs_dbus_rate_20={ours20 / dbus20:.2f}")
print(f"bench notify.daemon_rss_mb={rss / 1024:.1f}")
PY
note "notify bench done"
