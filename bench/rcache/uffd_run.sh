#!/bin/sh
# The userfaultfd source's cost table: rcache_uffd_bench RUNS times (default
# 5) per mode, off / on / strict taking turns; prints each run, then per mode
# the median of the runs' medians with their range.  Usage: uffd_run.sh BUILDDIR [RUNS]
b=${1:?build directory}
runs=${2:-5}
out=$(mktemp)
for r in $(seq "$runs"); do
    for mode in off on strict; do
        OMPI_MCA_mca_base_component_path="$b/.libs" OMPI_MCA_mpi_leave_pinned=1 \
            OMPI_MCA_rcache_base_uffd=$mode timeout 300 "$b/bench/rcache/rcache_uffd_bench" | tee -a "$out"
    done
done
echo "| source | registration (ns) | hit (ns) | release + next lookup (ns) |"
echo "| --- | --- | --- | --- |"
for mode in off on strict; do
    grep "^$mode " "$out" | awk -v m="$mode" '
        { r[NR] = $3; h[NR] = $5; l[NR] = $7 }
        function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                       return sprintf("%s (%s-%s)", a[int((n + 1) / 2)], a[1], a[n]) }
        END { printf "| %s | %s | %s | %s |\n", m, med(r, NR), med(h, NR), med(l, NR) }'
done
rm -f "$out"
