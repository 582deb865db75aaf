#!/usr/bin/env python3
"""Judges a soak (Tests/Lab/soak/10-soak.sh) from what it recorded; standard library only.

Reads, in --out: ops.tsv (time, kind, exit status, first line of the error), samples.tsv
(per daemon: RSS, descriptors, threads, D-Bus match rules; bluetoothd's and avahi-daemon's
object counts), restarts.tsv and sent.txt (the messages whose `peer send` exited 0); and
--events, the receiving daemon's recorded peer events (one JSON event a line).

Prints a table and one verdict line per check, then `soak: PASS` or `soak: FAIL (...)`;
exits 1 on a failure. The checks:
  - every daemon alive at the end under its first pid (no crash, no restart);
  - messages: every message sent is delivered exactly once; none delivered whose send failed;
  - operations: every failure carries its reason (exit 124, a timeout, or a failure without
    a word is a silent one); every kind of operation succeeds again after the last restart;
  - logs: every warning or error each daemon logged names its cause (error= or reason=);
  - series after warm-up (the first quarter of the run, at least a minute): RSS grows by less
    than max(2 MiB, 5 % of its median) over the rest of the run (least-squares slope);
    descriptors, threads and match rules end no higher than their warm-up peak plus a small
    allowance (descriptors 4, threads 4, match rules 2) and do not trend upward.
"""
import argparse
import base64
import json
import os
import re
import statistics
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--events", required=True)
ap.add_argument("--pid", action="append", default=[], help="NAME=PID at the start")
ap.add_argument("--alive", action="append", default=[], help="NAME=1|0 at the end")
ap.add_argument("--minutes", type=float, required=True)
args = ap.parse_args()

failures = []


