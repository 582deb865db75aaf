#!/bin/bash
# What peer sessions put on the wire, seen by a recording relay (peer-tool.py record-relay; no
# tcpdump in the lab): daemon b dials the relay, which forwards to daemon a and records both
# directions byte for byte. Encrypted (the default): HELLO in plain text, then TLS records,
# and neither the invitation's context nor any message sent either way appears in the
# capture. With peer.encryption = none on both: the session says it is not encrypted (no
# pairing code) and the same context and messages are in the capture as sent.
# timeout: 180
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/peer-lib.sh"
require_peerlink

W=/run/lab/peer-wire
rm -rf "$W"; mkdir -p "$W"

# session_through_relay A B CAPTURE ENCRYPTION PORT: A listens on PORT, relay-A on PORT+100
# records to CAPTURE, B dials the relay; a context and one message each way, checked as events.
session_through_relay() {
    local a=$1 b=$2 cap=$3 enc=$4 port=$5
    wait_log 30 "relay-$a" LISTENING || fail "relay did not listen: $(cat "$(log_of "relay-$a")")"
    peer_connect "$b" "127.0.0.1:$((port + 100))" --context "$CONTEXT"
    [ "$RUN_RC" = 0 ] || fail "$b could not connect to $a through the relay: $RUN_OUT"
    SESSION=$RUN_OUT
    need_event 15 "$a" peer.connected "${PEER_ID[$b]}"
    expect_rc 0 pl "$b" peer send "$SECRET_B"
    need_event 15 "$a" peer.message "$(printf %s "$SECRET_B" | base64 -w0)"
    expect_rc 0 pl "$a" peer send "$SECRET_A"
    need_event 15 "$b" peer.message "$(printf %s "$SECRET_A" | base64 -w0)"
    expect_rc 0 pl "$b" peer disconnect "${PEER_ID[$a]}"
    need_event 15 "$a" peer.disconnected '"reason":"normal"'
    wait_log 10 "relay-$a" "END 1" || fail "the relayed connection did not end: $(cat "$(log_of "relay-$a")")"
    cat "$(log_of "relay-$a")"
}

# capture_has CAPTURE TEXT: TEXT's bytes appear in either direction.
capture_has() { grep -qaF -- "$2" "$1.c2s" "$1.s2c"; }

note "four daemons: a and b encrypted (the default), c and d with peer.encryption = none"
peer_define a hci0 - peer.name=lab-a peer.listen=loopback peer.port=7111 peer.accept=all
peer_define b hci1 - peer.name=lab-b peer.listen=loopback peer.port=7112
peer_define c hci0 - peer.name=lab-c peer.listen=loopback peer.port=7121 peer.accept=all peer.encryption=none
peer_define d hci1 - peer.name=lab-d peer.listen=loopback peer.port=7122 peer.encryption=none
# The relays first: Python starts slowly under the emulator, the daemons meanwhile.
spawn relay-a peer_tool record-relay --listen 127.0.0.1:7211 --to 127.0.0.1:7111 --out "$W/enc"
spawn relay-c peer_tool record-relay --listen 127.0.0.1:7221 --to 127.0.0.1:7121 --out "$W/plain"
peer_up a b c d

RND=$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
CONTEXT="ctx-$RND-join my game"
SECRET_A="SECRET-a-to-b-$RND"
SECRET_B="SECRET-b-to-a-$RND"

note "encrypted: b -> relay -> a"
session_through_relay a b "$W/enc" required 7111
assert_eq "$(jfield encrypted "$SESSION")" true "session encrypted"
ls -l "$W"/enc.*
py_check "the encrypted capture: HELLO, then TLS records" "$W/enc" <<'PY'
import struct, sys
for d, first_tls in (("c2s", 0x16), ("s2c", 0x16)):
    b = open(f"{sys.argv[1]}.{d}", "rb").read()
    assert b[0] == 1 and b[1] == 1, f"{d}: starts with a HELLO frame header: {b[:12].hex()}"
    (n,) = struct.unpack(">I", b[8:12])
    rest = b[12 + n:]
    assert rest[0] == first_tls and rest[1] == 3, f"{d}: a TLS handshake record follows HELLO: {rest[:5].hex()}"
    # every byte after HELLO is a TLS record: walk them
    o = 0
    data = 0
    while o < len(rest):
        assert rest[o] in (0x14, 0x15, 0x16, 0x17) and rest[o + 1] == 3, f"{d}: not a TLS record at {o}: {rest[o:o + 5].hex()}"
        (ln,) = struct.unpack(">H", rest[o + 3:o + 5])
        data += rest[o] == 0x17
        o += 5 + ln
    assert o == len(rest), f"{d}: the capture ends inside a record"
    # The session's own traffic (the invitation, the messages, CLOSE) is in application-data
    # records: with the handshake's encrypted part, several each way. (The capture's size is
    # no test: a short session with ECDSA certificates is under 1,000 bytes each way.)
    assert data >= 3, f"{d}: {data} application-data records; the session's frames are missing"
    print(f"{d}: {len(b)} bytes, HELLO of {12 + n}, then TLS records to the end")
PY
for s in "$CONTEXT" "$SECRET_A" "$SECRET_B" "$RND"; do
    if capture_has "$W/enc" "$s"; then fail "the encrypted capture contains \"$s\""; fi
done
note "no context, message or random marker in the encrypted capture"

note "not encrypted: d -> relay -> c"
session_through_relay c d "$W/plain" none 7121
assert_eq "$(jfield encrypted "$SESSION")" false "session not encrypted"
assert_eq "$(jfield pairing_code "$SESSION")" null "no pairing code without TLS"
for s in "$CONTEXT" "$SECRET_A" "$SECRET_B"; do
    capture_has "$W/plain" "$s" || fail "the plain capture does not contain \"$s\""
done
grep -qaF -- "$SECRET_B" "$W/plain.c2s" || fail "b's message is not in the b-to-a direction"
grep -qaF -- "$SECRET_A" "$W/plain.s2c" || fail "a's message is not in the a-to-b direction"
note "ok"
