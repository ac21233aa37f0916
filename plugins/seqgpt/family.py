"""The SeqGPT model plugin: tasks, validation, loading, demo weights, and the loaded model."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator, Sequence

import torch

from contracts.domain import Document, InputError, Result
from contracts.model import DEMO_MARKER, Knobs, LoadedModel, ModelFamily, OfficialWeights, TaskPreset
from contracts.names import Capability, Kernel, Reads
from contracts.torch.precision import MasterWeights
from plugins.seqgpt import demo, flash, kept_tokenizer, loading, prompting, windows
from plugins.seqgpt.generation import GenerationSettings
from plugins.seqgpt.graphs import DecodeGraphs
from plugins.seqgpt.modeling import ATTENTION_BACKENDS
from plugins.seqgpt.pipeline import Pipeline

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

# Generation and prompt options `extract` takes, with their defaults: the README / model-card profile
# (beam 4, no sampling, 256 new tokens, no repetition penalty). inference.py's profile adds
# repetition_penalty=2.0.
OPTIONS = {
    "num_beams": 4,
    "max_new_tokens": 256,
    "repetition_penalty": 1.0,
    "markers": "zh",                                  # "en" is an opt-in, not what the model was trained on
    "label_batch": prompting.DEFAULT_LABEL_BATCH,     # extraction labels per prompt
    "long_text": "truncate",                          # "window" reads all of a long text (windows.py)
}
OPTION_CHOICES = {"markers": tuple(prompting.MARKERS), "long_text": windows.MODES}
OPTION_TITLES = {
    "num_beams": ("Beam width", "Candidate continuations kept per step; 1 is greedy decoding, faster"),
    "max_new_tokens": ("Longest answer (tokens)", "Generation stops after this many new tokens per prompt"),
    "repetition_penalty": ("Repetition penalty", "Above 1.0 discourages repeating tokens; 1.0 is off"),
    "markers": ("Prompt language", "The prompt's fixed words: zh as the model was trained, or en"),
    "label_batch": ("Labels per prompt", "Extraction labels asked in one prompt; more labels mean more prompts"),
    "long_text": ("Long text", "truncate reads the end of a text too long for one prompt; window reads all of it"),
}

PRESETS = [
    TaskPreset("cls", "Classification", "I want my checking balance.", ["CheckBalance", "TransferMoney"],
               "Choose the label(s) that fit the text."),
    TaskPreset("ext", "Extraction", "北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。", ["人物", "地理位置", "组织机构"],
               "Find the spans of each label; more than 6 labels are asked in several prompts."),
    TaskPreset("nli", "Sentence pair (NLI)", "李老板卖鱼，卖了三十框鱼\t李老板赚翻了",
               ["entailment", "contradiction", "neutral"],
               "Classify the relation of two sentences separated by a TAB."),
]


class SeqGPT(ModelFamily):
    name = "seqgpt"
    title = "SeqGPT-560M (BLOOM generative extractor, zero-shot, label-driven)"
    tasks = {t.name: t for t in PRESETS}
    reads = Reads.LABELS
    options = OPTIONS
    option_choices = OPTION_CHOICES
    option_titles = OPTION_TITLES
    whole_text_option = ("long_text", "window")
    # batch_size = "auto": prompts generated at once (4 beams each, 64 new tokens after a long prompt) that fit a
    # card of this many GB (less 1.5 GiB for the context). Derived from measured peaks (docs/performance.md §7), linear in the
    # batch; `bench budget24` measures them under a memory budget (docs/performance.md §7).
    batch_table = {"fp32": ((8, 2), (12, 4), (16, 6), (24, 10), (48, 24), (80, 40)),
                   "bf16": ((8, 4), (12, 8), (16, 12), (24, 20), (48, 48), (80, 80)),
                   "fp16": ((8, 4), (12, 8), (16, 12), (24, 20), (48, 48), (80, 80))}
    # A commit of the Hugging Face repo holding the weights as uploaded on 2023-08-25; main (9de1eb8) differs
    # from it only in README.md (docs/models/seqgpt.md, "Official weights").
    official = OfficialWeights("huggingface", "DAMO-NLP/SeqGPT-560M", "8126bf774489678b427f11cc57b2c1af1e61bd83",
                               ("config.json", "generation_config.json", "pytorch_model.bin", "tokenizer.json",
                                "tokenizer_config.json", "special_tokens_map.json", "README.md"))

    def validate(self, document: Document) -> None:
        prompting.validate(document)

    def validate_gold(self, document: Document, output) -> list:
        from plugins.seqgpt.training import validate_gold
        return validate_gold(document, output)

    def load(self, weights: Path, device: str = "cpu", dtype: str = "fp32") -> "LoadedSeqGPT":
        if dtype not in DTYPES:
            raise InputError(f"unknown dtype {dtype!r}; use fp32, fp16 or bf16")
        weights = Path(weights)
        tokenizer = kept_tokenizer.load(weights)
        network = loading.load_network(weights, DTYPES[dtype], device)
        model = LoadedSeqGPT(self, weights, device, network, tokenizer, loading.read_special_tokens(weights))
        model.set_dtype(dtype)
        return model

    def check_weights(self, weights: Path) -> str:
        return loading.check_checkpoint(Path(weights))

    def write_demo_weights(self, out_dir: Path, size: str = "full") -> Path:
        return demo.write(Path(out_dir), size)


class LoadedSeqGPT(LoadedModel):
    # Length bucketing is always on (it changes no output); packing is not implemented for SeqGPT.
    # Checkpointing acts in fine-tuning only. CUDA graphs: graphs.py.
    capabilities = frozenset({Capability.REDUCED_PRECISION, Capability.CHECKPOINTING, Capability.CUDA_GRAPHS})
    attention_backends = (Kernel.EAGER, Kernel.SDPA, Kernel.FLASH)     # "eager" first: HF's arithmetic, the reference
    graph_scope = ("SeqGPT: a slot pool (one static KV cache, slots refilled as prompts finish) whose whole "
                   "decode step (network, token choice, beam reorder) is replayed as one graph per token, "
                   "one graph per (prompt length, generated length) bucket")

    def __init__(self, family: SeqGPT, weights: Path, device: str, network, tokenizer,
                 special: loading.SpecialTokens):
        self.family, self.weights, self.device = family, weights, device
        self.is_demo = (weights / DEMO_MARKER).exists()
        self.knobs = Knobs()
        self.network, self.tokenizer, self.special = network, tokenizer, special
        self.pipeline = Pipeline(network, tokenizer, lambda: self.clock)
        self.graphs = DecodeGraphs(capture=device.startswith("cuda"))   # without CUDA: the same steps, uncaptured
        self.master = MasterWeights()                 # the fp32 weights while the network runs reduced

    def resolve_attention(self, wanted: str) -> tuple[str, str]:
        if wanted != flash.NAME:
            return wanted, ""
        why = flash.unavailable() if self.device.startswith("cuda") else "the model is not on a CUDA GPU"
        if why is None and self.knobs.dtype == "fp32":
            why = "flash-attn has fp16/bf16 kernels only and the model is fp32"
        return (Kernel.SDPA, f"{why}; SDPA with the ALiBi bias computes the same attention") if why else (wanted, "")

    def describe(self):
        return {**super().describe(), "attention": self.attention_kernel(),
                "cuda_graphs": self.knobs.cuda_graphs}

    def set_dtype(self, dtype: str) -> None:
        if dtype not in DTYPES:
            raise InputError(f"unknown dtype {dtype!r}; use fp32, fp16 or bf16")
        # Everything is cast, as the reference's model.half(); softmax and the search run in fp32.
        self.graphs.clear()                           # static caches and graphs hold the old dtype
        self.master.cast(self.network, DTYPES[dtype])
        self.knobs.dtype = dtype

    def tokens_processed(self) -> int:
        return self.pipeline.tokens_fed

    def training(self):
        from plugins.seqgpt.training import SeqGPTTraining
        return SeqGPTTraining(self)

    def settings(self, options: dict) -> tuple[GenerationSettings, dict]:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise InputError(f"seqgpt does not take option(s) {', '.join(unknown)}; it takes {', '.join(OPTIONS)}")
        values = OPTIONS | {k: v for k, v in options.items() if v is not None}
        try:
            settings = GenerationSettings(num_beams=int(values["num_beams"]),
                                          max_new_tokens=int(values["max_new_tokens"]),
                                          repetition_penalty=float(values["repetition_penalty"]),
                                          eos_token_id=self.special.eos, pad_token_id=self.special.pad)
        except (TypeError, ValueError) as e:
            raise InputError(f"seqgpt option: {e}") from None
        return settings, values

    def extract(self, documents: Sequence[Document], batch_size: int = 8,
                on_progress: Callable[[int], None] | None = None, **options) -> Iterator[Result]:
        settings, values = self.settings(options)
        attention = self.attention_kernel()
        if attention not in ATTENTION_BACKENDS:
            raise InputError(f"attention backend {attention!r} is not available for seqgpt; "
                             f"have {', '.join(ATTENTION_BACKENDS)}")
        if values["long_text"] not in windows.MODES:
            raise InputError(f"long_text must be one of {', '.join(windows.MODES)}, not {values['long_text']!r}")
        for document in documents:                    # all input errors before any model work
            self.family.validate(document)
        markers, label_batch = values["markers"], int(values["label_batch"])

        def run(parts: list[Document]) -> Iterator[Result]:
            return self.pipeline.run(parts, batch_size, settings, attention, markers, label_batch, None,
                                     self.graphs if self.knobs.cuda_graphs else None)
        # Documents -> windows (window mode) -> the per-prompt pipeline -> merged Results with coverage.
        yield from windows.read(documents, run, self.tokenizer, values["long_text"], markers, label_batch,
                                on_progress, clock=self.clock)
