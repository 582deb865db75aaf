#!/bin/bash
# timeout: 900
# Benchmark (make bench): peer sessions between two daemons on the guest's loopback, against
# socat moving the same bytes.
#
# Throughput of reliable messages, 1 KiB and 64 KiB, through the data streams: a client opens
# peer.message-stream on both daemons and writes numbered messages, one packet each, into b's
# stream to a while another thread reads a's stream (peer-tool.py stream-throughput), from the
# first write to the last message read, each checked in order and unchanged.
#   - ours_tls: both daemons peer.encryption = required (TLS 1.3);
#   - socat_tls_baseline: the same bytes from `socat -u -b SIZE OPEN:file OPENSSL:...` (client
#     certificate; SIZE bytes a write, as the messages) to `socat -u OPENSSL-LISTEN:...,verify=1
#     OPEN:file`, timed by the receiver's own log from "starting data transfer loop" (after the
#     handshake) to EOF;
#   - ours_plain / socat_tcp_baseline: the same with peer.encryption = none on both daemons,
#     against socat over plain TCP;
#   - ours_tls_rpc (beside, no target): the same messages as peer.send requests (JSON, base64,
#     32 in flight) counted as peer.message events (peer-tool.py throughput): what a client
#     that does not use the stream gets.
# Round trip of a 64-byte message: client -> a -> b -> client, back through b -> a -> client,
# through the streams (peer-tool.py stream-rtt; also through peer.send and events, beside),
# p50/p99, against a 64-byte echo through a socat TLS echo server (OPENSSL-LISTEN ... PIPE,
# Python's ssl client with a certificate).
# Across a veth pair (two network namespaces, n2 -> n1, TLS): the same throughput runs against
# socat with TLS between the same namespaces, and the round trip against the echo there.
# Memory: the RSS of a daemon holding 8 sessions (8 more daemons dial it).
# Each throughput run repeats BENCH_REPEAT times (3), ours and the baselines interleaved; the
# bench lines carry the medians. No timing assertions: it fails only when a measurement could
# not be made.
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/peer-lib.sh"
. "$LAB_DIR/bench/benchlib.sh"
require_peerlink
command -v socat >/dev/null || fail "socat not installed"
REPEAT=${BENCH_REPEAT:-3}
BYTES_1K=${BENCH_PEER_BYTES_1K:-1048576}      # 1,024 messages of 1 KiB
BYTES_64K=${BENCH_PEER_BYTES_64K:-8388608}    # 128 messages of 64 KiB
RTT_N=${BENCH_PEER_RTT:-200}
export PL_TIMEOUT=300

W=/dev/shm/peer-bench
rm -rf "$W"; mkdir -p "$W"
socat_certs "$W"

peer_define a hci0 - peer.name=bench-a peer.listen=loopback peer.port=7401 peer.accept=all
peer_define b hci1 - peer.name=bench-b peer.listen=loopback peer.port=7402
peer_define c hci0 - peer.name=bench-c peer.listen=loopback peer.port=7411 peer.accept=all peer.encryption=none
peer_define d hci1 - peer.name=bench-d peer.listen=loopback peer.port=7412 peer.encryption=none
# Across a veth pair (two network namespaces): n2 -> n1 with TLS.
peer_net_pair
peer_define n1 hci2 plpeer1 peer.name=bench-n1 peer.port=7421 peer.accept=all
peer_define n2 hci2 plpeer2 peer.name=bench-n2 peer.port=7422
peer_up a b c d n1 n2
peer_connect b 127.0.0.1:7401
[ "$RUN_RC" = 0 ] && [ "$(jfield encrypted "$RUN_OUT")" = true ] || fail "no TLS session b -> a: $RUN_OUT"
peer_connect d 127.0.0.1:7411
[ "$RUN_RC" = 0 ] && [ "$(jfield encrypted "$RUN_OUT")" = false ] || fail "no plain session d -> c: $RUN_OUT"
peer_connect n2 "$(peer_addr 1):7421"
[ "$RUN_RC" = 0 ] && [ "$(jfield encrypted "$RUN_OUT")" = true ] || fail "no TLS session n2 -> n1 across the veth pair: $RUN_OUT"

