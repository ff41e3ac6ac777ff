"""Write the TensorBoard event-file fixtures in this folder (needs the ``tensorboard`` package).

    python tests/data/logs/tensorboard/make_fixtures.py

Events are written with TensorBoard's own ``EventFileWriter`` and protos, shaped as the
trainers write them (values made up, times and file names fixed so the bytes are
reproducible):

* ``hf_resume/``: the Hugging Face Trainer's ``TensorBoardCallback`` through PyTorch's
  ``SummaryWriter`` (one ``simple_value`` per event; ``train/loss``, ``train/grad_norm``,
  ``train/learning_rate``, ``train/epoch``, ``eval/loss``..., the ``args`` text), and a
  histogram and a graph.  Two files: the run stopped after step 60 and resumed from its
  step-40 checkpoint, so steps 50 and 60 are logged twice with other values.
* ``lightning/``: Lightning's ``TensorBoardLogger``: ``hp_metric`` at step 0 and an
  ``hparams`` plugin summary, then ``train_loss``, ``lr-AdamW``, ``epoch`` every 10 steps
  (9, 19, ...), ``val_loss`` at the end of each epoch.
* ``tf2/``: TF2 ``tf.summary.scalar``: tensor scalars (float32 in ``float_val``, float64
  in ``tensor_content``, an int64), summary metadata on each tag's first event only; a
  TF2 histogram (``[k, 3]`` float64 tensor) and text summaries.
* ``tf1.tfevents``: a TF1 Estimator-style file (one name without the usual prefix):
  merged summaries of several ``simple_value`` scalars per event (``loss``,
  ``learning_rate``, ``global_step/sec``), a graph, a meta graph and a session log.
"""

from __future__ import annotations

import shutil
import struct
import tempfile
import time
from pathlib import Path
from unittest import mock

from tensorboard.compat.proto import (
    event_pb2,
    graph_pb2,
    summary_pb2,
    tensor_pb2,
    tensor_shape_pb2,
    types_pb2,
)
from tensorboard.summary.writer.event_file_writer import EventFileWriter

HERE = Path(__file__).resolve().parent
T0 = 1732870000.0  # 2024-11-29 08:46:40 UTC


def write_file(dest: Path, events: list[event_pb2.Event], t0: float) -> None:
    """Write ``events`` with TensorBoard's writer, then give the file a fixed name."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(time, "time", lambda: t0):
        writer = EventFileWriter(tmp)  # writes the file_version event first
        for event in events:
            writer.add_event(event)
        writer.close()
        (written,) = Path(tmp).iterdir()
        shutil.move(written, dest)


def scalar(tag: str, value: float, step: int, t: float) -> event_pb2.Event:
    """As PyTorch's ``SummaryWriter.add_scalar`` writes it."""
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
    return event_pb2.Event(wall_time=t, step=step, summary=summary)


def plugin(name: str) -> summary_pb2.SummaryMetadata:
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=name)
    )


def shape(*dims: int) -> tensor_shape_pb2.TensorShapeProto:
    return tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in dims]
    )


def text(tag: str, body: str, step: int, t: float, meta: bool = True) -> event_pb2.Event:
    tensor = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING, string_val=[body.encode()], tensor_shape=shape()
    )
    value = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
    if meta:
        value.metadata.CopyFrom(plugin("text"))
    return event_pb2.Event(wall_time=t, step=step, summary=summary_pb2.Summary(value=[value]))


def histo(tag: str, step: int, t: float) -> event_pb2.Event:
    """As PyTorch's ``SummaryWriter.add_histogram`` writes it (a HistogramProto)."""
    h = summary_pb2.HistogramProto(
        min=-0.5, max=0.5, num=4, sum=0.0, sum_squares=0.5, bucket_limit=[0.0, 0.5], bucket=[2, 2]
    )
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, histo=h)])
    return event_pb2.Event(wall_time=t, step=step, summary=summary)


def graph(t: float) -> event_pb2.Event:
    g = graph_pb2.GraphDef()
    g.node.add(name="x", op="Placeholder")
    return event_pb2.Event(wall_time=t, graph_def=g.SerializeToString())


# ----------------------------------------------------------------------------- runs


def hf_loss(step: int, resumed: bool) -> float:
    return round(2.0 - 0.01 * step + (0.125 if resumed else 0.0), 4)


def hf_events(steps: range, evals: tuple[int, ...], t0: float, resumed: bool) -> list:
    events = [text("args/text_summary", '{"learning_rate": 5e-05}', 0, t0)]
    if not resumed:
        events.append(graph(t0))
    for step in steps:
        t = t0 + step
        events += [
            scalar("train/loss", hf_loss(step, resumed), step, t),
            scalar("train/grad_norm", 1.0 + step / 100, step, t),
            scalar("train/learning_rate", 5e-05 * (1 - step / 100), step, t),
            scalar("train/epoch", step / 40, step, t),
        ]
        if step in evals:
            events += [
                scalar("eval/loss", hf_loss(step, resumed) + 0.25, step, t),
                scalar("eval/runtime", 3.5, step, t),
                scalar("eval/samples_per_second", 91.4, step, t),
                scalar("train/epoch", step / 40, step, t),
            ]
        if step == 40:
            events.append(histo("weights/lm_head", step, t))
    return events


