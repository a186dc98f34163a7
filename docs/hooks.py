"""MkDocs hook: the pages include repository files (the README's marked sections, the results' READMEs), so the
docs and the README never disagree. A line `--8<-- "FILE"` or `--8<-- "FILE:SECTION"` is replaced by that file (or
the lines between its `[start:SECTION]` and `[end:SECTION]` markers). Links inside an included file are resolved
against the file's folder, and a page's own links against `docs/`: one to a file the site includes, or to a page,
becomes a link to that page; one to another file of the repository becomes its path in code; one to nothing stays a
link, so `mkdocs build --strict` fails on it."""
import re
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]
PAGES = {  # repository file -> the page that includes it
    "README.md": "index.md",
    "docs/measurements.md": "measurements.md",
    "dearicl/README.md": "bandits.md",
    "studies/tables/README.md": "reproducing.md#recorded-reward-tables",
    "studies/embedded-2026-11/README.md": "reproducing.md#the-study-with-gemma-3-270m",
    "studies/mutation/README.md": "reproducing.md#mutation-testing",
}
INCLUDE = re.compile(r'^--8<-- "([^":]+)(?::([\w-]+))?"\s*$', re.M)
LINK = re.compile(r"\[([^\]]*)\]\(([^)#\s]+)(#[^)\s]*)?\)")


def section(path: Path, name: str | None) -> str:
    text = path.read_text(encoding="utf-8")
    if name is None:
        return text
    start, end = f"--8<-- [start:{name}]", f"--8<-- [end:{name}]"
    lines = text.splitlines()
    begin = next(i for i, line in enumerate(lines) if start in line)  # a missing section fails the build
    finish = next(i for i, line in enumerate(lines) if end in line)
    return "\n".join(lines[begin + 1:finish])


def resolve_links(text: str, folder: PurePosixPath) -> str:
    def rewrite(match):
        label, target, anchor = match.group(1), match.group(2), match.group(3) or ""
        if re.match(r"[a-z]+://", target):
            return match.group(0)
        path = str(PurePosixPath(*(folder / target).parts))
        parts = []
        for part in path.split("/"):  # normalise a/../b
            if part == "..":
                parts.pop()
            elif part != ".":
                parts.append(part)
        path = "/".join(parts)
        if path in PAGES:
            return f"[{label}]({PAGES[path]})"
        if path.startswith("docs/") and path.endswith(".md") and (ROOT / path).exists():  # another page
            return f"[{label}]({path.removeprefix('docs/')}{anchor})"
        if path.startswith("docs/") and (ROOT / path).is_file():  # an image the site copies from docs/ (docs/img)
            return match.group(0)
        if (ROOT / path).exists():
            return f"{label} (`{path}`)"
        return match.group(0)

    return LINK.sub(rewrite, text)


def on_page_markdown(markdown, page, config, files):
    def include(match):
        rel = match.group(1)
        text = section(ROOT / rel, match.group(2))
        return resolve_links(text, PurePosixPath(rel).parent)

    return INCLUDE.sub(include, resolve_links(markdown, PurePosixPath("docs")))
