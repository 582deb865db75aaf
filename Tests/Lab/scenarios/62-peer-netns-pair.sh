#!/bin/bash
# Invitations between two hosts: daemons p1 and p2, each in its own network namespace
# (plpeer1, plpeer2) joined by a veth pair (10.77.0.1, 10.77.0.2), connecting by address.
# A client answers each invitation on the event (peer.accept / peer.decline): accepted with
# its context and the same pairing code on both ends (the TCP connection checked with `ss` in
# each namespace); declined (the dialer's connect fails with `declined`); not answered (both
# sides report `timeout`); both inviting each other at once (each side reports `connected`
# exactly once, one session and one TCP connection between them, no invitation left waiting).
# timeout: 240
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/peer-lib.sh"
# no_invitations HOST: HOST's daemon lists no invitation waiting (the list itself must work:
# a failed call listed nothing, and passed).
no_invitations() {
    expect_rc 0 pl "$1" --json peer invitations
    assert_eq "$(grep -o '"invitation":' <<<"$RUN_OUT" | wc -l)" 0 "no invitation waiting on $1"
}
require_peerlink

note "two namespaces joined by a veth pair"
peer_net_pair
peer_define p1 hci0 plpeer1 peer.name=host-1 peer.port=7001 peer.accept=ask
peer_define p2 hci1 plpeer2 peer.name=host-2 peer.port=7002 peer.accept=ask
peer_up p1 p2
ID1=${PEER_ID[p1]} ID2=${PEER_ID[p2]}
A1=$(peer_addr 1):7001 A2=$(peer_addr 2):7002

# established N PORT: TCP connections ESTABLISHED in namespace N with local or remote port PORT.
established() { in_ns "$1" ss -Htn state established "( sport = :$2 or dport = :$2 )" | wc -l; }

# invite_spawn NAME ARGS...: `peer connect` on p2 in the background (it waits for the answer).
invite_spawn() {
    local name=$1; shift
    spawn "$name" pl p2 --json peer connect "$@"
    INVITE_PID=$SPAWN_PID
}
# invite_result: wait for it (pl bounds it); RUN_RC and RUN_OUT as `run` sets them.
invite_result() {
    wait "$INVITE_PID"; RUN_RC=$?
    RUN_OUT=$(cat "$(log_of "$1")")
    printf '$ (p2 peer connect)\n%s\n[rc=%s]\n' "$RUN_OUT" "$RUN_RC"
}
# invitation_number TEXT: the number of p1's latest invitation whose event contains TEXT.
invitation_number() { jfield invitation "$(event_lines p1 peer.invitation "$1" | tail -n 1)"; }

note "1. accept: p2 invites p1 with a context; p1's client accepts on the event"
CTX1="context one $RANDOM"
invite_spawn connect1 "$A1" --context "$CTX1"
need_event 30 p1 peer.invitation "$(printf %s "$CTX1" | base64 -w0)"
INV=$(invitation_number "$(printf %s "$CTX1" | base64 -w0)")
INV_LINE=$(event_lines p1 peer.invitation "\"invitation\":$INV,")
assert_contains "$INV_LINE" "\"peer\":\"$ID2\"" "the invitation names p2"
assert_contains "$INV_LINE" '"name":"host-2"' "the invitation carries p2's name"
expect_rc 0 pl p1 peer accept "$INV"
invite_result connect1
[ "$RUN_RC" = 0 ] || fail "p2's connect failed after the accept: $RUN_OUT"
assert_eq "$(jfield peer "$RUN_OUT")" "$ID1" "p2 is connected to p1"
assert_eq "$(jfield address "$RUN_OUT")" "$A1" "over the veth link"
assert_eq "$(jfield pairing_code "$RUN_OUT")" "$(jfield pairing_code "$INV_LINE")" "the same pairing code on both ends"
need_event 15 p1 peer.connected "\"peer\":\"$ID2\""
need_event 15 p2 peer.connected "\"peer\":\"$ID1\""
assert_eq "$(established 1 7001)" 1 "one TCP connection on p1's port in plpeer1 (ss)"
assert_eq "$(established 2 7001)" 1 "one TCP connection to p1's port in plpeer2 (ss)"
expect_rc 0 pl p1 peer send "over the link"
need_event 15 p2 peer.message "$(printf 'over the link' | base64 -w0)"
expect_rc 0 pl p2 peer disconnect "$ID1"
need_event 15 p1 peer.disconnected '"reason":"normal"' '"by_peer":true'
wait_for 10 sh -c "[ \$(ip netns exec plpeer1 ss -Htn state established '( sport = :7001 )' | wc -l) = 0 ]" \
    || fail "the TCP connection outlived the session: $(in_ns 1 ss -tn)"

