"""MkDocs hook: the command-line reference, generated from the commands' own argparse parsers.

Every console script of ``pyproject.toml`` (``[project.scripts]``) gets a page
``reference/cli/<command>.md`` built at site-build time from the parser its ``main`` uses: the
usage line, the description, every argument group as a table (options, defaults, choices, help),
subcommands, and the command module's docstring. Nothing is copied by hand, so the reference
cannot drift from the code. ``docs/reference/cli.md`` gets the table of commands in place of the
``<!-- cli-commands -->`` marker.

The parser is taken from the entry point itself: ``main([])`` is called with
``argparse.ArgumentParser.parse_args`` replaced by a function that hands the parser back, so
commands that build their parser inside ``main`` are covered as well as those with a
``build_parser()``. ``tests/test_docs.py`` uses :func:`commands` and :func:`option_strings` to
check that every option appears on its page.
"""

from __future__ import annotations

import argparse
import html
import importlib
import inspect
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE_DIR = "reference/cli"
INDEX_MARKER = "<!-- cli-commands -->"


@dataclass(frozen=True)
class Command:
    """One console script: its name, ``module:function`` entry point and parser."""

    name: str
    entry_point: str
    parser: argparse.ArgumentParser
    module_doc: str

    @property
    def page(self) -> str:
        return f"{PAGE_DIR}/{self.name}.md"


class _Captured(BaseException):
    """Raised in place of parsing; a BaseException so that the commands' error handlers let it pass."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__()
        self.parser = parser


def _capture(self: argparse.ArgumentParser, args=None, namespace=None):
    raise _Captured(self)


def parser_of(entry_point: str) -> tuple[argparse.ArgumentParser, str]:
    """The parser that ``module:function`` parses its arguments with, and the module's docstring."""
    module_name, _, function_name = entry_point.partition(":")
    module = importlib.import_module(module_name)
    function = getattr(module, function_name)
    original = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = _capture  # type: ignore[method-assign]
    try:
        function([])
    except _Captured as captured:
        return captured.parser, inspect.getdoc(module) or ""
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
    raise RuntimeError(f"{entry_point} returned without parsing its arguments")


