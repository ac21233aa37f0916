"""The RexUniNLU model plugin: tasks, validation, loading, and the loaded model."""
from __future__ import annotations

import weakref
from pathlib import Path
from typing import Callable, Iterator, Sequence

import torch

from contracts.domain import Document, InputError, Result
from contracts.model import DEMO_MARKER, Knobs, LoadedModel, ModelFamily, OfficialWeights, TaskPreset
from contracts.names import Capability, Kernel, Reads
from contracts.torch import triton_ahead
from contracts.torch.precision import MasterWeights
from contracts.torch.triton_key import remember_triton_key
from contracts.words import plural
from plugins.rexuninlu import demo, loading
from plugins.rexuninlu.modeling import forget_fused_projections
from plugins.rexuninlu.pipeline import run_documents
from plugins.rexuninlu.prompting import CLASSIFY, MULTICLASSIFY, Prompter, Vocabulary, validate_schema, validate_text
from plugins.rexuninlu.scoring import WindowScorer
from plugins.rexuninlu.workers import HandOver, HostWorkers

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

PRESETS = [
    TaskPreset("ner", "Named entities", "北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。",
               {"人物": None, "地理位置": None, "组织机构": None}),
    TaskPreset("relation", "Relation extraction",
               "1987年首播的央视版《红楼梦》是中央电视台和中国电视剧制作中心根据中国古典文学名著《红楼梦》摄制的一部古装连续剧。",
               {"组织机构": {"创始人(人物)": None, "成立日期(时间)": None, "总部地点(地理位置)": None,
                         "简称(组织机构)": None}}),
    TaskPreset("event", "Event extraction", "7月28日，天津泰达在德比战中以0-1负于天津天海。",
               {"胜负(事件触发词)": {"时间": None, "败者": None, "胜者": None, "赛事名称": None}}),
    TaskPreset("absa", "Aspect sentiment (# allows a missing aspect)", "#很满意，音质很好，发货速度快，值得购买",
               {"属性词": {"情感词": None}}),
    TaskPreset("sentiment_absa", "Sentiment via aspects", "很满意，音质很好，发货速度快，值得购买",
               {"属性词": {"正向情感(情感词)": None, "负向情感(情感词)": None, "中性情感(情感词)": None}}),
    TaskPreset("sentiment", "Sentiment classification", "[CLASSIFY]有点看不下去了，看作者介绍就觉得挺矫情的，入手准备看一看，亏了。",
               {"正向情感": None, "负向情感": None}),
    TaskPreset("classification", "Single-label classification", "[CLASSIFY]学校召开2018届升学及出国深造毕业生座谈会就业指导",
               {"民生": None, "文化": None, "娱乐": None, "体育": None, "财经": None, "教育": None}),
    TaskPreset("multi_label", "Multi-label classification",
               "[MULTICLASSIFY]《格林童话》是德国民间故事集。由德国的雅各布·格林和威廉·格林兄弟根据民间口述材料改写而成。",
               {"民间故事": None, "推理": None, "心理学": None, "历史": None, "传记": None, "外国名著": None,
                "文化": None, "诗歌": None, "童话": None, "艺术": None, "科幻": None, "小说": None}),
    TaskPreset("hierarchical", "Hierarchical classification", "[CLASSIFY]雨刷刮不干净怎么办",
               {"APP系统功能": {"蓝牙钥匙故障": None, "APP无法登录": None},
                "电器-附件": {"电子模块问题": None, "雨刮、洗涤器故障": None}}),
    TaskPreset("matching", "Text matching", "[CLASSIFY]段落1：高分子材料与工程排名；段落2：高分子材料与工程专业的完整定义",
               {"文本匹配：相似": None, "文本匹配：不相似": None}),
    TaskPreset("nli", "Natural language inference", "[CLASSIFY]段落1：呃,银行听说都要扣一点这个转手费；段落2：从未有银行扣过手续费",
               {"段落2和段落1的关系是：蕴含": None, "段落2和段落1的关系是：矛盾": None, "段落2和段落1的关系是：中立": None}),
    TaskPreset("choice_mrc", "Multiple-choice reading comprehension",
               "[CLASSIFY]A：最近飞机票打折挺多的，你可以坐飞机去。B：我不是怕贵，我一听坐飞机就头晕。",
               {"B为什么不坐飞机?飞机票太贵": None, "B为什么不坐飞机?坐飞机头晕": None}),
    TaskPreset("extractive_mrc", "Extractive reading comprehension",
               "大莱龙铁路位于山东省北部环渤海地区，西起位于益羊铁路的潍坊大家洼车站，东至龙口，与龙烟铁路相连。",
               {"大莱龙铁路位于哪里？": None}),
    TaskPreset("coreference", "Coreference", "[CLASSIFY]因为周围的山水，早已是一派浑然的美，你就不能再给它(代词)增加什么了。",
               {"下面的句子中，代词“它”指代的是“山水”吗？是的": None, "下面的句子中，代词“它”指代的是“山水”吗？不是": None}),
]


