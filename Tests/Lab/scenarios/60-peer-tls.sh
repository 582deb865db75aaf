#!/bin/bash
# Peer sessions' TLS against independent tools, on loopback. peer-tool.py's hello-relay speaks
# the plain-text HELLO exchange (docs/peer-protocol.md) to daemon a as a dialer, claiming the
# SHA-256 of a certificate made by `openssl req`, then splices `openssl s_client` (which
# connects to the relay) to the daemon, the TLS server. Checked: s_client negotiates TLS 1.3
# and receives a certificate whose SHA-256 is the ID `peer identity` shows (and the one in
# the daemon's HELLO, and the file's); a TLS 1.2-only client, a client without a certificate,
# a certificate that is not the one HELLO announced and plain text on the port are refused,
# each reported by a peer.disconnected event with its reason; a real session still works after.
# timeout: 180
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/peer-lib.sh"
require_peerlink
command -v openssl >/dev/null || fail "openssl not installed"

W=/run/lab/peer-tls
rm -rf "$W"; mkdir -p "$W"
A=127.0.0.1:7101
note "a client certificate of our own (openssl req, P-256)"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$W/c.key" -out "$W/c.crt" \
    -subj /CN=lab-client -days 2 >/dev/null 2>&1 || fail "openssl req failed"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$W/o.key" -out "$W/o.crt" \
    -subj /CN=lab-other -days 2 >/dev/null 2>&1 || fail "openssl req failed"

# One relay for the four TLS cases, in turn: the claims announced in HELLO for each client.
start_relay() {
    spawn relay peer_tool hello-relay --listen 127.0.0.1:7201 --to "$A" \
        "cert:$W/c.crt" "cert:$W/c.crt" "cert:$W/c.crt" "cert:$W/o.crt"
}
# The relay first: Python starts slowly under the emulator, the daemons meanwhile.
start_relay
peer_define a hci0 - peer.name=lab-a peer.listen=loopback peer.port=7101 peer.accept=all
peer_define b hci1 - peer.name=lab-b peer.listen=loopback peer.port=7102
peer_up a b
AID=${PEER_ID[a]}
wait_log 30 relay LISTENING || fail "the relay did not listen: $(cat "$(log_of relay)")"

note "the identity file's certificate is the peer ID (openssl x509)"
FILE_ID=$(openssl x509 -in "$(pl_state_dir a)/peer/identity.crt" -outform DER | sha256sum | cut -d' ' -f1)
assert_eq "$FILE_ID" "$AID" "SHA-256 of identity.crt"

# s_client N ARGS...: the relay's Nth client, openssl s_client (bounded), output in RUN_OUT.
s_client() {
    local n=$1; shift
    run timeout --foreground 30 openssl s_client -connect 127.0.0.1:7201 "$@"
    wait_log 20 relay "END $n " || fail "the relay did not end connection $n: $(cat "$(log_of relay)")"
}

note "1. TLS 1.3 with a certificate: s_client completes and sees a's certificate"
s_client 1 -tls1_3 -cert "$W/c.crt" -key "$W/c.key" -showcerts
[ "$RUN_RC" = 0 ] || fail "s_client with a certificate failed (rc $RUN_RC)"
assert_contains "$RUN_OUT" "New, TLSv1.3, Cipher is" "s_client: TLS 1.3"
sed -n '/-----BEGIN CERTIFICATE-----/,/-----END CERTIFICATE-----/p' <<<"$RUN_OUT" | awk '{print} /END CERT/ {exit}' >"$W/server.pem"
SERVER_ID=$(openssl x509 -in "$W/server.pem" -outform DER | sha256sum | cut -d' ' -f1)
assert_eq "$SERVER_ID" "$AID" "SHA-256 of the certificate s_client received"
cat "$(log_of relay)"
assert_contains "$(grep '^DAEMON-HELLO 1 ' "$(log_of relay)")" "\"id\": \"$AID\"" "the daemon's HELLO carries its peer ID"
assert_contains "$(grep '^DAEMON-HELLO 1 ' "$(log_of relay)")" '"role": 1' "the daemon's HELLO: role listener"
assert_contains "$(grep '^END 1 ' "$(log_of relay)")" "first-byte-after-hello=0x16" "TLS (a handshake record) follows HELLO"
# The session did not go further (s_client sends no INVITE): the connection ended, and was no session.
need_event 15 a peer.disconnected '"address":"127.0.0.1:'
assert_eq "$(event_count a peer.connected)" 0 "no session from a bare TLS handshake"

