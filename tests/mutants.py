"""Planted faults: mutated copies of the functions a page shows.

Every function defined in a section that a page embeds gets two mutants:

- `raise`: the first statement of its body raises (CUDA C: returns at once,
  so its outputs stay NaN-poisoned);
- `wrong`: a wrong-result mutation, the first found in the body, by kind:
  `+`→`-` (or `-`→`+`, `+=`→`-=`), then `*`→`+`, then a comparison
  `a < b`→`a < b - 1` (`>`: `+ 1`), then an int constant k→k+1.
  Prints and f-strings are never mutated. Where the first such site cannot
  change the result, an override names the text to mutate instead, and why
  (`overrides()`: each chapter's MUTANT_OVERRIDES).

tests/test_page_code.py runs the page's blocks with each mutant and
requires them to fail.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

def overrides() -> dict[str, tuple[str, str, str]]:
    """"file:section:function" -> (old, new, why): a wrong-result mutation
    given by hand where the automatic one hits code whose result cannot be
    checked; each chapter declares its own (MUTANT_OVERRIDES in
    tests/test_<topic>.py, found by tests/chapters.py)."""
    from tests import chapters

    return chapters.mutant_overrides()


SEEDED = {"default_rng", "seed", "RandomState"}


class PlantedFault(Exception):
    pass


@dataclass(frozen=True)
class Mutant:
    target: str      # file:section
    function: str
    kind: str        # "raise" or "wrong"
    text: str        # the section's text with the fault planted
    what: str        # a short description of the fault

    @property
    def id(self) -> str:
        return f"{self.target}:{self.function}:{self.kind}"


# ------------------------------------------------------------------ Python --

def _offsets(text: str) -> list[int]:
    starts, pos = [], 0
    for ln in text.splitlines(keepends=True):
        starts.append(pos)
        pos += len(ln)
    starts.append(pos)
    return starts


def _pos(starts: list[int], lineno: int, col: int) -> int:
    return starts[lineno - 1] + col


def _excluded(fn: ast.AST) -> set[int]:
    """ids of nodes whose result nobody checks: print calls, f-strings,
    docstrings, decorators."""
    out = set()
    for node in ast.walk(fn):
        skip = isinstance(node, ast.JoinedStr) or (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print")
        if skip:
            out.update(id(n) for n in ast.walk(node))
    for node in ast.walk(fn):  # seeds: another seed is as good a test
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in SEEDED:
            out.update(id(n) for n in ast.walk(node))
    for dec in getattr(fn, "decorator_list", []):
        out.update(id(n) for n in ast.walk(dec))
    args = getattr(fn, "args", None)
    if args is not None:
        for d in args.defaults + args.kw_defaults:
            if d is not None:
                out.update(id(n) for n in ast.walk(d))
    return out


def _sites(fn: ast.FunctionDef) -> list[tuple[int, ast.AST]]:
    """Candidate mutation sites as (priority, node), in source order."""
    skip = _excluded(fn)
    found = []
    for node in ast.walk(fn):
        if id(node) in skip or node is fn:
            continue
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, (ast.Add, ast.Sub)):
            found.append((0, node))
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, (ast.Mult, ast.FloorDiv, ast.Div)):
            found.append((1, node))
        elif (isinstance(node, ast.Compare) and len(node.ops) == 1
              and isinstance(node.ops[0], (ast.Lt, ast.LtE, ast.Gt, ast.GtE))):
            found.append((2, node))
        elif (isinstance(node, ast.Constant) and type(node.value) is int):
            found.append((3, node))
    return sorted(found, key=lambda pn: (pn[0], pn[1].lineno, pn[1].col_offset))


def _op_span(text: str, starts, node) -> tuple[int, int]:
    """Character span of the operator token of a BinOp or AugAssign."""
    if isinstance(node, ast.BinOp):
        a = _pos(starts, node.left.end_lineno, node.left.end_col_offset)
        b = _pos(starts, node.right.lineno, node.right.col_offset)
    else:
        a = _pos(starts, node.target.end_lineno, node.target.end_col_offset)
        b = _pos(starts, node.value.lineno, node.value.col_offset)
    seg = text[a:b]
    sym = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Div: "/"}[type(node.op)]
    # skip closing brackets and blanks between the operand and the operator
    i = a + seg.index(sym, len(seg) - len(seg.lstrip(" )]\t\n\\")))
    return i, i + len(sym)


def _wrong(text: str, fn: ast.FunctionDef) -> tuple[str, str] | None:
    starts = _offsets(text)
    for _, node in _sites(fn):
        if isinstance(node, (ast.BinOp, ast.AugAssign)):
            i, j = _op_span(text, starts, node)
            new = {"+": "-", "-": "+", "*": "+", "//": "*", "/": "*"}[text[i:j]]
            if text[i - 1:i] in "*/" and text[i - 1:i] or text[j:j + 1] in ("*", "/"):
                continue  # ** and // are not * and /
            line = text[starts[node.lineno - 1]:].splitlines()[0].strip()
            return text[:i] + new + text[j:], f"{text[i:j]} -> {new} in `{line}`"
        if isinstance(node, ast.Compare):
            right = node.comparators[0]
            a = _pos(starts, right.lineno, right.col_offset)
            b = _pos(starts, right.end_lineno, right.end_col_offset)
            delta = "- 1" if isinstance(node.ops[0], (ast.Lt, ast.LtE)) else "+ 1"
            return text[:a] + f"({text[a:b]}) {delta}" + text[b:], f"`{text[a:b]}` -> `({text[a:b]}) {delta}`"
        if isinstance(node, ast.Constant):
            a = _pos(starts, node.lineno, node.col_offset)
            b = _pos(starts, node.end_lineno, node.end_col_offset)
            return text[:a] + str(node.value + 1) + text[b:], f"constant {node.value} -> {node.value + 1}"
    return None


def _is_kernel(fn: ast.FunctionDef) -> bool:
    """@cuda.jit (a kernel, not a device function)."""
    for d in fn.decorator_list:
        call = d if not isinstance(d, ast.Call) else d.func
        name = ast.unparse(call)
        if name.endswith("jit") and not (isinstance(d, ast.Call) and any(
                k.arg == "device" and getattr(k.value, "value", False) for k in d.keywords)):
            return True
    return False


def python_mutants(target: str, text: str) -> list[Mutant]:
    tree = ast.parse(text)
    starts = _offsets(text)
    out = []
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        first = fn.body[0]
        if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str) and len(fn.body) > 1):
            first = fn.body[1]  # after the docstring
        at = starts[first.lineno - 1]
        indent = text[at:at + first.col_offset]
        if _is_kernel(fn):  # a compiled kernel ignores raise (without debug=True): it returns at once
            line, what = f"{indent}return\n", "return at the top of the kernel (outputs stay poisoned)"
        else:
            line, what = f"{indent}raise PlantedFault({f'{target}:{fn.name}'!r})\n", "raise at the top of the body"
        out.append(Mutant(target, fn.name, "raise", text[:at] + line + text[at:], what))
        key = f"{target}:{fn.name}"
        if key in overrides():
            old, new, _why = overrides()[key]
            a = _pos(starts, fn.lineno, 0)
            b = _pos(starts, fn.end_lineno, fn.end_col_offset)
            body = text[a:b]
            if body.count(old) != 1:
                raise ValueError(f"override for {key}: {old!r} must occur once in the function")
            out.append(Mutant(target, fn.name, "wrong", text[:a] + body.replace(old, new) + text[b:],
                              f"{old} -> {new} (override)"))
            continue
        wrong = _wrong(text, fn)
        if wrong is not None:  # None: no arithmetic to falsify; the raise is its fault
            out.append(Mutant(target, fn.name, "wrong", wrong[0], wrong[1]))
    return out


# ------------------------------------------------------------------ CUDA C --

QUALIFIER = re.compile(r"\b(__global__|__device__)\b")
IDENT_BEFORE_PAREN = re.compile(r"([A-Za-z_]\w*)\s*$")
INDEX_LINE = re.compile(r"\b(threadIdx|blockIdx|blockDim|gridDim)\b")
# wrong-result mutations of CUDA C, tried in this order (comments, for-loop
# headers and lines that compute thread indices are never mutated)
CUDA_WRONG = (
    (r"(?<![+=<>!&|^%/*-])\+=", "-="),
    (r"(?<=[\w\)\]]) \+ (?=[\w\(])", " - "),
    (r"(?<![-=<>!&|^%/*+])-=", "+="),
    (r"(?<=[\w\)\]]) - (?=[\w\(])", " + "),
    (r"(?<=[\w\)\]]) \* (?=[\w\(])", " + "),
    (r"(?<=[\w\)\]]) / (?=[\w\(])", " * "),
    (r"\bfmaf\(", "fmaf(1.0f + "),
    (r" < ", " <= "),
    (r" == ", " != "),
)


def _blank_comments(text: str) -> str:
    """The text with comments replaced by spaces (positions kept)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r"//[^\n]*|/\*.*?\*/", blank, text, flags=re.S)


