"""The imager behind ``clgrid image``: Measurement Sets in, WSClean's dirty images and PSFs out.

- `clgrid.imager.ms`: Measurement Sets read directly with python-casacore, in blocks of rows;
- `clgrid.imager.correlations`: Stokes parameters and correlations formed as WSClean forms them;
- `clgrid.imager.weighting`: natural, uniform and Briggs imaging weights, WSClean's grid and
  rank filter (usable with `clgrid.vis2dirty`: multiply ``wgt`` by them);
- `clgrid.imager.device_weighting`: the weights' passes over the samples on an OpenCL device;
- `clgrid.imager.beam`: the beam fitted to the PSF;
- `clgrid.imager.fits`: FITS files with WSClean's axes and keywords;
- `clgrid.imager.pipeline`: the command's steps (`run`, `ImagingOptions`);

python-casacore and astropy come with the ``ms`` extra: ``pip install 'clgrid[ms]'``.
Simulated Measurement Sets for trying it: `clgrid.tools.simulated_ms`.
"""

from .correlations import parse_polarizations
from .ms import MSError, open_ms
from .pipeline import ImagingError, ImagingOptions, output_names, run
from .units import parse_angle
from .weighting import WeightGrid

__all__ = ["ImagingOptions", "ImagingError", "MSError", "WeightGrid", "open_ms", "output_names",
           "parse_angle", "parse_polarizations", "run"]
