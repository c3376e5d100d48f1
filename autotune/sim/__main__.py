"""``python -m autotune.sim --scenario NAME [--time-scale X] [--seed N] [--fault F] [SGLang flags...]``"""

from __future__ import annotations

import sys

from autotune.sim.server import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
