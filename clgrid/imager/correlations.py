"""Polarisations an image is made of, and how each is formed from a Measurement Set's
correlations, with WSClean's relations and its rule for weights and flags.

An MS stores correlations (CASA's Stokes codes in ``POLARIZATION::CORR_TYPE``: RR RL LR LL,
XX XY YX YY, or Stokes I Q U V themselves).  An image of one of them reads it as it is; a
Stokes parameter the MS does not hold is formed from two of them:

    I = (XX + YY) / 2       or (RR + LL) / 2
    Q = (XX - YY) / 2       or (RL + LR) / 2
    U = (XY + YX) / 2       or -i (RL - LR) / 2
    V = -i (XY - YX) / 2    or (RR - LL) / 2

(the linear pair is taken where the MS has it, as WSClean does).  A formed sample is kept
only where both its correlations are unflagged and finite, with the smaller of their two
weights (WSClean's rule; it also multiplies that weight by 4, a factor every image and its
normalisation cancel, left out here).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CORRELATION_CODES", "Recipe", "parse_polarizations", "recipe"]

#: CASA's Stokes enumeration (casacore ``Stokes::StokesTypes``) for the correlations an
#: imager meets.
CORRELATION_CODES = {"I": 1, "Q": 2, "U": 3, "V": 4, "RR": 5, "RL": 6, "LR": 7, "LL": 8,
                     "XX": 9, "XY": 10, "YX": 11, "YY": 12}
CODE_NAMES = {code: name for name, code in CORRELATION_CODES.items()}

STOKES = ("I", "Q", "U", "V")
#: what ``--pol`` accepts, one image each
POLARIZATIONS = STOKES + ("XX", "XY", "YX", "YY", "RR", "RL", "LR", "LL")

# The pairs (and their coefficients) a Stokes parameter is formed from, in WSClean's order
# of preference.
_FORMED = {
    "I": ((("XX", 0.5), ("YY", 0.5)), (("RR", 0.5), ("LL", 0.5))),
    "Q": ((("XX", 0.5), ("YY", -0.5)), (("RL", 0.5), ("LR", 0.5))),
    "U": ((("XY", 0.5), ("YX", 0.5)), (("RL", -0.5j), ("LR", 0.5j))),
    "V": ((("XY", -0.5j), ("YX", 0.5j)), (("RR", 0.5), ("LL", -0.5))),
}


@dataclass(frozen=True)
class Recipe:
    """How one polarisation is formed: ``sum(coefficients[k] * data[..., indices[k]])``,
    ``indices`` into the MS's correlations."""

    polarization: str
    indices: tuple
    coefficients: tuple

    def describe(self, correlations) -> str:
        """``"I = (XX + YY)/2"``, ``"V = -i(XY - YX)/2"``, ``"XX (the MS's own)"``."""
        names = [correlations[i] for i in self.indices]
        if len(names) == 1:
            return f"{self.polarization}: the MS's own correlation {names[0]}"
        first, second = self.coefficients
        sign = "+" if second == first else "-"
        factor = "-i" if first == -0.5j else ""
        return f"{self.polarization} = {factor}({names[0]} {sign} {names[1]})/2"

    def form(self, data, flags, weights, out_vis, out_wgt) -> None:
        """Form this polarisation from a block of rows: ``data`` (rows, chans, corrs)
        complex, ``flags`` the same shape, ``weights`` the same shape; writes ``out_vis``
        (complex, rows x chans) and ``out_wgt`` (float, rows x chans): zero weight (and
        zero data) where a correlation used is flagged, not finite, or has weight <= 0."""
        np.copyto(out_wgt, weights[:, :, self.indices[0]])
        out_vis[...] = 0
        good = out_wgt > 0
        for index, coefficient in zip(self.indices, self.coefficients):
            values = data[:, :, index]
            out_vis += coefficient * values if coefficient != 1 else values
            good &= ~flags[:, :, index]
            good &= np.isfinite(values.real)
            good &= np.isfinite(values.imag)
            np.minimum(out_wgt, weights[:, :, index], out=out_wgt)
        good &= out_wgt > 0
        out_wgt[~good] = 0
        out_vis[~good] = 0


def parse_polarizations(text: str) -> tuple:
    """``--pol``'s value as a tuple of names: ``"I"``, ``"xx,yy"``, ``"IQUV"`` (a run of Stokes
    letters), ``"i,q"``; refuses anything else, naming what it accepts."""
    items = [t.strip().upper() for t in str(text).split(",") if t.strip()]
    if len(items) == 1 and len(items[0]) > 1 and all(c in STOKES for c in items[0]) \
            and items[0] not in POLARIZATIONS:
        items = list(items[0])
    unknown = [t for t in items if t not in POLARIZATIONS]
    if not items or unknown:
        raise ValueError(f"--pol: unknown polarisation {', '.join(unknown) or repr(text)}; choose among "
                         f"{' '.join(POLARIZATIONS)} or IQUV (comma-separated for several)")
    if len(set(items)) != len(items):
        raise ValueError(f"--pol: {text!r} names a polarisation twice")
    return tuple(items)


def recipe(polarization: str, correlations) -> Recipe:
    """How ``polarization`` is formed from an MS with ``correlations`` (names, in the MS's
    order); ValueError naming what the MS has when it cannot be."""
    correlations = tuple(correlations)
    if polarization in correlations:
        return Recipe(polarization, (correlations.index(polarization),), (1.0,))
    for pair in _FORMED.get(polarization, ()):
        if all(name in correlations for name, _ in pair):
            return Recipe(polarization, tuple(correlations.index(n) for n, _ in pair), tuple(c for _, c in pair))
    needs = " or ".join("+".join(n for n, _ in pair) for pair in _FORMED.get(polarization, ()))
    raise ValueError(f"--pol {polarization}: the MS has the correlations {' '.join(correlations)}; "
                     f"{polarization} needs {needs or polarization}")
