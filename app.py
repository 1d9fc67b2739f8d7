"""ctxscope — the Streamlit debugger. Placeholder until the app issue lands."""

import streamlit as st

st.set_page_config(page_title="ctxscope", layout="wide")
st.title("ctxscope")
st.write("The debugger pages are being built. Use `ctxscope build` meanwhile.")
