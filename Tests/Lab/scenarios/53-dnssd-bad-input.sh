#!/bin/bash
# Bad input to dnssd publish: an invalid type, a TXT entry over 255 bytes, port
# 0 and 65536, an empty name (and a few more: a bad subtype, an unknown
# interface, a TXT key without a name, a duplicate key, an over-long name):
# each a clear error naming the parameter (exit 1, JSON-RPC -32602 with
# data.param), and nothing half-published: avahi-browse sees nothing of them,
# `dnssd list` is empty, and a good publish afterwards works.
# timeout: 150
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/dnssd-lib.sh"
require_peerlink

start_peerlinkd a hci0
LONG=$(printf 'v%.0s' $(seq 300))

# bad PARAM CLI-ARGS...: exit 1, message names PARAM, JSON error data.param == PARAM.
bad() {
    local param=$1; shift
    note "publish $* -> error on '$param'"
    expect_rc 1 pl a dnssd publish "$@"
    assert_contains "$RUN_OUT" "invalid params: $param:" "message names $param"
    run pl a --json dnssd publish "$@"
    assert_eq "$RUN_RC" 1 "exit status with --json"
    py_check "JSON error for $param" "$RUN_OUT" "$param" <<'PY'
import json, sys
line = [l for l in sys.argv[1].splitlines() if l.startswith("{")][-1]
e = json.loads(line)["error"]
assert e["code"] == -32602, e
assert e["data"]["param"] == sys.argv[2], e
PY
}

bad type "Bad Type" _bad 8080
bad type "Bad Type" _bad._sctp 8080
bad type "Bad Type" _way-too-long-name._tcp 8080
bad txt "Bad TXT" _lab-bad._tcp 8080 "k=$LONG"
bad port "Bad Port" _lab-bad._tcp 0
bad port "Bad Port" _lab-bad._tcp 65536
bad name "" _lab-bad._tcp 8080
bad name "$(printf 'n%.0s' $(seq 64))" _lab-bad._tcp 8080
bad txt "Bad TXT" _lab-bad._tcp 8080 "=novalue"
bad txt "Bad TXT" _lab-bad._tcp 8080 "k=1" "K=2"
bad subtypes "Bad Sub" _lab-bad._tcp 8080 --subtype "no-underscore"
bad interface "Bad Iface" _lab-bad._tcp 8080 --interface nosuch0

note "the TXT error says how long the entry is and the limit"
expect_rc 1 pl a dnssd publish "Bad TXT" _lab-bad._tcp 8080 "k=$LONG"
assert_contains "$RUN_OUT" "302 bytes" "entry length"
assert_contains "$RUN_OUT" "255" "limit"

note "nothing half-published"
expect_rc 0 pl a --json dnssd list
assert_contains "$RUN_OUT" '"publications":[]' "no publications"
avahi_browse_json _lab-bad._tcp >"$LAB_OUT/avahi-bad.json" || fail "avahi-browse _lab-bad._tcp failed"
assert_eq "$(cat "$LAB_OUT/avahi-bad.json")" "[]" "avahi-browse _lab-bad._tcp"
run timeout --foreground 20 avahi-browse -a -k -p -t
assert_eq "$RUN_RC" 0 "avahi-browse -a"
assert_not_contains "$RUN_OUT" "Bad" "avahi-browse -a"

note "a good publish afterwards works"
expect_rc 0 pl a dnssd publish "Good One" _lab-bad._tcp 8080 k=v
avahi_has "Good One" _lab-bad._tcp || fail "avahi-browse does not see 'Good One'"
note "ok"
