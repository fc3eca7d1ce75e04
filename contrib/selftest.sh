#!/bin/bash
# The main job: set up, build, install into ./_install, and run
# opal_patcher_info --selftest with each patcher component.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/contrib/install-deps.sh"
cd "$top"
./autogen.pl >/dev/null
mkdir -p _build/selftest && cd _build/selftest
[ -f Makefile ] || "$top/configure" --prefix="$top/_install" >/dev/null
make -j"$(nproc)" >/dev/null
make install >/dev/null
status=0
"$top/_install/bin/opal_patcher_info"
for component in "" overwrite linux; do
    echo
    echo "=== opal_patcher_info --selftest ${component:+--mca patcher $component}"
    "$top/_install/bin/opal_patcher_info" ${component:+--mca patcher $component} --selftest || status=1
done
exit $status
