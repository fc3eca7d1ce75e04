/*
 * Return codes of every opal-patcher function: OPAL_SUCCESS or a negative
 * OPAL_ERR_* value.
 */
#ifndef OPAL_CONSTANTS_H
#define OPAL_CONSTANTS_H

#define OPAL_SUCCESS                 0
#define OPAL_ERROR                  -1
#define OPAL_ERR_OUT_OF_RESOURCE    -2
#define OPAL_ERR_BAD_PARAM          -5
#define OPAL_ERR_NOT_IMPLEMENTED    -7
#define OPAL_ERR_NOT_SUPPORTED      -8
#define OPAL_ERR_NOT_FOUND         -13
#define OPAL_ERR_NOT_AVAILABLE     -16
#define OPAL_ERR_NOT_INITIALIZED   -44

/* A short, static description of a return code. */
const char *opal_strerror(int rc);

#endif
