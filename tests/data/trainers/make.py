"""Regenerate the log fixtures that real training libraries write.

Run with a Python that has torch (CPU), transformers, trl, accelerate, lightning,
loguru, rich, tensorboard and datasets installed (see README.md)::

    python tests/data/trainers/make.py            # every fixture
    python tests/data/trainers/make.py rich_w60   # some of them

Each fixture runs one of the scripts in ``scripts/`` for real, copied into a fresh
temporary folder as ``train.py`` and started there as ``python train.py ARGS >
NAME.log 2>&1`` would be: stdout and stderr both go to one file, stdout block-buffered
as it is when redirected (unless the fixture says ``PYTHONUNBUFFERED=1``), tqdm's
carriage returns and rich's escapes as the libraries wrote them.  The script writes the
truth from the library's own hooks to ``truth.jsonl``; it is kept as
``NAME.truth.jsonl``.  The only edit made to a log: the temporary folder's path and the
environment's prefix in warning lines become ``/home/user/run`` and ``/venv``.

Nothing is downloaded: models are built from configs, data are random token ids.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "scripts"

#: variables a session may carry that change what the libraries print
_CLEARED = ("PYTHONUNBUFFERED", "COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "TERM")
_CLEARED_PREFIX = ("TTY_",)
_FIXED = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_DISABLED": "true",
    # one thread: fast steps (so tqdm's 0.1 s redraw shows), no oversubscription
    "OMP_NUM_THREADS": "1",
    "TZ": "UTC",
}


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _CLEARED and not k.startswith(_CLEARED_PREFIX)
    }
    env.update(_FIXED)
    env.update(extra)
    return env


def _sanitize(path: Path, run_dir: Path) -> None:
    """Replace machine paths in the log (warnings name their source files)."""
    data = path.read_bytes()
    for old, new in (
        (str(run_dir.resolve()), "/home/user/run"),
        (str(run_dir), "/home/user/run"),
        (sys.prefix, "/venv"),
    ):
        data = data.replace(old.encode(), new.encode())
    path.write_bytes(data)


def run(
    name: str,
    script: str,
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    keep_log: bool = True,
) -> Path:
    """Run ``scripts/SCRIPT`` as ``python train.py ARGS > NAME.log 2>&1``; keep the
    log and ``NAME.truth.jsonl``.

    :returns: the run folder (temporary; the caller copies other outputs from it and
        removes it).
    """
    run_dir = Path(tempfile.mkdtemp(prefix=f"fixture-{name}-"))
    shutil.copy(SCRIPTS / script, run_dir / "train.py")
    log = HERE / f"{name}.log" if keep_log else run_dir / "console.log"
    started = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.run(
            [sys.executable, "train.py", *args],
            cwd=run_dir,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_env(env or {}),
        )
    if proc.returncode != 0:
        sys.exit(f"{name}: train.py exited {proc.returncode}; see {log}")
    _sanitize(log, run_dir)
    shutil.copy(run_dir / "truth.jsonl", HERE / f"{name}.truth.jsonl")
    print(f"{name}: {time.perf_counter() - started:.0f} s", flush=True)
    return run_dir


def _done(run_dir: Path) -> None:
    shutil.rmtree(run_dir, ignore_errors=True)


# ---- 1. Hugging Face Trainer stdout ---------------------------------------------------


def hf_trainer_steps1() -> None:
    """logging_steps=1, 200 steps, default tqdm bar; stdout redirected (block-buffered)."""
    _done(run("hf_trainer_steps1", "hf_trainer.py", ("--logging-steps", "1")))


def hf_trainer_steps1_unbuffered() -> None:
    """The same with PYTHONUNBUFFERED=1 (docker images, job scripts, ``python -u``)."""
    env = {"PYTHONUNBUFFERED": "1"}
    _done(run("hf_trainer_steps1_unbuffered", "hf_trainer.py", ("--logging-steps", "1"), env))


def hf_trainer_steps5_eval() -> None:
    """logging_steps=5, eval every 25 steps (eval bar and eval dicts), buffered."""
    args = ("--logging-steps", "5", "--eval-steps", "25")
    _done(run("hf_trainer_steps5_eval", "hf_trainer.py", args))


def hf_trainer_steps5_eval_unbuffered() -> None:
    """The same with PYTHONUNBUFFERED=1."""
    args = ("--logging-steps", "5", "--eval-steps", "25")
    env = {"PYTHONUNBUFFERED": "1"}
    _done(run("hf_trainer_steps5_eval_unbuffered", "hf_trainer.py", args, env))


# ---- 2. include_num_input_tokens_seen, with trainer_state.json ----------------------


def hf_trainer_tokens_seen() -> None:
    """include_num_input_tokens_seen=True: every train record has train_runtime too."""
    args = ("--logging-steps", "5", "--eval-steps", "50", "--tokens-seen", "--max-steps", "150")
    run_dir = run("hf_trainer_tokens_seen", "hf_trainer.py", args)
    shutil.copy(run_dir / "trainer_state.json", HERE / "hf_trainer_tokens_seen.trainer_state.json")
    _done(run_dir)


# ---- 3. TRL SFTTrainer ------------------------------------------------------------------


def trl_sft() -> None:
    """TRL's SFTTrainer: num_tokens (running total), mean_token_accuracy, entropy."""
    run_dir = run("trl_sft", "trl_sft.py")
    shutil.copy(run_dir / "trainer_state.json", HERE / "trl_sft.trainer_state.json")
    _done(run_dir)


