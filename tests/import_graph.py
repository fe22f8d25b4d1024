"""The import graph of bnc-deploy, read from the source files with ``ast`` (nothing is imported),
and the dependency rules of ARCHITECTURE.md as plain functions over it.

``tests/test_dependency_rules.py`` runs the rules; ``python tests/import_graph.py`` prints every
violation of the current tree (``--edges`` prints the whole graph).

What counts as an import (a lazy import is still a dependency):

* ``import a.b`` and ``from a.b import c`` anywhere in a file: at module level, inside ``try``/``if``
  blocks, and inside functions (marked ``lazy``);
* ``importlib.import_module("a.b")`` and ``__import__("a.b")`` with a literal name (marked
  ``dynamic``; a computed name cannot be followed and is not counted);
* relative imports, resolved against the importing module's package;
* ``from pkg import name`` is an edge to ``pkg.name`` when that is a module of the tree, else to ``pkg``;
* imports under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``; marked ``type checking``), and
  their ``else`` branch: a type named in an annotation is a dependency of the design even though
  Python never runs the import, and a cycle through it is a cycle all the same.

Files: ``bnc_deploy/**.py``, ``exporters/**.py`` as ``bnc_deploy.exporters.*``,
``runtimes/**.py`` as ``bnc_deploy.runtimes.*``. Tests, benchmarks and samples are not scanned.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "bnc_deploy"
#: Repository-root folders installed under the package (pyproject's package-dir mapping).
ROOT_SUBPACKAGES = ("exporters", "runtimes")

# -- stages ---------------------------------------------------------------------------------------
#: Top-level modules of bnc_deploy that form the foundations.
FOUNDATIONS = frozenset({"errors", "fileio", "validation", "quantizers", "costs", "limits", "registry", "version"})
#: Sub-packages (or modules) of bnc_deploy, each one stage.
STAGES = frozenset(
    {
        "datasets",
        "artifacts",
        "reference",
        "models",
        "train",
        "formats",
        "verify",
        "targets",
        "profiling",
        "testing",
        "cli",
        "exporters",
        "runtimes",
        "serve",
        "sweep",
        "autolowering",
        "api",
        "sklearn",
        "fit",
    }
)
#: The only stages that may import torch.
TORCH_STAGES = frozenset({"models", "train"})
#: Stages that must never import torch, ``train`` or ``models``, directly or through a module of
#: another stage. ``root`` (``bnc_deploy/__init__.py``) is not among them: it re-exports the public
#: API (``api``, ``sklearn``: fitting trains) on first attribute access, and
#: tests/test_public_api.py checks that ``import bnc_deploy`` itself loads no torch.
TORCH_FREE_STAGES = frozenset(
    {
        "foundations",
        "datasets",
        "artifacts",
        "reference",
        "formats",
        "exporters",
        "runtimes",
        "profiling",
        "targets",
        "verify",
        "serve",
        "autolowering",
    }
)
#: External top-level packages that count as "torch".
TORCH_PACKAGES = frozenset({"torch", "torchvision", "torchaudio", "functorch"})
#: External packages the foundations may use besides the standard library.
FOUNDATION_EXTERNALS = frozenset({"numpy"})


def stage_of(module: str) -> str | None:
    """The stage of a module of the tree: ``root``, ``foundations``, a name in STAGES, or None."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    if len(parts) == 1:
        return "root"
    if len(parts) == 2 and parts[1] in FOUNDATIONS:
        return "foundations"
    return parts[1] if parts[1] in STAGES else None


# -- the graph ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Import:
    """One import statement's edge (one per distinct target of a statement)."""

    importer: str  # dotted module name of the importing file
    path: str  # the importing file, relative to the repository root
    line: int
    target: str  # a module of the tree, or an external dotted name ("torch", "onnx.helper")
    internal: bool  # target is (meant to be) a module of this package
    lazy: bool = False  # inside a function body
    dynamic: bool = False  # importlib.import_module / __import__ with a literal name
    type_only: bool = False  # under ``if TYPE_CHECKING:``

    @property
    def top(self) -> str:
        return self.target.split(".")[0]

    def where(self) -> str:
        kind = " (lazy)" if self.lazy else ""
        kind += " (dynamic)" if self.dynamic else ""
        kind += " (type checking)" if self.type_only else ""
        return f"{self.path}:{self.line}: {self.importer} imports {self.target}{kind}"


