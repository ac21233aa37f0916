"""The plugin as the host uses it: registration, validation, and extract() over many documents."""
import pluggy
import pytest
import torch

import plugins.seqgpt
from contracts import hookspecs
from contracts.domain import Document, InputError, Result
from plugins.seqgpt import pipeline
from plugins.seqgpt.continuous import Finished
from plugins.seqgpt.family import SeqGPT
from plugins.seqgpt.prompting import prompts_for

SETTINGS = dict(num_beams=4, max_new_tokens=12, repetition_penalty=2.0)


def documents():
    return [
        Document("ext7", "童装红蜻蜓团体温州儿童用品有限公司是红蜻蜓团体旗下全资子公司，创立于2003年。", task="ext",
                 labels=["饰演", "祖籍", "毕业院校", "创始人", "首都", "代言人", "总部地点"], line=1),
        Document("cls", "I want my checking balance.", task="cls", labels=["CheckBalance", "TransferMoney"], line=2),
        Document("empty", "  ", task="ext", labels=["LOC"], line=3),
        Document("nli", "李老板卖鱼，卖了三十框鱼\t李老板赚翻了", task="nli", labels=["entailment", "contradiction"],
                 line=4),
        Document("ext3", "MELBOURNE 1996-12-06", task="ext", labels=["LOC", "PER", "ORG,MISC"], line=5),
    ]


def test_the_plugin_registers_the_seqgpt_family_through_its_hook():
    pm = pluggy.PluginManager("ie_workstation")
    pm.add_hookspecs(hookspecs)
    pm.register(plugins.seqgpt)
    found = []
    pm.hook.register_models(register=found.append)
    assert [f.name for f in found] == ["seqgpt"] and isinstance(found[0], SeqGPT)


def test_every_task_preset_is_a_valid_document():
    family = SeqGPT()
    assert set(family.tasks) == {"cls", "ext", "nli"}
    for preset in family.tasks.values():
        family.validate(Document("p", preset.text, task=preset.name, labels=preset.schema))


def test_each_documents_raw_output_equals_generate_on_its_own_chunks(loaded, hf_generate):
    docs = documents()
    results = list(loaded.extract(docs, batch_size=3, **SETTINGS))
    assert [r.document_id for r in results] == [d.id for d in docs]
    for doc, result in zip(docs, results):
        prompts = [p.text for p in prompts_for(doc)]
        assert result.raw == (hf_generate(prompts, **SETTINGS) if prompts else [])


@pytest.mark.parametrize("batch_size", [1, 2, 16])
def test_batch_size_does_not_change_any_result(loaded, batch_size):
    docs = documents()
    reference = [r.to_json() for r in loaded.extract(docs, batch_size=4, **SETTINGS)]
    assert [r.to_json() for r in loaded.extract(docs, batch_size=batch_size, **SETTINGS)] == reference


def test_result_shapes_for_extraction_and_classification(loaded):
    texts = {d.id: d.text for d in documents()}
    results = {r.document_id: r for r in loaded.extract(documents(), **SETTINGS)}
    assert len(results["ext7"].raw) == 2 and len(results["cls"].raw) == 1
    for doc_id in ("ext7", "ext3"):
        for (span,) in results[doc_id].tuples:
            assert span.grounded in (True, False)
            if span.offset is not None:
                assert texts[doc_id][span.offset[0]:span.offset[1]] == span.span
    for (span,) in results["cls"].tuples:
        assert span.type == span.span and span.offset is None and span.grounded is None
    assert results["empty"].tuples == [] and results["empty"].raw == []
    assert "empty text" in results["empty"].warnings[0]


