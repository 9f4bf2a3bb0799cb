#!/usr/bin/env python3
"""Pixel statistics of a PNG, for the report screenshot test (standard library only).

usage: png_stats.py FILE [--rows Y0 Y1] [--color RRGGBB ...]
Prints one JSON object: width, height, the rows examined, the number of distinct colours and the
fraction of non-white pixels among them, and how many pixels have each requested colour.
Decodes 8-bit greyscale, RGB and RGBA PNGs (non-interlaced), which is what Chromium writes.
"""
import json
import struct
import sys
import zlib


def decode(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG")
    pos, idat, header = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    width, height, depth, color, _, _, interlace = header
    channels = {0: 1, 2: 3, 6: 4}.get(color)
    if depth != 8 or channels is None or interlace != 0:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {color}, interlace {interlace}")
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    rows, previous, at = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = raw[at], bytearray(raw[at + 1:at + 1 + stride])
        at += 1 + stride
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                predictor = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + predictor) & 255
        rows.append(bytes(line))
        previous = line
    return width, height, channels, rows


def main(argv):
    path, y0, y1, colors = argv[1], None, None, []
    args = argv[2:]
    while args:
        if args[0] == "--rows":
            y0, y1, args = int(args[1]), int(args[2]), args[3:]
        elif args[0] == "--color":
            colors.append(args[1].lower())
            args = args[2:]
        else:
            raise SystemExit(f"unknown argument {args[0]}")
    width, height, channels, rows = decode(path)
    y0 = 0 if y0 is None else max(0, y0)
    y1 = height if y1 is None else min(height, y1)
    counts, distinct, non_white, total = {c: 0 for c in colors}, set(), 0, 0
    for y in range(y0, y1):
        line = rows[y]
        for x in range(width):
            px = line[x * channels:(x + 1) * channels]
            rgb = (px[0], px[0], px[0]) if channels == 1 else (px[0], px[1], px[2])
            distinct.add(rgb)
            total += 1
            if rgb != (255, 255, 255):
                non_white += 1
            key = "%02x%02x%02x" % rgb
            if key in counts:
                counts[key] += 1
    print(json.dumps({"width": width, "height": height, "rows": [y0, y1], "distinct_colors": len(distinct),
                      "non_white_fraction": non_white / total if total else 0, "color_counts": counts}))


if __name__ == "__main__":
    main(sys.argv)
