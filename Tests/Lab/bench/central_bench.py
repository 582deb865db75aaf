#!/usr/bin/python3 -u
"""The central benchmark's receivers (Debian's /usr/bin/python3 + python3-dbus).

The peripheral is always notify_bench.py's Python AcquireNotify-fd peripheral on hci0 (the
fastest sender the lab has), so only the receiving central changes between runs.  Every
receiver discovers the peripheral by service UUID, connects, reads the characteristic once
(timed: scan hit -> connected -> services resolved -> read answered), subscribes, and counts
the 4-byte big-endian sequence numbers that start each payload.  It prints

    FIRST_READ seconds=T stop= connect= read=   (from the scan hit to the read's answer, and its steps)
    READY                         (subscribed; the ready file is written)
    RESULT received=N bytes=B seconds=T rate=R bytes_per_s=BR lost=L reordered=O bad_size=Z

With --count 0 it stops after the first read (disconnects and forgets the device).

    central_bench.py dbus --adapter hci1 --service U --char U --count N --size S --ready-file F
        Python the bleak/bluezero way: StartNotify, values as PropertiesChanged signals on a
        GLib main loop.
    central_bench.py ours --socket PATH --service U --char U --count N --size S --ready-file F
        PeerLink: a control client of peerlinkd (central.scan, central.connect, central.read,
        central.subscribe with batch) counting the values of central.notifications events;
        with --stream, central.subscribe with stream: the values as packets on the socket
        passed with the reply (SCM_RIGHTS).
(The Python AcquireNotify-fd receiver is notify_bench.py central.)
"""
import argparse
import base64
import collections
import json
import socket
import struct
import sys
import time


def full(u):
    u = u.lower()
    return f"0000{u}-0000-1000-8000-00805f9b34fb" if len(u) == 4 else u


def die(why):
    print(f"central_bench: {why}", file=sys.stderr, flush=True)
    sys.exit(1)


class Counter:
    def __init__(self, a):
        self.a = a
        self.received = self.total = self.reordered = self.bad_size = self.first_len = 0
        self.seen = set()
        self.last_seq = -1
        self.t_first = self.t_last = None

    def add(self, pkt):
        t = time.monotonic()
        if self.t_first is None:
            self.t_first, self.first_len = t, len(pkt)
        self.t_last = t
        self.received += 1
        self.total += len(pkt)
        if len(pkt) != self.a.size:
            self.bad_size += 1
        if len(pkt) >= 4:
            seq = struct.unpack(">I", bytes(pkt[:4]))[0]
            if seq < self.last_seq:
                self.reordered += 1
            self.last_seq = seq
            self.seen.add(seq)

    def done(self):
        return self.received >= self.a.count

    def idle(self):
        return self.t_last is not None and time.monotonic() - self.t_last > self.a.idle

    def report(self):
        dt = (self.t_last - self.t_first) if self.t_first is not None else 0.0
        rate = (self.received - 1) / dt if dt > 0 else 0.0
        bps = (self.total - self.first_len) / dt if dt > 0 else 0.0
        print(f"RESULT received={self.received} bytes={self.total} seconds={dt:.3f} rate={rate:.1f} bytes_per_s={bps:.0f} "
              f"lost={max(0, self.a.count - len(self.seen))} reordered={self.reordered} bad_size={self.bad_size}", flush=True)
        if self.received < 2 or dt <= 0:
            die(f"only {self.received} notification(s) arrived: nothing to measure")


def ready(a):
    print("READY", flush=True)
    with open(a.ready_file, "w") as f:
        f.write("ready\n")


