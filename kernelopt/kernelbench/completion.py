"""Pull the candidate program out of a raw LLM answer (used by the search loop and the reward
service, hence here below both).

Real answers wrap the program in reasoning (<think> sections), prose and several Markdown code
blocks (a CUDA snippet, a first draft, the corrected version). `extract_code` returns the block
that is a Python program defining `ModelNew`. When there is none it raises `FormatError`, whose
message is written for the model: the search loop sends it back verbatim as feedback.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from kernelopt.kernelbench import syntax
from kernelopt.kernelbench.backends import expected_format

EXPECTED_FORMAT = expected_format("cuda")  # the wording when no backend is named

# A reasoning tag, opening or closing; <think> pairs with </think> only, <thinking> with
# </thinking>. Every pattern here is matched in time linear in its input (no nested repetition,
# no search that rescans the text from each position): answers come from untrusted clients.
_TAG = re.compile(r"<(/?)(think(?:ing)?)\s*>", re.IGNORECASE)
# A closing tag left once complete sections are gone: some servers strip the opening tag.
_LONE_CLOSE = re.compile(r"</think(?:ing)?\s*>", re.IGNORECASE)
# CommonMark fence: 3+ backticks or tildes, indented at most 3 spaces, then an info string.
_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
# Lines that look like an attempt at defining ModelNew, whether or not the block parses.
_ATTEMPT = re.compile(r"^[ \t]*(?:class[ \t]+ModelNew\b|ModelNew[ \t]*(?::[^=\n]*)?=(?!=))", re.MULTILINE)
_CODE_START = ("import ", "from ")


class FormatError(ValueError):
    """The answer holds no usable candidate.

    str(exc) is an actionable message that is fed back to the LLM verbatim.
    """


@dataclass(frozen=True)
class ExtractedCode:
    code: str  # the program, stripped of fences, ending with a single newline
    language: str | None  # the fence's language tag lower-cased, None if untagged or unfenced
    notes: tuple[str, ...] = ()  # human-readable remarks on how the program was found


@dataclass(frozen=True)
class _Block:
    code: str
    language: str | None
    closed: bool


def extract_code(text: str, backend: str | None = None) -> ExtractedCode:
    """The program defining ModelNew in `text`; FormatError when there is none, whose message
    describes the format `backend` (kernelbench/backends.py) asks for."""
    expected = expected_format(backend)
    try:
        return _extract(text)
    except FormatError as exc:
        raise FormatError(str(exc).replace(EXPECTED_FORMAT, expected)) from None


def _extract(text: str) -> ExtractedCode:
    if text is None or not text.strip():
        raise FormatError(f"the answer was empty. {EXPECTED_FORMAT}")
    notes: list[str] = []
    text = _remove_reasoning(_normalise(text), notes)
    if not text.strip():
        raise FormatError("the answer held only a reasoning section (<think>...</think>) and no "
                          f"program after it. {EXPECTED_FORMAT}")
    blocks = _fenced_blocks(text)
    if blocks:
        return _choose_block(blocks, notes)
    return _unfenced(text, notes)


def _normalise(text: str) -> str:
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n")


def _remove_reasoning(text: str, notes: list[str]) -> str:
    # Reasoning often holds draft code blocks; they must not compete with the answer's.
    text, removed = _without_sections(text)
    last_lone = None
    for last_lone in _LONE_CLOSE.finditer(text):
        pass
    if last_lone is not None:
        text = text[last_lone.end():]
        removed += 1
    if removed:
        notes.append("reasoning section removed" if removed == 1 else f"{removed} reasoning sections removed")
    return text


def _without_sections(text: str) -> tuple[str, int]:
    """`text` less its complete reasoning sections, and how many there were, in one pass: a
    section opens at a tag whose kind is closed somewhere after it and ends at the first closing
    tag of its kind (an opening tag never closed is plain text, as is any tag inside a section)."""
    last_close: dict[str, int] = {}  # kind -> where its last closing tag starts
    for tag in _TAG.finditer(text):  # not kept in a list: a megabyte of tags makes many objects
        if tag[1]:
            last_close[tag[2].lower()] = tag.start()
    kept, start, removed, inside = [], 0, 0, None
    for tag in _TAG.finditer(text):
        kind = tag[2].lower()
        if inside is None:
            if not tag[1] and last_close.get(kind, -1) > tag.start():
                kept.append(text[start:tag.start()])
                inside = kind
        elif tag[1] and kind == inside:
            start, inside, removed = tag.end(), None, removed + 1
    kept.append(text[start:])
    return "".join(kept), removed


def _fenced_blocks(text: str) -> list[_Block]:
    """Fenced blocks in order. Sequential on purpose: inside an open block only a matching
    closing fence ends it, so a ```cpp fence inside a ````python block stays content."""
    blocks: list[_Block] = []
    opening = None  # (indent, fence, language) of the block being read
    body: list[str] = []
    for line in text.split("\n"):
        match = _FENCE.match(line)
        if opening is None:
            # A backtick fence's info string cannot hold backticks: "```x```" is inline code.
            if match and not (match[2][0] == "`" and "`" in match[3]):
                opening, body = (len(match[1]), match[2], _language(match[3])), []
        elif match and _closes(match, opening[1]):
            blocks.append(_Block(_dedent(body, opening[0]), opening[2], closed=True))
            opening = None
        else:
            body.append(line)
    if opening is not None:  # the answer was cut off, or the model forgot the fence
        blocks.append(_Block(_dedent(body, opening[0]), opening[2], closed=False))
    return blocks


def _closes(match: re.Match, fence: str) -> bool:
    return match[2][0] == fence[0] and len(match[2]) >= len(fence) and not match[3].strip()


def _language(info: str) -> str | None:
    words = info.split()  # 'python title="x.py"' -> "python"
    return words[0].lower() if words else None


def _dedent(lines: list[str], indent: int) -> str:
    # An indented fence indents its content as well; undo at most that many spaces.
    return _clean("\n".join(line[min(indent, len(line) - len(line.lstrip(" "))):] for line in lines))


def _clean(code: str) -> str:
    """No leading blank lines, a single final newline."""
    return re.sub(r"\A(?:[ \t]*\n)+", "", code).rstrip() + "\n"


def _choose_block(blocks: list[_Block], notes: list[str]) -> ExtractedCode:
    defining = [i for i, block in enumerate(blocks) if _defines_model_new(block.code)]
    if not defining:
        raise _no_defining_block(blocks)
    # The last one: models restate a corrected version after a first attempt.
    index = defining[-1]
    block = blocks[index]
    if len(blocks) > 1:
        notes.append(f"picked block {index + 1} of {len(blocks)}")
    if not block.closed:
        notes.append("closing fence missing")
    return ExtractedCode(block.code, block.language, tuple(notes))


def _no_defining_block(blocks: list[_Block]) -> FormatError:
    attempts = [block for block in blocks if _ATTEMPT.search(block.code)]
    if not attempts:
        count = f"{len(blocks)} code block" + ("s" if len(blocks) != 1 else "")
        return FormatError(f"the answer has {count} but none defines `class ModelNew`. {EXPECTED_FORMAT}")
    block = attempts[-1]
    error = _syntax_error(block.code)
    if error is None:
        return FormatError("the code block mentioning ModelNew does not define it at the top level of the "
                           "module (it is inside an if, try, function or class); define class ModelNew "
                           f"at the top level. {EXPECTED_FORMAT}")
    cut_off = "" if block.closed else " (its closing fence is missing: was the answer cut off?)"
    return FormatError(f"the code block defining ModelNew does not parse: {_describe(error)}{cut_off}. "
                       f"Fix it and return the complete program. {EXPECTED_FORMAT}")


def _unfenced(text: str, notes: list[str]) -> ExtractedCode:
    lines = _clean(text).split("\n")
    # Longest first: the whole text, then from each import line on (prose before the code), up
    # to the last line that could define ModelNew at the top level. Each try parses its suffix,
    # so the tries are bounded: a run of one-line imports that failed past its end fails the
    # same way from any of its later lines (skipped), and all tries together parse at most the
    # text twice plus _UNFENCED_SLACK characters, which keeps hostile answers (thousands of
    # import lines) linear in time.
    last = _last_top_level_attempt(lines)
    if last is None:
        raise _no_unfenced_program()
    starts = [0] + [i for i, line in enumerate(lines[:last + 1]) if i and line.startswith(_CODE_START)]
    budget = 2 * len(text) + _UNFENCED_SLACK
    skip_to = 0  # starts before this line fail as the last try did
    for start in starts:
        if start < skip_to:
            continue
        code = _clean("\n".join(lines[start:]))
        budget -= len(code)
        if budget < 0:
            break
        tree = _parse(code)
        if isinstance(tree, ast.Module) and any(_binds_model_new(node) for node in tree.body):
            dropped = (f"text before line {start + 1} dropped",) if start else ()
            return ExtractedCode(code, None, (*notes, "answer was not fenced", *dropped))
        skip_to = _simple_run_end(lines, start, _failed_line(tree, lines, start))
    raise _no_unfenced_program()


_UNFENCED_SLACK = 256 << 10
# A one-line import: nothing in it can continue a statement onto the next line.
_SIMPLE_IMPORT = re.compile(r"(?:import|from)[ \t][^()\[\]{}\\'\";]*")


def _no_unfenced_program() -> FormatError:
    return FormatError("the answer has no fenced code block, and no complete Python program defining "
                       f"class ModelNew was found in it. {EXPECTED_FORMAT}")


def _last_top_level_attempt(lines: list[str]) -> int | None:
    for index in range(len(lines) - 1, -1, -1):
        # A top-level statement binding ModelNew has a line that names it and is not indented.
        if "ModelNew" in lines[index] and lines[index][:1] not in (" ", "\t"):
            return index
    return None


def _failed_line(tree, lines: list[str], start: int) -> int:
    """The index in `lines` of the line where parsing lines[start:] failed (past the end when it
    parsed, without a ModelNew); the lines _clean dropped before the code are counted."""
    if isinstance(tree, ast.Module):
        return len(lines)
    first = start
    while first < len(lines) and not lines[first].strip(" \t"):
        first += 1
    return first + max(1, tree.lineno or 1) - 1


def _simple_run_end(lines: list[str], start: int, failed: int) -> int:
    """The first line a later try may start at: dropping one-line imports that come before the
    failed line leaves the rest to parse exactly as before, so starts up to the first line after
    `start` that is not one (or up to the failed line) would fail the same way."""
    end = start
    while end < failed and _SIMPLE_IMPORT.fullmatch(lines[end]):
        end += 1
    return end + 1


def _parse(code: str) -> ast.Module | SyntaxError:
    try:
        return syntax.parse(code)
    except SyntaxError as exc:
        return exc
    except (ValueError, RecursionError) as exc:  # null bytes, absurd nesting
        return SyntaxError(str(exc) or type(exc).__name__)


def _syntax_error(code: str) -> SyntaxError | None:
    result = _parse(code)
    return result if isinstance(result, SyntaxError) else None


def _defines_model_new(code: str) -> bool:
    if "ModelNew" not in code:  # no parse needed (an answer may hold thousands of empty blocks)
        return False
    tree = _parse(code)
    return isinstance(tree, ast.Module) and any(_binds_model_new(node) for node in tree.body)


def _binds_model_new(node: ast.stmt) -> bool:
    if isinstance(node, ast.ClassDef):
        return node.name == "ModelNew"
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        targets = [node.target]
    else:
        return False
    return any(isinstance(target, ast.Name) and target.id == "ModelNew" for target in targets)


def _describe(error: SyntaxError) -> str:
    where = f"line {error.lineno}: " if error.lineno else ""
    source = (error.text or "").strip()
    return where + error.msg + (f" (at `{source}`)" if source else "")
