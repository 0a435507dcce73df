"""The commands and code of the README and of docs/*.md work as printed (issue 10, item 7; the
manual moved to docs/ in issue 26, item 7). The tests read the pages themselves, so a rewritten
line is tested as rewritten, and every relative link of a page leads to a file (and heading) there.

What runs, of the ```bash blocks' commands (continuation lines joined, comments dropped):
- every ``cardinal ...`` command (also after ``torchrun ... -m cardinal.cli``) parses with the
  CLI's own parser, and its recipe and ``--set`` values resolve (``launch``: those after ``--``);
- under ``bash -c``, exactly as printed: each ``cardinal train ...`` line as a dry resolution
  (a ``cardinal`` shim on PATH runs ``cardinal recipe show`` with the same arguments, which also
  checks a ``--resume``), each ``cardinal eval``/``cardinal recipe`` line for real; the run
  directories they name are made first as tiny real runs.
Not run (they need the network, minutes, other hosts or secrets): pip, pytest, ``cardinal
launch``/``server``, torchrun, export. The Python example runs in-process, and from the parent
folder of a checkout named ``cardinal`` (the src layout keeps the checkout from shadowing the package).
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cardinal import cli
from cardinal.recipe import load

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]  # the README first, then the manual's pages


def python_blocks(pages: list[Path] = PAGES) -> list[str]:
    return [block for page in pages for block in re.findall(r"```python\n(.*?)```", page.read_text(), re.S)]


def bash_lines(pages: list[Path] = PAGES) -> list[str]:
    """Every command of the pages' bash blocks, continuation lines joined, each once (README first)."""
    lines = []
    for page in pages:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S):
            lines += [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    return list(dict.fromkeys(lines))


def cardinal_args(line: str) -> list[str] | None:
    """The arguments a line gives the ``cardinal`` command (None: the line runs something else)."""
    words = shlex.split(line, comments=True)
    while words and re.match(r"^\w+=", words[0]):  # VAR=value before the command
        words = words[1:]
    for command in ("&&", ";"):  # `pip install ... && cardinal train`: the last command
        if command in words:
            words = words[len(words) - words[::-1].index(command):]
    if words[:1] == ["cardinal"]:
        return words[1:]
    if words[:1] == ["torchrun"] and "cardinal.cli" in words:
        return words[words.index("cardinal.cli") + 1:]
    return None


def commands() -> list[list[str]]:
    readme = [args for args in map(cardinal_args, bash_lines([README])) if args is not None]
    assert len(readme) >= 5, "the README lost its cardinal commands"
    found = list(dict.fromkeys(tuple(args) for args in map(cardinal_args, bash_lines()) if args is not None))
    assert len(found) >= 20, "docs/ lost its cardinal commands"
    return [list(args) for args in found]


def resolve(args: list[str]) -> None:
    """Parse a command with the CLI's parser and resolve its recipe (no run directory needed)."""
    parsed = cli.parser().parse_args(args)
    if parsed.command == "launch":
        rest = parsed.train_args[1:] if parsed.train_args[:1] == ["--"] else parsed.train_args
        resolve(["train", *rest])
    elif parsed.command in ("train", "server"):  # with --resume too: its --set values name real keys
        load(parsed.recipe, parsed.set)


@pytest.mark.parametrize("args", commands(), ids=" ".join)
def test_every_cardinal_command_in_the_readme_and_docs_parses_and_resolves(args):
    try:
        resolve(args)
    except SystemExit as e:  # argparse's way of refusing
        pytest.fail(f"cardinal {' '.join(args)}: the parser refused it (exit {e.code})")


SHIM = """#!/bin/sh
# `cardinal train ARGS` resolves ARGS (cardinal recipe show ARGS) instead of training
if [ "$1" = train ]; then shift; exec "{python}" -m cardinal.cli recipe show "$@"; fi
exec "{python}" -m cardinal.cli "$@"
"""


def dry_lines() -> list[str]:
    """The documented subset run under bash: the lines that run cardinal train, eval or recipe
    (of the README and docs/; a command printed twice runs once, as the README prints it)."""
    lines = {}
    for line in bash_lines():
        runs = shlex.split(line, comments=True)[:1] == ["cardinal"]
        if runs and cardinal_args(line)[:1] in (["train"], ["eval"], ["recipe"]):
            lines.setdefault(tuple(cardinal_args(line)), line)
    return list(lines.values())


@pytest.mark.slow
def test_the_train_and_eval_lines_of_the_readme_and_docs_work_in_bash_as_printed(tmp_path):
    from helpers.recipes import tiny_recipe
    from cardinal.train import Trainer

    lines = dry_lines()
    assert any(line.startswith("cardinal train") for line in lines), "the README and docs lost their train lines"
    runs = set()
    for line in lines:
        parsed = cli.parser().parse_args(cardinal_args(line))
        runs.add(getattr(parsed, "resume", None) or getattr(parsed, "run_dir", None))
    for run in sorted(filter(None, runs)):  # the runs the lines resume or evaluate: one tiny epoch each
        Trainer(tiny_recipe(tmp_path), tmp_path / run, progress=False).fit()
    eval_tsv = next((tmp_path / "data").rglob("eval.tsv"))  # the tiny runs' generated Criteo-layout file
    for name in set(re.findall(r"\b[\w-]+\.tsv\b", " ".join(lines))):  # the files the lines name (day_3.tsv)
        (tmp_path / name).write_bytes(eval_tsv.read_bytes())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cardinal").write_text(SHIM.format(python=sys.executable))
    (bin_dir / "cardinal").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT / "src")}
    for line in lines:
        done = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, f"{line}\n{done.stderr[-2000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("page", [page for page in PAGES if python_blocks([page])], ids=lambda page: page.name)
