#ifndef CZEROMQ_SHIM_H
#define CZEROMQ_SHIM_H

/* Everything the Swift wrapper needs (functions, option and error constants)
   imports directly from zmq.h, so no helpers are required here. */
#include <zmq.h>

#endif
