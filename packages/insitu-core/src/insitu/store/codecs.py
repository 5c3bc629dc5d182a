"""Direct chunk decoding with numcodecs, built from an array's Zarr metadata.

zarr's codec pipeline is general but costs tens of microseconds of Python and
allocation per chunk. For the codecs that cover nearly every scientific
archive (bytes, transpose, zstd, blosc, gzip, zlib, crc32c, and any numcodecs
codec in v2 metadata) we decode here, straight into the pool slot when the
layout allows. Anything else raises :class:`UnsupportedCodec` and the engine
reads that array through zarr's public API instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numcodecs
import numpy as np
from numcodecs.abc import Codec


class UnsupportedCodec(Exception):
    """The array uses a codec the direct decoder does not handle."""


_BLOSC_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
# Decoders whose ``decode(buf, out=...)`` writes into a caller's buffer.
_DECODE_INTO = ("zstd", "blosc", "gzip", "zlib", "lz4")


@dataclass(frozen=True)
class ChunkDecoder:
    """Decodes one stored chunk's bytes into an array of ``chunk_shape``.

    ``storage_dtype`` is the dtype bytes are laid out in (maybe big-endian);
    ``dtype`` is the native dtype the decoder returns.
    """

    chunk_shape: tuple[int, ...]
    storage_dtype: np.dtype[Any]
    bytes_codecs: tuple[Codec, ...]  # applied in this order when decoding
    array_codecs: tuple[Codec, ...]  # applied in this order when decoding (after bytes -> array)
    transpose: tuple[int, ...] | None = None  # stored axis order (v3 transpose codec)
    order: str = "C"

    def __post_init__(self) -> None:
        # Derived once: decode() runs per chunk and must not redo this work.
        nbytes = int(np.prod(self.chunk_shape, dtype=np.int64)) * self.storage_dtype.itemsize
        into = (
            len(self.bytes_codecs) <= 1
            and not self.array_codecs
            and self.transpose is None
            and self.order == "C"
            and self.storage_dtype.isnative
            and all(getattr(c, "codec_id", "") in _DECODE_INTO for c in self.bytes_codecs)
        )
        object.__setattr__(self, "nbytes", nbytes)
        object.__setattr__(self, "decodes_into", into)
        object.__setattr__(self, "dtype", self.storage_dtype.newbyteorder("="))

    nbytes: int = field(init=False)
    decodes_into: bool = field(init=False)  # decode(out=...) needs no intermediate copy
    dtype: np.dtype[Any] = field(init=False)  # the native dtype decode() returns

    def decode(self, raw: Any, out: np.ndarray | None = None) -> np.ndarray:
        """Decode ``raw`` (bytes-like). With ``out`` (C-contiguous, native dtype,
        ``chunk_shape``), the result is written there and ``out`` is returned."""
        if out is not None and self.decodes_into:
            if not self.bytes_codecs:
                stored = memoryview(raw).cast("B")
                _check_size(stored.nbytes, self.nbytes, "stored")
                # A buffer-to-buffer copy: numpy's reshape, view and frombuffer cost four times
                # the copy itself at small chunks, where this runs once per chunk.
                out.data.cast("B")[:] = stored
                return out
            codec = self.bytes_codecs[0]
            # A valid frame of the wrong size would decode into the front of ``out`` and leave the
            # rest as it was: check the size the frame declares first (a few header bytes).
            declared = declared_size(codec.codec_id, raw)
            if declared is None:  # the frame does not say: decode to new memory, where size is checked
                out[...] = self._decode_new(raw)
                return out
            _check_size(declared, self.nbytes, "decoded")
            codec.decode(raw, out=out.reshape(-1).view(np.uint8))
            return out
        arr = self._decode_new(raw)
        if out is None:
            return arr
        out[...] = arr
        return out

    def _decode_new(self, raw: Any) -> np.ndarray:
        data: Any = raw
        for codec in self.bytes_codecs:
            data = codec.decode(data)
        flat = np.frombuffer(_as_buffer(data), dtype=self.storage_dtype) if not self.array_codecs else data
        for codec in self.array_codecs:
            flat = codec.decode(flat)
        flat = np.asarray(flat).reshape(-1)
        _check_size(flat.nbytes, self.nbytes, "decoded")
        flat = flat.view(self.storage_dtype)
        if self.transpose is not None:
            stored_shape = tuple(self.chunk_shape[i] for i in self.transpose)
            arr = flat.reshape(stored_shape).transpose(np.argsort(self.transpose))
        else:
            arr = flat.reshape(self.chunk_shape, order=self.order)  # type: ignore[call-overload]
        return np.ascontiguousarray(arr, dtype=self.dtype)


class ChunkSizeError(ValueError):
    """A chunk decoded (or is stored) at another size than its array's chunk shape says."""


