"""Reading a YAML file defensively, remembering the line of every key and item.

``yaml.safe_load`` semantics only (no Python tags); files over ``MAX_BYTES`` are refused before parsing, text must
be UTF-8, duplicate keys are errors, and YAML aliases and merge keys are refused outright (no "billion laughs").
Every failure is a ``SpaceError`` with the file and, where known, the line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from autotune.errors import SpaceError

#: files larger than this are refused before parsing (space files and prompts files)
MAX_BYTES = 1 << 20
_MAX_DEPTH = 50


def describe(v: Any) -> str:
    """How a value is shown after "got" in an error message."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        if v == "":
            return "an empty string"
        return repr(v if len(v) <= 60 else v[:57] + "...")
    if isinstance(v, int):
        return str(v) if v.bit_length() <= 128 else "a very large integer"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, dict):
        return "an empty mapping" if not v else "a mapping"
    if isinstance(v, list):
        return "an empty list" if not v else "a list"
    return f"a value of type {type(v).__name__}"


class LineMap(dict[Any, Any]):
    """A mapping from the YAML file that remembers the 1-based line of each key."""

    line: int | None = None
    key_lines: dict[Any, int]


class LineSeq(list[Any]):
    """A sequence from the YAML file that remembers the 1-based line of each item."""

    line: int | None = None
    item_lines: list[int]


def key_line(m: Any, key: Any, default: int | None) -> int | None:
    """The line of ``key`` in mapping ``m`` (``default`` when ``m`` does not know it)."""
    lines = getattr(m, "key_lines", None)
    return lines.get(key, default) if lines else default


def item_line(s: Any, i: int, default: int | None) -> int | None:
    """The line of item ``i`` of sequence ``s`` (``default`` when ``s`` does not know it)."""
    lines = getattr(s, "item_lines", None)
    return lines[i] if lines and i < len(lines) else default


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses aliases, merge keys and deep nesting, rejects duplicate keys, records lines."""

    _depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML's stubs leave Parser.peek_event bare
            raise ComposerError(
                None,
                None,
                f"YAML aliases (*{event.anchor}) are not allowed in space files; write the value out",
                event.start_mark,
            )
        if self._depth >= _MAX_DEPTH:
            event = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML's stubs leave Parser.peek_event bare
            raise ComposerError(None, None, f"nested more than {_MAX_DEPTH} levels deep", event.start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _kind(node: Node) -> str:
    """The node's kind as PyYAML names it (``scalar``, ``sequence``, ``mapping``)."""
    return node.id if isinstance(node, ScalarNode | SequenceNode | MappingNode) else type(node).__name__


def _construct_map(loader: _Loader, node: Node) -> LineMap:
    if not isinstance(node, MappingNode):
        raise ConstructorError(None, None, f"expected a mapping node, but found {_kind(node)}", node.start_mark)
    m = LineMap()
    m.line = node.start_mark.line + 1
    m.key_lines = {}
    for key_node, value_node in node.value:
        key = _construct_key(loader, key_node)
        if key in m:
            raise ConstructorError(
                None,
                None,
                f"duplicate key {describe(key)} (first at line {m.key_lines[key]})",
                key_node.start_mark,
            )
        m[key] = loader.construct_object(value_node, deep=True)
        m.key_lines[key] = key_node.start_mark.line + 1
    return m


def _construct_key(loader: _Loader, key_node: Node) -> Any:
    """A mapping key: a plain (hashable) value, never a merge key."""
    if key_node.tag == "tag:yaml.org,2002:merge":
        raise ConstructorError(None, None, "merge keys (<<) are not allowed in space files", key_node.start_mark)
    key = loader.construct_object(key_node, deep=True)
    try:
        hash(key)
    except TypeError:
        raise ConstructorError(
            None, None, "a mapping key must be a plain value, not a list or mapping", key_node.start_mark
        ) from None
    return key


def _construct_seq(loader: _Loader, node: Node) -> LineSeq:
    if not isinstance(node, SequenceNode):
        raise ConstructorError(None, None, f"expected a sequence node, but found {_kind(node)}", node.start_mark)
    s = LineSeq(loader.construct_object(child, deep=True) for child in node.value)
    s.line = node.start_mark.line + 1
    s.item_lines = [child.start_mark.line + 1 for child in node.value]
    return s


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


def read_text(path: Path, shown: str) -> str:
    """The file's text: at most MAX_BYTES, UTF-8 (a BOM is dropped)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise SpaceError("no such file", path=shown) from None
    except IsADirectoryError:
        raise SpaceError("is a directory, expected a YAML file", path=shown) from None
    except OSError as e:
        raise SpaceError(f"cannot read the file: {e.strerror or e}", path=shown) from None
    if len(data) > MAX_BYTES:
        raise SpaceError(f"the file is larger than {MAX_BYTES} bytes (1 MiB); refusing to read it", path=shown)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise SpaceError(
            f"not UTF-8 text: byte 0x{data[e.start]:02x} cannot be decoded; save the file as UTF-8",
            path=shown,
            line=line,
        ) from None


def parse_yaml(text: str, shown: str) -> Any:
    """Parse one YAML document with ``_Loader``; every failure is a SpaceError with a line."""
    loader: _Loader | None = None
    try:
        loader = _Loader(text)
        return loader.get_single_data()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else None
        raise SpaceError(_marked_error_message(e), path=shown, line=line) from None
    except yaml.reader.ReaderError as e:
        line = text[: e.position].count("\n") + 1
        raise SpaceError(
            f"invalid YAML: the control character U+{e.character:04X} is not allowed in YAML text",
            path=shown,
            line=line,
        ) from None
    except RecursionError:
        raise SpaceError("invalid YAML: nested too deeply", path=shown) from None
    except Exception as e:  # noqa: BLE001 - PyYAML raises ValueError & co. for odd explicit tags
        raise SpaceError(f"invalid YAML: {type(e).__name__}: {e}", path=shown) from None
    finally:
        if loader is not None:
            loader.dispose()


def _marked_error_message(e: yaml.MarkedYAMLError) -> str:
    """What a PyYAML error with a position means, in the words of a space file."""
    problem = e.problem or "invalid YAML"
    tag = re.match(r"could not determine a constructor for the tag '(.*)'", problem)
    if "'\\t'" in problem:
        return "invalid YAML: a tab character; YAML indentation must use spaces"
    if tag:
        shown_tag = tag.group(1).replace("tag:yaml.org,2002:", "!!")
        return f"the tag {shown_tag} is not allowed; space files are plain YAML (no Python objects)"
    if isinstance(e, ComposerError | ConstructorError) and not e.context:
        return problem  # our own messages (aliases, duplicate keys, merge keys) and tag errors
    msg = f"invalid YAML: {problem}" + (f" ({e.context})" if e.context else "")
    if problem.startswith("mapping values are not allowed"):
        msg += "; check the indentation, and quote values that contain ': '"
    return msg
