#!/bin/sh
# The cases of dl_search_test in secure mode (a setuid-root copy run as nobody).
# Under qemu-user the kernel runs the emulator, which is not setuid: no secure mode.
[ -n "$OPAL_TEST_EMULATOR" ] && { echo "SKIP: a cross build: under qemu-user a setuid program runs as its caller (the kernel starts the emulator), so there is no secure mode"; exit 77; }
exec "$OPAL_TEST_BUILDDIR/test/memoryhooks/dl_search_test" secure
