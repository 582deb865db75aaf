#!/usr/bin/python3
"""Print the `bench ...` lines of a lab run side by side (used by `make bench`).

    summary.py RESULTS_DIR

Reads RESULTS_DIR/scenarios/*/output.log.  Lines `bench GROUP.NAME rate=R bytes_per_s=B`
become one table per GROUP with each row's ratio to every baseline row (names containing
"baseline"); lines `bench GROUP.KEY=VALUE` are listed under it with their targets.
Exit 1 when no bench line was found.
"""
import glob
import os
import re
import sys

TARGETS = {
    "notify.ratio_vs_fd_bytes": ">= 0.90",
    "notify.ratio_vs_fd_bytes_values16": ">= 0.90",
    "notify.ratio_vs_dbus_rate": ">= 50",
    "notify.ratio_vs_dbus_rate_values16": ">= 50",
    "notify.ratio_vs_fd_bytes_stream": ">= 0.90",
    "notify.ratio_vs_dbus_rate_stream": ">= 50",
    "notify.fd_baseline_vs_dbus_rate": "(what >= 50 asks of any sender here)",
    "notify.daemon_rss_mb": "< 20",
    "central.ratio_vs_fd_bytes": ">= 0.90",
    "central.ratio_vs_fd_bytes_stream": ">= 0.90",
    "central.first_read_ratio_vs_python": "<= 1.0 (medians of FIRST_READ_REPEAT runs each)",
    "dnssd.publish_to_resolved_ratio": "<= 1.10",
    "dnssd.publish_to_resolved_cli_ratio": "<= 1.10",
    "dnssd.resolve_cached_ms": "< 5",
    "cli.status_ratio": "<= 1.5",
    "cli_host.status_ratio": "<= 1.5",
    "cli.peerlinkd_bytes": "<= 20 MB installed, for both programs",
    "cli.daemon_idle_cpu_ms": "~0 over the minute",
    "cli.daemon_idle_wakeups": "~0 (nothing happens)",
    "peer_transfer.ratio_tls_vs_socat_tls": ">= 0.90",
    "peer_transfer.ratio_tls_vs_socat_tcp": ">= 0.80",
    "peer_transfer.ratio_plain_vs_socat_tcp": ">= 0.90",
    "peer_transfer_host.ratio_tls_vs_socat_tls": ">= 0.90",
    "peer_transfer_host.ratio_tls_cached_vs_socat_tls": ">= 0.90 (the file's hash remembered)",
    "peer_transfer_host.ratio_tls_vs_socat_tcp": ">= 0.80",
    "peer_transfer_host.ratio_plain_vs_socat_tcp": ">= 0.90",
    "peer_transfer_host.ratio_plain_cached_vs_socat_tcp": ">= 0.90 (the file's hash remembered)",
    "peer_transfer_host.bound_ratio_tls_vs_socat_tls": "(the most this host allows: socat's CPU + 2 hashes)",
    "peer_transfer_host.bound_ratio_tls_cached_vs_socat_tls": "(the most this host allows: socat's CPU + 1 hash)",
    "peer_transfer_host.bound_ratio_tls_vs_socat_tcp": "(the most this host allows: TLS socat's CPU + 2 hashes)",
    "peer_transfer_host.bound_ratio_plain_vs_socat_tcp": "(the most this host allows: socat's CPU + 2 hashes)",
    "peer_transfer_host.bound_ratio_plain_cached_vs_socat_tcp": "(the most this host allows: socat's CPU + 1 hash)",
    "peer_transfer_host.ours_tls_rtt.rtt_p99_ms": "<= 5",
    "peer_transfer_host.ours_tls.rss_mb_sender": "< 30",
    "peer_transfer_host.ours_tls.rss_mb_receiver": "< 30",
    "peer.ratio_tls_vs_socat_1k": ">= 0.90",
    "peer.ratio_tls_vs_socat_64k": ">= 0.90",
    "peer.ratio_plain_vs_socat_tcp_1k": ">= 0.90",
    "peer.ratio_plain_vs_socat_tcp_64k": ">= 0.90",
    "peer.hub_rss_mb_8_peers": "< 25",
    "peer.ratio_tls_vs_socat_veth_1k": ">= 0.90",
    "peer.ratio_tls_vs_socat_veth_64k": ">= 0.90",
    "peer_host.ratio_tls_vs_socat_tls_1k": ">= 0.90",
    "peer_host.ratio_tls_vs_socat_tls_64k": ">= 0.90",
    "peer_host.ratio_plain_vs_socat_tcp_1k": ">= 0.90",
    "peer_host.ratio_plain_vs_socat_tcp_64k": ">= 0.90",
    "peer_host.rtt_p50_ratio_vs_echo": "<= 2 (the streams' p50 over one TLS echo's)",
    "peer_host.unreliable_during_bulk.p99_ms": "<= 5",
    "peer_host.hub_rss_mb_8_peers": "< 25",
}


def main():
    d = sys.argv[1]
    groups = {}
    for log in sorted(glob.glob(os.path.join(d, "scenarios", "*", "output.log"))):
        scenario = os.path.basename(os.path.dirname(log))
        for line in open(log, errors="replace"):
            if not line.startswith("bench "):
                continue
            body = line[len("bench "):].strip()
            m = re.match(r"(\S+?)\.(\S+) rate=([0-9.]+) bytes_per_s=([0-9.]+)$", body)
            g = None
            if m:
                g = groups.setdefault(m.group(1), {"scenario": scenario, "rows": [], "values": []})
                g["rows"].append((m.group(2), float(m.group(3)), float(m.group(4))))
                continue
            m = re.match(r"(\S+?)\.(\S+)=(\S+)$", body)
            if m:
                g = groups.setdefault(m.group(1), {"scenario": scenario, "rows": [], "values": []})
                g["values"].append((m.group(2), m.group(3)))
    if not groups:
        print(f"bench: no results in {d}")
        return 1
    print(f"\n==== benchmarks (lab results in {d})")
    for name, g in groups.items():
        print(f"\n{name} ({g['scenario']})")
        rows = g["rows"]
        bases = [r for r in rows if "baseline" in r[0]]
        if rows:
            head = f"  {'':<20} {'notif/s':>9} {'bytes/s':>10}"
            for b in bases:
                head += f"  {'x ' + b[0]:>22}"
            print(head)
            for r in rows:
                line = f"  {r[0]:<20} {r[1]:>9.0f} {r[2]:>10.0f}"
                for b in bases:
                    cell = f"{r[1] / b[1]:.2f} n, {r[2] / b[2]:.2f} B" if b[1] and b[2] else "-"
                    line += f"  {cell:>22}"
                print(line)
            if bases:
                print("  (x BASELINE: this row's notifications/s (n) and bytes/s (B) divided by that baseline's)")
        for k, v in g["values"]:
            t = TARGETS.get(f"{name}.{k}")
            print(f"  {k} = {v}" + (f"   (target {t})" if t else ""))
    return 0


sys.exit(main())
