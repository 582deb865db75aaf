#!/usr/bin/python3 -u
"""The notify path on the host, without the lab: where peerlinkd's CPU goes per gatt.notify.

    scripts/notify-host-bench.py --bin .build/release [--count N] [--size S] [--window W]
                                 [--batch B] [--values V] [--wrap "valgrind --tool=callgrind"]

Starts a private dbus-daemon, a fake bluetoothd (python3-dbus: one adapter hci0 with
GattManager1 and LEAdvertisingManager1; RegisterApplication reads the application's tree
and then calls AcquireNotify on its first notify characteristic, MTU 517, as bluetoothd
does for a subscribing central), then peerlinkd (optionally under --wrap), registers an
application, and sends N gatt.notify requests of S bytes through the control socket, at
most W unanswered (B requests a line as a JSON-RPC batch; V values a request with the
`values` form). A thread drains the notification socket and checks every packet.
Prints the daemon's CPU time per notification (utime+stime from /proc) and the rate.
Needs Debian's /usr/bin/python3 (python3-dbus, python3-gi) and dbus-daemon; no root.
"""
import argparse
import base64
import json
import os
import shlex
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import dbus
import dbus.service
from dbus.mainloop.glib import DBusGMainLoop
from gi.repository import GLib

CHR = "6a3e4b28-522d-4b3b-82a9-d5e2004534fc"
SVC = "c4fb2349-72fe-4ca2-94d6-1f3cb16331ee"


def payload(seq, size):
    head = struct.pack(">I", seq & 0xFFFFFFFF)
    return (head + bytes((seq + i) & 0xFF for i in range(size - 4)))[:size]


class Adapter(dbus.service.Object):
    def __init__(self, bus, path, got_fd):
        super().__init__(bus, path)
        self.bus = bus
        self.got_fd = got_fd

    @dbus.service.method("org.bluez.GattManager1", in_signature="oa{sv}", out_signature="",
                         sender_keyword="sender", async_callbacks=("ok", "err"))
    def RegisterApplication(self, root, options, sender=None, ok=None, err=None):
        om = dbus.Interface(self.bus.get_object(sender, root), "org.freedesktop.DBus.ObjectManager")

        def tree(objs):
            ok()
            for p, i in objs.items():
                c = i.get("org.bluez.GattCharacteristic1")
                if c and str(c["UUID"]) == CHR:
                    ch = dbus.Interface(self.bus.get_object(sender, p), "org.bluez.GattCharacteristic1")
                    opts = dbus.Dictionary({"device": dbus.ObjectPath("/org/bluez/hci0/dev_00_AA_01_01_00_01"),
                                            "mtu": dbus.UInt16(517), "link": "LE"}, signature="sv")
                    ch.AcquireNotify(opts, reply_handler=lambda fd, mtu: self.got_fd(fd.take(), int(mtu)),
                                     error_handler=lambda e: print("AcquireNotify failed:", e, file=sys.stderr))
        om.GetManagedObjects(reply_handler=tree, error_handler=err)

    @dbus.service.method("org.bluez.GattManager1", in_signature="o", out_signature="")
    def UnregisterApplication(self, root):
        pass

    @dbus.service.method("org.bluez.LEAdvertisingManager1", in_signature="oa{sv}", out_signature="")
    def RegisterAdvertisement(self, path, options):
        pass

    @dbus.service.method("org.bluez.LEAdvertisingManager1", in_signature="o", out_signature="")
    def UnregisterAdvertisement(self, path):
        pass

    @dbus.service.method("org.freedesktop.DBus.Properties", in_signature="ss", out_signature="v")
    def Get(self, iface, name):
        return self.props()[iface][name]

    @dbus.service.method("org.freedesktop.DBus.Properties", in_signature="s", out_signature="a{sv}")
    def GetAll(self, iface):
        return self.props().get(iface, {})

    @staticmethod
    def props():
        return {
            "org.bluez.Adapter1": {"Address": "00:AA:01:00:00:00", "AddressType": "public", "Name": "fake",
                                   "Alias": "fake", "Powered": True, "PowerState": "on", "Discoverable": False,
                                   "Discovering": False, "Roles": dbus.Array(["central", "peripheral"], signature="s")},
            "org.bluez.GattManager1": dbus.Dictionary({}, signature="sv"),
            "org.bluez.LEAdvertisingManager1": {"SupportedInstances": dbus.Byte(4), "ActiveInstances": dbus.Byte(0),
                                                "SupportedCapabilities": dbus.Dictionary({"MaxAdvLen": dbus.Byte(31)}, signature="sv")},
        }


