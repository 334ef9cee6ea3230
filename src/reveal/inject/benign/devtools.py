"""A developer's ordinary work on the host: a commit, a short compile, a package install.

Each runs once in the activity's scratch directory and ends by itself; ``end()`` removes
the repository, the sources and binaries, or the installed package.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import ClassVar

from reveal.inject.benign.base import WORK_SCRIPT, BenignActivity, register

_GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_AUTHOR_NAME": "rvbenign", "GIT_AUTHOR_EMAIL": "rvbenign@localhost",
            "GIT_COMMITTER_NAME": "rvbenign", "GIT_COMMITTER_EMAIL": "rvbenign@localhost"}

_GIT_SCRIPT = """
set -e
git init -q repo
cd repo
i=0
while [ "$i" -lt "$1" ]; do
  printf 'def f%d(x):\\n    return x + %d\\n' "$i" "$i" > "mod$i.py"
  i=$((i + 1))
done
git add -A
git commit -q -m "add $1 modules"
"""

_C_SOURCE = """
#include <stdio.h>
#include <stdlib.h>

typedef struct { int key; double value; } item;

static double poly(double x, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s = s * x + i;
  return s;
}

static int cmp(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

static void fill(item *items, int n) {
  for (int i = 0; i < n; i++) {
    items[i].key = (i * 7919) % n;
    items[i].value = poly(i * 0.001, 8);
  }
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 1000;
  item *items = malloc(sizeof(item) * n);
  int *keys = malloc(sizeof(int) * n);
  fill(items, n);
  for (int i = 0; i < n; i++) keys[i] = items[i].key;
  qsort(keys, n, sizeof(int), cmp);
  printf("%d %f\\n", keys[n / 2], items[n / 2].value);
  free(items);
  free(keys);
  return 0;
}
"""


@register
class GitCommit(BenignActivity):
    kind = "git_commit"
    subsystem = "storage"
    description = "git init, write small files, git add, git commit"
    self_ending = True
    INTENSITIES: ClassVar = {"default": {"files": 200}}
    tools = (("git", "git"),)

    def begin(self) -> None:
        self.start_process(["sh", "-c", _GIT_SCRIPT, "git_commit", str(self.params["files"])],
                           env=_GIT_ENV)


@register
class ShortCompile(BenignActivity):
    kind = "short_compile"
    subsystem = "cpu"
    description = "compile a small generated C file with gcc -O2 a few times"
    self_ending = True
    INTENSITIES: ClassVar = {"default": {"builds": 3}}
    tools = (("gcc", "gcc"),)

    def begin(self) -> None:
        (self.make_scratch() / "prog.c").write_text(_C_SOURCE)
        script = ('i=0; while [ "$i" -lt "$1" ]; do gcc -O2 -o prog prog.c || exit 1; '
                  'i=$((i + 1)); done; ./prog 100000')
        self.start_process(["sh", "-c", script, "short_compile", str(self.params["builds"])])


@register
class PackageInstall(BenignActivity):
    kind = "package_install"
    subsystem = "software"
    description = "build a tiny wheel and pip-install it into a target directory (no network)"
    self_ending = True
    INTENSITIES: ClassVar = {"default": {"package": "rvbenign_pkg"}}

    def check_host(self) -> str | None:
        if importlib.util.find_spec("pip") is None:
            return "pip is not installed for this interpreter"
        return None

    def begin(self) -> None:
        name = str(self.params["package"])
        script = ('"$1" "$2" wheel . "$3" && "$1" -m pip install --quiet --no-index '
                  '--no-deps --disable-pip-version-check --no-cache-dir --target site '
                  '"./$3-1.0-py3-none-any.whl"')
        self.start_process(["sh", "-c", script, "package_install", sys.executable,
                            str(WORK_SCRIPT), name])