def _check_size(got: int, expected: int, what: str) -> None:
    if got != expected:
        raise ChunkSizeError(
            f"{what} size is {got} bytes, expected {expected} (truncated, oversized or damaged chunk)"
        )


def declared_size(codec_id: str, raw: Any) -> int | None:
    """The decompressed size a compressed frame declares in its header, or None when it does not.

    zstd: the frame content size field; blosc: ``nbytes`` in its 16-byte header; gzip: ISIZE
    (the last four bytes, modulo 2**32); lz4 (numcodecs): its 4-byte size prefix.
    """
    mv = memoryview(raw).cast("B")
    try:
        if codec_id == "zstd":
            return _zstd_content_size(mv)
        if codec_id == "blosc":
            return int.from_bytes(mv[4:8], "little") if len(mv) >= 16 else None
        if codec_id == "gzip":
            return (
                int.from_bytes(mv[-4:], "little")
                if len(mv) >= 18 and mv[0] == 0x1F and mv[1] == 0x8B
                else None
            )
        if codec_id == "lz4":
            return int.from_bytes(mv[:4], "little") if len(mv) >= 4 else None
    except (IndexError, ValueError):
        return None
    return None


_ZSTD_MAGIC = 0xFD2FB528


def _zstd_content_size(mv: memoryview) -> int | None:
    if len(mv) < 6 or int.from_bytes(mv[:4], "little") != _ZSTD_MAGIC:
        return None  # not a zstd frame (a skippable frame, or damage): the codec will say
    descriptor = mv[4]
    fcs_flag, single_segment, dict_flag = descriptor >> 6, (descriptor >> 5) & 1, descriptor & 3
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    size = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if size == 0 or len(mv) < pos + size:
        return None  # content size not recorded
    value = int.from_bytes(mv[pos : pos + size], "little")
    return value + 256 if size == 2 else value


def _as_buffer(data: Any) -> Any:
    if isinstance(data, np.ndarray):
        return data.reshape(-1).view(np.uint8)
    return data


def decoder_for(metadata: Mapping[str, Any], chunk_shape: Sequence[int]) -> ChunkDecoder:
    """Build a decoder for one array's chunks from its metadata dict.

    For a sharded v3 array pass the *inner* codec chain as a metadata-like
    mapping (see :func:`inner_metadata`). Raises :class:`UnsupportedCodec`.
    """
    if int(metadata.get("zarr_format", 3)) == 2:
        return _decoder_v2(metadata, tuple(chunk_shape))
    return _decoder_v3(metadata, tuple(chunk_shape))


def numcodecs_decoder(geom: Any) -> ChunkDecoder | None:
    """Decoder factory registered as ``"numcodecs"``: None when the codecs are not all known."""
    try:
        meta = inner_metadata(geom.metadata) if geom.is_sharded else geom.metadata
        return decoder_for(meta, geom.chunk_shape)
    except UnsupportedCodec:
        return None


def inner_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata a sharded array's inner chunks are encoded with."""
    sharding = _sharding_config(metadata)
    return {**metadata, "codecs": sharding["codecs"]}


