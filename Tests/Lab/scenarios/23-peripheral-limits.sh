#!/bin/bash
# timeout: 180
# Bad input for the peripheral role: definition files that are refused with the file, the
# place inside it and the reason, leaving nothing registered; an advertisement too large for
# the controller ("needs N, fits M"); one advertisement more than the controller has
# instances for: a clear error, and the others keep running.
. "$LAB_DIR/lib.sh"
require_peerlink
start_peerlinkd p hci0

note "bad definition files"
bad() {  # FILE-CONTENT EXPECTED-PATH EXPECTED-REASON
    printf '%s' "$1" >"$LAB_OUT/bad.json"
    expect_rc 1 pl p gatt register "$LAB_OUT/bad.json"
    assert_contains "$RUN_OUT" "$LAB_OUT/bad.json: $2: " "error names the file and the path"
    assert_contains "$RUN_OUT" "$3" "error gives the reason"
}
bad '{"services":[{"uuid":"xyz"}]}' 'services[0].uuid' 'invalid UUID "xyz"'
bad '{"services":[{"uuid":"180F","characteristics":[{"uuid":"2A19","flags":["notfy"]}]}]}' 'services[0].characteristics[0].flags[0]' 'unknown flag "notfy"'
bad '{"services":[{"uuid":"180F"},{"uuid":"180f"}]}' 'services[1].uuid' 'duplicate service UUID'
bad '{"services":[{"uuid":"180F","characteristics":[{"uuid":"2A19"}]}]}' 'services[0].characteristics[0].flags' 'missing "flags"'
bad '{"services":[{"uuid":"180F","characteristics":[{"uuid":"2A19","flags":["read"],"value":"abcd","max_length":2}]}]}' 'services[0].characteristics[0]' 'over max_length 2'
printf 'not json' >"$LAB_OUT/notjson.json"
expect_rc 2 pl p gatt register "$LAB_OUT/notjson.json"
assert_contains "$RUN_OUT" "not valid JSON" "a file that is not JSON"
expect_rc 0 pl p gatt list
assert_contains "$RUN_OUT" "No applications." "nothing registered after refused files"
# (No busctl look at the daemon's objects: the system bus's policy refuses root's Introspect
# of another connection, "Access denied", so such a check saw nothing and always passed.)

note "an advertisement over 31 bytes: needs N, fits M"
expect_rc 1 pl p advertise start --service C4FB2349-72FE-4CA2-94D6-1F3CB16331EE --service 6A3E4B28-522D-4B3B-82A9-D5E2004534FC
assert_contains "$RUN_OUT" "needs 37 bytes but 31 fit" "the size error"
expect_rc 1 pl p advertise start --name "$(printf 'n%.0s' $(seq 1 40))"
assert_contains "$RUN_OUT" "needs 42 bytes of scan response" "a name too long for the scan response"
note "the reference name plus a 128-bit service UUID fits (the name goes to the scan response)"
expect_rc 0 pl p advertise start --name "Kenshin Cui's Device" --service C4FB2349-72FE-4CA2-94D6-1F3CB16331EE

note "one advertisement more than the controller has instances for"
n=1
while [ $n -le 8 ]; do
    run pl p advertise start --name "adv$n" --manufacturer 0xffff=0$n
    [ "$RUN_RC" = 0 ] || break
    n=$((n + 1))
done
[ "$RUN_RC" = 1 ] || fail "8 more advertisements all started: the controller's limit was never reported"
assert_contains "$RUN_OUT" "maximum advertisements reached" "the error says the limit is reached"
expect_rc 0 pl p --json advertise list
py_check "advertisements still running" <(printf '%s' "$RUN_OUT") "$n" <<'PY'
import json, sys
ads = json.loads(open(sys.argv[1]).read().splitlines()[-1])["advertisements"]
assert len(ads) == int(sys.argv[2]), f"{len(ads)} advertisements listed, want {sys.argv[2]} (1 + {int(sys.argv[2]) - 1})"
assert all(a["active"] for a in ads), ads
PY
active=$(busctl --system get-property org.bluez /org/bluez/hci0 org.bluez.LEAdvertisingManager1 ActiveInstances)
note "bluetoothd reports $active active instances"
assert_eq "$active" "y $n" "bluetoothd's own count of active advertisements"
expect_rc 0 pl p advertise stop
note "limits ok"
