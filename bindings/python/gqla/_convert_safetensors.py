# SPDX-License-Identifier: Apache-2.0
"""A small reader and writer of the safetensors format, numpy only.

The format: 8 bytes little-endian header length N, N bytes of JSON (per
tensor: dtype, shape, data_offsets [begin, end) into the data that follows;
an optional "__metadata__" of strings), then the raw little-endian data.
Files are read through a memory map, so tensors load lazily. BF16 tensors
come back as their uint16 bits (what gqla accepts as bfloat16); F8_E4M3 is
decoded on request (DeepSeek-V3 stores its weights that way).
"""

import json
import os
import struct

import numpy as np

from ._convert_errors import ConversionError

# safetensors dtype -> numpy dtype of the stored bits.
_STORAGE = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"), "I64": np.dtype("<i8"), "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"), "I8": np.dtype("i1"), "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"), "F8_E4M3": np.dtype("u1"), "F8_E5M2": np.dtype("u1"),
}
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2")
# The header of a real file is a few MB at most; anything larger is corrupt.
_MAX_HEADER = 100 << 20


def bf16_bits(x):
    """float array -> bfloat16 bits (uint16), rounded to nearest even; NaN stays NaN."""
    x = np.ascontiguousarray(x, np.float32)
    bits = x.view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))
    out = (rounded >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = ((bits[nan] >> 16) | np.uint32(0x40)).astype(np.uint16)
    return out


def bf16_to_float(bits, dtype=np.float32):
    """bfloat16 bits (uint16) -> float array."""
    wide = np.asarray(bits, np.uint16).astype(np.uint32) << 16
    return wide.view(np.float32).astype(dtype, copy=False)


def _fp8_table(exponent_bits, mantissa_bits, bias, has_inf):
    codes = np.arange(256, dtype=np.int64)
    sign = np.where(codes >> 7, -1.0, 1.0)
    exponent = (codes >> mantissa_bits) & ((1 << exponent_bits) - 1)
    mantissa = codes & ((1 << mantissa_bits) - 1)
    normal = (1.0 + mantissa / (1 << mantissa_bits)) * np.exp2(exponent - bias)
    subnormal = (mantissa / (1 << mantissa_bits)) * np.exp2(1 - bias)
    value = sign * np.where(exponent == 0, subnormal, normal)
    top = exponent == (1 << exponent_bits) - 1
    if has_inf:  # E5M2: IEEE-like
        value = np.where(top & (mantissa == 0), sign * np.inf, value)
        value = np.where(top & (mantissa != 0), np.nan, value)
    else:        # E4M3 (fn): only S.1111.111 is NaN, no infinities
        value = np.where(top & (mantissa == (1 << mantissa_bits) - 1), np.nan, value)
    return value


_FP8 = {"F8_E4M3": _fp8_table(4, 3, 7, False), "F8_E5M2": _fp8_table(5, 2, 15, True)}


def decode_float(raw, dtype_name, dtype=np.float64):
    """Stored bits of a float tensor -> a float array of `dtype`."""
    if dtype_name == "BF16":
        return bf16_to_float(raw, dtype)
    if dtype_name in _FP8:
        return _FP8[dtype_name].astype(dtype)[np.asarray(raw, np.uint8)]
    if dtype_name not in ("F64", "F32", "F16"):
        raise ConversionError(f"tensor dtype: expected a float dtype, got {dtype_name}")
    return np.asarray(raw).astype(dtype, copy=False)


def encode_float(array, dtype_name):
    """A float array -> the stored bits of `dtype_name` (F64, F32, F16, BF16)."""
    array = np.asarray(array)
    if dtype_name == "BF16":
        return array if array.dtype == np.uint16 else bf16_bits(array)
    if dtype_name in ("F64", "F32", "F16"):
        return array.astype(_STORAGE[dtype_name], copy=False)
    raise ConversionError(f"dtype: expected one of F64, F32, F16, BF16 for writing, got {dtype_name!r}")


class SafetensorsFile:
    """One .safetensors file, memory-mapped; tensors are read on demand."""

    def __init__(self, path):
        self.path = os.fspath(path)
        size = os.path.getsize(self.path)
        with open(self.path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ConversionError(f"{self.path}: not a safetensors file (shorter than 8 bytes)")
            (length,) = struct.unpack("<Q", head)
            if length > min(_MAX_HEADER, size - 8):
                raise ConversionError(f"{self.path}: header length {length} does not fit the file ({size} bytes)")
            try:
                header = json.loads(f.read(length).decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise ConversionError(f"{self.path}: header is not valid JSON ({e})") from None
        if not isinstance(header, dict):
            raise ConversionError(f"{self.path}: header is not a JSON object")
        self.metadata = header.pop("__metadata__", None) or {}
        self._data_start = 8 + length
        data_size = size - self._data_start
        self._entries = {}
        for name, entry in header.items():
            dtype = entry.get("dtype")
            shape = entry.get("shape")
            offsets = entry.get("data_offsets")
            if dtype not in _STORAGE:
                raise ConversionError(f"{self.path}: tensor {name!r} has unsupported dtype {dtype!r}")
            if (not isinstance(shape, list) or not isinstance(offsets, list) or len(offsets) != 2
                    or any(not isinstance(v, int) or v < 0 for v in shape + offsets)):
                raise ConversionError(f"{self.path}: tensor {name!r} has a malformed shape or data_offsets")
            begin, end = offsets
            expected = int(np.prod(shape, dtype=np.int64)) * _STORAGE[dtype].itemsize
            if end - begin != expected or end > data_size:
                raise ConversionError(
                    f"{self.path}: tensor {name!r}: data_offsets {offsets} do not hold {dtype} {shape} "
                    f"within {data_size} data bytes")
            self._entries[name] = (dtype, tuple(shape), begin, end)
        self._map = None

    def keys(self):
        return list(self._entries)

    def __contains__(self, name):
        return name in self._entries

    def dtype(self, name):
        return self._entry(name)[0]

    def shape(self, name):
        return self._entry(name)[1]

    def raw(self, name):
        """The stored tensor (uint16 bits for BF16, uint8 codes for F8), a
        read-only view of the file."""
        dtype, shape, begin, end = self._entry(name)
        if self._map is None:
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        flat = self._map[self._data_start + begin:self._data_start + end]
        return flat.view(_STORAGE[dtype]).reshape(shape)

    def float(self, name, dtype=np.float64):
        """A float tensor decoded to `dtype` (a copy)."""
        return decode_float(self.raw(name), self.dtype(name), dtype)

    def _entry(self, name):
        try:
            return self._entries[name]
        except KeyError:
            raise ConversionError(f"{self.path}: no tensor named {name!r}") from None


class PendingTensor:
    """A tensor of known dtype and shape whose data is produced only when
    the writer reaches it (so a large checkpoint is never all in memory)."""

    def __init__(self, dtype, shape, produce):
        self.dtype, self.shape, self.produce = dtype, tuple(int(s) for s in shape), produce


def _describe(name, value, dtypes):
    if isinstance(value, PendingTensor):
        return value.dtype, value.shape
    array = np.asarray(value)
    if name in dtypes:
        return dtypes[name], array.shape
    for dtype, storage in _STORAGE.items():
        if storage == array.dtype.newbyteorder("<") and dtype not in ("BF16", "F8_E4M3", "F8_E5M2"):
            return dtype, array.shape
    raise ConversionError(f"tensor {name!r}: numpy dtype {array.dtype} has no safetensors dtype")


def write_safetensors(path, tensors, metadata=None, dtypes=None):
    """Write `tensors` (name -> numpy array or PendingTensor) to `path`.

    `dtypes` names the safetensors dtype of a tensor whose numpy dtype says
    too little (uint16 bits that are BF16) or that should be converted on
    the way out (a float64 array written as BF16). `metadata` is a dict of
    strings stored in the header.
    """
    dtypes = dict(dtypes or {})
    header, layout, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, value in tensors.items():
        dtype, shape = _describe(name, value, dtypes)
        nbytes = int(np.prod(shape, dtype=np.int64)) * _STORAGE[dtype].itemsize
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        layout.append((name, value, dtype, shape, nbytes))
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-(len(blob) + 8) % 8)  # data starts 8-byte aligned
    tmp = os.fspath(path) + ".partial"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(blob)))
            f.write(blob)
            for name, value, dtype, shape, nbytes in layout:
                array = np.asarray(value.produce() if isinstance(value, PendingTensor) else value)
                array = _stored_bits(name, array, dtype)
                if tuple(array.shape) != tuple(shape):
                    raise ConversionError(f"tensor {name!r}: produced shape {array.shape}, declared {tuple(shape)}")
                data = np.ascontiguousarray(array).tobytes()
                if len(data) != nbytes:
                    raise ConversionError(f"tensor {name!r}: {len(data)} bytes, expected {nbytes}")
                f.write(data)
    except BaseException:
        os.remove(tmp)  # no half-written file survives a failure
        raise
    os.replace(tmp, path)


