"""Rewrite the README's console sessions with what the commands print today.

    python tests/readme_sessions.py          # rewrite README.md in place
    python tests/readme_sessions.py --check  # exit 1 when a session is out of date

Each ```console block is ``$ dflash-diag ...`` and its output, captured at the width
``tests/test_docs.py`` checks them at (stdout; stderr for a command that fails).  Blocks
with ``...`` elisions are left alone and listed.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COLUMNS = 110
BLOCK = re.compile(r"```console\n\$ (dflash-diag [^\n]*)\n(.*?)```", flags=re.S)


def printed(command: str) -> str:
    env = {**os.environ, "COLUMNS": str(COLUMNS), "TERM": "dumb"}
    args = [sys.executable, "-m", "dflash_diag", *shlex.split(command)[1:]]
    got = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env)
    out = got.stdout if got.returncode == 0 else got.stderr
    return "".join(line.rstrip() + "\n" for line in out.splitlines())


def main(check: bool) -> int:
    text = README.read_text(encoding="utf-8")
    stale = []

    def fresh(m: re.Match[str]) -> str:
        command, shown = m.group(1), m.group(2)
        if any(line.strip() == "..." for line in shown.splitlines()):
            print(f"left alone (elided): {command}")
            return m.group(0)
        now = printed(command)
        if now != shown:
            stale.append(command)
        return f"```console\n$ {command}\n{now}```"

    new = BLOCK.sub(fresh, text)
    for command in stale:
        print(f"{'stale' if check else 'rewritten'}: {command}")
    if not check and new != text:
        README.write_text(new, encoding="utf-8")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv[1:]))
