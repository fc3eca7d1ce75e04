#!/bin/bash
# The whole test suite: install what it needs, then build and run `make
# check` in every configuration CI covers, and print one closing line
# "N passed, N failed, N skipped".
#
#   dso       components as DSO plugins (default), with patcher=linux and =overwrite
#   builtin   --disable-dlopen, with patcher=linux and =overwrite
#   static    --enable-static --disable-shared
#   asan      AddressSanitizer + UndefinedBehaviorSanitizer
#   distcheck make distcheck (its build without the overwrite component's
#             instructions: the decline is tested there)
#   ompi      the Open MPI components (ompi/) under Debian's Open MPI: make check-ompi;
#             and configure's other routes to them (default, --with-ompi=DIR)
#   cross-aarch64 cross-ppc64le cross-riscv64 cross-i386
#             configure --host=<triple>, make, and make check under qemu-user
#             (no binfmt: every program runs as qemu-<arch> -L /usr/<triple>) of
#             the DSO build with patcher=linux and =overwrite (where the overwrite
#             component has no instructions for the architecture its runs SKIP),
#             and the built-in build's self-test; aarch64 and ppc64le also with
#             64 KiB pages (qemu -p 65536: the registration cache's tests, and
#             the hooks with overwrite: see page_tests).  One summary line per
#             architecture.
#
# Usage: contrib/test-all.sh [configuration...]   (default: all of them)
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/contrib/install-deps.sh" || exit 1
cd "$top" && ./autogen.pl >/dev/null || exit 1

jobs=$(nproc)
passed=0 failed=0 skipped=0
declare -a failures=()

# Add up the counts automake's test harness printed for one `make check`.
count() {
    local name=$1 log=$2
    local p f s x e
    p=$(grep -E '^# PASS: ' "$log" | tail -1 | awk '{print $3}')
    x=$(grep -E '^# XFAIL: ' "$log" | tail -1 | awk '{print $3}')
    f=$(grep -E '^# FAIL: ' "$log" | tail -1 | awk '{print $3}')
    e=$(grep -E '^# ERROR: ' "$log" | tail -1 | awk '{print $3}')
    s=$(grep -E '^# SKIP: ' "$log" | tail -1 | awk '{print $3}')
    if [ -z "$p" ]; then
        echo "[$name] no test summary: the build or the harness failed"
        failed=$((failed + 1)); failures+=("$name")
        return
    fi
    passed=$((passed + p + ${x:-0})); failed=$((failed + ${f:-0} + ${e:-0})); skipped=$((skipped + ${s:-0}))
    [ $((${f:-0} + ${e:-0})) -gt 0 ] && failures+=("$name")
    grep -E '^(FAIL|ERROR|SKIP):' "$log" | sed "s/^/[$name] /"
    # A failure on a fresh CI machine must say why, not only where.
    local t
    for t in $(sed -nE 's/^(FAIL|ERROR): ([^ ]+).*/\2/p' "$log"); do
        echo "[$name] --- last lines of $t.log:"
        tail -40 "$t.log" 2>/dev/null | sed "s/^/[$name]   /"
    done
    echo "[$name] passed $((p + ${x:-0})), failed $((${f:-0} + ${e:-0})), skipped ${s:-0}"
}

# build NAME CONFIGURE-ARGS...: configure and build into _build/NAME.
build() {
    local name=$1; shift
    local dir="$top/_build/$name"
    mkdir -p "$dir" && cd "$dir" || return 1
    if ! { "$top/configure" "$@" >configure.out 2>&1 && make -j"$jobs" >make.out 2>&1; }; then
        echo "[$name] build failed:"; tail -n 30 configure.out make.out
        return 1
    fi
    # Warning-free with -Wall -Wextra.
    if grep -E 'warning:' make.out; then
        echo "[$name] the build has warnings"
        failed=$((failed + 1)); failures+=("$name-warnings")
    fi
}

# check NAME [VAR=VALUE...]: run make check in the current build.
check() {
    check_target check "$@"
}

# check_target TARGET NAME [VAR=VALUE...]: the same with another make target.
check_target() {
    local target=$1 name=$2; shift 2
    env "$@" make -j"$jobs" "$target" >"check-$name.out" 2>&1
    count "$name" "check-$name.out"
    # The tests and their helpers build warning-free too (the compiler's
    # warnings; libtool warns that ASan cannot be linked fully static).
    if grep -E '^[^ ]+:[0-9]+:[0-9]+: warning:' "check-$name.out"; then
        echo "[$name] the test build has warnings"
        failed=$((failed + 1)); failures+=("$name-warnings")
    fi
}

