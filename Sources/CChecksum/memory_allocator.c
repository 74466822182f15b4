// mallopt and its M_ constants are in <malloc.h>, which Swift's Glibc module does not bring in.
#include "memory_allocator.h"
#if defined(__GLIBC__)
#include <malloc.h>
#endif

int sksim_configure_allocator(int kept_free_bytes, int growth_bytes, int own_mapping_bytes) {
#if defined(__GLIBC__)
    int taken = mallopt(M_TRIM_THRESHOLD, kept_free_bytes) & mallopt(M_TOP_PAD, growth_bytes)
        & mallopt(M_MMAP_THRESHOLD, own_mapping_bytes);
    return taken ? 0 : -1;
#else
    (void)kept_free_bytes; (void)growth_bytes; (void)own_mapping_bytes;
    return -1;
#endif
}
