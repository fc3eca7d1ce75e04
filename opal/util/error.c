#include "opal_config.h"

#include "opal/constants.h"

const char *opal_strerror(int rc)
{
    switch (rc) {
    case OPAL_SUCCESS: return "success";
    case OPAL_ERROR: return "error";
    case OPAL_ERR_OUT_OF_RESOURCE: return "out of resources";
    case OPAL_ERR_BAD_PARAM: return "bad parameter";
    case OPAL_ERR_NOT_IMPLEMENTED: return "not implemented";
    case OPAL_ERR_NOT_SUPPORTED: return "not supported";
    case OPAL_ERR_NOT_FOUND: return "not found";
    case OPAL_ERR_NOT_AVAILABLE: return "not available";
    case OPAL_ERR_NOT_INITIALIZED: return "not initialized";
    default: return "unknown error";
    }
}
