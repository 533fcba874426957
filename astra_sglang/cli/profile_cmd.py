"""``astra-sglang profile [options] -- <sglang server arguments>``: the hot list of a model's forward.

Each kernel's share of the step's GPU time, attributed to the op id it belongs to (from the committed manifests)
or to a group (GEMM, attention library, NCCL, torch elementwise, other), with each op's status, and the three ops
most worth optimizing with the command for each. On a GPU host it runs SGLang's one_batch forward itself;
anywhere, ``--trace FILE`` attributes a recorded torch.profiler chrome trace instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from astra_sglang.cli.args import at_least_one, existing_file, positive_float
from astra_sglang.errors import AstraError

PHASES = ("decode", "prefill", "both")
KERNEL_WIDTH = 64  # kernel names are C++ signatures: the table shows their head, --json the whole name


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("profile", help="which kernels (and ops) a model's forward spends its GPU time in",
                              description=__doc__)
    p.add_argument("--trace", type=Path, action="append", default=[], metavar="FILE",
                   help="attribute a recorded chrome trace (.json/.json.gz) instead of running; repeatable")
    p.add_argument("--config", metavar="NAME", help="write a config-only model folder (llama3-8b, qwen3-8b, "
                   "qwen3-30b-a3b, mixtral-8x7b, deepseek-v2-lite) and profile it with --load-format dummy")
    p.add_argument("--only-config", action="store_true", help="with --config: write the folder and stop")
    p.add_argument("--out", type=Path, default=Path("profile-out"),
                   help="folder for the config model (<out>/model-<NAME>), traces and timings")
    p.add_argument("--batch-size", type=at_least_one, nargs="+", default=None, metavar="BS",
                   help="batch sizes (default 1 32 128; with --trace: read from one_batch's file name)")
    p.add_argument("--input-len", type=at_least_one, default=None,
                   help="prompt tokens per request (default 512; with --trace: read from one_batch's file name)")
    p.add_argument("--output-len", type=at_least_one, default=None,
                   help="tokens generated per request (default 16; with --trace: read from one_batch's file name)")
    p.add_argument("--phase", choices=PHASES, default=None,
                   help="which phase to profile (default decode; with --trace: from one_batch's file name)")
    p.add_argument("--steps", type=at_least_one, default=None, metavar="N",
                   help="decode steps profiled (default 1); with --trace: steps the trace holds when it has no "
                   "ProfilerStep markers (default: the whole trace is one step)")
    p.add_argument("--model-config", type=existing_file, metavar="FILE",
                   help="with --trace: the model's config.json, to count the bytes the covered ops move by their "
                   "contracts (decode/extend attention, fused_add_rmsnorm, silu_and_mul)")
    p.add_argument("--copy-ceiling", type=positive_float, metavar="GBPS",
                   help="with --trace: the device's copy ceiling in GB/s, for the %% copy ceiling column")
    p.add_argument("--patch-log", type=Path, metavar="FILE",
                   help="with --trace: a run's log holding its ASTRA-PATCHES line, for the patches' served calls")
    p.add_argument("--extracted", type=Path, default=None,
                   help="extracted ops root (default: $ASTRA_SGLANG_EXTRACTED_DIR or the bundled one)")
    p.add_argument("--compare", action="store_true",
                   help="with two --trace files (patches off, then on): each op's and group's GPU us per step in "
                   "both, and the difference, largest change first")
    p.add_argument("--prefill-chunk-tokens", type=at_least_one, default=None, metavar="N",
                   help="one_batch's prefill in groups of requests of at most N tokens, merged into one decode batch "
                        "as SGLang's scheduler merges prefilled requests: for a batch whose one-shot prefill does "
                        "not fit beside its KV pool (batch 32 at 8k tokens on an 80 GB card). The prefill hot list "
                        "is then the groups' together")
    p.add_argument("--json", action="store_true", help="print the hot lists and the top ops as JSON")
    p.add_argument("--png", type=Path, metavar="FILE", help="write a bar chart of the hot lists (needs matplotlib)")
    p.add_argument("sglang_args", nargs=argparse.REMAINDER, metavar="SGLANG_ARGS",
                   help="sglang server arguments for one_batch, after `--` (e.g. -- --model-path M)")
    p.set_defaults(handler=cmd_profile)


def cmd_profile(args: argparse.Namespace) -> int:
    from astra_sglang.patches.registry import op_folder
    from astra_sglang.profile import attribution as at
    from astra_sglang.profile.traffic import load_config

    sglang_args = [a for a in args.sglang_args if a != "--"]
    if args.trace and (args.config or sglang_args):
        raise AstraError("--trace attributes a recorded trace: it takes no --config and no server arguments")
    if args.compare and len(args.trace) != 2:
        raise AstraError("--compare needs exactly two --trace files: patches off, then patches on")
    if args.patch_log and not args.trace:
        raise AstraError("--patch-log goes with --trace (a run reads its own ASTRA-PATCHES line)")
    if (args.model_config or args.copy_ceiling) and not args.trace:
        raise AstraError("--model-config and --copy-ceiling go with --trace (a run reads the --model-path folder's "
                         "config.json and measures the ceiling)")
    if args.config:
        from astra_sglang.profile.configs import write_config_model

        model = write_config_model(args.config, args.out / f"model-{args.config.lower()}")
        print(f"config-only model: {model} (weights: --load-format dummy)", file=sys.stderr)
        if args.only_config:
            return 0
        if "--model-path" not in sglang_args:
            sglang_args += ["--model-path", str(model), "--load-format", "dummy"]
    elif args.only_config:
        raise AstraError("--only-config goes with --config NAME")
    extracted = args.extracted or op_folder("")
    if not extracted.is_dir():
        raise AstraError(f"no extracted ops root {extracted}")
    kmap = at.build_map(extracted)
    served = at.served_calls(_read(args.patch_log)) if args.patch_log else None
    patches = at.patch_info(served=served)
    if args.trace:
        config = load_config(args.model_config) if args.model_config else None
        lists = [_from_trace(path, args, kmap, patches, extracted, config) for path in args.trace]
    else:
        if not sglang_args:
            raise AstraError("nothing to run: give the server arguments after `--` (e.g. -- --model-path M), "
                             "--config NAME, or attribute a recorded trace with --trace FILE")
        from astra_sglang.profile.runner import run_profile

        lists = run_profile(sglang_args, args.batch_size or [1, 32, 128], args.input_len or 512,
                            args.output_len or 16, args.phase or "decode", args.steps or 1, args.out, kmap, patches,
                            extracted, prefill_chunk_tokens=args.prefill_chunk_tokens or 0)
    if args.compare:
        from astra_sglang.profile.compare import compare

        comparison = compare(lists[0], lists[1])
        if args.json:
            print(json.dumps(comparison.to_json(), indent=2))
        else:
            show_comparison(comparison)
        return 0
    top = at.top_ops(lists)
    if args.png:
        write_png(lists, args.png)
    if args.json:
        print(json.dumps({"hot_lists": [hl.to_json() for hl in lists],
                          "top": [t.__dict__ for t in top]}, indent=2))
    else:
        show(lists, top)
    return 0


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError as e:
        raise AstraError(f"cannot read {path}: {e.strerror}") from None


def _from_trace(path: Path, args: argparse.Namespace, kmap: Any, patches: Any, extracted: Path,
                config: dict[str, Any] | None) -> Any:
    """One recorded trace's hot list; phase, batch size and lengths from the arguments, else from one_batch's file
    name. With a model config, the covered ops' bytes at those dims (the decode context as the runner profiles it:
    the middle profiled step after its warm-up; the first decode step when the output length is unknown)."""
    from astra_sglang.profile.attribution import hot_list
    from astra_sglang.profile.runner import decode_context
    from astra_sglang.profile.trace import one_batch_name, summarize
    from astra_sglang.profile.traffic import count, model_dtype

    named = one_batch_name(path)
    bs = args.batch_size[0] if args.batch_size and len(args.batch_size) == 1 else named.get("batch_size")
    phase = args.phase or named.get("phase")
    traffic = None
    if config is not None:
        if bs is None or phase not in ("decode", "prefill"):
            raise AstraError(f"{path.name}: --model-config needs the batch size and phase (decode or prefill): give "
                             "--batch-size BS and --phase, or a trace named by one_batch")
        input_len = args.input_len or named.get("input_len") or 512
        output_len = args.output_len or named.get("output_len")
        context = decode_context(input_len, output_len, args.steps or 1)
        traffic = count(extracted, config, phase, bs, input_len, context, model_dtype(config),
                        source=str(args.model_config))
    return hot_list(summarize(path, steps=args.steps), kmap, patches, phase, bs, traffic, args.copy_ceiling)


def _cut(text: str, width: int = KERNEL_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def show(lists: list[Any], top: list[Any]) -> None:
    """The hot lists as tables (rich on a terminal, plain aligned text elsewhere), then the top ops."""
    from astra_sglang.cli.output import Table, console, literal

    con = console()
    for hl in lists:
        where = ", ".join(x for x in (hl.phase, f"batch {hl.batch_size}" if hl.batch_size else None) if x)
        timing = f"{hl.gpu_us_per_step:.1f} us of GPU kernels per step (graphs off)"
        if hl.step_time_us is not None:
            timing += f"; step time {hl.step_time_us:.1f} us (graphs on)"
        t = Table(title=f"{where or Path(hl.trace).name}: {timing}", caption="; ".join(hl.notes))
        for col in ("Kernel", "Op / group", "Share %", "us/call", "Calls/step", "Bytes/op call", "% copy ceiling",
                    "Step % at ceiling", "Status"):
            t.add_column(col)
        for r in hl.rows:
            op = f"one of: {', '.join(r.candidates)}" if r.candidates else r.op
            gain = "-" if r.ceiling_gain_pct is None else f"{r.ceiling_gain_pct:.1f}"
            t.add_row(literal(_cut(r.kernel)), literal(op), f"{r.share:.1f}", f"{r.us_per_call:.2f}",
                      f"{r.calls_per_step:g}", r.bytes_moved, r.pct_copy_ceiling, gain, literal(r.status))
        con.print(t)
    if not top:
        con.print("No op with a contract in these hot lists: every kernel is in a group (see the table).")
        return
    con.print(f"The {len(top)} op(s) most worth optimizing:")
    for i, t in enumerate(top, 1):
        where = ", ".join(x for x in (t.phase, f"batch {t.batch_size}" if t.batch_size else None) if x)
        bound = ("" if t.ceiling_gain is None else
                 f"; at most {t.ceiling_gain:.1f}% of the step back at 100% of the copy ceiling")
        con.print(literal(f"  {i}. {t.op_id}: {t.share:.1f}% of step GPU time ({where or 'trace'}; {t.status}{bound})"))
        con.print(literal(f"     {t.command}"))


def show_comparison(c: Any, rows: int = 20, ops: int = 3) -> None:
    """The two traces' GPU time per step by op or group, largest change first; the rest summed in one line. Then
    the kernels of the ``ops`` rows that changed most, each with its time a call in both traces."""
    from astra_sglang.cli.output import Table, console, literal

    con = console()
    t = Table(title=f"GPU us per step: A {c.a_gpu_us_per_step:.1f} -> B {c.b_gpu_us_per_step:.1f} "
              f"({c.delta_us:+.1f})", caption=f"A: {c.a_trace}; B: {c.b_trace}")
    for col in ("Op / group", "A us/step", "B us/step", "B - A", "A calls/step", "B calls/step"):
        t.add_column(col)
    for r in c.rows[:rows]:
        t.add_row(literal(r.key), f"{r.a_us_per_step:.1f}", f"{r.b_us_per_step:.1f}", f"{r.delta_us:+.1f}",
                  f"{r.a_calls_per_step:g}", f"{r.b_calls_per_step:g}")
    rest = c.rows[rows:]
    if rest:
        t.add_row(f"{len(rest)} more", f"{sum(r.a_us_per_step for r in rest):.1f}",
                  f"{sum(r.b_us_per_step for r in rest):.1f}", f"{sum(r.delta_us for r in rest):+.1f}", "", "")
    con.print(t)
    k = Table(title=f"Kernels of the {min(ops, len(c.rows))} rows that changed most (us a call: time / calls)")
    for col in ("Op / group: kernel", "A us/call", "B us/call", "A us/step", "B us/step", "B - A"):
        k.add_column(col)
    for r in c.rows[:ops]:
        for kr in c.kernels.get(r.key, []):
            per_call = [f"{us / n:.2f}" if n else "-" for us, n in ((kr.a_us_per_step, kr.a_calls_per_step),
                                                                    (kr.b_us_per_step, kr.b_calls_per_step))]
            k.add_row(literal(f"{r.key}: {_cut(kr.key, 60)}"), *per_call, f"{kr.a_us_per_step:.1f}",
                      f"{kr.b_us_per_step:.1f}", f"{kr.delta_us:+.1f}")
    con.print(k)


def write_png(lists: list[Any], path: Path, rows: int = 15) -> Path:
    """A horizontal bar chart per hot list: the hottest kernels' shares, labelled with their op or group."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise AstraError("--png needs matplotlib (pip install matplotlib)") from None
    fig, axes = plt.subplots(len(lists), 1, figsize=(11, 0.35 * rows * len(lists) + 1.2), squeeze=False)
    for ax, hl in zip(axes[:, 0], lists):
        shown = hl.rows[:rows][::-1]
        labels = [f"{r.short_name or r.group or 'ambiguous'}: {_cut(r.kernel, 36)}" for r in shown]
        ax.barh(labels, [r.share for r in shown], color=["tab:blue" if r.group is None else "tab:gray" for r in shown])
        ax.set_xlabel("% of step GPU kernel time")
        where = ", ".join(x for x in (hl.phase, f"batch {hl.batch_size}" if hl.batch_size else None) if x)
        ax.set_title(f"{where or Path(hl.trace).name} ({hl.gpu_us_per_step:.0f} us/step)", fontsize=10)
        ax.tick_params(axis="y", labelsize=7)
    fig.subplots_adjust(left=0.42, right=0.97, hspace=0.5)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
