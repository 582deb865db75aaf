#ifndef PEERLINK_CLIBFUZZER_SHIM_H
#define PEERLINK_CLIBFUZZER_SHIM_H
#include <stddef.h>
#include <stdint.h>

/* libFuzzer's driver, for a program that has its own main (compiler-rt's
 * FuzzerInterface.h, "LLVMFuzzerRunDriver"). peerlink-fuzz calls it from the entry
 * point SwiftPM's link line names (see Sources/peerlink-fuzz/FuzzEntry.swift); only the
 * -sanitize=fuzzer build references it, so ordinary builds need no libFuzzer. */
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
