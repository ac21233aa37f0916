"""Keep the device fed: the host's share of a run (tokenising, window layout, decoding, serialising) in worker
processes, so one Python interpreter no longer sets the pace when outputs are dense."""
import os

from contracts.hookspecs import hookimpl
from contracts.names import Capability
from contracts.optimization import Optimization


def default_workers() -> int:
    """The cores but one (the run's own process feeds the device), at most 12: on an H200 with 16 cores, 12 beat
    8 and 4 on dense and realistic outputs (docs/benchmarks.md)."""
    return max(1, min(12, (os.cpu_count() or 2) - 1))


class HostWorkers(Optimization):
    name = "host-workers"
    title = "Host workers (tokenise and decode in parallel processes)"
    description = ("Runs tokenising, window layout, decoding and serialising in worker processes while the run's "
                   "own process batches their windows on the device; results come back in input order, their "
                   "JSON already written. Lossless. Pays off from a few hundred documents (workers start once, "
                   "in a few seconds; a run of one batch stays in process).")
    switch = "live"
    lossless = True

    def applies_to(self, model):
        if Capability.HOST_WORKERS not in model.capabilities:
            return False, f"{model.family.name} does its host work in its own process"
        return True, f"{default_workers()} worker process(es) on this machine's {os.cpu_count()} cores"

    def enable(self, model, workers: int | None = None, **_):
        model.knobs.host_workers = int(workers or default_workers())
        return f"{model.knobs.host_workers} host worker process(es)"

    def disable(self, model):
        model.knobs.host_workers = 0


@hookimpl
def register_optimizations(register):
    register(HostWorkers())
