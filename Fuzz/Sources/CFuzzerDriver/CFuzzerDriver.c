// Declarations only: the driver is in libFuzzer, linked by -sanitize=fuzzer.
#include "CFuzzerDriver.h"
