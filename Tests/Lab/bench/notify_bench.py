#!/usr/bin/python3 -u
"""The notification benchmark's three programs (Debian's /usr/bin/python3 + python3-dbus).

    notify_bench.py central --adapter hci1 --service UUID --char UUID --count N --size S
                            [--ready-file F] [--find-timeout S] [--run-timeout S] [--idle S]
        The receiver, the same for every run: an independent central that talks only to
        bluetoothd.  Removes the adapter's cached devices, discovers the peripheral by
        service UUID (discovery restarted every 2 s), connects, calls AcquireNotify({}) on
        the remote characteristic and reads packets from the returned (non-blocking) fd
        until N arrived (or nothing came for --idle seconds, or --run-timeout passed).
        Each payload carries a 4-byte big-endian sequence number first.  Prints
            ACQUIRED mtu=M
            RESULT received=N bytes=B seconds=T rate=R bytes_per_s=BR lost=L reordered=O bad_size=Z
        (rate and bytes_per_s from the first packet to the last).  Exit 0 when at least
        two packets arrived, 1 otherwise (reason on stderr).

    notify_bench.py peripheral --adapter hci0 --mode dbus|fd --service UUID --char UUID
                               --count N --size S --go-file F [--name NAME]
        A baseline peripheral written the usual Python way (dbus-python + GLib, like BlueZ's
        example-gatt-server, bluezero and bless): registers a GATT application and an
        advertisement on the NAMED adapter.  When a central subscribes it prints SUBSCRIBED,
        waits for the go file, then sends N notifications of S bytes:
          dbus: the characteristic has StartNotify; each notification is a PropertiesChanged
                signal on Value, emitted from the GLib main loop (values built beforehand);
          fd:   the characteristic exposes NotifyAcquired/AcquireNotify; bluetoothd gets one
                end of a SOCK_SEQPACKET pair and each packet written is one notification.
        Prints SENT n=N seconds=T, then keeps running until killed.

    notify_bench.py client --socket PATH --char UUID --count N --size S [--window W] [--batch B]
                           [--values V] [--pid PID]
        Ours: a control client that pipelines `gatt.notify` requests (value_base64) to
        peerlinkd, at most W values unanswered at once (with B > 1: JSON-RPC batches of B
        requests a line; with V > 1: the array form, V values a request in values_base64),
        reads the replies as they come and stops at the first error reply.  Samples VmRSS of
        PID (the daemon) every 0.1 s.  Prints
            CLIENT sent=N ok=K seconds=T rate=R rss_max_kb=X hwm_kb=Y
        Exit 0 when every request was answered without error, 1 otherwise.
        With --stream: one `gatt.notify-stream` request instead; the reply carries a packet
        socket (SCM_RIGHTS) and the client writes each value to it (blocking, like the fd
        baseline), closes it, and waits for `gatt.stream.ended`, whose `sent` must be N.
"""
import argparse
import json
import os
import re
import select
import socket
import struct
import sys
import time


def payload(seq, size):
    """size bytes: the sequence number (big-endian, 4 bytes), then a pattern."""
    head = struct.pack(">I", seq & 0xFFFFFFFF)
    if size <= 4:
        return head[:size]
    body = bytes((seq + i) & 0xFF for i in range(size - 4))
    return head + body


def die(who, why):
    print(f"{who}: {why}", file=sys.stderr, flush=True)
    sys.exit(1)


def full(u):
    u = u.lower()
    return f"0000{u}-0000-1000-8000-00805f9b34fb" if len(u) == 4 else u


