#!/bin/sh
# Run the registration cache benchmark from a build tree:
#   bench/rcache/run.sh [BUILDDIR] [max_N]
builddir=${1:-.}
OMPI_MCA_mca_base_component_path="$builddir/.libs" exec "$builddir/bench/rcache/rcache_bench" ${2:-1000000}
