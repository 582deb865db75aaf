#!/bin/bash
# timeout: 300
# The central role against an independent peripheral: BlueZ's own example-gatt-server and
# example-advertisement on hci1; peerlinkd on hci0 scans for the advertised Heart Rate
# service, connects, gets the service tree the script defines, reads Battery Level,
# receives Heart Rate Measurement notifications, writes the test characteristic (the
# script logs the write), pairs-free trust/forget, and disconnects.
. "$LAB_DIR/lib.sh"
require_peerlink
PERIPH=$(adapter_addr hci1)
DEV=/org/bluez/hci0/dev_${PERIPH//:/_}
discovering() { test "$(adapter_prop hci0 Discovering)" = true; }
disconnected() { test "$(bluez_prop $DEV org.bluez.Device1 Connected)" = false; }
HR=0000180d-0000-1000-8000-00805f9b34fb

start_peerlinkd c hci0 --log-level debug
# Scanner first, then the advertiser (the emulator's reliable order, Tests/Lab/README.md).
spawn scan pl_watch c --json scan --service 180D --count 1 --timeout 90
wait_for 20 discovering || fail "hci0 is not discovering: $(cat "$(log_of scan)")"
spawn gatt bluez_example example-gatt-server hci1
wait_log 30 gatt "GATT application registered" || fail "example-gatt-server did not register: $(cat "$(log_of gatt)")"
spawn adv bluez_example example-advertisement hci1 --timeout 300
wait_log 30 adv "Advertisement registered" || fail "example-advertisement did not register: $(cat "$(log_of adv)")"
wait_log 60 scan "$PERIPH" || fail "scan did not find the example peripheral: $(cat "$(log_of scan)")"
py_check "discovery event" "$(log_of scan)" "$PERIPH" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
assert len(lines) == 1, lines
d = lines[0]
assert d["address"] == sys.argv[2], d
assert "0000180d-0000-1000-8000-00805f9b34fb" in d["uuids"], d["uuids"]
assert isinstance(d["rssi"], int), d
# example-advertisement: manufacturer 0xffff [0 1 2 3], service data 9999 [0 1 2 3 4]
m = {x["id"]: x["value_hex"] for x in d["manufacturer_data"]}
assert m.get(0xFFFF) == "00010203", m
s = {x["uuid"]: x["value_hex"] for x in d["service_data"]}
assert s.get("00009999-0000-1000-8000-00805f9b34fb") == "0001020304", s
PY

note "connect and discover"
expect_rc 0 pl c --json connect "$PERIPH" --timeout 60
expect_rc 0 pl c --json services "$PERIPH"
py_check "service tree matches example-gatt-server" "$RUN_OUT" <<'PY'
import json, sys
t = json.loads(sys.argv[1])
def u(x): return x if len(x) > 8 else f"0000{x}-0000-1000-8000-00805f9b34fb"
svcs = {s["uuid"]: s for s in t["services"]}
want = {
    u("180d"): {u("2a37"): ["notify"], u("2a38"): ["read"], u("2a39"): ["write"]},
    u("180f"): {u("2a19"): ["read", "notify"]},
    "12345678-1234-5678-1234-56789abcdef0": {
        "12345678-1234-5678-1234-56789abcdef1": ["read", "write"],
        "12345678-1234-5678-1234-56789abcdef3": ["read", "write"],
        "12345678-1234-5678-1234-56789abcdef5": ["read", "write"],
    },
}
for su, chars in want.items():
    assert su in svcs, (su, list(svcs))
    got = {c["uuid"]: c for c in svcs[su]["characteristics"]}
    assert set(got) == set(chars), (su, sorted(got), sorted(chars))
    for cu, flags in chars.items():
        for f in flags:
            assert f in got[cu]["flags"], (cu, f, got[cu]["flags"])
        assert isinstance(got[cu]["handle"], int) and got[cu]["handle"] > 0, got[cu]
descs = lambda su, cu: {d["uuid"] for c in svcs[su]["characteristics"] if c["uuid"] == cu for d in c["descriptors"]}
assert u("2902") in descs(u("180d"), u("2a37")), descs(u("180d"), u("2a37"))
d1 = descs("12345678-1234-5678-1234-56789abcdef0", "12345678-1234-5678-1234-56789abcdef1")
assert {"12345678-1234-5678-1234-56789abcdef2", u("2901")} <= d1, d1
PY

note "read Battery Level"
expect_rc 0 pl c --json read "$PERIPH" 2a19
py_check "battery level" "$RUN_OUT" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
assert len(bytes.fromhex(r["value_hex"])) == 1 and 0 < int(r["value_hex"], 16) <= 100, r
PY
wait_log 10 gatt "Battery Level read" || fail "the example did not log the read"

note "subscribe to Heart Rate Measurement"
expect_rc 0 pl c --json subscribe "$PERIPH" 2a37 --count 3 --timeout 30
py_check "three notifications in order" "$RUN_OUT" <<'PY'
import json, sys
n = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
assert len(n) == 3, n
assert [x["seq"] for x in n] == [1, 2, 3], n
for x in n:
    b = bytes.fromhex(x["value_hex"])
    assert len(b) >= 2 and b[0] in (0x06, 0x0e), x   # flags byte, then the heart rate
PY

note "subscribe as a data stream: the values come as packets on a socket passed with the reply"
py_check "stream subscription" "$(pl_socket c)" "$PERIPH" <<'PY'
import json, socket, sys, time
path, dev = sys.argv[1], sys.argv[2]
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
c.connect(path)
c.settimeout(30)
c.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "central.subscribe",
                      "params": {"address": dev, "characteristic": "2a37", "stream": True}}).encode() + b"\n")
