// The event log's C helpers live in this target (CChecksum): the CRC32C kernels and this one call.
#define _GNU_SOURCE
#include "file_space.h"
#include <errno.h>
#include <fcntl.h>

int sksim_reserve_space(int descriptor, uint64_t offset, uint64_t length) {
#if defined(__linux__)
    for (;;) {
        if (fallocate(descriptor, FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)length) == 0) return 0;
        if (errno != EINTR) return errno;
    }
#else
    (void)descriptor; (void)offset; (void)length;
    return ENOTSUP;
#endif
}
