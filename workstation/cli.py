"""The command line (README.md, "Command line"). `launcher.py` bootstraps the venv, then calls `main`."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from contracts.batching import batch_setting
from contracts.domain import InputError, WeightsError, unread_chars
from contracts.stages import describe as describe_stages
from contracts.words import agree, plural
from workstation import engine, plugins
from workstation.recording import History
from workstation.run_config import Overrides, resolve
from workstation.settings import ROOT, SettingsError, load_settings
from workstation.weights import command as weights_command


def batch_size_arg(value: str) -> int | str:
    try:
        return batch_setting(value, "--batch-size")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser(listing: bool = False) -> argparse.ArgumentParser:
    """listing: name the installed models in --model's help (it imports every plugin, so only for --help)."""
    models = "the model: " + ", ".join(plugins.model_families()) if listing else "the model"
    p = argparse.ArgumentParser(prog="python3 launcher.py", description="IE Workstation")
    sub = p.add_subparsers(dest="command")
    sub.add_parser("ui", help="start the workstation UI (the default)")
    t = sub.add_parser("test", help="run the test suite")
    t.add_argument("pytest_args", nargs=argparse.REMAINDER)

    x = sub.add_parser("extract", help="run a model over an input file")
    x.add_argument("--model", required=True, help=models + " (`launcher.py plugins` lists who registered each)")
    x.add_argument("--weights", help="checkpoint directory (default: settings.toml, else demo weights)")
    x.add_argument("--input", required=True, type=Path)
    x.add_argument("--output", required=True, type=Path)
    x.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: settings.toml)")
    x.add_argument("--dtype", default=None, choices=["fp32", "fp16", "bf16"])
    x.add_argument("--batch-size", type=batch_size_arg, default=None, help="a number, or auto (by the GPU's memory)")
    x.add_argument("--optimizations", default=None, help="comma-separated names, or 'none' for fp32 eager")
    x.add_argument("--schema", default=None, help="JSON or a JSON file: the default for lines without one")
    x.add_argument("--max-new-tokens", type=int, default=None)
    x.add_argument("--num-beams", type=int, default=None)
    x.add_argument("--repetition-penalty", type=float, default=None)
    # A model's switch, not the command line's: kept unlisted only to say where it went (--option long_text=...).
    x.add_argument("--long-text", nargs="?", const="window", default=None, help=argparse.SUPPRESS)
    x.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                   help="any model option (a plugin's too; GET /v1/models lists them), typed like its default; "
                        "repeatable")
    x.add_argument("--skip-invalid", action="store_true", help="skip bad input lines and report them")
    x.add_argument("--no-record", action="store_true", help="do not record the run in the history database")
    x.add_argument("--thresholds", default=None, metavar="saved|FILE",
                   help="apply per-type confidence thresholds: 'saved' = those tuned for these weights (UI, "
                        "Thresholds page), or a JSON file {type: threshold}; the run records them")

    c = sub.add_parser("corpus", help="extract over many files on Ray (a local runtime or a cluster); resumable")
    c.add_argument("--model", required=True, help=models)
    c.add_argument("--weights", help="checkpoint directory, readable on every node (default: settings.toml)")
    c.add_argument("--input", required=True, help="a file or a glob of .jsonl/.csv/.txt/.parquet files (quote it)")
    c.add_argument("--output", required=True, type=Path, help="directory: part-*.parquet|jsonl and _manifest.json")
    c.add_argument("--address", default=None, help="auto | ray://HOST:PORT (default: start a local Ray runtime)")
    c.add_argument("--workers", type=int, default=None, help="model replicas (default: one per GPU, else one)")
    c.add_argument("--gpus-per-worker", type=float, default=None, help="fractions share a GPU (default: 1)")
    c.add_argument("--format", default="parquet", choices=["parquet", "jsonl"])
    c.add_argument("--dtype", default=None, choices=["fp32", "fp16", "bf16"])
    c.add_argument("--batch-size", type=batch_size_arg, default=None, help="a number, or auto (by the GPU's memory)")
    c.add_argument("--optimizations", default=None, help="comma-separated names, or 'none' for fp32 eager")
    c.add_argument("--schema", default=None, help="JSON or a JSON file: the default for lines without one")
    c.add_argument("--max-new-tokens", type=int, default=None)
    c.add_argument("--num-beams", type=int, default=None)
    c.add_argument("--repetition-penalty", type=float, default=None)
    c.add_argument("--no-record", action="store_true", help="do not show the job in the workstation's Batch page")

    d = sub.add_parser("demo-weights", help="write random-weight demo checkpoints of the real architectures")
    d.add_argument("--model", default=None, help="one model (default: all)")
    d.add_argument("--size", default="all", choices=["full", "tiny", "all"])
    d.add_argument("--out", type=Path, default=None, help="parent directory (default: settings.toml)")

    v = sub.add_parser("serve", help="the HTTP API and Label Studio ML backend (docs/api.md)")
    v.add_argument("--host", default=None, help="default: [api] host in settings.toml (127.0.0.1)")
    v.add_argument("--port", type=int, default=None, help="default: [api] port in settings.toml (8502)")
    v.add_argument("--workers", type=int, default=None,
                   help="server processes, each with its own models (default: [api] workers, 1)")

    f = sub.add_parser("finetune", help="fine-tune a model on gold examples")
    f.add_argument("finetune_args", nargs=argparse.REMAINDER)
    weights_command.add_parser(sub)

    e = sub.add_parser("export", help="write a recorded run in an export format (a plugin's too)")
    e.add_argument("--run", required=True, type=int, action="append", metavar="ID",
                   help="the run's number in the history (History, GET /v1/runs); repeat it for several runs")
    e.add_argument("--format", required=True, help="an exporter's name (`launcher.py plugins` lists them)")
    e.add_argument("--output", type=Path, default=None, help="the file (default: run-ID and the format's suffix)")

    g = sub.add_parser("plugins", help="each installed plugin, its distribution and version, what it registered")
    g.add_argument("--json", action="store_true", help="one JSON object per plugin, for tools")

    n = sub.add_parser("new-plugin", help="write a working plugin package skeleton (docs/plugins.md)")
    n.add_argument("name", help="the distribution's name, such as iew-lexicon")
    n.add_argument("--kind", default="model", choices=["model", "exporter"], help="what the skeleton provides")
    n.add_argument("--dir", type=Path, default=Path("."), help="the folder to write it in (default: here)")
    return p