def _stored_bits(name, array, dtype):
    # Raw bits of the target dtype pass unchanged (BF16 as uint16, F8 as
    # uint8); floats are converted; integers keep their values.
    storage = _STORAGE[dtype]
    if dtype in ("BF16", "F8_E4M3", "F8_E5M2") and array.dtype == storage:
        return array
    if dtype in ("F8_E4M3", "F8_E5M2"):
        raise ConversionError(f"tensor {name!r}: {dtype} is written only from its raw uint8 codes")
    if dtype in FLOAT_DTYPES:
        return encode_float(array, dtype)
    return array.astype(storage, copy=False)


def read_safetensors(path):
    """All tensors of a file as a dict of arrays (BF16 as uint16 bits) plus
    their safetensors dtypes: ``(tensors, dtypes, metadata)``."""
    f = SafetensorsFile(path)
    tensors = {name: np.array(f.raw(name)) for name in f.keys()}
    return tensors, {name: f.dtype(name) for name in f.keys()}, dict(f.metadata)


class Checkpoint:
    """The tensors of a Hugging Face style checkpoint directory: one
    model.safetensors, or shards listed by model.safetensors.index.json."""

    def __init__(self, directory):
        self.directory = os.fspath(directory)
        index = os.path.join(self.directory, "model.safetensors.index.json")
        single = os.path.join(self.directory, "model.safetensors")
        files = {}
        if os.path.exists(index):
            with open(index) as f:
                weight_map = json.load(f).get("weight_map", {})
            self._where = dict(weight_map)
            for shard in sorted(set(weight_map.values())):
                files[shard] = SafetensorsFile(os.path.join(self.directory, shard))
        elif os.path.exists(single):
            files["model.safetensors"] = SafetensorsFile(single)
            self._where = {name: "model.safetensors" for name in files["model.safetensors"].keys()}
        else:
            shards = sorted(n for n in os.listdir(self.directory) if n.endswith(".safetensors"))
            if not shards:
                raise ConversionError(f"checkpoint: no .safetensors files in {self.directory}")
            self._where = {}
            for shard in shards:
                files[shard] = SafetensorsFile(os.path.join(self.directory, shard))
                self._where.update({name: shard for name in files[shard].keys()})
        self._files = files

    def keys(self):
        return list(self._where)

    def __contains__(self, name):
        return name in self._where

    def file_of(self, name):
        return self._files[self._where_of(name)]

    def dtype(self, name):
        return self.file_of(name).dtype(name)

    def shape(self, name):
        return self.file_of(name).shape(name)

    def raw(self, name):
        return self.file_of(name).raw(name)

    def float(self, name, dtype=np.float64):
        """A float tensor; an F8 weight with a ``<name>_scale_inv`` block scale
        (DeepSeek-V3's 128x128 blocks) is dequantized."""
        value = self.file_of(name).float(name, dtype)
        scale_name = name + "_scale_inv"
        if self.dtype(name).startswith("F8") and scale_name in self:
            scale = self.float(scale_name, dtype)
            rows, cols = value.shape
            block_r = -(-rows // scale.shape[0])
            block_c = -(-cols // scale.shape[1])
            value = value * np.repeat(np.repeat(scale, block_r, 0), block_c, 1)[:rows, :cols]
        return value

    def _where_of(self, name):
        try:
            return self._where[name]
        except KeyError:
            raise ConversionError(f"checkpoint {self.directory}: no tensor named {name!r}") from None
