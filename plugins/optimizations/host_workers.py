"""Keep the device fed: the host's share of a run (tokenising, window layout, decoding, serialising) in worker
processes, so one Python interpreter no longer sets the pace when outputs are dense."""
import os

from contracts.hookspecs import hookimpl
from contracts.names import Capability
from contracts.optimization import Optimization

# A run that would have to start its workers, and has fewer documents than this (or fewer left), stays in its own
# process: a hand-over costs about as much as that many documents save (plugins/rexuninlu/workers.py, HandOver). A
# longer run starts them only once it is bound by its own host work with the device waiting: from outside on an H100
# they then took dense output 0.65x as long, and sparse output never started them (docs/benchmarks.md, "Host workers
# that start only where they gain").
MIN_DOCUMENTS = 1_000
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
                   "JSON already written. Lossless. A run starts in its own process, starts the workers once its "
                   "own decoding and writing hold the device back (dense output), and hands its remaining "
                   "documents over once they are up; they are kept for later runs. A run of fewer than "
                   f"{MIN_DOCUMENTS:,} documents (or with fewer left) while none are up, or a machine of fewer than "
                   f"{MIN_WORKERS + 1} cores, goes without them: there they cost more than they save.")
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
        return (f"{count} host worker process(es), taking over runs of {MIN_DOCUMENTS:,} documents or more once the "
                "run's own host work holds the device back")

    def disable(self, model):
        model.knobs.host_workers = model.knobs.host_workers_from = 0


@hookimpl
def register_optimizations(register):
    register(HostWorkers())