# ours NAME SENDER RECEIVER SIZE BYTES: one throughput run through the daemons' data streams.
ours() {
    local name=$1 tx=$2 rx=$3 size=$4 count=$(( $5 / $4 ))
    cpu_mark "$tx=${PEERLINKD_PID[$tx]}" "$rx=${PEERLINKD_PID[$rx]}"
    run timeout --foreground 300 "$PY3" -u "$PEER_TOOL" stream-throughput --send "$(pl_socket "$tx")" --recv "$(pl_socket "$rx")" \
        --to "${PEER_ID[$rx]}" --from-id "${PEER_ID[$tx]}" --size "$size" --count "$count"
    [ "$RUN_RC" = 0 ] || fail "$name: the throughput run failed: $RUN_OUT"
    cpu_note "$name"
    bench_keep "${name%.*}" "$(sed -n 's/.* rate=\([0-9.]*\).*/\1/p' <<<"$RUN_OUT")" \
        "$(sed -n 's/.* bytes_per_s=\([0-9.]*\).*/\1/p' <<<"$RUN_OUT")" "$count"
}

# ours_rpc NAME SENDER RECEIVER SIZE BYTES: the same as peer.send requests and peer.message events.
ours_rpc() {
    local name=$1 tx=$2 rx=$3 size=$4 count=$(( $5 / $4 ))
    cpu_mark "$tx=${PEERLINKD_PID[$tx]}" "$rx=${PEERLINKD_PID[$rx]}"
    run timeout --foreground 300 "$PY3" -u "$PEER_TOOL" throughput --send "$(pl_socket "$tx")" --recv "$(pl_socket "$rx")" \
        --to "${PEER_ID[$rx]}" --size "$size" --count "$count" --window 32
    [ "$RUN_RC" = 0 ] || fail "$name: the throughput run failed: $RUN_OUT"
    cpu_note "$name"
    bench_keep "${name%.*}" "$(sed -n 's/.* rate=\([0-9.]*\).*/\1/p' <<<"$RUN_OUT")" \
        "$(sed -n 's/.* bytes_per_s=\([0-9.]*\).*/\1/p' <<<"$RUN_OUT")" "$count"
}

# socat_run NAME tls|tcp SIZE BYTES [veth]: the same bytes through socat, timed by the
# receiver's log; with veth, the receiver in plpeer1 and the sender in plpeer2.
socat_run() {
    local name=$1 kind=$2 size=$3 bytes=$4 listen connect log="$LAB_OUT/socat-$1.log" host=127.0.0.1 inrx=() intx=()
    if [ "${5:-}" = veth ]; then host=$(peer_addr 1); inrx=(ip netns exec plpeer1); intx=(ip netns exec plpeer2); fi
    head -c "$bytes" /dev/urandom >"$W/data.bin"
    if [ "$kind" = tls ]; then
        listen="OPENSSL-LISTEN:7501,reuseaddr,cert=$W/srv.pem,cafile=$W/cli.crt,verify=1"
        connect="OPENSSL:$host:7501,cert=$W/cli.pem,verify=0"
    else
        listen="TCP-LISTEN:7501,reuseaddr"
        connect="TCP:$host:7501"
    fi
    "${inrx[@]}" socat -d -d -lu -u -b "$size" "$listen" OPEN:"$W/rx.bin",creat,trunc >"$log" 2>&1 &
    local rx=$!
    wait_for 10 grep -q "listening on" "$log" || fail "$name: socat did not listen: $(cat "$log")"
    timeout --foreground 120 "${intx[@]}" socat -u -b "$size" OPEN:"$W/data.bin" "$connect" || fail "$name: the socat sender failed"
    wait "$rx" || fail "$name: the socat receiver failed: $(cat "$log")"
    [ "$(stat -c %s "$W/rx.bin")" = "$bytes" ] || fail "$name: socat moved $(stat -c %s "$W/rx.bin") of $bytes bytes"
    [ "$kind" = tcp ] || grep -q "SSL proto version used: TLSv1.3" "$log" || fail "$name: socat did not use TLS 1.3: $(cat "$log")"
    "$PY3" "$LAB_DIR/bench/socat_log_rate.py" "$log" "$bytes" "$size" >"$W/socat.out" || fail "$name: socat's log: $(cat "$log")"
    read -r r b <"$W/socat.out"
    note "$name: $bytes bytes in $(awk -v b="$bytes" -v r="$b" 'BEGIN { printf "%.3f", b / r }') s"
    bench_keep "${name%.*}" "$r" "$b" "$(( bytes / size ))"
}

