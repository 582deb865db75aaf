#!/bin/bash
# Benchmark (make bench): DNS-SD through peerlinkd against Avahi's own tools, in one guest.
#
# publish_to_resolved_ms: from the start of a publish in one daemon (`peerlink dnssd
#   publish` on a) to a browse with --resolve in the other daemon (b, started beforehand)
#   printing the resolved service; median of N (20). Baseline, interleaved run by run:
#   `avahi-publish -s` to a running `avahi-browse -r -p`. Both sides start a process for
#   the publish and are detected the same way (polling the browser's output file), so
#   the overheads match; the floor is Avahi's own probing (about 750 ms + random delay).
# resolve_cached_ms: `dnssd.resolve` of a service avahi-daemon has in its cache, as timed
#   by peerlinkd (request in to answer out, the `elapsed_ms` it reports); median of N.
#   The CLI's wall time per call (process start included) is printed as a note.
# Prints:
#   bench dnssd.publish_to_resolved_ms ours=<median> baseline=<median> ratio=<ours/baseline>
#   bench dnssd.resolve_cached_ms ours=<median> target=5
# No timing assertions: it fails only when a measurement could not be made.
# timeout: 600
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/dnssd-lib.sh"
require_peerlink
N=${BENCH_DNSSD_N:-20}
export PL_TIMEOUT=590

# wait_line FILE TEXT [SECONDS]: poll FILE until it contains TEXT; print the time (ms) seen.
wait_line() {
    local deadline=$(( $(now_ms) + ${3:-20} * 1000 ))
    while :; do
        if grep -qF -- "$2" "$1"; then now_ms; return 0; fi
        [ "$(now_ms)" -lt "$deadline" ] || return 1
        sleep 0.005
    done
}

median() { "$PY3" -c 'import statistics,sys; v=[float(x) for x in sys.argv[1:]]; print(f"{statistics.median(v):.1f}")' "$@"; }

start_peerlinkd a hci0
start_peerlinkd b hci1

OURS_LOG="$LAB_OUT/ours-browse.log"
AV_LOG="$LAB_OUT/avahi-browse.log"
pl b --json dnssd browse _bench-pl._tcp --resolve >"$OURS_LOG" 2>&1 &
_LIB_PIDS+=("$!")
stdbuf -oL avahi-browse -r -p -k _bench-av._tcp >"$AV_LOG" 2>&1 &
_LIB_PIDS+=("$!")
wait_line "$OURS_LOG" '"dnssd.all-for-now"' 20 >/dev/null || fail "peerlink browse did not start: $(cat "$OURS_LOG")"
sleep 1  # let avahi-browse settle too (it prints nothing for an empty type)

ours=(); base=()
for i in $(seq "$N"); do
    # ours: publish in a, resolved by b's browse
    t0=$(now_ms)
    pl a dnssd publish "PL Bench $i" _bench-pl._tcp $((9000 + i)) run=$i >"$LAB_OUT/pub-$i.out" 2>&1 &
    pub=$!
    t1=$(wait_line "$OURS_LOG" "\"name\":\"PL Bench $i\",\"port\"" 20) || fail "run $i: b never resolved 'PL Bench $i'"
    wait "$pub" || fail "run $i: publish failed: $(cat "$LAB_OUT/pub-$i.out")"
    ours+=($((t1 - t0)))
    # baseline: avahi-publish, resolved by avahi-browse -r
    t0=$(now_ms)
    avahi-publish -s "AV Bench $i" _bench-av._tcp $((9000 + i)) run=$i >/dev/null 2>&1 &
    apub=$!
    t1=$(wait_line "$AV_LOG" "=;dummy0;IPv4;AV\\032Bench\\032$i;_bench-av._tcp;" 20) || fail "run $i: avahi-browse never resolved 'AV Bench $i'"
    base+=($((t1 - t0)))
    note "run $i: ours ${ours[-1]} ms, baseline ${base[-1]} ms"
    # Keep the last of ours for the cache test; withdraw the rest on both sides.
    [ "$i" -eq "$N" ] || pl a dnssd unpublish "$(head -n1 "$LAB_OUT/pub-$i.out")" >/dev/null
    kill "$apub" 2>/dev/null; wait "$apub" 2>/dev/null
done

cached=(); wall=()
for i in $(seq "$N"); do
    t0=$(now_ms)
    out=$(pl b --json dnssd resolve "PL Bench $N" _bench-pl._tcp) || fail "resolve $i failed: $out"
    t1=$(now_ms)
    cached+=("$(printf '%s' "$out" | "$PY3" -c 'import json,sys; d=json.load(sys.stdin); print(d["elapsed_ms"])')")
    wall+=($((t1 - t0)))
done

# What a process start costs each side (both start one per publish).
pst=(); ast=()
for _ in 1 2 3 4 5; do
    t0=$(now_ms); "$PEERLINK_BIN/peerlink" --version >/dev/null; t1=$(now_ms); pst+=($((t1 - t0)))
    t0=$(now_ms); avahi-publish --version >/dev/null 2>&1; t1=$(now_ms); ast+=($((t1 - t0)))
done
note "process start, median ms: peerlink --version $(median "${pst[@]}"), avahi-publish --version $(median "${ast[@]}")"

om=$(median "${ours[@]}"); bm=$(median "${base[@]}")
ratio=$("$PY3" -c "print(f'{$om / $bm:.3f}')")
note "publish_to_resolved ours: ${ours[*]}"
note "publish_to_resolved baseline: ${base[*]}"
note "resolve_cached daemon-side ms: ${cached[*]}"
note "resolve_cached CLI wall ms (process start included): ${wall[*]} (median $(median "${wall[@]}"))"
echo "bench dnssd.publish_to_resolved_ms ours=$om baseline=$bm ratio=$ratio"
echo "bench dnssd.resolve_cached_ms ours=$(median "${cached[@]}") target=5"