class RexUniNLU(ModelFamily):
    name = "rexuninlu"
    title = "RexUniNLU (DeBERTa-v2 span extractor, zero-shot, schema-driven)"
    tasks = {t.name: t for t in PRESETS}
    reads = Reads.SCHEMA
    classification_markers = (CLASSIFY, MULTICLASSIFY)      # docs/models/rexuninlu.md §3.4
    # batch_size = "auto": windows of 512 tokens per batch that fit a card of this many GB (less 1.5 GiB for the
    # context), eager attention (the most memory-hungry kernel). Derived from measured peaks (docs/performance.md §7), linear
    # in the batch; `bench budget24` measures them under a memory budget (docs/performance.md §7).
    batch_table = {"fp32": ((8, 64), (12, 96), (16, 128), (24, 224), (48, 480), (80, 768)),
                   "bf16": ((8, 128), (12, 192), (16, 256), (24, 448), (48, 960), (80, 1024)),
                   "fp16": ((8, 128), (12, 192), (16, 256), (24, 448), (48, 960), (80, 1024))}
    # ModelScope tag v1.2.2 (2025-09-02, commit d4c0e039 of the model repo's git history); master adds only a
    # README edit on top. The weights file is the same from v1.2.0 on (docs/models/rexuninlu.md, "Official weights").
    official = OfficialWeights("modelscope", "iic/nlp_deberta_rex-uninlu_chinese-base", "v1.2.2",
                               ("config.json", "configuration.json", "vocab.txt", "tokenizer_config.json",
                                "special_tokens_map.json", "pytorch_model.bin", "README.md"))

    def validate(self, document: Document) -> None:
        validate_text(document.text, document.line)
        if document.schema is None:
            raise InputError("no schema: give \"schema\" in the line or --schema", document.line)
        validate_schema(document.schema, document.line)

    def validate_gold(self, document: Document, output) -> list:
        from plugins.rexuninlu.training import validate_gold
        self.validate(document)
        return validate_gold(output, document.text, document.schema, document.line)

    def load(self, weights: Path, device: str = "cpu", dtype: str = "fp32") -> "LoadedRex":
        if device.startswith("cuda") and dtype != "fp32":     # fp32 runs no Triton kernel (resolve_attention)
            remember_triton_key(background=True)          # the fused path's first compile needs it; found meanwhile
            triton_ahead.build_utilities_meanwhile()      # and, on a fresh machine, Triton's C utilities
        network, _ = loading.load_model(Path(weights), device)
        model = LoadedRex(self, Path(weights), device, loading.load_vocabulary(Path(weights)), network)
        model.set_dtype(dtype)
        return model

    def check_weights(self, weights: Path) -> str:
        return loading.check_checkpoint(Path(weights))

    def write_demo_weights(self, out_dir: Path, size: str = "full") -> Path:
        return demo.write(Path(out_dir), size)