@dataclass(repr=False)
class ImportGraph:
    modules: dict[str, str]  # module -> file, relative to the repository root
    imports: list[Import] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # files that do not parse, relative imports past the top

    def __repr__(self) -> str:
        return f"<ImportGraph: {len(self.modules)} modules, {len(self.imports)} imports>"

    def internal_edges(self) -> dict[str, list[Import]]:
        """module -> its imports of other modules of the tree (self-imports left out)."""
        out: dict[str, list[Import]] = defaultdict(list)
        for imp in self.imports:
            if imp.internal and imp.target in self.modules and imp.target != imp.importer:
                out[imp.importer].append(imp)
        return out


def module_name(relpath: str) -> str | None:
    """Dotted module name of a source file given relative to the repository root, or None if not scanned."""
    parts = list(Path(relpath).with_suffix("").parts)
    if not relpath.endswith(".py") or "__pycache__" in parts or not parts:
        return None
    if parts[0] in ROOT_SUBPACKAGES:
        parts.insert(0, PACKAGE)
    elif parts[0] != PACKAGE:
        return None
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files(root: Path = ROOT) -> dict[str, str]:
    """relative path -> source text of every scanned file under ``root``."""
    files = {}
    for top in (PACKAGE, *ROOT_SUBPACKAGES):
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if module_name(rel) is not None:
                files[rel] = path.read_text(encoding="utf-8")
    return files


def build_graph(root: Path = ROOT) -> ImportGraph:
    return build_graph_from_sources(source_files(root))


def build_graph_from_sources(files: Mapping[str, str]) -> ImportGraph:
    """The graph of ``{relative path: source}`` (paths as in the repository, e.g. ``exporters/x.py``)."""
    modules = {}
    for rel in files:
        name = module_name(rel)
        if name is not None:
            modules[name] = rel
    graph = ImportGraph(modules=dict(sorted(modules.items())))
    for name, rel in graph.modules.items():
        is_package = Path(rel).name == "__init__.py"
        try:
            tree = ast.parse(files[rel], filename=rel)
        except SyntaxError as exc:
            graph.errors.append(f"{rel}:{exc.lineno}: does not parse: {exc.msg}")
            continue
        collector = _Collector(name, rel, is_package, graph)
        collector.visit(tree)
        graph.imports.extend(collector.found)
    return graph


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, path: str, is_package: bool, graph: ImportGraph) -> None:
        self.module, self.path, self.graph = module, path, graph
        self.package = module if is_package else module.rpartition(".")[0]
        self.depth = 0  # function nesting
        self.type_checking = 0  # nesting of ``if TYPE_CHECKING:`` bodies
        self.found: list[Import] = []
        self._seen: set[tuple[int, str]] = set()

    def _add(self, line: int, target: str, dynamic: bool = False) -> None:
        if (line, target) in self._seen:
            return
        self._seen.add((line, target))
        top = target.split(".")[0]
        internal = top == PACKAGE or top in ROOT_SUBPACKAGES
        self.found.append(
            Import(self.module, self.path, line, target, internal, self.depth > 0, dynamic, self.type_checking > 0)
        )

    def _function(self, node) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.type_checking += 1
        for child in node.body:
            self.visit(child)
        self.type_checking -= 1
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node.lineno, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == "__future__":
            return
        if node.level:
            base_parts = self.package.split(".")
            if node.level - 1 >= len(base_parts):
                self.graph.errors.append(f"{self.path}:{node.lineno}: relative import beyond the top package")
                return
            base = ".".join(base_parts[: len(base_parts) - (node.level - 1)])
            base = f"{base}.{node.module}" if node.module else base
        else:
            base = node.module or ""
        for alias in node.names:
            candidate = f"{base}.{alias.name}"
            self._add(node.lineno, candidate if candidate in self.graph.modules else base)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if (
            name in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and not node.args[0].value.startswith(".")
        ):
            self._add(node.lineno, node.args[0].value, dynamic=True)
        self.generic_visit(node)


# -- rules ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Violation:
    rule: str
    message: str  # "path:line: importer imports target -- why"
    importer: str = ""
    target: str = ""
    line: int = 0

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message}"


@dataclass(frozen=True)
class Rule:
    name: str
    text: str  # the rule, as ARCHITECTURE.md states it
    check: Callable[[ImportGraph], list[Violation]]


def _violation(rule: str, imp: Import, why: str) -> Violation:
    return Violation(rule, f"{imp.where()} -- {why}", imp.importer, imp.target, imp.line)


def _is_torch(imp: Import) -> bool:
    return not imp.internal and imp.top in TORCH_PACKAGES


def check_parse(graph: ImportGraph) -> list[Violation]:
    return [Violation("sources-parse", e) for e in graph.errors]