# ---- Python over D-Bus (StartNotify + PropertiesChanged) ---------------------------------
def dbus_central(a):
    import dbus
    import dbus.mainloop.glib
    from gi.repository import GLib

    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    BLUEZ, OM, PROPS = "org.bluez", "org.freedesktop.DBus.ObjectManager", "org.freedesktop.DBus.Properties"
    bus = dbus.SystemBus()
    om = dbus.Interface(bus.get_object(BLUEZ, "/"), OM)
    apath = f"/org/bluez/{a.adapter}"
    adapter = dbus.Interface(bus.get_object(BLUEZ, apath), "org.bluez.Adapter1")
    svc = full(a.service)
    for p, i in om.GetManagedObjects().items():
        if "org.bluez.Device1" in i and p.startswith(apath + "/"):
            try:
                adapter.RemoveDevice(p)
            except dbus.exceptions.DBusException:
                pass
    adapter.SetDiscoveryFilter({"Transport": "le", "DuplicateData": True, "UUIDs": [svc]})
    adapter.StartDiscovery()
    deadline = time.time() + a.find_timeout
    found = None
    while not found and time.time() < deadline:
        for p, i in om.GetManagedObjects().items():
            d = i.get("org.bluez.Device1")
            if d and p.startswith(apath + "/") and "RSSI" in d and svc in [str(u).lower() for u in d.get("UUIDs", [])]:
                found = p
        if not found:
            time.sleep(0.05)
    if not found:
        die(f"no peripheral with service {svc}")
    t_hit = time.monotonic()
    adapter.StopDiscovery()
    t_stopped = time.monotonic()
    dev = dbus.Interface(bus.get_object(BLUEZ, found), "org.bluez.Device1")
    dprops = dbus.Interface(bus.get_object(BLUEZ, found), PROPS)
    for attempt in range(5):
        try:
            dev.Connect(timeout=30)
            break
        except dbus.exceptions.DBusException as e:
            if attempt == 4:
                die(f"connect: {e}")
            time.sleep(1)
    t_connect_answered = time.monotonic()
    while not dprops.Get("org.bluez.Device1", "ServicesResolved"):
        time.sleep(0.02)
    t_connected = time.monotonic()
    # The characteristic of THIS service: the previous run's application (same characteristic
    # UUID, another service) may linger a moment in bluetoothd's database.
    cpath = None
    deadline = time.time() + 10
    while not cpath and time.time() < deadline:
        objs = om.GetManagedObjects()
        spaths = [p for p, i in objs.items() if p.startswith(found + "/")
                  and str(i.get("org.bluez.GattService1", {}).get("UUID", "")).lower() == svc]
        for p, i in objs.items():
            c = i.get("org.bluez.GattCharacteristic1")
            if c and str(c["Service"]) in spaths and str(c["UUID"]).lower() == full(a.char):
                cpath = p
        if not cpath:
            time.sleep(0.1)
    if not cpath:
        die("characteristic not found")
    chrc = dbus.Interface(bus.get_object(BLUEZ, cpath), "org.bluez.GattCharacteristic1")
    chrc.ReadValue({})
    t_read = time.monotonic()
    # Where the time goes, step by step (the bench reads only `seconds`); connect is until
    # ServicesResolved, answer is when Connect itself returned.
    print(f"FIRST_READ seconds={t_read - t_hit:.3f} stop={t_stopped - t_hit:.3f} "
          f"connect={t_connected - t_stopped:.3f} answer={t_connect_answered - t_stopped:.3f} "
          f"read={t_read - t_connected:.3f}", flush=True)
    if a.count == 0:  # first read only
        try:
            dev.Disconnect()
            adapter.RemoveDevice(found)
        except dbus.exceptions.DBusException:
            pass
        return

    counter = Counter(a)
    loop = GLib.MainLoop()

    def changed(iface, props, invalidated, path=None):
        if iface == "org.bluez.GattCharacteristic1" and "Value" in props:
            counter.add(bytes(props["Value"]))
            if counter.done():
                loop.quit()

    bus.add_signal_receiver(changed, dbus_interface=PROPS, signal_name="PropertiesChanged", path=cpath, path_keyword="path")
    chrc.StartNotify()
    ready(a)
    end = time.monotonic() + a.run_timeout

    def tick():
        if time.monotonic() > end or counter.idle():
            loop.quit()
        return True

    GLib.timeout_add(200, tick)
    loop.run()
    counter.report()
    try:
        chrc.StopNotify()
        dev.Disconnect()
        adapter.RemoveDevice(found)
    except dbus.exceptions.DBusException:
        pass


# ---- PeerLink: a control client ----------------------------------------------------------
class Control:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.buf = b""
        self.lines = collections.deque()
        self.next_id = 1
        self.events = []

    def line(self, timeout):
        # Lines are split once per chunk read (not once per line: that copies the rest of a
        # big buffer every time and made this client the bottleneck).
        while not self.lines:
            self.s.settimeout(timeout)
            chunk = self.s.recv(1 << 20)
            if not chunk:
                die("peerlinkd closed the connection")
            parts = (self.buf + chunk).split(b"\n")
            self.buf = parts.pop()
            self.lines.extend(parts)
        return json.loads(self.lines.popleft())

    def call(self, method, params, timeout=60):
        i = self.next_id
        self.next_id += 1
        self.s.sendall(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}).encode() + b"\n")
        while True:
            m = self.line(timeout)
            if m.get("method") == "event":
                self.events.append(m["params"])
            elif m.get("id") == i:
                if "error" in m:
                    die(f"{method}: {m['error']['message']}")
                return m["result"]

    def event(self, timeout):
        if self.events:
            return self.events.pop(0)
        while True:
            m = self.line(timeout)
            if m.get("method") == "event":
                return m["params"]


