"""The Streamlit UI: app.py (entry, navigation), screens/ (one script per page), and the pieces they share."""