def check_stages(graph: ImportGraph) -> list[Violation]:
    return [
        Violation(
            "every-module-has-a-stage",
            f"{path}: module {name} belongs to no stage; add it to a stage "
            f"in tests/import_graph.py and ARCHITECTURE.md",
            name,
        )
        for name, path in graph.modules.items()
        if stage_of(name) is None
    ]


def check_resolves(graph: ImportGraph) -> list[Violation]:
    out = []
    for imp in graph.imports:
        if imp.internal and imp.top in ROOT_SUBPACKAGES:
            out.append(
                _violation(
                    "imports-resolve", imp, f"'{imp.top}' is not an importable name; import bnc_deploy.{imp.target}"
                )
            )
        elif imp.internal and imp.target not in graph.modules:
            out.append(_violation("imports-resolve", imp, "no such module in the tree"))
    return out


def check_torch_only_in_models_and_train(graph: ImportGraph) -> list[Violation]:
    return [
        _violation(
            "torch-only-in-models-and-train",
            imp,
            f"torch may be imported only in bnc_deploy.models / bnc_deploy.train "
            f"(stage of importer: {stage_of(imp.importer)})",
        )
        for imp in graph.imports
        if _is_torch(imp) and stage_of(imp.importer) not in TORCH_STAGES
    ]


def check_exporters_runtimes_independent(graph: ImportGraph) -> list[Violation]:
    out = []
    for imp in graph.imports:
        pair = (stage_of(imp.importer), stage_of(imp.target) if imp.internal else None)
        if pair in (("exporters", "runtimes"), ("runtimes", "exporters")):
            out.append(
                _violation(
                    "exporters-and-runtimes-independent",
                    imp,
                    "exporters and runtimes never import each other (the verifier joins them)",
                )
            )
    return out


def check_torch_free_stages(graph: ImportGraph) -> list[Violation]:
    out = []
    for imp in graph.imports:
        stage = stage_of(imp.importer)
        if stage not in TORCH_FREE_STAGES:
            continue
        if _is_torch(imp):
            out.append(_violation("torch-free-stages", imp, f"stage '{stage}' must not import torch"))
        elif imp.internal and stage_of(imp.target) in TORCH_STAGES:
            out.append(
                _violation(
                    "torch-free-stages", imp, f"stage '{stage}' must not import bnc_deploy.{stage_of(imp.target)}"
                )
            )
    return out


def check_torch_free_stages_indirectly(graph: ImportGraph) -> list[Violation]:
    """A torch-free module reaches torch/train/models through modules of other stages (e.g. testing).

    Walks only modules outside the torch-free stages (those are checked edge by edge), following
    imports and the implicit import of each module's parent packages. With check_torch_free_stages
    this proves that no torch-free module reaches torch at all: on a shortest chain, the last
    torch-free module either imports the forbidden target itself or starts such a walk.
    """
    edges = graph.internal_edges()
    torch_imports = defaultdict(list)
    for imp in graph.imports:
        if _is_torch(imp):
            torch_imports[imp.importer].append(imp)

    def forbidden_chain(start: str) -> list[str] | None:
        previous = {start: None}
        queue = deque([start])
        while queue:
            node = queue.popleft()
            if stage_of(node) in TORCH_STAGES or torch_imports.get(node):
                chain = [torch_imports[node][0].where()] if torch_imports.get(node) else []
                while previous[node] is not None:
                    node, step = previous[node]
                    chain.insert(0, step)
                return chain or [f"{start} is in bnc_deploy.{stage_of(start)}"]
            nexts = [(imp.target, imp.where()) for imp in edges.get(node, ())]
            parent = node.rpartition(".")[0]
            if parent in graph.modules:
                nexts.append((parent, f"{node} runs its package {parent}"))
            for target, step in nexts:
                if target not in previous and stage_of(target) not in TORCH_FREE_STAGES:
                    previous[target] = (node, step)
                    queue.append(target)
        return None

    out = []
    for importer, imps in sorted(edges.items()):
        if stage_of(importer) not in TORCH_FREE_STAGES:
            continue
        for imp in imps:
            if stage_of(imp.target) in TORCH_FREE_STAGES | TORCH_STAGES | {"cli"}:
                continue  # checked directly by the other rules
            chain = forbidden_chain(imp.target)
            if chain:
                out.append(
                    _violation(
                        "torch-free-stages-indirectly", imp, "reaches torch/train/models via: " + " -> ".join(chain)
                    )
                )
    return out


