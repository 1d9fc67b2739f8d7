"""Formats: what other systems write, turned into traces, and traces written for others.

Readers: the import formats are the table in ``registry`` (each format's detector, reader
and, for an API the proxy records, its live converter); the request APIs share the skeleton
in ``request`` and the normalised messages of ``norm``; ``derive`` makes a trace's decisions
from a prompt another system assembled, and ``load`` reads a file with the format the table
detects. ``transcripts`` reads the corpus's agent transcripts. Writers: ``share`` (snapshots,
OTLP, the offline HTML report). ``redact`` masks secrets on every way out.
"""
