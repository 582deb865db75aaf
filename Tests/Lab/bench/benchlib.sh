# Shared by the bench scripts (sourced after lib.sh): where the CPU goes during a run.

# cpu_mark LABEL=PID...: remembers the CPU ticks (utime+stime, 1/100 s) used so far by
# bluetoothd, btvirt and each PID; cpu_note NAME then notes how much each used since.
declare -A CPU0=() CPU_PID=()
_ticks() { [ -n "$1" ] && awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
cpu_mark() {
    CPU0=() CPU_PID=([bluetoothd]=$(_lab_pid bluetoothd) [btvirt]=$(_lab_pid btvirt))
    local kv
    for kv in "$@"; do CPU_PID[${kv%%=*}]=${kv#*=}; done
    for kv in "${!CPU_PID[@]}"; do CPU0[$kv]=$(_ticks "${CPU_PID[$kv]}"); done
}
cpu_note() {
    local k out=()
    for k in bluetoothd btvirt "${!CPU_PID[@]}"; do
        case " ${out[*]} " in *" $k "*) continue ;; esac
        [ -n "${CPU0[$k]:-}" ] || continue
        out+=("$k $(( $(_ticks "${CPU_PID[$k]}") - CPU0[$k] ))0 ms,")
    done
    note "$1: CPU time during the run: ${out[*]}"
}

# _ctxsw PID: context switches (voluntary + involuntary) of every thread of PID so far.
_ctxsw() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {n += $2} END {print n + 0}'; }

# BENCH_PERF=1: perf_wrap NAME prints a command prefix that samples the whole guest while the
# command runs (perf record -a, cpu-clock); perf_sample NAME SECONDS does the same for a
# while in the background; perf_report NAME PID then writes to $LAB_OUT/perf-NAME.txt the CPU
# share of each process and the hottest symbols of PID.  (perf's data file is mmapped: it
# goes to /dev/shm, not to the 9p results directory.)
perf_wrap() {
    [ "${BENCH_PERF:-0}" = 1 ] || return 0
    command -v perf >/dev/null || fail "BENCH_PERF=1 but perf is not installed (apt-get install linux-perf)"
    echo "perf record -q -a -e cpu-clock -F 499 -o /dev/shm/perf-$1.data --"
}
PERF_PID=
perf_sample() {
    [ "${BENCH_PERF:-0}" = 1 ] || return 0
    # shellcheck disable=SC2046
    $(perf_wrap "$1") sleep "$2" >/dev/null 2>&1 &
    PERF_PID=$!
}
perf_report() {
    [ -z "$PERF_PID" ] || { wait "$PERF_PID" 2>/dev/null; PERF_PID=; }
    local f="/dev/shm/perf-$1.data" out="$LAB_OUT/perf-$1.txt"
    [ -e "$f" ] || return 0
    { perf report -i "$f" --stdio --sort pid 2>/dev/null | grep -v '^#' | grep -v '^$' | head -n 15
      echo "-- pid $2"
      perf report -i "$f" --stdio --pid "$2" --sort dso,sym 2>/dev/null | grep -v '^#' | grep -v '^$' | head -n 60
    } >"$out"
    rm -f "$f"
    note "$1: profile in perf-$1.txt: $(head -n 6 "$out" | tr -s ' ' | tr '\n' ';')"
}

# _median "V1 V2 ...": the median of the numbers (the mean of the middle two for an even count).
_median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# Repetitions: bench_keep NAME RATE BYTES_PER_S RECEIVED [FIRST_READ_S] keeps one run's
# figures; bench_report GROUP then prints, per name in the order first kept, `bench
# GROUP.NAME rate=R bytes_per_s=B` with the medians, `.delivered` (the fewest of any run) and
# `.first_read_s` (median, when given), notes every run's figures, and sets RATE[NAME],
# BPS[NAME] and READ[NAME] (the caller declares those three: declare -A RATE BPS READ).
declare -A RATES=() BPSS=() DELIV=() READS=()
ORDER=()
bench_keep() {
    [ -n "${RATES[$1]:-}" ] || ORDER+=("$1")
    RATES[$1]+=" $2"; BPSS[$1]+=" $3"; DELIV[$1]+=" $4"
    [ -z "${5:-}" ] || READS[$1]+=" $5"
}
bench_report() {
    local name
    for name in "${ORDER[@]}"; do
        RATE[$name]=$(_median "${RATES[$name]}")
        BPS[$name]=$(_median "${BPSS[$name]}")
        note "$name: bytes/s of each run:${BPSS[$name]}${READS[$name]:+; first reads (s):${READS[$name]}}"
        printf 'bench %s.%s rate=%.0f bytes_per_s=%.0f\n' "$1" "$name" "${RATE[$name]}" "${BPS[$name]}"
        printf 'bench %s.%s.delivered=%s/%s\n' "$1" "$name" "$(tr ' ' '\n' <<<"${DELIV[$name]}" | grep . | sort -n | head -n 1)" "$COUNT"
        if [ -n "${READS[$name]:-}" ]; then
            READ[$name]=$(_median "${READS[$name]}")
            printf 'bench %s.%s.first_read_s=%s\n' "$1" "$name" "${READ[$name]}"
        fi
    done
}

# socat_certs DIR: a P-256 key and self-signed certificate each for a socat server and client
# (DIR/srv.key .crt .pem, DIR/cli.key .crt .pem): the TLS baselines' identities.
socat_certs() {
    local who
    for who in srv cli; do
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$1/$who.key" -out "$1/$who.crt" \
            -subj "/CN=$who" -days 2 >/dev/null 2>&1 || fail "openssl req"
        cat "$1/$who.key" "$1/$who.crt" >"$1/$who.pem"
    done
}
