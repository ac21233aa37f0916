"""Optimizations: what each one does, whether it applies to the loaded model, toggle, run again, compare."""
from __future__ import annotations

import streamlit as st

from contracts.domain import InputError, WeightsError
from storage.repository import NotFound
from workstation import plugins
from workstation.ui import render, results, runs, state

SWITCH_NOTE = {
    "live": "acts on the loaded model at the next run",
    "reload": "the model is reloaded at the next run",
    "restart": "needs an app restart: list it under [optimizations] enabled in settings.toml",
}

st.title("Optimizations")
fam = state.current_family()
registry = plugins.optimizations()
if fam is None or not registry:
    st.info("No model or no optimization plugin is installed. See the Plugins page.")
    st.stop()

settings = state.settings()
device = state.device_for(fam.name)
chosen = state.chosen_optimizations()
try:
    key = runs.target(runs.RunRequest(fam.name, device, tuple(chosen)))[0]
    with st.spinner(f"Loading {fam.name}…"), state.model_shelf().borrow(key) as model:
        verdicts = {name: opt.applies_to(model) for name, opt in registry.items()}
except (InputError, WeightsError, RuntimeError) as e:
    st.error(f"{fam.name} could not be loaded, so applicability is unknown: {render.md_text(e)}")
    st.stop()

st.caption(f"For **{fam.name}** on **{render.md_text(key[2])}** ({render.md_text(settings.model(fam.name).dtype)}). "
           "Each run records the optimizations that were active, so History can compare them.")
selected: list[str] = []
for name, opt in registry.items():
    ok, reason = verdicts[name]
    with st.container(border=True):
        cols = st.columns([3, 1])
        with cols[0]:
            st.markdown(f"**{opt.title}** · {render.md_code(name)} · {'lossless' if opt.lossless else 'within a stated tolerance'}")
            st.caption(opt.description)
            st.caption((":green[:material/check_circle: applies]: " if ok
                        else ":red[:material/block: does not apply]: ") + reason)
            st.caption(f"Switch: {opt.switch} — {SWITCH_NOTE.get(opt.switch, '')}")
        with cols[1]:
            if opt.switch == "restart":
                on = name in settings.optimizations
                st.toggle("on (from start)" if on else "off (from start)", value=on, disabled=True,
                          key=f"opt:{name}")
            else:
                on = st.toggle("use", value=ok and name in chosen, disabled=not ok, key=f"opt:{name}")
        if on and ok:
            selected.append(name)
# chosen ones that do not apply to this model stay chosen, for when another model is picked
st.session_state["optimizations"] = [n for n in registry
                                     if n in selected or (n in chosen and not verdicts[n][0])]

st.divider()
st.subheader("Run again and compare")
last = st.session_state.get("extract_run_id")
if last is None:
    st.info("Run something on the Extract page first; then toggle here and run it again.")
    st.stop()
st.caption(f"Runs the documents of run {last} again with: "
           + (", ".join(render.md_text(n) for n in selected) if selected else "no optimizations (fp32 eager path)")
           + ".")
if st.button("Run again", type="primary"):
    try:
        before = state.store().get_run(last)
    except NotFound:
        st.error(f"Run {last} was deleted; run something on the Extract page first.")
    else:
        request = runs.RunRequest(fam.name, device, tuple(selected), task=before.summary.task)
        try:
            with st.spinner("Running…"):
                new = runs.run_and_record(request, [doc for doc, _ in before.items])
            st.session_state["optimizations_compare"] = (last, new)
            st.session_state["extract_run_id"] = new
        except (InputError, WeightsError) as e:
            st.error(render.md_text(e))
        except Exception as e:          # a failing kernel is reported, the page stays up
            st.error(f"The run failed: {type(e).__name__}: {render.md_text(e)}")

pair = st.session_state.get("optimizations_compare")
if pair:
    results.comparison_view(state.store(), *pair)
