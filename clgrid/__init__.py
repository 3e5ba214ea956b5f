"""clgrid: gridding and degridding of radio visibilities with W-projection on OpenCL."""

from . import reference, tuning
from .errors import ClgridError, DeviceCapabilityError, DroppedVisibilitiesError, KernelBuildError
from .runtime import devices
from .gridder import Gridder
from .degridder import Degridder
from .kernels import KernelStack
from .device_plan import Plan

__version__ = "0.1.0"
__all__ = ["Gridder", "Degridder", "KernelStack", "Plan", "devices", "reference", "ClgridError", "DeviceCapabilityError",
           "DroppedVisibilitiesError", "KernelBuildError", "__version__"]
