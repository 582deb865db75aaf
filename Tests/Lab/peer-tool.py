#!/usr/bin/python3
"""Independent tools for the peer-session lab scenarios (6x-peer-*) and the bench: no PeerLink
code, only the Python standard library and docs/peer-protocol.md.

    peer-tool.py events --out-dir DIR NAME=SOCKET...  for each daemon (waiting until it answers):
        subscribe to topic "peer", print READY NAME <peer hex> <port>, then append each event
        (JSON, one a line) to DIR/ev-NAME.log
    peer-tool.py hello-relay --listen H:P --to H:P [--encryption E] CLAIM...
        For each client accepted on --listen in turn (an `openssl s_client`), with the next
        CLAIM (cert:FILE, the SHA-256 of that certificate's DER, or 64 hex digits): dials the
        daemon (--to) as a protocol "dialer", sends HELLO claiming that peer ID, reads the
        daemon's HELLO and prints it (DAEMON-HELLO N ...), then splices client and daemon, so
        the client's TLS handshake meets the daemon's (the daemon, as the listener, is the TLS
        server). Prints END N with the byte counts.
    peer-tool.py record-relay --listen H:P --to H:P --out PREFIX
        Forwards every connection accepted on --listen to --to and appends what each side
        sent to PREFIX.c2s / PREFIX.s2c (no parsing: the capture a tap would give).
    peer-tool.py probe --to H:P (--text T | --hex H | --random N) [--seed S] [--timeout S]
        Sends those bytes, reads until the daemon closes, prints the frames it sent (FRAME
        lines, CLOSE reason=N text=...) and CLOSED-AFTER seconds; exit 1 if it never closes.
    peer-tool.py slow --to H:P [--interval S] [--timeout S]
        Sends a valid HELLO one byte every --interval seconds; prints when the daemon closes.
    peer-tool.py flood --to H:P --count N [--timeout S] [--release-file F]
        Opens N connections at once (sending nothing), prints OPEN n, then waits until the
        daemon has closed each: CLOSED-BY-DAEMON k/n after s seconds (exit 1 if not all).
        With --release-file: holds them until F exists, then closes them all (RELEASED).
    peer-tool.py simultaneous --a SOCK --a-addr H:P --a-id HEX --b SOCK --b-addr H:P --b-id HEX
        Writes peer.connect a->b and b->a on two open control connections back to back;
        prints each reply (REPLY a {...} / REPLY b {...}).
    peer-tool.py stuffed --socket S --to HEX --size N --seconds T --pid PID [--window W]
        Sends reliable messages through the daemon (peer.send, W requests in flight) to a
        peer that does not read, for T seconds; samples the daemon's VmRSS every 0.1 s and
        prints RSS max_kb=... sent=... replied=...
    peer-tool.py throughput --send SOCK --recv SOCK --to HEX --size N --count C [--window W]
        Sends C reliable messages of N bytes through daemon SOCK (peer.send, W requests in
        flight) to peer HEX, whose daemon RECV's events are counted: THROUGHPUT rate=msg/s
        bytes_per_s=... from the first send to the last message received.
    peer-tool.py stream-throughput --send SOCK --recv SOCK --to HEX --from-id HEX --size N --count C
        The same through data streams (peer.message-stream on both daemons, one packet a
        message, each numbered and checked in order; written with sendmmsg and read with
        recvmmsg, up to 64 a call): THROUGHPUT rate=... bytes_per_s=...
    peer-tool.py stream-rtt --a SOCK --b SOCK --a-id HEX --b-id HEX --count N [--size 64] [--while-pid PID]
        The round trips of rtt through data streams: RTT p50_ms=... p99_ms=...; with
        --while-pid, they stop early once process PID has ended (a zombie counts as ended),
        so every one measured ran while that process (a transfer) did.
    peer-tool.py rtt --a SOCK --b SOCK --a-id HEX --b-id HEX --count N [--size 64]
        N round trips: a client sends a message through a to b, b's client (on b's event)
        sends it back through b to a, until a's client has it: RTT p50_ms=... p99_ms=...
    peer-tool.py tls-echo-rtt --to H:P --cert C --key K --count N [--size 64]
        The same round trips against a TLS echo server (socat): RTT p50_ms=... p99_ms=...
    peer-tool.py stall --to H:P --size N --send M --name NAME --content-out FILE [--timeout S]
        A peer in plain text (HELLO with encryption none, INVITE, PINGs answered) that offers
        NAME (N random bytes, also written to FILE), sends the first M once accepted, then
        nothing: prints CANCEL reason=... after_s=... when the daemon gives up on it. Then it
        offers the same content again (RESUMED offset=...), sends the rest and RESOURCE_DONE,
        and prints DONE once the daemon verified it. Exit 1 when a step does not come within
        --timeout seconds (default 30).
    peer-tool.py relay-rtt --a PATH --b PATH --count N [--size 64]
        The round trips of stream-rtt between two Unix stream sockets that something else
        relays (two socat, with TLS between them, in place of the two daemons): connects to
        A, then to B once it exists, and times A -> B -> A: RTT p50_ms=... p99_ms=...
    peer-tool.py unreliable-latency --send SOCK --recv SOCK --to HEX --while-pid PID [--interval-ms 2] [--size 64]
        While process PID runs (a bulk transfer on the same session), sends an unreliable
        message (peer.send, reliable false) through daemon SOCK to peer HEX every interval;
        daemon RECV's client times each peer.message from its send: UNRELIABLE sent=...
        received=... dropped=... drop_rate=... p50_ms=... p99_ms=... (a second after PID ends
        for the last ones to land; each message carries its number, so none counts twice).
"""
# Only light modules at the top: under the lab's emulator every import is read over 9p, and
# the event recorder must be up quickly. The rest are imported where used.
import argparse
import json
import os
import socket
import struct
import sys
import threading
import time

