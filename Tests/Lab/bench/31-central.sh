#!/bin/bash
# timeout: 900
# Central receive rate and discovery-to-first-read, all in one guest run, with the same
# peripheral every time (notify_bench.py peripheral --mode fd on hci0: Python writing to the
# AcquireNotify fd, the fastest sender the lab has) and three receiving centrals on hci1:
#   ours            peerlinkd's central (AcquireNotify) into a control client (central_bench.py ours)
#   fd_baseline     Python reading the AcquireNotify fd (notify_bench.py central)
#   dbus_baseline   Python with StartNotify + PropertiesChanged (central_bench.py dbus)
# Each receiver also times scan hit -> connect -> services resolved -> first read (not the fd
# baseline, which reads nothing); the first-read ratio comes from a phase of its own at the end
# (FIRST_READ_REPEAT runs of each, first read only). No timing assertions: exit 0 when
# everything was measured.
# BENCH_REPEAT (3): ours, ours_stream and the fd baseline run that many times, interleaved,
# and each bench line gives the median (the emulator's speed drifts between runs).
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/bench/benchlib.sh"
require_peerlink

COUNT=${BENCH_COUNT:-3000}
REPEAT=${BENCH_REPEAT:-3}
SIZE=510
CHR=6A3E4B28-522D-4B3B-82A9-D5E2004534FC
cb() { py3 "$LAB_DIR/bench/central_bench.py" "$@"; }
nb() { py3 "$LAB_DIR/bench/notify_bench.py" "$@"; }
declare -A RATE=() BPS=() READ=()   # medians, set by bench_report
_gone() { ! kill -0 "$1" 2>/dev/null; }
_ready_or_gone() { [ -e "$LAB_OUT/$1.ready" ] || _gone "$RX_PID"; }

start_peerlinkd c hci1

# run NAME SVC RECEIVER...: the receiver first (scanner first), then the peripheral; go once
# subscribed; collect the receiver's RESULT (and FIRST_READ).
run_one() {
    local name=$1 svc=$2 base=${1%.*} tx try
    shift 2
    for try in 1 2; do
        # (a retry uses a service UUID of its own too, for the reason given below)
        [ "$try" = 1 ] || svc="${svc%??}A${svc: -1}"
        note "$name: $COUNT notifications of $SIZE bytes, Python fd peripheral on hci0 -> $name on hci1"
        rm -f "$LAB_OUT/$name.ready" "$LAB_OUT/$name.go"
        spawn "rx-$name" "$@" --service "$svc" --char $CHR --count "$COUNT" --size $SIZE --ready-file "$LAB_OUT/$name.ready"
        RX_PID=$SPAWN_PID
        sleep 3
        spawn "tx-$name" nb peripheral --adapter hci0 --mode fd --service "$svc" --char $CHR --count "$COUNT" --size $SIZE \
            --go-file "$LAB_OUT/$name.go" --name plbench
        tx=$SPAWN_PID
        wait_for 100 _ready_or_gone "$name"
        [ -e "$LAB_OUT/$name.ready" ] && break
        # The emulator sometimes never reports the advertisement (Tests/Lab/README.md): once more.
        [ "$try" = 1 ] || fail "$name: the central did not subscribe: $(tail -n 5 "$(log_of "rx-$name")"; tail -n 3 "$(log_of "tx-$name")")"
        note "$name: the central did not subscribe ($(tail -n 1 "$(log_of "rx-$name")")): once more"
        _lab_stop_pid "$RX_PID"; _lab_stop_pid "$tx"; wait "$tx" 2>/dev/null
        mv "$(log_of "rx-$name")" "$LAB_OUT/rx-$name.try1.log"; mv "$(log_of "tx-$name")" "$LAB_OUT/tx-$name.try1.log"
        lab_forget_devices
    done
    wait_log 20 "tx-$name" SUBSCRIBED || fail "$name: the peripheral saw no subscription: $(tail -n 5 "$(log_of "tx-$name")")"
    local marks=(receiver="$(pgrep -P "$RX_PID" | head -n 1)")
    [ "$name" = "${name#ours}" ] || marks+=(peerlinkd="${PEERLINKD_PID[c]}")
    cpu_mark "${marks[@]}"
    local ctx0; ctx0=$(_ctxsw "${PEERLINKD_PID[c]}")
    perf_sample "$name" 4
    touch "$LAB_OUT/$name.go"
    wait_log 90 "rx-$name" RESULT || fail "$name: no result: $(tail -n 5 "$(log_of "rx-$name")")"
    local line; line=$(grep '^RESULT' "$(log_of "rx-$name")")
    note "$name: $line"
    cpu_note "$name"
    [ "$name" = "${name#ours}" ] || note "$name: daemon context switches: $(( $(_ctxsw "${PEERLINKD_PID[c]}") - ctx0 ))"
    perf_report "$name" "${PEERLINKD_PID[c]}"
    local rate bps first
    rate=$(sed -n 's/.* rate=\([0-9.]*\).*/\1/p' <<<"$line")
    bps=$(sed -n 's/.* bytes_per_s=\([0-9]*\).*/\1/p' <<<"$line")
    [ -n "$rate" ] && [ -n "$bps" ] || fail "$name: nothing measured: $line"
    first=$(sed -n 's/^FIRST_READ seconds=\([0-9.]*\).*/\1/p' "$(log_of "rx-$name")")
    [ -z "$first" ] || note "$name: $(grep '^FIRST_READ' "$(log_of "rx-$name")")"
    bench_keep "$base" "$rate" "$bps" "$(sed -n 's/.*received=\([0-9]*\).*/\1/p' <<<"$line")" "$first"
    wait_for 30 _gone "$RX_PID" || _lab_stop_pid "$RX_PID"
    _lab_stop_pid "$tx"; wait "$tx" 2>/dev/null
    lab_forget_devices
}


