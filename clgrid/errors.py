"""Exceptions raised by clgrid, so callers can tell bad input from device trouble."""


class ClgridError(Exception):
    """Base class of every error clgrid raises on purpose."""


class DeviceCapabilityError(ClgridError, ValueError):
    """The chosen OpenCL device cannot do what was asked (fp64, memory, images)."""


class HostMemoryError(ClgridError, MemoryError):
    """An image or data set too large for the host's memory, refused before any work."""


class KernelBuildError(ClgridError, RuntimeError):
    """An OpenCL program failed to build; the message carries the log and the source path."""


class DroppedVisibilitiesError(ClgridError, ValueError):
    """Visibilities fell off the grid or beyond the kernel stack and `on_dropped="raise"`."""


class BinaryMismatchError(ClgridError, ValueError):
    """A precompiled program was built for other parameters than the call needs."""


class NonFiniteResultError(ClgridError, FloatingPointError):
    """An operator's output holds inf or NaN although its inputs were finite: overflow."""


class ClusterStalledError(ClgridError, RuntimeError):
    """A `clgrid.dask` call could make no progress for ``stall_timeout`` seconds: its workers
    paused for memory, restarted or gone (`clgrid.dask.watch`)."""


class EmptyInputWarning(UserWarning):
    """Nothing was gridded or degridded (all flagged, dropped or of zero weight): the result is zero."""


class StreamedWarning(UserWarning):
    """An imaging operator's points do not fit its device at once: they are streamed through
    it, slab by slab of w-planes, planned again every call (slower than kept points; the
    operator's ``streamed`` says how)."""
