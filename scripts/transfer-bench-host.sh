#!/bin/bash
# make bench, on the host's loopback: a file of BENCH_TRANSFER_BYTES (default 1 GiB) random
# bytes sent with `peerlink peer send-file` between two daemons, against socat copying the
# same file on the same path, as Tests/Lab/bench/61-peer-transfer.sh does in the lab guest
# (where the emulator makes every figure CPU-bound; here the session's own limits show):
#   - ours with TLS against socat with OPENSSL: on both ends (a client certificate,
#     verify=1, TLS 1.3) and against raw TCP socat; ours with encryption = none against raw
#     TCP socat; the same bytes as a byte stream (peer open-stream / accept-stream, TLS);
#   - cold and cached: ours (TLS, and again without encryption) first for a file changed
#     since the daemon last saw it (touched, so it is hashed before its offer), then the
#     same file again, whose hash the daemon remembers (FileHashes: the offer goes without
#     reading the file through);
#   - the round trip of a 64-byte message through the same session during another TLS
#     transfer (peer-tool.py stream-rtt, from the first data to the transfer's end; that
#     transfer is timed apart, since the round trips' client takes CPU the others do not
#     have), each daemon's largest RSS (sampled every 0.2 s), its CPU seconds and its minor
#     page faults per GiB; socat's CPU seconds per GiB on each side;
#   - the most this host allows: each ratio's bound when ours did no more than socat's work
#     plus the SHA-256 passes the protocol asks for (rate from `openssl speed`), spread over
#     every core (bound_ratio_*; see the comment above `bound`).
# Ours is timed from the command to its exit, once the receiver verified the file (the
# sender's hashing before the offer and the receiver's as the bytes arrive are in it);
# socat's from its sender's start to its receiver's exit. The file and every copy are on
# tmpfs (/dev/shm: the disk is not what is measured), each copy checked with sha256sum.
# Each is run BENCH_REPEAT times (default 3) in turn; the median is reported.
#
#   scripts/transfer-bench-host.sh STATIC_BIN_DIR OUT_LOG
#
# The daemons run on a private D-Bus session bus (no BlueZ needed), on 127.0.0.1 ports
# 47601, 47602, 47611 and 47612; socat on 47701. Writes the bench lines to OUT_LOG (where summary.py finds
# them) and to standard output. No timing assertions: it fails only when a measurement
# could not be made.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
STATIC=${1:?static bin dir}; OUT=${2:?output log}
BYTES=${BENCH_TRANSFER_BYTES:-1073741824}
REPEAT=${BENCH_REPEAT:-3}
BENCH=transfer-bench-host
. "$REPO/scripts/host-bench-lib.sh"
host_bench_start $((BYTES * 5 / 2)) socat openssl sha256sum dbus-daemon python3

note "$BYTES random bytes in $work"
head -c "$BYTES" /dev/urandom >"$work/data.bin"
SUM=$(sha256sum <"$work/data.bin" | cut -d' ' -f1)
resources=("peer.accept_resources = all" "peer.max_resource_bytes = 64G")
daemon a 47601 required "${resources[@]}"; daemon b 47602 required "${resources[@]}"
daemon c 47611 none "${resources[@]}"; daemon d 47612 none "${resources[@]}"
pl b peer connect 127.0.0.1:47601 >/dev/null || fail "no session b -> a"
pl d peer connect 127.0.0.1:47611 >/dev/null || fail "no session d -> c"

per_gib() { awk -v t="$1" -v b="$BYTES" 'BEGIN { printf "%.2f", t / 100 / (b / 1073741824) }'; }
check_sum() { [ "$(sha256sum <"$1" | cut -d' ' -f1)" = "$SUM" ] || fail "$2: the copy's sha256sum differs from the file's"; rm -f "$1"; }

