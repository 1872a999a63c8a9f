/* The fuzz executable's only C file. libFuzzer (linked by -sanitize=fuzzer) supplies `main`, which calls
   LLVMFuzzerTestOneInput from the AuthProxyFuzz Swift target. This target exists because a Swift executable
   would get SwiftPM's renamed entry point instead of libFuzzer's `main`. */
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