PASS_THROUGH = {"test": "pytest_args", "finetune": "finetune_args"}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in PASS_THROUGH and not {"-h", "--help"} & set(argv[:1]):
        # Everything after these commands belongs to the tool behind them (pytest, the fine-tuning loop).
        args = argparse.Namespace(command=argv[0], **{PASS_THROUGH[argv[0]]: argv[1:]})
    else:
        args = build_parser(listing=bool({"-h", "--help"} & set(argv))).parse_args(argv)
    command = args.command or "ui"
    try:
        # What an enabled optimization needs before CUDA starts (the memory pool's allocator setting): it takes
        # a restart, and the UI's server and job processes inherit it from here.
        for key, value in plugins.environment_for(load_settings().optimizations).items():
            os.environ.setdefault(key, value)
    except SettingsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        if command == "test":
            return run_tests(args.pytest_args)
        if command == "ui":
            return run_ui()
        if command == "extract":
            return extract(args)
        if command == "serve":
            from workstation.api.server import check_exposure, serve
            s = load_settings()
            check_exposure(args.host or s.api.host, s.api.token)      # before anything is written or loaded
            ensure_demo_weights(s)
            return serve(s, args.host, args.port, args.workers)
        if command == "corpus":
            return corpus(args)
        if command == "demo-weights":
            return demo_weights(args)
        if command == "finetune":
            return finetune(args.finetune_args)
        if command == "weights":
            return weights_command.run(args)
        if command == "export":
            return export(args)
        if command == "plugins":
            return list_plugins(args)
        if command == "new-plugin":
            from workstation.scaffold import write_plugin
            folder = write_plugin(args.name, args.kind, args.dir)
            print(f"wrote {folder}; install it with .venv/bin/pip install -e {folder}, then run its test: "
                  f".venv/bin/python -m pytest {folder}", file=sys.stderr)
            return 0
    except (InputError, WeightsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2 if isinstance(e, InputError) else 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


def run_tests(pytest_args: list[str]) -> int:
    # Lint first (ruff, configured in pyproject.toml): a lint error fails the test command like a test does.
    lint = subprocess.call([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "."], cwd=ROOT)
    # Two workers by default (pytest-xdist): the suite starts servers, Ray and a browser, and waits on them.
    code = subprocess.call([sys.executable, "-m", "pytest", *(pytest_args or ["-n", "2", "tests"])], cwd=ROOT)
    code = code if code != 5 else 1          # "no tests collected" is a failure, not a pass
    return code or (1 if lint else 0)


def run_ui() -> int:
    ensure_demo_weights(load_settings())
    # One process for the server and the batch-job runner (workstation/ui/server.py says why). Stopping the
    # launcher stops it too, and waits for it: nothing is left holding the port.
    from workstation.child_process import run_child
    return run_child([sys.executable, "-m", "workstation.ui.server"], cwd=ROOT)


def ensure_demo_weights(settings) -> None:
    """First run without configured weights: write the demo checkpoints the UI will use. A model that needs
    no weights is left alone; one that needs them and has no demo weights is named, with what to do."""
    for name, fam in plugins.model_families().items():
        weights, is_demo = settings.weights_for(name, fam.needs_weights)
        if is_demo and not weights.exists():
            print(f"writing {name} demo weights (random; outputs are meaningless) to {weights} ...", file=sys.stderr)
            if fam.write_demo_weights(weights, settings.demo_size()) is None:
                print(f"note: {name} offers no demo weights; {engine.missing_weights(name, weights)}", file=sys.stderr)


def demo_weights(args) -> int:
    s = load_settings()
    out = args.out or s.path(s.demo_weights_dir)
    families = plugins.model_families()
    names = [args.model] if args.model else list(families)
    for name in names:
        fam = engine.family(name)
        for size in (["full", "tiny"] if args.size == "all" else [args.size]):
            path = fam.write_demo_weights(out / f"{name}-{size}", size)
            if path is None:
                print(f"{name}: no demo weights" + ("" if fam.needs_weights else " (it runs without weights)"))
                break
            print(f"{name} {size}: {path}  (RANDOM weights: outputs are meaningless)")
    return 0


def extract(args) -> int:
    """Stream the input through engine.run into the output (and the history): neither is ever held, so host
    memory stays flat however long the input (`bench host-memory` measures it). The output is written to a
    temporary file beside it and renamed at the end, so a bad line met half-way still leaves no output."""
    from contextlib import nullcontext

    from workstation.inputs import defaults_for, iter_documents, parse_schema_arg
    if args.long_text is not None:
        raise InputError(f"--long-text is not a flag of extract: a model's own switches are passed as --option "
                         f"NAME=VALUE, here --option long_text={args.long_text}")
    s = load_settings()
    fam = engine.family(args.model)
    default = defaults_for(fam.reads, parse_schema_arg(args.schema), "--schema")      # as the model reads it
    skipped = Skipped() if args.skip_invalid else None
    documents = iter_documents(args.input, default, skipped.line if skipped else None)

    if args.weights and not Path(args.weights).exists():      # a model that needs no weights would not notice
        raise WeightsError(f"--weights {args.weights} does not exist")
    options = {k: v for k, v in (("max_new_tokens", args.max_new_tokens), ("num_beams", args.num_beams),
                                 ("repetition_penalty", args.repetition_penalty)) if v is not None}
    options.update(model_options(fam, args.option))
    # Named optimizations must apply; without --optimizations, settings.toml's apply where they can.
    config = resolve(s, fam, Overrides(weights=args.weights, device=args.device, dtype=args.dtype,
                                       batch_size=args.batch_size, optimizations=optimization_names(args.optimizations),
                                       options=options))
    config = config.replace(thresholds=read_thresholds(args.thresholds, s, args.model, config.weights) or {})

    args.output.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{args.output.name}.", dir=args.output.parent)
    reading = ReadingCount()
    times = ProcessTimes()
    history = None if args.no_record else History(s)
    try:
        with os.fdopen(fd, "wb") as out:
            def write(document, result) -> None:
                times.result()
                out.write(result.to_json_line() + b"\n")       # UTF-8 JSON Lines, as the Result holds them
                reading.add(document, result)
                if history:
                    history.add(document, result)
            # Loaded once the first documents have passed their checks: a bad first line costs no load.
            report = engine.run(lambda: nullcontext(times.load(engine.load_model, args.model, config.weights,
                                                               config.device, "fp32")),
                                documents, config, family=fam, on_start=history.start if history else None,
                                on_result=write, on_invalid=skipped.document if skipped else None,
                                keep_results=False)
        os.replace(tmp, args.output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        if history:
            history.abandon()
        raise
    summary = report.summary()
    rate = f" ({summary['docs_per_second']:,.1f} docs/s)" if summary["docs_per_second"] else ""
    print(f"{plural(report.documents, 'document')} in {report.wall_seconds:.2f}s{rate} on {report.device} ({report.dtype}, "
          f"attention {report.attention}); output: {args.output}"
          + (f"; {skipped.count} skipped" if skipped and skipped.count else ""), file=sys.stderr)
    print(describe_stages(report.stages, report.wall_seconds, report.device_busy, report.backoffs), file=sys.stderr)
    print(times.describe(report.stages.get("warm-up", 0.0)), file=sys.stderr)
    for name, what in report.optimizations.items():
        # Asked for, and sat this run out (host-workers on a short run), or took over part way (host-workers).
        if what.startswith(("off", "handed over")):
            print(f"note: {name} {what}", file=sys.stderr)
    if reading.reported:
        whole = fam.whole_text_option             # the model's own way to read all of a text, if it has one
        hint = f" (--option {whole[0]}={whole[1]} reads all of them)" if reading.cut and whole \
            and options.get(whole[0], fam.options.get(whole[0])) != whole[1] else ""
        print(f"{reading.cut:,} of {plural(reading.documents, 'document')} {agree(reading.cut, 'was', 'were')} cut (read partly){hint}", file=sys.stderr)
    if report.demo:
        print("note: RANDOM demo weights were used; outputs are meaningless", file=sys.stderr)
    if history:
        history.finish(report, {"summary": summary})
        if history.waited >= 0.05:          # recording overlaps the run; this is what was left when it ended
            print(f"the history took {history.waited:.2f}s more to record the last documents", file=sys.stderr)
    return 0


def model_options(family, pairs: list[str]) -> dict:
    """--option NAME=VALUE, for the options a model declares (ModelFamily.options), typed like the default."""
    options = {}
    for pair in pairs:
        name, given, text = pair.partition("=")
        if not given or name not in family.options:
            takes = ", ".join(f"{k}={v}" for k, v in family.options.items()) or "no options"
            raise InputError(f"--option {pair!r}: {family.name} takes {takes}")
        default, choices = family.options[name], family.option_choices.get(name)
        try:
            if isinstance(default, bool):
                value = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}[text.lower()]
            else:
                value = type(default)(text) if isinstance(default, (int, float)) else text
        except (KeyError, ValueError):
            raise InputError(f"--option {name}: {text!r} is not a {type(default).__name__}") from None
        if choices and value not in choices:
            raise InputError(f"--option {name}: {text!r} is not one of {', '.join(map(str, choices))}")
        options[name] = value
    return options


class Skipped:
    """--skip-invalid: each bad line is reported as it is met, and counted (not kept: the input may be long)."""

    def __init__(self):
        self.count = 0

    def line(self, error: InputError) -> None:
        self.count += 1
        print(f"skipped: {error}", file=sys.stderr)

    def document(self, document, error: InputError) -> None:
        self.line(error)


def read_thresholds(arg: str | None, settings, model: str, weights: Path) -> dict[str, float] | None:
    """--thresholds: None (off), 'saved' (the newest tuned for these weights in the history database), or a file."""
    from workstation.quality.thresholds import check_thresholds
    if arg is None:
        return None
    if arg == "saved":
        from storage.repository import open_store
        store = open_store(settings.path(settings.database))
        try:
            saved = store.thresholds_for(model, weights) or store.thresholds_for(model, weights.resolve())
        finally:
            store.close()
        if saved is None:
            raise InputError(f"no thresholds are saved for {model} weights {weights}; tune them on the UI's "
                             "Thresholds page, or pass a JSON file")
        if saved.stale():
            print("warning: the weights changed since the saved thresholds were tuned", file=sys.stderr)
        return saved.thresholds
    path = Path(arg)
    if not path.is_file():
        raise InputError(f"--thresholds: {arg} is neither 'saved' nor a file")
    try:
        data = json.loads(path.read_text("utf-8-sig"))
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"--thresholds: {path} is not JSON ({e})") from None
    return check_thresholds(data)


