import sys

from bench._common import stderr
from bench.cli import main

if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        stderr("interrupted")
        sys.exit(130)
