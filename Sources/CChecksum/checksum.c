#include "checksum.h"

#if defined(__x86_64__)
#include <nmmintrin.h>

int sksim_crc32c_hardware_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
}

__attribute__((target("sse4.2")))
uint32_t sksim_crc32c_hardware(uint32_t crc, const void *bytes, size_t length) {
    // Eight bytes per instruction from the first byte (x86-64 loads unaligned words at full speed), then
    // the last 0-7 bytes in at most three steps: each crc32 instruction waits for the previous one, so a
    // log record's checksum costs about as many instructions as it has words, not one per byte at its ends.
    const unsigned char *pointer = (const unsigned char *)bytes;
    uint64_t value = (uint32_t)~crc;
    while (length >= 8) {
        uint64_t word;
        __builtin_memcpy(&word, pointer, 8);
        value = _mm_crc32_u64(value, word);
        pointer += 8;
        length -= 8;
    }
    uint32_t rest = (uint32_t)value;
    if (length >= 4) {
        uint32_t word;
        __builtin_memcpy(&word, pointer, 4);
        rest = _mm_crc32_u32(rest, word);
        pointer += 4;
        length -= 4;
    }
    if (length >= 2) {
        uint16_t word;
        __builtin_memcpy(&word, pointer, 2);
        rest = _mm_crc32_u16(rest, word);
        pointer += 2;
        length -= 2;
    }
    if (length > 0) rest = _mm_crc32_u8(rest, *pointer);
    return ~rest;
}
#else
int sksim_crc32c_hardware_available(void) { return 0; }

uint32_t sksim_crc32c_hardware(uint32_t crc, const void *bytes, size_t length) {
    (void)bytes;
    (void)length;
    return crc;
}
#endif
