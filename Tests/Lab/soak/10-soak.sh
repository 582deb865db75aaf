#!/bin/bash
# make soak: two daemons under a steady mix for SOAK_MINUTES (default 30), while bluetoothd
# and avahi-daemon are restarted every SOAK_RESTART_SECONDS (default 240, avahi half a period
# after bluetoothd), except in the last 90 s. No `# timeout:` header: the Makefile sets
# LAB_SCENARIO_TIMEOUT from SOAK_MINUTES.
#
# The mix (each operation is one `peerlink` command; its outcome, exit status and first line
# of error, goes to ops.tsv):
#   msg     a → b peer message, unique text, every second (TLS session on loopback);
#   ble     b connects to a's controller, reads the reference characteristic, subscribes for
#           three notifications (`subscribe`), disconnects;
#   notify  a notifies the characteristic every second (refused, with its reason, while no
#           central is subscribed);
#   adv     a starts and stops an advertisement;
#   dnssd   a publishes and withdraws a DNS-SD service; b browses the type all along;
#   garbage clients that send a line of garbage, or half a request and leave, to a's socket.
# Sampled every SOAK_SAMPLE_SECONDS (10) into samples.tsv: each daemon's RSS, descriptors,
# threads and D-Bus match rules (the bus's Debug.Stats), bluetoothd's and avahi-daemon's
# object counts (busctl tree).
# soak-report.py judges: the series flat after warm-up, every operation accounted for, no
# silent failure, every kind succeeding again after the last restart, no daemon restarted.
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/peer-lib.sh"
require_peerlink

MINUTES=${SOAK_MINUTES:-30}
RESTART=${SOAK_RESTART_SECONDS:-240}
SAMPLE=${SOAK_SAMPLE_SECONDS:-10}
[[ $MINUTES =~ ^[0-9]+$ ]] && [ "$MINUTES" -ge 2 ] || fail "SOAK_MINUTES=$MINUTES: a whole number of minutes, at least 2"
[[ $RESTART =~ ^[0-9]+$ ]] && [ "$RESTART" -ge 30 ] || fail "SOAK_RESTART_SECONDS=$RESTART: a whole number of seconds, at least 30"
END=$(( $(date +%s) + MINUTES * 60 ))
OPS=$LAB_OUT/ops.tsv SAMPLES=$LAB_OUT/samples.tsv RESTARTS=$LAB_OUT/restarts.tsv
: >"$OPS"; : >"$RESTARTS"; rm -f "$LAB_OUT/.ble-done"
SVC=C4FB2349-72FE-4CA2-94D6-1F3CB16331EE
CHR=6A3E4B28-522D-4B3B-82A9-D5E2004534FC
ADDR=$(lab_controller_addr 0)

note "two daemons: a on hci0, b on hci1, a peer session a → b"
peer_define a hci0 - peer.name=soak-a peer.port=7201 peer.accept=all
peer_define b hci1 - peer.name=soak-b peer.port=7202 peer.accept=all
peer_up a b
peer_connect a 127.0.0.1:7202
[ "$RUN_RC" = 0 ] || fail "a could not connect to b: $RUN_OUT"
expect_rc 0 pl a gatt register "$LAB_REPO/examples/seed-peripheral.json"
expect_rc 0 pl a advertise start --name soak-a --service $SVC
spawn browse-b pl_watch b --json dnssd browse _plsoak._tcp
PID_A=${PEERLINKD_PID[a]} PID_B=${PEERLINKD_PID[b]}

# op KIND CMD...: runs CMD (a peerlink command, bounded by PL_TIMEOUT) and records
# "time kind rc detail": on failure, detail is the last line of its standard error, where
# the CLI says why it failed (empty: a silent failure). OP_OUT: its standard output.
op() {
    local kind=$1 rc detail= errf=$LAB_OUT/.op-err.$BASHPID; shift
    OP_OUT=$("$@" 2>"$errf"); rc=$?
    [ "$rc" = 0 ] || detail=$(grep . "$errf" | tail -n 1 | tr '\t' ' ')
    printf '%s\t%s\t%s\t%s\n' "$(date +%s.%N | cut -c1-14)" "$kind" "$rc" "$detail" >>"$OPS"
    return "$rc"
}
running() { [ "$(date +%s)" -lt "$END" ]; }

