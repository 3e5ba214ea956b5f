"""clgrid: gridding and degridding of radio visibilities, and images made from them, on any
OpenCL device."""

from . import imaging, io, reference
from .device.runtime import devices
from .errors import ClgridError, DeviceCapabilityError, DroppedVisibilitiesError, HostMemoryError, KernelBuildError, \
    StreamedWarning
from .imaging import WGridder, dirty2vis, vis2dirty
from .operators.degridder import Degridder
from .operators.gridder import Gridder
from .planning.plan import Plan
from .sources.tables import KernelStack

__version__ = "0.1.0"
__all__ = ["Gridder", "Degridder", "KernelStack", "Plan", "WGridder", "vis2dirty", "dirty2vis", "devices",
           "reference", "imaging", "io", "ClgridError", "DeviceCapabilityError", "DroppedVisibilitiesError",
           "KernelBuildError", "HostMemoryError", "StreamedWarning", "__version__"]
