"""Every file a comment, docstring or document names exists: paths from the repository's root
(xla_ffi/..., jax_jaccl/..., tests/..., docs/..., examples/...) as written, and bare file names
(moe.h, peer_moe.cc, _settings.py) somewhere in the tree; nothing outside it (../, the team's
research/ notes), which a user's checkout does not have. Moves rename files; this keeps the
prose that points at them from pointing nowhere. Names of files that are not in the tree are
listed in NOT_OURS."""

from __future__ import annotations

import ast
import io
import pathlib
import re
import tokenize

ROOT = pathlib.Path(__file__).resolve().parents[2]
SKIP = {".git", ".venv", ".venv-oldest", ".venv-newest", "build", "__pycache__"}
C_LIKE = {".cc", ".h", ".cu", ".cuh", ".c"}
PATH = re.compile(r"(?<![\w./-])((?:xla_ffi|jax_jaccl|tests|docs|examples|startup)/[\w./-]*\w)")
OUTSIDE = re.compile(r"\.\./[\w./-]+|(?<![\w./-])research/[\w./-]+")  # the team's notes
BARE = re.compile(r"(?<![\w./-])([A-Za-z_][\w-]*\.(?:h|cc|cu|cuh|py|c|md))\b")
# Files named in the prose that are not in this tree: a user's script in an example command,
# what a GPU run writes, and the mpiabi library's sources that xla_ffi/mpiabi/generate.py writes at
# build time.
NOT_OURS = {"script.py", "kernels.md", "mpiabi_exports.c", "mpiabi_values.h"}


def tree():
    for path in sorted(ROOT.rglob("*")):
        if path.is_file() and not SKIP & set(path.relative_to(ROOT).parts):
            yield path


FILES = list(tree())
NAMES = {p.name for p in FILES}
PATHS = {p.relative_to(ROOT).as_posix() for p in FILES}
FOLDERS = {parent.as_posix() for p in PATHS for parent in pathlib.PurePosixPath(p).parents}


def c_comments(text):
    return re.findall(r"//[^\n]*|/\*.*?\*/", text, flags=re.S)


def python_prose(text):
    """Comments and docstrings; string literals that are code or data (file names a test
    writes) are not prose."""
    prose = [tok.string for tok in tokenize.generate_tokens(io.StringIO(text).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            prose.append(ast.get_docstring(node) or "")
    return prose


def prose_of(path):
    text = path.read_text(errors="replace")
    if path.suffix in C_LIKE:
        return c_comments(text)
    if path.suffix == ".py":
        return python_prose(text)
    if path.suffix in {".md", ".txt", ".toml"} or path.name in {"Makefile", "run"}:
        return [text]
    return []


def missing_references():
    missing = set()
    for path in FILES:
        where = path.relative_to(ROOT).as_posix()
        for prose in prose_of(path):
            for m in OUTSIDE.finditer(prose):
                missing.add(f"{where}: {m.group(0)} (outside the repository)")
            for m in PATH.finditer(prose):
                named = m.group(1).rstrip(".")
                if named not in PATHS and named.rstrip("/") not in FOLDERS and "*" not in named:
                    missing.add(f"{where}: {named}")
            if path.suffix in C_LIKE | {".py"}:
                for m in BARE.finditer(prose):
                    if m.group(1) not in NAMES and m.group(1) not in NOT_OURS:
                        missing.add(f"{where}: {m.group(1)}")
    return sorted(missing)


def test_every_file_named_in_prose_exists():
    assert not missing_references(), "\n".join(missing_references())


def test_the_check_sees_a_stale_name():
    assert c_comments("int x;  // see cuda_peer_path.cc\n") == ["// see cuda_peer_path.cc"]
    assert "cuda_peer_path.cc" not in NAMES and "peer_collectives.cc" in NAMES
    assert python_prose('"""Runs jax_jaccl/ops/moe.py."""\nopen("made_by_a_test.py")\n') == \
        ["Runs jax_jaccl/ops/moe.py."]
