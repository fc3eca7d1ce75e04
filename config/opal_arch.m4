dnl Which architecture the code-overwrite patcher has instructions for.
dnl One file per architecture: opal/mca/patcher/overwrite/patcher_overwrite_<arch>.c
dnl (x86_64 and i386 share patcher_overwrite_x86*.c besides their own).
AS_CASE([$host_cpu],
        [x86_64], [opal_overwrite_arch=x86_64],
        [i?86], [opal_overwrite_arch=i386],
        [opal_overwrite_arch=none])
AM_CONDITIONAL([OPAL_ARCH_X86_64], [test $opal_overwrite_arch = x86_64])
AM_CONDITIONAL([OPAL_ARCH_I386], [test $opal_overwrite_arch = i386])
AM_CONDITIONAL([OPAL_ARCH_X86], [test $opal_overwrite_arch = x86_64 || test $opal_overwrite_arch = i386])
