#!/bin/bash
# Three hosts on a switch: daemons m1, m2, m3, each in its own network namespace (plpeer1..3,
# 10.77.0.1..3) with a veth into bridge plbr0 (namespace plpeer-sw). A full mesh by address
# (three sessions; each host holds two TCP connections, checked with `ss`; a message to all
# reaches both others). Liveness with peer.ping_interval = 1 and peer.missed_pings = 2
# (a silent peer is lost 3 s after it was last heard): `kill -9` of m3 is reported by m1
# and m2 (peer.disconnected) within that time; m2 cut off the switch and then killed (no FIN
# reaches anyone) is reported `lost` by m1 within that time. peer.max_peers = 1: a host
# with one session declines a second inviter with `full`.
# timeout: 240
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/peer-lib.sh"
require_peerlink

PING=1 MISSED=2
DETECT_MS=$(( PING * (MISSED + 1) * 1000 ))
# What the emulator adds to a timer, a wakeup and an event's delivery under load: the check is
# "within the detection time", measured from the kill to the event's own timestamp.
SLACK_MS=1500

note "three namespaces on a bridge"
peer_net_bridge 3
for n in 1 2 3; do
    peer_define m$n hci$((n - 1)) plpeer$n peer.name=mesh-$n peer.port=700$n peer.accept=all \
        peer.ping_interval=$PING peer.missed_pings=$MISSED
done
peer_up m1 m2 m3
I1=${PEER_ID[m1]} I2=${PEER_ID[m2]} I3=${PEER_ID[m3]}
established() { in_ns "$1" ss -Htn state established | wc -l; }

note "a full mesh: m1 -> m2, m1 -> m3, m2 -> m3"
for pair in 1:2 1:3 2:3; do
    from=${pair%:*} to=${pair#*:}
    peer_connect m$from "$(peer_addr "$to"):700$to" --context "mesh $pair"
    [ "$RUN_RC" = 0 ] || fail "m$from could not connect to m$to: $RUN_OUT"
done
for n in 1 2 3; do
    want=$(for m in 1 2 3; do [ $m = $n ] || echo "${PEER_ID[m$m]}"; done | sort)
    wait_for 15 sh -c "[ \$(ip netns exec plpeer$n ss -Htn state established | wc -l) = 2 ]" \
        || fail "m$n: not two TCP connections: $(in_ns $n ss -tn)"
    assert_eq "$(peer_sessions m$n)" "$want" "m$n has sessions with the two others"
done
expect_rc 0 pl m1 peer send "to everyone"
need_event 15 m2 peer.message "$(printf 'to everyone' | base64 -w0)" "\"peer\":\"$I1\""
need_event 15 m3 peer.message "$(printf 'to everyone' | base64 -w0)" "\"peer\":\"$I1\""

# reported_within NAME PEER KILL_MS [REASON]: NAME reports PEER disconnected (with REASON)
# within DETECT_MS + SLACK_MS of KILL_MS, by the event's own time; prints the delay.
reported_within() {
    local name=$1 peer=$2 t0=$3 reason=${4:-} line t ms
    need_event $(( (DETECT_MS + SLACK_MS) / 1000 + 10 )) "$name" peer.disconnected "\"peer\":\"$peer\"" ${reason:+"\"reason\":\"$reason\""}
    line=$(event_lines "$name" peer.disconnected "\"peer\":\"$peer\"" | tail -n 1)
    t=$(grep -o '"time":"[^"]*"' <<<"$line" | cut -d'"' -f4)
    ms=$(( $(date -d "$t" +%s%3N) - t0 ))
    note "$name reported ${peer:0:8}… disconnected ($(jfield reason "$line")) $ms ms after the kill"
    [ "$ms" -le $(( DETECT_MS + SLACK_MS )) ] || fail "$name took $ms ms (detection time $DETECT_MS ms + $SLACK_MS ms slack)"
}

note "kill -9 of m3: m1 and m2 report it"
T0=$(date +%s%3N)
kill -9 "${PEERLINKD_PID[m3]}"
wait "${PEERLINKD_PID[m3]}" 2>/dev/null
unset "PEERLINKD_PID[m3]"
reported_within m1 "$I3" "$T0"
reported_within m2 "$I3" "$T0"
assert_eq "$(peer_sessions m1)" "$I2" "m1 keeps its session with m2"

note "peer.max_peers = 1: m4 (in plpeer3) takes m1, declines m2 with full"
peer_start m4 hci2 plpeer3 peer.name=mesh-4 peer.port=7004 peer.accept=all peer.max_peers=1 \
    peer.ping_interval=$PING peer.missed_pings=$MISSED
I4=${PEER_ID[m4]}
peer_connect m1 "$(peer_addr 3):7004"
[ "$RUN_RC" = 0 ] || fail "m1 could not connect to m4: $RUN_OUT"
peer_connect m2 "$(peer_addr 3):7004"
[ "$RUN_RC" != 0 ] || fail "m4 took a second peer with peer.max_peers = 1"
assert_contains "$RUN_OUT" "full" "m2's connect fails with full"
need_event 15 m4 peer.disconnected "\"peer\":\"$I2\"" '"reason":"full"'
assert_eq "$(peer_sessions m4)" "$I1" "m4 has its one session, with m1"

note "m2 cut off the switch, then killed: no FIN reaches m1, which reports it lost"
ip -n plpeer-sw link set port2 down || fail "cannot take port2 down"
T0=$(date +%s%3N)
kill -9 "${PEERLINKD_PID[m2]}"
wait "${PEERLINKD_PID[m2]}" 2>/dev/null
unset "PEERLINKD_PID[m2]"
reported_within m1 "$I2" "$T0" lost
assert_eq "$(peer_sessions m1)" "$I4" "m1 keeps its session with m4"
expect_rc 0 pl m1 peer send "still here"
need_event 15 m4 peer.message "$(printf 'still here' | base64 -w0)"

stop_peerlinkd m1; stop_peerlinkd m4
peer_net_cleanup
note "ok"