note "2. decline: p1's client declines"
invite_spawn connect2 "$A1" --context "decline me"
need_event 30 p1 peer.invitation "$(printf 'decline me' | base64 -w0)"
expect_rc 0 pl p1 peer decline "$(invitation_number "$(printf 'decline me' | base64 -w0)")"
invite_result connect2
[ "$RUN_RC" != 0 ] || fail "p2's connect succeeded though p1 declined"
assert_contains "$RUN_OUT" "declined" "p2's connect names the reason"
need_event 15 p1 peer.disconnected '"reason":"declined"' "\"peer\":\"$ID2\""
# An answered invitation does not "end" (peer.invitation-ended is for one left unanswered).
assert_eq "$(event_count p1 peer.invitation-ended)" 0 "no invitation-ended for an answered invitation"

note "3. timeout: nobody answers a 2 s invitation; both sides report timeout"
T0=$(date +%s%3N)
invite_spawn connect3 "$A1" --context "nobody home" --wait 2
need_event 30 p1 peer.invitation "$(printf 'nobody home' | base64 -w0)"
invite_result connect3
T1=$(date +%s%3N)
[ "$RUN_RC" != 0 ] || fail "p2's connect succeeded though nobody answered"
assert_contains "$RUN_OUT" "timeout" "p2's connect fails with timeout"
need_event 15 p1 peer.invitation-ended '"reason":"timeout"'
need_event 15 p1 peer.disconnected '"reason":"timeout"'
note "the unanswered invitation ended after $(( T1 - T0 )) ms on p2 (asked 2 s; the dialer waits 2 s more)"
[ $(( T1 - T0 )) -ge 2000 ] || fail "p2 gave up before the invitation's 2 s"
no_invitations p1

note "4. both invite each other at once"
C1=$(event_count p1 peer.connected) C2=$(event_count p2 peer.connected)
run peer_tool simultaneous --a "$(pl_socket p1)" --a-addr "$A1" --a-id "$ID1" --b "$(pl_socket p2)" --b-addr "$A2" --b-id "$ID2"
[ "$RUN_RC" = 0 ] || fail "simultaneous invitations: the driver failed"
assert_not_contains "$RUN_OUT" '"error"' "both connect calls succeed"
assert_contains "$(grep '^REPLY a' <<<"$RUN_OUT")" "\"peer\":\"$ID2\"" "p1's connect returns the session with p2"
assert_contains "$(grep '^REPLY b' <<<"$RUN_OUT")" "\"peer\":\"$ID1\"" "p2's connect returns the session with p1"
need_event 15 p1 peer.connected "\"peer\":\"$ID2\""
need_event 15 p2 peer.connected "\"peer\":\"$ID1\""
# A message each way after both saw the session: anything either reports about it by then is in.
expect_rc 0 pl p1 peer send "after the race 1"
need_event 15 p2 peer.message "$(printf 'after the race 1' | base64 -w0)"
expect_rc 0 pl p2 peer send "after the race 2"
need_event 15 p1 peer.message "$(printf 'after the race 2' | base64 -w0)"
assert_eq "$(( $(event_count p1 peer.connected) - C1 ))" 1 "p1 reported connected exactly once"
assert_eq "$(( $(event_count p2 peer.connected) - C2 ))" 1 "p2 reported connected exactly once"
assert_eq "$(peer_sessions p1)" "$ID2" "p1 has one session, with p2"
assert_eq "$(peer_sessions p2)" "$ID1" "p2 has one session, with p1"
wait_for 10 sh -c "[ \$(ip netns exec plpeer1 ss -Htn state established | wc -l) = 1 ]" \
    || fail "not exactly one TCP connection between the hosts: $(in_ns 1 ss -tn)"
no_invitations p1
no_invitations p2
event_lines p1 peer.disconnected | tail -n 3

stop_peerlinkd p1; stop_peerlinkd p2
peer_net_cleanup
note "ok"
