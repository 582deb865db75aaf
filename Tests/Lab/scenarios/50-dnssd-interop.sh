#!/bin/bash
# DNS-SD interoperability with Avahi's own tools: a service published by
# peerlinkd (TXT, subtype) is found and resolved by `avahi-browse -r -p` with
# the same TXT, also under its subtype, updated live and withdrawn; a service
# published by `avahi-publish -s` is found and resolved by
# `peerlink dnssd browse --resolve` and `dnssd resolve`; `dnssd types` lists both.
# timeout: 180
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/dnssd-lib.sh"
require_peerlink

ADDRS=$(dummy0_addrs)
note "dummy0 addresses: $ADDRS"
start_peerlinkd a hci0
start_peerlinkd b hci1

note "peerlinkd a publishes \"Lab Printer\" _ipp._tcp 631 with TXT and a subtype"
pl a --json dnssd publish "Lab Printer" _ipp._tcp 631 txtvers=1 "note=hello world" rp=printers/lab \
    --subtype _universal >"$LAB_OUT/publish.json" || fail "dnssd publish exited $?"
cat "$LAB_OUT/publish.json"
ID=$(json_get "$LAB_OUT/publish.json" 'd["id"]')
assert_eq "$(json_get "$LAB_OUT/publish.json" 'd["state"]')" established "publication state"
assert_eq "$(json_get "$LAB_OUT/publish.json" 'd["name"]')" "Lab Printer" "published name"

note "avahi-browse -r -p resolves it with the same TXT"
avahi_browse_json _ipp._tcp >"$LAB_OUT/avahi-ipp.json"
cat "$LAB_OUT/avahi-ipp.json"
py_check "avahi-browse sees Lab Printer with its TXT" "$LAB_OUT/avahi-ipp.json" "$ADDRS" <<'PY'
import json, sys
items = [i for i in json.load(open(sys.argv[1])) if i["event"] == "=" and i["name"] == "Lab Printer"]
assert items, "avahi-browse did not resolve 'Lab Printer'"
i = items[0]
assert i["port"] == 631, i
assert i["host"] == "peerlink-lab.local", i
assert i["address"] in sys.argv[2].split(), (i, sys.argv[2])
assert i["txt"] == ["txtvers=1", "note=hello world", "rp=printers/lab"], i["txt"]
PY

note "the subtype _universal._sub._ipp._tcp finds it too"
avahi_browse_json _universal._sub._ipp._tcp >"$LAB_OUT/avahi-sub.json"
py_check "avahi-browse finds it under the subtype" "$LAB_OUT/avahi-sub.json" <<'PY'
import json, sys
assert any(i["name"] == "Lab Printer" for i in json.load(open(sys.argv[1]))), "not found under the subtype"
PY

note "dnssd list shows it"
expect_rc 0 pl a dnssd list
assert_contains "$RUN_OUT" "Lab Printer" "dnssd list"
assert_contains "$RUN_OUT" established "dnssd list"

note "live TXT update is seen by avahi-browse"
expect_rc 0 pl a dnssd update "$ID" txtvers=1 note=changed
wait_for 15 sh -c "avahi-browse -r -p -t _ipp._tcp 2>/dev/null | grep -q 'note=changed'" \
    || fail "avahi-browse never saw note=changed"
avahi_browse_json _ipp._tcp >"$LAB_OUT/avahi-updated.json"
# (After an update avahi-daemon 0.8 sends the entries in another order; TXT keys are unordered.)
py_check "the updated TXT" "$LAB_OUT/avahi-updated.json" <<'PY'
import json, sys
i = [i for i in json.load(open(sys.argv[1])) if i["event"] == "=" and i["name"] == "Lab Printer"][0]
assert sorted(i["txt"]) == ["note=changed", "txtvers=1"], i["txt"]
PY

note "avahi-publish -s publishes \"Avahi Tool Service\" _lab-demo._tcp 4242"
spawn avahi-publish avahi-publish -s "Avahi Tool Service" _lab-demo._tcp 4242 k1=v1 flag "path=/a b"
wait_log 15 avahi-publish "Established" || fail "avahi-publish did not establish: $(cat "$(log_of avahi-publish)")"

note "peerlink dnssd browse --resolve (b) finds and resolves it"
pl b --json dnssd browse _lab-demo._tcp --resolve --timeout 6 >"$LAB_OUT/browse.jsonl" || fail "dnssd browse exited $?"
cat "$LAB_OUT/browse.jsonl"
py_check "peerlink browse resolved the avahi-publish service" "$LAB_OUT/browse.jsonl" "$ADDRS" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
found = [e for e in ev if e["topic"] == "dnssd.found" and e["data"]["service"]["name"] == "Avahi Tool Service"]
res = [e["data"]["service"] for e in ev if e["topic"] == "dnssd.resolved" and e["data"]["service"]["name"] == "Avahi Tool Service"]
assert found, "no dnssd.found for the service"
assert res, "no dnssd.resolved for the service"
r = res[0]
assert r["port"] == 4242, r
assert r["host"] == "peerlink-lab.local", r
assert r["addresses"] and set(r["addresses"]) <= set(sys.argv[2].split()), (r, sys.argv[2])
assert r["txt"] == ["k1=v1", "flag", "path=/a b"], r["txt"]
assert r["interface"] == "dummy0" and r["protocol"] == "ipv4", r
PY

note "the text form of browse --resolve"
expect_rc 0 pl b dnssd browse _lab-demo._tcp --resolve --timeout 4
assert_contains "$RUN_OUT" "+ \"Avahi Tool Service\" _lab-demo._tcp local on dummy0/ipv4" "browse text"
assert_contains "$RUN_OUT" "port 4242" "browse text"

note "dnssd resolve (b) resolves both services"
expect_rc 0 pl b --json dnssd resolve "Avahi Tool Service" _lab-demo._tcp --timeout 5
assert_contains "$RUN_OUT" '"port":4242' "resolve avahi-publish's service"
expect_rc 0 pl b dnssd resolve "Lab Printer" _ipp._tcp
assert_contains "$RUN_OUT" "port: 631" "resolve Lab Printer"
assert_contains "$RUN_OUT" "txt: note=changed" "resolve Lab Printer (TXT updated)"
assert_contains "$RUN_OUT" "addresses: " "resolve Lab Printer address"
expect_rc 0 pl b --json dnssd resolve "Lab Printer" _ipp._tcp --all-addresses
for a in $ADDRS; do assert_contains "$RUN_OUT" "\"$a\"" "resolve --all-addresses has $a"; done

note "dnssd types lists both types"
expect_rc 0 pl b dnssd types --timeout 5
assert_contains "$RUN_OUT" "_ipp._tcp" "types"
assert_contains "$RUN_OUT" "_lab-demo._tcp" "types"

note "a service that does not exist: a clear error, exit 1"
expect_rc 1 pl b dnssd resolve "Nobody Here" _ipp._tcp --timeout 2
assert_contains "$RUN_OUT" "Nobody Here" "resolve error names the service"

note "unpublish: avahi-browse no longer sees it"
expect_rc 0 pl a dnssd unpublish "$ID"
wait_for 10 sh -c "! avahi-browse -p -t _ipp._tcp 2>/dev/null | grep -q 'Lab.032Printer'" \
    || fail "Lab Printer still on the network after unpublish"
expect_rc 0 pl a dnssd list
assert_contains "$RUN_OUT" "No publications." "list after unpublish"
note "ok"
