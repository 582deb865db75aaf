#!/bin/bash
# timeout: 600
# Benchmark (make bench): DNS-SD through peerlinkd against Avahi's own tools, in one guest.
#
# publish_to_resolved: from the start of a publish in one daemon (a) to a browse with
#   --resolve in the other daemon (b: `peerlink --json dnssd browse --resolve`, started
#   beforehand) printing the resolved service; median of N (20). Baseline: the same with
#   Avahi's tools, an `avahi-browse -r -p` started beforehand. Two ways to publish, each
#   against its avahi counterpart, all four interleaved run by run (the order rotates):
#   - from a running client (publish_to_resolved_*): a `dnssd.publish` request on an open
#     control connection to a, against EntryGroupNew + AddService + Commit on avahi-daemon
#     over D-Bus (python3-dbus; what avahi-publish does once started);
#   - with a process start (publish_to_resolved_cli_*): `peerlink dnssd publish --hold`
#     against `avahi-publish -s` (both stay until ended, like avahi-publish).
#   One Python driver starts every publish and polls both browsers' output files the same
#   way (every 2 ms), so the steps timed are the same on both sides; the floor is Avahi's
#   own probing (about 750 ms + random delay up to 250 ms).
# resolve_cached: `dnssd.resolve` of a service b's browse has resolved, answered from b's
#   resolve cache, timed by a client on one open control connection (request written to
#   answer read; no process start), median of RN (50), back to back. Then, each RN times:
#   the same resolve with "fresh": true (b asks avahi-daemon through libavahi-client);
#   as the avahi baseline, avahi-daemon's own ResolveService over D-Bus (python3-dbus,
#   the service in avahi-daemon's cache); and the control path's floor, a dnssd.resolve
#   refused for a bad type before DNS-SD is reached. The daemon-side time (`elapsed_ms`)
#   and the CLI's wall time per call (process start included) are printed as notes.
# Prints (Tests/Lab/bench/summary.py shows them with their targets):
#   bench dnssd.publish_to_resolved_ms=<median>  bench dnssd.publish_to_resolved_baseline_ms=<median>
#   bench dnssd.publish_to_resolved_ratio=<ours/baseline>  (target <= 1.10)
#   bench dnssd.publish_to_resolved_cli_ms, _cli_baseline_ms, _cli_ratio (the same, target <= 1.10)
#   bench dnssd.resolve_cached_ms=<median>  (target < 5)
#   bench dnssd.resolve_cached_daemon_ms=<median>  bench dnssd.resolve_fresh_ms=<median>
#   bench dnssd.resolve_avahi_dbus_baseline_ms=<median>  bench dnssd.control_floor_ms=<median>
# No timing assertions: it fails only when a measurement could not be made (or a cached
# answer did not come from the cache).
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/dnssd-lib.sh"
require_peerlink
N=${BENCH_DNSSD_N:-20}
export PL_TIMEOUT=590

# wait_line FILE TEXT [SECONDS]: poll FILE until it contains TEXT; print the time (ms) seen.
wait_line() {
    local deadline=$(( $(now_ms) + ${3:-20} * 1000 ))
    while :; do
        if grep -qF -- "$2" "$1"; then now_ms; return 0; fi
        [ "$(now_ms)" -lt "$deadline" ] || return 1
        sleep 0.005
    done
}

median() { "$PY3" -c 'import statistics,sys; v=[float(x) for x in sys.argv[1:]]; print(f"{statistics.median(v):.1f}")' "$@"; }

start_peerlinkd a hci0
start_peerlinkd b hci1

OURS_LOG="$LAB_OUT/ours-browse.log"
AV_LOG="$LAB_OUT/avahi-browse.log"
pl b --json dnssd browse _bench-pl._tcp --resolve >"$OURS_LOG" 2>&1 &
_LIB_PIDS+=("$!")
stdbuf -oL avahi-browse -r -p -k _bench-av._tcp >"$AV_LOG" 2>&1 &
_LIB_PIDS+=("$!")
wait_line "$OURS_LOG" '"dnssd.all-for-now"' 20 >/dev/null || fail "peerlink browse did not start: $(cat "$OURS_LOG")"
sleep 1  # let avahi-browse settle too (it prints nothing for an empty type)

"$PY3" - "$PEERLINK_BIN/peerlink" "$(pl_socket a)" "$OURS_LOG" "$AV_LOG" "$N" >"$LAB_OUT/publish.json" <<'PY' \
    || fail "publish timing failed: $(cat "$LAB_OUT/publish.json")"
import json, signal, socket, subprocess, sys, time
import dbus
peerlink, sock_a, ours_log, av_log, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
PL_TYPE, AV_TYPE = "_bench-pl._tcp", "_bench-av._tcp"