worker_msg() {
    local i=0
    while running; do
        i=$((i + 1))
        op msg pl a peer send --to "${PEER_ID[b]}" "soak-msg-$i" && echo "soak-msg-$i" >>"$LAB_OUT/sent.txt"
        sleep 1
    done
}
worker_ble() {
    while running; do
        if op ble pl b connect "$ADDR"; then
            op ble pl b read "$ADDR" $CHR
            # Three of a's notifications (worker_notify sends one a second), then disconnect.
            op subscribe pl b subscribe "$ADDR" $CHR --count 3 --timeout 20
            op ble pl b disconnect "$ADDR"
        fi
        sleep 3
    done
    touch "$LAB_OUT/.ble-done"
}
# Notifies until the ble worker has finished, not until END: a subscription started just
# before the end waits for its three values (stopping here first timed it out, counted as
# a failure of the daemon's).
worker_notify() {
    local i=0
    while [ ! -e "$LAB_OUT/.ble-done" ]; do i=$((i + 1)); op notify pl a gatt notify $CHR "soak $i"; sleep 1; done
}
worker_adv() {
    local id
    while running; do
        if op adv pl a --json advertise start --name soak-x --service 0000180F-0000-1000-8000-00805F9B34FB; then
            id=$(jfield id "$OP_OUT")
            sleep 5
            op adv pl a advertise stop "$id"
        fi
        sleep 5
    done
}
worker_dnssd() {
    local i=0
    while running; do
        i=$((i + 1))
        if op dnssd pl a --json dnssd publish "soak $i" _plsoak._tcp 9000; then
            sleep 5
            op dnssd pl a dnssd unpublish "$(jfield id "$OP_OUT")"
        fi
        sleep 5
    done
}
worker_garbage() {
    local sock; sock=$(pl_socket a)
    while running; do
        printf 'this is not JSON\n' | timeout 5 socat - "UNIX-CONNECT:$sock" >/dev/null 2>&1
        printf '{"jsonrpc":"2.0","id":1,"method":"daemon.sta' | timeout 5 socat - "UNIX-CONNECT:$sock" >/dev/null 2>&1
        printf '%s\tgarbage\t0\t\n' "$(date +%s.%N | cut -c1-14)" >>"$OPS"
        sleep 3
    done
}
# No restart in the last SETTLE seconds: every kind of operation must be seen to succeed
# again after the last one.
SETTLE=90
settling() { [ $(( END - $(date +%s) )) -lt "$SETTLE" ]; }
worker_restarts() {
    local half=$((RESTART / 2))
    while :; do
        sleep "$half"; running && ! settling || break
        printf '%s\tbluetoothd\n' "$(date +%s)" >>"$RESTARTS"
        lab_restart_bluetoothd >>"$LAB_OUT/restarts.log" 2>&1 && lab_wait_adapters 30 >>"$LAB_OUT/restarts.log" 2>&1 \
            && lab_power_all_on >>"$LAB_OUT/restarts.log" 2>&1
        sleep "$half"; running && ! settling || break
        printf '%s\tavahi-daemon\n' "$(date +%s)" >>"$RESTARTS"
        lab_restart_avahi >>"$LAB_OUT/restarts.log" 2>&1
    done
}

# The bus's unique name of each daemon (for its match rules), from its own status.
bus_name() { pl "$1" --json status | grep -o '"name":":[0-9.]*"' | head -n 1 | cut -d'"' -f4; }
match_rules() {
    busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus.Debug.Stats GetConnectionStats s "$1" 2>/dev/null \
        | grep -o '"MatchRules" u [0-9]*' | awk '{print $3}'
}
objects() { busctl tree --list "$1" 2>/dev/null | wc -l; }
threads() { awk '/^Threads:/ {print $2}' "/proc/$1/status"; }
sampler() {
    local n t
    printf 'time\tdaemon\trss_kb\tfds\tthreads\tmatch_rules\tbluez_objects\tavahi_objects\n' >"$SAMPLES"
    while running; do
        t=$(date +%s)
        for n in a b; do
            local pid=${PEERLINKD_PID[$n]} bus
            bus=$(bus_name "$n")
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$n" "$(rss_kb "$pid")" "$(fd_count "$pid")" "$(threads "$pid")" \
                "$(match_rules "$bus")" "$(objects org.bluez)" "$(objects org.freedesktop.Avahi)" >>"$SAMPLES"
        done
        sleep "$SAMPLE"
    done
}

[ -n "$(match_rules "$(bus_name a)")" ] || fail "the system bus does not answer Debug.Stats GetConnectionStats (dbus-daemon without --enable-stats?)"
note "the mix for $MINUTES minutes; bluetoothd and avahi-daemon restarted every $RESTART s"
pids=()
for w in sampler worker_msg worker_ble worker_notify worker_adv worker_dnssd worker_garbage worker_restarts; do
    "$w" >"$LAB_OUT/$w.log" 2>&1 &
    pids+=($!)
    _LIB_PIDS+=($!)
done
while running; do sleep 30; note "$(wc -l <"$OPS") operations, $(wc -l <"$RESTARTS") restarts so far"; done
wait "${pids[@]}"

note "after the mix: the accounting"
# Everything sent must have arrived: the recorder logs b's peer events (ev-b.log); 5 s for the last ones.
sleep 5
run "$PY3" "$LAB_DIR/soak/soak-report.py" --out "$LAB_OUT" --events "$(log_of ev-b)" \
    --pid a="$PID_A" --pid b="$PID_B" --alive a="$(kill -0 "$PID_A" 2>/dev/null && echo 1 || echo 0)" \
    --alive b="$(kill -0 "$PID_B" 2>/dev/null && echo 1 || echo 0)" --minutes "$MINUTES"
[ "$RUN_RC" = 0 ] || fail "the soak's judgement: $(printf '%s\n' "$RUN_OUT" | grep FAIL | head -n 5 | tr '\n' ' ')"
note "ok"
