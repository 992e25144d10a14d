# SPDX-License-Identifier: Apache-2.0
"""The `tidal` command line: `tidal admission ...`, `tidal predict ...`, and the commands other
distributions add under the ``tidal.commands`` entry-point group (the development distribution
adds `tidal lab ...`). The product never imports those distributions: it finds them by name."""
import sys
from importlib.metadata import entry_points

BUILTIN = ("admission", "predict")


def _plugins():
    return {ep.name: ep for ep in entry_points(group="tidal.commands")}


def _usage(plugins) -> str:
    names = sorted({*BUILTIN, *plugins})
    return (f"usage: tidal {{{','.join(names)}}} ...  ("
            + ", ".join(f"tidal {name} --help" for name in names) + ")")


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "admission":
        from tidal.manager.admission.cli import main as admission_main
        return admission_main(args[1:])
    if args and args[0] == "predict":
        from tidal.predict.cli import main as predict_main
        return predict_main(args[1:])
    plugins = _plugins()
    if args and args[0] in plugins:
        return plugins[args[0]].load()(args[1:])
    if args and args[0] == "lab":
        print("tidal lab: the lab is part of the development distribution, which is not installed here "
              "(`make venv` in a checkout installs it: pip install -e devtools)", file=sys.stderr)
        return 2
    print(_usage(plugins), file=sys.stderr)
    return 2