def commands(root: Path = ROOT) -> list[Command]:
    """Every console script of ``pyproject.toml``, in its order there."""
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]
    found = []
    for name, entry_point in scripts.items():
        parser, doc = parser_of(entry_point)
        found.append(Command(name, entry_point, parser, doc))
    return found


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    subs: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            subs.update(action.choices)
    return subs


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of the parser and its subcommands (``--help`` included), hidden ones too."""
    found = {s for action in parser._actions for s in action.option_strings}
    for sub in _subparsers(parser).values():
        found |= option_strings(sub)
    return found


# --- rendering -------------------------------------------------------------------------------------


def _plain(text: str) -> str:
    text = html.escape(text, quote=False)
    for char, entity in {"|": "&#124;", "*": "&#42;", "_": "&#95;", "`": "&#96;", "[": "&#91;", "\\": "&#92;"}.items():
        text = text.replace(char, entity)
    return text


def _cell(text: str) -> str:
    """Help text for Markdown (a table cell or a paragraph): one line, HTML-escaped, Markdown's inline
    characters neutralized; reST ``literals`` become code."""
    parts = re.split(r"``(.+?)``", " ".join(text.split()))
    return "".join(_code(part) if i % 2 else _plain(part) for i, part in enumerate(parts))


def _code(text: str) -> str:
    """Inline code in a table cell (a pipe would end the cell: it is written as an entity in <code>)."""
    return "<code>" + html.escape(text, quote=False).replace("|", "&#124;") + "</code>"


def _invocation(action: argparse.Action, formatter: argparse.HelpFormatter) -> str:
    if not action.option_strings:
        return formatter._metavar_formatter(action, action.dest)(1)[0]
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    metavar = formatter._format_args(action, action.dest.upper())
    return ", ".join(f"{option} {metavar}" for option in action.option_strings)


def _help(action: argparse.Action, formatter: argparse.HelpFormatter) -> str:
    if action.help == argparse.SUPPRESS:
        return "(not listed by --help)"
    if not action.help:
        return ""
    return formatter._expand_help(action)


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.required or action.default in (None, argparse.SUPPRESS):
        return ""
    if isinstance(action.default, list | tuple):
        return " ".join(str(v) for v in action.default)
    return str(action.default)


def _table(actions: list[argparse.Action], formatter: argparse.HelpFormatter) -> list[str]:
    lines = ["| argument | default | description |", "|---|---|---|"]
    for action in actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        required = " (required)" if action.required and action.option_strings else ""
        choices = ""
        if action.choices is not None and not isinstance(action.choices, dict):
            choices = " Choices: " + ", ".join(_code(str(c)) for c in action.choices) + "."
        default = _code(_default(action)) if _default(action) else ""
        invocation, description = _code(_invocation(action, formatter)), _cell(_help(action, formatter))
        lines.append(f"| {invocation}{required} | {default} | {description}{choices} |")
    return lines


def _fenced(text: str) -> list[str]:
    return ["```text", text.rstrip("\n"), "```"]


def _parser_section(parser: argparse.ArgumentParser, level: int) -> list[str]:
    formatter = parser._get_formatter()
    out = _fenced(parser.format_usage().removeprefix("usage: "))
    if parser.description:
        out += ["", _cell(parser.description)]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if not isinstance(a, argparse._SubParsersAction)]
        if not actions:
            continue
        out += ["", f"{'#' * level} {group.title.capitalize() if group.title else 'Arguments'}", ""]
        if group.description:
            out += [_cell(group.description), ""]
        out += _table(actions, formatter)
    for name, sub in _subparsers(parser).items():
        out += ["", f"{'#' * level} `{name}`", ""]
        out += _parser_section(sub, level + 1)
    if parser.epilog:
        out += ["", f"{'#' * level} Examples", ""] + _fenced(parser.epilog)
    return out


_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def _docstring_markdown(doc: str) -> str:
    """A module docstring (reST-flavoured) as Markdown: roles and ``literals`` become code spans."""
    doc = _ROLE.sub(r"`\1`", doc).replace("``", "`").replace("::\n", ":\n")
    return doc


def render_page(command: Command) -> str:
    """The Markdown of one command's reference page."""
    lines = [
        f"# `{command.name}`",
        "",
        f"Generated from the parser of `{command.entry_point}` when the site is built; "
        f"`{command.name} --help` prints the same options.",
        "",
        "## Usage",
        "",
    ]
    lines += _parser_section(command.parser, 2)
    if command.module_doc:
        lines += ["", "## Details", "", _docstring_markdown(command.module_doc)]
    return "\n".join(lines) + "\n"


def render_index(found: list[Command]) -> str:
    """The table of commands for ``reference/cli.md``."""
    lines = ["| command | what it does |", "|---|---|"]
    for command in found:
        lines.append(f"| [`{command.name}`](cli/{command.name}.md) | {_cell(command.parser.description or '')} |")
    return "\n".join(lines)


# --- MkDocs events ---------------------------------------------------------------------------------

_COMMANDS: list[Command] = []


def _nav_pages(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    return []


def on_config(config):
    """Collect the commands; the nav must list exactly their pages (a new command needs its nav line)."""
    from mkdocs.exceptions import PluginError

    _COMMANDS[:] = commands()
    listed = {page for page in _nav_pages(config.nav or []) if page.startswith(PAGE_DIR + "/")}
    wanted = {command.page for command in _COMMANDS}
    if config.nav is not None and listed != wanted:
        raise PluginError(
            f"mkdocs.yml nav: command pages missing {sorted(wanted - listed)}, unknown {sorted(listed - wanted)}"
        )
    return config


def on_files(files, config):
    from mkdocs.structure.files import File

    for command in _COMMANDS:
        files.append(File.generated(config, command.page, content=render_page(command)))
    return files


def on_page_markdown(markdown, page, config, files):
    if INDEX_MARKER in markdown:
        markdown = markdown.replace(INDEX_MARKER, render_index(_COMMANDS))
    return markdown
