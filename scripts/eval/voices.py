"""The evaluation voices: a question as 16 kHz speech, in a natural voice (hibari), a robotic one (espeak-ng,
a Debian program) or the bundled Piper voice."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np


def synthesize(voice: str, text: str) -> np.ndarray:
    """int16 16 kHz speech of `text` in one of the evaluation voices (none of them used to tune anything)."""
    import soxr

    if voice == "hibari":
        from hibari import Hibari

        engine = synthesize.__dict__.setdefault("hibari", Hibari())
        audio = np.asarray(engine(text), dtype=np.float32)
        return (soxr.resample(audio, engine.sample_rate, 16000) * 32767).clip(-32768, 32767).astype(np.int16)
    if voice.startswith("espeak"):
        variant = voice.partition(":")[2] or "en-us"
        if shutil.which("espeak-ng") is None:
            raise SystemExit("the espeak voice needs the espeak-ng program (Debian: apt-get install espeak-ng)")
        wav = subprocess.run(["espeak-ng", "-v", variant, "-s", "160", "--stdout", text], capture_output=True,
                             check=True).stdout
        import io
        import wave

        with wave.open(io.BytesIO(wav)) as w:
            rate, data = w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
        return soxr.resample(data.astype(np.float32), rate, 16000).clip(-32768, 32767).astype(np.int16)
    if voice == "piper":
        from tests.harness.speech import spoken

        return np.asarray(spoken(text))
    raise SystemExit(f"unknown voice {voice!r}: hibari, espeak[:VARIANT] or piper")
