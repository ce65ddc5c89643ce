"""python3 -m braid --version: the version and the features this build has."""

import argparse
import sys

import braid
from braid import _core


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m braid",
                                     description="braid, collective communication for Python.")
    parser.add_argument("--version", action="store_true",
                        help="print the version and the enabled features")
    args = parser.parse_args(argv)
    if not args.version:
        parser.print_help()
        return 0
    print(f"braid {braid.__version__} (Python {sys.version.split()[0]}, {braid.__file__})")
    print(f"features: {_core.features()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
