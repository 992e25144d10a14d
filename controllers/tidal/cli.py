"""The `tidal` command line; subcommands are added by their packages."""
import sys


def main(argv=None):
    from tidal.lab.cli import main as lab_main
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "lab":
        print("usage: tidal lab {build,up,down,status,kubeconfig,logs} ...", file=sys.stderr)
        return 2
    return lab_main(args[1:])
