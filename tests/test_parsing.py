"""extract_code: finding the ModelNew program in raw LLM answers."""

from __future__ import annotations

import dataclasses
import random

import pytest

from kernelopt.kernelbench.completion import ExtractedCode, FormatError, extract_code

PROGRAM = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
"""

cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

relu = load_inline(name="relu", cpp_sources=cpp_source, cuda_sources=cuda_source,
                   functions=["relu_cuda"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu.relu_cuda(x)
'''

# A second, different program: tab-indented, ModelNew bound by assignment.
ALIAS_PROGRAM = "import torch.nn as nn\n\n\nclass Fast(nn.Module):\n\tdef forward(self, x):\n\t\treturn x\n\n\nModelNew = Fast\n"

# The program embeds a Markdown fence in a string, so only a longer outer fence can hold it.
NESTED_PROGRAM = '''import torch.nn as nn

NOTES = """
Kernel used:
```cpp
__global__ void k() {}
```
"""


class ModelNew(nn.Module):
    def forward(self, x):
        return x
'''

REFERENCE = "import torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\n"
CPP = '__global__ void relu_kernel(const float* x, float* y, int n) {\n    y[0] = x[0];\n}\n'


def fenced(code: str, info: str = "python", fence: str = "```") -> str:
    return f"{fence}{info}\n{code}{fence}\n"


def format_error(text) -> str:
    """The FormatError message for `text`, checked to be actionable for the model."""
    with pytest.raises(FormatError) as info:
        extract_code(text)
    message = str(info.value)
    assert "ModelNew" in message and "```python" in message
    return message


# --- one block ----------------------------------------------------------------------------


def test_plain_python_block():
    answer = "Here is the optimized version:\n\n" + fenced(PROGRAM) + "\nIt fuses the ReLU into one kernel.\n"
    assert extract_code(answer) == ExtractedCode(PROGRAM, "python", ())


@pytest.mark.parametrize("info, language", [
    ("py", "py"),
    ("Python", "python"),
    ("python3", "python3"),
    ("PYTHON", "python"),
    ('python title="model_new.py"', "python"),
    ("", None),
])
def test_language_tag_variants(info, language):
    result = extract_code("Answer:\n" + fenced(PROGRAM, info))
    assert (result.code, result.language) == (PROGRAM, language)


def test_tilde_fence():
    result = extract_code(fenced(PROGRAM, "python", "~~~"))
    assert (result.code, result.language) == (PROGRAM, "python")


def test_backticks_do_not_close_a_tilde_fence():
    result = extract_code("~~~~python\n" + NESTED_PROGRAM.replace("```", "~~~") + "~~~~\n")
    assert result.code == NESTED_PROGRAM.replace("```", "~~~")


def test_indented_fence_dedents_its_content():
    indented = "".join("  " + line if line.strip() else line for line in PROGRAM.splitlines(keepends=True))
    result = extract_code("1. The program:\n  ```python\n" + indented + "  ```\n")
    assert result.code == PROGRAM


def test_four_space_indent_is_not_a_fence():
    # Beyond 3 spaces the line is not a fence (CommonMark): the answer holds no fenced block.
    assert "no fenced code block" in format_error("    ```python\n    x = 1\n    ```\n")


def test_code_ends_with_a_single_newline_and_no_leading_blank_lines():
    result = extract_code("```python\n\n  \n" + PROGRAM + "\n\n   \n```")
    assert result.code == PROGRAM


def test_tabs_are_kept():
    assert extract_code(fenced(ALIAS_PROGRAM)).code == ALIAS_PROGRAM


# --- several blocks -----------------------------------------------------------------------


def test_prose_cpp_block_and_python_block():
    answer = ("First the kernel:\n\n" + fenced(CPP, "cpp") + "\nThen the wrapper:\n\n"
              + fenced(PROGRAM) + "\nDone.\n")
    result = extract_code(answer)
    assert (result.code, result.language) == (PROGRAM, "python")
    assert "picked block 2 of 2" in result.notes


def test_two_defining_blocks_take_the_last():
    draft = PROGRAM.replace("relu.relu_cuda(x)", "torch.relu(x)")
    answer = ("Attempt:\n" + fenced(draft) + "\nWait, that does not use the kernel. Corrected:\n"
              + fenced(PROGRAM) + "\nUsage:\n" + fenced("model = ModelNew()\n"))
    result = extract_code(answer)
    assert result.code == PROGRAM
    assert "picked block 2 of 3" in result.notes


@pytest.mark.parametrize("info", ["cuda", "cpp", "c++", "C++"])
def test_cuda_language_blocks_are_not_mistaken_for_the_program(info):
    result = extract_code(fenced(CPP, info) + fenced(PROGRAM))
    assert result.code == PROGRAM


def test_block_defining_model_new_wins_whatever_its_tag():
    result = extract_code(fenced(REFERENCE) + fenced(PROGRAM, "cuda"))
    assert (result.code, result.language) == (PROGRAM, "cuda")


def test_missing_closing_fence():
    result = extract_code("Here it is:\n```python\n" + PROGRAM)
    assert result.code == PROGRAM
    assert "closing fence missing" in result.notes


def test_missing_closing_fence_after_a_closed_block():
    result = extract_code(fenced(CPP, "cpp") + "And:\n```python\n" + PROGRAM)
    assert result.code == PROGRAM
    assert {"closing fence missing", "picked block 2 of 2"} <= set(result.notes)


def test_inner_cpp_fence_inside_outer_four_backtick_block():
    result = extract_code("Full program:\n\n" + fenced(NESTED_PROGRAM, "python", "````") + "\nThat's it.\n")
    assert result.code == NESTED_PROGRAM
    assert result.notes == ()


def test_inline_triple_backticks_do_not_open_a_block():
    answer = "```inline``` code in prose\n" + fenced(PROGRAM)
    assert extract_code(answer) == ExtractedCode(PROGRAM, "python", ())


# --- unfenced answers ---------------------------------------------------------------------


def test_unfenced_code():
    result = extract_code(PROGRAM)
    assert (result.code, result.language) == (PROGRAM, None)
    assert result.notes == ("answer was not fenced",)


def test_prose_then_unfenced_code():
    result = extract_code("Here is the optimized model: it uses a fused kernel.\n\n" + PROGRAM)
    assert (result.code, result.language) == (PROGRAM, None)
    assert "answer was not fenced" in result.notes


def test_unfenced_code_with_prose_after_is_rejected():
    assert "no fenced code block" in format_error(PROGRAM + "\nThis kernel is 2x faster.\n")


# --- reasoning sections -------------------------------------------------------------------


def test_think_section_removed():
    draft = fenced(PROGRAM.replace("relu.relu_cuda(x)", "x"))
    result = extract_code("<think>\nLet me draft:\n" + draft + "</think>\n\n" + fenced(PROGRAM))
    assert result == ExtractedCode(PROGRAM, "python", ("reasoning section removed",))


def test_several_reasoning_sections_any_case():
    answer = ("<THINK>plan " + fenced(ALIAS_PROGRAM) + "</Think>\nOk.\n<thinking>more " + fenced(ALIAS_PROGRAM)
              + "</thinking>\n" + fenced(PROGRAM) + "<think>after</think>\n")
    result = extract_code(answer)
    assert result.code == PROGRAM
    assert result.notes == ("3 reasoning sections removed",)


def test_lone_closing_tag_means_the_text_before_is_reasoning():
    # Some servers strip the opening <think> tag; only the closing one is left.
    answer = "I should fuse it.\n" + fenced(ALIAS_PROGRAM) + "Good.\n</think>\n\nFinal:\n" + fenced(PROGRAM)
    result = extract_code(answer)
    assert result.code == PROGRAM
    assert "reasoning section removed" in result.notes


def test_reasoning_only_is_rejected():
    assert "reasoning" in format_error("<think>I will write ModelNew later.</think>\n")


# --- encodings ----------------------------------------------------------------------------


def test_crlf_and_bom():
    answer = "\ufeffHere:\r\n" + fenced(PROGRAM).replace("\n", "\r\n")
    result = extract_code(answer)
    assert result.code == PROGRAM and "\r" not in result.code


# --- rejected answers ---------------------------------------------------------------------


@pytest.mark.parametrize("text", [None, "", "   \n\t\n"])
def test_empty_answer(text):
    assert format_error(text).startswith("the answer was empty")


def test_blocks_without_model_new():
    message = format_error("Kernel:\n" + fenced(CPP, "cuda") + "Reference:\n" + fenced(REFERENCE))
    assert "2 code blocks" in message and "none defines `class ModelNew`" in message
    assert "load_inline" in message


def test_single_block_without_model_new_is_counted_in_singular():
    assert "has 1 code block but" in format_error(fenced(CPP, "cpp"))


def test_syntax_error_names_the_line():
    broken = PROGRAM.replace("    def forward(self, x):", "    def forward(self, x)")
    line = broken.splitlines().index("    def forward(self, x)") + 1
    message = format_error(fenced(broken))
    assert message.startswith(f"the code block defining ModelNew does not parse: line {line}: ")
    assert "def forward(self, x)" in message


def test_syntax_error_in_last_attempt_is_reported_even_after_a_reference_block():
    broken = "class ModelNew(nn.Module:\n    pass\n"
    message = format_error(fenced(REFERENCE) + fenced(broken))
    assert "does not parse: line 1:" in message


def test_syntax_error_in_cut_off_block_says_so():
    truncated = PROGRAM[: PROGRAM.index("return relu")] + "return relu.relu_cuda(x"
    message = format_error("```python\n" + truncated)
    assert "does not parse" in message and "closing fence is missing" in message


@pytest.mark.parametrize("wrap", [fenced, lambda code: code])
def test_only_class_model_is_rejected(wrap):
    message = format_error(wrap(REFERENCE))
    assert "ModelNew" in message


def test_model_new_not_at_top_level_is_rejected():
    nested = "import torch\n\nif torch.cuda.is_available():\n    class ModelNew:\n        pass\n"
    assert "top level" in format_error(fenced(nested))


@pytest.mark.parametrize("binding", ["ModelNew = Fast", "ModelNew: type = Fast"])
def test_assignment_to_model_new_is_accepted(binding):
    code = ALIAS_PROGRAM.replace("ModelNew = Fast", binding)
    assert extract_code(fenced(code)).code == code


def test_comparison_with_model_new_is_not_a_definition():
    assert "none defines" in format_error(fenced("ModelNew == Fast\n"))


def test_public_types():
    assert issubclass(FormatError, ValueError)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ExtractedCode("x = 1\n", None).code = "y"


# --- property: any wrapping extracts exactly the program ----------------------------------

PROSE = [
    "Here is the optimized implementation.",
    "The kernel fuses the elementwise operations to save memory traffic.",
    "Note: each thread handles one element, and the grid covers the whole tensor.",
    "This should be noticeably faster than the reference on large inputs.",
]


def _prose(rng: random.Random) -> str:
    return " ".join(rng.sample(PROSE, rng.randint(1, len(PROSE)))) + "\n"


def _fence_for(rng: random.Random, program: str) -> str:
    char = rng.choice("`~")
    longest = max((len(line) - len(line.lstrip(char)) for line in program.splitlines()), default=0)
    return char * max(3, longest + 1) + char * rng.randint(0, 2)


def _reasoning(rng: random.Random) -> str:
    """A reasoning section holding a superseded draft; "" as tag: the server stripped the opening tag."""
    tag = rng.choice(["think", "thinking", "THINK", ""])
    draft = fenced(REFERENCE.replace("class Model(", "class ModelNew("))
    return (f"<{tag}>\n" if tag else "") + _prose(rng) + draft + f"</{tag or 'think'}>\n"


def _fenced_program(rng: random.Random, program: str, closed: bool) -> str:
    fence, indent = _fence_for(rng, program), " " * rng.randint(0, 3)
    info = rng.choice(["python", "py", "Python3", "", 'python title="model_new.py"'])
    body = "".join(indent + line for line in program.splitlines(keepends=True))
    return f"{indent}{fence}{info}\n{body}" + (f"{indent}{fence}\n" if closed else "")


def _wrap(rng: random.Random, program: str) -> str:
    parts = [_reasoning(rng)] if rng.random() < 0.5 else []
    if rng.random() < 0.7:
        parts.append(_prose(rng))
    # Unfenced only works when no other block competes and the program holds no fence lines.
    if "```" not in program and rng.random() < 0.2:
        parts.append(program)
    else:
        if rng.random() < 0.5:
            parts.append(fenced(rng.choice([CPP, REFERENCE]), rng.choice(["cpp", "cuda", "python", ""])))
        closed = rng.random() < 0.8  # a missing closing fence can only end the answer
        parts.append(_fenced_program(rng, program, closed))
        if closed and rng.random() < 0.5:
            parts.append(_prose(rng) + fenced("python run.py\n", "bash"))
    answer = "\n".join(parts)
    if rng.random() < 0.3:
        answer = answer.replace("\n", "\r\n")
    return "\ufeff" + answer if rng.random() < 0.2 else answer


@pytest.mark.parametrize("program", [PROGRAM, ALIAS_PROGRAM, NESTED_PROGRAM])
def test_any_wrapping_extracts_exactly_the_program(program):
    for seed in range(300):
        answer = _wrap(random.Random(seed), program)
        assert extract_code(answer).code == program, f"seed {seed}:\n{answer}"
