"""Kernel sources: where a visibility's convolution weights come from.  W-projection tables
(`clgrid.sources.tables.KernelStack`), read at the nearest oversampled sample or
interpolated linearly (`clgrid.sources.interpolation`, the texture path), and the analytic
exponential-of-semicircle kernel (`clgrid.sources.analytic`, `clgrid.sources.accuracy`),
evaluated on the device."""