# Install, then build a program outside the tree against the installed
# headers with pkg-config (the names of the public API, README "Using it"), and run it.
install_and_use() {
    local dest="$PWD/_dest" prefix
    rm -rf "$dest"
    prefix=$(sed -n 's/^prefix=//p' opal-patcher.pc)
    if make install DESTDIR="$dest" >install.out 2>&1 &&
       PKG_CONFIG_SYSROOT_DIR="$dest" PKG_CONFIG_PATH="$dest$prefix/lib/pkgconfig" \
           sh -c 'cc -Wall -Wextra -Werror -o api_usage "$0" $(pkg-config --cflags --libs opal-patcher)' \
           "$top/test/api/api_usage.c" >>install.out 2>&1 &&
       LD_LIBRARY_PATH="$dest$prefix/lib" OMPI_MCA_mca_base_component_path="$dest$prefix/lib/opal-patcher" \
           ./api_usage >>install.out 2>&1; then
        echo "[install] installed API used from outside: passed"; passed=$((passed + 1))
    else
        echo "[install] FAILED:"; tail -20 install.out
        failed=$((failed + 1)); failures+=(install)
    fi
}

# The configuration really has its components built in (no DSO to load).
expect_builtin() {
    if grep -q "components as DSO plugins: no" configure.out && ! ls .libs/mca_*.so >/dev/null 2>&1; then
        echo "[$1] components are built into the library: passed"; passed=$((passed + 1))
    else
        echo "[$1] FAILED: --disable-dlopen still built DSO components"; failed=$((failed + 1)); failures+=("$1-mode")
    fi
}

# The built-in build's self-test under the emulator, with each component
# (one that declines on this architecture must say why, and is counted as
# skipped).
cross_selftest() {
    local name=$1 component out
    for component in linux overwrite; do
        out=$(./libtool --mode=execute $emulator ./opal_patcher_info --mca patcher $component \
              --selftest 2>&1)
        if echo "$out" | grep -q "^Self-test: passed"; then
            echo "[$name-$component] self-test: passed"; passed=$((passed + 1))
        elif [ $component = overwrite ] && echo "$out" | grep -q "no instruction support for"; then
            echo "[$name-$component] SKIP: $(echo "$out" | grep -m1 "no instruction support for")"
            skipped=$((skipped + 1))
        else
            echo "[$name-$component] self-test FAILED:"; echo "$out" | tail -30 | sed "s/^/[$name]   /"
            failed=$((failed + 1)); failures+=("$name-$component")
        fi
    done
}

# The tests that follow the page size and run under qemu-user's larger pages:
# the registration cache's.  The hooks cannot be set up there: qemu 7.2's
# emulated /proc/self/maps leaves out the data segments there (where the GOT
# slots are), so no page protection can be read to write a slot (that run
# says SKIP).
page_tests="test/mca/rcache/rcache_grdma_test test/mca/rcache/rcache_pgindex_test
    test/mca/rcache/rcache_many_test test/mca/rcache/rcache_lockfree_test"
# The overwrite component reads only code mappings there: with it the hooks
# run with the larger pages (where it has no instructions, they SKIP).
hook_page_tests="test/memoryhooks/events_test test/memoryhooks/restore_test
    test/memoryhooks/selftest.sh test/mca/patcher/overwrite/overwrite_reloc_test"