def test_results_carry_parsed_spans_and_raw_text(loaded, monkeypatch):
    """The pipeline from generated text to a Result, with the generation replaced by fixed outputs."""
    answers = {"cls": "CheckBalance", "ext3": "LOC: MELBOURNE\nPER: None\nDATE: 1996-12-06\nORG: ACME"}
    docs = [d for d in documents() if d.id in answers]
    tokens = {tuple(loaded.tokenizer(prompts_for(d)[0].text)["input_ids"]): loaded.tokenizer(answers[d.id])["input_ids"]
              for d in docs}

    def fixed_outputs(network, prompts, *args, **options):
        for key, prompt in prompts:
            yield key, Finished(torch.tensor(tokens[prompt.ids] + [2]), None, 2)
    monkeypatch.setattr(pipeline, "stream_generate", fixed_outputs)
    cls, ext = list(loaded.extract(docs, batch_size=1))
    assert cls.to_json()["output"] == [[{"type": "CheckBalance", "span": "CheckBalance", "offset": None}]]
    assert ext.raw == [answers["ext3"]]
    assert ext.to_json()["output"] == [
        [{"type": "LOC", "span": "MELBOURNE", "offset": [0, 9], "grounded": True}],
        [{"type": "DATE", "span": "1996-12-06", "offset": [10, 20], "grounded": True}],
        [{"type": "ORG", "span": "ACME", "offset": None, "grounded": False}],
    ]
    assert any("'DATE'" in w for w in ext.warnings)


def test_a_long_text_is_cut_on_the_left_with_a_warning(loaded, hf_generate):
    doc = Document("long", "杭州欢迎你。" * 400 + "结尾在这里", task="ext", labels=["地名"])
    settings = dict(num_beams=1, max_new_tokens=4)
    (result,) = loaded.extract([doc], **settings)
    assert "was cut" in result.warnings[0]
    assert result.raw == hf_generate([prompts_for(doc)[0].text], **settings)


def test_all_input_errors_come_before_any_model_work(loaded):
    docs = documents()
    docs.insert(3, Document("bad", "text", task="ext", labels=[], line=9))
    before = loaded.tokens_processed()
    with pytest.raises(InputError, match="line 9"):
        list(loaded.extract(docs, **SETTINGS))
    assert loaded.tokens_processed() == before


@pytest.mark.parametrize("options, message", [
    (dict(temperature=0.7), "temperature"),
    (dict(num_beams=0), "num_beams"),
    (dict(max_new_tokens=-1), "max_new_tokens"),
    (dict(markers="fr"), "markers"),
])
def test_bad_options_are_input_errors(loaded, options, message):
    with pytest.raises(InputError, match=message):
        list(loaded.extract(documents()[:2], **options))


def test_none_options_mean_the_defaults(loaded):
    values = loaded.settings(dict(num_beams=None, max_new_tokens=None, repetition_penalty=None))[0]
    assert (values.num_beams, values.max_new_tokens, values.repetition_penalty) == (4, 256, 1.0)


def test_sdpa_knob_gives_the_same_results_as_eager(loaded):
    eager = [r.to_json() for r in loaded.extract(documents(), **SETTINGS)]
    loaded.knobs.attention = "sdpa"
    assert [r.to_json() for r in loaded.extract(documents(), **SETTINGS)] == eager


def test_the_optimization_plugins_switch_the_attention_kernel_and_refuse_the_rest(loaded):
    from workstation import engine
    assert engine.apply_optimizations(loaded, ["flash-attention"]) == {"flash-attention": "sdpa"}
    assert loaded.knobs.attention == "sdpa"
    engine.apply_optimizations(loaded, [])
    assert loaded.knobs.attention == "eager"
    for name in ("sparse-mask", "memory-pool", "precision"):   # precision: CPU here
        with pytest.raises(InputError, match="does not apply"):
            engine.apply_optimizations(loaded, [name])
    # Gradient checkpointing acts in fine-tuning only: switched on, but not recorded as active for extraction.
    assert engine.apply_optimizations(loaded, ["gradient-checkpointing"]) == {}
    assert loaded.knobs.checkpointing


