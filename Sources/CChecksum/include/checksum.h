#ifndef SKSIM_CHECKSUM_H
#define SKSIM_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/// 1 when this CPU computes CRC-32C in hardware (x86-64 SSE4.2 `crc32`), 0 otherwise.
int sksim_crc32c_hardware_available(void);

/// CRC-32C of `length` bytes continuing from `crc` (0 to start), by the CPU's instruction.
/// Call only when `sksim_crc32c_hardware_available()` returned 1.
uint32_t sksim_crc32c_hardware(uint32_t crc, const void *bytes, size_t length);

#endif
