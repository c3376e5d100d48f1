"""One library function per CLI command, each returning what ``autotune.cli`` renders (the CLI parses the flags,
makes one call here, renders the result and picks the exit code).

- ``context``: ``CommandOptions`` (a command's typed options), ``Context`` (built from them once), ``reap``
  (leftover servers of ours), ``preflight`` (ports)
- ``study``: ``validate``, ``run_study``, ``run_worker``, ``run_confirm``, ``load_report``
- ``measure``: ``bench``, ``reverify`` (with its ``ReverifyOptions``)
- ``deploy``: ``export``, ``dashboard``
"""
