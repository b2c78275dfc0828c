"""Silero VAD through onnxruntime (no torch in the front process): the model, loaded once per process, and each
session's stateful probability per 32 ms chunk."""

from __future__ import annotations

from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
CHUNK = 512  # samples per Silero step at 16 kHz (32 ms)
_CONTEXT = 64  # Silero's ONNX model wants the last 64 samples of the previous chunk prepended


class SileroModel:
    """The Silero ONNX graph, loaded once per process and shared by every session's SileroVad: the RNN state
    is an input and an output, so one InferenceSession serves concurrent sessions (onnxruntime's run is
    thread-safe), and a connection costs no model load (about 0.75 MB and milliseconds each, otherwise).
    """

    def __init__(self, onnx_path: Path):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(str(onnx_path), sess_options=options,
                                                    providers=["CPUExecutionProvider"])
        self.sr = np.array(SAMPLE_RATE, dtype=np.int64)

    def run(self, x: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out, state = self.session.run(None, {"input": x, "state": state, "sr": self.sr})
        return out, state


class SileroVad:
    """Stateful speech probability per 512-sample chunk (one instance per session: it keeps the RNN state)."""

    def __init__(self, model: SileroModel | Path):
        self.model = model if isinstance(model, SileroModel) else SileroModel(model)
        self.reset()

    def reset(self) -> None:
        self.state = np.zeros((2, 1, 128), dtype=np.float32)
        self.context = np.zeros((1, _CONTEXT), dtype=np.float32)

    def probability(self, chunk: np.ndarray) -> float:
        """chunk: CHUNK float32 samples in [-1, 1]."""
        x = np.concatenate([self.context, chunk.reshape(1, -1)], axis=1)
        out, self.state = self.model.run(x, self.state)
        self.context = x[:, -_CONTEXT:]
        return float(out[0][0])