def test_set_dtype_casts_the_network_and_records_it(loaded):
    loaded.set_dtype("bf16")
    assert loaded.knobs.dtype == "bf16" and loaded.network.word_embeddings.weight.dtype == torch.bfloat16
    results = list(loaded.extract(documents()[:2], num_beams=2, max_new_tokens=4))
    assert len(results) == 2 and all(isinstance(r, Result) for r in results)
    with pytest.raises(InputError):
        loaded.set_dtype("int8")


def test_precision_switched_off_again_gives_back_the_loaded_fp32_weights(loaded):
    before = {k: v.clone() for k, v in loaded.network.state_dict().items()}
    for dtype in ("bf16", "fp16", "fp32"):
        loaded.set_dtype(dtype)
    after = loaded.network.state_dict()
    assert all(after[k].dtype == torch.float32 and torch.equal(after[k], v) for k, v in before.items())


def test_out_of_memory_halves_the_pool_keeps_every_document_and_reports_it(loaded, monkeypatch):
    from contracts.stages import StageClock
    from plugins.seqgpt.continuous import SlotPool
    reference = [r.to_json() for r in loaded.extract(documents(), batch_size=8, **SETTINGS)]
    real_step, sizes = SlotPool.step, []

    def step_with_small_memory(pool, start, end):
        sizes.append(pool.items)
        if pool.items > 2 and len(sizes) > 3:            # fails mid-run, with prompts in flight
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_step(pool, start, end)
    monkeypatch.setattr(SlotPool, "step", step_with_small_memory)
    loaded.clock = StageClock()
    assert [r.to_json() for r in loaded.extract(documents(), batch_size=8, **SETTINGS)] == reference
    assert [b["rows"] for b in loaded.clock.backoffs] == [4, 2] and sizes[-1] == 2



@pytest.mark.parametrize("fails", ["admit", "new pool"])
def test_out_of_memory_while_admitting_or_building_a_pool_loses_no_prompt(loaded, monkeypatch, fails):
    # The prompts being admitted are out of the queue and not yet in a slot: an out-of-memory error there
    # (the prefill's scratch cache, a bigger pool) must put them back too. On an H100 the fp32 eager run at
    # batch 64 lost them, and the document's merge ran out of results (StopIteration).
    from contracts.stages import StageClock
    from plugins.seqgpt import continuous
    reference = [r.to_json() for r in loaded.extract(documents(), batch_size=8, **SETTINGS)]
    calls = []
    if fails == "admit":
        real = continuous.SlotPool.admit

        def admit_with_small_memory(pool, slots, prompts):
            calls.append(pool.items)
            if pool.items > 2:                              # the prefill of a whole pool's prompts
                raise RuntimeError("CUDA out of memory. Tried to allocate 1.00 GiB")
            return real(pool, slots, prompts)
        monkeypatch.setattr(continuous.SlotPool, "admit", admit_with_small_memory)
    else:
        real = continuous._new_pool

        def new_pool_with_small_memory(network, items, *rest):
            calls.append(items)
            if items > 2:
                raise RuntimeError("CUDA out of memory. Tried to allocate 1.00 GiB")
            return real(network, items, *rest)
        monkeypatch.setattr(continuous, "_new_pool", new_pool_with_small_memory)
    loaded.clock = StageClock()
    assert [r.to_json() for r in loaded.extract(documents(), batch_size=8, **SETTINGS)] == reference
    assert loaded.clock.backoffs and calls[-1] == 2

def test_progress_and_token_counts(loaded):
    progress = []
    before = loaded.tokens_processed()
    list(loaded.extract(documents(), on_progress=progress.append, **SETTINGS))
    assert progress == [1, 2, 3, 4, 5]
    assert loaded.tokens_processed() > before


def test_demo_weights_are_recognised(demo_tiny, hf_checkpoint):
    assert SeqGPT().load(demo_tiny).is_demo and SeqGPT().is_demo(demo_tiny)
    assert not SeqGPT().is_demo(hf_checkpoint)
