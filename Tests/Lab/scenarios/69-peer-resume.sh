#!/bin/bash
# Resumed transfers between two hosts (namespaces plpeer1, plpeer2 on a veth pair) that trust
# each other: p2 sends p1 a 48 MiB file and, at about half way, (a) p2 is killed with
# `kill -9` and started again, (b) p1 is killed and started again, (c) the link is cut
# (pl0 down) and restored, (d) p2, which dialled last, is stopped (SIGTERM, as systemd does
# for a restart or a reboot) and started again. Each time the dialer redials by itself
# (in d: the restarted p2 dials p1 at the address its trust store kept; p1 knows no address
# of p2 by then), the sender offers the file again (after its own restart: from its
# journal), p1 answers with the length its part holds and the file arrives whole
# (sha256sum). What went over the link after the cut is
# counted outside our code, by the kernel's qdisc counters on p2's interface (tc -s: bytes
# and segments, less 66 bytes of Ethernet, IP and TCP headers a segment): it is at most one
# chunk (65,536 bytes) plus the frames' headers more than what p1 was missing. Sessions are
# plain text (peer.encryption = none) so the bytes counted are the frames themselves.
# timeout: 720
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/peer-lib.sh"
require_peerlink

SIZE=$((48 * 1024 * 1024))
F=/run/lab/resume; INBOX=/run/lab/inbox-resume
rm -rf "$F" "$INBOX"; mkdir -p "$F"
note "two namespaces joined by a veth pair"
peer_net_pair
COMMON=(peer.accept=all peer.encryption=none peer.ping_interval=1 peer.missed_pings=2)
peer_define p1 hci0 plpeer1 peer.name=receiver peer.port=7001 "${COMMON[@]}" peer.accept_resources=all peer.inbox_dir=$INBOX
peer_define p2 hci1 plpeer2 peer.name=sender peer.port=7002 "${COMMON[@]}"
peer_up p1 p2
ID1=${PEER_ID[p1]} ID2=${PEER_ID[p2]}
expect_rc 0 pl p1 peer trust "$ID2"
expect_rc 0 pl p2 peer trust "$ID1"
# p2's egress through a qdisc that counts (a veth has none by default).
in_ns 2 tc qdisc add dev pl0 root pfifo limit 10000 || fail "cannot add a counting qdisc on p2's pl0"

