"""Planning: validated positions turned into integer grid work once, in float64 (on the
device where it has fp64, with a bit-identical host twin), and the values of each call put
in a plan's order."""