FRAME_NAMES = {1: "HELLO", 2: "INVITE", 3: "INVITE_REPLY", 4: "PING", 5: "PONG", 6: "CLOSE", 7: "CREDIT",
               0x10: "MESSAGE", 0x11: "UNRELIABLE"}
REASONS = ["normal", "declined", "timeout", "full", "busy", "duplicate", "encryption-mismatch",
           "version-mismatch", "protocol-error", "flow-control", "lost", "identity-mismatch", "tls-failed",
           "self-connection", "transport-closed", "message-too-large", "shutting-down", "cancelled", "replaced"]
ENCRYPTION = {"none": 0, "optional": 1, "required": 2}


_out_lock = threading.Lock()


def say(line):
    """One whole line to stdout at once (threads print too)."""
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def die(msg):
    say(f"ERROR {msg}")
    sys.exit(1)


def hostport(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


# ---- the wire (docs/peer-protocol.md, sections 2 and 3) ------------------------------------
def frame(ftype, payload, stream=0, flags=0):
    return struct.pack(">BBHII", 1, ftype, flags, stream, len(payload)) + payload


def hello(peer_id, name="lab-tool", encryption=2, role=0):
    n = name.encode()
    return frame(1, struct.pack(">BH", 1, 1) + peer_id + struct.pack(">H", len(n)) + n + bytes([encryption, role]))


def parse_hello(p):
    count = p[0]
    versions = list(struct.unpack(f">{count}H", p[1:1 + 2 * count]))
    o = 1 + 2 * count
    pid = p[o:o + 32]
    o += 32
    (nl,) = struct.unpack(">H", p[o:o + 2])
    name = p[o + 2:o + 2 + nl].decode()
    o += 2 + nl
    return {"versions": versions, "id": pid.hex(), "name": name, "encryption": p[o], "role": p[o + 1]}


def describe(ftype, payload):
    name = FRAME_NAMES.get(ftype, f"type-{ftype:#x}")
    if ftype == 1:
        return f"HELLO {json.dumps(parse_hello(payload))}"
    if ftype == 6 and len(payload) >= 4:
        (reason,) = struct.unpack(">H", payload[:2])
        (tl,) = struct.unpack(">H", payload[2:4])
        rname = REASONS[reason] if reason < len(REASONS) else f"reason-{reason}"
        return f"CLOSE reason={rname} text={payload[4:4 + tl].decode(errors='replace')!r}"
    return f"{name} len={len(payload)}"


def split_frames(buf):
    """Whole plain frames at the start of buf: ([(type, payload)], rest)."""
    out = []
    while len(buf) >= 12 and buf[0] == 1:
        _, ftype, _, _, length = struct.unpack(">BBHII", buf[:12])
        if len(buf) < 12 + length:
            break
        out.append((ftype, buf[12:12 + length]))
        buf = buf[12 + length:]
    return out, buf


def recv_exact(s, n, deadline):
    b = b""
    while len(b) < n:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = s.recv(n - len(b))
        if not chunk:
            raise EOFError(f"closed after {len(b)} of {n} bytes")
        b += chunk
    return b


def cert_id(path):
    import hashlib, subprocess
    der = subprocess.run(["openssl", "x509", "-in", path, "-outform", "DER"], check=True, capture_output=True).stdout
    return hashlib.sha256(der).digest()


# ---- control socket (JSON-RPC 2.0 lines) ------------------------------------------------
class Control:
    def __init__(self, path, timeout=30):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.s.settimeout(timeout)
        self.buf = b""
        self.next_id = 0

    def write(self, method, params=None):
        self.next_id += 1
        req = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            req["params"] = params
        self.s.sendall((json.dumps(req, separators=(",", ":")) + "\n").encode())
        return self.next_id

    def read(self):
        while b"\n" not in self.buf:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise EOFError("the daemon closed the control connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def call(self, method, params=None):
        rid = self.write(method, params)
        while True:
            m = self.read()
            if m.get("id") == rid:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]


def cmd_events(a):
    """One recorder for several daemons: NAME=SOCKET each. Waits (up to --wait s) until each
    daemon answers, subscribes to its peer events, reads its identity and prints READY NAME
    <peer hex> <port>; then appends each event as a JSON line to OUT_DIR/ev-NAME.log."""
    def record(name, path):
        deadline = time.monotonic() + a.wait
        while True:
            try:
                c = Control(path, timeout=10)
                c.call("events.subscribe", {"topics": ["peer"]})
                ident = c.call("peer.identity")
                break
            except (OSError, EOFError, RuntimeError, socket.timeout) as e:
                if time.monotonic() > deadline:
                    say(f"NOT-READY {name}: {e}")
                    return
                time.sleep(0.1)
        c.s.settimeout(None)
        with open(os.path.join(a.out_dir, f"ev-{name}.log"), "a") as out:
            out.write("SUBSCRIBED\n")
            out.flush()
            say(f"READY {name} {ident['peer']} {ident['port']}")
            try:
                while True:
                    m = c.read()
                    if m.get("method") == "event":
                        out.write(json.dumps(m["params"], separators=(",", ":")) + "\n")
                        out.flush()
            except (OSError, EOFError) as e:
                say(f"GONE {name}: {e}")
    threads = []
    for spec in a.daemons:
        name, _, path = spec.partition("=")
        t = threading.Thread(target=record, args=(name, path), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()


# ---- relays --------------------------------------------------------------------------------
def pump(src, dst, counter, key, record=None):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if record is not None:
                record.write(data)
                record.flush()
            counter[key] += len(data)
            dst.sendall(data)
    except OSError:
        pass
    for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
        try:
            s.shutdown(how)
        except OSError:
            pass


def listener(text):
    host, port = hostport(text)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(64)
    return ls


def cmd_hello_relay(a):
    """One client after another on --listen; the Nth is relayed with the Nth claim."""
    claims = [cert_id(c[5:]) if c.startswith("cert:") else bytes.fromhex(c) for c in a.claims]
    ls = listener(a.listen)
    say(f"LISTENING {a.listen}")
    for n, claim in enumerate(claims, 1):
        client, _ = ls.accept()
        relay_one(n, client, claim, a)


def relay_one(n, client, claim, a):
    daemon = socket.create_connection(hostport(a.to), timeout=10)
    deadline = time.monotonic() + 10
    daemon.sendall(hello(claim, name="lab-relay", encryption=ENCRYPTION[a.encryption], role=0))
    head = recv_exact(daemon, 12, deadline)
    _, ftype, _, _, length = struct.unpack(">BBHII", head)
    payload = recv_exact(daemon, length, deadline)
    if ftype != 1:
        die(f"the daemon's first frame is not HELLO: {describe(ftype, payload)}")
    say(f"DAEMON-HELLO {n} claimed {claim.hex()} {json.dumps(parse_hello(payload))}")
    daemon.settimeout(None)
    counter = {"c2d": 0, "d2c": 0}
    first = {}

    def d2c():
        # The daemon's first bytes after HELLO tell TLS (0x16) from a plain CLOSE (0x01).
        try:
            data = daemon.recv(65536)
        except OSError:
            data = b""
        if data:
            first["byte"] = data[0]
            counter["d2c"] += len(data)
            try:
                client.sendall(data)
            except OSError:
                pass
            pump(daemon, client, counter, "d2c")
        else:
            for s, how in ((client, socket.SHUT_WR), (daemon, socket.SHUT_RD)):
                try:
                    s.shutdown(how)
                except OSError:
                    pass

    t1 = threading.Thread(target=pump, args=(client, daemon, counter, "c2d"))
    t2 = threading.Thread(target=d2c)
    t1.start(); t2.start(); t1.join(); t2.join()
    client.close(); daemon.close()
    fb = first.get("byte")
    say(f"END {n} client->daemon={counter['c2d']} daemon->client={counter['d2c']} "
          f"first-byte-after-hello={'none' if fb is None else hex(fb)}")


def cmd_record_relay(a):
    ls = listener(a.listen)
    say(f"LISTENING {a.listen}")
    lock = threading.Lock()
    c2s = open(a.out + ".c2s", "ab")
    s2c = open(a.out + ".s2c", "ab")
    n = 0
    while True:
        client, peer = ls.accept()
        n += 1
        server = socket.create_connection(hostport(a.to), timeout=10)
        server.settimeout(None)
        say(f"CONN {n} from {peer[0]}:{peer[1]}")
        counter = {"c2s": 0, "s2c": 0}

        class Locked:
            def __init__(self, f):
                self.f = f
            def write(self, d):
                with lock:
                    self.f.write(d)
            def flush(self):
                with lock:
                    self.f.flush()

        def run(n=n, client=client, server=server, counter=counter):
            t = threading.Thread(target=pump, args=(server, client, counter, "s2c", Locked(s2c)))
            t.start()
            pump(client, server, counter, "c2s", Locked(c2s))
            t.join()
            say(f"END {n} c2s={counter['c2s']} s2c={counter['s2c']}")
        threading.Thread(target=run, daemon=True).start()


# ---- bad input ------------------------------------------------------------------------------
def read_until_closed(s, deadline):
    """Everything the daemon sends until it closes: (bytes, closed, error)."""
    got = b""
    while time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return got, True, "reset"
        if not chunk:
            return got, True, "eof"
        got += chunk
    return got, False, "still open"


def print_frames(got):
    frames, rest = split_frames(got)
    for ftype, payload in frames:
        say(f"FRAME {describe(ftype, payload)}")
    if rest:
        say(f"BYTES {len(rest)} more, first {rest[:8].hex()}")


def cmd_probe(a):
    if a.text is not None:
        data = a.text.encode().decode("unicode_escape").encode("latin-1")
    elif a.hex is not None:
        data = bytes.fromhex(a.hex)
    else:
        import random
        data = random.Random(a.seed).randbytes(a.random)
    s = socket.create_connection(hostport(a.to), timeout=10)
    t0 = time.monotonic()
    s.sendall(data)
    say(f"SENT {len(data)} bytes, first {data[:8].hex()}")
    got, closed, how = read_until_closed(s, t0 + a.timeout)
    print_frames(got)
    if not closed:
        die(f"the daemon did not close the connection within {a.timeout} s")
    say(f"CLOSED-AFTER {time.monotonic() - t0:.2f} ({how})")


def cmd_slow(a):
    import select
    data = hello(os.urandom(32), name="slow-client")
    s = socket.create_connection(hostport(a.to), timeout=10)
    t0 = time.monotonic()
    say("CONNECTED")
    got = b""
    sent = 0
    while time.monotonic() - t0 < a.timeout:
        if sent < len(data):
            try:
                s.sendall(data[sent:sent + 1])
                sent += 1
            except OSError as e:
                say(f"SEND-FAILED after {sent} bytes: {e}")
                break
        r, _, _ = select.select([s], [], [], a.interval)
        if r:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                print_frames(got)
                say(f"CLOSED-AFTER {time.monotonic() - t0:.2f} sent={sent} at-ms={int(time.time() * 1000)}")
                return
            got += chunk
    print_frames(got)
    die(f"still open after {a.timeout} s (sent {sent} bytes)")


def raise_nofile():
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def cmd_flood(a):
    import select
    raise_nofile()
    host, port = hostport(a.to)
    t0 = time.monotonic()
    socks = []
    pending = []
    for _ in range(a.count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        err = s.connect_ex((host, port))
        socks.append(s)
        if err not in (0, 115):  # EINPROGRESS
            die(f"connect failed at once: errno {err}")
    say(f"OPEN {len(socks)} in {time.monotonic() - t0:.2f} s")
    if a.release_file:
        # Hold every connection until the scenario says so, then close them all from here.
        deadline = t0 + a.timeout
        while not os.path.exists(a.release_file):
            if time.monotonic() > deadline:
                die(f"no {a.release_file} within {a.timeout} s")
            time.sleep(0.1)
        for s in socks:
            s.close()
        say(f"RELEASED {len(socks)} after {time.monotonic() - t0:.2f} s")
        return
    ep = select.epoll()
    by_fd = {s.fileno(): s for s in socks}
    for fd in by_fd:
        ep.register(fd, select.EPOLLIN | select.EPOLLRDHUP)
    closed = set()
    refused = 0
    last_close = 0.0
    first_close = None
    deadline = t0 + a.timeout
    while len(closed) < len(socks) and time.monotonic() < deadline:
        for fd, ev in ep.poll(0.5):
            if fd in closed:
                continue
            s = by_fd[fd]
            try:
                data = s.recv(65536)
            except BlockingIOError:
                continue
            except ConnectionRefusedError:
                refused += 1
                data = b""
            except OSError:
                data = b""
            if not data:
                closed.add(fd)
                ep.unregister(fd)
                last_close = time.time()
                if first_close is None:
                    first_close = time.monotonic() - t0
    dt = time.monotonic() - t0
    say(f"CLOSED-BY-DAEMON {len(closed)}/{len(socks)} after {dt:.2f} s (refused {refused}) last-at-ms={int(last_close * 1000)}")
    say(f"FIRST-CLOSE-AFTER {first_close if first_close is not None else -1:.2f} s")
    for s in socks:
        s.close()
    if len(closed) < len(socks):
        die(f"{len(socks) - len(closed)} connections still open after {a.timeout} s")


# ---- sessions ---------------------------------------------------------------------------------
def cmd_simultaneous(a):
    ca, cb = Control(a.a, timeout=60), Control(a.b, timeout=60)
    ra = ca.write("peer.connect", {"address": a.b_addr, "peer": a.b_id, "timeout": 20})
    rb = cb.write("peer.connect", {"address": a.a_addr, "peer": a.a_id, "timeout": 20})
    for who, c, rid in (("a", ca, ra), ("b", cb, rb)):
        while True:
            m = c.read()
            if m.get("id") == rid:
                say(f"REPLY {who} {json.dumps(m, separators=(',', ':'))}")
                break


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cmd_stuffed(a):
    import base64, select
    c = Control(a.socket, timeout=a.seconds + 30)
    data = base64.b64encode(os.urandom(a.size)).decode()
    line_of = lambda i: (json.dumps({"jsonrpc": "2.0", "id": i, "method": "peer.send",
                                     "params": {"to": [a.to], "data_base64": data}}, separators=(",", ":")) + "\n").encode()
    t0 = time.monotonic()
    sent = replied = errors = 0
    rss_max = rss_kb(a.pid)
    c.s.setblocking(False)
    out = b""
    while time.monotonic() - t0 < a.seconds:
        if not out and sent - replied - errors < a.window:
            sent += 1
            out = line_of(sent)
        want_w = [c.s] if out else []
        r, w, _ = select.select([c.s], want_w, [], 0.1)
        if w:
            try:
                n = c.s.send(out)
                out = out[n:]
            except BlockingIOError:
                pass
        if r:
            chunk = c.s.recv(1 << 20)
            if not chunk:
                die("the daemon closed the control connection")
            c.buf += chunk
            while b"\n" in c.buf:
                line, c.buf = c.buf.split(b"\n", 1)
                m = json.loads(line)
                if "error" in m:
                    errors += 1
                    if errors == 1:
                        say(f"FIRST-ERROR {json.dumps(m)[:300]}")
                elif "result" in m:
                    replied += 1
        rss_max = max(rss_max, rss_kb(a.pid))
    say(f"RSS max_kb={rss_max} now_kb={rss_kb(a.pid)} sent={sent} replied={replied} errors={errors} "
          f"bytes_accepted={replied * a.size}")


def percentile(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def say_throughput(count, nbytes, t0, t_last):
    """A throughput run's result line, from the first send (t0) to the last message in."""
    dt = t_last - t0
    say(f"THROUGHPUT count={count} bytes={nbytes} seconds={dt:.3f} rate={count / dt:.1f} bytes_per_s={nbytes / dt:.0f}")


def say_rtt(times, extra=""):
    """A round-trip run's result line (times in ms)."""
    say(f"RTT count={len(times)} p50_ms={percentile(times, 50):.3f} p99_ms={percentile(times, 99):.3f} "
        f"mean_ms={sum(times) / len(times):.2f}{extra}")


class Events:
    """A control connection subscribed to peer events; messages counted or queued."""
    def __init__(self, path):
        self.c = Control(path, timeout=120)
        self.c.call("events.subscribe", {"topics": ["peer.message"]})

    def next_message(self):
        while True:
            m = self.c.read()
            if m.get("method") == "event" and m["params"].get("topic") == "peer.message":
                return m["params"]["data"]


def cmd_throughput(a):
    import base64, select
    rx = Events(a.recv)
    tx = Control(a.send, timeout=120)
    data = base64.b64encode(os.urandom(a.size)).decode()
    line = lambda i: (json.dumps({"jsonrpc": "2.0", "id": i, "method": "peer.send",
                                  "params": {"to": [a.to], "data_base64": data}}, separators=(",", ":")) + "\n").encode()
    got = {"n": 0, "bytes": 0, "bad": 0, "t_last": 0.0}

    def receive():
        while got["n"] < a.count:
            d = rx.next_message()
            n = len(base64.b64decode(d["data_base64"]))
            got["n"] += 1
            got["bytes"] += n
            got["bad"] += n != a.size
            got["t_last"] = time.monotonic()
    t = threading.Thread(target=receive, daemon=True)
    t.start()
    t0 = time.monotonic()
    sent = replied = 0
    out = b""
    tx.s.setblocking(False)
    while replied < a.count:
        if not out and sent < a.count and sent - replied < a.window:
            sent += 1
            out = line(sent)
        r, w, _ = select.select([tx.s], [tx.s] if out else [], [], 1.0)
        if w:
            try:
                out = out[tx.s.send(out):]
            except BlockingIOError:
                pass
        if r:
            chunk = tx.s.recv(1 << 20)
            if not chunk:
                die("the sending daemon closed the control connection")
            tx.buf += chunk
            while b"\n" in tx.buf:
                ln, tx.buf = tx.buf.split(b"\n", 1)
                m = json.loads(ln)
                if "error" in m:
                    die(f"peer.send refused: {m['error']}")
                replied += 1
        if time.monotonic() - t0 > a.timeout:
            die(f"sending took over {a.timeout} s ({replied} of {a.count} taken)")
    t.join(max(0.0, a.timeout - (time.monotonic() - t0)))
    if got["n"] < a.count:
        die(f"received {got['n']} of {a.count} within {a.timeout} s")
    if got["bad"]:
        die(f"{got['bad']} messages arrived with another size than {a.size}")
    say_throughput(a.count, got["bytes"], t0, got["t_last"])


def open_stream(path, peer):
    """peer.message-stream on the daemon at PATH with PEER: (control socket, which must stay
    open while the stream is used; the packet socket passed with the reply; the reply)."""
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(path)
    c.settimeout(60)
    c.sendall((json.dumps({"jsonrpc": "2.0", "id": 1, "method": "peer.message-stream",
                           "params": {"peer": peer}}) + "\n").encode())
    buf, fds = b"", []
    while b"\n" not in buf:
        data, got, _, _ = socket.recv_fds(c, 1 << 20, 4)
        if not data:
            die(f"{path}: the daemon closed the control connection")
        buf += data
        fds += got
    reply = json.loads(buf.split(b"\n", 1)[0])
    if "error" in reply:
        die(f"{path}: peer.message-stream refused: {reply['error']}")
    if not fds:
        die(f"{path}: no socket with peer.message-stream's reply: {reply}")
    s = socket.socket(fileno=fds[0])
    s.setblocking(True)
    return c, s, reply["result"]


class PacketBatches:
    """sendmmsg(2) and recvmmsg(2) through ctypes (the socket module has neither): up to
    `batch` packets of at most SIZE bytes a call, in one buffer (`data`, packet i at i * SIZE):
    64, or fewer so that the buffer stays within 256 KiB (a larger one leaves the caches
    between two batches, and each copy into it or out of it then comes from memory).
    A client of a data stream written for speed moves its packets so; one send and one recv a
    packet cost this client as much CPU as both daemons together at 1 KiB."""
    MSG_WAITFORONE = 0x10000

    def __init__(self, sock, size):
        import ctypes
        self.ctypes, self.sock, self.size = ctypes, sock, size
        libc = ctypes.CDLL(None, use_errno=True)

        class IOVec(ctypes.Structure):
            _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

        class MsgHdr(ctypes.Structure):
            _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.POINTER(IOVec)),
                        ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                        ("flags", ctypes.c_int)]

        class MMsgHdr(ctypes.Structure):
            _fields_ = [("hdr", MsgHdr), ("len", ctypes.c_uint)]

        self.batch = max(1, min(64, (256 << 10) // size))
        self.data = bytearray(self.batch * size)
        base = ctypes.addressof((ctypes.c_char * len(self.data)).from_buffer(self.data))
        self.iovs = (IOVec * self.batch)()
        self.msgs = (MMsgHdr * self.batch)()
        for i in range(self.batch):
            self.iovs[i].base, self.iovs[i].len = base + i * size, size
            self.msgs[i].hdr.iov = ctypes.pointer(self.iovs[i])
            self.msgs[i].hdr.iovlen = 1
        # Each header's msg_len, for k headers: skip the msghdr, read the int, skip the padding.
        skip, tail = MMsgHdr.len.offset, ctypes.sizeof(MMsgHdr) - MMsgHdr.len.offset - 4
        self.lengths_format = ["=" + f"{skip}xI{tail}x" * k for k in range(self.batch + 1)]
        self.sendmmsg, self.recvmmsg = libc.sendmmsg, libc.recvmmsg
        for f in (self.sendmmsg, self.recvmmsg):
            f.restype = ctypes.c_int

    def _call(self, f, n, flags, *rest):
        while True:
            k = f(self.sock.fileno(), self.msgs, n, flags, *rest)
            if k >= 0:
                return k
            err = self.ctypes.get_errno()
            if err != 4:  # EINTR
                raise OSError(err, os.strerror(err))

    def send(self, n):
        """Sends packets 0..<n, each SIZE bytes (blocking until all went)."""
        while n:
            k = self._call(self.sendmmsg, n, 0)
            if k < n:  # cut short (a signal): the rest moves to the front
                self.data[:(n - k) * self.size] = self.data[k * self.size:n * self.size]
            n -= k

    def recv(self, most):
        """Waits for one packet, then takes what else is there, up to `most`: their lengths
        (read from the headers in one call, `lengths_format`)."""
        k = self._call(self.recvmmsg, min(most, self.batch), self.MSG_WAITFORONE, None)
        return struct.unpack_from(self.lengths_format[k], self.msgs) if k else ()

    def numbered(self, slot):
        """For k packets of `slot` bytes, 0...batch: the struct format of k slots, each an
        8-byte big-endian number and the slot's other bytes."""
        return [f">{'Q%ds' % (slot - 8) * k}" for k in range(self.batch + 1)]


def cmd_stream_throughput(a):
    # The receiver's stream first: messages that arrive before it is open would be events.
    rc, rs, rinfo = open_stream(a.recv, a.from_id)
    tc, ts, tinfo = open_stream(a.send, a.to)
    if a.size > min(rinfo["max_message"], tinfo["max_message"]):
        die(f"{a.size} bytes is more than the streams carry ({rinfo['max_message']}, {tinfo['max_message']})")
    if a.size < 8:
        die(f"--size {a.size}: a message carries its 8-byte number")
    size, body = a.size, os.urandom(a.size)
    got = {"n": 0, "bytes": 0, "bad": 0, "t_last": 0.0}
    # A batch of messages is checked in a few calls, not a Python step a message (which cost
    # this client more CPU than the daemons' work): each packet lands in a slot a byte larger
    # than a message (a longer one shows; the spare byte stays zero otherwise), one call
    # splits the batch into numbers and the slots' rest, and two comparisons check them all.
    stride = size + 1
    rx = PacketBatches(rs, stride)
    rest = body[8:] + b"\0"
    slots = rx.numbered(stride)
    rests = [(rest,) * k for k in range(rx.batch + 1)]

    def receive():
        data = rx.data
        while got["n"] < a.count:
            lengths = rx.recv(a.count - got["n"])
            # The stream's end reads as empty packets (a message is never empty here).
            ended = 0 in lengths or not lengths
            if 0 in lengths:
                lengths = lengths[:lengths.index(0)]
            k = len(lengths)
            if not k:
                break
            n = got["n"]
            fields = struct.unpack_from(slots[k], data)
            nums, tails = fields[0::2], fields[1::2]
            if lengths.count(size) != k or nums != tuple(range(n, n + k)) or tails != rests[k]:
                got["bad"] += sum(lengths[i] != size or nums[i] != n + i or tails[i] != rest for i in range(k))
                # A longer message set its slot's spare byte: zero it for the next batches.
                data[:k * stride] = bytes(k * stride)
            got["bytes"] += sum(lengths)
            got["n"] = n + k
            got["t_last"] = time.monotonic()
            if ended:
                break
    t = threading.Thread(target=receive, daemon=True)
    t.start()
    tx = PacketBatches(ts, size)
    from itertools import chain, repeat
    sent = tx.numbered(size)
    t0 = time.monotonic()
    i = 0
    while i < a.count:
        n = min(tx.batch, a.count - i)
        # Each slot's number and the body's rest, written in one call.
        struct.pack_into(sent[n], tx.data, 0, *chain.from_iterable(zip(range(i, i + n), repeat(body[8:], n))))
        try:
            tx.send(n)
        except OSError as e:
            die(f"writing message {i} into the sending stream: {e}")
        i += n
    t.join(a.timeout)
    if got["n"] < a.count:
        die(f"received {got['n']} of {a.count} within {a.timeout} s")
    if got["bad"]:
        die(f"{got['bad']} messages arrived changed, resized or out of order")
    say_throughput(a.count, got["bytes"], t0, got["t_last"])


def cmd_stream_rtt(a):
    ac, as_, _ = open_stream(a.a, a.b_id)
    bc, bs, _ = open_stream(a.b, a.a_id)
    times = []
    for i in range(a.count + 5):
        if a.while_pid and not process_running(a.while_pid):
            break
        payload = (b"%08d" % i) + os.urandom(a.size - 8)
        t0 = time.monotonic()
        as_.send(payload)
        m = bs.recv(65536)
        if m != payload:
            die(f"b got another message than sent at round {i}")
        bs.send(m)
        m = as_.recv(65536)
        if m != payload:
            die(f"a got another message than sent at round {i}")
        if i >= 5:  # the first few warm up
            times.append((time.monotonic() - t0) * 1000)
    if not times:
        die(f"process {a.while_pid} ended before a round trip past the warm-up")
    say_rtt(times)


def process_running(pid):
    """Whether process PID exists and has not ended (a zombie, not yet reaped, has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cmd_rtt(a):
    import base64
    ea, eb = Events(a.a), Events(a.b)
    ca, cb = Control(a.a, timeout=60), Control(a.b, timeout=60)
    times = []
    for i in range(a.count + 5):
        payload = (b"%08d" % i) + os.urandom(a.size - 8)
        b64 = base64.b64encode(payload).decode()
        t0 = time.monotonic()
        ca.call("peer.send", {"to": [a.b_id], "data_base64": b64})
        d = eb.next_message()
        if d["data_base64"] != b64:
            die(f"b got another message than sent at round {i}")
        cb.call("peer.send", {"to": [a.a_id], "data_base64": d["data_base64"]})
        d = ea.next_message()
        if d["data_base64"] != b64:
            die(f"a got another message than sent at round {i}")
        if i >= 5:  # the first few warm up
            times.append((time.monotonic() - t0) * 1000)
    say_rtt(times)


class PlainSession:
    """A session from this side as dialer, in plain text: HELLO (encryption none), the
    daemon's HELLO, INVITE 1 and its accepted INVITE_REPLY; then frames both ways, with every
    PING answered (so the daemon never finds this peer lost)."""
    def __init__(self, to, name, timeout):
        self.s = socket.create_connection(hostport(to), timeout=10)
        self.buf = b""
        self.timeout = timeout
        self.s.sendall(hello(os.urandom(32), name=name, encryption=ENCRYPTION["none"], role=0))
        self.next(lambda t, sid, p: t == 1, "the daemon's HELLO")
        self.send(2, struct.pack(">II", 1, 0) + struct.pack(">I", 30000))
        _, _, p = self.next(lambda t, sid, p: t == 3, "INVITE_REPLY")
        if struct.unpack(">IH", p[:6])[1] != 0:
            die(f"the invitation was declined: {REASONS[struct.unpack('>IH', p[:6])[1]]}")

    def send(self, ftype, payload, stream=0):
        self.s.sendall(frame(ftype, payload, stream))

    def next(self, want, what):
        """The next frame (type, stream, payload) that `want` takes; others are skipped."""
        deadline = time.monotonic() + self.timeout
        while True:
            while len(self.buf) >= 12:
                _, ftype, _, sid, length = struct.unpack(">BBHII", self.buf[:12])
                if len(self.buf) < 12 + length:
                    break
                payload, self.buf = self.buf[12:12 + length], self.buf[12 + length:]
                if ftype == 4:
                    self.send(5, payload)
                elif ftype == 6:
                    die(f"the daemon closed the session waiting for {what}: {describe(ftype, payload)}")
                elif want(ftype, sid, payload):
                    return ftype, sid, payload
            left = deadline - time.monotonic()
            if left <= 0:
                die(f"no {what} within {self.timeout} s")
            self.s.settimeout(left)
            try:
                chunk = self.s.recv(1 << 20)
            except socket.timeout:
                continue
            if not chunk:
                die(f"the daemon closed the connection waiting for {what}")
            self.buf += chunk


def cmd_stall(a):
    import hashlib
    content = os.urandom(a.size)
    with open(a.content_out, "wb") as f:
        f.write(content)
    r = PlainSession(a.to, "lab-stall", a.timeout)
    say("CONNECTED")

    def offer(rid):
        name, media = a.name.encode(), b"application/octet-stream"
        r.send(0x20, struct.pack(">H", len(name)) + name + struct.pack(">Q", a.size) + hashlib.sha256(content).digest()
               + struct.pack(">H", len(media)) + media, stream=rid)
        t, _, p = r.next(lambda t, sid, p: sid == rid and t in (0x21, 0x22, 0x25), f"an answer to offer {rid}")
        if t != 0x21:
            die(f"offer {rid} was not accepted: {describe(t, p)} reason={REASONS[struct.unpack('>H', p[:2])[0]]}")
        return struct.unpack(">Q", p)[0]

    def data(rid, start, end):
        for o in range(start, end, 50000):
            r.send(0x23, content[o:min(o + 50000, end)], stream=rid)

    data(1, offer(1), a.send)
    t0 = time.monotonic()
    say(f"SENT {a.send} of {a.size}, then nothing")
    _, _, p = r.next(lambda t, sid, p: sid == 1 and t == 0x25, "RESOURCE_CANCEL")
    say(f"CANCEL reason={REASONS[struct.unpack('>H', p[:2])[0]]} after_s={time.monotonic() - t0:.2f}")
    offset = offer(3)
    say(f"RESUMED offset={offset}")
    data(3, offset, a.size)
    r.send(0x24, b"", stream=3)
    t, _, p = r.next(lambda t, sid, p: sid == 3 and t in (0x24, 0x25), "the daemon's RESOURCE_DONE")
    if t != 0x24:
        die(f"the resumed resource was cancelled: reason={REASONS[struct.unpack('>H', p[:2])[0]]}")
    say("DONE")


def recv_all(s, n):
    """n bytes from blocking socket s: not recv_exact, whose timeout (a poll before each
    recv) would add to the baseline's round trips what the other clients do not pay."""
    got = b""
    while len(got) < n:
        chunk = s.recv(n - len(got))
        if not chunk:
            die("the relay closed")
        got += chunk
    return got


def cmd_relay_rtt(a):
    ca = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ca.connect(a.a)
    # The far relay listens on B only once the first has reached it.
    deadline = time.monotonic() + 10
    while True:
        try:
            cb = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            cb.connect(a.b)
            break
        except OSError:
            cb.close()
            if time.monotonic() > deadline:
                die(f"nothing listens on {a.b}")
            time.sleep(0.02)
    times = []
    for i in range(a.count + 5):
        payload = (b"%08d" % i) + os.urandom(a.size - 8)
        t0 = time.monotonic()
        ca.sendall(payload)
        m = recv_all(cb, len(payload))
        if m != payload:
            die(f"b got other bytes than sent at round {i}")
        cb.sendall(m)
        m = recv_all(ca, len(payload))
        if m != payload:
            die(f"a got other bytes than sent at round {i}")
        if i >= 5:
            times.append((time.monotonic() - t0) * 1000)
    say_rtt(times)


def cmd_unreliable_latency(a):
    import base64
    rx = Events(a.recv)
    tx = Control(a.send, timeout=60)
    sent_at = {}
    got = {}
    done = threading.Event()

    def receive():
        while not done.is_set():
            try:
                d = rx.next_message()
            except socket.timeout:
                continue  # look at done again
            except EOFError:
                return
            if d.get("reliable") is not False:
                continue
            m = base64.b64decode(d["data_base64"])
            n = int.from_bytes(m[:8], "big")
            if len(m) == a.size and n in sent_at and n not in got:
                got[n] = (time.monotonic() - sent_at[n]) * 1000
    rx.c.s.settimeout(1.0)
    t = threading.Thread(target=receive, daemon=True)
    t.start()
    pad = os.urandom(a.size - 8)
    n = 0
    t_next = time.monotonic()
    while process_running(a.while_pid):
        sent_at[n] = time.monotonic()
        tx.call("peer.send", {"to": [a.to], "reliable": False,
                              "data_base64": base64.b64encode(n.to_bytes(8, "big") + pad).decode()})
        n += 1
        t_next += a.interval_ms / 1000
        time.sleep(max(0.0, t_next - time.monotonic()))
    time.sleep(1.0)
    done.set()
    t.join(2.0)
    if n == 0:
        die(f"process {a.while_pid} ended before the first message")
    times = list(got.values())
    if not times:
        die(f"none of {n} unreliable messages arrived")
    say(f"UNRELIABLE sent={n} received={len(times)} dropped={n - len(times)} drop_rate={(n - len(times)) / n:.4f} "
        f"p50_ms={percentile(times, 50):.3f} p99_ms={percentile(times, 99):.3f} max_ms={max(times):.3f}")


def cmd_tls_echo_rtt(a):
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(a.cert, a.key)
    raw = socket.create_connection(hostport(a.to), timeout=30)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s = ctx.wrap_socket(raw)
    times = []
    for i in range(a.count + 5):
        payload = (b"%08d" % i) + os.urandom(a.size - 8)
        t0 = time.monotonic()
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = s.recv(len(payload) - len(got))
            if not chunk:
                die("the echo server closed")
            got += chunk
        if got != payload:
            die(f"the echo differs at round {i}")
        if i >= 5:
            times.append((time.monotonic() - t0) * 1000)
    say_rtt(times, f" version={s.version()}")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("events")
    p.add_argument("--out-dir", required=True); p.add_argument("--wait", type=float, default=30)
    p.add_argument("daemons", nargs="+", metavar="NAME=SOCKET")
    p = sub.add_parser("hello-relay")
    p.add_argument("--listen", required=True); p.add_argument("--to", required=True)
    p.add_argument("claims", nargs="+", metavar="cert:FILE|HEX", help="the peer ID each client in turn is announced with")
    p.add_argument("--encryption", default="required", choices=sorted(ENCRYPTION))
    p = sub.add_parser("record-relay")
    p.add_argument("--listen", required=True); p.add_argument("--to", required=True); p.add_argument("--out", required=True)
    p = sub.add_parser("probe")
    p.add_argument("--to", required=True); p.add_argument("--text"); p.add_argument("--hex")
    p.add_argument("--random", type=int); p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=15)
    p = sub.add_parser("slow")
    p.add_argument("--to", required=True); p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--timeout", type=float, default=30)
    p = sub.add_parser("flood")
    p.add_argument("--to", required=True); p.add_argument("--count", type=int, required=True)
    p.add_argument("--timeout", type=float, default=30)
    p.add_argument("--release-file", help="close every connection from this side once this file exists")
    p = sub.add_parser("simultaneous")
    for w in ("a", "b"):
        p.add_argument(f"--{w}", required=True); p.add_argument(f"--{w}-addr", required=True)
        p.add_argument(f"--{w}-id", required=True)
    p = sub.add_parser("stuffed")
    p.add_argument("--socket", required=True); p.add_argument("--to", required=True)
    p.add_argument("--size", type=int, default=65536); p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--pid", type=int, required=True); p.add_argument("--window", type=int, default=64)
    p = sub.add_parser("throughput")
    p.add_argument("--send", required=True); p.add_argument("--recv", required=True); p.add_argument("--to", required=True)
    p.add_argument("--size", type=int, required=True); p.add_argument("--count", type=int, required=True)
    p.add_argument("--window", type=int, default=32); p.add_argument("--timeout", type=float, default=300)
    p = sub.add_parser("stream-throughput")
    p.add_argument("--send", required=True); p.add_argument("--recv", required=True); p.add_argument("--to", required=True)
    p.add_argument("--from-id", required=True, help="the sender's peer ID (the receiver's stream is with it)")
    p.add_argument("--size", type=int, required=True); p.add_argument("--count", type=int, required=True)
    p.add_argument("--timeout", type=float, default=300)
    p = sub.add_parser("stream-rtt")
    for w in ("a", "b"):
        p.add_argument(f"--{w}", required=True); p.add_argument(f"--{w}-id", required=True)
    p.add_argument("--count", type=int, default=100); p.add_argument("--size", type=int, default=64)
    p.add_argument("--while-pid", type=int, help="stop once this process has ended")
    p = sub.add_parser("rtt")
    for w in ("a", "b"):
        p.add_argument(f"--{w}", required=True); p.add_argument(f"--{w}-id", required=True)
    p.add_argument("--count", type=int, default=100); p.add_argument("--size", type=int, default=64)
    p = sub.add_parser("tls-echo-rtt")
    p.add_argument("--to", required=True); p.add_argument("--cert", required=True); p.add_argument("--key", required=True)
    p.add_argument("--count", type=int, default=100); p.add_argument("--size", type=int, default=64)
    p = sub.add_parser("stall")
    p.add_argument("--to", required=True); p.add_argument("--size", type=int, required=True)
    p.add_argument("--send", type=int, required=True); p.add_argument("--name", required=True)
    p.add_argument("--content-out", required=True); p.add_argument("--timeout", type=float, default=30)
    p = sub.add_parser("relay-rtt")
    p.add_argument("--a", required=True); p.add_argument("--b", required=True)
    p.add_argument("--count", type=int, default=100); p.add_argument("--size", type=int, default=64)
    p = sub.add_parser("unreliable-latency")
    p.add_argument("--send", required=True); p.add_argument("--recv", required=True); p.add_argument("--to", required=True)
    p.add_argument("--while-pid", type=int, required=True, help="send while this process (a bulk transfer) runs")
    p.add_argument("--interval-ms", type=float, default=2.0); p.add_argument("--size", type=int, default=64)
    a = ap.parse_args()
    {"events": cmd_events, "hello-relay": cmd_hello_relay, "record-relay": cmd_record_relay, "probe": cmd_probe,
     "slow": cmd_slow, "flood": cmd_flood, "simultaneous": cmd_simultaneous, "stuffed": cmd_stuffed,
     "throughput": cmd_throughput, "stream-throughput": cmd_stream_throughput, "stream-rtt": cmd_stream_rtt, "rtt": cmd_rtt, "tls-echo-rtt": cmd_tls_echo_rtt,
     "unreliable-latency": cmd_unreliable_latency, "relay-rtt": cmd_relay_rtt,
     "stall": cmd_stall}[a.cmd](a)


if __name__ == "__main__":
    main()