class ProcessTimes:
    """This process's milestones in seconds since the OS started it (the interpreter's start and imports
    included), as a user waiting on the command sees them; `bench cli-e2e` reads the line describe() prints."""

    def __init__(self):
        self.born = process_start_time()
        self.load_seconds = self.first_result = None

    def load(self, loader, *args):
        started = time.perf_counter()
        model = loader(*args)
        self.load_seconds = time.perf_counter() - started
        return model

    def result(self) -> None:
        if self.first_result is None:
            self.first_result = time.time() - self.born

    def describe(self, warm_up: float) -> str:
        load = f"{self.load_seconds:.2f}s" if self.load_seconds is not None else "-"
        first = f"{self.first_result:.2f}s" if self.first_result is not None else "-"
        return (f"process: model load {load} · warm-up {warm_up:.2f}s · first result {first} · "
                f"done {time.time() - self.born:.2f}s after the process started")


def process_start_time() -> float:
    """When the OS started this process, as an epoch time. psutil's create_time counts from the boot time in whole
    seconds, so it can be up to a second off; on Linux the process's start in clock ticks since boot, against the
    uptime now, is good to a tick (10 ms)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            started_ticks = int(f.read().rsplit(b")", 1)[1].split()[19])      # field 22, after the command name
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        import psutil
        return psutil.Process().create_time()


class ReadingCount:
    """How many documents a model read only partly."""

    def __init__(self):
        self.documents = self.cut = self.reported = 0

    def add(self, document, result) -> None:
        missed = unread_chars(document.text, result.coverage)
        self.documents += 1
        self.reported += missed is not None
        self.cut += bool(missed)


def corpus(args) -> int:
    try:
        from workstation.corpus import runner
    except ImportError as e:
        raise InputError(f"the corpus command needs Ray ({e}); run it as `python3 launcher.py corpus ...`, "
                         "which installs requirements-corpus.txt") from None
    from workstation.inputs import parse_schema_arg
    s = load_settings()
    options = {k: v for k, v in (("max_new_tokens", args.max_new_tokens), ("num_beams", args.num_beams),
                                 ("repetition_penalty", args.repetition_penalty)) if v is not None}
    # Resolved on this machine, once: the workers run this value on their own devices.
    config = resolve(s, engine.family(args.model), Overrides(
        weights=args.weights, dtype=args.dtype, batch_size=args.batch_size,
        optimizations=optimization_names(args.optimizations), options=options))
    job = runner.CorpusJob.of(config, args.input, args.output, address=args.address, workers=args.workers,
                              gpus_per_worker=args.gpus_per_worker, format=args.format,
                              schema=parse_schema_arg(args.schema), store=None if args.no_record else s.path(s.database))
    manifest = runner.run(job)
    c = manifest["counts"]
    print(f"{plural(c['documents'], 'document')} ({plural(c['errors'], 'error')}) in {c['shards_done']}/"
          f"{plural(c['shards'], 'shard')}; "
          f"output: {args.output}", file=sys.stderr)
    if manifest["job"]["demo"]:
        print("note: RANDOM demo weights were used; outputs are meaningless", file=sys.stderr)
    return 0


def optimization_names(value: str | None) -> list[str] | None:
    """--optimizations a,b (or 'none'); None without it: settings.toml's list (run_config.resolve)."""
    if value is None:
        return None
    return [n.strip() for n in value.split(",") if n.strip() and n.strip() != "none"]


