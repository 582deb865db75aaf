#!/usr/bin/python3
"""One control request, as a script in a loop makes it: `peerlink --json status` against the
same request written with socat to the same socket (a one-shot client that is not ours).

    cli_bench.py PEERLINK SOCKET GROUP [N]

Runs the two in turn, N times each (default 50) after two warm-ups, each as a whole process
started from here (fork, exec, connect, request, answer, exit), timed with a monotonic clock
around the run. Prints the medians and their ratio as `bench GROUP.KEY=VALUE` lines:
  GROUP.status_ms (ours), GROUP.status_socat_baseline_ms, GROUP.status_ratio (target <= 1.5)
Fails (exit 1) when either answer is not a JSON-RPC result, so a broken daemon cannot pass
for a fast one.
"""
import json
import statistics
import subprocess
import sys
import time

peerlink, sock, group = sys.argv[1], sys.argv[2], sys.argv[3]
n = int(sys.argv[4]) if len(sys.argv) > 4 else 50
request = b'{"jsonrpc":"2.0","id":1,"method":"daemon.status"}\n'
ours = [peerlink, "--socket", sock, "--json", "status"]
socat = ["socat", "-t", "5", "-", "UNIX-CONNECT:" + sock]


def run(argv, stdin):
    start = time.monotonic()
    p = subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    elapsed = (time.monotonic() - start) * 1000
    if p.returncode != 0:
        sys.exit(f"{argv[0]} exited {p.returncode}: {p.stderr.decode(errors='replace')}")
    return elapsed, p.stdout


def check(out, what):
    try:
        doc = json.loads(out.decode().strip().splitlines()[-1])
    except (ValueError, IndexError) as e:
        sys.exit(f"{what}: not JSON ({e}): {out[:200]!r}")
    # socat prints the JSON-RPC response, peerlink --json its result.
    result = doc.get("result", doc) if isinstance(doc, dict) else None
    if not isinstance(result, dict) or "version" not in result:
        sys.exit(f"{what}: not a daemon.status result: {out[:200]!r}")


for _ in range(2):
    check(run(ours, None)[1], "peerlink")
    check(run(socat, request)[1], "socat")
a, b = [], []
for i in range(n):
    # Alternate which goes first, so a drift in the machine's speed is shared.
    pair = [(ours, None, a), (socat, request, b)]
    for argv, stdin, into in (pair if i % 2 == 0 else pair[::-1]):
        into.append(run(argv, stdin)[0])
ma, mb = statistics.median(a), statistics.median(b)
print(f"bench {group}.status_ms={ma:.2f}")
print(f"bench {group}.status_socat_baseline_ms={mb:.2f}")
print(f"bench {group}.status_ratio={ma / mb:.2f}")