class LoadedRex(LoadedModel):
    attention_backends = (Kernel.EAGER, Kernel.SDPA, Kernel.TRITON)
    capabilities = frozenset({Capability.UNPAD, Capability.CUDA_GRAPHS, Capability.CHECKPOINTING,
                              Capability.REDUCED_PRECISION, Capability.HOST_WORKERS})

    def __init__(self, family: RexUniNLU, weights: Path, device: str, vocabulary: Vocabulary, network):
        self.family, self.weights, self.device = family, weights, device
        self.is_demo = (weights / DEMO_MARKER).exists()
        self.knobs = Knobs()
        self.network = network
        self.prompter = Prompter(vocabulary)
        self.scorer = WindowScorer(network, vocabulary.pad_id, vocabulary.type_id, device, self.knobs)
        self.scorer.clock = lambda: self.clock
        self.workers: HostWorkers | None = None          # started by the first run that uses them
        self.handover: HandOver | None = None             # prepare_run's: when this run moves to the workers, if ever
        self.master = MasterWeights()                      # the encoder's fp32 weights while it runs reduced

    def set_dtype(self, dtype: str) -> None:
        if dtype not in DTYPES:
            raise InputError(f"unknown dtype {dtype!r}; use fp32, fp16 or bf16")
        if dtype != "fp32" and not self.device.startswith("cuda"):
            raise InputError(f"{dtype} needs a CUDA device; on {self.device} use fp32")
        self.weights_changed()
        self.master.cast(self.network.plm, DTYPES[dtype])
        for head in (self.network.ffnq, self.network.ffnk, self.network.rotary_emb):
            head.float()                                     # the span head stays fp32
        self.knobs.dtype = dtype

    def weights_changed(self) -> None:
        """Drop what was derived from the weights as they were (a dtype switch, training): the captured graphs
        and the kept q·k·v concatenations, which a new tensor at a freed one's address could pass for current."""
        self.scorer.graphs.clear()
        forget_fused_projections(self.network)

    def extract(self, documents: Sequence[Document], batch_size: int = 8,
                on_progress: Callable[[int], None] | None = None, **options) -> Iterator[Result]:
        if options:
            raise InputError(f"rexuninlu takes no options {sorted(options)}")
        self.network.attention_backend = self.attention_kernel()
        self.network.plm.encoder.checkpointing = self.knobs.checkpointing
        if not self.knobs.host_workers and self.workers is not None:      # switched off: their processes end
            self.workers.close()
            self.workers = None
        handover = self.handover if self.knobs.host_workers else None
        if handover is None or len(documents) <= batch_size:                 # one batch gains nothing
            yield from run_documents(self.prompter, self.scorer, documents, batch_size, on_progress, self.clock)
            return
        done = 0
        if not handover.done:          # this process first; the workers take the rest once they gain (HandOver)
            for result in run_documents(self.prompter, self.scorer, documents, batch_size, on_progress, self.clock,
                                        more=lambda: handover.stay(self.clock, handover.after + done)):
                done += 1
                yield result
            handover.after += done
        if done < len(documents):
            def progress(n: int) -> None:
                if on_progress:
                    on_progress(done + n)
            yield from self.host_workers().run(self.scorer, documents[done:], batch_size, progress, self.clock)

    def prepare_run(self, documents: int | None) -> dict[str, str]:
        """Host workers: a hand-over for the run (workers.HandOver), which starts them once it is bound by its own
        host work and gives them the rest of its documents once they are up; none for a run shorter than the knob's
        host_workers_from, unless they are already up (kept from an earlier run of this model)."""
        self.handover = None
        if not self.knobs.host_workers:
            return {}
        running = self.workers is not None and bool(self.workers.pipes) and self.workers.count == self.knobs.host_workers
        if documents is not None and documents < self.knobs.host_workers_from and not running:
            return {"host-workers": f"off for this run: {plural(documents, 'document')}, fewer than "
                                    f"{self.knobs.host_workers_from:,} (starting the workers costs more than they save)"}
        # Workers kept up from an earlier run cost this one nothing to start: any run may hand over to them.
        self.handover = HandOver(self.host_workers(), None if running else documents, self.knobs.host_workers_from)
        return {}

    def finish_run(self) -> dict[str, str]:
        return {"host-workers": self.handover.describe()} if self.handover is not None else {}

    def host_workers(self) -> HostWorkers:
        """The worker processes for the count the knob asks, kept between runs (they take seconds to start)."""
        if self.workers is not None and self.workers.count != self.knobs.host_workers:
            self.workers.close()
            self.workers = None
        if self.workers is None:
            self.workers = HostWorkers(self.prompter.vocabulary, self.knobs.host_workers)
            weakref.finalize(self, self.workers.close)
        return self.workers

    def resolve_attention(self, wanted: str) -> tuple[str, str]:
        """The one answer to "which kernel runs" (contracts.LoadedModel.attention_kernel asks it, and so does the
        fused-attention optimization). The Triton kernel is the fastest in bf16/fp16, but its exact-fp32 dots
        are slow (docs/benchmarks.md), so fp32 runs SDPA with the same bias instead."""
        if wanted != Kernel.TRITON:
            return wanted, ""
        from plugins.rexuninlu import triton_attention
        if not self.device.startswith("cuda"):
            why = "the Triton kernel needs a CUDA GPU"
        elif not triton_attention.available():
            why = "Triton is not installed"
        elif self.knobs.dtype == "fp32":
            why = "the Triton kernel runs bf16/fp16 (its exact fp32 is slower than SDPA) and the model is fp32"
        else:
            return wanted, ""
        return Kernel.SDPA, f"{why}; SDPA with the relative-position bias computes the same attention"

    def tokens_processed(self) -> int:
        return self.scorer.tokens

    def training(self):
        from plugins.rexuninlu.training import RexTraining
        return RexTraining(self)
