"""Reads an inkstone event file with TensorBoard's own reader and prints what it found as JSON:
{"scalars": {tag: [[step, value], ...]}, "texts": {tag: [[step, text], ...]}}.
Used by tests/tools/test_observability.cpp (the C++ side compares it with metrics.jsonl)."""
import json
import sys

from tensorboard.backend.event_processing import event_accumulator


def main(run_dir):
    accumulator = event_accumulator.EventAccumulator(
        run_dir, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    scalars = {tag: [[e.step, e.value] for e in accumulator.Scalars(tag)] for tag in tags["scalars"]}
    texts = {}
    for tag in tags["tensors"]:
        texts[tag] = [[e.step, e.tensor_proto.string_val[0].decode("utf-8")] for e in accumulator.Tensors(tag)]
    plugins = {tag: accumulator.SummaryMetadata(tag).plugin_data.plugin_name for tag in tags["tensors"]}
    print(json.dumps({"scalars": scalars, "texts": texts, "plugins": plugins}))


if __name__ == "__main__":
    main(sys.argv[1])
