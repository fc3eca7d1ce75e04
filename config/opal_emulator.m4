dnl A cross build runs its tests under qemu-user, named by OPAL_TEST_EMULATOR
dnl (the command that runs one of the host's programs here).  No binfmt
dnl registration is needed: every program a test runs is started through it.
AC_ARG_VAR([OPAL_TEST_EMULATOR],
           [cross builds: the command that runs the host's programs for the tests (default: qemu-<cpu> -L BUILDDIR/qemu-root, links to /usr/<host>)])
AS_IF([test "$cross_compiling" = yes && test -z "$OPAL_TEST_EMULATOR"], [
    AS_CASE([$host_cpu],
            [i?86], [opal_qemu=qemu-i386],
            [powerpc64le], [opal_qemu=qemu-ppc64le],
            [opal_qemu=qemu-$host_cpu])
    AC_PATH_PROG([OPAL_QEMU], [$opal_qemu])
    dnl The loader and libraries of the host: Debian's cross packages put
    dnl them in /usr/<triple>.  Not that directory itself as qemu's prefix:
    dnl where it has no etc/ld.so.cache the loader reads this machine's own,
    dnl which may list other libraries for the same CPU (Debian's libc6-i386
    dnl in /lib32: another glibc release than /usr/i686-linux-gnu's loader;
    dnl loaded together, programs hang in pthread_create and fork).  So the
    dnl prefix is qemu-root in the build tree: links to /usr/<triple>'s
    dnl entries and an empty etc/ld.so.cache, so the loader searches its
    dnl default directories, inside the prefix.
    AS_IF([test -n "$OPAL_QEMU" && test -d "/usr/$host_alias"],
          [opal_qemu_root="$ac_pwd/qemu-root"
           rm -rf "$opal_qemu_root" && mkdir -p "$opal_qemu_root/etc" &&
               : > "$opal_qemu_root/etc/ld.so.cache"
           for opal_entry in "/usr/$host_alias"/*; do
               test "$opal_entry" = "/usr/$host_alias/etc" || ln -s "$opal_entry" "$opal_qemu_root/"
           done
           OPAL_TEST_EMULATOR="$OPAL_QEMU -L $opal_qemu_root"],
          [test -n "$OPAL_QEMU"],
          [OPAL_TEST_EMULATOR="$OPAL_QEMU"])
])
AC_MSG_CHECKING([how the tests run the host's programs])
AS_IF([test -n "$OPAL_TEST_EMULATOR"], [AC_MSG_RESULT([$OPAL_TEST_EMULATOR])],
      [test "$cross_compiling" = yes], [AC_MSG_RESULT([cannot: no $opal_qemu found (make check will fail)])],
      [AC_MSG_RESULT([directly])])
AM_CONDITIONAL([OPAL_TEST_EMULATED], [test -n "$OPAL_TEST_EMULATOR"])
dnl Whether the tests' programs are for another CPU than this machine's own
dnl packages (valgrind, the allocators, musl-gcc, Open MPI): under the
dnl emulator, and also where the kernel runs them itself (i686 programs on
dnl x86_64, when this machine has an i386 C library: configure then finds
dnl it is not cross compiling).
AS_IF([test "$host_cpu" != "$build_cpu"], [OPAL_TEST_FOREIGN=$host_cpu], [OPAL_TEST_FOREIGN=])
AC_SUBST([OPAL_TEST_FOREIGN])
AC_SUBST([OPAL_OVERWRITE_ARCH], [$opal_overwrite_arch])
