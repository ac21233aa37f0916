"""The document pipeline around the slot pool: windows planned by batch calls, results streamed in
input order, parsing off the decoding thread, stage times measured."""
import threading

from contracts.domain import Document
from contracts.stages import StageClock
from plugins.seqgpt import pipeline
from plugins.seqgpt.continuous import SlotPool
from plugins.seqgpt.generation import GenerationSettings, generate
from plugins.seqgpt.prompting import prompts_for
from tests.plugins.seqgpt.test_seqgpt_family import SETTINGS, documents

SHORT = dict(num_beams=1, max_new_tokens=3)


def many_documents(n: int) -> list[Document]:
    texts = ["北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。", "MELBOURNE 1996-12-06", "我", "  "]
    return [Document(f"d{i}", texts[i % 4] * (1 + i % 5), task="ext", labels=["LOC", "PER"], line=i + 1)
            for i in range(n)]


class CountingTokenizer:
    """The real tokenizer, with its encode calls recorded."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, []

    def __call__(self, texts, *args, **kwargs):
        self.calls.append(texts)
        return self.tokenizer(texts, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def test_more_documents_than_a_window_come_back_in_order_as_each_prompt_alone(loaded):
    docs = many_documents(70)                         # two planning windows of 64 documents
    results = list(loaded.extract(docs, batch_size=3, **SHORT))
    assert [r.document_id for r in results] == [d.id for d in docs]
    settings = GenerationSettings(**SHORT)
    for doc, result in zip(docs[:12], results):
        prompts, _ = pipeline.encode(loaded.tokenizer, prompts_for(doc))
        expected = [loaded.tokenizer.decode(generate(loaded.network, [p], settings).tokens[0], skip_special_tokens=True)
                    for p in prompts]
        assert result.raw == expected


def test_a_windows_prompts_are_tokenised_by_one_batch_call(loaded):
    counting = loaded.pipeline.tokenizer = CountingTokenizer(loaded.tokenizer)
    docs = documents()
    list(loaded.extract(docs, **SETTINGS))
    texts = [p.text for d in docs for p in prompts_for(d)]
    assert counting.calls == [texts]


def test_results_stream_before_the_last_prompts_are_generated(loaded, monkeypatch):
    admitted, real_admit = [], SlotPool.admit

    def admit(pool, slots, prompts):
        admitted.extend(prompts)
        return real_admit(pool, slots, prompts)
    monkeypatch.setattr(SlotPool, "admit", admit)
    docs = [d for d in many_documents(100) if d.text.strip()]           # 75: a window of 64 and the rest
    results = loaded.extract(docs, batch_size=2, **SHORT)
    first = next(results)
    assert first.document_id == docs[0].id and len(admitted) < 70    # the second window barely started
    assert len(list(results)) == len(docs) - 1


def test_parsing_runs_off_the_decoding_thread_and_stages_are_measured(loaded, monkeypatch):
    threads, real_result = set(), pipeline.result

    def result(run):
        threads.add(threading.current_thread().name)
        return real_result(run)
    monkeypatch.setattr(pipeline, "result", result)
    loaded.clock = StageClock()
    list(loaded.extract(documents(), **SETTINGS))
    assert threads and threading.current_thread().name not in threads
    seconds = loaded.clock.finish()
    assert seconds["prepare"] > 0 and seconds["device"] > 0 and seconds["decode"] > 0


def test_an_error_in_planning_reaches_the_caller_before_any_model_work(loaded):
    import pytest

    from contracts.domain import InputError
    before = loaded.tokens_processed()
    with pytest.raises(InputError, match="markers"):
        list(loaded.extract(documents(), markers="fr"))
    assert loaded.tokens_processed() == before


def test_the_memory_pool_keeps_its_slot_pool_across_runs_and_resets_it(loaded):
    loaded.knobs.cuda_graphs = True
    docs = documents()
    first = [r.to_json() for r in loaded.extract(docs, batch_size=2, **SETTINGS)]
    pools = list(loaded.graphs.runs.values())
    again = [r.to_json() for r in loaded.extract(docs[::-1], batch_size=2, **SETTINGS)]
    assert again == first[::-1]
    assert list(loaded.graphs.runs.values()) == pools and len(pools) == 1    # captured once, reused