def make_hf_resume(out: Path) -> None:
    out = out / "hf_resume"
    write_file(
        out / "events.out.tfevents.1732870000.trainer-node.4242.0",
        hf_events(range(10, 61, 10), (30, 60), T0, resumed=False),
        T0,
    )
    second = hf_events(range(50, 81, 10), (60,), T0 + 3600, resumed=True)
    second.append(scalar("train/train_runtime", 812.5, 80, T0 + 3700))
    second.append(scalar("train/train_loss", 1.5, 80, T0 + 3700))
    write_file(out / "events.out.tfevents.1732873600.trainer-node.5151.0", second, T0 + 3600)


def make_lightning(out: Path) -> None:
    hparams = summary_pb2.Summary.Value(tag="_hparams_/experiment", metadata=plugin("hparams"))
    events = [
        event_pb2.Event(wall_time=T0, step=0, summary=summary_pb2.Summary(value=[hparams])),
        scalar("hp_metric", -1.0, 0, T0),
    ]
    for step in range(50):
        t = T0 + step
        if step % 10 == 9:  # log_every_n_steps=10
            events += [
                scalar("lr-AdamW", 1e-3 * (1 - step / 100), step, t),
                scalar("train_loss", 3.0 - 0.02 * step, step, t),
                scalar("epoch", float(step // 25), step, t),
            ]
        if step % 25 == 24:  # validation at the end of each 25-step epoch
            events += [
                scalar("val_loss", 3.25 - 0.02 * step, step, t + 0.5),
                scalar("epoch", float(step // 25), step, t + 0.5),
            ]
    write_file(out / "lightning" / "events.out.tfevents.1732870000.laptop.777.0", events, T0)


def tf2_scalar(tag: str, tensor: tensor_pb2.TensorProto, step: int, meta: bool) -> event_pb2.Event:
    value = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
    if meta:
        value.metadata.CopyFrom(plugin("scalars"))
    summary = summary_pb2.Summary(value=[value])
    return event_pb2.Event(wall_time=T0 + step, step=step, summary=summary)


def tf2_loss(step: int) -> float:
    return 4.0 - step / 64  # exact in float32


def make_tf2(out: Path) -> None:
    events: list[event_pb2.Event] = []
    for i, step in enumerate((100, 200, 300)):
        first = i == 0
        loss = tensor_pb2.TensorProto(
            dtype=types_pb2.DT_FLOAT, float_val=[tf2_loss(step)], tensor_shape=shape()
        )
        lr = tensor_pb2.TensorProto(
            dtype=types_pb2.DT_DOUBLE,
            tensor_content=struct.pack("<d", 3e-4 / (i + 1)),
            tensor_shape=shape(),
        )
        tokens = tensor_pb2.TensorProto(
            dtype=types_pb2.DT_INT64, int64_val=[65536 + step], tensor_shape=shape()
        )
        events += [
            tf2_scalar("loss", loss, step, first),
            tf2_scalar("learning_rate", lr, step, first),
            tf2_scalar("tokens", tokens, step, first),
        ]
        hist = tensor_pb2.TensorProto(
            dtype=types_pb2.DT_DOUBLE,
            tensor_content=struct.pack("<6d", -1.0, 0.0, 3.0, 0.0, 1.0, 5.0),
            tensor_shape=shape(2, 3),
        )
        value = summary_pb2.Summary.Value(tag="weights", tensor=hist)
        if first:
            value.metadata.CopyFrom(plugin("histograms"))
        events.append(
            event_pb2.Event(
                wall_time=T0 + step, step=step, summary=summary_pb2.Summary(value=[value])
            )
        )
        if step != 300:
            events.append(text("notes", f"step {step}", step, T0 + step, meta=first))
    write_file(out / "tf2" / "events.out.tfevents.1732870000.tpu-vm.99.0.v2", events, T0)


def make_tf1(out: Path) -> None:
    events = [graph(T0), event_pb2.Event(wall_time=T0, meta_graph_def=b"")]
    events.append(
        event_pb2.Event(wall_time=T0, session_log=event_pb2.SessionLog(status=1))  # START
    )
    for step in (1, 101, 201):
        values = [
            summary_pb2.Summary.Value(tag="loss", simple_value=2.5 - step / 400),
            summary_pb2.Summary.Value(tag="learning_rate", simple_value=0.1),
            summary_pb2.Summary.Value(tag="global_step/sec", simple_value=12.5),
        ]
        if step == 1:
            values.pop()  # the rate needs two points in time
        events.append(
            event_pb2.Event(
                wall_time=T0 + step, step=step, summary=summary_pb2.Summary(value=values)
            )
        )
    write_file(out / "tf1.tfevents", events, T0)


def main(out: Path = HERE) -> None:
    """Write every fixture into ``out`` (this folder by default)."""
    for old in ("hf_resume", "lightning", "tf2"):
        shutil.rmtree(out / old, ignore_errors=True)
    make_hf_resume(out)
    make_lightning(out)
    make_tf2(out)
    make_tf1(out)
    for f in sorted(out.rglob("*tfevents*")):
        print(f"{f.relative_to(out)}: {f.stat().st_size} bytes")


if __name__ == "__main__":
    main()
