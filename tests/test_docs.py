#!/usr/bin/env python3
"""Every example in docs/language.md that shows its output (a ```kiln block
followed by a ```text block) gives exactly that output.

Usage: python3 tests/test_docs.py build/kiln
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCK = re.compile(r"```kiln\n((?:(?!```).)*)```\n\n```text\n((?:(?!```).)*)```", re.S)


def main():
    kiln = os.path.abspath(sys.argv[1])
    passed = failed = 0
    for doc in ("language.md",):
        text = open(os.path.join(HERE, "..", "docs", doc)).read()
        for i, (code, want) in enumerate(BLOCK.findall(text)):
            p = subprocess.run([kiln, "run", "-e", code], capture_output=True, text=True, timeout=120)
            got = (p.stdout + p.stderr).strip()
            first = code.strip().splitlines()[0]
            if got == want.strip():
                passed += 1
                print("ok   %s example %d: %s" % (doc, i + 1, first))
            else:
                failed += 1
                print("FAIL %s example %d: %s\n--- want\n%s--- got\n%s" % (doc, i + 1, first, want, got))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
