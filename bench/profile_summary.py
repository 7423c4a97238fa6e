"""Summarise a py-spy ``--format raw`` profile (as written by ``bench/run.py --profile``): the
functions where samples land (leaf) and the ones they pass through (inclusive), in per cent.

    python3 bench/profile_summary.py bench/.cache/profile-collect-L.txt [N_LEAF] [N_INCLUSIVE]
"""
import collections
import sys


def main() -> None:
    path = sys.argv[1]
    n_leaf = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    n_incl = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    incl, leaf, total = collections.Counter(), collections.Counter(), 0
    for line in open(path):
        stack, _, count = line.rstrip().rpartition(" ")
        if not count.isdigit():
            continue
        c = int(count)
        total += c
        frames = stack.split(";")
        leaf[frames[-1]] += c
        for f in set(frames):
            incl[f] += c
    print(f"{total} samples")
    for f, c in leaf.most_common(n_leaf):
        print(f"{c / total:6.1%} leaf {f}")
    print()
    for f, c in incl.most_common(n_incl):
        print(f"{c / total:6.1%} incl {f}")


if __name__ == "__main__":
    main()