def export(args) -> int:
    """`export --run ID --format NAME [--output FILE]`: what History's export and GET /v1/runs/{id}/export write."""
    from storage.repository import NotFound, open_store
    from workstation.exports import export_runs, exporter_named
    exporter = exporter_named(args.format)
    s = load_settings()
    store = open_store(s.path(s.database))
    try:
        for run_id in args.run:
            try:
                store.run_header(run_id)
            except NotFound as e:
                raise InputError(f"--run {run_id}: {e}") from None
        output = args.output or Path(f"run-{'-'.join(map(str, args.run))}{exporter.suffix}")
        report = export_runs(store, args.run, exporter.name, output)
    finally:
        store.close()
    print(f"{report.message()}; {exporter.name}: {output}", file=sys.stderr)
    return 0


def list_plugins(args) -> int:
    """`plugins`: each loaded plugin, where it came from, and what it registered."""
    table = plugins.plugin_table()
    if args.json:
        for row in table:
            print(json.dumps(row, ensure_ascii=False))
        return 0
    for row in table:
        registered = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in row["registered"].items())
        print(f"{row['name']}  {row['distribution'] or row['source']} {row['version']}"
              f"{'  (built-in)' if row['source'] == 'built-in' else ''}\n    {registered or 'nothing registered'}")
    return 0


