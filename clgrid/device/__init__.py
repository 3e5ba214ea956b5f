"""OpenCL plumbing: device discovery and facts, the tuning table, code generation and
offline binaries, transfers between host and device, host threads, and the small device
algorithms every part shares (scan, counting sort, sums, float atomics)."""
