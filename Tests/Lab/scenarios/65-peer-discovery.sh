#!/bin/bash
# Peer discovery over DNS-SD, the reference flow, checked with Avahi's own tools:
# daemon a advertises cmj-stream as KenshinCui_Advertiser and avahi-browse sees
# _cmj-stream._tcp on a's port with the TXT pv/pid/pn and the info; daemon b
# (KenshinCui, advertising too) browses and finds a but never itself; b invites
# a by name with a context; a's client sees the invitation with its pairing code
# and accepts; both ends show the same code; a message each way; a stops
# advertising and b's browse reports it lost.
# timeout: 120
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/dnssd-lib.sh"
require_peerlink

conf() { printf 'peer.name = %s\npeer.accept = ask\n' "$1" >"$LAB_OUT/$2.conf"; echo "$LAB_OUT/$2.conf"; }
PL_CONFIG=$(conf KenshinCui_Advertiser a) start_peerlinkd a hci0
PL_CONFIG=$(conf KenshinCui b) start_peerlinkd b hci1

pl a --json peer identity >"$LAB_OUT/a-id.json" || fail "peer identity (a) exited $?"
pl b --json peer identity >"$LAB_OUT/b-id.json" || fail "peer identity (b) exited $?"
A_HEX=$(json_get "$LAB_OUT/a-id.json" 'd["peer"]'); A_TEXT=$(json_get "$LAB_OUT/a-id.json" 'd["peer_text"]')
A_PORT=$(json_get "$LAB_OUT/a-id.json" 'd["port"]'); B_HEX=$(json_get "$LAB_OUT/b-id.json" 'd["peer"]')
note "a is $A_TEXT on port $A_PORT"

note "a advertises cmj-stream with discovery info; b advertises too"
pl a --json peer advertise cmj-stream --info room=lab >"$LAB_OUT/advertise.json" || fail "peer advertise exited $?"
cat "$LAB_OUT/advertise.json"
assert_eq "$(json_get "$LAB_OUT/advertise.json" 'd["service_type"]')" _cmj-stream._tcp "advertised type"
assert_eq "$(json_get "$LAB_OUT/advertise.json" 'd["state"]')" established "advertisement state"
expect_rc 0 pl b peer advertise cmj-stream

note "avahi-browse -r -p sees KenshinCui_Advertiser on a's port with the TXT"
wait_for 15 avahi_has KenshinCui_Advertiser _cmj-stream._tcp || fail "avahi-browse never saw KenshinCui_Advertiser"
avahi_browse_json _cmj-stream._tcp >"$LAB_OUT/avahi.json"
cat "$LAB_OUT/avahi.json"
py_check "avahi-browse resolves a's advertisement" "$LAB_OUT/avahi.json" "$A_PORT" "$A_TEXT" <<'PY'
import json, sys
items = [i for i in json.load(open(sys.argv[1])) if i["event"] == "=" and i["name"] == "KenshinCui_Advertiser"]
assert items, "not resolved"
i = items[0]
assert i["port"] == int(sys.argv[2]), i
assert sorted(i["txt"]) == sorted(["pv=1", "pid=" + sys.argv[3], "pn=KenshinCui_Advertiser", "room=lab"]), i["txt"]
PY

spawn_watch a-watch pl_watch a --json peer watch
spawn_watch b-watch pl_watch b --json peer watch
spawn b-browse pl_watch b --json peer browse cmj-stream --timeout 90
spawn a-browse pl_watch a --json peer browse cmj-stream --timeout 90
wait_log 15 b-browse "$A_HEX" || fail "b's browse never found a: $(cat "$(log_of b-browse)")"
wait_log 15 a-browse "$B_HEX" || fail "a's browse never found b: $(cat "$(log_of a-browse)")"
py_check "browse results: the other peer with name, info and a's port; never itself" \
    "$(log_of b-browse)" "$(log_of a-browse)" "$A_HEX" "$B_HEX" "$A_PORT" <<'PY'
import json, sys
b = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
a = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
found = [e["data"] for e in b if e["topic"] == "peer.found" and e["data"]["peer"] == sys.argv[3]]
assert found, b
f = found[-1]
assert f["name"] == "KenshinCui_Advertiser" and f["info"] == {"room": "lab"} and f["compatible"], f
assert any(x.endswith(":" + sys.argv[5]) for x in f["addresses"]), f["addresses"]
assert not any(e["data"].get("peer") == sys.argv[4] for e in b), "b's browse lists b itself"
assert not any(e["data"].get("peer") == sys.argv[3] for e in a), "a's browse lists a itself"
PY

note "b invites KenshinCui_Advertiser by name with a context; a's client accepts"
spawn b-invite pl b --json peer invite KenshinCui_Advertiser --type cmj-stream --context "hello from KenshinCui" --wait 30
B_INVITE=$SPAWN_PID
wait_log 20 a-watch '"peer.invitation"' || fail "a saw no invitation: $(cat "$(log_of a-watch)")"
INV=$("$PY3" - "$(log_of a-watch)" "$B_HEX" <<'PY'
import base64, json, sys
e = [json.loads(l)["data"] for l in open(sys.argv[1]) if '"peer.invitation"' in l][0]
assert e["peer"] == sys.argv[2], e
assert base64.b64decode(e["context_base64"]) == b"hello from KenshinCui", e
assert len(e["pairing_code"]) == 6 and e["pairing_code"].isdigit(), e
print(e["invitation"], e["pairing_code"])
PY
) || fail "the invitation: $INV"
read -r INV_ID CODE <<<"$INV"
note "invitation $INV_ID, pairing code $CODE"
expect_rc 0 pl a peer accept "$INV_ID"
wait "$B_INVITE" || fail "peer invite exited $?: $(cat "$(log_of b-invite)")"
cat "$(log_of b-invite)"
py_check "b's session: encrypted, a, the same pairing code" "$(log_of b-invite)" "$A_HEX" "$CODE" <<'PY'
import json, sys
s = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
assert s["peer"] == sys.argv[2] and s["encrypted"] and s["pairing_code"] == sys.argv[3], s
PY

note "a message each way"
expect_rc 0 pl b peer send "hello a"
expect_rc 0 pl a peer send "hello b"
wait_log 15 a-watch "$(printf 'hello a' | base64)" || fail "a never got b's message"
wait_log 15 b-watch "$(printf 'hello b' | base64)" || fail "b never got a's message"

note "a stops advertising: b's browse reports it lost"
expect_rc 0 pl a peer advertise cmj-stream --stop
wait_log 15 b-browse '"peer.lost"' || fail "b's browse never reported a lost: $(cat "$(log_of b-browse)")"
wait_for 15 sh -c "! avahi-browse -p -t _cmj-stream._tcp 2>/dev/null | grep -q KenshinCui_Advertiser" \
    || fail "avahi-browse still sees KenshinCui_Advertiser"
note "ok"
