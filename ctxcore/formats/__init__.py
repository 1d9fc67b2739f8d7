"""Formats: what other systems write, turned into traces, and traces written for others.

Readers: ``openai`` (chat requests), ``otlp`` (OpenTelemetry GenAI spans), ``transcripts``
(agent transcripts and session logs), with ``derive`` making a trace's decisions from a prompt
another system assembled, and ``load`` detecting which one a file holds. Writers: ``share``
(snapshots, OTLP, the offline HTML report). ``redact`` masks secrets on every way out.
"""