declare -A RATE BPS READ
for rep in $(seq 1 "$REPEAT"); do
    note "---- repetition $rep of $REPEAT"
    for size in 1024 65536; do
        bytes=$BYTES_1K; tag=1k
        [ "$size" = 1024 ] || { bytes=$BYTES_64K; tag=64k; }
        COUNT=$(( bytes / size ))
        ours "ours_tls_$tag.$rep" b a "$size" "$bytes"
        socat_run "socat_tls_baseline_$tag.$rep" tls "$size" "$bytes"
        ours "ours_plain_$tag.$rep" d c "$size" "$bytes"
        socat_run "socat_tcp_baseline_$tag.$rep" tcp "$size" "$bytes"
        ours_rpc "ours_tls_rpc_$tag.$rep" b a "$size" "$bytes"
        ours "ours_tls_veth_$tag.$rep" n2 n1 "$size" "$bytes"
        socat_run "socat_tls_veth_baseline_$tag.$rep" tls "$size" "$bytes" veth
    done
done
# One table per size (the ratios against both socat baselines).
for tag in 1k 64k; do
    ORDER=()
    for n in ours_tls socat_tls_baseline ours_plain socat_tcp_baseline ours_tls_rpc ours_tls_veth socat_tls_veth_baseline; do ORDER+=("${n}_$tag"); done
    COUNT=$(( $( [ $tag = 1k ] && echo "$BYTES_1K" || echo "$BYTES_64K") / $( [ $tag = 1k ] && echo 1024 || echo 65536) ))
    bench_report "peer_$tag"
    "$PY3" - "$tag" "${BPS[ours_tls_$tag]}" "${BPS[socat_tls_baseline_$tag]}" "${BPS[ours_plain_$tag]}" "${BPS[socat_tcp_baseline_$tag]}" \
        "${BPS[ours_tls_veth_$tag]}" "${BPS[socat_tls_veth_baseline_$tag]}" <<'PY'
import sys
tag, ours_tls, socat_tls, ours_plain, socat_tcp, ours_veth, socat_veth = sys.argv[1], *map(float, sys.argv[2:])
print(f"bench peer.ratio_tls_vs_socat_{tag}={ours_tls / socat_tls:.3f}")
print(f"bench peer.ratio_plain_vs_socat_tcp_{tag}={ours_plain / socat_tcp:.3f}")
print(f"bench peer.ratio_tls_vs_socat_veth_{tag}={ours_veth / socat_veth:.3f}")
PY
done

note "round trips of 64 bytes: client -> a -> b -> client -> b -> a -> client, through the streams"
run timeout --foreground 300 "$PY3" -u "$PEER_TOOL" stream-rtt --a "$(pl_socket a)" --a-id "${PEER_ID[a]}" \
    --b "$(pl_socket b)" --b-id "${PEER_ID[b]}" --count "$RTT_N"
[ "$RUN_RC" = 0 ] || fail "the round-trip run failed: $RUN_OUT"
OURS_STREAM_RTT=$RUN_OUT
note "the same through peer.send and peer.message events"
run timeout --foreground 300 "$PY3" -u "$PEER_TOOL" rtt --a "$(pl_socket a)" --a-id "${PEER_ID[a]}" \
    --b "$(pl_socket b)" --b-id "${PEER_ID[b]}" --count "$RTT_N"
[ "$RUN_RC" = 0 ] || fail "the round-trip run failed: $RUN_OUT"
OURS_RTT=$RUN_OUT
socat -d -d -lu "OPENSSL-LISTEN:7502,reuseaddr,fork,cert=$W/srv.pem,cafile=$W/cli.crt,verify=1" PIPE >"$LAB_OUT/socat-echo.log" 2>&1 &
_LIB_PIDS+=("$!")
wait_for 10 grep -q "listening on" "$LAB_OUT/socat-echo.log" || fail "the socat echo server did not listen"
run timeout --foreground 300 "$PY3" -u "$PEER_TOOL" tls-echo-rtt --to 127.0.0.1:7502 --cert "$W/cli.crt" --key "$W/cli.key" --count "$RTT_N"
[ "$RUN_RC" = 0 ] || fail "the TLS echo run failed: $RUN_OUT"
assert_contains "$RUN_OUT" "version=TLSv1.3" "the echo ran over TLS 1.3"
ECHO_RTT=$RUN_OUT
note "the same across the veth pair: ours n1 <-> n2, the echo server in plpeer1 and its client in plpeer2"
run timeout --foreground 300 "$PY3" -u "$PEER_TOOL" stream-rtt --a "$(pl_socket n1)" --a-id "${PEER_ID[n1]}" \
    --b "$(pl_socket n2)" --b-id "${PEER_ID[n2]}" --count "$RTT_N"
