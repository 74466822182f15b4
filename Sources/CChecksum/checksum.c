#include "checksum.h"

#if defined(__x86_64__)
#include <nmmintrin.h>

int sksim_crc32c_hardware_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
}

__attribute__((target("sse4.2")))
uint32_t sksim_crc32c_hardware(uint32_t crc, const void *bytes, size_t length) {
    const unsigned char *pointer = (const unsigned char *)bytes;
    uint64_t value = (uint32_t)~crc;
    while (length > 0 && ((uintptr_t)pointer & 7) != 0) {
        value = _mm_crc32_u8((uint32_t)value, *pointer++);
        length--;
    }
    while (length >= 8) {
        uint64_t word;
        __builtin_memcpy(&word, pointer, 8);
        value = _mm_crc32_u64(value, word);
        pointer += 8;
        length -= 8;
    }
    while (length > 0) {
        value = _mm_crc32_u8((uint32_t)value, *pointer++);
        length--;
    }
    return ~(uint32_t)value;
}
#else
int sksim_crc32c_hardware_available(void) { return 0; }

uint32_t sksim_crc32c_hardware(uint32_t crc, const void *bytes, size_t length) {
    (void)bytes;
    (void)length;
    return crc;
}
#endif
