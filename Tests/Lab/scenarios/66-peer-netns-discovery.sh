#!/bin/bash
# Peer discovery between two hosts: daemons p1 and p2, each in its own network namespace
# (plpeer1, plpeer2, a veth pair) with its own system bus and avahi-daemon (pl-peer1,
# pl-peer2). p1 advertises cmj-stream with discovery info; host 2's own avahi-browse sees
# _cmj-stream._tcp from pl-peer1 at 10.77.0.1 on p1's port with the TXT pv, pid, pn and the
# info; p2's peer browse finds p1 at that address; p2 invites p1 by its display name; p1's
# client accepts on the event (the same pairing code on both); p1 withdraws the advertisement
# and both p2's browse (peer.lost) and host 2's avahi-browse see it gone. p1 advertises
# again; host 2's avahi-daemon stops: p2's browse reports p1 lost (nothing is seen without
# it, and a peer that left meanwhile would never be removed), and finds it again once host
# 2's avahi-daemon is back.
# timeout: 240
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/peer-lib.sh"
require_peerlink

note "two hosts: namespaces on a veth pair, each with its own bus and avahi-daemon"
peer_net_pair
peer_net_avahi 1
peer_net_avahi 2
for n in 1 2; do
    peer_define p$n hci$((n - 1)) plpeer$n peer.name=host-$n peer.port=700$n peer.accept=ask
    PEER_ENV[p$n]="DBUS_SYSTEM_BUS_ADDRESS=$(peer_bus $n)"
    PEER_ARGS[p$n]="--bus unix:path=/run/dbus/system_bus_socket"
done
peer_up p1 p2
for n in 1 2; do
    wait_for 20 sh -c "'$PEERLINK_BIN/peerlink' --socket '$(pl_socket p$n)' --json dnssd list | grep -q '\"available\":true'" \
        || fail "p$n does not reach its host's avahi-daemon"
done
P1_TEXT=$(jfield peer_text "$(pl p1 --json peer identity)")

note "p1 advertises cmj-stream"
expect_rc 0 pl p1 --json peer advertise cmj-stream --info room=lab
assert_eq "$(jfield service_type "$RUN_OUT")" _cmj-stream._tcp "advertised type"
assert_eq "$(jfield state "$RUN_OUT")" established "advertisement state"

# host2_browse: what host 2's own avahi-daemon resolves for _cmj-stream._tcp (avahi-browse -p).
host2_browse() { on_host 2 timeout --foreground 20 avahi-browse -k -r -p -t _cmj-stream._tcp 2>/dev/null; }
host2_sees_p1() { host2_browse | grep -qF ';host-1;_cmj-stream._tcp;local;pl-peer1.local;10.77.0.1;7001;'; }
wait_for 30 host2_sees_p1 || fail "host 2's avahi-browse does not resolve p1: $(host2_browse)"
LINE=$(host2_browse | grep -F ';host-1;_cmj-stream._tcp;local;pl-peer1.local;10.77.0.1;7001;' | head -n 1)
note "host 2's avahi-browse: $LINE"
for kv in pv=1 "pid=$P1_TEXT" pn=host-1 room=lab; do
    assert_contains "$LINE" "\"$kv\"" "TXT $kv"
done

note "p2 browses and finds p1 at its address"
spawn browse-p2 pl_watch p2 --json peer browse cmj-stream --timeout 200
wait_log 30 browse-p2 "${PEER_ID[p1]}" || fail "p2's browse did not find p1: $(cat "$(log_of browse-p2)")"
FOUND=$(grep '"peer.found"' "$(log_of browse-p2)" | grep -F "${PEER_ID[p1]}" | tail -n 1)
assert_contains "$FOUND" '10.77.0.1:7001' "p1's address in peer.found"
assert_contains "$FOUND" '"room":"lab"' "p1's info in peer.found"
assert_not_contains "$(cat "$(log_of browse-p2)")" "${PEER_ID[p2]}" "p2's browse does not list p2"

note "p2 invites p1 by name; p1's client accepts"
spawn invite pl p2 --json peer invite host-1 --type cmj-stream --context "found you" --wait 30
INVITE_PID=$SPAWN_PID
need_event 30 p1 peer.invitation "$(printf 'found you' | base64 -w0)"
INV_LINE=$(event_lines p1 peer.invitation "$(printf 'found you' | base64 -w0)" | tail -n 1)
expect_rc 0 pl p1 peer accept "$(jfield invitation "$INV_LINE")"
wait "$INVITE_PID" || fail "peer invite failed: $(cat "$(log_of invite)")"
SESSION=$(grep '^{' "$(log_of invite)" | tail -n 1)
assert_eq "$(jfield peer "$SESSION")" "${PEER_ID[p1]}" "p2's session is with p1"
assert_eq "$(jfield address "$SESSION")" 10.77.0.1:7001 "over the link, at the discovered address"
assert_eq "$(jfield pairing_code "$SESSION")" "$(jfield pairing_code "$INV_LINE")" "the same pairing code on both"
need_event 15 p1 peer.connected "\"peer\":\"${PEER_ID[p2]}\""

note "p1 withdraws: p2's browse and host 2's avahi-browse see it gone"
expect_rc 0 pl p1 peer advertise cmj-stream --stop
wait_log 20 browse-p2 '"peer.lost"' || fail "p2's browse did not report p1 lost: $(tail -n 3 "$(log_of browse-p2)")"
wait_for 30 sh -c '! DBUS_SYSTEM_BUS_ADDRESS="$1" timeout 20 avahi-browse -p -t _cmj-stream._tcp 2>/dev/null | grep -q ";host-1;"' sh "$(peer_bus 2)" \
    || fail "host 2's avahi-browse still sees host-1"

note "p1 advertises again; host 2's avahi-daemon stops: p2's browse reports p1 lost, then finds it when it is back"
# events NAME: how many NAME events p2's browse has reported.
events() { grep -c "\"$1\"" "$(log_of browse-p2)"; }
FOUND_BEFORE=$(events peer.found)
expect_rc 0 pl p1 peer advertise cmj-stream --info room=lab
wait_for 30 sh -c '[ "$(grep -c "\"peer.found\"" "$1")" -gt "$2" ]' sh "$(log_of browse-p2)" "$FOUND_BEFORE" \
    || fail "p2's browse did not find p1 again: $(tail -n 3 "$(log_of browse-p2)")"
LOST_BEFORE=$(events peer.lost)
# (By its namespace: avahi-daemon retitles itself, "avahi-daemon: running [...]".)
stopped=0
for pid in $(ip netns pids "$(peer_ns 2)"); do
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = avahi-daemon ] && kill "$pid" && stopped=1
done
[ "$stopped" = 1 ] || fail "no avahi-daemon of host 2 to stop"
wait_for 20 sh -c '[ "$(grep -c "\"peer.lost\"" "$1")" -gt "$2" ]' sh "$(log_of browse-p2)" "$LOST_BEFORE" \
    || fail "p2's browse did not report p1 lost when host 2's avahi-daemon stopped: $(tail -n 3 "$(log_of browse-p2)")"
FOUND_BEFORE=$(events peer.found)
peer_net_avahi_start 2
wait_for 60 sh -c '[ "$(grep -c "\"peer.found\"" "$1")" -gt "$2" ]' sh "$(log_of browse-p2)" "$FOUND_BEFORE" \
    || fail "p2's browse did not find p1 once host 2's avahi-daemon was back: $(tail -n 3 "$(log_of browse-p2)")"
assert_contains "$(grep '"peer.found"' "$(log_of browse-p2)" | tail -n 1)" '10.77.0.1:7001' "p1's address found again"
note "ok"