def check_nothing_imports_cli(graph: ImportGraph) -> list[Violation]:
    return [
        _violation("nothing-imports-cli", imp, "only bnc_deploy.cli may import bnc_deploy.cli")
        for imp in graph.imports
        if imp.internal and stage_of(imp.target) == "cli" and stage_of(imp.importer) != "cli"
    ]


def check_foundations_self_contained(graph: ImportGraph) -> list[Violation]:
    out = []
    for imp in graph.imports:
        if stage_of(imp.importer) != "foundations":
            continue
        if imp.internal and stage_of(imp.target) != "foundations":
            out.append(
                _violation(
                    "foundations-self-contained",
                    imp,
                    "foundations import only each other (errors, fileio, validation, quantizers, costs, limits)",
                )
            )
        elif not imp.internal and imp.top not in sys.stdlib_module_names and imp.top not in FOUNDATION_EXTERNALS:
            out.append(
                _violation("foundations-self-contained", imp, "foundations use only the standard library and numpy")
            )
    return out


def strongly_connected_components(nodes: Iterable[str], successors: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components in reverse topological order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(successors.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(successors.get(child, ()))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def find_cycles(graph: ImportGraph) -> list[tuple[list[str], list[Import]]]:
    """Every import cycle: (the modules of a strongly connected component, one cycle through its first module)."""
    edges = graph.internal_edges()
    successors = {m: sorted({imp.target for imp in imps}) for m, imps in edges.items()}
    cycles = []
    for component in strongly_connected_components(graph.modules, successors):
        if len(component) < 2:
            continue
        members = set(component)
        start = component[0]
        # Shortest cycle through `start` inside the component (BFS back to start).
        previous: dict[str, Import] = {}
        queue = deque([start])
        while queue:
            node = queue.popleft()
            for imp in sorted(edges.get(node, ()), key=lambda i: (i.target, i.line)):
                if imp.target not in members or imp.target in previous:
                    continue
                previous[imp.target] = imp
                queue.append(imp.target)
            if start in previous:
                break
        path, node = [], start
        while True:
            imp = previous[node]
            path.insert(0, imp)
            node = imp.importer
            if node == start:
                break
        cycles.append((component, path))
    return cycles


def check_no_cycles(graph: ImportGraph) -> list[Violation]:
    out = []
    for component, path in find_cycles(graph):
        out.append(
            Violation(
                "no-import-cycles",
                f"cycle among {len(component)} modules {component}; e.g. " + "; ".join(imp.where() for imp in path),
                component[0],
                path[0].target,
                path[0].line,
            )
        )
    return out


RULES = (
    Rule("sources-parse", "Every scanned source file parses.", check_parse),
    Rule("every-module-has-a-stage", "Every module of bnc_deploy belongs to a stage of ARCHITECTURE.md.", check_stages),
    Rule("imports-resolve", "Every import of bnc_deploy names a module that exists.", check_resolves),
    Rule(
        "torch-only-in-models-and-train",
        "torch is imported only in bnc_deploy.models and bnc_deploy.train.",
        check_torch_only_in_models_and_train,
    ),
    Rule(
        "exporters-and-runtimes-independent",
        "Exporters and runtimes never import each other.",
        check_exporters_runtimes_independent,
    ),
    Rule(
        "torch-free-stages",
        "The torch-free stages never import torch, bnc_deploy.train or bnc_deploy.models.",
        check_torch_free_stages,
    ),
    Rule(
        "torch-free-stages-indirectly",
        "... nor reach them through a module of another stage.",
        check_torch_free_stages_indirectly,
    ),
    Rule("nothing-imports-cli", "Nothing outside bnc_deploy.cli imports bnc_deploy.cli.", check_nothing_imports_cli),
    Rule(
        "foundations-self-contained",
        "Foundations import only each other, the standard library and numpy.",
        check_foundations_self_contained,
    ),
    Rule(
        "no-import-cycles", "The import graph (lazy and TYPE_CHECKING imports included) has no cycle.", check_no_cycles
    ),
)


def check_all(graph: ImportGraph) -> list[Violation]:
    return [v for rule in RULES for v in rule.check(graph)]


def main(argv: list[str]) -> int:
    graph = build_graph(Path(argv[argv.index("--root") + 1]) if "--root" in argv else ROOT)
    if "--edges" in argv:
        for imp in graph.imports:
            print(imp.where())
    violations = check_all(graph)
    for v in violations:
        print(v)
    print(f"{len(graph.modules)} modules, {len(graph.imports)} imports, {len(violations)} violations")
    return 1 if violations else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