def _match(text: str, i: int, open_: str, close: str) -> int:
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced")


def cuda_functions(text: str) -> list[tuple[str, bool, int, int]]:
    """(name, returns_void, body_open, body_close) of each function defined."""
    code = _blank_comments(text)
    out, pos = [], 0
    for m in QUALIFIER.finditer(code):
        if m.start() < pos:
            continue
        paren = code.find("(", m.end())
        semi = code.find(";", m.end())
        if paren < 0 or (0 <= semi < paren):
            continue  # a variable (__device__ int ticket;)
        name = IDENT_BEFORE_PAREN.search(code[m.end():paren])
        while name and name.group(1) == "__launch_bounds__":
            paren = code.find("(", _match(code, paren, "(", ")"))
            name = IDENT_BEFORE_PAREN.search(code[m.end():paren])
        if not name:
            continue
        close = _match(code, paren, "(", ")")
        brace = code.find("{", close)
        semi = code.find(";", close)
        if brace < 0 or (0 <= semi < brace):
            continue  # a declaration
        end = _match(code, brace, "{", "}")
        void = re.search(r"\bvoid\b", code[m.start():paren]) is not None
        out.append((name.group(1), void, brace, end))
        pos = end
    return out


def cuda_mutants(target: str, text: str) -> list[Mutant]:
    code = _blank_comments(text)
    out = []
    seen: dict[str, int] = {}
    for name, void, a, b in cuda_functions(text):
        returns_bool = re.search(r"\bbool\s+" + name + r"\b", text) is not None
        # bool: return true, so a guard that picks a fast path wrongly says yes
        # (false would only take the always-correct slow path)
        ret = " return; " if void else " return true; " if returns_bool else " return {}; "
        # a macro that defines two kernels names both by its parameter (SPMV_SUBWARP(L)):
        # the second is L#2, so that every mutant has its own id
        seen[name] = seen.get(name, 0) + 1
        fn = name if seen[name] == 1 else f"{name}#{seen[name]}"
        out.append(Mutant(target, fn, "raise", text[:a + 1] + ret + text[a + 1:], "return at the top of the body"))
        key = f"{target}:{name}"
        if key in overrides():
            old, new, _why = overrides()[key]
            body = text[a:b]
            if body.count(old) != 1:
                raise ValueError(f"override for {key}: {old!r} must occur once in the function")
            out.append(Mutant(target, fn, "wrong", text[:a] + body.replace(old, new) + text[b:],
                              f"{old} -> {new} (override)"))
            continue
        # Not on lines that compute a thread's index or step a loop: a fault
        # there walks out of bounds (or never ends) instead of computing a
        # wrong value, which is what the check must catch.
        body = _blank_headers(code[a:b])
        body = "\n".join(ln if not INDEX_LINE.search(ln) else " " * len(ln) for ln in body.split("\n"))
        for pat, new in CUDA_WRONG:
            m = re.search(pat, body)
            if m:
                i, j = a + m.start(), a + m.end()
                line = text[text.rfind("\n", 0, i) + 1:text.find("\n", i)].strip()
                out.append(Mutant(target, fn, "wrong", text[:i] + new + text[j:],
                                  f"{text[i:j].strip()} -> {new.strip()} in `{line}`"))
                break
        # else: no arithmetic to falsify (a thin wrapper that calls another
        # function): the early return is its planted fault.
    return out


def _blank_headers(body: str) -> str:
    """for (...) headers replaced by spaces (positions kept)."""
    out = list(body)
    for m in re.finditer(r"\bfor\s*\(", body):
        end = _match(body, m.end() - 1, "(", ")")
        for k in range(m.start(), end + 1):
            if out[k] != "\n":
                out[k] = " "
    return "".join(out)
