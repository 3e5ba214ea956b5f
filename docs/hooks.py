"""mkdocs hooks for the clgrid site (registered in mkdocs.yml under ``hooks:``).

Two substitutions, so that pages need no upkeep when the package or its sources change:

- A line ``<!-- modules of clgrid.PACKAGE -->`` in a page becomes one mkdocstrings
  ``::: clgrid.PACKAGE.MODULE`` block per module file of the package (read from the source
  tree, nothing imported), so a module added or renamed appears in the API reference
  without editing the page.
- "seed 00N", the name the code and older notes give the source documents in
  ``/work/shared/seeds/``, becomes a link to that document's entry on the references page
  (docs/references.md), wherever it is rendered: pages, included BENCHMARKS sections and the
  docstrings shown in the API reference.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MODULES = re.compile(r"^<!-- modules of (clgrid(?:\.\w+)*) -->$", re.MULTILINE)

# seed number -> (anchor on docs/references.md, the citation shown)
SEEDS = {
    "000": ("dulwich2018", "Dulwich et al. 2018"),
    "001": ("nvidia-degrid", "NVIDIA GPUDegrid report"),
    "002": ("luitjens-cuda", "Luitjens, Hands-on CUDA"),
    "003": ("nag-gridding", "NAG, SDP memo 36"),
    "004": ("romein2012", "Romein 2012"),
}
SEED = re.compile(r"\b[Ss]eed (00[0-4])\b")


def _module_blocks(match):
    package = match.group(1)
    folder = ROOT.joinpath(*package.split("."))
    names = sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))
    return "\n\n".join(f"::: {package}.{name}" for name in names)


def on_page_markdown(markdown, page, config, files):
    return MODULES.sub(_module_blocks, markdown)


def on_page_content(html, page, config, files):
    depth = page.url.count("/")
    prefix = "../" * depth

    def cite(match):
        anchor, text = SEEDS[match.group(1)]
        return f'<a href="{prefix}references/#{anchor}" title="seed {match.group(1)}">{text}</a>'

    # only in text between tags, never inside a tag's attributes or an existing link
    parts = re.split(r"(<a\b.*?</a>|<[^>]+>)", html, flags=re.DOTALL)
    return "".join(part if part.startswith("<") else SEED.sub(cite, part) for part in parts)
