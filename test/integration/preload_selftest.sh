# Sourced by the preload tests: run_preloaded LIB COMPONENT runs
# opal_patcher_info --selftest with LIB preloaded and that component, sets
# $out to its output, prints a verdict line, and fails unless it passed.
# Through the libtool wrapper, so that the preload reaches only the program
# (under a cross build's emulator: through qemu-user's environment for it).
run_preloaded() {
    if [ -n "$OPAL_TEST_EMULATOR" ]; then
        out=$(QEMU_SET_ENV=LD_PRELOAD="$1" $OPAL_TEST_RUN "$OPAL_TEST_BUILDDIR/opal_patcher_info" \
              --mca patcher "$2" --selftest 2>&1)
    else
        out=$("$OPAL_TEST_BUILDDIR/libtool" --mode=execute \
              env LD_PRELOAD="$1" "$OPAL_TEST_BUILDDIR/opal_patcher_info" --mca patcher "$2" --selftest 2>&1)
    fi
    if echo "$out" | grep -q "^Self-test: passed"; then
        echo "$(basename "$1"), patcher=$2: self-test passed"
    else
        echo "$(basename "$1"), patcher=$2: FAILED"; echo "$out"; return 1
    fi
}
