#!/bin/bash
# timeout: 3000
# Benchmark (make bench): a resource of BENCH_TRANSFER_BYTES (default 1 GiB) of random bytes
# sent with `peerlink peer send-file` between two daemons, against socat copying the same
# file on the same path (-b 65536, file to file), in one run:
#   - on the guest's loopback: ours with TLS (peer.encryption = required) against socat with
#     OPENSSL: on both ends (a client certificate, verify=1) and against raw TCP socat; ours
#     with encryption = none against raw TCP socat;
#   - across a veth pair (two network namespaces): ours with TLS against socat with TLS;
#   - the same bytes as a byte stream (peer open-stream / accept-stream, TLS, loopback):
#     the session's own speed, without the hashing and the inbox, against socat with TLS.
# Ours is timed from the command to its exit, once the receiver verified the file: the
# sender's hashing (once, before the offer) and the receiver's (as the bytes arrive) are in
# it. socat's time is its sender's, from start to exit. Each received file is checked with
# sha256sum. Beside: the round trip of a 64-byte message through the same session while the
# TLS transfer runs (peer-tool.py stream-rtt, p50/p99), each daemon's largest RSS sampled
# every 0.5 s, and its CPU seconds per GiB. Bytes re-sent after a kill at half way are
# measured by lab scenario 69-peer-resume (the kernel's qdisc counters). No timing
# assertions: it fails only when a measurement could not be made.
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/peer-lib.sh"
. "$LAB_DIR/bench/benchlib.sh"
require_peerlink
command -v socat >/dev/null || fail "socat not installed"
BYTES=${BENCH_TRANSFER_BYTES:-1073741824}
export PL_TIMEOUT=1200
# The file in /dev/shm, what arrives in /var/tmp: two tmpfs of half the guest's memory each
# (make bench boots it with LAB_MEMORY=4G).
W=/dev/shm/transfer-bench R=/var/tmp/transfer-bench
rm -rf "$W" "$R"; mkdir -p "$W" "$R/in-a" "$R/in-c" "$R/in-n1"
socat_certs "$W"
note "$BYTES random bytes"
head -c "$BYTES" /dev/urandom >"$W/data.bin" || fail "cannot make the file (memory: LAB_MEMORY)"
SUM=$(sha256sum <"$W/data.bin" | cut -d' ' -f1)

peer_net_pair
COMMON=(peer.accept=all peer.accept_resources=all peer.max_resource_bytes=8G)
peer_define a hci0 - peer.name=tx-a peer.listen=loopback peer.port=7601 "${COMMON[@]}" peer.inbox_dir=$R/in-a
peer_define b hci1 - peer.name=tx-b peer.listen=loopback peer.port=7602 "${COMMON[@]}"
peer_define c hci0 - peer.name=tx-c peer.listen=loopback peer.port=7611 "${COMMON[@]}" peer.encryption=none peer.inbox_dir=$R/in-c
peer_define d hci1 - peer.name=tx-d peer.listen=loopback peer.port=7612 "${COMMON[@]}" peer.encryption=none
peer_define n1 hci2 plpeer1 peer.name=tx-n1 peer.port=7621 "${COMMON[@]}" peer.inbox_dir=$R/in-n1
peer_define n2 hci2 plpeer2 peer.name=tx-n2 peer.port=7622 "${COMMON[@]}"
peer_up a b c d n1 n2
peer_connect b 127.0.0.1:7601; [ "$RUN_RC" = 0 ] || fail "no session b -> a: $RUN_OUT"
peer_connect d 127.0.0.1:7611; [ "$RUN_RC" = 0 ] || fail "no session d -> c: $RUN_OUT"
peer_connect n2 "$(peer_addr 1):7621"; [ "$RUN_RC" = 0 ] || fail "no session n2 -> n1: $RUN_OUT"

# seconds_since START_NS: elapsed seconds, 3 decimals.
seconds_since() { awk -v a="$1" -v b="$(date +%s%N)" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }
# rss_watch PID...: samples each PID's RSS every 0.5 s into $W/rss-PID until rss_stop.
rss_watch() {
    ( while :; do for p in "$@"; do rss_kb "$p" >>"$W/rss-$p"; done; sleep 0.5; done ) &
    RSS_WATCH=$!
}
rss_stop() { kill "$RSS_WATCH" 2>/dev/null; wait "$RSS_WATCH" 2>/dev/null; }
rss_max_mb() { sort -n "$W/rss-$1" | tail -n 1 | awk '{ printf "%.1f", $1 / 1024 }'; }

