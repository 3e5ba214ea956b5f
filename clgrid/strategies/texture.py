"""Texture-interpolated gridding and degridding (seed 004 §4.1, §6.4): the kernels of all
w-planes as one 3D image, sampled with linear filtering at the continuous (u, v, w)
position of every footprint cell, instead of the nearest oversampled sample of the
nearest w-plane (semantics: `clgrid.sources.interpolation`).

The work distributions are atomic gridding and gather degridding, unchanged; only
the weight of a tap differs (their templates include ``source_texture.cl``, the name
`KernelStack.device_source` gives for linear interpolation).  The tuning's
``sampler`` picks the image ("image": the texture unit interpolates) or a buffer
interpolated in the kernel ("software": devices without images or without float
images, FPGA emulation); a device that cannot do "image" falls back to "software"
with a warning.  Both read the quarter cube (`KernelStack.cube`), zero-padded.
Images hold float32 weights and positions travel in float32, so precision="double"
accumulates in double but its weights are good to float32 (software: ~1e-7).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyopencl as cl

from ..call_warnings import warn
from ..planning.host import Positions
from .atomic import AtomicGridding
from .base import DevicePlan, Strategy, extended, read_only_buffer
from .gather import GatherDegridding

__all__ = ["SAMPLERS", "TextureDevicePlan", "device_positions", "cube_image_format",
           "TextureGridding", "TextureDegridding"]

SAMPLERS = ("image", "software")
# Two float channels hold a complex weight; RGBA (two channels unused) where RG is missing, as on PoCL.
IMAGE_ORDERS = ("RG", "RGBA")


@dataclass
class TextureDevicePlan(DevicePlan):
    """The plan plus each visibility's sampler position (`device_positions`)."""

    position: cl.Buffer


def device_positions(plan: Positions) -> np.ndarray:
    """float32 rows (frac_u, frac_v, z, footprint support), one float4 per visibility.

    The cell stays integer (planned in float64); float32 puts the sampler within about
    6e-8 of a texel fraction per unit position, far below fp32 accumulation error.
    """
    out = np.empty((plan.num_kept, 4), np.float32)
    out[:, :3] = plan.position
    out[:, 3] = plan.support
    return out


def cube_image_format(facts, device, context, cube_shape) -> tuple:
    """``(format, None)`` of a float 3D image that holds the cube on ``device`` (described
    by ``facts``), or ``(None, why)`` when there is none."""
    if not facts.images:
        return None, "the device has no image support"
    planes, side, _ = cube_shape
    if side > min(device.image3d_max_width, device.image3d_max_height) or planes > device.image3d_max_depth:
        return None, (f"the cube ({side} x {side} x {planes}) exceeds the device's 3D image limits "
                      f"({device.image3d_max_width} x {device.image3d_max_height} x {device.image3d_max_depth})")
    offered = {(f.channel_order, f.channel_data_type) for f in
               cl.get_supported_image_formats(context, cl.mem_flags.READ_ONLY, cl.mem_object_type.IMAGE3D)}
    for order in IMAGE_ORDERS:
        order = getattr(cl.channel_order, order)
        if (order, cl.channel_type.FLOAT) in offered:
            return cl.ImageFormat(order, cl.channel_type.FLOAT), None
    return None, f"it offers no {' or '.join(IMAGE_ORDERS)} float 3D image format"


class TextureSampling:
    """What the texture strategies add to a work distribution: the sampler, the cube on
    the device and the positions; mixed in before the distribution's strategy class."""

    interpolation = "linear"
    analytic_source = False    # the cube is a table: its atomic and gather parents' analytic path is not this

    def __init__(self, queue, grid_size, kernels, precision, tuning=None, binary=None):
        super().__init__(queue, grid_size, kernels, precision, tuning, binary)
        sampler = self.tuning["sampler"]
        if sampler not in SAMPLERS:
            raise ValueError(f"tuning parameter 'sampler' must be one of {SAMPLERS}, got {sampler!r}")
        self.image_format = None
        if sampler == "image":
            self.image_format, why = cube_image_format(self.facts, self.queue.device, self.queue.context,
                                                       self.cube_shape)
            if self.image_format is None:
                warn(f"{self.name}: sampler 'image' unavailable on {self.facts.name}: {why}; "
                     f"using 'software'", stacklevel=None)
                self.tuning["sampler"] = "software"

    @property
    def cube_shape(self) -> tuple:
        return (self.kernels.num_planes,) + (int(self.kernels.quarter_sizes.max()),) * 2

    @classmethod
    def program_parameters(cls, tuning, precision, npol, grid_size, kernels) -> dict:
        return dict(super().program_parameters(tuning, precision, npol, grid_size, kernels),
                    cube_side=int(kernels.quarter_sizes.max()), cube_planes=kernels.num_planes)

    @cached_property
    def device_cube(self):
        """The quarter cube as an image (float32 channels) or a buffer in the strategy's precision."""
        cube = self.kernels.cube()
        context = self.queue.context
        if self.tuning["sampler"] == "software":
            return read_only_buffer(context, cube.astype(self.complex_dtype))
        channels = 2 if self.image_format.channel_order == cl.channel_order.RG else 4
        texels = np.zeros(cube.shape + (channels,), np.float32)
        texels[..., 0], texels[..., 1] = cube.real, cube.imag
        planes, side, _ = cube.shape
        return cl.create_image(context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, self.image_format,
                               shape=(side, side, planes), hostbuf=texels)

    def arrange(self, plan, npol: int) -> DevicePlan:
        """On the host: the sampler positions are float64 host arrays (plans for interpolated
        weights are made there)."""
        return Strategy.arrange(self, plan, npol)

    def upload(self, positions: Positions, plan, npol: int) -> TextureDevicePlan:
        return extended(super().upload(positions, plan, npol), TextureDevicePlan,
                        position=read_only_buffer(self.queue.context, device_positions(positions)))


class TextureGridding(TextureSampling, AtomicGridding):
    """Atomic gridding with interpolated weights."""

    name = "texture"


class TextureDegridding(TextureSampling, GatherDegridding):
    """Gather degridding with interpolated weights."""

    name = "degrid_texture"
