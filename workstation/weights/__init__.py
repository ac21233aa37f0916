"""Official weights in one step: fetch them with the hubs' own clients, verify, and switch settings.toml to them
(`launcher.py weights fetch | list | use`, and the UI's Model weights page).

hubs: the two hubs' clients behind one shape; fetch: staging, checks and the move into place; folders: what a
checkpoint folder holds and whether it loads; settings_file: settings.toml rewritten with its comments kept;
background: a fetch in a process of its own, followed by the UI.
"""
