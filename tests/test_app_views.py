"""The app's pure view helpers (ui/views.py): prompt marks, flips, permalinks, escaping."""

from __future__ import annotations

import re

import app_support as data
import pytest

from ctxcore.errors import InputError
from ctxcore.loading import config_from_obj
from ctxcore.models import Config
from ctxcore.pipeline import build, resolve_config
from ui import views


@pytest.fixture(scope="module")
def trace():
    return data.session("views", 2, first=24)[1]


def test_prompt_segments_follow_partition_headers(trace) -> None:
    prompt = trace.result.prompt
    segs = views.prompt_segments(prompt)
    names = [s.partition for s in segs]
    rendered = [p.name for p in trace.result.partitions if p.items or p.name in ("[Task]",)]
    assert set(rendered) <= set(names)
    # the segments are the prompt, cut at the headers, nothing lost or added
    assert "\n".join(s.text for s in segs).replace("\n", "") == prompt.replace("\n", "")
    for s in segs:
        assert prompt.split("\n")[s.start_line - 1].strip() in (s.partition, "")


def test_marked_prompt_shows_cut_points(trace) -> None:
    small = build(
        trace.input,
        trace.config.model_copy(
            update={"max_tokens": 5000, "output_reserve": 600, "safety_margin": 100}
        ),
    )
    cut_lines = [i for i, ln in enumerate(small.prompt.split("\n"), 1) if "[… " in ln]
    assert cut_lines, "a 5k budget must make the ctxscope preset cut or summarize something"
    marked = views.marked_prompt(small.prompt)
    for n in cut_lines:
        assert f"cut/summary above (line {n})" in marked
    assert marked.count("──────── [") == len(views.prompt_segments(small.prompt))


def test_flipped_lists_exactly_the_changed_packets(trace) -> None:
    variant = build(trace.input, trace.config.model_copy(update={"min_relevance": 0.6}))
    frame = views.flipped(trace.result, variant)
    before = {d.packet_id: d for d in trace.result.decisions}
    after = {d.packet_id: d for d in variant.decisions}
    changed = {
        p
        for p in after
        if p in before
        and (before[p].status, before[p].tokens_after, before[p].rank)
        != (after[p].status, after[p].tokens_after, after[p].rank)
    }
    changed |= set(before) ^ set(after)
    assert set(frame["packet_id"]) == changed
    assert views.flipped(trace.result, trace.result).empty


def test_config_params_round_trip(trace) -> None:
    cfg = trace.config.model_copy(
        update={"fill": "optimal", "min_relevance": 0.125, "degrade": ["noise", "history"]}
    )
    params = views.config_to_params(cfg)
    assert all(isinstance(v, str) for v in params.values())
    back = config_from_obj(views.params_to_config_dict(params))
    assert back == cfg
    assert resolve_config(back, trace.input) == resolve_config(cfg, trace.input)


def test_bad_link_parameter_names_itself() -> None:
    with pytest.raises(InputError, match=r"enable_compression='maybe'"):
        views.params_to_config_dict({"enable_compression": "maybe"})
    with pytest.raises(InputError, match=r"pb_task='x'"):
        views.params_to_config_dict({"pb_task": "x"})
    # page parameters are not config
    assert views.params_to_config_dict({"trace": "t1", "session": "s"}) == {}
    assert Config.model_validate(views.params_to_config_dict({"preset": "hello-agents"}))


@pytest.mark.parametrize(
    "text",
    [
        data.EVIL,
        data.EVIL_IMG,
        data.EVIL_LINK,
        ":red[big] :material/home: **bold** `x`",
        "![img](http://x/a.png) <b>&amp;</b>",
    ],
)
def test_md_escapes_markdown_and_html(text: str) -> None:
    out = views.md(text)
    # every character that could start a link, image, tag, entity, emphasis, code span or a
    # Streamlit directive (:red[...], :material/...:) is backslash-escaped
    for i, ch in enumerate(out):
        if ch in "<>[]()!:*`&_#|~$" and (i == 0 or out[i - 1] != "\\"):
            raise AssertionError(f"unescaped {ch!r} at {i} in {out!r}")
    assert re.sub(r"\\(.)", r"\1", out) == text  # what is shown is the original text


def test_start_up_warm_up_runs_the_real_figures() -> None:
    """The background warm-up (ui.state) swallows its errors so it can never take the app
    down; run its body directly so a broken warm-up fails here instead of going quiet."""
    from ctxcore import tokens
    from ui import state

    state._warm_figures()
    assert {"cl100k_base", "o200k_base"} <= set(tokens._encodings)