# cross ARCH TRIPLE [PAGESIZE [CPU]]: the DSO build's make check with both
# components (and again with PAGESIZE-byte pages), the one with overwrite
# on qemu's CPU model CPU (ppc64le: a POWER10, whose prefixed instructions
# the relocation tests then run), the built-in build's self-test; a
# summary line for the architecture.
cross() {
    local arch=$1 triple=$2 pagesize=${3:-} cpu=${4:-} emulator
    local p0=$passed f0=$failed s0=$skipped
    if ! command -v "$triple-gcc" >/dev/null || [ ! -d "/usr/$triple" ]; then
        echo "[cross-$arch] SKIP: no $triple cross compiler or /usr/$triple (contrib/install-deps.sh)"
        skipped=$((skipped + 1)); echo "=== $arch: 0 passed, 0 failed, 1 skipped"; return
    fi
    if build "cross-$arch" --host="$triple"; then
        emulator=$(sed -n 's/^OPAL_TEST_EMULATOR = //p' Makefile)
        check "cross-$arch-linux" OMPI_MCA_patcher=linux
        check "cross-$arch-overwrite" OMPI_MCA_patcher=overwrite ${cpu:+QEMU_CPU=$cpu}
        if [ -n "$pagesize" ]; then
            # The tests whose ranges follow the page size (hooks, rcache, self-test).
            # qemu-user places the guest's mappings in a reserved range of its
            # own (QEMU_RESERVED_VA, 512 GiB): without one, qemu 7.2 asks the
            # host kernel for each and, when the host's 4 KiB-aligned answer
            # is not 64 KiB-aligned, searches again; about one run in fifty
            # that search ended at 0x10000, and an mmap of the self-test's
            # soon after failed with ENOMEM (never natively, never with the
            # reservation: 0 in 600 runs).
            local n="cross-$arch-linux-$((pagesize / 1024))k"
            QEMU_RESERVED_VA=0x8000000000 QEMU_PAGESIZE=$pagesize OMPI_MCA_patcher=linux make -j"$jobs" check TESTS="$page_tests" \
                >"check-$n.out" 2>&1
            count "$n" "check-$n.out"
            echo "[$n] SKIP: the hooks with $pagesize-byte pages: qemu-user's emulated" \
                 "/proc/self/maps leaves out the GOT's mappings there (no page protection to read)"
            skipped=$((skipped + 1))
            n="cross-$arch-overwrite-$((pagesize / 1024))k"
            QEMU_RESERVED_VA=0x8000000000 QEMU_PAGESIZE=$pagesize OMPI_MCA_patcher=overwrite make -j"$jobs" check \
                TESTS="$hook_page_tests" >"check-$n.out" 2>&1
            count "$n" "check-$n.out"
        fi
    else
        failed=$((failed + 1)); failures+=("cross-$arch")
    fi
    if build "cross-$arch-builtin" --host="$triple" --disable-dlopen; then
        emulator=$(sed -n 's/^OPAL_TEST_EMULATOR = //p' Makefile)
        cross_selftest "cross-$arch-builtin"
    else
        failed=$((failed + 1)); failures+=("cross-$arch-builtin")
    fi
    echo "=== $arch: $((passed - p0)) passed, $((failed - f0)) failed, $((skipped - s0)) skipped"
}

# ompi_route NAME WANT-MPICC CONFIGURE-ARGS...: in the current (ompi) build
# directory, the Open MPI components built in _build/NAME by another route
# of configure are these, from the same headers: configure found WANT-MPICC,
# and each component has the same code, exports and libraries.
ompi_route() {
    local name=$1 want=$2 ref=$PWD dir="$top/_build/$1" la so why=""
    shift 2
    rm -rf "$dir" && mkdir -p "$dir"
    local comps=(ompi/mca_memory_opatch.la ompi/mca_patcher_opatch_overwrite.la ompi/mca_patcher_opatch_linux.la)
    if ! (cd "$dir" && "$top/configure" "$@" >configure.out 2>&1 &&
          make -j"$jobs" "${comps[@]}" >make.out 2>&1); then
        why="configure $* or the build failed (_build/$name/configure.out, make.out)"
    elif ! grep -q "Open MPI components (ompi/): yes, against $want\$" "$dir/configure.out"; then
        why="configure did not find $want: $(grep 'Open MPI components' "$dir/configure.out")"
    elif [ "$(sed -n 's/^OMPI_CPPFLAGS = //p' "$dir/Makefile")" != "$(sed -n 's/^OMPI_CPPFLAGS = //p' Makefile |
               sed "s|-I$(ompi_info --path prefix | sed 's/.*: //')/|-I${want%/bin/mpicc}/|g")" ]; then
        why="the headers are not those of $want: $(sed -n 's/^OMPI_CPPFLAGS = //p' "$dir/Makefile")"
    else
        for la in "${comps[@]}"; do
            so=$(basename "$la" .la).so
            for view in "objdump -d --section=.text" "nm -D --defined-only" "readelf -d"; do
                if ! diff <($view "$ref/ompi/.libs/$so" | grep -v 'file format' | grep -v '(RUNPATH)') \
                          <($view "$dir/ompi/.libs/$so" | grep -v 'file format' | grep -v '(RUNPATH)') >/dev/null; then
                    why="$why $so differs in '$view';"
                fi
            done
        done
    fi
    if [ -z "$why" ]; then
        echo "[$name] configure $*: the same components from $want: passed"; passed=$((passed + 1))
    else
        echo "[$name] FAILED: $why"; failed=$((failed + 1)); failures+=("$name")
    fi
}