def index_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata for decoding a shard index (uint64 offset/length pairs)."""
    sharding = _sharding_config(metadata)
    return {"zarr_format": 3, "data_type": "uint64", "codecs": sharding["index_codecs"]}


def _sharding_config(metadata: Mapping[str, Any]) -> Mapping[str, Any]:
    codecs = list(metadata.get("codecs", ()))
    for c in codecs:
        if _name(c) == "sharding_indexed":
            return dict(c.get("configuration", {}))
    raise UnsupportedCodec("array is not sharded")


def _name(codec: Any) -> str:
    return codec["name"] if isinstance(codec, Mapping) else str(codec)


def _config(codec: Any) -> dict[str, Any]:
    return dict(codec.get("configuration") or {}) if isinstance(codec, Mapping) else {}


def _decoder_v3(metadata: Mapping[str, Any], chunk_shape: tuple[int, ...]) -> ChunkDecoder:
    codecs = list(metadata.get("codecs", ()))
    dtype_spec = metadata.get("data_type")
    if isinstance(dtype_spec, Mapping):
        dtype_spec = dtype_spec.get("name")
    try:
        dtype = np.dtype(str(dtype_spec))
    except TypeError as exc:
        raise UnsupportedCodec(f"data type {dtype_spec!r}") from exc
    if dtype.kind not in "biufc":
        raise UnsupportedCodec(f"data type {dtype_spec!r}")
    a2b = [i for i, c in enumerate(codecs) if _name(c) in ("bytes", "sharding_indexed")]
    if len(a2b) != 1 or _name(codecs[a2b[0]]) != "bytes":
        raise UnsupportedCodec(f"array-to-bytes codec in {[_name(c) for c in codecs]}")
    pos = a2b[0]
    transpose: tuple[int, ...] | None = None
    array_codecs: list[Codec] = []
    for c in codecs[:pos]:
        if _name(c) == "transpose":
            order = tuple(int(i) for i in _config(c)["order"])
            if transpose is not None or array_codecs:
                raise UnsupportedCodec("several array-to-array codecs")
            transpose = order if order != tuple(range(len(order))) else None
        else:
            raise UnsupportedCodec(f"array-to-array codec {_name(c)!r}")
    endian = _config(codecs[pos]).get("endian", "little")
    if dtype.itemsize > 1:
        dtype = dtype.newbyteorder("<" if endian == "little" else ">")
    bytes_codecs = [_bytes_codec_v3(c) for c in codecs[pos + 1 :]]
    return ChunkDecoder(
        chunk_shape=chunk_shape,
        storage_dtype=dtype,
        bytes_codecs=tuple(reversed(bytes_codecs)),
        array_codecs=tuple(array_codecs),
        transpose=transpose,
    )


def _bytes_codec_v3(codec: Any) -> Codec:
    name, cfg = _name(codec), _config(codec)
    if name == "zstd":
        return numcodecs.Zstd(level=int(cfg.get("level", 0)), checksum=bool(cfg.get("checksum", False)))
    if name == "gzip":
        return numcodecs.GZip(level=int(cfg.get("level", 5)))
    if name == "blosc":
        shuffle = cfg.get("shuffle", "noshuffle")
        shuffle_id = _BLOSC_SHUFFLE.get(shuffle, shuffle) if isinstance(shuffle, str) else int(shuffle)
        return numcodecs.Blosc(
            cname=cfg.get("cname", "lz4"),
            clevel=int(cfg.get("clevel", 5)),
            shuffle=int(shuffle_id),
            blocksize=int(cfg.get("blocksize", 0)),
        )
    if name == "crc32c":
        from numcodecs.checksum32 import CRC32C

        return CRC32C()
    if name.startswith("numcodecs."):
        try:
            return numcodecs.get_codec({"id": name.removeprefix("numcodecs."), **cfg})
        except (ValueError, KeyError, TypeError) as exc:
            raise UnsupportedCodec(name) from exc
    raise UnsupportedCodec(f"bytes-to-bytes codec {name!r}")


def _decoder_v2(metadata: Mapping[str, Any], chunk_shape: tuple[int, ...]) -> ChunkDecoder:
    try:
        dtype = np.dtype(metadata["dtype"])
    except TypeError as exc:
        raise UnsupportedCodec(f"dtype {metadata.get('dtype')!r}") from exc
    if dtype.kind not in "biufc":
        raise UnsupportedCodec(f"dtype {metadata.get('dtype')!r}")
    try:
        compressor = metadata.get("compressor")
        bytes_codecs = (numcodecs.get_codec(dict(compressor)),) if compressor else ()
        filters = tuple(numcodecs.get_codec(dict(f)) for f in (metadata.get("filters") or ()))
    except (ValueError, KeyError, TypeError) as exc:
        raise UnsupportedCodec(str(exc)) from exc
    return ChunkDecoder(
        chunk_shape=chunk_shape,
        storage_dtype=dtype,
        bytes_codecs=bytes_codecs,
        array_codecs=tuple(reversed(filters)),
        order=str(metadata.get("order", "C")),
    )
