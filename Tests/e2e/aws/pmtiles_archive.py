"""A minimal PMTiles v3 writer and reader (the spec at github.com/protomaps/PMTiles, `spec/v3/spec.md`): a 127-byte
header, one root directory (no leaf directories; directory and metadata gzip-compressed, as most archives are), JSON metadata and the tile data. Enough
to make a valid small archive and to read it the way PMTiles clients do: the header by a range request, then the
root directory, then one tile, each by its own byte range."""

import gzip
import json
import struct

HEADER_LEN = 127


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def zxy_to_tile_id(z, x, y):
    """The Hilbert-curve tile id of the spec."""
    acc = sum(4 ** i for i in range(z))
    n = 1 << z
    d = 0
    s = n >> 1
    rx_x, rx_y = x, y
    while s > 0:
        rx = 1 if rx_x & s else 0
        ry = 1 if rx_y & s else 0
        d += s * s * ((3 * rx) ^ ry)
        # rotate
        if ry == 0:
            if rx == 1:
                rx_x = s - 1 - rx_x
                rx_y = s - 1 - rx_y
            rx_x, rx_y = rx_y, rx_x
        s >>= 1
    return acc + d


def encode_directory(entries):
    """entries: [(tile_id, offset, length, run_length)] sorted by tile id."""
    out = bytearray(_varint(len(entries)))
    last = 0
    for tid, _, _, _ in entries:
        out += _varint(tid - last)
        last = tid
    for _, _, _, run in entries:
        out += _varint(run)
    for _, _, length, _ in entries:
        out += _varint(length)
    for i, (_, offset, _, _) in enumerate(entries):
        prev = entries[i - 1] if i else None
        if prev and offset == prev[1] + prev[2]:
            out += _varint(0)
        else:
            out += _varint(offset + 1)
    return bytes(out)


def decode_directory(compressed):
    buf = gzip.decompress(compressed)
    n, i = _read_varint(buf, 0)
    ids, runs, lengths, offsets = [], [], [], []
    last = 0
    for _ in range(n):
        d, i = _read_varint(buf, i)
        last += d
        ids.append(last)
    for _ in range(n):
        v, i = _read_varint(buf, i)
        runs.append(v)
    for _ in range(n):
        v, i = _read_varint(buf, i)
        lengths.append(v)
    for k in range(n):
        v, i = _read_varint(buf, i)
        offsets.append(offsets[k - 1] + lengths[k - 1] if v == 0 and k > 0 else v - 1)
    return list(zip(ids, offsets, lengths, runs))


def write(tiles, tile_type=2, name="authproxy test"):
    """tiles: {(z, x, y): bytes}. Returns the archive's bytes."""
    by_id = sorted((zxy_to_tile_id(z, x, y), data) for (z, x, y), data in tiles.items())
    data = bytearray()
    entries = []
    for tid, blob in by_id:
        entries.append((tid, len(data), len(blob), 1))
        data += blob
    root = gzip.compress(encode_directory(entries), mtime=0)
    meta = gzip.compress(json.dumps({"name": name}).encode(), mtime=0)
    zooms = [z for (z, _, _) in tiles]
    root_off = HEADER_LEN
    meta_off = root_off + len(root)
    data_off = meta_off + len(meta)
    header = b"PMTiles" + struct.pack(
        "<BQQQQQQQQQQQBBBBBBiiiiBii", 3,
        root_off, len(root), meta_off, len(meta), data_off + len(data), 0, data_off, len(data),
        len(entries), len(entries), len(entries),
        1, 2, 1, tile_type, min(zooms), max(zooms),
        -1800000000, -850511287, 1800000000, 850511287, min(zooms), 0, 0)
    assert len(header) == HEADER_LEN, len(header)
    return header + root + meta + bytes(data)


def read_header(buf):
    assert buf[:7] == b"PMTiles", buf[:7]
    v = struct.unpack("<BQQQQQQQQQQQBBBBBBiiiiBii", buf[7:HEADER_LEN])
    keys = ["version", "root_offset", "root_length", "metadata_offset", "metadata_length", "leaf_offset",
            "leaf_length", "data_offset", "data_length", "addressed_tiles", "tile_entries", "tile_contents",
            "clustered", "internal_compression", "tile_compression", "tile_type", "min_zoom", "max_zoom",
            "min_lon_e7", "min_lat_e7", "max_lon_e7", "max_lat_e7", "center_zoom", "center_lon_e7", "center_lat_e7"]
    return dict(zip(keys, v))