# The two other routes to Open MPI: by default, the mpicc in PATH; and
# --with-ompi=DIR, DIR a prefix of links to the installed Open MPI's
# directories (what a relocated installation looks like to configure).
ompi_routes() {
    local farm="$top/_build/ompi-farm" prefix d kind tool
    ompi_route ompi-default "$(command -v mpicc)"
    rm -rf "$farm" && mkdir -p "$farm/bin"
    for tool in mpicc mpirun ompi_info; do
        ln -s "$(command -v $tool)" "$farm/bin/$tool"
    done
    prefix=$(ompi_info --path prefix | sed 's/.*: //')
    for kind in incdir libdir pkgdatadir; do
        d=$(ompi_info --path $kind | sed 's/.*: //')
        mkdir -p "$(dirname "$farm${d#"$prefix"}")" && ln -s "$d" "$farm${d#"$prefix"}"
    done
    ompi_route ompi-dir "$farm/bin/mpicc" --with-ompi="$farm"
    # A DIR without Open MPI: configure stops, naming what it did not find.
    local dir="$top/_build/ompi-nodir"
    rm -rf "$dir" && mkdir -p "$dir"
    if ! (cd "$dir" && "$top/configure" --with-ompi="$dir/none" >configure.out 2>&1) &&
        grep -q "error: --with-ompi: no mpicc found" "$dir/configure.out"; then
        echo "[ompi-nodir] configure --with-ompi=DIR without Open MPI stops with a clear error: passed"
        passed=$((passed + 1))
    else
        echo "[ompi-nodir] FAILED: configure --with-ompi=DIR without Open MPI: $(tail -1 "$dir/configure.out")"
        failed=$((failed + 1)); failures+=(ompi-nodir)
    fi
}

run_config() {
    case $1 in
    dso)
        build dso || { failed=$((failed + 1)); failures+=(dso); return; }
        check dso-linux OMPI_MCA_patcher=linux
        check dso-overwrite OMPI_MCA_patcher=overwrite
        install_and_use ;;
    builtin)
        build builtin --disable-dlopen || { failed=$((failed + 1)); failures+=(builtin); return; }
        expect_builtin builtin
        check builtin-linux OMPI_MCA_patcher=linux
        check builtin-overwrite OMPI_MCA_patcher=overwrite ;;
    static)
        build static --enable-static --disable-shared || { failed=$((failed + 1)); failures+=(static); return; }
        check static-overwrite OMPI_MCA_patcher=overwrite ;;
    asan)
        build asan --disable-dlopen --enable-debug \
            CFLAGS="-g -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
            LDFLAGS="-fsanitize=address,undefined" || { failed=$((failed + 1)); failures+=(asan); return; }
        expect_builtin asan
        check asan-overwrite OMPI_MCA_patcher=overwrite OPAL_TEST_SANITIZER=1 \
            ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
        check asan-linux OMPI_MCA_patcher=linux OPAL_TEST_SANITIZER=1 \
            ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 ;;
    distcheck)
        build distcheck || { failed=$((failed + 1)); failures+=(distcheck); return; }
        # Its own build and make check as on an architecture the overwrite
        # component has no instructions for: the suite with the linux
        # component, and overwrite_decline_test checks the decline.
        if make -j"$jobs" distcheck DISTCHECK_CONFIGURE_FLAGS=--disable-overwrite-instructions \
            >distcheck.out 2>&1; then
            echo "[distcheck] passed"; passed=$((passed + 1))
        else
            echo "[distcheck] FAILED:"; tail -40 distcheck.out
            failed=$((failed + 1)); failures+=(distcheck)
        fi ;;
    ompi)
        build ompi --with-ompi || { failed=$((failed + 1)); failures+=(ompi); return; }
        check_target check-ompi ompi
        ompi_routes ;;
    cross-aarch64) cross aarch64 aarch64-linux-gnu 65536 ;;
    cross-ppc64le) cross ppc64le powerpc64le-linux-gnu 65536 power10 ;;
    cross-riscv64) cross riscv64 riscv64-linux-gnu ;;
    cross-i386) cross i386 i686-linux-gnu ;;
    *) echo "unknown configuration '$1' (valid: dso builtin static asan distcheck ompi" \
            "cross-aarch64 cross-ppc64le cross-riscv64 cross-i386)"; exit 2 ;;
    esac
}

configs=("$@")
[ ${#configs[@]} -eq 0 ] &&
    configs=(dso builtin static asan distcheck ompi cross-aarch64 cross-ppc64le cross-riscv64 cross-i386)
for c in "${configs[@]}"; do
    echo "=== $c"
    start=$(date +%s)
    run_config "$c"
    echo "=== $c took $(( $(date +%s) - start ))s"
done
[ ${#failures[@]} -gt 0 ] && echo "failed in: ${failures[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