# ---- the receiver ------------------------------------------------------------------------
def central(a):
    import dbus

    BLUEZ, OM, PROPS = "org.bluez", "org.freedesktop.DBus.ObjectManager", "org.freedesktop.DBus.Properties"
    bus = dbus.SystemBus()
    om = dbus.Interface(bus.get_object(BLUEZ, "/"), OM)
    apath = f"/org/bluez/{a.adapter}"
    adapter = dbus.Interface(bus.get_object(BLUEZ, apath), "org.bluez.Adapter1")
    svc = full(a.service)

    def devices():
        return {p: i["org.bluez.Device1"] for p, i in om.GetManagedObjects().items()
                if "org.bluez.Device1" in i and p.startswith(apath + "/")}

    # Every run starts without a cached device (and its cached GATT database).
    for p in devices():
        try:
            adapter.RemoveDevice(p)
        except dbus.exceptions.DBusException:
            pass

    deadline = time.time() + a.find_timeout
    adapter.SetDiscoveryFilter({"Transport": "le", "DuplicateData": True, "UUIDs": [svc]})
    found = None
    while not found and time.time() < deadline:
        try:
            adapter.StartDiscovery()
        except dbus.exceptions.DBusException:
            pass
        until = time.time() + 2
        while time.time() < until and not found:
            for p, d in devices().items():
                if "RSSI" in d and svc in [str(u).lower() for u in d.get("UUIDs", [])]:
                    found = (p, d)
            time.sleep(0.1)
        try:
            adapter.StopDiscovery()
        except dbus.exceptions.DBusException:
            pass
    if not found:
        die("central", f"no peripheral with service {svc} found on {a.adapter}")
    dpath, d = found
    print(f"FOUND {d.get('Address')}", flush=True)
    dev = dbus.Interface(bus.get_object(BLUEZ, dpath), "org.bluez.Device1")
    dprops = dbus.Interface(bus.get_object(BLUEZ, dpath), PROPS)
    # "Operation already in progress" happens in the lab (a previous run's link still
    # being torn down): retry with a pause, up to 10 times.
    for attempt in range(10):
        try:
            dev.Connect(timeout=20)
            break
        except dbus.exceptions.DBusException as e:
            if dprops.Get("org.bluez.Device1", "Connected"):
                break
            if attempt == 9 or time.time() > deadline:
                die("central", f"connect failed: {e.get_dbus_name()}: {e}")
            print(f"connect attempt {attempt + 1}: {e.get_dbus_name()}: {e}", flush=True)
            time.sleep(2)
    while not dprops.Get("org.bluez.Device1", "ServicesResolved"):
        if time.time() > deadline:
            die("central", "services not resolved")
        time.sleep(0.1)
    # The characteristic of THIS service: a previous peripheral's application (same
    # characteristic UUID, another service) may linger a moment in bluetoothd's database.
    cpath = None
    while not cpath and time.time() < deadline:
        objs = om.GetManagedObjects()
        spaths = [p for p, i in objs.items() if p.startswith(dpath + "/")
                  and str(i.get("org.bluez.GattService1", {}).get("UUID", "")).lower() == svc]
        for p, i in objs.items():
            c = i.get("org.bluez.GattCharacteristic1")
            if c and str(c["Service"]) in spaths and str(c["UUID"]).lower() == full(a.char):
                cpath = p
        if not cpath:
            time.sleep(0.1)
    if not cpath:
        die("central", f"characteristic {a.char} of service {svc} not found")
    chrc = dbus.Interface(bus.get_object(BLUEZ, cpath), "org.bluez.GattCharacteristic1")
    fd_obj, mtu = chrc.AcquireNotify(dbus.Dictionary({}, signature="sv"))
    fd = fd_obj.take()
    print(f"ACQUIRED mtu={int(mtu)}", flush=True)
    if a.ready_file:
        with open(a.ready_file, "w") as f:
            f.write(f"{int(mtu)}\n")

    # Count packets: the fd is non-blocking, one packet per notification.
    sock = socket.socket(fileno=fd)
    sock.setblocking(False)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    received = total = reordered = bad_size = 0
    first_len = 0
    seen = set()
    last_seq = -1
    t_first = t_last = None
    end = time.monotonic() + a.run_timeout
    closed = False
    while received < a.count and not closed:
        now = time.monotonic()
        if now > end or (t_last is not None and now - t_last > a.idle):
            break
        wait = min(end - now, a.idle if t_last is None else a.idle - (now - t_last))
        if not poller.poll(max(1, int(wait * 1000))):
            continue
        while True:
            try:
                pkt = sock.recv(4096)
            except BlockingIOError:
                break
            except OSError:
                closed = True
                break
            if not pkt:
                closed = True
                break
            t = time.monotonic()
            if t_first is None:
                t_first, first_len = t, len(pkt)
            t_last = t
            received += 1
            total += len(pkt)
            if len(pkt) != a.size:
                bad_size += 1
            if len(pkt) >= 4:
                seq = struct.unpack(">I", pkt[:4])[0]
                if seq < last_seq:
                    reordered += 1
                last_seq = seq
                seen.add(seq)
    dt = (t_last - t_first) if t_first is not None else 0.0
    rate = (received - 1) / dt if dt > 0 else 0.0
    bps = (total - first_len) / dt if dt > 0 else 0.0
    lost = max(0, a.count - len(seen))
    print(f"RESULT received={received} bytes={total} seconds={dt:.3f} rate={rate:.1f} bytes_per_s={bps:.0f} "
          f"lost={lost} reordered={reordered} bad_size={bad_size}", flush=True)
    sock.close()
    try:
        dev.Disconnect()
        adapter.RemoveDevice(dpath)
    except dbus.exceptions.DBusException:
        pass
    if received < 2 or dt <= 0:
        die("central", f"only {received} notification(s) arrived: nothing to measure")


