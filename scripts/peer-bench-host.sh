#!/bin/bash
# make bench, on the host's loopback: peer-session messages between two daemons, against
# socat moving the same bytes, as Tests/Lab/bench/60-peer-throughput.sh does in the lab guest
# (where the emulator makes every figure CPU-bound; here the session's own limits show):
#   - reliable message throughput, 1 KiB and 64 KiB messages, through the data streams (a
#     client opens peer.message-stream on both daemons and writes numbered messages into b's
#     stream to a while another thread reads a's; peer-tool.py stream-throughput, every
#     message checked in order and unchanged), with TLS against `socat -b SIZE` with OPENSSL:
#     on both ends (a client certificate, verify=1, TLS 1.3), and with encryption = none
#     against raw TCP socat; socat timed by its receiver's log from the transfer loop's start
#     (after the handshake) to EOF, as ours is from the first write (the session is up);
#   - the round trip of a 64-byte message client -> a -> b -> client -> b -> a -> client
#     through the streams (and, beside, through peer.send and events), p50 and p99, against
#     a TLS echo through socat (OPENSSL-LISTEN ... PIPE; Python's ssl client), the issue's
#     baseline, and against the same path with two socat in place of the daemons (client ->
#     socat -> TLS -> socat -> client and back, Unix stream sockets at the ends), which
#     crosses as many processes and sockets as ours;
#   - unreliable messages (peer.send, reliable false, one every 2 ms) from b to a while a
#     byte stream from b to a saturates the session: their latency from send to the
#     receiving client's event, and how many were dropped (peer-tool.py unreliable-latency);
#   - the RSS of a daemon with 0 and with 8 sessions (8 more daemons dial it).
# Each throughput run is repeated BENCH_REPEAT times (default 3), ours and socat in turn; the
# medians are printed.
#
#   scripts/peer-bench-host.sh STATIC_BIN_DIR OUT_LOG
#
# The daemons run on a private D-Bus session bus (no BlueZ needed) on 127.0.0.1 ports
# 47621-47622, 47631-47632 and 47640; socat on 47711-47713. Writes the bench lines to OUT_LOG
# (where summary.py finds them) and to standard output. No timing assertions: it fails only
# when a measurement could not be made.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
STATIC=${1:?static bin dir}; OUT=${2:?output log}
REPEAT=${BENCH_REPEAT:-3}
BYTES_1K=${BENCH_PEER_BYTES_1K:-268435456}     # 262,144 messages of 1 KiB
BYTES_64K=${BENCH_PEER_BYTES_64K:-536870912}   # 8,192 messages of 64 KiB
BULK=${BENCH_PEER_BULK_BYTES:-2147483648}      # the byte stream beside the unreliable messages
RTT_N=${BENCH_PEER_RTT:-2000}
BENCH=peer-bench-host
. "$REPO/scripts/host-bench-lib.sh"
TOOL=$REPO/Tests/Lab/peer-tool.py
host_bench_start $((BYTES_64K * 5 / 2)) socat openssl dbus-daemon python3

daemon a 47621 required; daemon b 47622 required
daemon c 47631 none; daemon d 47632 none
pl b peer connect 127.0.0.1:47621 >/dev/null || fail "no session b -> a"
pl d peer connect 127.0.0.1:47631 >/dev/null || fail "no session d -> c"
for pair in b:a d:c; do
    enc=$(pl "${pair%:*}" --json peer sessions | python3 -c 'import json, sys; print(json.load(sys.stdin)["sessions"][0]["encrypted"])')
    [ "$enc" = "$([ "$pair" = b:a ] && echo True || echo False)" ] || fail "session ${pair/:/ -> }: encrypted is $enc"
done

