#!/bin/bash
# Install what building and testing opal-patcher needs (Debian 12 packages).
# Safe to run again: installs only what is missing.
set -euo pipefail

packages=(
    build-essential autoconf automake libtool pkg-config perl   # the build
    libzydis-dev                                                # oracle for our x86 decoder
    liburing-dev                                                # io_uring registration helper
    libibverbs-dev                                              # verbs registration helper
    libucx-dev                                                  # UCX stacking and the rcache yardstick
    libjemalloc2 libjemalloc-dev libgoogle-perftools-dev        # real allocators (LD_PRELOAD)
    libmimalloc-dev
    openmpi-bin                                                 # mpirun as the launcher
    libopenmpi-dev                                              # Open MPI's headers: the ompi/ components
    valgrind                                                    # memcheck runs, callgrind benchmarks
    qemu-user                                                   # the cross builds' tests (qemu-<arch> -L /usr/<triple>)
    crossbuild-essential-arm64 crossbuild-essential-ppc64el     # cross compilers and C libraries:
    crossbuild-essential-i386 gcc-riscv64-linux-gnu             # aarch64, ppc64le, i386, riscv64
    libc6-dev-riscv64-cross                                     # (never gcc-multilib: it removes them)
    golang-go musl-tools                                        # foreign releases for the userfaultfd source
)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q >/dev/null
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