# ---- the baseline peripherals ----------------------------------------------------------------
def peripheral(a):
    import threading

    import dbus
    import dbus.mainloop.glib
    import dbus.service
    from gi.repository import GLib

    BLUEZ = "org.bluez"
    OM_IFACE, PROP_IFACE = "org.freedesktop.DBus.ObjectManager", "org.freedesktop.DBus.Properties"
    SVC_IFACE, CHRC_IFACE, AD_IFACE = "org.bluez.GattService1", "org.bluez.GattCharacteristic1", "org.bluez.LEAdvertisement1"

    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.SystemBus()
    loop = GLib.MainLoop()
    apath = f"/org/bluez/{a.adapter}"
    state = {"started": False, "sent": 0}

    class Application(dbus.service.Object):
        def __init__(self):
            self.path = "/bench"
            self.objects = []
            dbus.service.Object.__init__(self, bus, self.path)

        @dbus.service.method(OM_IFACE, out_signature="a{oa{sa{sv}}}")
        def GetManagedObjects(self):
            return {o.path: o.props() for o in self.objects}

    class Service(dbus.service.Object):
        def __init__(self):
            self.path = "/bench/service0"
            dbus.service.Object.__init__(self, bus, self.path)

        def props(self):
            return {SVC_IFACE: {"UUID": a.service, "Primary": True,
                                "Characteristics": dbus.Array([Chrc.PATH], signature="o")}}

    class Chrc(dbus.service.Object):
        PATH = "/bench/service0/char0"

        def __init__(self):
            self.path = self.PATH
            self.notifying = False
            self.value = dbus.Array([], signature="y")
            self.io = None
            dbus.service.Object.__init__(self, bus, self.path)

        def props(self):
            p = {"UUID": a.char, "Service": dbus.ObjectPath("/bench/service0"),
                 "Flags": dbus.Array(["notify"], signature="s"), "Value": self.value}
            if a.mode == "fd":
                p["NotifyAcquired"] = dbus.Boolean(self.io is not None)
            return {CHRC_IFACE: p}

        @dbus.service.method(PROP_IFACE, in_signature="ss", out_signature="v")
        def Get(self, iface, name):
            return self.props()[CHRC_IFACE][name]

        @dbus.service.method(PROP_IFACE, in_signature="s", out_signature="a{sv}")
        def GetAll(self, iface):
            return self.props()[CHRC_IFACE]

        @dbus.service.signal(PROP_IFACE, signature="sa{sv}as")
        def PropertiesChanged(self, interface, changed, invalidated):
            pass

        @dbus.service.method(CHRC_IFACE, in_signature="a{sv}", out_signature="ay")
        def ReadValue(self, options):
            return self.value

        @dbus.service.method(CHRC_IFACE)
        def StartNotify(self):
            if self.notifying:
                return
            self.notifying = True
            print("SUBSCRIBED via=StartNotify", flush=True)
            GLib.timeout_add(20, wait_go)

        @dbus.service.method(CHRC_IFACE)
        def StopNotify(self):
            self.notifying = False
            print("UNSUBSCRIBED", flush=True)

        if a.mode == "fd":
            @dbus.service.method(CHRC_IFACE, in_signature="a{sv}", out_signature="hq")
            def AcquireNotify(self, options):
                mtu = int(options.get("mtu", 23))
                ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                self.io = ours
                print(f"SUBSCRIBED via=AcquireNotify mtu={mtu}", flush=True)
                GLib.timeout_add(20, wait_go)
                fd = dbus.types.UnixFd(theirs.fileno())   # dbus-python dups it
                theirs.close()
                return fd, dbus.UInt16(mtu)

    class Advertisement(dbus.service.Object):
        PATH = "/bench/advertisement0"

        def __init__(self):
            self.path = self.PATH
            dbus.service.Object.__init__(self, bus, self.path)

        @dbus.service.method(PROP_IFACE, in_signature="s", out_signature="a{sv}")
        def GetAll(self, iface):
            return {"Type": "peripheral", "ServiceUUIDs": dbus.Array([a.service], signature="s"),
                    "LocalName": dbus.String(a.name)}

        @dbus.service.method(AD_IFACE)
        def Release(self):
            pass

    app = Application()
    chrc = Chrc()
    app.objects = [Service(), chrc]
    values = [payload(i, a.size) for i in range(a.count)]
    if a.mode == "dbus":
        values = [dbus.Array(v, signature="y") for v in values]

    def send_dbus():
        # The bluezero/example-gatt-server way: a PropertiesChanged signal per value, from
        # the main loop (a slice per idle call, so the loop keeps serving D-Bus).
        i = state["sent"]
        stop = min(a.count, i + 50)
        while i < stop and chrc.notifying:
            chrc.value = values[i]
            chrc.PropertiesChanged(CHRC_IFACE, {"Value": chrc.value}, [])
            i += 1
        state["sent"] = i
        if i >= a.count or not chrc.notifying:
            print(f"SENT n={i} seconds={time.monotonic() - state['t0']:.3f}", flush=True)
            return False
        return True

    def send_fd():
        io = chrc.io
        io.setblocking(True)
        i = 0
        try:
            for v in values:
                io.send(v)
                i += 1
        except OSError as e:
            print(f"peripheral: send failed after {i}: {e}", file=sys.stderr, flush=True)
        print(f"SENT n={i} seconds={time.monotonic() - state['t0']:.3f}", flush=True)

    def wait_go():
        if state["started"]:
            return False
        if not os.path.exists(a.go_file):
            return True
        state["started"] = True
        state["t0"] = time.monotonic()
        if a.mode == "fd":
            threading.Thread(target=send_fd, daemon=True).start()
        else:
            GLib.idle_add(send_dbus)
        return False

    def failed(what):
        def cb(e):
            print(f"peripheral: {what} failed: {e}", file=sys.stderr, flush=True)
            loop.quit()
        return cb

    gatt = dbus.Interface(bus.get_object(BLUEZ, apath), "org.bluez.GattManager1")
    adv = Advertisement()
    ads = dbus.Interface(bus.get_object(BLUEZ, apath), "org.bluez.LEAdvertisingManager1")
    gatt.RegisterApplication(app.path, {}, reply_handler=lambda: print("REGISTERED", flush=True),
                             error_handler=failed("RegisterApplication"))
    ads.RegisterAdvertisement(adv.path, {}, reply_handler=lambda: print("ADVERTISING", flush=True),
                              error_handler=failed("RegisterAdvertisement"))
    loop.run()
    sys.exit(1)


