"""The Streamlit side of ctxscope: state/caching (``state``), pure view data (``views``)
and shared rendering pieces (``widgets``). ctxcore never imports this package."""
