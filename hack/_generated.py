# SPDX-License-Identifier: Apache-2.0
"""What every ``hack/generate_*.py`` shares: where the checkout is, and the write/--check protocol.

``python hack/generate_X.py`` rewrites the files it owns; ``python hack/generate_X.py --check``
writes nothing and exits 1 listing every stale or missing file (0 when all are fresh).
``make generate`` runs every generator; ``tests/unit/test_generated.py`` runs each with
``--check``. Generators import ``tidal`` from ``controllers/`` of this checkout (put first on
``sys.path`` here), whatever the virtualenv's editable install points at.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "controllers"))


def run(description: str, outputs: Callable[[], Mapping[Path, str]],
        owned: Callable[[], Iterable[Path]] | None = None) -> int:
    """The command line of one generator: ``outputs()`` maps each file it owns to its text.
    ``owned()``, when given, lists the files already in the generator's own directories: those
    ``outputs()`` no longer produces (say, the page of a removed module) are reported with
    ``--check`` and deleted otherwise."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 listing the files that are stale, missing or no longer generated")
    args = parser.parse_args()
    files = outputs()
    stale = []
    for path, text in files.items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append((path, "missing" if current is None else "stale"))
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for path in sorted(set(owned() if owned else ()) - set(files)):
        stale.append((path, "not generated"))
        if not args.check:
            path.unlink()
    generator = Path(sys.argv[0]).resolve().relative_to(ROOT)
    for path, state in stale:
        verb = f"{state}:" if args.check else ("removed" if state == "not generated" else "wrote")
        print(f"{generator}: {verb} {path.relative_to(ROOT)}", file=sys.stderr)
    if args.check and stale:
        print(f"{generator}: regenerate with `make generate` (or `python {generator}`)", file=sys.stderr)
        return 1
    return 0
