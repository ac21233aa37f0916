"""Model weights: per model, the weights in use (demo or not, where from, revision, size, whether they load), a
folder field checked as it is typed, and Download official weights with live progress and Cancel. A switch
writes settings.toml (`launcher.py weights use` / `fetch` do the same) and unloads the model from the shelf,
so the next run loads the new weights: no restart."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from contracts.domain import WeightsError
from workstation.ui import render, state
from workstation.weights import settings_file
from workstation.weights.background import BackgroundFetches
from workstation.weights.fetch import weights_root
from workstation.weights.folders import check_folder, human_bytes, weights_in_use


@st.cache_resource(show_spinner=False)
def _fetches(folder: str) -> BackgroundFetches:
    return BackgroundFetches(Path(folder))


@st.cache_data(show_spinner=False, max_entries=32)
def _loads(model: str, path: str, stamp: float) -> tuple[bool, str]:
    """The model's strict check of a folder, redone only when the folder changes (`stamp`: its newest mtime)."""
    fam = state.families()[model]
    try:
        return True, fam.check_weights(Path(path))
    except WeightsError as e:
        return False, str(e)
    except Exception as e:           # noqa: BLE001 - a plugin's own failure is shown, not raised
        return False, f"{type(e).__name__}: {e}"


def _stamp(path: Path) -> float:
    return max((p.stat().st_mtime for p in path.iterdir()), default=0.0) if path.is_dir() else 0.0


def switched(model: str) -> None:
    """New weights for `model` in settings.toml: unload it wherever it is loaded, and let the sidebar follow
    settings.toml again (a choice made there would otherwise keep the old folder)."""
    shelf = state.model_shelf()
    for key in shelf.loaded():
        if key[0] == model:
            shelf.evict(key[2])
    st.session_state.pop(state.weights_key(model), None)


settings = state.settings()
fetches = _fetches(str(weights_root(settings) / ".ui-fetches"))

st.title("Model weights")
st.caption("The official checkpoints, fetched with the hubs' own clients into "
           f"{render.md_code(weights_root(settings))}, checked file by file and by a strict load before they are "
           "used. The same from a terminal: `python3 launcher.py weights fetch all`. A mirror: HF_ENDPOINT, "
           "MODELSCOPE_ENDPOINT or [weights] in settings.toml.")

for name, fam in state.families().items():
    if not fam.needs_weights:
        continue
    st.subheader(render.md_text(name))
    current = weights_in_use(fam, settings, check=False)
    loads, detail = _loads(name, str(current.path), _stamp(current.path))
    st.markdown(f"In use: {render.md_code(current.path)} — "
                + ("**random demo weights** (outputs are meaningless)" if current.demo
                   else f"from {render.md_text(current.source)}")
                + (f", revision {render.md_code(current.revision)}" if current.revision else "")
                + f", {render.md_text(human_bytes(current.size))}")
    (st.success if loads else st.error)(render.md_text(detail), icon=":material/check:" if loads else ":material/error:")

    official = fam.official
    if official is not None:
        @st.fragment(run_every=1.0 if fetches.running(name) else None)
        def download(name=name, official=official) -> None:
            status = fetches.status(name)
            running = fetches.running(name)
            left, right = st.columns([3, 1])
            left.caption(f"Official: {render.md_code(official.repo_id)} at {render.md_code(official.revision)} "
                         f"({render.md_text(official.hub)})")
            if running:
                if right.button("Cancel", key=f"cancel:{name}"):
                    fetches.cancel(name)
                    st.rerun()
            elif right.button("Download official weights", key=f"fetch:{name}", type="primary"):
                fetches.start(name)
                st.rerun()                         # the whole page: the fragment is redrawn polling each second
            if not status:
                return
            total, done = status.get("total") or 0, status.get("done") or 0
            stage = status["stage"]
            if stage in ("starting", "listing"):
                st.progress(0.0, text=f"{name}: asking the hub for the files …")
            elif stage in ("downloading", "checking"):
                text = (f"{name}: {human_bytes(done)} of {human_bytes(total)} · {human_bytes(status['rate'])}/s"
                        + (" · checking the files and a strict load" if stage == "checking" else ""))
                st.progress(min(1.0, done / total) if total else 0.0, text=text)
            elif stage == "done":
                st.success(f"Downloaded and checked; {render.md_text(name)} now uses {render.md_code(status['path'])}",
                           icon=":material/check:")
                if st.session_state.get(f"switched:{name}") != status["path"]:
                    st.session_state[f"switched:{name}"] = status["path"]
                    switched(name)
                    st.rerun()                     # the whole page: the sidebar's demo banner goes
            elif stage == "cancelled":
                st.info("Cancelled. What was downloaded is kept; Download resumes from there.",
                        icon=":material/pause:")
            else:
                st.error(render.md_text(status["message"]), icon=":material/error:")

        download()

    typed = st.text_input("Use a checkpoint folder", key=f"folder:{name}", placeholder="/path/to/checkpoint",
                          help="Checked as you type (Enter or leaving the field): architecture, vocabulary and "
                               "special tokens, every tensor and its shape.")
    if typed.strip():
        folder = Path(typed.strip()).expanduser()
        try:
            described = check_folder(fam, folder)
        except WeightsError as e:
            st.error(render.md_text(str(e)), icon=":material/error:")
        except Exception as e:           # noqa: BLE001
            st.error(render.md_text(f"{type(e).__name__}: {e}"), icon=":material/error:")
        else:
            st.success(render.md_text(described), icon=":material/check:")
            if st.button(f"Use this folder for {name}", key=f"use:{name}"):
                settings_file.set_weights(settings.source, name, folder)
                switched(name)
                st.rerun()
    st.divider()