declare -A SECS
# ours NAME SENDER RECEIVER INBOX [DURING]: one transfer; SECS[NAME], CPU and RSS noted. DURING
# (a function) runs once the receiver reports the bytes flowing, while they flow.
ours() {
    local name=$1 tx=$2 rx=$3 inbox=$4 during=${5:-} t0 ptx=${PEERLINKD_PID[$2]} prx=${PEERLINKD_PID[$3]} c0tx c0rx pid
    rm -f "$W/rss-$ptx" "$W/rss-$prx"
    c0tx=$(_ticks "$ptx"); c0rx=$(_ticks "$prx")
    rss_watch "$ptx" "$prx"
    t0=$(date +%s%N)
    spawn "send-$name" pl "$tx" peer send-file "$W/data.bin" --to "${PEER_ID[$rx]}" --name "$name.bin"
    pid=$SPAWN_PID
    if [ -n "$during" ]; then
        started_or_gone() { event_lines "$rx" peer.resource-started "\"name\":\"$name.bin\"" >/dev/null || ! kill -0 "$pid" 2>/dev/null; }
        wait_for 600 started_or_gone
        kill -0 "$pid" 2>/dev/null || fail "$name: send-file ended before the bytes flowed: $(cat "$(log_of "send-$name")")"
        $during
    fi
    wait "$pid"; RUN_RC=$?
    SECS[$name]=$(seconds_since "$t0")
    rss_stop
    [ "$RUN_RC" = 0 ] || fail "$name: send-file failed: $(cat "$(log_of "send-$name")")"
    assert_eq "$(sha256sum <"$inbox/$name.bin" | cut -d' ' -f1)" "$SUM" "$name: sha256sum of the received file"
    rm -f "$inbox/$name.bin"
    local gib
    gib=$(awk -v b="$BYTES" 'BEGIN { print b / 1073741824 }')
    echo "bench peer_transfer.$name.seconds=${SECS[$name]}"
    echo "bench peer_transfer.$name.cpu_s_per_gib_sender=$(awk -v t=$(( $(_ticks "$ptx") - c0tx )) -v g="$gib" 'BEGIN { printf "%.2f", t / 100 / g }')"
    echo "bench peer_transfer.$name.cpu_s_per_gib_receiver=$(awk -v t=$(( $(_ticks "$prx") - c0rx )) -v g="$gib" 'BEGIN { printf "%.2f", t / 100 / g }')"
    echo "bench peer_transfer.$name.rss_mb_sender=$(rss_max_mb "$ptx")"
    echo "bench peer_transfer.$name.rss_mb_receiver=$(rss_max_mb "$prx")"
}

# ours_stream NAME SENDER RECEIVER: the same bytes as a byte stream (peer open-stream into
# peer accept-stream --to): the session alone, without hashing or the inbox; SECS[NAME].
ours_stream() {
    local name=$1 tx=$2 rx=$3 t0 reader
    rm -f "$R/$name.bin"
    spawn "read-$name" pl "$rx" peer accept-stream --peer "${PEER_ID[$tx]}" --wait 600 --to "$R/$name.bin"
    reader=$SPAWN_PID
    t0=$(date +%s%N)
    run pl "$tx" peer open-stream "${PEER_ID[$rx]}" "$name" --from "$W/data.bin"
    SECS[$name]=$(seconds_since "$t0")
    [ "$RUN_RC" = 0 ] || fail "$name: open-stream failed: $RUN_OUT"
    wait "$reader" || fail "$name: accept-stream failed: $(cat "$(log_of "read-$name")")"
    assert_eq "$(sha256sum <"$R/$name.bin" | cut -d' ' -f1)" "$SUM" "$name: sha256sum of the stream's copy"
    rm -f "$R/$name.bin"
    echo "bench peer_transfer.$name.seconds=${SECS[$name]}"
}

