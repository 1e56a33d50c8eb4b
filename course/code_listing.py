"""Source listings that fit a printed page: long C/CUDA lines wrapped at spaces, comments kept as comments."""
from __future__ import annotations

import textwrap


def _comment_only(line: str) -> bool:
    return line.lstrip().startswith("//")


def wrap_c(source: str, width: int = 90) -> str:
    """``source`` with every line longer than ``width`` wrapped; the text compiles the same.

    A block of ``//`` lines with a long line is refilled as one paragraph; a trailing comment that
    makes a line too long moves onto its own line above the code; code wraps at spaces, continued
    four columns deeper.
    """
    lines, out, i = source.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        indent = line[: len(line) - len(line.lstrip())]
        if _comment_only(line):
            j = i
            while j < len(lines) and _comment_only(lines[j]):
                j += 1
            block = lines[i:j]
            if max(map(len, block)) > width:
                text = " ".join(b.strip()[2:].strip() for b in block)
                block = textwrap.wrap(text, width, initial_indent=indent + "// ",
                                      subsequent_indent=indent + "// ", break_long_words=False)
            out += block
            i = j
            continue
        i += 1
        if len(line) <= width:
            out.append(line)
            continue
        code, sep, comment = line.partition("//")
        if sep:
            out += textwrap.wrap(comment.strip(), width, initial_indent=indent + "// ",
                                 subsequent_indent=indent + "// ", break_long_words=False)
            line = code.rstrip()
            if len(line) <= width:
                out.append(line)
                continue
        out += textwrap.wrap(line, width, subsequent_indent=indent + "    ",
                             break_long_words=False, break_on_hyphens=False)
    return "\n".join(out) + "\n"