def verdict(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def read_tsv(name):
    path = os.path.join(args.out, name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.rstrip("\n").split("\t") for line in f if line.strip()]


# ---- alive -------------------------------------------------------------------------------
for kv in args.alive:
    name, alive = kv.split("=", 1)
    verdict(alive == "1", f"daemon {name} alive at the end under its first pid")

# ---- messages ----------------------------------------------------------------------------
sent = []
sent_path = os.path.join(args.out, "sent.txt")
if os.path.exists(sent_path):
    sent = [l.strip() for l in open(sent_path) if l.strip()]
received = {}
for line in open(args.events, errors="replace"):
    try:
        ev = json.loads(line)
    except ValueError:
        continue
    if ev.get("topic") != "peer.message":
        continue
    try:
        text = base64.b64decode(ev["data"]["data_base64"]).decode("utf-8", "replace")
    except (KeyError, ValueError, TypeError):
        continue
    if text.startswith("soak-msg-"):
        received[text] = received.get(text, 0) + 1
sent_set = set(sent)
missing = [m for m in sent if m not in received]
twice = [m for m, n in received.items() if n > 1]
unreported = [m for m in received if m not in sent_set]
print(f"messages: {len(sent)} sent (exit 0), {len(received)} delivered, {len(missing)} missing, "
      f"{len(twice)} delivered twice, {len(unreported)} delivered although their send failed")
verdict(len(sent) > 0, "messages were sent")
verdict(not missing, "every message sent was delivered" + (f" (missing: {', '.join(missing[:5])})" if missing else ""))
verdict(not twice, "no message delivered twice" + (f" ({', '.join(twice[:5])})" if twice else ""))
verdict(not unreported, "no message delivered whose send was reported failed" + (f" ({', '.join(unreported[:5])})" if unreported else ""))

# ---- operations --------------------------------------------------------------------------
ops = [(float(r[0]), r[1], int(r[2]), r[3] if len(r) > 3 else "") for r in read_tsv("ops.tsv")]
restarts = [(int(r[0]), r[1]) for r in read_tsv("restarts.tsv")]
last_restart = max((t for t, _ in restarts), default=None)
print(f"restarts: {len(restarts)} ({', '.join(sorted(set(n for _, n in restarts))) or 'none'})")
print(f"{'operation':<10} {'ok':>7} {'failed':>7}  reasons (most frequent first)")
for kind in sorted(set(k for _, k, _, _ in ops)):
    mine = [o for o in ops if o[1] == kind]
    ok = [o for o in mine if o[2] == 0]
    bad = [o for o in mine if o[2] != 0]
    reasons = {}
    for _, _, rc, detail in bad:
        key = f"[{rc}] {detail[:90]}"
        reasons[key] = reasons.get(key, 0) + 1
    top = "; ".join(f"{n}× {r}" for r, n in sorted(reasons.items(), key=lambda x: -x[1])[:3])
    print(f"{kind:<10} {len(ok):>7} {len(bad):>7}  {top}")
    silent = [o for o in bad if o[2] == 124 or not o[3].strip()]
    verdict(not silent, f"{kind}: every failure carries its reason" + (f" ({len(silent)} silent, first at {silent[0][0]:.0f})" if silent else ""))
    after = [o for o in ok if last_restart is None or o[0] > last_restart]
    verdict(bool(after), f"{kind}: succeeds again after the last restart" if last_restart else f"{kind}: succeeds")

# ---- logs ---------------------------------------------------------------------------------
# Every warning or error a daemon logged names its cause (an error= or reason= field): the
# soak's faults (restarts, garbage clients) explain them, and one without a cause is a report
# nobody can act on.
for kv in args.pid:
    name = kv.split("=", 1)[0]
    path = os.path.join(args.out, f"peerlinkd-{name}.log")
    if not os.path.exists(path):
        verdict(False, f"daemon {name}: its log {path} exists")
        continue
    loud = [l.rstrip("\n") for l in open(path, errors="replace") if re.match(r"<[0-4]>", l)]
    without = [l for l in loud if not re.search(r" (error|reason)=", l)]
    kinds = {}
    for l in loud:
        key = re.sub(r" [a-z_.]+=.*", "", l)
        kinds[key] = kinds.get(key, 0) + 1
    print(f"daemon {name}: {len(loud)} warnings and errors: " +
          ("; ".join(f"{n}× {k}" for k, n in sorted(kinds.items(), key=lambda x: -x[1])[:5]) or "none"))
    verdict(not without, f"daemon {name}: every warning and error names its cause" +
            (f" ({len(without)} without, first: {without[0][:120]})" if without else ""))

# ---- series ------------------------------------------------------------------------------
rows = read_tsv("samples.tsv")
header, data = (rows[0], rows[1:]) if rows else ([], [])
if not data:
    verdict(False, "samples were taken")
else:
    col = {name: i for i, name in enumerate(header)}
    t0 = min(float(r[col["time"]]) for r in data)
    t_end = max(float(r[col["time"]]) for r in data)
    warm_end = t0 + max(60.0, (t_end - t0) / 4)
    post_minutes = (t_end - warm_end) / 60

    def series(daemon, metric):
        out = []
        for r in data:
            if daemon is not None and r[col["daemon"]] != daemon:
                continue
            v = r[col[metric]]
            if v.strip() == "":
                continue
            out.append((float(r[col["time"]]), float(v)))
        return out

    def slope(points):
        if len(points) < 3:
            return 0.0
        xs = [t / 60 for t, _ in points]
        ys = [v for _, v in points]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        return 0.0 if sxx == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx

    print(f"series: {len(data)} samples over {(t_end - t0) / 60:.1f} min; warm-up until {warm_end - t0:.0f} s")
    print(f"{'series':<22} {'warm max':>9} {'after min':>9} {'after max':>9} {'slope/min':>10} {'bound':>10}")
    daemons = sorted(set(r[col["daemon"]] for r in data))
    checks = []
    for d in daemons:
        checks += [(d, "rss_kb"), (d, "fds"), (d, "threads"), (d, "match_rules")]
    checks += [(daemons[0], "bluez_objects"), (daemons[0], "avahi_objects")]
    allowance = {"fds": 4, "threads": 4, "match_rules": 2, "bluez_objects": 10, "avahi_objects": 10}
    for d, metric in checks:
        pts = series(d, metric)
        warm = [v for t, v in pts if t < warm_end]
        post = [(t, v) for t, v in pts if t >= warm_end]
        label = metric if metric.endswith("objects") else f"{d}.{metric}"
        if not warm or len(post) < 3:
            verdict(False, f"{label}: too few samples ({len(warm)} in warm-up, {len(post)} after)")
            continue
        s = slope(post)
        pv = [v for _, v in post]
        if metric == "rss_kb":
            bound = max(2048.0, 0.05 * statistics.median(pv))
            growth = s * post_minutes
            ok = growth < bound
            what = f"{label}: grows {growth:+.0f} kB over {post_minutes:.1f} min after warm-up (bound {bound:.0f} kB)"
        else:
            bound = max(warm) + allowance[metric]
            ok = max(pv) <= bound and s * post_minutes <= allowance[metric]
            what = f"{label}: after warm-up {min(pv):.0f}..{max(pv):.0f}, slope {s:+.2f}/min (bound: at most {bound:.0f}, no trend)"
        print(f"{label:<22} {max(warm):>9.0f} {min(pv):>9.0f} {max(pv):>9.0f} {s:>10.2f} {bound:>10.0f}")
        verdict(ok, what)

print("soak: PASS" if not failures else f"soak: FAIL ({len(failures)}: {failures[0]})")
sys.exit(1 if failures else 0)
