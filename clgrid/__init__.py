"""clgrid: gridding and degridding of radio visibilities with W-projection on OpenCL."""

from . import baseline_order, imaging, interpolation, io, reference, tuning
from .errors import ClgridError, DeviceCapabilityError, DroppedVisibilitiesError, KernelBuildError
from .runtime import devices
from .gridder import Gridder
from .degridder import Degridder
from .kernels import KernelStack
from .device_plan import Plan
from .wgridding import WGridder, dirty2vis, vis2dirty

__version__ = "0.1.0"
__all__ = ["Gridder", "Degridder", "KernelStack", "Plan", "WGridder", "vis2dirty", "dirty2vis", "devices",
           "reference", "imaging", "io", "interpolation", "baseline_order", "ClgridError", "DeviceCapabilityError",
           "DroppedVisibilitiesError", "KernelBuildError", "__version__"]
