"""``python -m hogwild.mnist`` (and ``torchrun ... -m hogwild.mnist``)."""

import sys

from hogwild.mnist import main

if __name__ == "__main__":
    sys.exit(main())
