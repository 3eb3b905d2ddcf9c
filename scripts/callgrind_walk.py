"""Instructions per record token of the per-token path, counted by callgrind: a profiling aid, not a benchmark.

Timings on this 2-core machine move by 10% between runs of the same code; instruction counts move by 0.1%, so two
builds can be compared change by change. The walk is ``bench masks``' gold walk (meeting by default): decoders are
primed first, outside the count, then instrumentation is switched on and only the calls an engine makes are counted
(``certain_run``, ``consume`` and ``fill_mask`` at a choice, entered from Python). Needs valgrind
(``apt-get install valgrind``) and the compiled build (the counted entry points are its wrappers).

    python scripts/callgrind_walk.py [--workload meeting] [--records 10] [--vocab qwen3] [--gc] [--out DIR]

Prints the tokens, the instructions and their ratio; the callgrind file stays in ``--out`` for
``callgrind_annotate --inclusive=yes``. ``CG_EXTRA`` in the environment adds valgrind options (e.g.
``--separate-callers5=PyObject_Hash``: which compiled functions hash what).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENTRY_POINTS = ("CPyPy_decoder___Decoder___certain_run", "CPyPy_decoder___Decoder___consume",
                "CPyPy_decoder___Decoder___fill_mask")


def walk(workload: str, records: int, vocab_name: str, flags: Path, keep_gc: bool = False) -> None:
    """The counted process: prime, say so, wait for the go, walk."""
    import copy
    import gc

    import numpy as np

    from factorspec_cp import _native
    from factorspec_cp.bench import masks as bm
    from factorspec_cp.bench.masks import VOCABS, problems

    if _native.BUILD != "compiled":
        raise SystemExit("callgrind_walk counts the compiled build's entry points: build it (pip install -e .)")
    vocab = VOCABS[vocab_name]()
    vocab.encode("{}")
    wanted = records + 1  # (the first one is skipped, as bench masks' warm-up)
    args = {"meeting": (0, 0, wanted), "calendar": (0, wanted, 0), "trip": (wanted // 8 + 1, 0, 0),
            "tool-call": (0, 0, 0, wanted)}
    chosen = [(spec, gold) for _, spec, gold in problems(*args[workload])][1:1 + records]
    by_bytes, longest, specials = bm.token_lookup(vocab)
    decoders = []
    for spec, gold in chosen:
        dec = copy.deepcopy(spec).decoder(vocab, mode="canonical").prime()
        decoders.append((dec, dec.layout.render(gold).encode()))
    row = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
    gc.collect()
    if not keep_gc:
        gc.disable()
    (flags / "ready").write_text(str(os.getpid()))
    while not (flags / "go").exists():
        time.sleep(0.1)
    n = 0  # tokens
    for dec, target in decoders:
        while not dec.is_terminated():
            run = dec.certain_run(1)
            if run:
                tok = run[0]
            else:
                dec.fill_mask(row)
                tok = bm.gold_token(row, by_bytes, longest, specials, target[len(dec.output()):])
            dec.consume(tok)
            n += 1
    (flags / "tokens").write_text(str(n))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="meeting", choices=["meeting", "calendar", "trip", "tool-call"])
    ap.add_argument("--records", type=int, default=10)
    ap.add_argument("--vocab", default="qwen3")
    ap.add_argument("--gc", action="store_true", help="keep the garbage collector running in the walk, as bench masks "
                    "does (its collections, triggered by the walk's allocations, are then counted)")
    ap.add_argument("--out", type=Path, default=None, help="where the callgrind file goes (default: a new folder)")
    ap.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        walk(args.workload, args.records, args.vocab, args.child, args.gc)
        return
    out = args.out or Path(tempfile.mkdtemp(prefix="callgrind-walk-"))
    out.mkdir(parents=True, exist_ok=True)
    flags = Path(tempfile.mkdtemp(prefix="callgrind-flags-"))
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
           *os.environ.get("CG_EXTRA", "").split(),
           *[f"--toggle-collect={e}" for e in ENTRY_POINTS], f"--callgrind-out-file={out / 'callgrind.out'}",
           sys.executable, __file__, "--workload", args.workload, "--records", str(args.records), "--vocab",
           args.vocab, *(["--gc"] if args.gc else []), "--child", str(flags)]
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
    while not (flags / "ready").exists():
        if proc.poll() is not None:
            raise SystemExit(f"the walk ended before priming finished (exit {proc.returncode})")
        time.sleep(0.5)
    subprocess.run(["callgrind_control", "-i", "on", (flags / "ready").read_text()], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (flags / "go").touch()
    if proc.wait() != 0:
        raise SystemExit(f"the walk failed (exit {proc.returncode})")
    tokens = int((flags / "tokens").read_text())
    summary = subprocess.run(["callgrind_annotate", str(out / "callgrind.out")], capture_output=True, text=True,
                             check=True).stdout
    total = next(int(line.split()[0].replace(",", "")) for line in summary.splitlines() if "PROGRAM TOTALS" in line)
    gc_on = " (gc on)" if args.gc else ""
    print(f"{args.workload}/{args.vocab}, {args.records} records{gc_on}: {tokens} tokens, {total:,} instructions, "
          f"{total // tokens:,} per token ({out / 'callgrind.out'})")


if __name__ == "__main__":
    main()
