#!/bin/bash
# Inside the lab guest, as root: bring up the lab (system D-Bus, btvirt with
# $LAB_CONTROLLERS LE controllers, bluetoothd, dummy0 + avahi-daemon), then
# run the scenarios (or demo.sh) and write the results into $LAB_RESULTS,
# which the host's run.sh reads.  The VM dies when this script returns, so
# everything is written (and synced) before that.
#
#   guest.sh ENVFILE      (ENVFILE written by run.sh: LAB_REPO, LAB_RESULTS,
#                          PEERLINK_BIN, LAB_MODE, LAB_SCENARIOS, ...)
set -u
[ $# -eq 1 ] && [ -r "$1" ] || { echo "usage: guest.sh ENVFILE" >&2; exit 2; }
# shellcheck disable=SC1090
. "$1"
export LAB_REPO LAB_RESULTS PEERLINK_BIN
# virtme: virtme-ng's init ran this script (--exec); systemd: a unit did, under systemd as
# PID 1 (systemd-boot.sh), and bluetoothd, avahi-daemon and D-Bus are Debian's own units.
export LAB_BOOT=${LAB_BOOT:-virtme}
SUFFIX=; [ "$LAB_BOOT" = virtme ] || SUFFIX=-$LAB_BOOT
export LAB_DIR="$LAB_REPO/Tests/Lab"
export LAB_CONTROLLERS=${LAB_CONTROLLERS:-3}
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LAB_SCENARIO_TIMEOUT=${LAB_SCENARIO_TIMEOUT:-120}
RESULTS_TXT="$LAB_RESULTS/results.txt"     # run.sh empties it once; each boot appends
cd /

now() { date +%s%N; }
secs() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }'; }
# record PASS|FAIL NAME SECS DETAIL: one tab-separated line per result.
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >>"$RESULTS_TXT"; sync; }
finish() { dmesg >"$LAB_RESULTS/dmesg$SUFFIX.log" 2>&1; echo "$1" >"$LAB_RESULTS/guest-done$SUFFIX"; sync; exit 0; }

# shellcheck source=services.sh
. "$LAB_DIR/services.sh"

echo "[guest] kernel $(uname -r), $(nproc) cpus, PID 1 $(cat /proc/1/comm), PEERLINK_BIN=$PEERLINK_BIN"
t0=$(now)
if ! lab_up >"$LAB_RESULTS/lab-up$SUFFIX.log" 2>&1; then
    cat "$LAB_RESULTS/lab-up$SUFFIX.log"
    tail -n 20 "$LAB_RESULTS"/daemons/*.log 2>/dev/null
    echo "[guest] the lab did not come up: no scenario can run"
    record FAIL "lab-setup$SUFFIX" "$(secs "$t0")" "lab did not come up (see lab-up$SUFFIX.log, daemons/)"
    finish "lab-setup-failed"
fi
echo "[guest] lab up in $(secs "$t0")s: $(bluetoothctl list 2>/dev/null | awk '{print $2}' | tr '\n' ' ')avahi on dummy0 ($LAB_DUMMY_ADDR)"

# run_one FILE: one scenario, in its own process group under a timeout.
run_one() {
    local f=$1 name tmo out start rc detail
    name=$(basename "$f" .sh)
    tmo=$(head -n 20 "$f" | sed -n 's/^# timeout: *\([0-9][0-9]*\).*/\1/p' | head -n 1)
    tmo=${tmo:-$LAB_SCENARIO_TIMEOUT}
    out="$LAB_RESULTS/scenarios/$name"
    mkdir -p "$out"
    if ! lab_reset >>"$out/lab-reset.log" 2>&1; then
        echo "FAIL $name: the lab could not be reset before it (services down?)"
        tail -n 10 "$out/lab-reset.log" | sed 's/^/    /'
        record FAIL "$name" 0 "lab reset failed"
        return
    fi
    start=$(now)
    # timeout (not --foreground) makes its own process group: on expiry it
    # signals the whole group, and afterwards we end whatever is left in it.
    LAB_SCENARIO=$name LAB_OUT=$out timeout -k 10 "$tmo" bash "$f" </dev/null >"$out/output.log" 2>&1 &
    local tpid=$!
    wait "$tpid"; rc=$?
    kill -TERM -- "-$tpid" 2>/dev/null && { sleep 0.5; kill -KILL -- "-$tpid" 2>/dev/null; }
    local dur; dur=$(secs "$start")
    if [ "$rc" = 0 ]; then
        echo "PASS $name (${dur}s)"
        record PASS "$name" "$dur"
    else
        case $rc in
            124|137) detail="timed out after ${tmo}s" ;;
            *) detail="exit $rc" ;;
        esac
        echo "FAIL $name (${dur}s, $detail): last lines of output:"
        tail -n 15 "$out/output.log" | sed 's/^/    /'
        record FAIL "$name" "$dur" "$detail"
    fi
    [ "${LAB_VERBOSE:-0}" = 1 ] && { echo "---- $name output"; cat "$out/output.log"; echo "----"; }
}

case ${LAB_MODE:-scenarios} in
demo)
    echo "[guest] demo: $LAB_DIR/demo.sh"
    mkdir -p "$LAB_RESULTS/scenarios/demo"
    start=$(now)
    LAB_SCENARIO=demo LAB_OUT="$LAB_RESULTS/scenarios/demo" timeout -k 10 "${LAB_DEMO_TIMEOUT:-600}" \
        bash "$LAB_DIR/demo.sh" </dev/null 2>&1 | tee "$LAB_RESULTS/scenarios/demo/output.log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" = 0 ]; then record PASS demo "$(secs "$start")"
    else record FAIL demo "$(secs "$start")" "exit $rc"; fi
    ;;
*)
    for s in $LAB_SCENARIOS; do
        case $s in
            /*) run_one "$s" ;;     # a script outside scenarios/ (run.sh made the path absolute)
            *) run_one "$LAB_DIR/scenarios/$s.sh" ;;
        esac
    done
    ;;
esac
finish ok
