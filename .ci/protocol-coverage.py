#!/usr/bin/env python3
"""Generates docs/protocol-coverage.md from the test sources.

A test covers a rule when its name starts with the rule (`s07_...`, `d02_d03_...`) or when its body
names the rule (`// ACK (rule S4)`, `rules S10, D8`).

    python3 .ci/protocol-coverage.py          # rewrite the document
    python3 .ci/protocol-coverage.py --check  # exit 1 when the document is stale

Rules without a test are listed on stderr and shown as **none** in the table.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "protocol-coverage.md"
CRATES = ["xds-proto", "xds-core", "xds-cache", "xds-server", "xds-etcd", "examples"]

# The rules, in the order of the protocol rules document, with their short titles.
RULES = [
    ("S1", "Independence"), ("S2", "Node"), ("S3", "Type URL"), ("S4", "ACK"), ("S5", "NACK"),
    ("S6", "No spin"), ("S7", "Stale nonce"), ("S8", "Supersede"), ("S9", "Names"),
    ("S10", "Wildcard"), ("S11", "Full state"), ("S12", "Newly requested"),
    ("S13", "Later existence"), ("S14", "Unique names"), ("S15", "Reconnect"),
    ("S16", "Versions are per type"),
    ("O1", "Make before break (ADS)"), ("O2", "Warming"), ("O3", "Consistency"),
    ("D1", "Nonce"), ("D2", "Subscribe"), ("D3", "Unsubscribe"), ("D4", "Only changes"),
    ("D5", "Removal"), ("D6", "Does not exist"), ("D7", "Reconnect"), ("D8", "Wildcard"),
    ("D9", "Aliases"), ("D10", "VHDS"),
    ("R1", "Fetch"), ("R2", "Long poll"), ("R3", "Bad JSON"), ("F1", "Files"),
    ("C1", "xdstp names"), ("C2", "Glob collections"), ("C3", "On-demand"),
    ("C4", "Resource errors"), ("C5", "Control plane identity"),
]
KNOWN = {rule for rule, _ in RULES}

HEADER = """# Protocol coverage

Every rule of the protocol (numbered as in the project's protocol rules) and the tests that
check it. A test names its rule in its name (`s07_...`) or in its body (`// rule S7`); this table
is generated from the test sources by `python3 .ci/protocol-coverage.py` (`.ci/run` checks that it
is current).

The property tests in `xds-core/tests/properties.rs` check S6, S7, S14, D7 and the convergence
of SotW and delta clients over random request sequences and resource changes.

| rule | statement | tests |
|---|---|---|
"""

TEST_ATTR = re.compile(r"^\s*#\[(?:tokio::)?test\b")
FN = re.compile(r"^\s*(?:pub\s+)?(?:async\s+)?fn\s+(\w+)")
NAME_RULES = re.compile(r"^((?:[sodrfc]\d{1,2}_)+)")
BODY_RULES = re.compile(r"\brules? ((?:[SODRFC]\d+)(?:(?:, | and | or |/)[SODRFC]\d+)*)")


def rules_of_name(name):
    m = NAME_RULES.match(name)
    if not m:
        return set()
    return {part[0].upper() + str(int(part[1:])) for part in m.group(1).split("_") if part}


def tests_in(path):
    """(test name, body text) for each test function in a file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    i = 0
    while i < len(lines):
        if TEST_ATTR.match(lines[i]):
            j = i + 1
            while j < len(lines) and not FN.match(lines[j]):
                j += 1
            if j == len(lines):
                break
            name = FN.match(lines[j]).group(1)
            # The body ends at the first line that closes the function at its own indentation.
            indent = len(lines[j]) - len(lines[j].lstrip())
            k = j + 1
            while k < len(lines) and not (
                lines[k].startswith(" " * indent + "}") and len(lines[k]) - len(lines[k].lstrip()) == indent
            ):
                k += 1
            out.append((name, "\n".join(lines[j : k + 1])))
            i = k + 1
        else:
            i += 1
    return out


def coverage():
    by_rule = {rule: set() for rule in KNOWN}
    for crate in CRATES:
        base = ROOT / crate
        if not base.exists():
            continue
        for path in sorted(base.rglob("*.rs")):
            if "target" in path.parts:
                continue
            rel = path.relative_to(ROOT).as_posix()
            for name, body in tests_in(path):
                rules = rules_of_name(name)
                for m in BODY_RULES.finditer(body):
                    rules |= set(re.findall(r"[SODRFC]\d+", m.group(1)))
                for rule in rules & KNOWN:
                    by_rule[rule].add((rel, name))
    return by_rule


def render(by_rule):
    rows = []
    for rule, title in RULES:
        tests = "<br>".join(f"`{path}` `{name}`" for path, name in sorted(by_rule[rule]))
        rows.append(f"| {rule} | {title} | {tests or '**none**'} |")
    return HEADER + "\n".join(rows) + "\n"


def main():
    by_rule = coverage()
    text = render(by_rule)
    untested = [rule for rule, _ in RULES if not by_rule[rule]]
    if "--check" in sys.argv[1:]:
        stale = not DOC.exists() or DOC.read_text(encoding="utf-8") != text
        if stale:
            print("docs/protocol-coverage.md is stale: run python3 .ci/protocol-coverage.py", file=sys.stderr)
        if untested:
            print("rules without a test: " + ", ".join(untested), file=sys.stderr)
        sys.exit(1 if stale else 0)
    DOC.write_text(text, encoding="utf-8")
    if untested:
        print("rules without a test: " + ", ".join(untested), file=sys.stderr)


if __name__ == "__main__":
    main()
