"""SeqGPT-560M (DAMO-NLP/SeqGPT-560M, a BLOOM generative extractor) as a model plugin."""
from contracts.hookspecs import hookimpl


@hookimpl
def register_models(register):
    from plugins.seqgpt.family import SeqGPT
    register(SeqGPT())
