"""A SeqGPT run records the tokens it ran through the network: each prompt once, then one token per generation step
of each prompt still generating (History's "Tokens"; issue #28 saw 0)."""
from __future__ import annotations

from contracts.domain import Document
from plugins.seqgpt.family import SeqGPT
from plugins.seqgpt.prompting import prompts_for
from workstation.jobs import JobRunner

NEW_TOKENS = 6
DOCS = [Document("a", "张三在北京工作。", task="ext", labels=["人物", "地点"]),
        Document("b", "这家店的菜很好吃", task="cls", labels=["正面", "负面"])]


def bounds(weights) -> tuple[int, int]:
    """Greedy: every prompt's tokens, plus between 0 and NEW_TOKENS - 1 fed back per prompt."""
    tokenizer = SeqGPT().load(weights).tokenizer
    prompts = [p.text for d in DOCS for p in prompts_for(d)]
    fed = sum(len(tokenizer(p)["input_ids"]) for p in prompts)
    return fed, fed + (NEW_TOKENS - 1) * len(prompts)


def test_a_seqgpt_batch_job_records_prompt_and_generated_tokens(store, demo_tiny):
    job_id = store.create_job(DOCS, "seqgpt", str(demo_tiny), 2, [], {"max_new_tokens": NEW_TOKENS, "num_beams": 1},
                              "two.jsonl", device="cpu")
    runner = JobRunner(store, devices=["cpu"])
    runner.submit(job_id)
    assert runner.wait(job_id, timeout=120)
    job = store.get_job(job_id)
    assert job.status == "done", job.error
    prompt_tokens, most = bounds(demo_tiny)
    recorded = store.get_run(job.run_id).summary.tokens
    assert prompt_tokens < recorded <= most