# ---- ours: the control client -------------------------------------------------------------------
def stream_client(a):
    """--stream: values written to the packet socket peerlinkd passes with its reply."""
    values = [payload(i, a.size) for i in range(a.count)]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(a.socket)
    s.settimeout(a.timeout)
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"gatt.notify-stream","params":{"uuid":"%s"}}\n' % a.char.encode())
    buf, fds = b"", []
    while b"\n" not in buf:
        data, got, _, _ = socket.recv_fds(s, 65536, 4)
        if not data:
            die("client", "the daemon closed the connection")
        buf += data
        fds += got
    reply, buf = buf.split(b"\n", 1)
    if b'"error"' in reply or not fds:
        die("client", f"gatt.notify-stream refused: {reply.decode(errors='replace')[:400]}")
    ss = socket.socket(fileno=fds[0])

    def rss():
        try:
            with open(f"/proc/{a.pid}/status") as f:
                return int(next(l for l in f if l.startswith("VmRSS:")).split()[1])
        except (OSError, StopIteration, ValueError):
            return 0
    rss_max = rss() if a.pid else 0
    cpu0 = os.times()
    t0 = t_sample = time.monotonic()
    sent = 0
    try:
        for v in values:
            ss.send(v)
            sent += 1
            if a.pid and sent % 64 == 0 and time.monotonic() - t_sample >= 0.1:
                t_sample = time.monotonic()
                rss_max = max(rss_max, rss())
    except OSError as e:
        print(f"client: stream send failed after {sent}: {e}", file=sys.stderr, flush=True)
    ss.close()
    dt = time.monotonic() - t0
    # The daemon reports the end of the stream with its counts.
    ended = None
    while ended is None:
        while b"\n" not in buf:
            data = s.recv(65536)
            if not data:
                die("client", "the daemon closed the connection before gatt.stream.ended")
            buf += data
        line, buf = buf.split(b"\n", 1)
        m = json.loads(line)
        if m.get("method") == "event" and m["params"]["topic"] == "gatt.stream.ended":
            ended = m["params"]["data"]
    cpu = os.times()
    print(f"CLIENT sent={sent} ok={ended['sent']} seconds={dt:.3f} rate={sent / dt if dt > 0 else 0:.1f} "
          f"rss_max_kb={max(rss_max, rss() if a.pid else 0)} hwm_kb=0 client_cpu_s={cpu.user + cpu.system - cpu0.user - cpu0.system:.2f} "
          f"stream_reason={ended['reason']} unsent={ended['unsent']} dropped={ended['dropped']}", flush=True)
    if ended["sent"] != a.count:
        die("client", f"the stream ended ({ended['reason']}: {ended['message']}) with {ended['sent']} of {a.count} sent")


