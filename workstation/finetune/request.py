"""What a fine-tune started from the UI asks for, checked before anything is written or started, and the
`launcher.py finetune` arguments it becomes (workstation/finetune/trainer.py's parser)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from contracts.domain import InputError
from workstation import plugins

TRAINING_DTYPES = ("fp32", "bf16")


@dataclass
class FinetuneRequest:
    model: str
    weights: Path
    train_dataset: int
    output: Path
    eval_dataset: int | None = None
    dev_ratio: float = 0.0              # > 0: hold out this share of the training dataset for evaluation
    split_seed: int = 0
    epochs: int = 3
    batch_size: int = 8
    lr: float = 2e-5
    dtype: str = "fp32"
    device: str = "auto"
    optimizations: tuple[str, ...] = ()
    seed: int = 0

    def check(self) -> None:
        for name, value in (("epochs", self.epochs), ("batch size", self.batch_size)):
            if int(value) < 1:
                raise InputError(f"{name} must be at least 1, got {value}")
        if not 0 < self.lr <= 1:                    # as `launcher.py finetune --lr` takes it
            raise InputError(f"the learning rate must be a positive number up to 1, got {self.lr}")
        if self.dtype not in TRAINING_DTYPES:
            raise InputError(f"training precision is one of {', '.join(TRAINING_DTYPES)}, not {self.dtype!r}")
        if self.dtype == "bf16" and self.device == "cpu":
            raise InputError("bf16 training needs a CUDA device; on the CPU train in fp32")
        usable = plugins.training_optimizations()        # as the trainer takes them: those declaring `training`
        refused = [o for o in self.optimizations if o not in usable]
        if refused:
            raise InputError(f"{', '.join(refused)} do not apply to fine-tuning; use {', '.join(usable) or 'none'}")
        if self.eval_dataset is not None and self.dev_ratio:
            raise InputError("evaluate on another dataset or on a held-out share of the training data, not both")
        if not Path(self.weights).is_dir():
            raise InputError(f"base weights {self.weights} are not a directory")
        output = Path(self.output)
        if output.resolve() == Path(self.weights).resolve():
            raise InputError("the output directory must differ from the base weights; those are kept as they are")
        if output.exists() and any(output.iterdir()):
            raise InputError(f"{output} is not empty: choose a new output directory (or resume the run that wrote it)")

    def argv(self, train: Path, evaluation: Path | None, events: Path) -> list[str]:
        """The `launcher.py finetune` arguments (workstation/finetune/trainer.py's parser)."""
        args = ["--model", self.model, "--weights", str(self.weights), "--train", str(train),
                "--output", str(self.output), "--epochs", str(int(self.epochs)),
                "--batch-size", str(int(self.batch_size)), "--lr", repr(float(self.lr)), "--dtype", self.dtype,
                "--device", self.device, "--seed", str(int(self.seed)), "--events", str(events)]
        if evaluation is not None:
            args += ["--eval", str(evaluation)]
        if self.optimizations:
            args += ["--optimizations", *self.optimizations]
        return args
