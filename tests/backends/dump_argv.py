"""Writes its argv as JSON to the file named by its first argument (a stand-in launcher for argv tests)."""

import json
import sys

with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(sys.argv[2:], f)
