"""What every benchmark script does with its result: print it as JSON and, when given a
path (``--json``), write the same text there."""

from __future__ import annotations

import json


def report(result: dict, path=None) -> None:
    text = json.dumps(result, indent=1)
    print(text)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")