# ours NAME SENDER RECEIVER SIZE BYTES: one throughput run through the daemons' data streams.
ours() {
    local name=$1 tx=$2 rx=$3 size=$4 out c0
    c0=$(( $(ticks "${PID[$tx]}") + $(ticks "${PID[$rx]}") ))
    # The client at both ends (one Python process: a writer and a reader thread, each moving
    # up to 64 packets a system call), which socat's file-to-file copy does not have, shares
    # the cores with the daemons: under bash's `time` for its CPU seconds.
    out=$( { TIMEFORMAT='%3U %3S'; time python3 -u "$TOOL" stream-throughput --send "$work/$tx.sock" --recv "$work/$rx.sock" \
        --to "${ID[$rx]}" --from-id "${ID[$tx]}" --size "$size" --count $(( $5 / size )); } 2>"$work/client.cpu") \
        || fail "$name: the throughput run failed: $out $(cat "$work/client.cpu")"
    record "$name" client_cpu_s_per_gib "$(cpu_per_gib "$work/client.cpu" "$5")"
    local rate; rate=$(sed -n 's/.* bytes_per_s=\([0-9.]*\).*/\1/p' <<<"$out")
    [ -n "$rate" ] || fail "$name: no rate in the throughput run's output: $out"
    record "$name" bytes_per_s "$rate"
    # Both daemons' CPU seconds for the run, per GiB moved.
    record "$name" daemons_cpu_s_per_gib "$(awk -v t=$(( $(ticks "${PID[$tx]}") + $(ticks "${PID[$rx]}") - c0 )) -v b="$5" \
        'BEGIN { printf "%.2f", t / 100 / (b / 1073741824) }')"
}

# socat_run NAME tls|tcp SIZE BYTES: the same bytes, SIZE a write, through socat, file to
# file, timed by the receiver's log (Tests/Lab/bench/socat_log_rate.py).
socat_run() {
    local name=$1 size=$3 bytes=$4 listen connect rx i
    head -c "$bytes" /dev/urandom >"$work/data.bin"
    if [ "$2" = tls ]; then
        listen="OPENSSL-LISTEN:47711,bind=127.0.0.1,reuseaddr,cert=$work/srv.pem,cafile=$work/cli.crt,verify=1"
        connect="OPENSSL:127.0.0.1:47711,cert=$work/cli.pem,verify=0"
    else
        listen="TCP-LISTEN:47711,bind=127.0.0.1,reuseaddr"
        connect="TCP:127.0.0.1:47711"
    fi
    : >"$work/socat.log"
    # Each socat under bash's `time`, for its CPU seconds.
    ( TIMEFORMAT='%3U %3S'; time socat -d -d -lu -u -b "$size" "$listen" OPEN:"$work/rx.bin",creat,trunc \
        >"$work/socat.log" 2>&1 ) 2>"$work/socat-rx.cpu" &
    rx=$!
    for i in $(seq 100); do grep -q "listening on" "$work/socat.log" && break; sleep 0.05; done
    grep -q "listening on" "$work/socat.log" || fail "$name: socat did not listen: $(cat "$work/socat.log")"
    { TIMEFORMAT='%3U %3S'; time socat -u -b "$size" OPEN:"$work/data.bin" "$connect" 2>"$work/socat-tx.log"; } \
        2>"$work/socat-tx.cpu" || fail "$name: the socat sender failed: $(cat "$work/socat-tx.log")"
    wait "$rx" || fail "$name: the socat receiver failed: $(cat "$work/socat.log")"
    # Both socat processes' CPU.
    record "$name" cpu_s_per_gib "$(awk -v a="$(cpu_per_gib "$work/socat-rx.cpu" "$bytes")" -v b="$(cpu_per_gib "$work/socat-tx.cpu" "$bytes")" \
        'BEGIN { printf "%.2f", a + b }')"
    cmp -s "$work/data.bin" "$work/rx.bin" || fail "$name: socat's copy differs from what it was given"
    [ "$2" = tcp ] || grep -q "SSL proto version used: TLSv1.3" "$work/socat.log" || fail "$name: socat did not use TLS 1.3"
    local rate
    rate=$(python3 "$REPO/Tests/Lab/bench/socat_log_rate.py" "$work/socat.log" "$bytes" "$size") \
        || fail "$name: socat's log: $rate"
    [ -n "${rate#* }" ] || fail "$name: no rate from socat's log"
    record "$name" bytes_per_s "${rate#* }"
    rm -f "$work/rx.bin" "$work/data.bin"
}

for run in $(seq "$REPEAT"); do
    for size in 1024 65536; do
        bytes=$BYTES_1K; tag=1k
        [ "$size" = 1024 ] || { bytes=$BYTES_64K; tag=64k; }
        note "run $run of $REPEAT, $tag messages: ours (TLS), socat TLS, ours (none), socat TCP"
        ours "ours_tls_$tag" b a "$size" "$bytes"
        socat_run "socat_tls_$tag" tls "$size" "$bytes"
        ours "ours_plain_$tag" d c "$size" "$bytes"
        socat_run "socat_tcp_$tag" tcp "$size" "$bytes"
    done
done

