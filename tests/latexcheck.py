"""Compile a report's .tex tables with a real LaTeX (pdflatex), as a reader's paper would \\input them."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

# what the reports say they need (booktabs), with the font encoding a modern paper uses
WRAPPER = r"""\documentclass{article}
\usepackage[T1]{fontenc}
\usepackage[utf8]{inputenc}
\usepackage{booktabs}
\begin{document}
\input{report}
\clearpage
\end{document}
"""


def pdflatex() -> str | None:
    return shutil.which("pdflatex")


def latex_errors(tex: Path) -> str | None:
    """None when `tex` compiles inside WRAPPER; else the log's error lines."""
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(tex, Path(folder) / "report.tex")
        (Path(folder) / "doc.tex").write_text(WRAPPER, encoding="utf-8")
        done = subprocess.run([pdflatex(), "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "doc.tex"],
                              cwd=folder, capture_output=True, text=True, errors="replace", timeout=120)
        if done.returncode == 0:
            return None
        log = done.stdout.splitlines()
        errors = [i for i, line in enumerate(log) if line.startswith("!")]
        return "\n".join(log[errors[0]:errors[0] + 4]) if errors else "\n".join(log[-8:])
