"""The Streamlit UI: app.py (entry, navigation), pages/, and the pieces the pages share."""
