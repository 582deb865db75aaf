#!/bin/bash
# Trusted peers reconnect by themselves: two hosts (network namespaces on a veth pair), p2
# dials p1 and p1's client accepts (policy ask); both trust each other. The link goes down
# (`ip link set down` in p1's namespace): both report the peer lost (peer.ping_interval 1,
# peer.missed_pings 2) and p2, which knows p1's address, announces redials
# (peer.reconnecting). The link comes back up: the session is up again on both sides
# without anyone answering an invitation (p1 accepts the returning trusted peer), and a
# message goes through. Then p2 forgets p1 and the link drops again: no redial.
# timeout: 200
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/peer-lib.sh"
require_peerlink

note "two namespaces joined by a veth pair"
peer_net_pair
peer_define p1 hci0 plpeer1 peer.name=host-1 peer.port=7001 peer.accept=ask peer.ping_interval=1 peer.missed_pings=2
peer_define p2 hci1 plpeer2 peer.name=host-2 peer.port=7002 peer.accept=ask peer.ping_interval=1 peer.missed_pings=2
peer_up p1 p2
ID1=${PEER_ID[p1]} ID2=${PEER_ID[p2]}

note "p2 invites p1; p1's client accepts; both trust each other"
spawn connect1 pl p2 --json peer connect "$(peer_addr 1):7001" --context "first meeting"
CONNECT_PID=$SPAWN_PID
need_event 30 p1 peer.invitation "\"peer\":\"$ID2\""
INV=$(jfield invitation "$(event_lines p1 peer.invitation "\"peer\":\"$ID2\"" | tail -n 1)")
expect_rc 0 pl p1 peer accept "$INV"
wait "$CONNECT_PID" || fail "p2's connect failed: $(cat "$(log_of connect1)")"
need_event 15 p1 peer.connected "\"peer\":\"$ID2\""
need_event 15 p2 peer.connected "\"peer\":\"$ID1\""
expect_rc 0 pl p1 peer trust "$ID2"
expect_rc 0 pl p2 peer trust "$ID1"

note "the link goes down: both report the peer lost, p2 redials"
ip -n plpeer1 link set pl0 down || fail "cannot take plpeer1's link down"
need_event 15 p1 peer.disconnected "\"peer\":\"$ID2\"" '"was_connected":true'
need_event 15 p2 peer.disconnected "\"peer\":\"$ID1\"" '"was_connected":true'
need_event 15 p2 peer.reconnecting "\"peer\":\"$ID1\""
assert_eq "$(peer_sessions p1)" "" "p1 has no session while the link is down"

note "the link comes back: the session returns by itself"
ip -n plpeer1 link set pl0 up || fail "cannot bring plpeer1's link up"
wait_for 90 sh -c "[ \$(grep -cF '\"topic\":\"peer.connected\"' '$(log_of ev-p1)') -ge 2 ]" \
    || fail "p1: the session never came back: $(tail -n 8 "$(log_of ev-p1)")"
wait_for 30 sh -c "[ \$(grep -cF '\"topic\":\"peer.connected\"' '$(log_of ev-p2)') -ge 2 ]" \
    || fail "p2: the session never came back: $(tail -n 8 "$(log_of ev-p2)")"
assert_eq "$(event_count p1 peer.invitation)" 1 "p1 was not asked again (a returning trusted peer)"
assert_eq "$(peer_sessions p1)" "$ID2" "p1's session is with p2 again"
assert_eq "$(peer_sessions p2)" "$ID1" "p2's session is with p1 again"
expect_rc 0 pl p1 peer send "back again"
need_event 15 p2 peer.message "$(printf 'back again' | base64 -w0)"

note "p2 forgets p1; the link drops again: no redial"
REDIALS=$(event_count p2 peer.reconnecting)
expect_rc 0 pl p2 peer forget "$ID1"
ip -n plpeer1 link set pl0 down || fail "cannot take plpeer1's link down"
wait_for 15 sh -c "[ \$(grep -F '\"topic\":\"peer.disconnected\"' '$(log_of ev-p2)' | grep -cF '\"was_connected\":true') -ge 2 ]" \
    || fail "p2 never reported the second loss: $(tail -n 8 "$(log_of ev-p2)")"
assert_eq "$(event_count p2 peer.reconnecting)" "$REDIALS" "no redial of a forgotten peer"
# ... nor later, once the link is back (a redial scheduled at the loss, or one the link's
# return sets off).
ip -n plpeer1 link set pl0 up || fail "cannot bring plpeer1's link up"
for _ in $(seq 10); do
    [ "$(event_count p2 peer.reconnecting)" = "$REDIALS" ] || fail "p2 redialled the peer it forgot: $(tail -n 8 "$(log_of ev-p2)")"
    sleep 1
done

stop_peerlinkd p1; stop_peerlinkd p2
peer_net_cleanup
note "ok"
