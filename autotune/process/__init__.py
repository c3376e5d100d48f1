"""Real server processes behind the ``Runner`` seam.

One launch (``ProcessRunner.launch``, in ``runner``):
1. resolve the config through the backend (an infeasible config raises ``InfeasibleConfig``, nothing starts);
2. check the port (``ServerProcess.claim_port``, probes in ``server``): anything listening there (connect test, plus
   psutil to name the owner) is handled by ``server.port_busy``: ``fail`` raises ``PortInUse`` naming the port and
   the owner (it is never stopped), ``wait`` polls up to ``server.port_wait_s``, ``next`` takes the next free port;
3. start a ``ServerProcess`` (``server``): the argv list (never a shell) in its own session, stdout+stderr to a
   per-trial log file, with the backend's environment on top of ours, and (pid, create_time, argv, port) in the
   PID record file (``server``);
4. wait for ``backend.health_path`` on the monotonic clock up to ``server.startup_timeout_s`` (hardware
   seconds: divided by ``time_scale`` on the wall clock), checking each poll that the process is alive.
   Exit during startup raises ``ServerExited`` (``ServerOOM`` when the log says out of memory) with the log
   tail and return code; no health in time stops the server and raises ``StartupTimeout``;
5. read the resolved settings (``backend.info_path``) into ``LaunchInfo.effective``.

A ``ProcessSession`` (``runner``) measures prompts with ``autotune.client.BenchmarkClient`` (wall seconds times
``time_scale`` = hardware seconds) and ``close()`` stops its ``ServerProcess``, exactly what was started
(``server``): SIGTERM to our process group and to the tree's processes (only those whose pid AND create_time match
what we saw), a bounded wait, SIGKILL to survivors, reaping, the exit code recorded, the PID record entry removed,
then a bounded wait for the port to be free. ``reap_leftovers`` stops processes a previous, SIGKILLed
orchestrator left behind, by the PID record (pid + create_time + argv), never by name.

Ctrl-C (KeyboardInterrupt) during a launch or a measurement stops the server before propagating.
"""

from autotune.process.runner import ProcessRunner, ProcessSession
from autotune.process.server import PidRecord, ServerProcess, log_tail, port_listening, reap_leftovers

__all__ = [
    "PidRecord",
    "ProcessRunner",
    "ProcessSession",
    "ServerProcess",
    "log_tail",
    "port_listening",
    "reap_leftovers",
]
