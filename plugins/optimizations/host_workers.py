"""Keep the device fed: the host's share of a run (tokenising, window layout, decoding, serialising) in worker
processes, so one Python interpreter no longer sets the pace when outputs are dense."""
import os

from contracts.hookspecs import hookimpl
from contracts.names import Capability
from contracts.optimization import Optimization

# A run of fewer documents stays in its own process. Through `launcher.py extract` on the H200 the workers' start
# cost 5-6 s (1,000 documents: 124-149 docs/s with them, 489-610 without; issue 31), and once up they saved 1.35 s
# per 1,000 dense documents, 0.36 s realistic, 0.07 s sparse (tenth run, docs/benchmarks.md): dense output pays the
# start back from about 4,000 documents, the others later or never. Started before the first batch (prepare_run)
# the start is partly hidden; `bench cli-e2e` measures whether it is.
MIN_DOCUMENTS = 5_000
# Fewer workers than this gain nothing: at dense output 4 workers took 2.17 s against 2.07 s without, 8 took 1.13 s
# (fifth run, docs/benchmarks.md); the run's own process needs a core besides them.
MIN_WORKERS = 8


def default_workers() -> int:
    """The cores but one (the run's own process feeds the device), at most 12: on an H200 with 16 cores, 12 beat
    8 and 4 on dense and realistic outputs (docs/benchmarks.md)."""
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
