dnl Optional dependencies, each detected and each able to be turned off.

AC_ARG_WITH([ucx], [AS_HELP_STRING([--with-ucx], [integrate with UCX's libucm (default: if found)])])
opal_have_ucx=no
AS_IF([test "$with_ucx" != no],
      [AC_CHECK_HEADER([ucm/api/ucm.h],
          [AC_CHECK_LIB([ucm], [ucm_set_external_event], [opal_have_ucx=yes], [], [-lucs])])])
AS_IF([test "$with_ucx" = yes && test $opal_have_ucx = no], [AC_MSG_ERROR([--with-ucx given but libucm was not found])])
AM_CONDITIONAL([OPAL_HAVE_UCX], [test $opal_have_ucx = yes])
AS_IF([test $opal_have_ucx = yes], [AC_DEFINE([OPAL_HAVE_UCX], [1], [libucm available])])

AC_ARG_WITH([liburing], [AS_HELP_STRING([--with-liburing], [build the io_uring registration helper (default: if found)])])
opal_have_liburing=no
AS_IF([test "$with_liburing" != no],
      [AC_CHECK_HEADER([liburing.h],
          [AC_CHECK_LIB([uring], [io_uring_queue_init], [opal_have_liburing=yes])])])
AS_IF([test "$with_liburing" = yes && test $opal_have_liburing = no], [AC_MSG_ERROR([--with-liburing given but liburing was not found])])
AM_CONDITIONAL([OPAL_HAVE_LIBURING], [test $opal_have_liburing = yes])
AS_IF([test $opal_have_liburing = yes], [AC_DEFINE([OPAL_HAVE_LIBURING], [1], [liburing available])
                                          OPAL_PC_PRIVATE_LIBS="$OPAL_PC_PRIVATE_LIBS -luring"])

AC_ARG_WITH([verbs], [AS_HELP_STRING([--with-verbs], [build the verbs registration helper (default: if found)])])
opal_have_verbs=no
AS_IF([test "$with_verbs" != no],
      [AC_CHECK_HEADER([infiniband/verbs.h],
          [AC_CHECK_LIB([ibverbs], [ibv_reg_mr], [opal_have_verbs=yes])])])
AS_IF([test "$with_verbs" = yes && test $opal_have_verbs = no], [AC_MSG_ERROR([--with-verbs given but libibverbs was not found])])
AM_CONDITIONAL([OPAL_HAVE_VERBS], [test $opal_have_verbs = yes])
AS_IF([test $opal_have_verbs = yes], [AC_DEFINE([OPAL_HAVE_VERBS], [1], [libibverbs available])
                                       OPAL_PC_PRIVATE_LIBS="$OPAL_PC_PRIVATE_LIBS -libverbs"])
dnl What a static link against libopal-patcher.a needs besides it.
AC_SUBST([OPAL_PC_PRIVATE_LIBS])

dnl Zydis is only the tests' oracle for our x86 decoder.
opal_have_zydis=no
AC_CHECK_HEADER([Zydis/Zydis.h], [AC_CHECK_LIB([Zydis], [ZydisDecoderInit], [opal_have_zydis=yes])])
AM_CONDITIONAL([OPAL_HAVE_ZYDIS], [test $opal_have_zydis = yes])
