"""What a model plugin provides, and what a loaded model exposes to the engine and to optimizations."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from contracts.domain import Document, InputError, Result, require_text
from contracts.names import Kernel, Reads
from contracts.stages import IDLE, StageClock


@dataclass(frozen=True)
class OfficialWeights:
    """Where a model's official checkpoint is published, pinned: what `launcher.py weights fetch` downloads."""

    hub: str                      # "huggingface" | "modelscope": the hub whose own client fetches it
    repo_id: str
    revision: str                 # a commit or a tag; never a moving branch, so a fetch is reproducible
    files: tuple[str, ...]        # the files the loader reads (the rest of a repo, code and images, is not fetched)


@dataclass(frozen=True)
class TaskPreset:
    """A task a model supports, with an example the UI can fill in."""

    name: str
    title: str
    text: str
    schema: Any                       # a schema dict (Reads.SCHEMA) or a label list (Reads.LABELS)
    description: str = ""


@dataclass
class Knobs:
    """The switches optimizations turn on a loaded model. The model reads them on every batch.

    dtype:         "fp32" | "fp16" | "bf16" for weights and activations (fragile parts stay fp32)
    attention:     the attention kernel: "eager" | "sdpa" | a fused kernel the model offers
    unpad:         pack sequences / bucket by length instead of padding (lossless)
    cuda_graphs:   capture static shape buckets as CUDA graphs (memory pool)
    checkpointing: gradient checkpointing of the blocks (training only)
    host_workers:  processes that do the host's share of a run (tokenising, decoding, serialising) while
                   the run's own process feeds the device; 0: all of it in the run's own process
    host_workers_from: a run of fewer documents stays in its own process unless the workers are already up
                   (starting them costs more than they save on a short run); 0: any run of more than a batch
    """

    dtype: str = "fp32"
    attention: str = Kernel.EAGER
    unpad: bool = False
    cuda_graphs: bool = False
    checkpointing: bool = False
    host_workers: int = 0
    host_workers_from: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class LoadedModel(ABC):
    """A model on a device, ready to extract. Knobs are changed by optimizations between runs."""

    family: "ModelFamily"
    weights: Path
    device: str
    is_demo: bool
    knobs: Knobs
    attention_backends: tuple[str, ...] = (Kernel.EAGER, Kernel.SDPA)   # the first is the reference maths
    capabilities: frozenset[str] = frozenset()   # of contracts.names.Capability
    graph_scope: str = ""     # what CUDA-graph capture covers in this model (the memory-pool plugin shows it)
    clock: StageClock = IDLE  # the engine puts a fresh one here for each run; the model measures into it

    @abstractmethod
    def extract(self, documents: Sequence[Document], batch_size: int = 8,
                on_progress: Callable[[int], None] | None = None, **options) -> Iterator[Result]:
        """Yield one Result per document, in input order. Batches across documents."""

    @abstractmethod
    def set_dtype(self, dtype: str) -> None:
        """Cast the weights (fragile parts stay fp32) and record it in knobs."""

    def prepare_run(self, documents: int | None) -> dict[str, str]:
        """Called by the engine once a run's knobs are set, before its first batch, with the run's number of
        documents when its whole input is already read (None: more than one slice). Work the run will need can
        start here (worker processes). Returns optimization name -> what runs instead, for one that sits this run
        out; the run records it."""
        return {}

    def finish_run(self) -> dict[str, str]:
        """Called by the engine when a run's last result is out: optimization name -> what it did in this run, where
        that was decided during the run (host workers that took over part way); the run records it."""
        return {}

    def tokens_processed(self) -> int:
        """Tokens fed to the network since load (for run statistics)."""
        return 0

    def resolve_attention(self, wanted: str) -> tuple[str, str]:
        """The attention kernel that runs when `wanted` is asked for, and why when it is another one
        (a fused kernel that is not installed, or has no kernels for this dtype)."""
        return wanted, ""

    def attention_kernel(self) -> str:
        """The kernel that runs now, with these knobs and this dtype: what a run records, and what the
        fused-attention optimization records. A model says which kernel runs in `resolve_attention` only, so
        the two cannot disagree."""
        return self.resolve_attention(self.knobs.attention)[0]

    def describe(self) -> dict[str, Any]:
        return {"model": self.family.name, "weights": str(self.weights), "device": self.device,
                "demo": self.is_demo, "dtype": self.knobs.dtype, "attention": self.attention_kernel()}

    def training(self) -> "Training":
        """What fine-tuning needs from this model (workstation/finetune/trainer.py runs the loop)."""
        raise InputError(f"{self.family.name} cannot be fine-tuned")


