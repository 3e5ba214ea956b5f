"""Every code block of README.md runs as written, and so does every block of the user guide
marked runnable (issue 30: a README whose examples do not run teaches nothing).

How a block runs (each in a fresh temporary folder, its only input the block itself):

- ``python``: written to ``block.py`` and run as a script with this interpreter, so that
  ``if __name__ == "__main__":`` guards work for Dask's worker processes.
- ``bash``: run by ``bash -e`` with this interpreter's environment first on ``PATH`` (its
  ``python`` and ``clgrid``).  A line that is a ``pip install`` is not run: the test
  environment is installed already and a test must not change it.  Instead every extra it
  names must be declared in pyproject.toml (pip only warns about an unknown extra, so a
  misspelt one would go unnoticed by a reader).
- The device is the one under test: ``CLGRID_DEVICE`` is set to ``$CLGRID_TEST_DEVICE``
  (PoCL by default), as a user's environment would set it; a block that names its devices
  keeps them.  ``PYTHONPATH`` starts with this checkout, so the blocks import the clgrid
  under test.
- The README's first block is the two set-up commands (install and time a small run;
  install and run the test suite).  CI runs them itself (``.ci/run``), and running the
  suite here would run this test again: `test_setup_commands_are_first_and_unchanged`
  checks instead that they are still first, byte for byte, and that ``.ci/run`` still runs
  what they say.

Each block must exit 0; where a block prints or writes what it promises (its comments say
so), `EXPECTED` checks that too.  A user-guide page marks a block runnable with an HTML
comment on the line before its fence, ``<!-- runnable ... -->``; its other blocks show a
call, not a whole program, and are not run.  Blocks that start a Dask cluster take several
seconds of worker start-up on 2 cores and are marked slow.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

try:
    import tomllib
except ModuleNotFoundError:     # Python 3.10: pytest's own dependency
    import tomli as tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
USER_GUIDE = ROOT / "docs" / "user-guide"

#: The set-up commands, kept first and byte for byte (CI runs them: .ci/run).
SETUP = '''\
# install, then grid a small run on PoCL and time it
pip install ".[pocl]" && clgrid bench --quick
# install, then the test suite on PoCL and on Intel's CPU runtime (what CI runs: .ci/run)
pip install -e ".[pocl,intel,test]" && python -m pytest -q && CLGRID_TEST_DEVICE=intel python -m pytest -q
'''

FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
RUNNABLE = re.compile(r"<!--\s*runnable\b[^>]*-->[ \t]*\n$")
PIP_INSTALL = re.compile(r"^\s*(?:\w+=\S+\s+)*pip install\b(.*)$")


def code_blocks(path: pathlib.Path):
    """``(heading, language, code, marked_runnable)`` for each fenced block of ``path``,
    ``heading`` the nearest heading above it."""
    text = path.read_text()
    blocks = []
    for match in FENCE.finditer(text):
        before = text[:match.start()]
        headings = re.findall(r"^#{1,6} (.+)$", before, re.M)
        blocks.append((headings[-1] if headings else "(top)", match.group(1), match.group(2),
                       bool(RUNNABLE.search(before))))
    return blocks


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40]


def _cases():
    cases = []
    for index, (heading, language, code, _) in enumerate(code_blocks(README)):
        if index == 0 or language not in ("python", "bash"):
            continue            # the set-up commands: checked by test_setup_commands_are_first_and_unchanged
        cases.append((f"README-{_slug(heading)}-{index}", language, code))
    for page in sorted(USER_GUIDE.glob("*.md")):
        for index, (heading, language, code, runnable) in enumerate(code_blocks(page)):
            if runnable:
                cases.append((f"{page.stem}-{_slug(heading)}-{index}", language, code))
    return [pytest.param(language, code, id=name,
                         marks=[pytest.mark.slow] if "LocalCluster" in code else [])
            for name, language, code in cases]


def _declared_extras() -> set:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return set(tomllib.load(f)["project"]["optional-dependencies"])


def _check_pip_install(line: str) -> None:
    """The extras a README ``pip install`` line names are declared in pyproject.toml."""
    arguments = PIP_INSTALL.match(line).group(1)
    named = re.findall(r"\[([^\]]*)\]", arguments)
    unknown = {e.strip() for group in named for e in group.split(",")} - _declared_extras()
    assert not unknown, f"{line.strip()!r} names extras pyproject.toml does not declare: {sorted(unknown)}"
    assert re.search(r"(^|\s)[\"']?\.(\[|[\"']|\s|$)", arguments), \
        f"{line.strip()!r}: the README installs from the checkout ('.')"


def _environment() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PATH"] = os.pathsep.join([str(pathlib.Path(sys.executable).parent), env.get("PATH", "")])
    env["CLGRID_DEVICE"] = os.environ.get("CLGRID_TEST_DEVICE", "pocl")
    env.pop("CLGRID_TEST_SEED", None)
    return env


def _run(language: str, code: str, folder: pathlib.Path) -> subprocess.CompletedProcess:
    if language == "python":
        (folder / "block.py").write_text(code)
        command = [sys.executable, "block.py"]
    else:
        lines = []
        for line in code.splitlines():
            if PIP_INSTALL.match(line):
                _check_pip_install(line)
                line = f": {line}"          # kept, so that line numbers in errors match the block
            lines.append(line)
        (folder / "block.sh").write_text("\n".join(lines) + "\n")
        command = ["bash", "-e", "block.sh"]
    return subprocess.run(command, cwd=folder, env=_environment(), capture_output=True, text=True, timeout=600)


def _fits_written(folder, out):
    names = {p.name for p in folder.glob("*.fits")}
    expected = {"obs-dirty.fits", "obs-psf.fits"} | {f"obs-{c}-{p}-dirty.fits" for c in ("0000", "0001", "MFS")
                                                     for p in "IQUV"}
    assert expected <= names, f"missing {sorted(expected - names)}"
    from astropy.io import fits
    with fits.open(folder / "obs-dirty.fits") as hdus:
        image = hdus[0].data[0, 0]
    assert 0.8 < image.max() < 1.1, f"the simulated 1 Jy source peaks at {image.max()} Jy/beam"


def _source_on_its_pixel(folder, out):
    x, y, flux = out.split()[:3]
    assert (int(x), int(y)) == (40, -20) and abs(float(flux) - 1.0) < 1e-3, out


def _cycles_converge(folder, out):
    peaks = [float(p) for p in re.findall(r"residual peak ([0-9.]+) Jy", out)]
    models = [float(m) for m in re.findall(r"model ([0-9.]+) Jy", out)]
    assert len(peaks) == 4 and peaks[-1] < 0.01 and peaks[-1] < peaks[0] / 4, out
    assert abs(models[-1] - 1.5) < 0.02, f"the model holds {models[-1]} Jy of the 1.5 Jy simulated:\n{out}"


#: What a block promises beyond exiting 0, by a line of its code: check(folder, stdout).
EXPECTED = {
    "clgrid image obs.ms -o obs": _fits_written,
    "print(x - npix // 2, y - npix // 2, dirty[x, y] / vis.size)": _source_on_its_pixel,
    "for cycle in range(4):": _cycles_converge,
}


@pytest.mark.parametrize("language, code", _cases())
def test_block_runs_as_written(language, code, tmp_path):
    result = _run(language, code, tmp_path)
    assert result.returncode == 0, (f"the block exited {result.returncode}\n--- block\n{code}\n--- stdout\n"
                                    f"{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-8000:]}")
    for line, check in EXPECTED.items():
        if line in code:
            check(tmp_path, result.stdout)


def test_every_readme_block_is_run_or_checked():
    """Blocks the test would not run (another language) need a decision, not silence."""
    blocks = code_blocks(README)
    assert blocks, "README.md has no code block"
    assert [language for _, language, _, _ in blocks[1:] if language not in ("python", "bash")] == []
    used = [line for line in EXPECTED if any(line in code for _, _, code, _ in blocks)]
    assert len(used) == len(EXPECTED), f"EXPECTED names lines no README block holds: {set(EXPECTED) - set(used)}"


def test_setup_commands_are_first_and_unchanged():
    heading, language, code, _ = code_blocks(README)[0]
    assert (language, code) == ("bash", SETUP), "README.md's first block must be the two set-up commands, as they were"
    ci = (ROOT / ".ci" / "run").read_text()
    for command in ("clgrid bench --quick", "python -m pytest -q", "CLGRID_TEST_DEVICE=intel python -m pytest -q"):
        assert command in ci, f".ci/run no longer runs {command!r}, which README.md's set-up commands say it does"


def test_readme_stays_short():
    """Issue 30: the README is an entry point of at most 15 KB; reference material lives in docs/."""
    assert README.stat().st_size <= 15 * 1024, f"README.md is {README.stat().st_size} bytes"