buf, fds = b"", []
while b"\n" not in buf:
    data, got, _, _ = socket.recv_fds(c, 65536, 4)
    assert data, "the daemon closed the connection"
    buf += data
    fds += got
reply = json.loads(buf.split(b"\n", 1)[0])
assert reply.get("result", {}).get("fd") is True and len(fds) == 1, (reply, fds)
s = socket.socket(fileno=fds[0])
s.settimeout(30)
for i in range(3):
    p = s.recv(600)
    assert len(p) >= 2 and p[0] in (0x06, 0x0e), p   # flags byte, then the heart rate
s.close()   # closing the stream ends the subscription
buf = buf.split(b"\n", 1)[1]
deadline = time.monotonic() + 20
while True:
    while b"\n" not in buf:
        data = c.recv(65536)
        assert data, "the daemon closed the connection"
        buf += data
    line, buf = buf.split(b"\n", 1)
    m = json.loads(line)
    if m.get("method") == "event" and m["params"]["topic"] == "central.subscription.ended":
        d = m["params"]["data"]
        assert "stream ended" in d["reason"] and d["count"] >= 3 and d["dropped"] == 0, d
        break
    assert time.monotonic() < deadline, "no central.subscription.ended after closing the stream"
PY

note "write the test characteristic"
expect_rc 0 pl c write "$PERIPH" 12345678-1234-5678-1234-56789abcdef1 0a0b0c --hex
wait_log 10 gatt "TestCharacteristic Write: dbus.Array([dbus.Byte(10), dbus.Byte(11), dbus.Byte(12)]" \
    || fail "example-gatt-server did not log the write: $(tail -5 "$(log_of gatt)")"
expect_rc 0 pl c --json read "$PERIPH" 12345678-1234-5678-1234-56789abcdef1
assert_contains "$RUN_OUT" '"value_hex":"0a0b0c"' "read back what was written"

note "a long value (300 bytes) written with a request and read back whole"
LONG=$(printf '%0600d' 0 | tr 0 7)   # 300 bytes of 0x77 as hex
expect_rc 0 pl c write "$PERIPH" 12345678-1234-5678-1234-56789abcdef1 "$LONG" --hex
expect_rc 0 pl c --json read "$PERIPH" 12345678-1234-5678-1234-56789abcdef1
assert_contains "$RUN_OUT" "\"value_hex\":\"$LONG\"" "the long value read back"

note "Battery Level over StartNotify (--indicate: the D-Bus path, the fallback of AcquireNotify)"
expect_rc 0 pl c --json subscribe "$PERIPH" 2a19 --indicate --count 1 --timeout 30
py_check "battery notification over D-Bus" "$RUN_OUT" <<'PY'
import json, sys
n = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
assert len(n) == 1 and len(bytes.fromhex(n[0]["value_hex"])) == 1, n
PY

note "services --refresh: the cached tree is dropped and discovered again (ConnectDevice)"
expect_rc 0 pl c --json services "$PERIPH" --refresh
assert_contains "$RUN_OUT" "12345678-1234-5678-1234-56789abcdef1" "the tree after a refresh"
assert_eq "$(bluez_prop $DEV org.bluez.Device1 Connected)" true "connected again after the refresh (busctl)"

note "errors name what is wrong"
expect_rc 1 pl c read "$PERIPH" 2a99
assert_contains "$RUN_OUT" "not found: characteristic 00002a99" "unknown characteristic"
expect_rc 1 pl c write "$PERIPH" 2a38 01 --hex --command
assert_contains "$RUN_OUT" "does not allow writes without response" "command write to a read-only characteristic"
expect_rc 2 pl c read not-an-address 2a19
assert_contains "$RUN_OUT" "not-an-address" "a bad address is a usage error naming it"

note "devices, trust, disconnect, forget"
expect_rc 0 pl c --json devices --connected
assert_contains "$RUN_OUT" "$PERIPH" "devices lists the connected peripheral"
expect_rc 0 pl c trust "$PERIPH"
assert_eq "$(bluez_prop $DEV org.bluez.Device1 Trusted)" true "Trusted (busctl)"
expect_rc 0 pl c disconnect "$PERIPH"
wait_for 10 disconnected || fail "still connected (busctl)"
expect_rc 0 pl c forget "$PERIPH"
wait_for 10 sh -c "! busctl tree org.bluez 2>/dev/null | grep -q dev_${PERIPH//:/_}" || fail "device object still there after forget"
note "central vs example ok"
