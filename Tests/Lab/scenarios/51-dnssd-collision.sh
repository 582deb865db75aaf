#!/bin/bash
# Two peerlinkd instances publish the same name: the second is renamed with
# Avahi's alternative name ("Shared Name #2"), says so (publish result,
# dnssd.renamed event, CLI note), both are on the network (avahi-browse), and
# the chosen name is kept in the state dir: after a restart the second daemon
# publishes under "Shared Name #2" again even once the original name is free.
# timeout: 150
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/dnssd-lib.sh"
require_peerlink

KEEP=/var/lib/peerlink-b-keep
rm -rf "$KEEP"
start_peerlinkd a hci0
start_peerlinkd_keep b hci1 "$KEEP"

spawn_watch watch-b pl_watch b --json watch --topic dnssd.renamed --count 1 --timeout 60

note "a publishes \"Shared Name\""
pl a --json dnssd publish "Shared Name" _lab-coll._tcp 5001 who=a >"$LAB_OUT/a.json" || fail "publish on a exited $?"
cat "$LAB_OUT/a.json"
assert_eq "$(json_get "$LAB_OUT/a.json" 'd["name"]')" "Shared Name" "a's name"

note "b publishes the same name: renamed"
expect_rc 0 pl b dnssd publish "Shared Name" _lab-coll._tcp 5002 who=b
assert_contains "$RUN_OUT" 'published as "Shared Name #2"' "the CLI says it was renamed"
expect_rc 0 pl b --json dnssd list
py_check "b's publication is renamed" "$RUN_OUT" <<'PY'
import json, sys
out = sys.argv[1]
d = json.loads(out[out.index("{"):])
p = d["publications"][0]
assert p["requested_name"] == "Shared Name", p
assert p["name"] == "Shared Name #2", p
assert p["renames"] >= 1, p
assert p["state"] == "established", p
PY
wait_log 10 watch-b '"dnssd.renamed"' || fail "no dnssd.renamed event on b: $(cat "$(log_of watch-b)")"
cat "$(log_of watch-b)"
assert_contains "$(cat "$(log_of watch-b)")" '"to":"Shared Name #2"' "renamed event names the new name"
assert_contains "$(cat "$(log_of watch-b)")" '"from":"Shared Name"' "renamed event names the old name"
assert_contains "$(cat "$LAB_OUT/peerlinkd-b.log")" "dnssd.collision=local" "b's log: a local collision (one avahi-daemon)"

note "avahi-browse sees both, with their own TXT"
avahi_browse_json _lab-coll._tcp >"$LAB_OUT/avahi.json"
cat "$LAB_OUT/avahi.json"
py_check "both services on the network" "$LAB_OUT/avahi.json" <<'PY'
import json, sys
got = {i["name"]: i for i in json.load(open(sys.argv[1])) if i["event"] == "="}
assert got.get("Shared Name", {}).get("txt") == ["who=a"], got
assert got.get("Shared Name #2", {}).get("txt") == ["who=b"], got
PY

note "the chosen name is in b's state dir"
cat "$KEEP/dnssd-names.json"; echo
assert_contains "$(cat "$KEEP/dnssd-names.json")" "Shared Name #2" "dnssd-names.json"

note "stop both; restart b with the same state dir: it keeps \"Shared Name #2\" although the name is free"
stop_peerlinkd b
stop_peerlinkd a
wait_for 10 sh -c "! avahi-browse -p -t _lab-coll._tcp 2>/dev/null | grep -q Shared" || fail "services still on the network after stopping"
start_peerlinkd_keep b2 hci1 "$KEEP"
pl b2 --json dnssd publish "Shared Name" _lab-coll._tcp 5002 who=b >"$LAB_OUT/b2.json" || fail "publish on b2 exited $?"
cat "$LAB_OUT/b2.json"
assert_eq "$(json_get "$LAB_OUT/b2.json" 'd["name"]')" "Shared Name #2" "name after restart"
assert_eq "$(json_get "$LAB_OUT/b2.json" 'd["renames"]')" 0 "no new collision needed"
avahi_has "Shared Name #2" _lab-coll._tcp || fail "avahi-browse does not see 'Shared Name #2' after the restart"
note "ok"
