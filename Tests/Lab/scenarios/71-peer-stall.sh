#!/bin/bash
# An accepted resource whose peer stops sending: a plain-text peer written from the protocol
# document (peer-tool.py stall: HELLO with encryption none, PINGs answered, so the session
# stays up) offers 300,000 bytes, sends 100,000 once accepted, then nothing. The daemon
# (peer.transfer_idle_timeout = 3) ends it with RESOURCE_CANCEL `timeout` on the wire, tells
# its client (peer.resource-ended, reason timeout), and keeps the 100,000 bytes: the same
# content offered again is accepted from offset 100,000, and the file that arrives has the
# sha256sum of what the peer sent.
# timeout: 120
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/peer-lib.sh"
require_peerlink

rm -rf /run/lab/inbox-stall
peer_start s hci0 - peer.name=stall-receiver peer.listen=loopback peer.port=7601 peer.accept=all \
    peer.encryption=optional peer.accept_resources=all peer.inbox_dir=/run/lab/inbox-stall peer.transfer_idle_timeout=3

note "the peer offers, sends a third, then stops"
run timeout --foreground 90 "$PY3" -u "$PEER_TOOL" stall --to 127.0.0.1:7601 --size 300000 --send 100000 \
    --name stalled.bin --content-out "$LAB_OUT/stalled.bin" --timeout 30
[ "$RUN_RC" = 0 ] || fail "the stalling peer failed: $RUN_OUT"
assert_contains "$RUN_OUT" "CANCEL reason=timeout" "the daemon cancelled the stalled resource with timeout"
assert_contains "$RUN_OUT" "RESUMED offset=100000" "the same content resumed from what arrived"
assert_contains "$RUN_OUT" "DONE" "the resumed resource was verified"

need_event 10 s peer.resource-ended '"reason":"timeout"' '"name":"stalled.bin"'
note "reported: $(jfield detail "$(event_lines s peer.resource-ended '"reason":"timeout"')")"
need_event 10 s peer.resource-received '"name":"stalled.bin"'
got=$(jfield path "$(event_lines s peer.resource-received '"name":"stalled.bin"' | tail -n 1)")
[ -f "$got" ] || fail "no received file at '$got'"
assert_eq "$(sha256sum <"$got" | cut -d' ' -f1)" "$(sha256sum <"$LAB_OUT/stalled.bin" | cut -d' ' -f1)" "sha256sum of the resumed file"
assert_eq "$(parts_left /run/lab/inbox-stall)" "" "no part left once the file is saved"
note "peer stall done"
