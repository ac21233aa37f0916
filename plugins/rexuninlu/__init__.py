"""RexUniNLU (iic/nlp_deberta_rex-uninlu_chinese-base) as a model plugin."""
from contracts.hookspecs import hookimpl


@hookimpl
def register_models(register):
    from plugins.rexuninlu.family import RexUniNLU
    register(RexUniNLU())
