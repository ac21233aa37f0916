"""SeqGPT's tokenizer kept in the cache folder: a later process loads it without transformers and tokenizes as
transformers' tokenizer does; building the network on the meta device imports no torch._dynamo."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from plugins.seqgpt import kept_tokenizer
from plugins.seqgpt.loading import load_tokenizer
from plugins.seqgpt.prompting import MARKERS, prompt_text

ROOT = Path(__file__).resolve().parents[3]
TEXTS = list(kept_tokenizer.PROBES) + [prompt_text("张三在北京工作", "ext", ["人物", "地点"], MARKERS["en"]),
                                       "  leading and trailing  ", "a" * 3000, "混合 mixed 文本 text 123"]


def calls(tokenizer) -> list:
    """What SeqGPT asks of its tokenizer (pipeline, windows, training), as plain lists."""
    out = [len(tokenizer)]
    for text in TEXTS:
        one = tokenizer(text, return_offsets_mapping=True)
        bare = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        out.append([list(one["input_ids"]), [list(o) for o in one["offset_mapping"]], list(bare["input_ids"]),
                    [list(o) for o in bare["offset_mapping"]]])
    ids = tokenizer(TEXTS)["input_ids"]
    out.append([list(x) for x in ids])
    out.append(tokenizer.batch_decode(ids, skip_special_tokens=True))
    out.append([tokenizer.decode(x) for x in ids] + [tokenizer.decode([2, 5, 3, 7], skip_special_tokens=True)])
    return out


def test_the_rust_backend_answers_every_call_as_transformers_does(seqgpt_tiny):
    built = load_tokenizer(seqgpt_tiny)
    rust = kept_tokenizer.RustTokenizer.from_entry(kept_tokenizer.entry_of(built))
    assert calls(rust) == json.loads(json.dumps(calls(built)))
    assert kept_tokenizer.agree(built, rust)


KEPT = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from plugins.seqgpt import kept_tokenizer
from tests.plugins.seqgpt.test_seqgpt_kept_tokenizer import calls
tokenizer = kept_tokenizer.load(Path(sys.argv[1]))
print(json.dumps(["transformers" in sys.modules, type(tokenizer).__name__, calls(tokenizer)]))
"""


def test_a_second_process_takes_the_tokenizer_from_the_cache_folder_without_transformers(seqgpt_tiny, tmp_path,
                                                                                       monkeypatch):
    monkeypatch.setenv("IEW_CACHE_DIR", str(tmp_path))
    first = kept_tokenizer.load(seqgpt_tiny)
    assert type(first).__name__ != "RustTokenizer"               # the first process builds it with transformers
    [entry] = (tmp_path / "tokenizers").iterdir()

    def second_process() -> list:
        done = subprocess.run([sys.executable, "-c", KEPT, str(seqgpt_tiny), str(ROOT)], capture_output=True, text=True,
                              check=True, cwd=ROOT)
        return json.loads(done.stdout)

    imported, kind, answers = second_process()
    assert not imported and kind == "RustTokenizer"
    assert answers == json.loads(json.dumps(calls(first)))
    entry.write_text('{"tokenizer": "not one"}', "utf-8")         # a broken entry is built again
    imported, kind, again = second_process()
    assert imported and again == answers and json.loads(entry.read_text("utf-8"))["size"] == len(first)
    copy = tmp_path / "other"
    shutil.copytree(seqgpt_tiny, copy)
    (copy / "tokenizer_config.json").write_text((seqgpt_tiny / "tokenizer_config.json").read_text("utf-8") + "\n")
    assert kept_tokenizer.kept_at_for(copy) != kept_tokenizer.kept_at_for(seqgpt_tiny)    # other files: another entry


def test_a_backend_that_disagrees_with_transformers_is_not_kept(seqgpt_tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("IEW_CACHE_DIR", str(tmp_path))
    built = load_tokenizer(seqgpt_tiny)
    wrong = kept_tokenizer.RustTokenizer.from_entry(kept_tokenizer.entry_of(built))
    assert kept_tokenizer.agree(built, wrong)
    original = wrong.decode
    wrong.decode = lambda ids, skip_special_tokens=False: original(ids, skip_special_tokens).replace(" ,", ",")
    assert not kept_tokenizer.agree(built, wrong)                # a clean-up transformers would not do
    monkeypatch.setattr(kept_tokenizer, "agree", lambda *_: False)
    assert type(kept_tokenizer.load(seqgpt_tiny)).__name__ != "RustTokenizer"
    assert not (tmp_path / "tokenizers").exists() or not any((tmp_path / "tokenizers").iterdir())


def test_the_network_is_built_on_the_meta_device_without_importing_torch_dynamo(seqgpt_tiny):
    probe = ("import sys; from pathlib import Path; from plugins.seqgpt.loading import load_network; "
             f"load_network(Path({str(seqgpt_tiny)!r})); print('torch._dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize("seed", [0, 7])
def test_a_network_built_on_the_cpu_gets_the_embedding_nn_embedding_would_give(seed):
    from plugins.seqgpt.modeling import Bloom, BloomConfig
    config = BloomConfig(vocab_size=50, hidden_size=8, n_layer=1, n_head=2)
    torch.manual_seed(seed)
    ours = Bloom(config).word_embeddings.weight
    torch.manual_seed(seed)
    theirs = torch.nn.Embedding(50, 8).weight
    assert torch.equal(ours, theirs)