# Every run's peripheral uses a service UUID of its own (…1633<rep><n>), so that a central can
# never take an earlier run's service for this one's (seen while stopping a spawned Python
# peripheral left it running: services.sh's _lab_stop_pid now stops its children first).
for rep in $(seq "$REPEAT"); do
    note "---- repetition $rep of $REPEAT"
    svc=C4FB2349-72FE-4CA2-94D6-1F3CB1633$((rep % 10))
    run_one "ours.$rep" "${svc}F0" cb ours --socket "$(pl_socket c)"
    run_one "ours_stream.$rep" "${svc}F3" cb ours --socket "$(pl_socket c)" --stream
    run_one "fd_baseline.$rep" "${svc}F1" nb central --adapter hci1 --find-timeout 90 --run-timeout 40
    # The Python D-Bus central takes 15 s a run: once, in the middle, is enough for its ratio.
    [ "$rep" != 2 ] && [ "$REPEAT" -ge 2 ] || run_one "dbus_baseline.1" "${svc}F2" cb dbus --adapter hci1
done
bench_report central

# First read alone, ours and the Python D-Bus central in turn, FIRST_READ_REPEAT (5) times each:
# one sample a run moves by 0.3 s between runs (the emulator), so the ratio is of medians over
# several. A run whose scan never saw the advertisement (the emulator, as above) is noted and
# left out; fewer than three samples of either side is a failure to measure.
FR_REPEAT=${FIRST_READ_REPEAT:-5}
declare -A FR=()
first_read_one() {
    local name=$1 svc=$2 tx first
    shift 2
    spawn "rx-$name" "$@" --service "$svc" --char $CHR --count 0 --size $SIZE --ready-file "$LAB_OUT/$name.ready"
    RX_PID=$SPAWN_PID
    sleep 3
    spawn "tx-$name" nb peripheral --adapter hci0 --mode fd --service "$svc" --char $CHR --count 1 --size $SIZE \
        --go-file "$LAB_OUT/$name.go" --name plbench
    tx=$SPAWN_PID
    wait_for 60 _gone "$RX_PID" || _lab_stop_pid "$RX_PID"
    _lab_stop_pid "$tx"; wait "$tx" 2>/dev/null
    first=$(sed -n 's/^FIRST_READ seconds=\([0-9.]*\).*/\1/p' "$(log_of "rx-$name")")
    if [ -n "$first" ]; then
        note "$name: $(grep '^FIRST_READ' "$(log_of "rx-$name")")"
        FR[${name%.*}]+=" $first"
    else
        note "$name: no first read ($(tail -n 1 "$(log_of "rx-$name")")): left out"
    fi
    lab_forget_devices
}
for rep in $(seq "$FR_REPEAT"); do
    svc=C4FB2349-72FE-4CA2-94D6-1F3CB1634$((rep % 10))
    first_read_one "first_ours.$rep" "${svc}E0" cb ours --socket "$(pl_socket c)"
    first_read_one "first_python.$rep" "${svc}E1" cb dbus --adapter hci1
done
note "first reads (s): ours${FR[first_ours]:-}; python${FR[first_python]:-}"
for side in first_ours first_python; do
    [ "$(wc -w <<<"${FR[$side]:-}")" -ge 3 ] || fail "$side: fewer than 3 first reads measured"
done
READ[ours]=$(_median "${FR[first_ours]}")
READ[dbus_baseline]=$(_median "${FR[first_python]}")
printf 'bench central.first_read_s=%s\nbench central.first_read_python_s=%s\n' "${READ[ours]}" "${READ[dbus_baseline]}"

"$PY3" - "${BPS[ours]}" "${BPS[fd_baseline]}" "${BPS[dbus_baseline]}" "${READ[ours]}" "${READ[dbus_baseline]}" "${BPS[ours_stream]}" <<'PY' || fail "ratios"
import sys
ours, fd, dbus, read_ours, read_py, stream = map(float, sys.argv[1:])
print(f"bench central.ratio_vs_fd_bytes={ours / fd:.2f}")
print(f"bench central.ratio_vs_fd_bytes_stream={stream / fd:.2f}")
print(f"bench central.ratio_vs_dbus_bytes={ours / dbus:.1f}")
print(f"bench central.first_read_ratio_vs_python={read_ours / read_py:.2f}")
PY
note "central bench done"
