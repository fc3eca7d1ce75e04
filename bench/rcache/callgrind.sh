#!/bin/sh
# Instructions per operation of grdma and UCX's ucs_rcache, counted by callgrind
# (rcache_bench --count, see rcache_bench_count.c), with N cached registrations:
#   bench/rcache/callgrind.sh [BUILDDIR] [max_N] [KEEPDIR]
# max_N defaults to 1000000 (about 35 s); with KEEPDIR the callgrind dumps are kept there (one file
# per phase, for callgrind_annotate).  Counts are exact: the same build gives the same
# numbers on every run, however loaded the host.
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
        if "$builddir/libtool" --mode=execute valgrind -q --tool=callgrind --instr-atstart=no \
            --collect-atstart=no --callgrind-out-file="$out/$d.$n" \
            "$builddir/bench/rcache/rcache_bench" --count "$d" "$n" > "$out/$d.$n.log" 2>&1; then
            [ "$d" = grdma ] || drivers="grdma ucs_rcache"
        else
            echo "$d at N=$n did not run:" >&2
            cat "$out/$d.$n.log" >&2
        fi
    done
done
# The dumps: $out/DRIVER.N.K, one per phase ("desc: Trigger: Client Request: PHASE").
# Instructions per operation = (the phase's - the empty loop's) / ops.
cat "$out"/*.log | awk -v drivers="$drivers" -v out="$out" '
    / ops=/ { split($0, f, "ops="); ops = f[2] }
    function load(d, n,    k, f, l, name) {   # cost[PHASE] of driver d at n; 0 if none
        delete cost
        for (k = 1; (getline l < (f = out "/" d "." n "." k)) > 0; k++) {
            do {
                if (l ~ /^desc: Trigger: Client Request: /) name = substr(l, 32)
                if (l ~ /^summary: /) cost[name] = substr(l, 10)
            } while ((getline l < f) > 0)
            close(f)
        }
        return "loop" in cost
    }
    END {
        nd = split(drivers, drv, " ")
        nph = split("hit,miss,rel c,rel u,rel c+reg", ph, ",")
        printf "instructions per operation (callgrind, %d operations each, the empty loop " \
               "subtracted)%s\n", ops, (nd > 1 ? "; ratio = grdma / ucs_rcache" : "; no UCX")
        printf "%8s", "N"
        for (p = 1; p <= nph; p++) {
            printf " %9s", ph[p]
            if (nd > 1) printf " %7s %5s", "ucx", "ratio"
        }
        printf "\n"
        for (n = 100; n <= 1000000; n *= 10) {
            for (d = 1; d <= nd; d++) {
                ok[d] = load(drv[d], n)
                for (p = 1; p <= nph; p++) v[d, p] = ok[d] ? (cost[ph[p]] - cost["loop"]) / ops : -1
            }
            if (!ok[1]) continue
            printf "%8d", n
            for (p = 1; p <= nph; p++) {
                printf " %9.1f", v[1, p]
                if (nd < 2) continue
                if (ok[2]) printf " %7.1f %5.2f", v[2, p], v[1, p] / v[2, p]
                else printf " %7s %5s", "-", "-"
            }
            printf "\n"
        }
    }'
