{# Single work-item ("task") kernels for Intel's FPGA SDK for OpenCL, and the Intel-only
    pragmas: aoc defines INTELFPGA_CL; every other compiler gets the same source without
    the Intel extensions, so PoCL and Oclgrind run it as a functional emulation.  Shared
    by the W-projection FPGA kernels (fpga.cl) and the w-stacking ones (fpga_stacked.cl). #}
/* A single work-item kernel ("task"); for aoc also without hardware for work-item
   IDs (Intel FPGA SDK for OpenCL Programming Guide, "Omit Hardware that Generates
   and Dispatches Kernel IDs"). */
#ifdef INTELFPGA_CL
#define SINGLE_WORK_ITEM __attribute__((max_global_work_dim(0), reqd_work_group_size(1, 1, 1)))
#define INTEL_PRAGMA(text) _Pragma(text)
#else
#define SINGLE_WORK_ITEM __attribute__((reqd_work_group_size(1, 1, 1)))
#define INTEL_PRAGMA(text)
#endif
