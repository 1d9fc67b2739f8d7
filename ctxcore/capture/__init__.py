"""Capture: getting builds out of a running agent and into trace files.

``Recorder`` builds through ctxcore (or records another builder's build) and appends each
trace to the watched folder; ``hello_agents`` wraps a real hello-agents ``ContextBuilder``.
"""

from ctxcore.capture.recorder import Recorder, RecorderWarning

__all__ = ["Recorder", "RecorderWarning"]
