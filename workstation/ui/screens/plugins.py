"""Plugins: what is loaded, its version, where it came from and which hooks it implements."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from workstation import plugins
from workstation.ui import render

st.title("Plugins")
st.caption("Built-ins are registered exactly like installed plugins (entry-point group "
           f"`{plugins.ENTRY_POINT_GROUP}`). IEW_LOAD_PLUGINS=a,b limits which installed ones load.")
table = plugins.plugin_table()
st.dataframe(pd.DataFrame([{**row, "hooks": ", ".join(row["hooks"]),
                            "registered": "; ".join(f"{kind}: {', '.join(names)}"
                                                    for kind, names in row["registered"].items())}
                           for row in table]),
             hide_index=True, width="stretch")

left, right = st.columns(2)
with left:
    st.subheader("Models")
    for name, fam in plugins.model_families().items():
        st.markdown(f"**{render.md_text(name)}** — {fam.title}")
        st.caption("Tasks: " + ", ".join(render.md_text(t) for t in fam.tasks))
with right:
    st.subheader("Optimizations")
    for name, opt in plugins.optimizations().items():
        st.markdown(f"**{render.md_text(name)}** — {opt.title} ({opt.switch})")
        st.caption(opt.description)
