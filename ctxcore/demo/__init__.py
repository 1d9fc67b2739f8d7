"""The demo: real agent runs from ``corpus/`` rebuilt turn by turn into the bundled traces.

Not part of the library's API: the app loads these traces on an empty store, and the tests
and benches use them as realistic input.
"""