note "2. a TLS 1.2-only client is refused"
s_client 2 -tls1_2 -cert "$W/c.crt" -key "$W/c.key"
[ "$RUN_RC" != 0 ] || fail "s_client -tls1_2 succeeded"
assert_not_contains "$RUN_OUT" "New, TLSv1.2" "no TLS 1.2 session"
assert_contains "$RUN_OUT" "alert protocol version" "s_client: the server's protocol_version alert"
wait_for 15 sh -c "[ \$(grep -F '\"topic\":\"peer.disconnected\"' '$(log_of ev-a)' | grep -cF '\"reason\":\"tls-failed\"') -ge 1 ]" \
    || fail "a did not report tls-failed for TLS 1.2: $(tail -n 5 "$(log_of ev-a)")"
event_lines a peer.disconnected tls-failed | tail -n 1

note "3. a client without a certificate is refused"
s_client 3 -tls1_3 -ign_eof
assert_contains "$RUN_OUT" "alert certificate required" "s_client: the server's certificate_required alert"
wait_for 15 sh -c "[ \$(grep -F '\"topic\":\"peer.disconnected\"' '$(log_of ev-a)' | grep -cF '\"reason\":\"tls-failed\"') -ge 2 ]" \
    || fail "a did not report a refused client without a certificate: $(tail -n 5 "$(log_of ev-a)")"
assert_contains "$(event_lines a peer.disconnected tls-failed | tail -n 1)" "certificate" "the reason's detail names the missing certificate"
event_lines a peer.disconnected tls-failed | tail -n 1

note "4. a certificate that is not the one HELLO announced is refused"
s_client 4 -tls1_3 -cert "$W/c.crt" -key "$W/c.key" -ign_eof
assert_contains "$RUN_OUT" "alert handshake failure" "s_client: the server's handshake_failure alert"
need_event 15 a peer.disconnected '"reason":"identity-mismatch"'
event_lines a peer.disconnected identity-mismatch | tail -n 1

note "5. plain text on the port: the daemon answers HELLO, then CLOSE protocol-error"
run peer_tool probe --to "$A" --text 'GET / HTTP/1.0\r\n\r\n'
[ "$RUN_RC" = 0 ] || fail "probe failed"
assert_contains "$RUN_OUT" "FRAME HELLO" "the daemon's HELLO"
assert_contains "$RUN_OUT" "FRAME CLOSE reason=protocol-error" "a CLOSE naming protocol-error"
need_event 15 a peer.disconnected '"reason":"protocol-error"'
event_lines a peer.disconnected protocol-error | tail -n 1

note "6. a still serves: a real session from b, messages both ways"
assert_eq "$(event_count a peer.connected)" 0 "no session from any of the refused clients"
peer_connect b "$A" --context "after the refusals"
[ "$RUN_RC" = 0 ] || fail "b could not connect to a: $RUN_OUT"
assert_eq "$(jfield encrypted "$RUN_OUT")" true "session encrypted"
CODE_B=$(jfield pairing_code "$RUN_OUT")
need_event 15 a peer.connected "${PEER_ID[b]}"
assert_contains "$(event_lines a peer.connected)" "\"pairing_code\":\"$CODE_B\"" "the same pairing code on both"
expect_rc 0 pl b peer send "from b to a"
need_event 15 a peer.message "$(printf 'from b to a' | base64)"
expect_rc 0 pl a peer send "from a to b"
need_event 15 b peer.message "$(printf 'from a to b' | base64)"
note "ok"
