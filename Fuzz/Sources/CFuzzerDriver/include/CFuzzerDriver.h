// libFuzzer's entry point for a program that has its own main (compiler-rt's FuzzerInterface.h).
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));