def ours_stream(a, c, addr, svc):
    """--stream: the values come as packets on a socket peerlinkd passes with its reply."""
    i = c.next_id
    c.next_id += 1
    c.s.sendall(json.dumps({"jsonrpc": "2.0", "id": i, "method": "central.subscribe",
                            "params": {"address": addr, "characteristic": a.char, "service": svc, "stream": True}}).encode() + b"\n")
    fds = []
    c.s.settimeout(60)
    while True:
        while not c.lines:
            data, got, _, _ = socket.recv_fds(c.s, 1 << 20, 4)
            if not data:
                die("peerlinkd closed the connection")
            fds += got
            parts = (c.buf + data).split(b"\n")
            c.buf = parts.pop()
            c.lines.extend(parts)
        m = json.loads(c.lines.popleft())
        if m.get("id") == i:
            break
    if "error" in m or not fds:
        die(f"central.subscribe stream: {m.get('error', 'no descriptor came with the reply')}")
    r = m["result"]
    print(f"SUBSCRIBED via={r['via']} mtu={r['mtu']} stream", flush=True)
    ss = socket.socket(fileno=fds[0])
    ready(a)
    counter = Counter(a)
    end = time.monotonic() + a.run_timeout
    while not counter.done() and time.monotonic() < end and not counter.idle():
        ss.settimeout(0.5)
        try:
            pkt = ss.recv(4096)
        except socket.timeout:
            continue
        if not pkt:
            break
        counter.add(pkt)
    counter.report()
    ss.close()
    c.call("central.disconnect", {"address": addr})
    c.call("central.forget", {"address": addr})


def ours(a):
    c = Control(a.socket)
    svc = full(a.service)
    c.call("central.scan", {"services": [svc], "timeout": a.find_timeout})
    addr = None
    end = time.monotonic() + a.find_timeout
    while not addr:
        e = c.event(max(0.1, end - time.monotonic()))
        if e["topic"] == "central.discovered":
            addr = e["data"]["address"]
        elif e["topic"] == "central.scan.ended":
            die("scan ended without a hit")
    t_hit = time.monotonic()
    c.call("central.scan.stop", {})
    t_stopped = time.monotonic()
    c.call("central.connect", {"address": addr, "timeout": 60}, timeout=70)
    t_connected = time.monotonic()
    c.call("central.read", {"address": addr, "characteristic": a.char, "service": svc})
    t_read = time.monotonic()
    # Where the time goes, step by step (the bench reads only `seconds`).
    print(f"FIRST_READ seconds={t_read - t_hit:.3f} stop={t_stopped - t_hit:.3f} "
          f"connect={t_connected - t_stopped:.3f} read={t_read - t_connected:.3f}", flush=True)
    if a.count == 0:  # first read only
        c.call("central.disconnect", {"address": addr})
        c.call("central.forget", {"address": addr})
        return
    # batch: the values that arrive together come in one event (base64), as a program that
    # wants throughput would ask for them.
    if a.stream:
        return ours_stream(a, c, addr, svc)
    r = c.call("central.subscribe", {"address": addr, "characteristic": a.char, "service": svc, "batch": True})
    print(f"SUBSCRIBED via={r['via']} mtu={r['mtu']}", flush=True)
    ready(a)
    counter = Counter(a)
    end = time.monotonic() + a.run_timeout
    while not counter.done() and time.monotonic() < end and not counter.idle():
        try:
            e = c.event(0.5)
        except socket.timeout:
            continue
        if e["topic"] == "central.notifications":
            for v in e["data"]["values_base64"]:
                counter.add(base64.b64decode(v))
        elif e["topic"] == "central.subscription.ended":
            break
    counter.report()
    c.call("central.disconnect", {"address": addr})
    c.call("central.forget", {"address": addr})


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("dbus", "ours"):
        s = sub.add_parser(name)
        if name == "dbus":
            s.add_argument("--adapter", required=True)
        else:
            s.add_argument("--socket", required=True)
        s.add_argument("--service", required=True)
        s.add_argument("--char", required=True)
        s.add_argument("--count", type=int, required=True)
        s.add_argument("--size", type=int, required=True)
        s.add_argument("--ready-file", required=True)
        s.add_argument("--find-timeout", type=float, default=90)
        s.add_argument("--run-timeout", type=float, default=40)
        s.add_argument("--idle", type=float, default=5)
        if name == "ours":
            s.add_argument("--stream", action="store_true")
    a = p.parse_args()
    (dbus_central if a.cmd == "dbus" else ours)(a)


if __name__ == "__main__":
    main()
