#ifndef SKSIM_MEMORY_ALLOCATOR_H
#define SKSIM_MEMORY_ALLOCATOR_H

/// Sets glibc's trim threshold, top pad and mmap threshold (mallopt), in bytes; returns 0 when all
/// three were taken, -1 otherwise (or where the allocator is not glibc's). See MemoryAllocator.swift.
int sksim_configure_allocator(int kept_free_bytes, int growth_bytes, int own_mapping_bytes);

#endif
