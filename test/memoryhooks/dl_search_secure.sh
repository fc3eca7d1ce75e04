#!/bin/sh
# The cases of dl_search_test in secure mode (a setuid-root copy run as nobody).
exec "$OPAL_TEST_BUILDDIR/test/memoryhooks/dl_search_test" secure
