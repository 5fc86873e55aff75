#!/usr/bin/env python3
"""Reads a ZeroEngine TensorBoard event file with the tensorboard package.

Hand-run check of runtime/tools/tensorboard_writer.cc against TensorBoard's
own reader (CTest does not run it: the package is not a build dependency).

    pip install tensorboard
    python3 tests/reference/read_tensorboard.py                  # the golden file
    python3 tests/reference/read_tensorboard.py RUN_DIR_OR_FILE  # a zero-train run's

For the golden file (tests/data/tensorboard/events.out.tfevents.golden) it
checks every value; for any other file or directory it prints the scalars.
Exits 1 on a mismatch or when TensorBoard cannot read the file (its record
reader checks both CRCs of every record).
"""
import os
import struct
import sys

from tensorboard.backend.event_processing import event_file_loader
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.summary.writer.record_writer import masked_crc32c

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "data", "tensorboard", "events.out.tfevents.golden")
# (tag, step, value, wall_time) as tensorboard_writer_test.cc writes them.
EXPECTED = [
    ("Train/Samples/train_loss", 8, 5.5, 1700000001.0),
    ("Train/Samples/lr", 8, 0.003, 1700000001.0),
    ("Train/Samples/train_loss", 16, 4.25, 1700000002.0),
]


def check_framing(path):
    """Every record's length and both masked CRC-32Cs, by TensorBoard's own
    CRC function (its loader skips a bad record with a warning)."""
    data = open(path, "rb").read()
    at, n = 0, 0
    while at < len(data):
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        body = data[at + 12:at + 12 + length]
        (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        if length_crc != masked_crc32c(header) or body_crc != masked_crc32c(body):
            print(f"FAIL: record {n} at byte {at}: CRC mismatch")
            return False
        at, n = at + 16 + length, n + 1
    print(f"{path}: {n} records, every CRC matches")
    return True


def raw_events(path):
    """Every Event proto in the file, through TensorBoard's record reader."""
    return list(event_file_loader.LegacyEventFileLoader(path).Load())


def scalars(path):
    """The scalars as TensorBoard's UI sees them (EventAccumulator)."""
    acc = EventAccumulator(path)
    acc.Reload()
    out = []
    for tag in acc.Tags()["scalars"]:
        out += [(tag, e.step, e.value, e.wall_time) for e in acc.Scalars(tag)]
    return sorted(out, key=lambda s: (s[1], s[0] != "Train/Samples/train_loss"))


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else GOLDEN
    if os.path.isfile(path):
        if not check_framing(path):
            return 1
        events = raw_events(path)
        print(f"{path}: {len(events)} events; first: file_version {events[0].file_version!r}")
        if events[0].file_version != "brain.Event:2":
            print("FAIL: the first event is not file_version brain.Event:2")
            return 1
    got = scalars(path)
    for tag, step, value, wall_time in got:
        print(f"  {tag} step {step} value {value!r} wall_time {wall_time}")
    if path != GOLDEN:
        return 0 if got else 1
    want = sorted(EXPECTED, key=lambda s: (s[1], s[0] != "Train/Samples/train_loss"))
    ok = len(got) == len(want) and all(
        g[0] == w[0] and g[1] == w[1] and abs(g[2] - w[2]) <= 1e-7 * abs(w[2]) and g[3] == w[3]
        for g, w in zip(got, want))
    print("OK: tensorboard reads the golden file" if ok else f"FAIL: expected {want}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