# ---- 4. AutoTrain-style loguru callback --------------------------------------------------


def hf_trainer_loguru() -> None:
    """A TrainerCallback whose on_log does logger.info(logs); loguru's default sink
    (stderr, no colours when redirected), beside the Trainer's own bar and dicts."""
    args = ("--logging-steps", "5", "--max-steps", "100", "--loguru", "plain")
    _done(run("hf_trainer_loguru", "hf_trainer.py", args))


def hf_trainer_loguru_color() -> None:
    """The same with ``logger.add(sys.stderr, colorize=True)``."""
    args = ("--logging-steps", "5", "--max-steps", "100", "--loguru", "color")
    _done(run("hf_trainer_loguru_color", "hf_trainer.py", args))


# ---- 5. Lightning 2.x --------------------------------------------------------------------


def lightning_tqdm() -> None:
    """TQDMProgressBar with the sanity-check bar; also keeps metrics.csv and the
    TensorBoard event file the same run wrote, with the truth their loggers received."""
    run_dir = run("lightning_tqdm", "lightning_run.py", ("--bar", "tqdm"))
    shutil.copy(run_dir / "logs/csv/version_0/metrics.csv", HERE / "lightning_metrics.csv")
    shutil.copy(run_dir / "truth_logger.jsonl", HERE / "lightning_metrics.truth.jsonl")
    tb = HERE / "lightning_tb"
    shutil.rmtree(tb, ignore_errors=True)
    tb.mkdir()
    for event in (run_dir / "logs/tb/version_0").glob("events.out.tfevents.*"):
        shutil.copy(event, tb / event.name)
    shutil.copy(run_dir / "truth_logger.jsonl", HERE / "lightning_tb.truth.jsonl")
    _done(run_dir)


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_RICH_FRAME = re.compile(r"Epoch (\d+)/\d+ .*? (\d+)/\d+ .*")


def keep_printed_frames(name: str) -> None:
    """Keep in ``NAME.truth.jsonl`` only what rich's bar printed.

    Rich draws its bar on its own clock (redirected: only the last frame), so which
    batches show is timing: a train record stays if a frame shows its epoch and batch,
    an eval record if a frame shows its value.  The values stay the hooks' values.
    """
    text = _ANSI.sub("", (HERE / f"{name}.log").read_text(encoding="utf-8"))
    frames = {(int(m[1]), int(m[2])) for m in _RICH_FRAME.finditer(text)}
    shown = set(re.findall(r"val_loss: ([0-9.]+)", text))
    truth = HERE / f"{name}.truth.jsonl"
    kept = []
    for line in truth.read_text().splitlines():
        rec = json.loads(line)
        if rec["kind"] == "train" and (rec["epoch"], rec["bar"]) in frames:
            kept.append(line)
        elif rec["kind"] == "eval" and rec["printed"].get("val_loss") in shown:
            kept.append(line)
    truth.write_text("".join(k + "\n" for k in kept))