class Training(ABC):
    """A loaded model seen by the fine-tuning loop: examples, loss, the network, the saved layout.

    The loop (optimizer, schedule, checkpoints, events) is the host's; a model plugin says how a
    gold document becomes training examples and what a micro-batch of them costs.
    """

    network: Any                          # the torch.nn.Module whose parameters are optimised

    @abstractmethod
    def examples(self, document: Document, gold: list) -> list:
        """The training examples (windows, prompt chunks) of one validated gold document."""

    @abstractmethod
    def loss(self, batch: Sequence, autocast_dtype: Any = None) -> Any:
        """Mean loss of a micro-batch of examples, as a scalar tensor to backpropagate.
        autocast_dtype: a torch dtype to autocast to (CUDA bf16), None for full precision."""

    @abstractmethod
    def begin(self) -> str:
        """Switch the network to training: train mode, gradients on, an attention kernel with a
        backward pass, checkpointing from the knobs. Returns the attention kernel used."""

    @abstractmethod
    def end(self) -> None:
        """Back to inference (eval mode: dropout off)."""

    @abstractmethod
    def write_official(self, output: Path) -> None:
        """Write the network in the official checkpoint layout, which `family.load` reads strictly."""


class ModelFamily(ABC):
    """A model plugin: its tasks, input validation, loading and demo weights."""

    name: str
    title: str
    tasks: dict[str, TaskPreset]
    reads: Reads = Reads.SCHEMA           # what documents carry for it: a schema, or a task and labels
    needs_weights: bool = True            # False: runs without a checkpoint (rules, dictionaries); `load` gets
                                          # the configured directory, which may not exist
    options: dict[str, Any] = {}          # extract() options and their defaults (the UI draws widgets)
    # batch_size = "auto": per dtype, ((GB of device memory, largest batch that fits), ...) ascending;
    # contracts.batching.auto_batch_size reads it. Empty: "auto" is the contract's default batch.
    batch_table: dict[str, tuple[tuple[float, int], ...]] = {}
    option_choices: dict[str, tuple] = {}  # options that take one of a few values: the UI offers a choice
    option_titles: dict[str, tuple[str, str]] = {}  # option -> (name for people, what it does); else the raw name
    official: OfficialWeights | None = None   # the published checkpoint, when there is one to fetch
    # Prefixes of a text that make it a classification (RexUniNLU's `[CLASSIFY]`): the result gives the label
    # as the prefix's span. The quality tools strip them to pair texts and write gold in this convention; the
    # first is the one they add for a classification task. Empty: the family marks no text.
    classification_markers: tuple[str, ...] = ()
    # (option, value) that reads all of a text the default setting reads only partly (SeqGPT's
    # ("long_text", "window")): the host's hint when a run cut texts. None: no such option.
    whole_text_option: tuple[str, Any] | None = None

    @abstractmethod
    def validate(self, document: Document) -> None:
        """Raise InputError (with the document's line) if the document cannot be run."""

    def check(self, document: Document) -> None:
        """What the host calls before a run: its own rules for every model (no blank text, the kind of input
        this model reads), then `validate`."""
        require_text(document)
        self.check_reads(document)
        self.validate(document)

    def check_reads(self, document: Document) -> None:
        """The document gives what this model reads (`reads`). One that gives the other kind instead (labels
        for a schema model, a schema for a label model) is told so, rather than that its input is missing."""
        if self.reads == Reads.LABELS:
            given = "a \"schema\"" if document.labels is None and document.schema is not None else None
        elif isinstance(document.schema, list):
            given = "a list of labels as its \"schema\""
        else:
            given = "\"task\"/\"labels\"" if document.schema is None and (
                document.labels is not None or document.task is not None) else None
        if given:
            raise InputError(f"{self.name} reads {self.reads.fields()}, but document {document.id!r} gives {given} "
                             "instead, which is what the other kind of model reads", document.line)

    @abstractmethod
    def load(self, weights: Path, device: str = "cpu", dtype: str = "fp32") -> LoadedModel:
        """Load the official checkpoint layout strictly; raise WeightsError with an actionable message."""

    def check_weights(self, weights: Path) -> str:
        """Check a checkpoint directory as `load` would read it (every tensor present with its shape, the
        tokenizer and its special tokens) without putting it on a device; return a one-line description
        of what was found, or raise WeightsError naming what is wrong. Families override this with a
        lighter check; this default loads on the CPU."""
        model = self.load(Path(weights), "cpu")
        del model
        return f"{self.name} checkpoint loads"

    def write_demo_weights(self, out_dir: Path, size: str = "full") -> Path | None:
        """Write random-weight checkpoints of the real architecture ("full" or "tiny") and return the dir.
        Optional: a model with no demo weights returns None, and the host then needs real weights."""
        return None

    def validate_gold(self, document: Document, output: Any) -> list:
        """A corrected result (our `output` shape) fit to train on: raise InputError naming the problem
        and document.line. Families override this with their own rules (schema paths, label sets)."""
        raise InputError(f"{self.name} cannot take gold examples", document.line)

    def is_demo(self, weights: Path) -> bool:
        return (Path(weights) / DEMO_MARKER).exists()


DEMO_MARKER = "RANDOM_DEMO_WEIGHTS.txt"
DEMO_NOTICE = ("RANDOM DEMO WEIGHTS: outputs are meaningless. Get the official weights with "
               "`python3 launcher.py weights fetch all` (or the Model weights page).")