def client(a):
    import base64
    if a.stream:
        return stream_client(a)

    reqs = []
    per = []  # values in each request
    if a.values <= 1:
        for i in range(a.count):
            v = base64.b64encode(payload(i, a.size)).decode()
            reqs.append('{"jsonrpc":"2.0","id":%d,"method":"gatt.notify","params":{"uuid":"%s","value_base64":"%s"}}'
                        % (i + 1, a.char, v))
            per.append(1)
    else:
        # --values V: the array form, V values a request (one notification each, in order).
        for i in range(0, a.count, a.values):
            vs = ",".join('"%s"' % base64.b64encode(payload(j, a.size)).decode() for j in range(i, min(i + a.values, a.count)))
            reqs.append('{"jsonrpc":"2.0","id":%d,"method":"gatt.notify","params":{"uuid":"%s","values_base64":[%s]}}'
                        % (len(reqs) + 1, a.char, vs))
            per.append(min(a.values, a.count - i))
    # --batch 1: one request a line; --batch N: JSON-RPC batches (arrays) of N requests a line.
    # sizes: values a line carries (the window counts values in flight).
    if a.batch <= 1:
        lines = [(r + "\n").encode() for r in reqs]
        sizes = per
    else:
        lines = [("[" + ",".join(reqs[i:i + a.batch]) + "]\n").encode() for i in range(0, len(reqs), a.batch)]
        sizes = [sum(per[i:i + a.batch]) for i in range(0, len(reqs), a.batch)]
    size_of = {}  # request id -> values
    for n, k in enumerate(per):
        size_of[n + 1] = k

    def rss():
        if not a.pid:
            return 0, 0
        try:
            with open(f"/proc/{a.pid}/status") as f:
                m = dict(l.split(":", 1) for l in f if ":" in l)
            return int(m["VmRSS"].split()[0]), int(m["VmHWM"].split()[0])
        except (OSError, KeyError, ValueError):
            return 0, 0

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(a.socket)
    s.settimeout(a.timeout)
    rss_max, _ = rss()
    t_sample = 0.0
    sent = ok = nline = 0
    error = None
    buf = b""
    t0 = time.monotonic()
    try:
        while ok < a.count and error is None:
            while nline < len(lines) and (sent - ok < a.window if a.values <= 1 else sent - ok + sizes[nline] <= max(a.window, sizes[nline])):
                s.sendall(lines[nline])
                sent += sizes[nline]
                nline += 1
            data = s.recv(262144)
            if not data:
                error = "the daemon closed the connection"
                break
            buf += data
            *replies, buf = buf.split(b"\n")
            for r in replies:
                if not r.strip():
                    continue
                if b'"error"' in r:
                    error = r.decode(errors="replace")[:400]
                    break
                if a.values > 1:
                    # every reply of the array form: count the values its request carried
                    for rid in re.findall(rb'"id":(\d+)', r):
                        ok += size_of.get(int(rid), 0)
                else:
                    ok += r.count(b'"result"') if a.batch > 1 else 1
            now = time.monotonic()
            if now - t_sample >= 0.1:
                t_sample = now
                rss_max = max(rss_max, rss()[0])
    except (OSError, socket.timeout) as e:
        error = f"{type(e).__name__}: {e}"
    dt = time.monotonic() - t0
    cur, hwm = rss()
    rss_max = max(rss_max, cur)
    cpu = os.times()
    print(f"CLIENT sent={sent} ok={ok} seconds={dt:.3f} rate={ok / dt if dt > 0 else 0:.1f} "
          f"rss_max_kb={rss_max} hwm_kb={hwm} client_cpu_s={cpu.user + cpu.system:.2f}", flush=True)
    if error:
        die("client", f"gatt.notify refused after {ok} ok: {error}")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("central")
    c.add_argument("--adapter", required=True)
    c.add_argument("--service", required=True)
    c.add_argument("--char", required=True)
    c.add_argument("--count", type=int, required=True)
    c.add_argument("--size", type=int, required=True)
    c.add_argument("--ready-file")
    c.add_argument("--find-timeout", type=float, default=60)
    c.add_argument("--run-timeout", type=float, default=40)
    c.add_argument("--idle", type=float, default=5)
    p = sub.add_parser("peripheral")
    p.add_argument("--adapter", required=True)
    p.add_argument("--mode", choices=["dbus", "fd"], required=True)
    p.add_argument("--service", required=True)
    p.add_argument("--char", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--go-file", required=True)
    p.add_argument("--name", default="plbench")
    k = sub.add_parser("client")
    k.add_argument("--socket", required=True)
    k.add_argument("--char", required=True)
    k.add_argument("--count", type=int, required=True)
    k.add_argument("--size", type=int, required=True)
    k.add_argument("--window", type=int, default=64)
    k.add_argument("--batch", type=int, default=1)
    k.add_argument("--values", type=int, default=1)
    k.add_argument("--pid", type=int, default=0)
    k.add_argument("--timeout", type=float, default=30)
    k.add_argument("--stream", action="store_true")
    a = ap.parse_args()
    {"central": central, "peripheral": peripheral, "client": client}[a.cmd](a)


main()
