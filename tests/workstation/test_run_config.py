"""One run configuration: run_config.resolve answers "which weights, device, dtype, batch size, optimizations,
options" for every surface, an override beats the setting, and settings.toml is read once per resolve (a
job's slices and the API's passes run the value they were given)."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest

from contracts.domain import Document, InputError
from contracts.hookspecs import hookimpl
from tests.registered import plugin_registered
from tests.workstation.jobs.fake_model import FakeFamily, registered
from workstation import engine, settings
from workstation.run_config import Overrides, RunConfig, resolve


class RuleFamily(FakeFamily):
    """A model that needs no weights (rules, dictionaries): it must never be handed a demo checkpoint."""

    name = "fakerule"
    needs_weights = False


class RulePlugin:
    __name__ = "RulePlugin"

    @hookimpl
    def register_models(self, register):
        register(RuleFamily())


@contextmanager
def rule_model():
    with plugin_registered(RulePlugin(), "undo-rule-model"):
        yield


@pytest.fixture
def settings_file(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "settings.toml"
    path.write_text(f'[storage]\ndatabase = "{(tmp_path / "data" / "runs.db").as_posix()}"\n'
                    f'demo_weights_dir = "{(tmp_path / "demo").as_posix()}"\n'
                    '[models.fake]\ndevice = "cpu"\ndtype = "fp32"\nbatch_size = 16\n'
                    '[models.fakerule]\ndevice = "cpu"\n', "utf-8")
    monkeypatch.setattr(settings, "DEFAULT_PATH", path)
    return path


def own_folder(tmp_path: Path) -> Path:
    return tmp_path / "data" / "models" / "fakerule"


def test_resolve_gives_a_model_without_weights_its_own_folder_and_one_with_weights_its_demo_checkpoint(
        tmp_path, settings_file):
    s = settings.load_settings()
    rule = resolve(s, RuleFamily())
    assert (rule.weights, rule.demo) == (own_folder(tmp_path), False)
    fake = resolve(s, FakeFamily())
    assert fake.weights.parent == tmp_path / "demo" and fake.weights.name.startswith("fake-") and fake.demo


def test_an_override_beats_the_setting_and_settings_fill_in_the_rest(tmp_path, settings_file):
    settings_file.write_text(settings_file.read_text("utf-8").replace('dtype = "fp32"', 'dtype = "bf16"')
                             + '[optimizations]\nenabled = ["sparse-mask"]\n[results]\nmax_tuples_per_document = 7\n',
                             "utf-8")
    s = settings.load_settings()
    plain = resolve(s, FakeFamily())
    assert (plain.device, plain.dtype, plain.configured_dtype, plain.batch_size) == ("cpu", None, "bf16", 16)
    assert (plain.optimizations, plain.only_applicable, plain.max_tuples) == (("sparse-mask",), True, 7)
    asked = resolve(s, FakeFamily(), Overrides(weights=tmp_path, dtype="fp32", batch_size=2, optimizations=[],
                                               options={"tuples": 3}, thresholds={"first": 0.5}, max_tuples=0))
    assert (asked.weights, asked.dtype, asked.load_dtype, asked.batch_size) == (tmp_path, "fp32", "fp32", 2)
    assert (asked.optimizations, asked.only_applicable, asked.max_tuples) == ((), False, 0)
    assert asked.option_values == {"tuples": 3} and asked.threshold_values == {"first": 0.5}
    assert resolve(s, FakeFamily(), {"optimizations": ["sparse-mask"]}).only_applicable is False   # named: must apply


@pytest.mark.parametrize("overrides, message", [
    ({"dtype": "fp64"}, "dtype 'fp64' is not one of fp32, fp16, bf16"),
    ({"optimizations": ["warp-drive"]}, "unknown optimization\\(s\\) warp-drive; available: "),
    ({"device": "cuda:3"}, "device 'cuda:3' was asked for, but this machine has no CUDA GPU"),
])
def test_a_bad_override_is_one_clear_error_naming_it(settings_file, overrides, message):
    with pytest.raises(InputError, match=message):
        resolve(settings.load_settings(), FakeFamily(), overrides)


def test_equal_choices_give_equal_hashable_configs_so_api_requests_can_share_a_pass():
    a = RunConfig("m", "w", "cpu", optimizations=["x", "y", "x"], options={"b": 1, "a": 2}, thresholds={"t": 0.5})
    b = RunConfig("m", Path("w"), "cpu", optimizations=("x", "y"), options=(("a", 2), ("b", 1)),
                  thresholds=(("t", 0.5),))
    assert a == b and hash(a) == hash(b) and a.optimizations == ("x", "y")
    assert a != b.replace(batch_size=16)


# ---- every surface resolves through it ------------------------------------------------------------------

def test_a_model_without_weights_never_gets_a_demo_path_on_any_surface(tmp_path, settings_file, store, monkeypatch):
    """The CLI, the API, the UI's runs (Extract, Batch, re-runs) and the corpus command each resolve the weights
    through run_config.resolve: the model's own folder, not a demo checkpoint it would be handed by a
    weights_for(name) that forgot needs_weights."""
    from workstation import cli
    from workstation.api.state import ApiState
    from workstation.ui import runs
    seen: dict[str, RunConfig] = {}
    real = engine.run

    def spied(model, documents, config=engine.AS_IT_IS, **kw):
        seen["cli"] = config
        return real(model, documents, config, **kw)
    monkeypatch.setattr(engine, "run", spied)
    (tmp_path / "in.txt").write_text("甲\n", "utf-8")
    with rule_model():
        assert cli.main(["extract", "--model", "fakerule", "--input", str(tmp_path / "in.txt"),
                         "--output", str(tmp_path / "out.jsonl"), "--no-record"]) == 0
        api = ApiState(settings.load_settings(), store=store, record=False)
        seen["api"] = api.config("fakerule", None, None, None, {}, None)
        seen["ui"] = runs.config_for(runs.RunRequest("fakerule", "cpu", ()))
        seen["job"] = _job_config_of(api, seen["api"])
    for surface, config in seen.items():
        assert (surface, config.weights, config.demo) == (surface, own_folder(tmp_path), False)


def _job_config_of(api, config: RunConfig) -> RunConfig:
    """The configuration a job the API queues with `config` runs its slices with (workstation/jobs.py)."""
    from workstation.jobs import job_config
    job_id = api.store.create_job(documents(1), config.model, str(config.weights), config.batch_size,
                                  list(config.optimizations or ()), config.option_values, "in.jsonl",
                                  device=config.device, dtype=config.load_dtype)
    return job_config(api.store.get_job(job_id), api.settings)


def test_the_corpus_command_resolves_its_job_through_run_config(tmp_path, settings_file, monkeypatch):
    runner = pytest.importorskip("workstation.corpus.runner")
    from workstation import cli
    from workstation.corpus.work import worker_config
    jobs = []
    monkeypatch.setattr(runner, "run", lambda job: jobs.append(job) or {
        "counts": {"documents": 0, "errors": 0, "shards_done": 0, "shards": 0}, "job": {"demo": False}})
    with rule_model():
        assert cli.main(["corpus", "--model", "fakerule", "--input", "x", "--output", str(tmp_path / "o"),
                         "--batch-size", "3", "--no-record"]) == 0
    job = jobs[0]
    assert (job.weights, job.batch_size, job.optimizations, job.only_applicable) == (own_folder(tmp_path), 3, [], True)
    spec = {"model": job.model, "weights": str(job.weights), "device": "cpu", "optimizations": job.optimizations,
            "dtype": job.dtype, "configured_dtype": job.configured_dtype, "batch_size": job.batch_size,
            "options": job.options, "only_applicable": job.only_applicable, "max_tuples": job.max_tuples}
    assert worker_config(spec).only_applicable and worker_config(spec).max_tuples == 10_000


# ---- settings are read once per resolve, not per run -------------------------------------------------------

@pytest.fixture
def settings_reads(monkeypatch) -> list[int]:
    """Counts every parse of settings.toml, whichever module asked for it."""
    reads: list[int] = []
    parse = settings.SettingsFile

    class Counted(parse):
        def __init__(self, **data):
            reads.append(1)
            super().__init__(**data)
    monkeypatch.setattr(settings, "SettingsFile", Counted)
    return reads


def documents(n: int) -> list[Document]:
    return [Document(str(i), f"甲乙{i}", line=i + 1) for i in range(n)]


def test_a_run_reads_no_settings_and_a_job_reads_them_once_for_all_its_slices(tmp_path, settings_file, store,
                                                                            settings_reads):
    from workstation.jobs import JobRunner
    with registered():
        model = FakeFamily().load(tmp_path, "cpu")
        for _ in range(3):
            engine.run(model, documents(2), RunConfig(max_tuples=1))
        assert settings_reads == []                            # engine.run runs the value it was given
        job_id = store.create_job(documents(10), "fake", str(tmp_path), 2, [], {}, "in.jsonl", device="cpu")
        assert JobRunner(store, slice_size=4).run_job(job_id).status == "done"   # three slices
    assert len(settings_reads) == 1


def test_api_passes_run_the_config_they_were_given_without_reading_settings(tmp_path, settings_file, store,
                                                                            settings_reads):
    from workstation.api.lanes import LaneRequest
    from workstation.api.state import ApiState
    with registered():
        state = ApiState(settings.load_settings(), store=store, record=False)
        config = state.config("fake", "cpu", None, [], {}, None)
        config = config.replace(weights=FakeFamily().write_demo_weights(tmp_path / "w"))
        settings_reads.clear()
        for _ in range(3):
            state._execute(config, [LaneRequest(config, documents(2))])
    assert settings_reads == []