class Root(dbus.service.Object):
    @dbus.service.method("org.freedesktop.DBus.ObjectManager", in_signature="", out_signature="a{oa{sa{sv}}}")
    def GetManagedObjects(self):
        return {dbus.ObjectPath("/org/bluez/hci0"): Adapter.props()}


class AgentManager(dbus.service.Object):
    @dbus.service.method("org.bluez.AgentManager1", in_signature="os", out_signature="")
    def RegisterAgent(self, path, cap):
        pass

    @dbus.service.method("org.bluez.AgentManager1", in_signature="o", out_signature="")
    def UnregisterAgent(self, path):
        pass

    @dbus.service.method("org.bluez.AgentManager1", in_signature="o", out_signature="")
    def RequestDefaultAgent(self, path):
        pass


def ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks


def switches(pid):
    """Context switches of every thread of pid (voluntary + involuntary)."""
    n = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/status") as f:
                for l in f:
                    if l.endswith("ctxt_switches:\t" + l.split("\t")[-1]) and "ctxt_switches" in l:
                        n += int(l.split()[-1])
        except OSError:
            pass
    return n


def rpc(sock, method, params, rid=1):
    sock.sendall((json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}) + "\n").encode())
    buf = b""
    while b"\n" not in buf:
        d = sock.recv(65536)
        if not d:
            raise SystemExit(f"{method}: connection closed")
        buf += d
    r = json.loads(buf.split(b"\n")[0])
    if "error" in r:
        raise SystemExit(f"{method}: {r['error']}")
    return r["result"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--size", type=int, default=510)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--values", type=int, default=0, help="values per request (the values form); 0: one value")
    ap.add_argument("--wrap", default="")
    ap.add_argument("--callgrind", metavar="FILE", help="run the daemon under callgrind, counting only the measured part, into FILE")
    ap.add_argument("--log-level", default="info")
    ap.add_argument("--lab-client", action="store_true", help="send with Tests/Lab/bench/notify_bench.py client (the lab's sender) instead")
    ap.add_argument("--rx-rate", type=float, default=0, help="the receiver takes at most this many packets/s (0: as fast as it can)")
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="pl-bench-")
    conf = os.path.join(tmp, "bus.conf")
    with open(conf, "w") as f:
        f.write(f"""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>session</type><listen>unix:path={tmp}/bus</listen><auth>EXTERNAL</auth>
<policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy></busconfig>""")
    busd = subprocess.Popen(["dbus-daemon", f"--config-file={conf}", "--nofork", "--print-address=1", "--nopidfile"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    address = busd.stdout.readline().decode().strip()
    DBusGMainLoop(set_as_default=True)
    bus = dbus.bus.BusConnection(address)
    state = {"fd": None, "mtu": None}
    ready = threading.Event()

    def got_fd(fd, mtu):
        state["fd"], state["mtu"] = fd, mtu
        ready.set()

    Root(bus, "/")
    Adapter(bus, "/org/bluez/hci0", got_fd)
    AgentManager(bus, "/org/bluez")
    bus.request_name("org.bluez")
    loop = GLib.MainLoop()
    threading.Thread(target=loop.run, daemon=True).start()

    sockpath = os.path.join(tmp, "control.sock")
    with open(os.path.join(tmp, "peerlink.conf"), "w") as f:
        f.write(f"log_level = {a.log_level}\n")
    if a.callgrind:
        a.wrap = f"valgrind --tool=callgrind --callgrind-out-file={a.callgrind} --instr-atstart=no"
    cmd = shlex.split(a.wrap) + [os.path.join(a.bin, "peerlinkd"), "--config", os.path.join(tmp, "peerlink.conf"),
                                 "--socket", sockpath, "--state-dir", os.path.join(tmp, "state"), "--bus", address]
    log = open(os.path.join(tmp, "peerlinkd.log"), "w")
    d = subprocess.Popen(cmd, stderr=log, stdout=log)
    pid = None
    try:
        deadline = time.time() + 120
        s = None
        while time.time() < deadline:
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(sockpath)
                st = rpc(s, "daemon.status", {})
                if st["adapters"]:
                    break
            except OSError:
                pass
            s = None
            time.sleep(0.2)
        if s is None:
            raise SystemExit("peerlinkd did not come up; log in " + tmp)
        pid = st["pid"]
        rpc(s, "gatt.register", {"definition": {"name": "bench", "services": [{"uuid": SVC, "characteristics": [
            {"uuid": CHR, "flags": ["read", "notify"], "value": "bench"}]}]}})
        if not ready.wait(30):
            raise SystemExit("no AcquireNotify")
        fd = state["fd"]
        total = a.count
        got = {"n": 0, "bytes": 0, "bad": 0}

        def drain():
            import select
            while got["n"] < total:
                r, _, _ = select.select([fd], [], [], 30)
                if not r:
                    break
                while True:
                    try:
                        p = os.read(fd, 1024)
                    except BlockingIOError:
                        break
                    if not p:
                        return
                    if len(p) != a.size or p != payload(struct.unpack(">I", p[:4])[0], a.size):
                        got["bad"] += 1
                    got["n"] += 1
                    got["bytes"] += len(p)
                    if a.rx_rate:
                        if got["n"] == 1:
                            got["t0"] = time.monotonic()
                        ahead = got["n"] / a.rx_rate - (time.monotonic() - got["t0"])
                        if ahead > 0.001:
                            time.sleep(ahead)
        rx = threading.Thread(target=drain, daemon=True)
        rx.start()

        per_req = max(a.values, 1)
        reqs = []
        for i in range(0, a.count, per_req):
            if a.values:
                params = {"uuid": CHR, "values_base64": [base64.b64encode(payload(j, a.size)).decode() for j in range(i, min(i + per_req, a.count))]}
            else:
                params = {"uuid": CHR, "value_base64": base64.b64encode(payload(i, a.size)).decode()}
            reqs.append(json.dumps({"jsonrpc": "2.0", "id": len(reqs) + 1, "method": "gatt.notify", "params": params}, separators=(",", ":")))
        if a.batch <= 1:
            lines = [(r + "\n").encode() for r in reqs]
            sizes = [1] * len(lines)
        else:
            lines = [("[" + ",".join(reqs[i:i + a.batch]) + "]\n").encode() for i in range(0, len(reqs), a.batch)]
            sizes = [len(reqs[i:i + a.batch]) for i in range(0, len(reqs), a.batch)]
        if a.callgrind:
            subprocess.run(["callgrind_control", "-i", "on", str(pid)], check=True, stdout=subprocess.DEVNULL)
        t_cpu0 = ticks(pid)
        sw0 = switches(pid)
        if a.lab_client:
            here = os.path.dirname(os.path.abspath(__file__))
            out = subprocess.run([sys.executable, "-u", os.path.join(here, "..", "Tests", "Lab", "bench", "notify_bench.py"), "client",
                                  "--socket", sockpath, "--char", CHR, "--count", str(a.count), "--size", str(a.size),
                                  "--window", str(a.window), "--batch", str(a.batch), "--values", str(max(a.values, 1)), "--pid", str(pid)],
                                 capture_output=True, text=True)
            print(out.stdout.strip(), out.stderr.strip())
            reqs, lines = [], []
        t0 = time.monotonic()
        sent = ok = nline = 0
        buf = b""
        while ok < len(reqs):
            while nline < len(lines) and sent - ok < a.window:
                s.sendall(lines[nline])
                sent += sizes[nline]
                nline += 1
            data = s.recv(262144)
            if not data:
                raise SystemExit("daemon closed the connection")
            buf += data
            *replies, buf = buf.split(b"\n")
            for r in replies:
                if b'"error"' in r:
                    raise SystemExit(f"error after {ok}: {r[:300]}")
                ok += r.count(b'"result"')
        dt = time.monotonic() - t0
        cpu = (ticks(pid) - t_cpu0) / os.sysconf("SC_CLK_TCK")
        sw = switches(pid) - sw0
        rx.join(10)
        if a.callgrind:
            subprocess.run(["callgrind_control", "-d", str(pid)], check=True, stdout=subprocess.DEVNULL)
            subprocess.run(["callgrind_control", "-i", "off", str(pid)], check=True, stdout=subprocess.DEVNULL)
        print(f"HOST count={a.count} size={a.size} window={a.window} batch={a.batch} values={a.values} "
              f"seconds={dt:.3f} rate={a.count / dt:.0f}/s daemon_cpu={cpu:.2f}s "
              f"cpu_per_notify_us={cpu / a.count * 1e6:.1f} switches_per_request={sw / len(reqs) if reqs else 0:.1f} received={got['n']} bad={got['bad']} mtu={state['mtu']}")
    finally:
        # The daemon itself (not a --wrap tool, which then writes its report).
        try:
            os.kill(pid, 15) if pid else d.terminate()
        except OSError:
            d.terminate()
        try:
            d.wait(60)
        except subprocess.TimeoutExpired:
            d.kill()
        busd.terminate()
        print("logs:", tmp)


if __name__ == "__main__":
    main()