# socat_run NAME tls|tcp [NS1 NS2]: the same file through socat (in those namespaces: the
# receiver in NS1 at 10.77.0.1); SECS[NAME].
socat_run() {
    local name=$1 kind=$2 host=127.0.0.1 inrx=() intx=() listen connect log="$LAB_OUT/socat-$1.log" t0
    if [ -n "${3:-}" ]; then host=$(peer_addr 1); inrx=(ip netns exec "$3"); intx=(ip netns exec "$4"); fi
    if [ "$kind" = tls ]; then
        listen="OPENSSL-LISTEN:7701,reuseaddr,cert=$W/srv.pem,cafile=$W/cli.crt,verify=1"
        connect="OPENSSL:$host:7701,cert=$W/cli.pem,verify=0"
    else
        listen="TCP-LISTEN:7701,reuseaddr"
        connect="TCP:$host:7701"
    fi
    rm -f "$R/rx.bin"
    "${inrx[@]}" socat -d -d -lu -u -b 65536 "$listen" OPEN:"$R/rx.bin",creat,trunc >"$log" 2>&1 &
    local rx=$!
    wait_for 10 grep -q "listening on" "$log" || fail "$name: socat did not listen: $(cat "$log")"
    t0=$(date +%s%N)
    timeout --foreground 1200 "${intx[@]}" socat -u -b 65536 OPEN:"$W/data.bin" "$connect" || fail "$name: the socat sender failed"
    wait "$rx" || fail "$name: the socat receiver failed: $(cat "$log")"
    SECS[$name]=$(seconds_since "$t0")
    [ "$kind" = tcp ] || grep -q "SSL proto version used: TLSv1.3" "$log" || fail "$name: socat did not use TLS 1.3: $(cat "$log")"
    assert_eq "$(sha256sum <"$R/rx.bin" | cut -d' ' -f1)" "$SUM" "$name: sha256sum of socat's copy"
    rm -f "$R/rx.bin"
    echo "bench peer_transfer.$name.seconds=${SECS[$name]}"
}

note "loopback: TLS, with the round trip of 64-byte messages on the same session meanwhile"
RTT=
rtt_during() {
    run timeout --foreground 300 "$PY3" -u "$PEER_TOOL" stream-rtt --a "$(pl_socket a)" --a-id "${PEER_ID[a]}" \
        --b "$(pl_socket b)" --b-id "${PEER_ID[b]}" --count 200
    [ "$RUN_RC" = 0 ] || fail "the round trips during the transfer failed: $RUN_OUT"
    RTT=$RUN_OUT
    event_count a peer.resource-received '"name":"ours_tls.bin"' | grep -q '^0$' \
        || note "the transfer ended before the 200 round trips did: they were not all during it"
}
ours ours_tls b a "$R/in-a" rtt_during
note "round trips during the transfer: $RTT"
socat_run socat_tls tls
socat_run socat_tcp tcp
note "loopback: the same bytes as a byte stream (TLS), timed until the reader has them all"
ours_stream ours_stream_tls b a
note "loopback: encryption = none"
ours ours_plain d c "$R/in-c"
note "across the veth pair: TLS"
ours ours_tls_veth n2 n1 "$R/in-n1"
socat_run socat_tls_veth tls plpeer1 plpeer2

ratio() { awk -v a="${SECS[$2]}" -v b="${SECS[$1]}" 'BEGIN { printf "%.3f", a / b }'; }
echo "bench peer_transfer.bytes=$BYTES"
echo "bench peer_transfer.ratio_tls_vs_socat_tls=$(ratio ours_tls socat_tls)"
echo "bench peer_transfer.ratio_tls_vs_socat_tcp=$(ratio ours_tls socat_tcp)"
echo "bench peer_transfer.ratio_stream_tls_vs_socat_tls=$(ratio ours_stream_tls socat_tls)"
echo "bench peer_transfer.ratio_plain_vs_socat_tcp=$(ratio ours_plain socat_tcp)"
echo "bench peer_transfer.ratio_tls_vs_socat_tls_veth=$(ratio ours_tls_veth socat_tls_veth)"
for k in p50_ms p99_ms; do
    echo "bench peer_transfer.rtt_during_tls_$k=$(sed -n "s/.* $k=\([0-9.]*\).*/\1/p" <<<"$RTT")"
done
peer_net_cleanup
rm -rf "$W" "$R"
note "transfer bench done"
