dnl --with-ompi[=DIR]: build our hooks as memory and patcher components of an
dnl installed Open MPI 4.x (ompi/), against its development headers and
dnl libopen-pal.  DIR is the Open MPI prefix (DIR/bin/mpicc); without it the
dnl mpicc in PATH tells where the headers and the library are.  DIR's mpicc
dnl is asked with OPAL_PREFIX=DIR, Open MPI's own way to relocate an
dnl installation: a tree copied or linked elsewhere then names its own
dnl directories, not those its files were built for.

AC_ARG_WITH([ompi],
    [AS_HELP_STRING([--with-ompi@<:@=DIR@:>@],
                    [build memory and patcher components for the Open MPI installed in DIR, or the one whose mpicc is in PATH (default: if found with its development headers)])])
opal_have_ompi=no
opal_ompi_why="not asked for"
AS_IF([test "$with_ompi" != no], [
    opal_ompi_why=""
    AS_IF([test "$enable_shared" = no], [opal_ompi_why="components need a shared build"])
    AS_IF([test -z "$opal_ompi_why"], [
        opal_ompi_env=
        AS_IF([test -n "$with_ompi" && test "$with_ompi" != yes],
              [AC_PATH_PROG([OMPI_MPICC], [mpicc], [], [$with_ompi/bin])
               opal_ompi_env="OPAL_PREFIX=$with_ompi"],
              [AC_PATH_PROG([OMPI_MPICC], [mpicc])])
        AS_IF([test -z "$OMPI_MPICC"], [opal_ompi_why="no mpicc found"])])
    AS_IF([test -z "$opal_ompi_why"], [
        opal_ompi_incdirs=`env $opal_ompi_env $OMPI_MPICC --showme:incdirs 2>/dev/null`
        opal_ompi_libdirs=`env $opal_ompi_env $OMPI_MPICC --showme:libdirs 2>/dev/null`
        AS_IF([test -z "$opal_ompi_incdirs"], [opal_ompi_why="$OMPI_MPICC is not Open MPI's (no --showme:incdirs)"])])
    AS_IF([test -z "$opal_ompi_why"], [
        OMPI_CPPFLAGS=
        for d in $opal_ompi_incdirs; do OMPI_CPPFLAGS="$OMPI_CPPFLAGS -I$d"; done
        OMPI_LDFLAGS=
        for d in $opal_ompi_libdirs; do OMPI_LDFLAGS="$OMPI_LDFLAGS -L$d"; done
        opal_ompi_save_CPPFLAGS=$CPPFLAGS opal_ompi_save_LDFLAGS=$LDFLAGS opal_ompi_save_LIBS=$LIBS
        CPPFLAGS="$CPPFLAGS $OMPI_CPPFLAGS" LDFLAGS="$LDFLAGS $OMPI_LDFLAGS"
        dnl Their opal_config.h first: these headers are Open MPI's own, not ours.
        AC_CHECK_HEADER([opal/mca/memory/memory.h], [],
                        [opal_ompi_why="Open MPI's development headers (opal/mca/memory/memory.h) are missing"],
                        [#include "opal_config.h"])
        AS_IF([test -z "$opal_ompi_why"],
              [AC_CHECK_LIB([open-pal], [opal_mem_hooks_set_support], [],
                            [opal_ompi_why="libopen-pal has no opal_mem_hooks_set_support"])])
        CPPFLAGS=$opal_ompi_save_CPPFLAGS LDFLAGS=$opal_ompi_save_LDFLAGS LIBS=$opal_ompi_save_LIBS])
    AS_IF([test -z "$opal_ompi_why"], [
        AC_CHECK_TOOL([OBJCOPY], [objcopy])
        AS_IF([test -z "$OBJCOPY"], [opal_ompi_why="objcopy (binutils) is missing"])])
    AS_IF([test -z "$opal_ompi_why"], [
        opal_ompi_bindir=`AS_DIRNAME(["$OMPI_MPICC"])`
        AC_PATH_PROG([OMPI_MPIRUN], [mpirun], [], [$opal_ompi_bindir])
        AC_PATH_PROG([OMPI_INFO], [ompi_info], [], [$opal_ompi_bindir])
        dnl The MPI programs of the tests (test/ompi/).
        OMPI_MPI_CFLAGS=`env $opal_ompi_env $OMPI_MPICC --showme:compile`
        OMPI_MPI_LIBS=`env $opal_ompi_env $OMPI_MPICC --showme:link`
        opal_have_ompi=yes])
    AS_IF([test $opal_have_ompi = no && test -n "$with_ompi"],
          [AC_MSG_ERROR([--with-ompi: $opal_ompi_why])])
])
dnl The components' own version (mca_component_*_version) is ours.
AC_SUBST([OPAL_PATCHER_VERSION_MAJOR], [`echo $PACKAGE_VERSION | cut -d. -f1`])
AC_SUBST([OPAL_PATCHER_VERSION_MINOR], [`echo $PACKAGE_VERSION | cut -d. -f2`])
AC_SUBST([OPAL_PATCHER_VERSION_RELEASE], [`echo $PACKAGE_VERSION | cut -d. -f3`])
AC_SUBST([OMPI_CPPFLAGS])
AC_SUBST([OMPI_LDFLAGS])
AC_SUBST([OMPI_MPI_CFLAGS])
AC_SUBST([OMPI_MPI_LIBS])
AC_SUBST([OMPI_MPIRUN])
AC_SUBST([OMPI_INFO])
AM_CONDITIONAL([OPAL_BUILD_OMPI], [test $opal_have_ompi = yes])
dnl Their tests run Open MPI's mpirun: by `make check-ompi`, and by `make
dnl check` too only when asked.
AC_ARG_ENABLE([ompi-check],
    [AS_HELP_STRING([--enable-ompi-check], [make check also runs the tests of the Open MPI components (make check-ompi runs only them)])])
AM_CONDITIONAL([OPAL_CHECK_OMPI], [test "$enable_ompi_check" = yes && test $opal_have_ompi = yes])