class Tail:
    """The text appended to a file from now on; wait() polls it every 2 ms for a marker."""
    def __init__(self, path):
        self.f = open(path, "rb")
        self.f.seek(0, 2)
        self.buf = b""
    def wait(self, marker, what, timeout=20):
        deadline = time.monotonic() + timeout
        while True:
            self.buf += self.f.read()
            if marker in self.buf:
                return time.monotonic()
            if time.monotonic() > deadline:
                raise SystemExit(f"{what}: not resolved by the browser within {timeout} s")
            time.sleep(0.002)

ours, av = Tail(ours_log), Tail(av_log)
def ours_marker(name): return ('"name":"%s","port"' % name).encode()
def av_marker(name): return ("=;dummy0;IPv4;%s;%s;" % (name.replace(" ", "\\032"), AV_TYPE)).encode()

s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sock_a)
f = s.makefile("rb")
rpc_id = 0
def rpc_send(method, params):
    global rpc_id
    rpc_id += 1
    s.sendall((json.dumps({"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}) + "\n").encode())
def rpc_reply(what):
    d = json.loads(f.readline())
    if "result" not in d:
        raise SystemExit(f"{what}: {d}")
    return d["result"]

bus = dbus.SystemBus()
server = dbus.Interface(bus.get_object("org.freedesktop.Avahi", "/", introspect=False), "org.freedesktop.Avahi.Server")

def ours_conn(i, keep):
    name = f"PL Conn {i}"
    t0 = time.monotonic()
    rpc_send("dnssd.publish", {"name": name, "type": PL_TYPE, "port": 9000 + i, "txt": [f"run={i}"]})
    t1 = ours.wait(ours_marker(name), name)
    pid = rpc_reply(f"publish {name}")["id"]
    if not keep:
        rpc_send("dnssd.unpublish", {"id": pid})
        rpc_reply(f"unpublish {name}")
    return t1 - t0

def avahi_bus(i, keep):
    name = f"AV Bus {i}"
    t0 = time.monotonic()
    path = server.EntryGroupNew()
    group = dbus.Interface(bus.get_object("org.freedesktop.Avahi", path, introspect=False), "org.freedesktop.Avahi.EntryGroup")
    group.AddService(dbus.Int32(-1), dbus.Int32(-1), dbus.UInt32(0), name, AV_TYPE, "", "", dbus.UInt16(9000 + i),
                     dbus.Array([dbus.ByteArray(f"run={i}".encode())], signature="ay"))
    group.Commit()
    t1 = av.wait(av_marker(name), name)
    group.Free()
    return t1 - t0

def run_cli(argv, tail, marker, name):
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t1 = tail.wait(marker, name)
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return t1 - t0

def ours_cli(i, keep):
    name = f"PL Cli {i}"
    return run_cli([peerlink, "--socket", sock_a, "dnssd", "publish", name, PL_TYPE, str(9000 + i), f"run={i}", "--hold"],
                   ours, ours_marker(name), name)

def avahi_cli(i, keep):
    name = f"AV Cli {i}"
    return run_cli(["avahi-publish", "-s", name, AV_TYPE, str(9000 + i), f"run={i}"], av, av_marker(name), name)

kinds = [("ours_conn", ours_conn), ("avahi_bus", avahi_bus), ("ours_cli", ours_cli), ("avahi_cli", avahi_cli)]
out = {k: [] for k, _ in kinds}
for i in range(1, n + 1):
    order = kinds[i % 4:] + kinds[:i % 4]
    for k, fn in order:
        # The last "PL Conn" stays published: b's resolve cache is timed on it.
        out[k].append(round(fn(i, keep=(i == n)) * 1000, 1))
    print(f"run {i}: " + ", ".join(f"{k} {out[k][-1]:.0f} ms" for k, _ in kinds), file=sys.stderr, flush=True)
print(json.dumps(out))
PY
cat "$LAB_OUT/publish.json"
pj() { "$PY3" -c 'import json,sys; print(" ".join(str(x) for x in json.load(open(sys.argv[1]))[sys.argv[2]]))' "$LAB_OUT/publish.json" "$1"; }

# Resolve from b's cache (b's browse resolved "PL Conn $N"), "fresh" through avahi-daemon,
# avahi-daemon's own ResolveService, and the control path's floor (a dnssd.resolve refused for
# a bad type before DNS-SD is reached), RN times each, back to back, on one open connection.
RN=${BENCH_DNSSD_RESOLVE_N:-50}
"$PY3" - "$(pl_socket b)" "PL Conn $N" _bench-pl._tcp "$RN" >"$LAB_OUT/resolve.json" <<'PY' || fail "resolve timing failed: $(cat "$LAB_OUT/resolve.json")"
import json, socket, sys, time
import dbus
path, name, stype, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
f = s.makefile("rb")
server = dbus.Interface(dbus.SystemBus().get_object("org.freedesktop.Avahi", "/", introspect=False), "org.freedesktop.Avahi.Server")
out = {k: [] for k in ("cached", "cached_daemon", "cached_flags", "fresh", "fresh_daemon", "fresh_flags", "avahi", "floor")}
rid = 0
def call(params):
    global rid
    rid += 1
    line = (json.dumps({"jsonrpc": "2.0", "id": rid, "method": "dnssd.resolve", "params": params}) + "\n").encode()
    t0 = time.perf_counter()
    s.sendall(line)
    reply = f.readline()
    return (time.perf_counter() - t0) * 1000, json.loads(reply)
for k, params in (("cached", {"name": name, "type": stype}), ("fresh", {"name": name, "type": stype, "fresh": True})):
    for _ in range(n):
        ms, d = call(params)
        if "result" not in d:
            raise SystemExit(f"resolve failed: {d}")
        out[k].append(round(ms, 3))
        out[k + "_daemon"].append(d["result"]["elapsed_ms"])
        out[k + "_flags"].append(d["result"]["daemon_cache"])
for _ in range(n):
    t0 = time.perf_counter()
    server.ResolveService(dbus.Int32(-1), dbus.Int32(-1), name, stype, "local", dbus.Int32(-1), dbus.UInt32(0))
    out["avahi"].append(round((time.perf_counter() - t0) * 1000, 3))
for _ in range(n):
    ms, d = call({"name": name, "type": "bad"})
    if d.get("error", {}).get("code") != -32602:
        raise SystemExit(f"expected invalid params: {d}")
    out["floor"].append(round(ms, 3))
print(json.dumps(out))
PY
cat "$LAB_OUT/resolve.json"
rj() { "$PY3" -c 'import json,sys; print(" ".join(str(x) for x in json.load(open(sys.argv[1]))[sys.argv[2]]))' "$LAB_OUT/resolve.json" "$1"; }
[ "$(rj cached_flags | tr ' ' '\n' | sort -u)" = True ] || fail "a resolve without fresh was not answered from the cache: $(rj cached_flags)"
[ "$(rj fresh_flags | tr ' ' '\n' | sort -u)" = False ] || fail "a fresh resolve was answered from the cache: $(rj fresh_flags)"

wall=()
for i in 1 2 3 4 5; do
    t0=$(now_ms)
    out=$("$PEERLINK_BIN/peerlink" --socket "$(pl_socket b)" --json dnssd resolve "PL Conn $N" _bench-pl._tcp) || fail "resolve $i failed: $out"
    t1=$(now_ms)
    wall+=($((t1 - t0)))
done

# What a process start costs each side (both start one per publish).
pst=(); ast=()
for _ in 1 2 3 4 5; do
    t0=$(now_ms); "$PEERLINK_BIN/peerlink" --version >/dev/null; t1=$(now_ms); pst+=($((t1 - t0)))
    t0=$(now_ms); avahi-publish --version >/dev/null 2>&1; t1=$(now_ms); ast+=($((t1 - t0)))
done
note "process start, median ms: peerlink --version $(median "${pst[@]}"), avahi-publish --version $(median "${ast[@]}")"

ratio() { "$PY3" -c "print(f'{$1 / $2:.3f}')"; }
om=$(median $(pj ours_conn)); bm=$(median $(pj avahi_bus))
cm=$(median $(pj ours_cli)); cbm=$(median $(pj avahi_cli))
note "publish_to_resolved from a running client, ours: $(pj ours_conn)"
note "publish_to_resolved from a running client, avahi D-Bus: $(pj avahi_bus)"
note "publish_to_resolved with a process start, peerlink dnssd publish: $(pj ours_cli)"
note "publish_to_resolved with a process start, avahi-publish: $(pj avahi_cli)"
note "resolve from cache, client ms: $(rj cached); daemon-side ms: $(rj cached_daemon)"
note "resolve fresh, client ms: $(rj fresh); daemon-side ms: $(rj fresh_daemon)"
note "avahi-daemon ResolveService over D-Bus, ms: $(rj avahi)"
note "control path floor (a request refused before DNS-SD), ms: $(rj floor)"
note "resolve CLI wall ms (process start included): ${wall[*]} (median $(median "${wall[@]}"))"
echo "bench dnssd.publish_to_resolved_ms=$om"
echo "bench dnssd.publish_to_resolved_baseline_ms=$bm"
echo "bench dnssd.publish_to_resolved_ratio=$(ratio "$om" "$bm")"
echo "bench dnssd.publish_to_resolved_cli_ms=$cm"
echo "bench dnssd.publish_to_resolved_cli_baseline_ms=$cbm"
echo "bench dnssd.publish_to_resolved_cli_ratio=$(ratio "$cm" "$cbm")"
echo "bench dnssd.resolve_cached_ms=$(median $(rj cached))"
echo "bench dnssd.resolve_cached_daemon_ms=$(median $(rj cached_daemon))"
echo "bench dnssd.resolve_fresh_ms=$(median $(rj fresh))"
echo "bench dnssd.resolve_avahi_dbus_baseline_ms=$(median $(rj avahi))"
echo "bench dnssd.control_floor_ms=$(median $(rj floor))"