def finetune(argv: list[str]) -> int:
    """Run the trainer; a finished run is recorded in the history database unless --no-record (which the
    trainer never sees: the UI passes it because it records its runs itself)."""
    from workstation.finetune.trainer import main as finetune_main
    record_it = "--no-record" not in argv
    argv = [a for a in argv if a != "--no-record"]
    code = finetune_main(argv)
    if code == 0 and record_it and not {"-h", "--help"} & set(argv):
        record_finetune(load_settings(), argv)
    return code


def record_finetune(settings, argv: list[str]) -> int | None:
    """Keep a finished CLI fine-tune in the history, from its output's evaluation.json; a failure only warns."""
    p = argparse.ArgumentParser(add_help=False)
    for name in ("--model", "--weights", "--train", "--eval", "--output"):
        p.add_argument(name)
    known, _ = p.parse_known_args(argv)
    if not known.output:
        return None
    try:
        from storage.repository import open_store
        output = Path(known.output)
        report_path = output / "evaluation.json"
        report = json.loads(report_path.read_text("utf-8")) if report_path.is_file() else {}
        training = report.get("training") or {}
        losses = training.get("loss_per_step") or []
        datasets = {"train": {"path": known.train or report.get("train")},
                    "eval": {"path": known.eval or report.get("eval") or known.train}}
        store = open_store(settings.path(settings.database))
        try:
            return store.create_training_run(
                known.model or report.get("model") or plugins.default_model(),
                known.weights or report.get("weights") or "", str(output), argv,
                source="cli", status="completed", datasets=datasets,
                step=training.get("steps") or len(losses) or None, total_steps=training.get("steps") or None,
                loss=[[i + 1, float(v)] for i, v in enumerate(losses)], evaluation_before=report.get("before"),
                evaluation_after=report.get("after"), evaluation_epochs=report.get("epochs") or None,
                finished_at=datetime.now(timezone.utc))
        finally:
            store.close()
    except Exception as e:              # noqa: BLE001 - reported; the checkpoint is written either way
        print(f"warning: the fine-tune was not recorded in the history ({type(e).__name__}: {e})", file=sys.stderr)
        return None