# ours NAME SENDER RECEIVER [rtt]: one send-file; with rtt, 64-byte round trips on the same
# session from the receiver's first bytes to the transfer's end.
ours() {
    local name=$1 tx=$2 rx=$3 rtt=${4:-} t0 c0tx c0rx f0tx f0rx pid sampler rtt_pid=
    c0tx=$(ticks "${PID[$tx]}"); c0rx=$(ticks "${PID[$rx]}")
    f0tx=$(faults "${PID[$tx]}"); f0rx=$(faults "${PID[$rx]}")
    ( while :; do
        for n in "$tx" "$rx"; do awk -v n="$n" '/^VmRSS:/ { print n, $2 }' "/proc/${PID[$n]}/status"; done
        sleep 0.2
      done ) >"$work/rss" &
    sampler=$!
    t0=$(now)
    pl "$tx" peer send-file "$work/data.bin" --to "${ID[$rx]}" --name "$name.bin" >"$work/send.log" 2>&1 &
    pid=$!
    if [ -n "$rtt" ]; then
        # The receiver reports the transfer once the offer is accepted; its bytes follow.
        until grep -q '"transfer"' <<<"$(pl "$rx" --json peer transfers)" || ! kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
        python3 "$REPO/Tests/Lab/peer-tool.py" stream-rtt --a "$work/$tx.sock" --a-id "${ID[$tx]}" \
            --b "$work/$rx.sock" --b-id "${ID[$rx]}" --count 1000000 --while-pid "$pid" >"$work/rtt.log" 2>&1 &
        rtt_pid=$!
    fi
    wait "$pid" || fail "$name: send-file failed: $(cat "$work/send.log")"
    record "$name" seconds "$(seconds_since "$t0")"
    kill "$sampler"; wait "$sampler" 2>/dev/null || true
    if [ -n "$rtt_pid" ]; then
        wait "$rtt_pid" || fail "$name: the round trips failed: $(cat "$work/rtt.log")"
        local line; line=$(grep '^RTT ' "$work/rtt.log") || fail "$name: no round-trip result: $(cat "$work/rtt.log")"
        note "round trips during $name: $line"
        record "$name" rtt_p50_ms "$(sed -n 's/.* p50_ms=\([0-9.]*\).*/\1/p' <<<"$line")"
        record "$name" rtt_p99_ms "$(sed -n 's/.* p99_ms=\([0-9.]*\).*/\1/p' <<<"$line")"
        record "$name" rtt_count "$(sed -n 's/.*count=\([0-9]*\).*/\1/p' <<<"$line")"
    fi
    record "$name" cpu_s_per_gib_sender "$(per_gib $(( $(ticks "${PID[$tx]}") - c0tx )))"
    record "$name" cpu_s_per_gib_receiver "$(per_gib $(( $(ticks "${PID[$rx]}") - c0rx )))"
    record "$name" page_faults_per_gib_sender "$(per_gib $(( ($(faults "${PID[$tx]}") - f0tx) * 100 )) | cut -d. -f1)"
    record "$name" page_faults_per_gib_receiver "$(per_gib $(( ($(faults "${PID[$rx]}") - f0rx) * 100 )) | cut -d. -f1)"
    record "$name" rss_mb_sender "$(awk -v n="$tx" '$1 == n && $2 > m { m = $2 } END { printf "%.1f", m / 1024 }' "$work/rss")"
    record "$name" rss_mb_receiver "$(awk -v n="$rx" '$1 == n && $2 > m { m = $2 } END { printf "%.1f", m / 1024 }' "$work/rss")"
    check_sum "$work/in-$rx/$name.bin" "$name"
}

# ours_stream NAME SENDER RECEIVER: the same bytes through a byte stream (TLS), without the
# hashing and the inbox: the session's own speed.
ours_stream() {
    local name=$1 tx=$2 rx=$3 t0 reader
    pl "$rx" peer accept-stream --peer "${ID[$tx]}" --wait 60 --to "$work/$name.bin" >"$work/read.log" 2>&1 &
    reader=$!
    t0=$(now)
    pl "$tx" peer open-stream "${ID[$rx]}" "$name" --from "$work/data.bin" >"$work/open.log" 2>&1 \
        || fail "$name: open-stream failed: $(cat "$work/open.log")"
    wait "$reader" || fail "$name: accept-stream failed: $(cat "$work/read.log")"
    record "$name" seconds "$(seconds_since "$t0")"
    check_sum "$work/$name.bin" "$name"
}

