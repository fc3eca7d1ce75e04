# Sourced by the shell tests that run each patcher component in turn:
# $patchers names those that can work in this build.  Where the overwrite
# component has no instructions (configure's OPAL_TEST_OVERWRITE_ARCH is
# "none") it declines, which overwrite_decline_test checks; the others run
# with linux alone.
patchers="overwrite linux"
if [ "$OPAL_TEST_OVERWRITE_ARCH" = none ]; then
    patchers=linux
    echo "overwrite: no instructions for $OPAL_TEST_HOST_CPU in this build (it declines): linux only"
fi
