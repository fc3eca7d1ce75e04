#!/bin/sh
# Instructions per operation of grdma and UCX's ucs_rcache, counted by callgrind
# (rcache_bench --count, see rcache_bench_count.c), with N cached registrations:
#   bench/rcache/callgrind.sh [-c] [BUILDDIR] [max_N] [KEEPDIR]
# max_N defaults to 1000000 (about 35 s); with KEEPDIR the callgrind dumps are kept there (one file
# per phase, for callgrind_annotate).  Counts are exact: the same build gives the same
# numbers on every run, however loaded the host.
# -c adds callgrind's cache simulation (about 3x slower): the read misses per operation in D1
# (48 KiB, 12-way: this host's) and in the last level, simulated as this core's 1 MiB 8-way L2
# (this VM reports a 508 MiB direct-mapped L3, which would hold everything), after one hit of
# every cached page (rcache_bench --count ... --warm).  A compare-and-swap counts as a read.
cachesim=
if [ "$1" = -c ]; then
    cachesim="--cache-sim=yes --D1=49152,12,64 --LL=1048576,8,64"
    shift
fi
builddir=${1:-.}
max_n=${2:-1000000}
if ! command -v valgrind > /dev/null; then
    echo "callgrind.sh: valgrind is not installed (Debian package valgrind)" >&2
    exit 77
fi
if [ -n "$3" ]; then
    out=$3
    mkdir -p "$out" || exit 1
else
    out=$(mktemp -d) || exit 1
    trap 'rm -rf "$out"' EXIT
fi
export OMPI_MCA_mca_base_component_path="$builddir/.libs"
drivers=grdma
for n in 100 1000 10000 100000 1000000; do
    [ "$n" -le "$max_n" ] || break
    for d in grdma ucs_rcache; do
        rm -f "$out/$d.$n".*
        # shellcheck disable=SC2086 # $cachesim: several options or none
        if "$builddir/libtool" --mode=execute valgrind -q --tool=callgrind --instr-atstart=no \
            --collect-atstart=no $cachesim --callgrind-out-file="$out/$d.$n" \
            "$builddir/bench/rcache/rcache_bench" --count "$d" "$n" ${cachesim:+--warm} \
            > "$out/$d.$n.log" 2>&1; then
            [ "$d" = grdma ] || drivers="grdma ucs_rcache"
        else
            echo "$d at N=$n did not run:" >&2
            cat "$out/$d.$n.log" >&2
        fi
    done
done
# The dumps: $out/DRIVER.N.K, one per phase ("desc: Trigger: Client Request: PHASE"), whose
# "events:" line names the columns of "summary:".  Per operation = (the phase's - the empty
# loop's) / ops; the fill phase has N operations (the N registrations of an empty cache).
cat "$out"/*.log | awk -v drivers="$drivers" -v out="$out" -v sim="${cachesim:+1}" '
    / ops=/ { split($0, f, "ops="); ops = f[2] }
    function load(d, n,    k, f, l, name, ev, nev, val, i) {   # cost[PHASE, EVENT]; 0 if none
        delete cost
        for (k = 1; (getline l < (f = out "/" d "." n "." k)) > 0; k++) {
            do {
                if (l ~ /^desc: Trigger: Client Request: /) name = substr(l, 32)
                if (l ~ /^events: /) nev = split(substr(l, 9), ev, " ")
                if (l ~ /^summary: /) {
                    split(substr(l, 10), val, " ")
                    for (i = 1; i <= nev; i++) cost[name, ev[i]] = val[i] + 0
                    cost[name] = 1
                }
            } while ((getline l < f) > 0)
            close(f)
        }
        return "loop" in cost
    }
    # One table of event e per operation, grdma and (if it ran) UCX.
    function table(e, title, fmt,    p, n, d, v, ok) {
        printf "%s (callgrind, %d operations each, the empty loop subtracted)%s\n", title, ops,
               (nd > 1 ? "; ratio = grdma / ucs_rcache" : "; no UCX")
        printf "%8s", "N"
        for (p = 1; p <= nph; p++) {
            printf " %9s", ph[p]
            if (nd > 1) printf " %7s %5s", "ucx", "ratio"
        }
        printf "\n"
        for (n = 100; n <= 1000000; n *= 10) {
            for (d = 1; d <= nd; d++) {
                ok[d] = load(drv[d], n)
                for (p = 1; p <= nph; p++) {
                    if (!ok[d] || !(ph[p] in cost)) v[d, p] = ""
                    else if (ph[p] == "fill") v[d, p] = cost[ph[p], e] / n - cost["loop", e] / ops
                    else v[d, p] = (cost[ph[p], e] - cost["loop", e]) / ops
                }
            }
            if (!ok[1]) continue
            printf "%8d", n
            for (p = 1; p <= nph; p++) {
                printf " %9s", v[1, p] == "" ? "-" : sprintf(fmt, v[1, p])
                if (nd < 2) continue
                if (v[2, p] == "") printf " %7s %5s", "-", "-"
                else printf " %7s %5s", sprintf(fmt, v[2, p]),
                                          (v[2, p] > 0 ? sprintf("%.2f", v[1, p] / v[2, p]) : "-")
            }
            printf "\n"
        }
    }
    END {
        nd = split(drivers, drv, " ")
        nph = split("hit,get,find,miss,fill,rel c,rel u,rel c+reg", ph, ",")
        table("Ir", "instructions per operation", "%.1f")
        if (sim) {
            table("D1mr", "D1 read misses per operation", "%.2f")
            table("DLmr", "LL (1 MiB L2) read misses per operation", "%.2f")
        }
    }'