[ "$RUN_RC" = 0 ] || fail "the round trips across the veth pair failed: $RUN_OUT"
OURS_VETH_RTT=$RUN_OUT
ip netns exec plpeer1 socat -d -d -lu "OPENSSL-LISTEN:7503,reuseaddr,fork,cert=$W/srv.pem,cafile=$W/cli.crt,verify=1" PIPE \
    >"$LAB_OUT/socat-echo-veth.log" 2>&1 &
_LIB_PIDS+=("$!")
wait_for 10 grep -q "listening on" "$LAB_OUT/socat-echo-veth.log" || fail "the socat echo server in plpeer1 did not listen"
run timeout --foreground 300 ip netns exec plpeer2 "$PY3" -u "$PEER_TOOL" tls-echo-rtt --to "$(peer_addr 1):7503" \
    --cert "$W/cli.crt" --key "$W/cli.key" --count "$RTT_N"
[ "$RUN_RC" = 0 ] || fail "the TLS echo across the veth pair failed: $RUN_OUT"
ECHO_VETH_RTT=$RUN_OUT
for k in p50_ms p99_ms; do
    echo "bench peer.rtt_ours_$k=$(sed -n "s/.* $k=\([0-9.]*\).*/\1/p" <<<"$OURS_STREAM_RTT")"
    echo "bench peer.rtt_ours_rpc_$k=$(sed -n "s/.* $k=\([0-9.]*\).*/\1/p" <<<"$OURS_RTT")"
    echo "bench peer.rtt_socat_tls_echo_$k=$(sed -n "s/.* $k=\([0-9.]*\).*/\1/p" <<<"$ECHO_RTT")"
    echo "bench peer.rtt_ours_veth_$k=$(sed -n "s/.* $k=\([0-9.]*\).*/\1/p" <<<"$OURS_VETH_RTT")"
    echo "bench peer.rtt_socat_tls_echo_veth_$k=$(sed -n "s/.* $k=\([0-9.]*\).*/\1/p" <<<"$ECHO_VETH_RTT")"
done

note "memory: a hub daemon with 8 sessions"
peer_define hub hci2 - peer.name=bench-hub peer.listen=loopback peer.port=7420 peer.accept=all
SPOKES=()
for i in 1 2 3 4 5 6 7 8; do
    peer_define "s$i" "hci$(( i % 3 ))" - peer.name="spoke-$i" peer.listen=off
    SPOKES+=("s$i")
done
peer_up hub "${SPOKES[@]}"
RSS0=$(rss_kb "${PEERLINKD_PID[hub]}")
for s in "${SPOKES[@]}"; do
    peer_connect "$s" 127.0.0.1:7420
    [ "$RUN_RC" = 0 ] || fail "$s could not connect to the hub: $RUN_OUT"
done
[ "$(peer_sessions hub | wc -l)" = 8 ] || fail "the hub does not have 8 sessions: $(peer_sessions hub)"
expect_rc 0 pl hub peer send "to all eight"
for s in "${SPOKES[@]}"; do need_event 30 "$s" peer.message "$(printf 'to all eight' | base64 -w0)"; done
RSS8=$(rss_kb "${PEERLINKD_PID[hub]}")
echo "bench peer.hub_rss_mb_0_peers=$(awk -v k="$RSS0" 'BEGIN { printf "%.1f", k / 1024 }')"
echo "bench peer.hub_rss_mb_8_peers=$(awk -v k="$RSS8" 'BEGIN { printf "%.1f", k / 1024 }')"
peer_net_cleanup
note "peer bench done"