# socat_run NAME tls|tcp: the same file through socat, file to file, -b 65536.
socat_run() {
    local name=$1 listen connect t0 rx i
    if [ "$2" = tls ]; then
        listen="OPENSSL-LISTEN:47701,bind=127.0.0.1,reuseaddr,cert=$work/srv.pem,cafile=$work/cli.crt,verify=1"
        connect="OPENSSL:127.0.0.1:47701,cert=$work/cli.pem,verify=0"
    else
        listen="TCP-LISTEN:47701,bind=127.0.0.1,reuseaddr"
        connect="TCP:127.0.0.1:47701"
    fi
    : >"$work/socat.log"  # before the receiver starts: the wait below reads it
    # Each socat under bash's `time`, for its CPU seconds (the bound below starts from them).
    ( TIMEFORMAT='%3U %3S'; time socat -d -d -lu -u -b 65536 "$listen" OPEN:"$work/rx.bin",creat,trunc \
        >"$work/socat.log" 2>&1 ) 2>"$work/socat-rx.cpu" &
    rx=$!
    for i in $(seq 100); do grep -q "listening on" "$work/socat.log" && break; sleep 0.05; done
    grep -q "listening on" "$work/socat.log" || fail "$name: socat did not listen: $(cat "$work/socat.log")"
    t0=$(now)
    { TIMEFORMAT='%3U %3S'; time socat -u -b 65536 OPEN:"$work/data.bin" "$connect" 2>"$work/socat-tx.log"; } \
        2>"$work/socat-tx.cpu" || fail "$name: the socat sender failed: $(cat "$work/socat-tx.log")"
    wait "$rx" || fail "$name: the socat receiver failed: $(cat "$work/socat.log")"
    record "$name" seconds "$(seconds_since "$t0")"
    record "$name" cpu_s_per_gib_sender "$(cpu_per_gib "$work/socat-tx.cpu" "$BYTES")"
    record "$name" cpu_s_per_gib_receiver "$(cpu_per_gib "$work/socat-rx.cpu" "$BYTES")"
    [ "$2" = tcp ] || grep -q "SSL proto version used: TLSv1.3" "$work/socat.log" || fail "$name: socat did not use TLS 1.3"
    check_sum "$work/rx.bin" "$name"
}

for run in $(seq "$REPEAT"); do
    note "run $run of $REPEAT: ours (TLS, cold then cached), socat TLS, socat TCP, ours (none, cold then cached), a byte stream (TLS), ours (TLS, round trips meanwhile)"
    # Cold: changed since any daemon hashed it. The pause puts the change beyond the margin
    # within which a daemon does not remember a file's hash (3 s), so the cold run's hash is
    # remembered for the cached one.
    touch "$work/data.bin"; sleep 3.2
    ours ours_tls b a
    ours ours_tls_cached b a
    socat_run socat_tls tls
    socat_run socat_tcp tcp
    ours ours_plain d c
    ours ours_plain_cached d c
    ours_stream ours_stream_tls b a
    ours ours_tls_rtt b a rtt
done

