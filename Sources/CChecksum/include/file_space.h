#ifndef SKSIM_FILE_SPACE_H
#define SKSIM_FILE_SPACE_H

#include <stdint.h>

/// Reserves `length` bytes of disk space from `offset` without changing the file's size
/// (Linux fallocate with FALLOC_FL_KEEP_SIZE, which Swift's Glibc module does not import).
/// Returns 0 on success, else an errno value (ENOTSUP where the file system or platform cannot).
int sksim_reserve_space(int descriptor, uint64_t offset, uint64_t length);

#endif
