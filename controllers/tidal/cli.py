# SPDX-License-Identifier: Apache-2.0
"""The `tidal` command line: `tidal lab ...`, `tidal admission ...`, `tidal predict ...`."""
import sys

USAGE = "usage: tidal {lab,admission,predict} ...  (tidal lab --help, tidal admission --help, tidal predict --help)"


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "lab":
        from tidal.lab.cli import main as lab_main
        return lab_main(args[1:])
    if args and args[0] == "admission":
        from tidal.manager.admission.cli import main as admission_main
        return admission_main(args[1:])
    if args and args[0] == "predict":
        from tidal.predict.cli import main as predict_main
        return predict_main(args[1:])
    print(USAGE, file=sys.stderr)
    return 2