def test_python_examples_run(page):
    for block in python_blocks([page]):
        exec(compile(block, page.name, "exec"), {})


def test_the_python_examples_are_still_there():
    assert len(python_blocks()) >= 2, "the README and docs lost their Python examples"


@pytest.mark.slow
def test_readme_python_example_runs_from_the_parent_folder_of_a_checkout_named_cardinal(tmp_path):
    """`python` started beside a checkout named cardinal puts that folder first on sys.path; with
    the src layout the checkout holds no package, so the installed one is imported."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if os.environ.get("PYTHONPATH"):  # how the tests are run here: this checkout's src comes after the cwd
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    where = tmp_path / "elsewhere"
    where.mkdir()
    probe = "import importlib.util as u; s = u.find_spec('cardinal'); print(s.origin if s and s.origin else '')"
    origin = subprocess.run([sys.executable, "-c", probe], cwd=where, env=env, capture_output=True, text=True,
                            timeout=60).stdout.strip()
    if not origin:
        pytest.skip("cardinal is not importable outside its checkout: install it (pip install -e .) or set "
                    "PYTHONPATH=src to test that a checkout named cardinal does not shadow it")
    checkout = tmp_path / "cardinal"  # what a used checkout holds: src/, tests/, and data/ and runs/ it made
    checkout.mkdir()
    (checkout / "src").symlink_to(ROOT / "src")
    (checkout / "README.md").write_bytes(README.read_bytes())
    for folder in ("data", "runs", "tests"):
        (checkout / folder).mkdir()
    for block in python_blocks():
        code = "import cardinal; print(cardinal.__file__)\n" + block
        done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert Path(done.stdout.splitlines()[0]).resolve() == Path(origin).resolve()


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # a "# comment" in a block is no heading
    return {slug(heading) for heading in re.findall(r"^#{1,6} (.+)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    links = re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", text)
    broken = []
    for link in links:
        if re.match(r"^[a-z][a-z+.-]*:", link):  # https:, mailto: ...: not this checkout's
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists() or ROOT not in target.parents:
            broken.append(f"{link}: no file {path}")
        elif anchor and (target.suffix != ".md" or anchor not in anchors(target)):
            broken.append(f"{link}: no heading #{anchor} in {target.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_readme_links_every_page_of_docs():
    linked = {(ROOT / link).resolve() for link in re.findall(r"\]\((docs/[^)#\s]+)", README.read_text())}
    unlinked = [page.name for page in PAGES[1:] if page.resolve() not in linked]
    assert not unlinked, f"docs/ pages the README does not link to: {unlinked}"
