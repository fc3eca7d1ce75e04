dnl Which architecture the code-overwrite patcher has instructions for.
dnl One file per architecture: opal/mca/patcher/overwrite/patcher_overwrite_<arch>.c
AS_CASE([$host_cpu],
        [x86_64], [opal_overwrite_arch=x86_64],
        [opal_overwrite_arch=none])
AM_CONDITIONAL([OPAL_ARCH_X86_64], [test $opal_overwrite_arch = x86_64])