def lightning_rich() -> None:
    """RichProgressBar, stdout redirected: rich prints only the last frame."""
    _done(run("lightning_rich", "lightning_run.py", ("--bar", "rich"), {"COLUMNS": "120"}))
    keep_printed_frames("lightning_rich")


def lightning_rich_tty() -> None:
    """RichProgressBar as on a terminal (TTY_COMPATIBLE=1, TTY_INTERACTIVE=1: a CI log
    or ``script``): every frame, redrawn with cursor-movement escapes."""
    env = {"COLUMNS": "120", "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"}
    _done(run("lightning_rich_tty", "lightning_run.py", ("--bar", "rich"), env))
    keep_printed_frames("lightning_rich_tty")


# ---- 6. loguru from a plain loop ---------------------------------------------------------


def loguru_loop() -> None:
    """loguru's default sink, redirected (no colours); a nan loss at step 137."""
    _done(run("loguru_loop", "plain_loop.py", ("--sink", "loguru")))


def loguru_loop_color() -> None:
    """loguru with colours forced."""
    _done(run("loguru_loop_color", "plain_loop.py", ("--sink", "loguru-color")))


# ---- 7. rich's RichHandler ---------------------------------------------------------------


def _rich(name: str, width: int | None, *args: str) -> None:
    env = {} if width is None else {"COLUMNS": str(width)}
    _done(run(name, "plain_loop.py", ("--sink", "rich", *args), env))


def rich_default() -> None:
    """RichHandler as rich's docs set it up (basicConfig datefmt="[%X]"), redirected
    with no COLUMNS: rich's 80 columns."""
    _rich("rich_default", None)


def rich_nodatefmt_w120() -> None:
    """No datefmt: the handler's own default time format "[%x %X]" (date and time)."""
    _rich("rich_nodatefmt_w120", 120, "--datefmt", "none")


def rich_nopath_w60() -> None:
    """show_path=False at width 60."""
    _rich("rich_nopath_w60", 60, "--show-path", "0")


def rich_nolevel_w120() -> None:
    """show_level=False at width 120."""
    _rich("rich_nolevel_w120", 120, "--show-level", "0")


def rich_timefmt_w120() -> None:
    """log_time_format="%H:%M:%S" (no brackets, no datefmt) at width 120."""
    _rich("rich_timefmt_w120", 120, "--time-format", "%H:%M:%S", "--datefmt", "none")


def rich_w60() -> None:
    """Defaults at width 60 (records wrap)."""
    _rich("rich_w60", 60)


def rich_w120() -> None:
    """Defaults at width 120."""
    _rich("rich_w120", 120)


def rich_w200() -> None:
    """Defaults at width 200."""
    _rich("rich_w200", 200)


# ---- 8. TensorBoard SummaryWriter --------------------------------------------------------


def tb_loop() -> None:
    """SummaryWriter scalars from a loop: a nan at step 137, tok_per_s every 10 steps,
    eval/* every 50."""
    run_dir = run("tb_loop", "plain_loop.py", ("--sink", "tb"), keep_log=False)
    out = HERE / "tb_loop"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    for event in (run_dir / "runs/tiny").glob("events.out.tfevents.*"):
        shutil.copy(event, out / event.name)
    _done(run_dir)


FIXTURES: dict[str, Callable[[], None]] = {
    f.__name__: f
    for f in (
        hf_trainer_steps1,
        hf_trainer_steps1_unbuffered,
        hf_trainer_steps5_eval,
        hf_trainer_steps5_eval_unbuffered,
        hf_trainer_tokens_seen,
        trl_sft,
        hf_trainer_loguru,
        hf_trainer_loguru_color,
        lightning_tqdm,
        lightning_rich,
        lightning_rich_tty,
        loguru_loop,
        loguru_loop_color,
        rich_default,
        rich_nodatefmt_w120,
        rich_nopath_w60,
        rich_nolevel_w120,
        rich_timefmt_w120,
        rich_w60,
        rich_w120,
        rich_w200,
        tb_loop,
    )
}


def main(names: list[str]) -> None:
    unknown = [n for n in names if n not in FIXTURES]
    if unknown:
        sys.exit(f"unknown fixture(s): {', '.join(unknown)}; choose from {', '.join(FIXTURES)}")
    for name in names or list(FIXTURES):
        FIXTURES[name]()


if __name__ == "__main__":
    main(sys.argv[1:])
