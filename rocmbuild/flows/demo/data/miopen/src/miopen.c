/* The rocmbuild demo's miniature MIOpen: only the version entry point, as the real one. */
#include "miopen/miopen.h"

miopenStatus_t miopenGetVersion(size_t* major, size_t* minor, size_t* patch)
{
    if(!major || !minor || !patch)
        return miopenStatusUnknownError;
    *major = MIOPEN_VERSION_MAJOR;
    *minor = MIOPEN_VERSION_MINOR;
    *patch = MIOPEN_VERSION_PATCH;
    return miopenStatusSuccess;
}