# tx: "bytes segments" p2 has sent on pl0 so far.
tx() { in_ns 2 tc -s qdisc show dev pl0 | awk '/Sent/ { print $2, $4; exit }'; }
# part_size: bytes in p1's part (0 when there is none).
part_size() { stat -c %s "$INBOX"/.part/*.data 2>/dev/null | head -n 1 || echo 0; }
# half_way: p1's part holds at least half the file.
half_way() { [ "$(part_size)" -ge $((SIZE / 2)) ]; }
# session_up A B: A has a session with B.
session_up() { peer_sessions "$1" | grep -q "${PEER_ID[$2]}"; }

# resume CASE CUT RESTORE: sends file CASE.bin from p2 to p1, runs CUT at half way (it returns
# once the surviving sides have reported the transfer interrupted: nothing more is sent),
# reads the counters, runs RESTORE, waits for the file and checks its hash and what was
# re-sent.
resume() {
    local name=$1 cut=$2 restore=$3 file=$F/$1.bin before after payload segments offset missing allowed
    head -c "$SIZE" /dev/urandom >"$file"
    run pl p2 --json peer send-file "$file" --to "$ID1" --detach
    [ "$RUN_RC" = 0 ] || fail "$name: send-file failed: $RUN_OUT"
    wait_for 120 half_way || fail "$name: p1's part never reached half the file ($(part_size) bytes)"
    note "$name: p1 holds $(part_size) of $SIZE bytes: cut"
    $cut
    before=$(tx)
    $restore
    need_event 180 p1 peer.resource-received "\"name\":\"$name.bin\""
    after=$(tx)
    local received got
    received=$(event_lines p1 peer.resource-received "\"name\":\"$name.bin\"" | tail -n 1)
    got=$(jfield path "$received")
    assert_eq "$(sha256sum <"$got" | cut -d' ' -f1)" "$(sha256sum <"$file" | cut -d' ' -f1)" "$name: sha256sum of the received file"
    # Where the last attempt started, from the event that reports the file (its `offset`): a
    # restarted receiver's resource-started can come before its new event recorder subscribes
    # (the sender redials at once), and the one recorded is then the first attempt's, at 0.
    offset=$(jfield offset "$received")
    [ "${offset:-0}" -gt 0 ] || fail "$name: the transfer started over instead of resuming (offset ${offset:-none})"
    missing=$(( SIZE - offset ))
    segments=$(( ${after#* } - ${before#* } ))
    payload=$(( ${after% *} - ${before% *} - 66 * segments ))
    # One chunk, a 12-byte header a frame, and the handshake and pings of the new session.
    allowed=$(( missing + 65536 + 12 * (missing / 65536 + 2) + 8192 ))
    note "$name: resumed at $offset; missing $missing; sent after the cut $payload bytes in $segments segments (at most $allowed)"
    [ "$payload" -ge "$missing" ] || fail "$name: fewer bytes on the link ($payload) than were missing ($missing): the counter is wrong"
    [ "$payload" -le "$allowed" ] || fail "$name: $(( payload - missing )) bytes re-sent beyond what was missing (allowed: one chunk and headers)"
    echo "$name offset=$offset missing=$missing sent=$payload resent=$(( payload - missing ))" >>"$LAB_OUT/resume-bytes.txt"
    rm -f "$got"
}

note "a. the sender is killed at half way and started again (p1 dialled: it redials)"
expect_rc 0 pl p1 --json peer connect "$(peer_addr 2):7002"
wait_for 15 session_up p2 p1 || fail "no session"
cut_a() { peer_kill9 p2; need_event 30 p1 peer.resource-interrupted '"name":"a.bin"'; }
restore_a() { peer_restart p2; }
resume a cut_a restore_a
need_event 30 p2 peer.resource-sent '"name":"a.bin"'
grep -q '"a.bin"' "$(pl_state_dir p2)/peer/outgoing.json" && fail "the delivered transfer is still in p2's journal"

note "b. the receiver is killed at half way and started again (p2 dials: it redials)"
expect_rc 0 pl p2 peer disconnect "$ID1"
no_session() { ! session_up p2 p1; }
wait_for 15 no_session || fail "p2 still has a session with p1 after disconnecting"
expect_rc 0 pl p2 --json peer connect "$(peer_addr 1):7001"
cut_b() { peer_kill9 p1; need_event 30 p2 peer.resource-interrupted '"name":"b.bin"'; }
restore_b() { peer_restart p1; }
resume b cut_b restore_b
need_event 30 p2 peer.resource-sent '"name":"b.bin"'

note "c. the link is cut at half way and restored"
cut_c() {
    ip -n plpeer1 link set pl0 down
    need_event 30 p1 peer.resource-interrupted '"name":"c.bin"'
    need_event 30 p2 peer.resource-interrupted '"name":"c.bin"'
}
restore_c() { ip -n plpeer1 link set pl0 up; }
resume c cut_c restore_c
need_event 30 p2 peer.resource-sent '"name":"c.bin"'

note "d. the sender, which dialled last, is stopped at half way and started again"
grep -q '"resume" *: *true' "$(pl_state_dir p2)/peer/trusted-peers.json" && grep -q '"address"' "$(pl_state_dir p2)/peer/trusted-peers.json" \
    || fail "p2's trust store does not keep its session with p1 for a restart: $(cat "$(pl_state_dir p2)/peer/trusted-peers.json")"
# p2 exits once p1 has read its CLOSE and answered: p1 hears why (not a reset link).
cut_d() {
    stop_peerlinkd p2
    need_event 30 p1 peer.resource-interrupted '"name":"d.bin"'
    need_event 10 p1 peer.disconnected "\"peer\":\"$ID2\"" '"reason":"shutting-down"'
}
restore_d() { peer_restart p2; }
resume d cut_d restore_d
need_event 30 p2 peer.resource-sent '"name":"d.bin"'

cat "$LAB_OUT/resume-bytes.txt"
assert_eq "$(parts_left "$INBOX" | tr "\n" " ")" "" "no part left (the names of what is)"
stop_peerlinkd p1; stop_peerlinkd p2
peer_net_cleanup
note "ok"
