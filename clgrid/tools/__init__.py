"""Tooling around the library: the command line, benchmarks and their data sets, comparisons
with peer libraries, the tuner, plots, Oclgrind runs and accuracy studies.  The library
itself never imports it."""
