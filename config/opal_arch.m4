dnl Which architecture the code-overwrite patcher has instructions for.
dnl One file per architecture: opal/mca/patcher/overwrite/patcher_overwrite_<arch>.c
dnl defines the table mca_patcher_overwrite_arch (x86_64 and i386 share
dnl patcher_overwrite_x86*.c besides their own); elsewhere the component declines.
AS_CASE([$host_cpu],
        [x86_64], [opal_overwrite_arch=x86_64],
        [i?86], [opal_overwrite_arch=i386],
        [aarch64], [opal_overwrite_arch=aarch64],
        [powerpc64le], [opal_overwrite_arch=ppc64le],
        [riscv64], [opal_overwrite_arch=riscv64],
        [opal_overwrite_arch=none])
dnl Every architecture CI builds has instructions; this builds the component
dnl as it is on one it does not know, so that its decline is tested
dnl (overwrite_decline_test; contrib/test-all.sh's distcheck).
AC_ARG_ENABLE([overwrite-instructions],
              [AS_HELP_STRING([--disable-overwrite-instructions],
                              [build the overwrite patcher without this architecture's instructions: it declines, as on an architecture it has none for])])
AS_IF([test "$enable_overwrite_instructions" = no], [opal_overwrite_arch=none])
AS_IF([test $opal_overwrite_arch = none],
      [AC_DEFINE([OPAL_PATCHER_OVERWRITE_HAVE_ARCH], [0],
                 [Whether the overwrite patcher has instructions for this architecture])],
      [AC_DEFINE([OPAL_PATCHER_OVERWRITE_HAVE_ARCH], [1])])
AM_CONDITIONAL([OPAL_ARCH_NONE], [test $opal_overwrite_arch = none])
AM_CONDITIONAL([OPAL_ARCH_X86_64], [test $opal_overwrite_arch = x86_64])
AM_CONDITIONAL([OPAL_ARCH_I386], [test $opal_overwrite_arch = i386])
AM_CONDITIONAL([OPAL_ARCH_X86], [test $opal_overwrite_arch = x86_64 || test $opal_overwrite_arch = i386])
AM_CONDITIONAL([OPAL_ARCH_AARCH64], [test $opal_overwrite_arch = aarch64])
AM_CONDITIONAL([OPAL_ARCH_PPC64LE], [test $opal_overwrite_arch = ppc64le])
AM_CONDITIONAL([OPAL_ARCH_RISCV64], [test $opal_overwrite_arch = riscv64])
dnl The code write that holds every other thread (the architectures but x86).
AM_CONDITIONAL([OPAL_OVERWRITE_STOPPED_WRITE],
               [test $opal_overwrite_arch != none && test $opal_overwrite_arch != x86_64 && test $opal_overwrite_arch != i386])