# rtt_line NAME OUTPUT KEY: a value from peer-tool.py's RTT line.
rtt_value() { sed -n "s/.* $2=\([0-9.]*\).*/\1/p" <<<"$1"; }
note "round trips of 64 bytes: through the streams, through peer.send and events, a socat TLS echo"
STREAM_RTT=$(python3 -u "$TOOL" stream-rtt --a "$work/a.sock" --a-id "${ID[a]}" --b "$work/b.sock" --b-id "${ID[b]}" \
    --count "$RTT_N") || fail "the round trips through the streams failed: $STREAM_RTT"
RPC_RTT=$(python3 -u "$TOOL" rtt --a "$work/a.sock" --a-id "${ID[a]}" --b "$work/b.sock" --b-id "${ID[b]}" \
    --count $(( RTT_N / 4 ))) || fail "the round trips through peer.send failed: $RPC_RTT"
socat -d -d -lu "OPENSSL-LISTEN:47712,bind=127.0.0.1,reuseaddr,fork,cert=$work/srv.pem,cafile=$work/cli.crt,verify=1" PIPE \
    >"$work/echo.log" 2>&1 &
pids+=($!)
for i in $(seq 100); do grep -q "listening on" "$work/echo.log" && break; sleep 0.05; done
grep -q "listening on" "$work/echo.log" || fail "the socat echo server did not listen: $(cat "$work/echo.log")"
ECHO_RTT=$(python3 -u "$TOOL" tls-echo-rtt --to 127.0.0.1:47712 --cert "$work/cli.crt" --key "$work/cli.key" \
    --count "$RTT_N") || fail "the TLS echo's round trips failed: $ECHO_RTT"
grep -q "version=TLSv1.3" <<<"$ECHO_RTT" || fail "the echo did not run over TLS 1.3: $ECHO_RTT"
# The same path as ours with socat in place of the daemons: client -> socat -> TLS -> socat ->
# client and back (two Unix stream sockets; the far socat listens for its client once the TLS
# connection is up).
socat -d -d -lu "OPENSSL-LISTEN:47713,bind=127.0.0.1,reuseaddr,nodelay,cert=$work/srv.pem,cafile=$work/cli.crt,verify=1" \
    "UNIX-LISTEN:$work/relay-b.sock" >"$work/relay-b.log" 2>&1 &
pids+=($!)
for i in $(seq 100); do grep -q "listening on" "$work/relay-b.log" && break; sleep 0.05; done
grep -q "listening on" "$work/relay-b.log" || fail "the far socat relay did not listen: $(cat "$work/relay-b.log")"
socat -d -d -lu "UNIX-LISTEN:$work/relay-a.sock" "OPENSSL:127.0.0.1:47713,nodelay,cert=$work/cli.pem,verify=0" \
    >"$work/relay-a.log" 2>&1 &
pids+=($!)
for i in $(seq 100); do [ -S "$work/relay-a.sock" ] && break; sleep 0.05; done
[ -S "$work/relay-a.sock" ] || fail "the near socat relay did not listen: $(cat "$work/relay-a.log")"
RELAY_RTT=$(python3 -u "$TOOL" relay-rtt --a "$work/relay-a.sock" --b "$work/relay-b.sock" --count "$RTT_N") \
    || fail "the round trips through two socat relays failed: $RELAY_RTT $(cat "$work/relay-a.log" "$work/relay-b.log")"
grep -q "SSL proto version used: TLSv1.3" "$work/relay-b.log" || fail "the relays did not use TLS 1.3: $(cat "$work/relay-b.log")"

note "unreliable messages b -> a while a byte stream of $BULK bytes goes b -> a"
pl a peer accept-stream --peer "${ID[b]}" --wait 60 >/dev/null 2>"$work/read.log" &
reader=$!
head -c "$BULK" /dev/zero | pl b peer open-stream "${ID[a]}" bulk 2>"$work/open.log" &
writer=$!
UNRELIABLE=$(python3 -u "$TOOL" unreliable-latency --send "$work/b.sock" --recv "$work/a.sock" --to "${ID[a]}" \
    --while-pid "$writer") || fail "the unreliable messages failed: $UNRELIABLE"
wait "$writer" || fail "the byte stream failed: $(cat "$work/open.log")"
wait "$reader" || fail "the byte stream's reader failed: $(cat "$work/read.log")"
DROPPED_BY_DAEMON=$(pl b --json peer sessions | python3 -c 'import json, sys; print(json.load(sys.stdin)["sessions"][0]["dropped_datagrams"])')

