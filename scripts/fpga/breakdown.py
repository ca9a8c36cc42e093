#!/usr/bin/env python3
"""Where the area goes: per-instance totals of a hierarchical Yosys `stat` (synth -noflatten).

    scripts/fpga/breakdown.py <stat.txt> [max-depth]

Yosys prints each module's own cells and then the design hierarchy (one line per child module with
its instance count, indented two spaces per level). This adds every subtree up and prints the tree
to max-depth (default 4) with LUT4 / FF / carry / DSP / EBR per subtree, largest first. Module names
lose Yosys's $paramod hash. Counts are before flattening, so they add up to a little more than the
flat synthesis (cross-module optimization is missing), and are meant for comparing parts.
"""
import re
import sys
from collections import defaultdict

KINDS = (("LUT4", lambda c: c == "SB_LUT4"),
         ("FF", lambda c: c.startswith("SB_DFF")),
         ("CARRY", lambda c: c == "SB_CARRY"),
         ("DSP", lambda c: c == "SB_MAC16"),
         ("EBR", lambda c: c == "SB_RAM40_4K"))


def short(name):
    return re.sub(r"^\$paramod(\$[0-9a-f]+)?\\", "", name).split("\\")[0]


def parse(path):
    own = defaultdict(lambda: defaultdict(int))
    tree = []  # (depth, module, count)
    module = None
    in_hier = False
    for line in open(path, encoding="utf-8"):
        head = re.match(r"^=== (.+) ===$", line.strip())
        if head:
            module = head.group(1)
            in_hier = module == "design hierarchy"
            continue
        if in_hier:
            m = re.match(r"^( +)(\S+)\s+(\d+)$", line.rstrip("\n"))
            if m and not m.group(2).startswith("SB_"):
                tree.append(((len(m.group(1)) - 3) // 2, m.group(2), int(m.group(3))))
            elif tree and not line.strip():
                in_hier = False  # the hierarchy ends at the first blank line after it
            continue
        m = re.match(r"^\s+(\S+)\s+(\d+)$", line)
        if module and m:
            for kind, test in KINDS:
                if test(m.group(1)):
                    own[module][kind] += int(m.group(2))
    return own, tree


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    own, tree = parse(sys.argv[1])
    max_depth = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    if not tree:
        sys.exit(f"{sys.argv[1]}: no design hierarchy (synthesize with -noflatten)")
    # nodes: [depth, module, count, totals, children]
    nodes, stack = [], []
    for depth, module, count in tree:
        node = [depth, module, count, dict(own[module]), []]
        while stack and stack[-1][0] >= depth:
            stack.pop()
        (stack[-1][4] if stack else nodes).append(node)
        stack.append(node)

    def total(node):  # all `count` instances of node (within one instance of its parent)
        t = defaultdict(int, node[3])
        for child in node[4]:
            for k, v in total(child).items():
                t[k] += v
        t = {k: v * node[2] for k, v in t.items()}
        node.append(t)
        return t

    for root in nodes:
        total(root)
    print(f"{'instance':<44}{'LUT4':>7}{'FF':>7}{'CARRY':>7}{'DSP':>5}{'EBR':>5}")

    def show(node):
        depth, module, count, _, children, t = node
        if depth > max_depth:
            return
        label = "  " * depth + short(module) + (f" x{count}" if count > 1 else "")
        print(f"{label:<44}" + "".join(f"{t.get(k, 0):>{w}}" for k, w in
                                        (("LUT4", 7), ("FF", 7), ("CARRY", 7), ("DSP", 5), ("EBR", 5))))
        for child in sorted(children, key=lambda c: -c[5].get("LUT4", 0)):
            show(child)

    for root in nodes:
        show(root)


if __name__ == "__main__":
    main()
