"""``python -m autotune.sim --scenario NAME [--time-scale X] [--seed N] [--fault F] [SGLang flags...]``"""

from __future__ import annotations

import os
import sys

from autotune.sim.server import main

if __name__ == "__main__":
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        from autotune.sim.launch import usage

        print(usage())
        sys.exit(0)
    code = main(sys.argv[1:])  # the server is closed and the log flushed when it returns
    sys.stdout.flush()
    sys.stderr.flush()
    # skip the interpreter's teardown (numpy/scipy modules: 0.1-0.4 s measured on 2 cores): every trial's restart
    # waits for this process to exit
    os._exit(code)
