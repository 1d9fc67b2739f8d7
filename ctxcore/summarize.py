"""Deterministic, extractive summarizers: the rungs of the degradation ladder.

When a packet does not fit, the ``ctxscope`` preset shortens it before dropping it
(docs/design.md, "Degradation ladder"). Each summarizer here keeps the lines an engineer
would look for and nothing it made up:

- history → a structured summary (range covered, user constraints, completed, open issues,
  decisions, evidence ids);
- tool logs → failing tests, error lines, ``file:line`` references, the first and last lines;
  repeated lines collapsed into one with a count; ANSI codes, carriage-return and backspace
  spinners removed;
- files → an outline (definitions, headings) plus the lines around referenced symbols;
- repo maps (aider ``--show-repo`` style) → the file tree plus the outlines of entry files.

A summarizer is any ``Summarizer`` callable ``(kind, content, target_tokens) -> str`` (see
``ctxcore.pipeline.common``), so a user can plug in an LLM. ``target_tokens`` is a size hint;
the preset counts the result with the real tokenizer and cuts it (with a marker) if it is
still too long. Results are memoised by (kind, content, target, symbols), so a re-run with
the same input summarises nothing again.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_ERROR = re.compile(
    r"(?i)\b(error|errors|exception|traceback|failed|failure|fail|fatal|panic|assert\w*|"
    r"denied|not found|cannot|can't|unable|segfault|timeout|timed out|e403|err!)\b"
    r"|^E\s{2,}|✕|✗|●|错误|失败|异常"
)
_FAILING_TEST = re.compile(
    r"^(FAILED|ERROR)\s+\S+::\S+|^\s*(✕|✗|×)\s+\S|^\s*●\s+\S|^FAIL\s+\S|"
    r"^_{3,} (ERROR at setup of |)\S+ _{3,}$"
)
_FILE_LINE = re.compile(
    r"[\w./\\-]+\.[A-Za-z0-9]{1,5}(?::\d+(?::\d+)?|\(\d+(?:,\d+)?\)|, line \d+)"
)
_DEF = re.compile(
    r"^\s*(?:async\s+)?(?:def|class|function|interface|type|enum|struct|impl|fn|func|"
    r"export\s+(?:default\s+)?(?:async\s+)?(?:function|class|const|interface|type)|"
    r"(?:public|private|protected|static)\s+[\w<>\[\]]+\s+\w+\s*\()\b|^#{1,6}\s+\S"
)

#: lines that are evidence of an error, stricter than ``_ERROR`` (which also keeps "not
#: found" and "cannot" lines in a summary): failing tests, tracebacks and their frames,
#: exceptions, compiler and linker errors, npm/jest failures
_ERROR_EVIDENCE = re.compile(
    r"^(?:FAILED|ERROR)\s+\S+::\S+|^\s*(?:✕|✗|×)\s+\S|^\s*●\s+\S|^FAIL\s+\S"
    r"|^_{3,} (?:ERROR at setup of |)\S+ _{3,}$"
    r"|Traceback \(most recent call last\)|^\s*File \"[^\"]+\", line \d+"
    r"|^\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Failure)\b(?::|$)"
    r"|^E\s{2,}\S|\berror(?:\[E\d+\]| TS\d+)?:|^npm ERR!|^\s*\d+ (?:failed|errors?)\b"
    r"|^=+ .*\b\d+ (?:failed|errors?)\b.* =+$|\bAssertionError\b|\bpanicked at\b",
    re.MULTILINE,
)


def error_evidence(text: str, low: str | None = None) -> list[str]:
    """The lines of ``text`` that show an error: a failing test, a traceback or one of its
    frames, an exception, a compiler error (the pipeline's ``error`` signal and the
    ``error_evidence_lost`` detector both read these). Memoised by text; ``low`` is
    ``text.lower()`` when the caller has it."""
    if not text:
        return []
    hit = _ERROR_MEMO.get(text)
    if hit is not None:
        return list(hit)
    if low is None:
        low = text.lower()
    # the regex runs only on lines holding a hint word (found with str.find, in C): a
    # many-branched pattern tried at every position of a 100 kB log costs milliseconds
    starts: set[int] = set()
    if len(low) == len(text):
        for hint in _ERROR_HINTS:
            i = low.find(hint)
            while i >= 0:
                starts.add(low.rfind("\n", 0, i) + 1)
                i = low.find(hint, i + len(hint))
    else:  # lower-casing changed offsets (rare characters): scan every line
        pos = 0
        for line in text.split("\n"):
            starts.add(pos)
            pos += len(line) + 1
    out: list[str] = []
    for start in sorted(starts):
        end = text.find("\n", start)
        line = text[start : end if end >= 0 else len(text)]
        if _is_evidence(line):
            out.append(line.strip())
    global _ERROR_MEMO_CHARS
    with _ERROR_LOCK:
        if len(_ERROR_MEMO) >= 20_000 or _ERROR_MEMO_CHARS + len(text) > MEMO_MAX_CHARS:
            _ERROR_MEMO.clear()
            _ERROR_MEMO_CHARS = 0
        _ERROR_MEMO[text] = tuple(out)
        _ERROR_MEMO_CHARS += len(text)
    return out


#: ``_ERROR_EVIDENCE`` on one line, taken apart for speed (the same lines, tested on the
#: corpus and on random lines): the branches anchored at the line's start are tried there
#: only, the four that match anywhere behind a substring test
_EVIDENCE_AT_START = re.compile(
    r"(?:FAILED|ERROR)\s+\S+::\S+|\s*(?:✕|✗|×)\s+\S|\s*●\s+\S|FAIL\s+\S"
    r"|_{3,} (?:ERROR at setup of |)\S+ _{3,}$|\s*File \"[^\"]+\", line \d+"
    r"|\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Failure)\b(?::|$)"
    r"|E\s{2,}\S|npm ERR!|\s*\d+ (?:failed|errors?)\b|=+ .*\b\d+ (?:failed|errors?)\b.* =+$"
)
_EVIDENCE_ERROR = re.compile(r"\berror(?:\[E\d+\]| TS\d+)?:")
_EVIDENCE_WORD = re.compile(r"\b(?:AssertionError|panicked at)\b")


def _is_evidence(line: str) -> bool:
    """``_ERROR_EVIDENCE.search(line)`` for a line (no newline in it)."""
    return bool(
        _EVIDENCE_AT_START.match(line)
        or "Traceback (most recent call last)" in line
        or ("error" in line and _EVIDENCE_ERROR.search(line))
        or (("AssertionError" in line or "panicked at" in line) and _EVIDENCE_WORD.search(line))
    )


_ERROR_HINTS = (
    "fail",
    "error",
    "err!",
    "traceback",
    "exception",
    'file "',
    "✕",
    "✗",
    "×",
    "●",
    "panicked",
    "e  ",
)
#: The memos here are keyed by the texts themselves, so each is bounded by the characters its
#: keys hold as well as by entries (a long session log's import brings new texts call after
#: call: bounded by entries alone, 20,000 histories held most of the log).
MEMO_MAX_CHARS = 8_000_000
_ERROR_MEMO: dict[str, tuple[str, ...]] = {}
_ERROR_MEMO_CHARS = 0
_ERROR_LOCK = threading.Lock()

#: rough characters per token while choosing lines (the real count is done by the caller)
_CHARS_PER_TOKEN = 3.2


def clean_terminal(text: str) -> str:
    """Strip ANSI escapes, and render carriage-return and backspace spinners as shown."""
    text = _ANSI.sub("", text)
    text = text.replace("\r\n", "\n")
    lines: list[str] = []
    for line in text.split("\n"):
        if "\r" in line:
            parts = [p for p in line.split("\r") if p.strip()]
            line = parts[-1] if parts else ""
        if "\b" in line:
            buf: list[str] = []
            for ch in line:
                if ch == "\b":
                    if buf:
                        buf.pop()
                else:
                    buf.append(ch)
            line = "".join(buf)
        lines.append(line.rstrip())
    return "\n".join(lines)


def collapse_repeats(lines: list[str]) -> list[tuple[str, int]]:
    """Runs of identical lines become (line, count)."""
    out: list[tuple[str, int]] = []
    for line in lines:
        if out and out[-1][0] == line:
            out[-1] = (line, out[-1][1] + 1)
        else:
            out.append((line, 1))
    return out


def _budget_chars(target_tokens: int) -> int:
    return max(80, int(target_tokens * _CHARS_PER_TOKEN))


def _clip(line: str, n: int = 240) -> str:
    return line if len(line) <= n else line[: n - 1] + "…"


def summarize_tool_log(content: str, target_tokens: int) -> str:
    """Failing tests, error lines, file:line refs, first/last lines; repeats collapsed."""
    runs = collapse_repeats(clean_terminal(content).split("\n"))
    n = len(runs)
    total_lines = sum(c for _, c in runs)
    # priority 0 = must show, higher = nice to have
    prio: dict[int, int] = {}
    for i, (line, count) in enumerate(runs):
        if not line.strip():
            continue
        if _FAILING_TEST.search(line):
            prio[i] = 0
        elif _ERROR.search(line):
            prio[i] = 1
        elif _FILE_LINE.search(line):
            prio[i] = 2
        elif count > 2:
            prio[i] = 3
    for i in list(range(min(3, n))) + list(range(max(0, n - 3), n)):
        if runs[i][0].strip():
            prio[i] = min(prio.get(i, 4), 1)
    budget = _budget_chars(target_tokens)
    chosen: set[int] = set()
    used = 0
    seen_text: dict[str, int] = {}
    for i in sorted(prio, key=lambda k: (prio[k], k)):
        line = _clip(runs[i][0])
        key = re.sub(r"\d+", "#", line)
        if prio[i] >= 1 and key in seen_text and len(seen_text) > 8:
            continue  # the 40th "error TS1005" in another file adds little
        cost = len(line) + 12
        if used + cost > budget and chosen:
            continue
        chosen.add(i)
        seen_text[key] = i
        used += cost
    out: list[str] = [f"[tool log summary: {total_lines} lines, {len(chosen)} kept]"]
    last = -1
    for i in sorted(chosen):
        if i > last + 1:
            skipped = sum(c for _, c in runs[last + 1 : i])
            out.append(f"… {skipped} line{'s' if skipped != 1 else ''} omitted …")
        line, count = runs[i]
        out.append(_clip(line) + (f"  [× {count}]" if count > 1 else ""))
        last = i
    if last < n - 1:
        skipped = sum(c for _, c in runs[last + 1 :])
        if skipped:
            out.append(f"… {skipped} line{'s' if skipped != 1 else ''} omitted …")
    return "\n".join(out)


def summarize_file(content: str, target_tokens: int, symbols: Iterable[str] = ()) -> str:
    """An outline (definitions, headings, with line numbers) plus lines around symbols."""
    lines = content.split("\n")
    syms = [s for s in symbols if len(s) >= 3]
    sym_re = (
        re.compile(r"\b(" + "|".join(re.escape(s) for s in syms) + r")\b", re.IGNORECASE)
        if syms
        else None
    )
    around: set[int] = set()
    if sym_re is not None:
        for i, line in enumerate(lines):
            if sym_re.search(line):
                around.update(range(max(0, i - 2), min(len(lines), i + 3)))
    outline = [i for i, line in enumerate(lines) if _DEF.search(line)]
    budget = _budget_chars(target_tokens)
    chosen: set[int] = set()
    used = 0
    for i in sorted(around) + outline:
        if i in chosen:
            continue
        cost = len(_clip(lines[i])) + 8
        if used + cost > budget and chosen:
            break
        chosen.add(i)
        used += cost
    if not chosen:
        chosen = set(range(min(len(lines), 5)))
    out = [f"[file outline: {len(lines)} lines, {len(chosen)} shown]"]
    last = -1
    for i in sorted(chosen):
        if i > last + 1:
            out.append("⋮")
        out.append(f"{i + 1:>5}│{_clip(lines[i])}")
        last = i
    if last < len(lines) - 1:
        out.append("⋮")
    return "\n".join(out)


_REPO_PATH = re.compile(r"^([\w.\-]+(?:/[\w.\-]+)*\.?\w*):?\s*$")
_ENTRY = re.compile(r"(?:^|/)(?:__main__|main|cli|app|index|server|setup|manage|run)\.\w+$")


def _repo_files(content: str) -> tuple[list[str], dict[str, list[str]]]:
    """A repo map's file paths (first-seen order) and, per path, its outline lines (those
    that define something)."""
    files: list[str] = []
    body: dict[str, list[str]] = {}
    current: str | None = None
    for line in content.split("\n"):
        m = _REPO_PATH.match(line)
        if m and ("/" in m.group(1) or "." in m.group(1)) and not line.startswith(("│", "⋮")):
            current = m.group(1)
            if current not in body:
                files.append(current)
                body[current] = []
        elif current is not None and line.startswith("│") and _DEF.search(line[1:]):
            body[current].append(line)
    return files, body


def summarize_repo_map(content: str, target_tokens: int, symbols: Iterable[str] = ()) -> str:
    """The file tree (paths grouped by folder) plus the outline lines of entry files."""
    files, body = _repo_files(content)
    syms = {s.lower() for s in symbols if len(s) >= 3}
    tree: dict[str, list[str]] = {}
    for f in files:
        folder, _, name = f.rpartition("/")
        tree.setdefault(folder or ".", []).append(name)
    out = [f"[repo map: {len(files)} files]"]
    budget = _budget_chars(target_tokens)
    full = [f"{folder}/: " + ", ".join(tree[folder]) for folder in sorted(tree)]
    if sum(len(x) + 1 for x in full) > budget * 0.6:
        # too long to list every name: folders with their file counts
        full = [f"{folder}/ ({len(tree[folder])} files)" for folder in sorted(tree)]
    out.extend(full)
    used = sum(len(x) + 1 for x in out)
    entries = [f for f in files if _ENTRY.search(f) or any(s in f.lower() for s in syms)]
    for f in entries:
        block = [f"{f}:"] + body[f][:12]
        cost = sum(len(x) + 1 for x in block)
        if used + cost > budget:
            break
        out.extend(block)
        used += cost
    return "\n".join(out)


_HIST_MSG = re.compile(r"^\[(builder:history:\d+)\] (\w+): ", re.MULTILINE)
_CONSTRAINT = re.compile(
    r"(?i)\b(must|must not|don't|do not|never|always|only|should|shouldn't|avoid|keep|"
    r"make sure|without)\b|不要|必须|请勿|务必|保持|禁止|只能|不能"
)
_DONE = re.compile(
    r"(?i)\b(done|fixed|passed|passes|completed|created|added|updated|resolved|works|"
    r"succeeded|implemented)\b|已完成|完成了|成功|已修复|通过"
)
_OPEN = re.compile(r"(?i)\b(error|fail\w*|todo|still|issue|bug|broken|pending)\b|问题|失败|错误|待")
_DECISION = re.compile(
    r"(?i)\b(decided|decide|will|let's|let us|plan|instead|going to|use|switch)\b"
    r"|决定|改为|采用|计划"
)
_EXTENSIONS = r"\.(?:py|ts|tsx|js|json|md|rs|go|java|toml|yaml|yml|txt|log|cfg)"
_EVIDENCE = re.compile(
    rf"(?:[\w.\-]+/)*[\w\-]+{_EXTENSIONS}(?::\d+)?|\b(?:tool|file|note|call)[:_][\w\-./]+"
)
#: a file id holds a dot and one of the extensions: runs without one need no full match
_HAS_EXTENSION = re.compile(_EXTENSIONS)


#: the runs of characters an evidence id can be made of (every character either of
#: ``_EVIDENCE``'s alternatives can match is in this class)
_EVIDENCE_RUN = re.compile(r"[\w.\-/:]+")


def evidence_ids(text: str) -> list[str]:
    """``_EVIDENCE.findall(text)``, in linear time.

    An evidence id never spans two runs of ``_EVIDENCE_RUN`` characters, and the ``\b``
    before ``tool:``/``file:`` sees the same thing at the start of a run as in the text
    (the character before a run is not a word character), so the ids of the text are those
    of its runs in order. Scanning run by run, and only runs that hold an extension or one
    of the prefixes, keeps ``_EVIDENCE``'s backtracking inside short strings: on the whole text a
    long line of dashes made it quadratic (a test checks both agree on the corpus)."""
    out: list[str] = []
    for run in _EVIDENCE_RUN.findall(text):
        if (
            "tool" in run
            or "file" in run
            or "note" in run
            or "call" in run
            or ("." in run and _HAS_EXTENSION.search(run))
        ):
            out.extend(_EVIDENCE.findall(run))
    return out


def _sentences(text: str) -> list[str]:
    out: list[str] = []
    for line in clean_terminal(text).split("\n"):
        line = line.strip()
        if 8 <= len(line):
            out.extend(s.strip() for s in re.split(r"(?<=[.!?。！？])\s+", line) if s.strip())
    return out


@functools.lru_cache(maxsize=16)
def _history_notes(
    content: str,
) -> tuple[tuple[tuple[str, str, str], ...], dict[str, tuple[str, ...]], tuple[str, ...]]:
    """What a history summary is made from, whatever its size: the messages, the sentences
    filed under each section, and the evidence ids (memoised: ``prefetch`` makes it while
    tokens are being counted, the build then only picks lines)."""
    parts = _HIST_MSG.split(content)
    msgs: list[tuple[str, str, str]] = []
    for i in range(1, len(parts) - 1, 3):
        msgs.append((parts[i], parts[i + 1], parts[i + 2]))
    if not msgs:
        msgs = [("?", "unknown", content)]
    sections: dict[str, list[str]] = {
        "User constraints": [],
        "Completed": [],
        "Open issues": [],
        "Decisions": [],
    }
    evidence: dict[str, None] = {}
    for mid, role, text in msgs:
        for ev in evidence_ids(text):
            evidence.setdefault(ev, None)
        for s in _sentences(text):
            if role == "user" and _CONSTRAINT.search(s):
                sections["User constraints"].append(f"{_clip(s, 200)} ({mid})")
            elif role != "user" and _DONE.search(s):
                sections["Completed"].append(f"{_clip(s, 160)} ({mid})")
            elif _OPEN.search(s):
                sections["Open issues"].append(f"{_clip(s, 160)} ({mid})")
            elif role == "assistant" and _DECISION.search(s):
                sections["Decisions"].append(f"{_clip(s, 160)} ({mid})")
    return (
        tuple(msgs),
        {name: tuple(items) for name, items in sections.items()},
        tuple(evidence),
    )


def summarize_history(content: str, target_tokens: int) -> str:
    """A structured summary of messages rendered as ``[builder:history:K] role: text``."""
    msgs, sections, evidence = _history_notes(content)
    budget = _budget_chars(target_tokens)
    head = f"Range covered: {msgs[0][0]} … {msgs[-1][0]} ({len(msgs)} messages)"
    out = [head]
    used = len(head)
    # constraints first: they are what a summary must never lose
    per = max(2, budget // 5 // 120)
    for name, items in sections.items():
        uniq = list(dict.fromkeys(items))
        keep = uniq if name == "User constraints" else uniq[-per:]
        out.append(f"{name}:" + ("" if keep else " none found"))
        for item in keep:
            if used + len(item) > budget and name != "User constraints":
                break
            out.append(f"- {item}")
            used += len(item) + 3
    ev = list(evidence)[:40]
    out.append("Evidence ids: " + (", ".join(ev) if ev else "none"))
    return "\n".join(out)


def summarize_generic(content: str, target_tokens: int) -> str:
    """Head and tail lines (for kinds without a dedicated summarizer)."""
    lines = clean_terminal(content).split("\n")
    budget = _budget_chars(target_tokens)
    head: list[str] = []
    tail: list[str] = []
    used = 0
    i, j = 0, len(lines) - 1
    while i <= j:
        line = _clip(lines[i])
        if used + len(line) > budget * 0.6 and head:
            break
        head.append(line)
        used += len(line) + 1
        i += 1
    while j >= i:
        line = _clip(lines[j])
        if used + len(line) > budget and tail:
            break
        tail.insert(0, line)
        used += len(line) + 1
        j -= 1
    mid = [f"… {j - i + 1} lines omitted …"] if j >= i else []
    return "\n".join(head + mid + tail)


TOOL_KINDS = frozenset({"tool_result", "tool", "log", "observation", "tool_output"})
FILE_KINDS = frozenset({"file", "code", "source"})
REPO_MAP_KINDS = frozenset({"repo_map", "repomap"})
HISTORY_KINDS = frozenset({"history", "conversation_history"})


@dataclass
class ExtractiveSummarizer:
    """The default summarizer: dispatches on kind, memoised by (kind, content, target).

    ``symbols`` (usually the query's terms) steer which lines of files and repo maps are
    kept; they are part of the memo key.
    """

    symbols: tuple[str, ...] = ()
    max_entries: int = 20_000
    #: characters of content the memo's keys may hold (see ``MEMO_MAX_CHARS``)
    max_chars: int = 2_000_000
    _memo: dict[tuple[str, str, int], str] = field(default_factory=dict)
    _chars: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    calls: int = 0

    def prefetch(self, kind: str, content: str) -> None:
        """Do now the part of summarizing ``content`` that does not depend on the target
        size (the ``ctxscope`` preset calls it for the old history while tokens are
        being counted on other threads)."""
        if kind.lower() in HISTORY_KINDS:
            _history_notes(content)

    def __call__(self, kind: str, content: str, target_tokens: int) -> str:
        key = (kind, content, target_tokens)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        self.calls += 1
        k = kind.lower()
        if k in HISTORY_KINDS:
            out = summarize_history(content, target_tokens)
        elif k in TOOL_KINDS:
            out = summarize_tool_log(content, target_tokens)
        elif k in FILE_KINDS:
            out = summarize_file(content, target_tokens, self.symbols)
        elif k in REPO_MAP_KINDS:
            out = summarize_repo_map(content, target_tokens, self.symbols)
        else:
            out = summarize_generic(content, target_tokens)
        with self._lock:
            if len(self._memo) >= self.max_entries or self._chars + len(content) > self.max_chars:
                self._memo.clear()
                self._chars = 0
            self._memo[key] = out
            self._chars += len(content)
        return out


_shared: dict[tuple[str, ...], ExtractiveSummarizer] = {}
_shared_lock = threading.Lock()


def default_summarizer(symbols: Iterable[str] = ()) -> ExtractiveSummarizer:
    """The process-wide memoised summarizer for a set of symbols (cheap re-runs)."""
    key = tuple(sorted(set(symbols)))
    s = _shared.get(key)
    if s is None:
        with _shared_lock:
            s = _shared.setdefault(key, ExtractiveSummarizer(symbols=key))
            if len(_shared) > 64:
                _shared.clear()
                _shared[key] = s
    return s


#: a sentence that reads as a user's constraint (``constraint_sentences``; the
#: ``must_have_lost`` detector and the compaction ledger read them)
_USER_CONSTRAINT = re.compile(
    r"\b(?:must|mustn't|never|always|do not|don't|make sure|ensure|avoid|should not|"
    r"shouldn't|not allowed|no more than|at most|at least|only)\b"
    r"|不要|不能|必须|务必|禁止|只能|一定要|不得|不允许|避免|请勿|别再",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|[。！？\n]+")


def constraint_sentences(text: str) -> list[str]:
    """Sentences of a user message that read as constraints ("never touch tests/")."""
    out = []
    for sent in _SENTENCE_END.split(text):
        s = sent.strip(" \t-*>#")
        if 8 <= len(s) <= 300 and _USER_CONSTRAINT.search(s):
            out.append(s)
    return out


#: a file path or a test name a step may name (the recall measure, ``targets_of``)
_USED_PATH = re.compile(
    r"(?<![\w/.-])(?:[\w.-]+/)*[\w-]+\.(?:py|pyi|ts|tsx|js|jsx|json|md|rst|rs|go|java|toml|"
    r"yaml|yml|cfg|ini|sh|txt)\b"
)
_USED_TEST = re.compile(r"\b[\w/.-]+\.py::[\w\[\]:.-]+|\btest_\w{3,}")


def targets_of(step: str, before: str) -> list[str]:
    """What a step used that was already in its input: paths and test names it names, and
    error lines of the input (at least 12 characters) it quotes."""
    low_before = before.lower()
    found: dict[str, None] = {}
    for pat in (_USED_PATH, _USED_TEST):
        for m in pat.findall(step):
            t = m.strip().lower()
            if len(t) >= 5 and t in low_before:
                found.setdefault(t, None)
    low_step = step.lower()
    for line in error_evidence(before):
        t = line.strip().lower()
        if len(t) >= 12 and t in low_step:
            found.setdefault(t[:200], None)
    return list(found)


__all__ = [
    "ExtractiveSummarizer",
    "clean_terminal",
    "collapse_repeats",
    "constraint_sentences",
    "default_summarizer",
    "error_evidence",
    "summarize_file",
    "summarize_generic",
    "summarize_history",
    "summarize_repo_map",
    "summarize_tool_log",
    "targets_of",
]
