"""Writes tests/core/fixtures/tensorboard_golden.tfevents with TensorBoard's own record writer and protobuf
classes (tensorboard==2.21.0, protobuf as pinned by it): a header event, a scalar event and a text event built
as inkstone builds them. tests/core/test_event_file.cpp reads it and encodes the same events byte for byte.
Run from the repository root: .venv/bin/python tests/core/make_tensorboard_golden.py"""
import os

from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

OUT = os.path.join("tests", "core", "fixtures", "tensorboard_golden.tfevents")


def events():
    yield event_pb2.Event(wall_time=1.0, step=0, file_version="brain.Event:2")
    scalars = summary_pb2.Summary(value=[
        summary_pb2.Summary.Value(tag="train/loss", simple_value=2.25),
        summary_pb2.Summary.Value(tag="system/mfu", simple_value=0.5),
    ])
    yield event_pb2.Event(wall_time=1.5, step=3, summary=scalars)
    text = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)]),
        string_val=["    the cat\n".encode("utf-8")])
    metadata = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text"))
    yield event_pb2.Event(wall_time=2.5, step=4, summary=summary_pb2.Summary(value=[
        summary_pb2.Summary.Value(tag="samples/0", metadata=metadata, tensor=text)]))


def main():
    with open(OUT, "wb") as f:
        writer = RecordWriter(f)
        for event in events():
            writer.write(event.SerializeToString())
        writer.flush()


if __name__ == "__main__":
    main()
