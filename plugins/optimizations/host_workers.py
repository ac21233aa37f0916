"""Keep the device fed: the host's share of a run (tokenising, window layout, decoding, serialising) in worker
processes, so one Python interpreter no longer sets the pace when outputs are dense."""
import os

from contracts.hookspecs import hookimpl
from contracts.names import Capability
from contracts.optimization import Optimization

# A run that would have to start its workers, and has fewer documents than this, stays in its own process.
# Measured through `launcher.py extract` (docs/benchmarks.md, "Faster starts"): with workers that start in a fifth
# of a second, a fresh process gains at 10,000 documents on dense and realistic output but still loses on sparse
# output and at 1,000 documents; a run cannot know its density before it starts. A process that keeps its workers
# (the UI, the API) uses them for any run once they are up.
MIN_DOCUMENTS = 20_000
# Fewer workers than this gain nothing (docs/benchmarks.md, host workers: 4 workers lost to none at dense
# output, 8 won); the run's own process needs a core besides them.
MIN_WORKERS = 8


def default_workers() -> int:
    """The cores but one (the run's own process feeds the device), at most 12: with 16 cores, 12 beat 8 and 4 on
    dense and realistic outputs (docs/benchmarks.md, host workers)."""
    return max(1, min(12, (os.cpu_count() or 2) - 1))


class HostWorkers(Optimization):
    name = "host-workers"
    title = "Host workers (tokenise and decode in parallel processes)"
    description = ("Runs tokenising, window layout, decoding and serialising in worker processes while the run's "
                   "own process batches their windows on the device; results come back in input order, their "
                   "JSON already written. Lossless. The workers start before a run's first batch and are kept "
                   f"for later runs; a run of fewer than {MIN_DOCUMENTS:,} documents (while none are up), or a "
                   f"machine of fewer than {MIN_WORKERS + 1} cores, goes without them: there they cost more than "
                   "they save.")
    switch = "live"
    lossless = True

    def applies_to(self, model):
        if Capability.HOST_WORKERS not in model.capabilities:
            return False, f"{model.family.name} does its host work in its own process"
        return True, f"{default_workers()} worker process(es) on this machine's {os.cpu_count()} cores"

    def enable(self, model, workers: int | None = None, **_):
        count = int(workers or default_workers())
        if workers is None and count < MIN_WORKERS:         # a count asked for by name is taken as it is
            model.knobs.host_workers = 0
            return (f"off: {os.cpu_count()} core(s) leave {count} worker(s) beside the run's own process; "
                    f"fewer than {MIN_WORKERS} gain nothing")
        model.knobs.host_workers, model.knobs.host_workers_from = count, MIN_DOCUMENTS
        return f"{count} host worker process(es), for runs of {MIN_DOCUMENTS:,} documents or more"

    def disable(self, model):
        model.knobs.host_workers = model.knobs.host_workers_from = 0


@hookimpl
def register_optimizations(register):
    register(HostWorkers())