note "memory: a hub daemon with 0, then 8 sessions"
daemon hub 47640 required
RSS0=$(rss_mb "${PID[hub]}")
for i in 1 2 3 4 5 6 7 8; do
    daemon "s$i" off required
    pl "s$i" peer connect 127.0.0.1:47640 >/dev/null || fail "spoke $i could not connect to the hub"
done
[ "$(pl hub --json peer sessions | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["sessions"]))')" = 8 ] \
    || fail "the hub does not have 8 sessions"
pl hub peer send "to all eight" >/dev/null || fail "the hub could not send to all eight"
sleep 1
RSS8=$(rss_mb "${PID[hub]}")

ratio() { awk -v a="$(m "$1" bytes_per_s)" -v b="$(m "$2" bytes_per_s)" 'BEGIN { printf "%.3f", a / b }'; }
cpu_ratio() { awk -v a="$(m "$1" daemons_cpu_s_per_gib)" -v b="$(m "$2" cpu_s_per_gib)" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
mkdir -p "$(dirname "$OUT")"
{
    echo "bench peer_host.repeat=$REPEAT"
    echo "bench peer_host.cores=$(nproc)"
    for tag in 1k 64k; do
        for name in ours_tls socat_tls ours_plain socat_tcp; do
            echo "bench peer_host.${name}_$tag.bytes_per_s=$(m "${name}_$tag" bytes_per_s)"
            echo "bench peer_host.${name}_$tag.bytes_per_s_each_run=$(each_run "${name}_$tag" bytes_per_s)"
        done
        for name in ours_tls ours_plain; do
            echo "bench peer_host.${name}_$tag.daemons_cpu_s_per_gib=$(m "${name}_$tag" daemons_cpu_s_per_gib)"
            echo "bench peer_host.${name}_$tag.client_cpu_s_per_gib=$(m "${name}_$tag" client_cpu_s_per_gib)"
        done
        for name in socat_tls socat_tcp; do
            echo "bench peer_host.${name}_$tag.cpu_s_per_gib=$(m "${name}_$tag" cpu_s_per_gib)"
        done
        echo "bench peer_host.ratio_tls_vs_socat_tls_$tag=$(ratio "ours_tls_$tag" "socat_tls_$tag")"
        echo "bench peer_host.ratio_plain_vs_socat_tcp_$tag=$(ratio "ours_plain_$tag" "socat_tcp_$tag")"
        # CPU a GiB, both daemons over both socat processes: the work each does for the same
        # bytes, whatever the clients at our ends took from the shared cores.
        echo "bench peer_host.cpu_ratio_daemons_vs_socat_tls_$tag=$(cpu_ratio "ours_tls_$tag" "socat_tls_$tag")"
        echo "bench peer_host.cpu_ratio_daemons_vs_socat_tcp_$tag=$(cpu_ratio "ours_plain_$tag" "socat_tcp_$tag")"
    done
    for k in p50_ms p99_ms; do
        echo "bench peer_host.rtt_ours_$k=$(rtt_value "$STREAM_RTT" $k)"
        echo "bench peer_host.rtt_ours_rpc_$k=$(rtt_value "$RPC_RTT" $k)"
        echo "bench peer_host.rtt_socat_tls_echo_$k=$(rtt_value "$ECHO_RTT" $k)"
        echo "bench peer_host.rtt_socat_tls_relays_$k=$(rtt_value "$RELAY_RTT" $k)"
    done
    echo "bench peer_host.rtt_p50_ratio_vs_echo=$(awk -v a="$(rtt_value "$STREAM_RTT" p50_ms)" \
        -v b="$(rtt_value "$ECHO_RTT" p50_ms)" 'BEGIN { printf "%.2f", a / b }')"
    echo "bench peer_host.rtt_p50_ratio_vs_relays=$(awk -v a="$(rtt_value "$STREAM_RTT" p50_ms)" \
        -v b="$(rtt_value "$RELAY_RTT" p50_ms)" 'BEGIN { printf "%.2f", a / b }')"
    for k in sent received dropped drop_rate p50_ms p99_ms max_ms; do
        echo "bench peer_host.unreliable_during_bulk.$k=$(sed -n "s/.* $k=\([0-9.]*\).*/\1/p" <<<" $UNRELIABLE")"
    done
    echo "bench peer_host.unreliable_during_bulk.dropped_by_sender=$DROPPED_BY_DAEMON"
    echo "bench peer_host.hub_rss_mb_0_peers=$RSS0"
    echo "bench peer_host.hub_rss_mb_8_peers=$RSS8"
} | tee "$OUT"
