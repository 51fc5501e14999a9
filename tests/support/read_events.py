#!/usr/bin/env python3
"""Independent reader of TensorBoard event files, for the tracking tests.

Usage: read_events.py EVENT_FILE
Compiles its own copy of the schema (tb_reader.proto) with protoc, checks the
TFRecord framing with its own bitwise CRC32C, and prints one line per fact:
  frames N / partial_tail_bytes N / crc_errors N / wall_time_ok 0|1
  event STEP file_version VERSION
  event STEP scalar TAG FLOAT32_BITS_HEX
  event STEP text TAG PLUGIN DATA_CLASS DTYPE RANK "JSON STRING"
  event STEP hparams_start PLUGIN VERSION HAS_TENSOR NAME=KIND:VALUE ...
  event STEP hparams_end PLUGIN VERSION STATUS
Exit status 77 when protoc or the protobuf module is missing (test skips).
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def load_schema():
    protoc = shutil.which("protoc")
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        protoc = None
    if protoc is None:
        print("protoc or python3-protobuf missing", file=sys.stderr)
        sys.exit(77)
    out = tempfile.mkdtemp(prefix="tb-reader-")
    subprocess.run([protoc, "-I", HERE, "--python_out=" + out, "tb_reader.proto"], check=True)
    sys.path.insert(0, out)
    import tb_reader_pb2
    shutil.rmtree(out, ignore_errors=True)
    return tb_reader_pb2


def frames(data):
    """Yields (payload, crc_ok) for each complete frame; returns tail size."""
    pos = 0
    result = []
    while len(data) - pos >= 12:
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if header_crc != masked(crc32c(header)):
            result.append((None, False))
            break
        end = pos + 12 + length + 4
        if end > len(data):
            break
        payload = data[pos + 12:pos + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[pos + 12 + length:end])
        result.append((payload, payload_crc == masked(crc32c(payload))))
        pos = end
    return result, len(data) - pos


def float_bits(value):
    return format(struct.unpack("<I", struct.pack("<f", value))[0], "08x")


def double_bits(value):
    return format(struct.unpack("<Q", struct.pack("<d", value))[0], "016x")


def hparam(value):
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        return "number:" + double_bits(value.number_value)
    if kind == "bool_value":
        return "bool:" + ("true" if value.bool_value else "false")
    if kind == "string_value":
        return "string:" + value.string_value
    return "null:"


def main():
    pb = load_schema()
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    found, tail = frames(data)
    lines = []
    crc_errors = 0
    wall_ok = True
    last_wall = 0.0
    now = time.time()
    for payload, ok in found:
        if not ok:
            crc_errors += 1
            continue
        event = pb.Event()
        event.ParseFromString(payload)
        if not (now - 3600 < event.wall_time < now + 60) or event.wall_time < last_wall:
            wall_ok = False
        last_wall = event.wall_time
        what = event.WhichOneof("what")
        prefix = "event %d " % event.step
        if what == "file_version":
            lines.append(prefix + "file_version " + event.file_version)
            continue
        for v in event.summary.value:
            plugin = v.metadata.plugin_data.plugin_name
            kind = v.WhichOneof("value")
            if kind == "simple_value":
                lines.append(prefix + "scalar %s %s" % (v.tag, float_bits(v.simple_value)))
            elif plugin == "text":
                t = v.tensor
                lines.append(prefix + "text %s %s %d %d %d %s" % (
                    v.tag, plugin, v.metadata.data_class, t.dtype, len(t.tensor_shape.dim),
                    json.dumps([s.decode("utf-8") for s in t.string_val])))
            elif plugin == "hparams":
                content = pb.HParamsPluginData()
                content.ParseFromString(v.metadata.plugin_data.content)
                which = content.WhichOneof("data")
                if which == "session_start_info":
                    items = sorted(content.session_start_info.hparams.items())
                    lines.append(prefix + "hparams_start %s %d %d %s" % (
                        v.tag, content.version, int(v.HasField("tensor")),
                        " ".join("%s=%s" % (k, hparam(x)) for k, x in items)))
                elif which == "session_end_info":
                    lines.append(prefix + "hparams_end %s %d %d" % (
                        v.tag, content.version, content.session_end_info.status))
            else:
                lines.append(prefix + "unknown " + v.tag)
    print("frames %d" % len(found))
    print("partial_tail_bytes %d" % tail)
    print("crc_errors %d" % crc_errors)
    print("wall_time_ok %d" % int(wall_ok))
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
