#ifndef MIOPEN_DEMO_H
#define MIOPEN_DEMO_H
/* The rocmbuild demo's miniature MIOpen header: the status type and the version entry point. */
#include <stddef.h>
typedef enum { miopenStatusSuccess = 0, miopenStatusUnknownError = 7 } miopenStatus_t;
miopenStatus_t miopenGetVersion(size_t* major, size_t* minor, size_t* patch);
#endif