# What this host allows at all. Ours does at least socat's work (read, encrypt, send; receive,
# decrypt, write) plus the SHA-256 passes the protocol asks for: the receiver's as the bytes
# arrive, and for a cold file the sender's before the offer, which runs before the first byte
# goes. On CORES cores a transfer then takes at least (socat's CPU + the passes) / CORES, and
# never less than socat's own time; the ratio that allows is printed beside each ratio.
SHA_RATE=$(openssl speed -seconds 1 -bytes 65536 -evp sha256 2>/dev/null | awk '$1 == "sha256" { sub(/k$/, "", $2); print $2 * 1000 }')
[ -n "$SHA_RATE" ] || fail "openssl speed gave no SHA-256 rate"
CORES=$(nproc)
# bound LIKE BASELINE PASSES_ALONE: the best ratio against BASELINE's time for a transfer
# doing LIKE's work (socat_tls or socat_tcp) plus one hash pass within it, after
# PASSES_ALONE (0 or 1) before it.
bound() {
    awk -v s="$(m "$1" seconds)" -v tx="$(m "$1" cpu_s_per_gib_sender)" -v rx="$(m "$1" cpu_s_per_gib_receiver)" \
        -v base="$(m "$2" seconds)" -v b="$BYTES" -v rate="$SHA_RATE" -v cores="$CORES" -v alone="$3" 'BEGIN {
        gib = b / 1073741824; sha = b / rate
        within = ((tx + rx) * gib + sha) / cores; if (within < s) within = s
        printf "%.3f", base / (alone * sha + within) }'
}
ratio() { awk -v a="$(m "$2" seconds)" -v b="$(m "$1" seconds)" 'BEGIN { printf "%.3f", a / b }'; }
mkdir -p "$(dirname "$OUT")"
{
    echo "bench peer_transfer_host.bytes=$BYTES"
    echo "bench peer_transfer_host.repeat=$REPEAT"
    for name in ours_tls ours_tls_cached socat_tls socat_tcp ours_plain ours_plain_cached ours_stream_tls ours_tls_rtt; do
        echo "bench peer_transfer_host.$name.seconds=$(m $name seconds)"
        echo "bench peer_transfer_host.$name.seconds_each_run=$(each_run $name seconds)"
    done
    echo "bench peer_transfer_host.ratio_tls_vs_socat_tls=$(ratio ours_tls socat_tls)"
    echo "bench peer_transfer_host.ratio_tls_cached_vs_socat_tls=$(ratio ours_tls_cached socat_tls)"
    echo "bench peer_transfer_host.ratio_tls_vs_socat_tcp=$(ratio ours_tls socat_tcp)"
    echo "bench peer_transfer_host.ratio_plain_vs_socat_tcp=$(ratio ours_plain socat_tcp)"
    echo "bench peer_transfer_host.ratio_plain_cached_vs_socat_tcp=$(ratio ours_plain_cached socat_tcp)"
    echo "bench peer_transfer_host.ratio_stream_tls_vs_socat_tls=$(ratio ours_stream_tls socat_tls)"
    echo "bench peer_transfer_host.cores=$CORES"
    echo "bench peer_transfer_host.sha256_s_per_gib=$(awk -v r="$SHA_RATE" 'BEGIN { printf "%.3f", 1073741824 / r }')"
    for name in socat_tls socat_tcp; do
        for k in cpu_s_per_gib_sender cpu_s_per_gib_receiver; do echo "bench peer_transfer_host.$name.$k=$(m $name $k)"; done
    done
    echo "bench peer_transfer_host.bound_ratio_tls_vs_socat_tls=$(bound socat_tls socat_tls 1)"
    echo "bench peer_transfer_host.bound_ratio_tls_cached_vs_socat_tls=$(bound socat_tls socat_tls 0)"
    echo "bench peer_transfer_host.bound_ratio_tls_vs_socat_tcp=$(bound socat_tls socat_tcp 1)"
    echo "bench peer_transfer_host.bound_ratio_plain_vs_socat_tcp=$(bound socat_tcp socat_tcp 1)"
    echo "bench peer_transfer_host.bound_ratio_plain_cached_vs_socat_tcp=$(bound socat_tcp socat_tcp 0)"
    for k in rtt_p50_ms rtt_p99_ms rtt_count; do echo "bench peer_transfer_host.ours_tls_rtt.$k=$(m ours_tls_rtt $k)"; done
    for name in ours_tls ours_plain ours_plain_cached; do
        for k in cpu_s_per_gib_sender cpu_s_per_gib_receiver page_faults_per_gib_sender page_faults_per_gib_receiver \
            rss_mb_sender rss_mb_receiver; do
            echo "bench peer_transfer_host.$name.$k=$(m $name $k)"
        done
    done
} | tee "$OUT"
